//! Tunnel relays. Zero-copy with splice(2): socket -> pipe -> socket, so the
//! bytes never enter user space (the proxy falls back to a copying relay
//! when a pipe cannot be had). And one whose sandbox-side bytes pass
//! through user space to be looked at, the other way spliced
//! (`crate::late_tls`).

use std::io;
use std::os::fd::OwnedFd;

use rustix::net::Shutdown;
use rustix::pipe::{pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Kernel pipe buffer per direction (the kernel default is 64 KiB).
const PIPE_SIZE: usize = 256 * 1024;

struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    size: usize,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        let (r, w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // A larger pipe moves more per system call; keep the default when
        // the per-user pipe budget says no.
        let size = rustix::pipe::fcntl_setpipe_size(&w, PIPE_SIZE).unwrap_or(64 * 1024);
        Ok(Self { r, w, size })
    }
}

/// Pipes for both directions; `None` when the process is out of
/// descriptors or pipe buffers (the caller then copies instead).
pub(crate) struct Pipes(Pipe, Pipe);

impl Pipes {
    pub(crate) fn new() -> Option<Self> {
        Some(Self(Pipe::new().ok()?, Pipe::new().ok()?))
    }
}

fn flags() -> SpliceFlags {
    SpliceFlags::MOVE | SpliceFlags::NONBLOCK
}

/// What a relay asks before it writes a chunk of `n` bytes: `Ok(k)`
/// writes the first `k <= n` of them, and stops the relay after them when
/// `k < n` (the rest is dropped with the pipe); `Err` stops it at once.
pub(crate) type OnBytes<'a> = &'a (dyn Fn(usize) -> io::Result<usize> + Sync);

/// Relays `src` to `dst` until `src` ends, then half-closes `dst`.
async fn one_way(
    src: &TcpStream,
    dst: &TcpStream,
    pipe: &Pipe,
    on_bytes: OnBytes<'_>,
) -> io::Result<()> {
    loop {
        // The pipe is empty here, so EAGAIN can only come from the socket.
        let n = loop {
            src.readable().await?;
            match src.try_io(Interest::READABLE, || {
                splice(src, None, &pipe.w, None, pipe.size, flags()).map_err(io::Error::from)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            let _ = rustix::net::shutdown(dst, Shutdown::Write);
            return Ok(());
        }
        let granted = on_bytes(n)?.min(n);
        let mut left = granted;
        while left > 0 {
            dst.writable().await?;
            match dst.try_io(Interest::WRITABLE, || {
                splice(&pipe.r, None, dst, None, left, flags()).map_err(io::Error::from)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        if granted < n {
            return Err(io::Error::other("limit reached"));
        }
    }
}

/// Relays both ways until both sides have finished sending, or either
/// fails or a callback stops it.
pub(crate) async fn bidirectional(
    client: &TcpStream,
    upstream: &TcpStream,
    pipes: &Pipes,
    on_up: OnBytes<'_>,
    on_down: OnBytes<'_>,
) -> io::Result<()> {
    tokio::try_join!(
        one_way(client, upstream, &pipes.0, on_up),
        one_way(upstream, client, &pipes.1, on_down),
    )?;
    Ok(())
}

/// What a relay shows each chunk it read before it asks to write it on:
/// `Err` stops the relay without writing the chunk.
pub(crate) type Inspect<'a> = &'a mut (dyn FnMut(&[u8]) -> io::Result<()> + Send);

/// Buffer of the relay through user space.
const INSPECTED_BUF: usize = 256 * 1024;

/// Relays `src` to `dst` through user space, each chunk shown to `inspect`
/// and then granted by `on_bytes` before it is written; half-closes `dst`
/// when `src` ends.
async fn one_way_inspected(
    src: &TcpStream,
    dst: &TcpStream,
    on_bytes: OnBytes<'_>,
    inspect: Inspect<'_>,
) -> io::Result<()> {
    let mut buf = vec![0u8; INSPECTED_BUF];
    loop {
        src.readable().await?;
        let n = match src.try_read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            let _ = rustix::net::shutdown(dst, Shutdown::Write);
            return Ok(());
        }
        inspect(&buf[..n])?;
        let granted = on_bytes(n)?.min(n);
        let mut left = &buf[..granted];
        while !left.is_empty() {
            dst.writable().await?;
            match dst.try_write(left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left = &left[m..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        if granted < n {
            return Err(io::Error::other("limit reached"));
        }
    }
}

/// Relays both ways until both sides have finished sending, or either
/// fails or a callback stops it: the client's bytes through user space and
/// `inspect`, the upstream's spliced through `pipes` when given.
pub(crate) async fn bidirectional_inspected(
    client: &TcpStream,
    upstream: &TcpStream,
    pipes: Option<&Pipes>,
    on_up: OnBytes<'_>,
    on_down: OnBytes<'_>,
    inspect: Inspect<'_>,
) -> io::Result<()> {
    let down = async {
        match pipes {
            Some(pipes) => one_way(upstream, client, &pipes.1, on_down).await,
            None => one_way_inspected(upstream, client, on_down, &mut |_| Ok(())).await,
        }
    };
    tokio::try_join!(one_way_inspected(client, upstream, on_up, inspect), down)?;
    Ok(())
}
