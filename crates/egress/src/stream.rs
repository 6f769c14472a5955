//! Buffered and metered streams.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::limits::{Applicable, LimitHit, Limiter};

/// Initial read buffer per stream; it grows only while a head is read and
/// is shrunk back afterwards.
pub(crate) const READ_CHUNK: usize = 8 * 1024;

/// A stream (TCP unless said otherwise) with a read buffer the parsers
/// work on.
#[derive(Debug)]
pub(crate) struct BufStream<S = TcpStream> {
    pub(crate) s: S,
    buf: Vec<u8>,
    pos: usize,
}

impl<S: AsyncRead + Unpin> BufStream<S> {
    pub(crate) fn new(s: S) -> Self {
        Self {
            s,
            buf: Vec::with_capacity(READ_CHUNK),
            pos: 0,
        }
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            if self.buf.capacity() > 2 * READ_CHUNK {
                self.buf.shrink_to(READ_CHUNK);
            }
        }
    }

    /// Reads more bytes after those buffered; `Ok(0)` at end of stream.
    /// The buffer never grows past `limit` bytes of unconsumed data.
    pub(crate) async fn fill(&mut self, limit: usize) -> io::Result<usize> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let room = limit.saturating_sub(self.buf.len());
        if room == 0 {
            return Err(io::Error::other("buffer limit reached"));
        }
        let want = room.min(READ_CHUNK.max(self.buf.capacity() - self.buf.len()));
        if self.buf.capacity() - self.buf.len() < want {
            self.buf.reserve(want);
        }
        let mut limited = (&mut self.s).take(want as u64);
        limited.read_buf(&mut self.buf).await
    }

    /// Takes the buffered bytes out (for handing a stream over).
    pub(crate) fn take_buffered(&mut self) -> Vec<u8> {
        let v = self.buf.split_off(self.pos);
        self.buf.clear();
        self.pos = 0;
        v
    }
}

/// Byte counts of one attempt, and which limit cut it, if any.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
    hit: AtomicU8,
}

pub(crate) const HIT_RATE: u8 = 1;
pub(crate) const HIT_CAP: u8 = 2;

impl Meter {
    pub(crate) fn record_hit(&self, hit: &LimitHit) {
        let v = match hit {
            LimitHit::Rate { .. } => HIT_RATE,
            LimitHit::Cap { .. } => HIT_CAP,
        };
        self.hit.store(v, Ordering::Relaxed);
    }
    pub(crate) fn hit(&self) -> u8 {
        self.hit.load(Ordering::Relaxed)
    }
}

/// Counts bytes both ways on the client side of a tunnel and enforces the
/// limits: reads are bytes going up, writes bytes coming down.
#[derive(Debug)]
pub struct Metered {
    inner: TcpStream,
    meter: Arc<Meter>,
    limiter: Arc<Limiter>,
    applicable: Applicable,
    /// Bytes granted for a write that was not (wholly) done yet.
    reserved: usize,
}

impl Metered {
    pub(crate) fn new(
        inner: TcpStream,
        meter: Arc<Meter>,
        limiter: Arc<Limiter>,
        applicable: Applicable,
    ) -> Self {
        Self {
            inner,
            meter,
            limiter,
            applicable,
            reserved: 0,
        }
    }

    /// How many of `n` bytes may be delivered (see `Limiter::grant`);
    /// records the hit that then cuts the traffic.
    fn grant(&self, n: usize) -> (usize, bool) {
        let (granted, hit) = self.limiter.grant(&self.applicable, n);
        if let Some(hit) = &hit {
            self.meter.record_hit(hit);
        }
        (granted, hit.is_some())
    }

    fn cut(&self) -> io::Error {
        io::Error::other(if self.meter.hit() == HIT_CAP {
            "byte-cap"
        } else {
            "rate-limit"
        })
    }
}

impl AsyncRead for Metered {
    /// Bytes from the sandbox: those past the cap are dropped, never
    /// handed on; once a limit is hit, the next read fails.
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.meter.hit() != 0 {
            return Poll::Ready(Err(self.cut()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = buf.filled().len() - before;
            if n > 0 {
                let (granted, _) = self.grant(n);
                buf.set_filled(before + granted);
                self.meter.up.fetch_add(granted as u64, Ordering::Relaxed);
                if granted == 0 {
                    return Poll::Ready(Err(self.cut()));
                }
            }
        }
        r
    }
}

impl AsyncWrite for Metered {
    /// Bytes to the sandbox: granted before they are written, so none past
    /// the cap is; once a limit is hit, the next write fails.
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.meter.hit() != 0 {
            return Poll::Ready(Err(self.cut()));
        }
        if self.reserved < buf.len() {
            let (granted, _) = self.grant(buf.len() - self.reserved);
            self.reserved += granted;
            if self.reserved == 0 {
                return Poll::Ready(Err(self.cut()));
            }
        }
        let allowed = self.reserved.min(buf.len());
        let r = Pin::new(&mut self.inner).poll_write(cx, &buf[..allowed]);
        if let Poll::Ready(Ok(n)) = r {
            self.reserved -= n;
            self.meter.down.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        // Granted for a write that did not happen.
        self.limiter.refund(self.reserved);
    }
}

/// The sandbox side of a tunnel as handed to a [`crate::TlsInterceptor`]:
/// reading yields the already-inspected ClientHello bytes first, then the
/// rest of the stream. Both directions are metered and limited.
#[derive(Debug)]
pub struct TunnelStream {
    prefix: Vec<u8>,
    prefix_pos: usize,
    inner: Metered,
}

impl TunnelStream {
    pub(crate) fn new(prefix: Vec<u8>, inner: Metered) -> Self {
        Self {
            prefix,
            prefix_pos: 0,
            inner,
        }
    }
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.prefix_pos < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.prefix_pos);
            let start = self.prefix_pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.prefix_pos += n;
            if self.prefix_pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.prefix_pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
