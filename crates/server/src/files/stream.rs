//! Reply bodies made by blocking code (a file's bytes, a tar stream) on a
//! thread of the sandbox's user, through a small bounded channel: a client
//! that reads slowly slows the producer, one that goes away stops it (its
//! next write fails), and nothing is held beyond a few chunks.

use std::io::{self, Read, Write};

use axum::body::Body;
use bytes::Bytes;
use cordon_session::files::{as_sandbox_user, FilesError, FilesErrorKind};
use tokio::sync::mpsc;

/// Bytes sent to the client at a time.
const CHUNK: usize = 64 << 10;
/// Chunks in flight between the producer and the connection.
const IN_FLIGHT: usize = 4;

type Item = Result<Bytes, io::Error>;

/// A body whose bytes `produce` writes. An error after the first byte
/// ends the body with an error (the client sees a cut reply, never a
/// complete-looking one).
pub fn from_blocking<F>(ids: Option<(u32, u32)>, produce: F) -> Body
where
    F: FnOnce(&mut ChannelWriter) -> Result<(), FilesError> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Item>(IN_FLIGHT);
    let errors = tx.clone();
    tokio::spawn(async move {
        let made = as_sandbox_user(ids, move || {
            let mut out = ChannelWriter {
                tx,
                buf: Vec::with_capacity(CHUNK),
            };
            produce(&mut out)?;
            out.flush().map_err(|e| cut(&e))
        })
        .await;
        if let Err(e) = made {
            let _ = errors.send(Err(io::Error::other(e.message))).await;
        }
    });
    let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Body::from_stream(chunks)
}

/// Copy exactly `size` bytes of `file` (the length the reply announced).
pub fn copy_exactly(
    file: std::fs::File,
    size: u64,
    out: &mut ChannelWriter,
) -> Result<(), FilesError> {
    let copied = io::copy(&mut file.take(size), out).map_err(|e| cut(&e))?;
    if copied < size {
        return Err(FilesError {
            kind: FilesErrorKind::Io,
            message: format!(
                "the file shrank to {copied} bytes while it was read ({size} announced)"
            ),
            fix: Some("read it again".into()),
        });
    }
    Ok(())
}

fn cut(e: &io::Error) -> FilesError {
    FilesError {
        kind: FilesErrorKind::Io,
        message: format!("the reply was cut: {e}"),
        fix: None,
    }
}

/// `Write` into the reply's channel.
#[derive(Debug)]
pub struct ChannelWriter {
    tx: mpsc::Sender<Item>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = CHUNK - self.buf.len();
        let n = room.min(data.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}
