//! Moving the messages: a thread reads the client (this process's stdin),
//! the sandbox supervisor's output sink reads the server's stdout, and a
//! thread writes everything for the client, one line at a time, so that
//! the gateway's own answers and the server's never interleave.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cordon_jail::{OutputSink, Stream};

use crate::gate::Gate;

/// Largest message the server may send (bigger ones are dropped).
const MAX_LINE: usize = 64 << 20;

/// A line for the client, or the end.
type Out = Option<String>;

#[derive(Debug)]
struct Shared {
    gate: Mutex<Gate>,
    client_gone: Mutex<Option<Instant>>,
}

/// The running gateway between a client and one server.
#[derive(Debug)]
pub struct Gateway {
    shared: Arc<Shared>,
    tx: Sender<Out>,
    rx: Option<Receiver<Out>>,
    client_in: Option<File>,
    client_out: Option<File>,
    upstream_in: Option<File>,
    writer: Option<JoinHandle<()>>,
}

impl Gateway {
    /// `client_in`/`client_out`: the MCP client's side; `upstream_in`: the
    /// write end of the server's stdin.
    pub fn new(gate: Gate, client_in: File, client_out: File, upstream_in: File) -> Gateway {
        let (tx, rx) = channel();
        Gateway {
            shared: Arc::new(Shared {
                gate: Mutex::new(gate),
                client_gone: Mutex::new(None),
            }),
            tx,
            rx: Some(rx),
            client_in: Some(client_in),
            client_out: Some(client_out),
            upstream_in: Some(upstream_in),
            writer: None,
        }
    }

    /// The sink for the sandbox's output: the server's stdout is read as
    /// MCP messages, its stderr passed to this process's stderr.
    pub fn sink(&self) -> UpstreamSink {
        UpstreamSink {
            shared: Arc::clone(&self.shared),
            tx: self.tx.clone(),
            buf: Vec::new(),
            overlong: false,
        }
    }

    /// Start the client's reader and writer threads (once the sandbox
    /// exists: the sandbox is cloned from a process without other busy
    /// threads).
    pub fn start(&mut self) -> std::io::Result<()> {
        let (Some(rx), Some(out), Some(input), Some(upstream)) = (
            self.rx.take(),
            self.client_out.take(),
            self.client_in.take(),
            self.upstream_in.take(),
        ) else {
            return Ok(());
        };
        self.writer = Some(
            std::thread::Builder::new()
                .name("mcp-client-out".into())
                .spawn(move || write_client(out, rx))?,
        );
        let shared = Arc::clone(&self.shared);
        let tx = self.tx.clone();
        std::thread::Builder::new()
            .name("mcp-client-in".into())
            .spawn(move || read_client(input, upstream, &shared, &tx))?;
        Ok(())
    }

    /// How long ago the client closed its side, if it did.
    pub fn client_gone_for(&self) -> Option<Duration> {
        self.shared
            .client_gone
            .lock()
            .ok()
            .and_then(|g| g.map(|at| at.elapsed()))
    }

    /// The audit records collected so far.
    pub fn take_events(&self) -> Vec<(std::time::SystemTime, cordon_audit::Event)> {
        self.shared
            .gate
            .lock()
            .map(|mut g| g.take_events())
            .unwrap_or_default()
    }

    /// The server is gone: write what is queued for the client and stop.
    pub fn finish(mut self) {
        let _ = self.tx.send(None);
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

fn write_client(mut out: File, rx: Receiver<Out>) {
    while let Ok(Some(line)) = rx.recv() {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        if out.write_all(&bytes).is_err() {
            // The client is gone; the reader sees its end too.
            return;
        }
    }
}

fn read_client(input: File, upstream: File, shared: &Arc<Shared>, tx: &Sender<Out>) {
    let mut upstream = Some(upstream);
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = trim_line(&line);
        if text.is_empty() {
            continue;
        }
        let routed = match shared.gate.lock() {
            Ok(mut g) => g.from_client(text),
            Err(_) => break,
        };
        for l in routed.to_client {
            let _ = tx.send(Some(l));
        }
        for (id, timeout) in routed.asked {
            expire_later(Arc::clone(shared), tx.clone(), id, timeout);
        }
        if let (Some(l), Some(up)) = (routed.to_upstream, upstream.as_mut()) {
            let mut bytes = l.into_bytes();
            bytes.push(b'\n');
            if up.write_all(&bytes).is_err() {
                // The server closed its stdin; keep answering refusals.
                upstream = None;
            }
        }
    }
    // End of the client: the server's stdin closes (MCP's stdio shutdown),
    // and the supervisor ends the sandbox if the server lingers.
    drop(upstream);
    if let Ok(mut g) = shared.client_gone.lock() {
        *g = Some(Instant::now());
    }
}

/// A question to the client that is still unanswered after `timeout` is
/// refused (one short-lived thread per question: they are rare, and the
/// gateway has no timer of its own).
fn expire_later(shared: Arc<Shared>, tx: Sender<Out>, id: String, timeout: Duration) {
    let spawned = std::thread::Builder::new()
        .name("mcp-ask-timeout".into())
        .spawn(move || {
            std::thread::sleep(timeout);
            let lines = match shared.gate.lock() {
                Ok(mut g) => g.expire_ask(&id),
                Err(_) => Vec::new(),
            };
            for l in lines {
                let _ = tx.send(Some(l));
            }
        });
    if let Err(e) = spawned {
        eprintln!("cordon: mcp: cannot start the timer of a question to the client: {e}");
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut l = line;
    while let [rest @ .., b'\n' | b'\r'] = l {
        l = rest;
    }
    l
}

/// The output sink of the sandbox that runs the server.
#[derive(Debug)]
pub struct UpstreamSink {
    shared: Arc<Shared>,
    tx: Sender<Out>,
    buf: Vec<u8>,
    /// Inside a line over [`MAX_LINE`]: dropped up to its end.
    overlong: bool,
}

impl OutputSink for UpstreamSink {
    fn write(&mut self, stream: Stream, data: &[u8]) {
        if stream == Stream::Stderr {
            cordon_jail::StdioSink.write(Stream::Stderr, data);
            return;
        }
        let mut rest = data;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(pos);
            rest = &tail[1..];
            if self.overlong {
                self.overlong = false;
                self.buf.clear();
                continue;
            }
            self.buf.extend_from_slice(head);
            let line = std::mem::take(&mut self.buf);
            let text = trim_line(&line);
            if text.is_empty() {
                continue;
            }
            let out = match self.shared.gate.lock() {
                Ok(mut g) => g.from_upstream(text),
                Err(_) => None,
            };
            if let Some(l) = out {
                let _ = self.tx.send(Some(l));
            }
        }
        if !self.overlong {
            self.buf.extend_from_slice(rest);
            if self.buf.len() > MAX_LINE {
                eprintln!("cordon: mcp: dropped a message from the server over {MAX_LINE} bytes");
                self.buf = Vec::new();
                self.overlong = true;
            }
        }
    }
}
