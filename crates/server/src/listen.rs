//! Accepting connections on the unix socket and on TCP, and serving each
//! with hyper's HTTP/1 connection: a bound on connections (the next one is
//! answered 429 and closed), a deadline for a request's headers (hyper's
//! `header_read_timeout`: a client that trickles its headers is cut off),
//! and an idle deadline (a connection with no request in flight and no
//! bytes moving is closed), so slow clients cannot pin the server.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

use crate::auth::Transport;
use crate::error::ApiError;
use crate::state::Limits;

/// When a connection last moved bytes, and how many of its requests are
/// being handled.
#[derive(Debug)]
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed();
        now.saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(a: &Arc<Activity>) -> InFlight {
        a.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A stream that notes every byte read or written.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
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

/// What every connection task shares.
#[derive(Debug, Clone)]
pub struct Acceptor {
    app: Router,
    limits: Limits,
    connections: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
}

impl Acceptor {
    pub fn new(app: Router, limits: Limits, shutdown: watch::Receiver<bool>) -> Acceptor {
        let connections = Arc::new(Semaphore::new(limits.max_connections));
        Acceptor {
            app,
            limits,
            connections,
            shutdown,
        }
    }

    /// Accept on the unix socket until shutdown. Only the server's own
    /// user (and root) may talk to it: the socket is 0600, and the peer's
    /// uid is checked as well.
    pub async fn unix(self, listener: UnixListener) {
        let me = rustix::process::getuid().as_raw();
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((stream, _)) => {
                        let uid = stream.peer_cred().map(|c| c.uid()).ok();
                        if uid == Some(me) || uid == Some(0) {
                            self.spawn(stream, Transport::Unix);
                        } else {
                            tracing::warn!("refused a unix-socket connection from uid {uid:?}");
                        }
                    }
                    Err(e) => Self::accept_failed(e).await,
                },
                _ = shutdown.changed() => break,
            }
        }
    }

    /// Accept on TCP until shutdown (every request needs a token).
    pub async fn tcp(self, listener: TcpListener) {
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        self.spawn(stream, Transport::Tcp);
                    }
                    Err(e) => Self::accept_failed(e).await,
                },
                _ = shutdown.changed() => break,
            }
        }
    }

    /// Out of descriptors or similar: say so and breathe, do not spin.
    async fn accept_failed(e: io::Error) {
        tracing::warn!("accept: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    /// Wait (at most `grace`) for every connection to end.
    pub async fn drained(&self, grace: Duration) {
        let all = u32::try_from(self.limits.max_connections).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(grace, self.connections.acquire_many(all)).await;
    }

    fn spawn<S>(&self, stream: S, transport: Transport)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            this.serve(stream, transport).await;
            drop(permit);
        });
    }

    async fn serve<S>(self, stream: S, transport: Transport)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Tracked {
            inner: stream,
            activity: activity.clone(),
        });
        let app = self.app.clone();
        let seen = activity.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(transport);
            let in_flight = InFlight::begin(&seen);
            let app = app.clone();
            async move {
                let resp = app.oneshot(req.map(Body::new)).await;
                drop(in_flight);
                resp
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout)
            .max_buf_size(64 * 1024)
            .serve_connection(io, service);
        tokio::pin!(conn);
        let mut shutdown = self.shutdown.clone();
        let mut closing = *shutdown.borrow();
        if closing {
            conn.as_mut().graceful_shutdown();
        }
        let tick =
            (self.limits.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection: {e}");
                    }
                    break;
                }
                _ = tokio::time::sleep(tick) => {
                    let idle = activity.in_flight.load(Ordering::Relaxed) == 0
                        && activity.idle_for() >= self.limits.idle_timeout;
                    if idle {
                        // Nothing in flight and nothing moving: close it
                        // outright (a graceful shutdown would wait for a
                        // request that never comes).
                        break;
                    }
                }
                _ = shutdown.changed(), if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Answer a connection beyond the bound with 429 and close it.
async fn refuse<S: AsyncWrite + Unpin>(mut stream: S) {
    let body = serde_json::to_string(
        &ApiError::at_capacity("the server has as many connections open as it may").body(),
    )
    .unwrap_or_default();
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: {}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        crate::error::RETRY_AFTER_SECS,
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}
