//! The proxy: accept loop, protocol detection, HTTP forwarding, CONNECT and
//! SOCKS5 tunnels.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::timeout;

use crate::addr::{classify_on_network, AddrClass, Translated};
use crate::config::{Compiled, EgressConfig, Unlisted};
use crate::error::EgressError;
use crate::event::{redact_url, Decision, EgressEvent, EventSink, NullSink, Protocol};
use crate::http1::{
    parse_request_head, parse_response_head, BodyKind, ChunkedScanner, RequestError, RequestHead,
    ResponseHead, Target, MAX_HEAD,
};
use crate::late_tls::LateHelloWatch;
use crate::limits::{Applicable, LimitHit, Limiter};
use crate::live::{Cut, LiveGrants, CONNECTION};
use crate::nat64::{self, Nat64Prefix};
use crate::rules::DestHost;
use crate::sni::{parse_client_hello, HelloError, MAX_CLIENT_HELLO};
use crate::stream::{BufStream, Meter, Metered, TunnelStream, HIT_CAP, HIT_RATE};

/// Waiting for a client's first or next request head.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Reading a head once it has started, a SOCKS5 handshake, a ClientHello.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Waiting for an upstream response head.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);
/// Tunnel buffers when splice(2) is not available: sandbox -> destination
/// and destination -> sandbox.
const TUNNEL_UP_BUF: usize = 64 * 1024;
const TUNNEL_DOWN_BUF: usize = 256 * 1024;
/// How long shutdown waits for connections to notice before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A boxed future, for the dyn-compatible hook traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Decides about hosts that no rule covers when `on_unlisted = ask`.
pub trait Approver: Send + Sync {
    /// `true` allows this one attempt. Called before the name is resolved.
    fn decide<'a>(&'a self, sandbox_id: &'a str, host: &'a str, port: u16) -> BoxFuture<'a, bool>;

    /// The answer with the rule that gave it (in the event) and, for a
    /// refusal, what the sandbox is told. `None`: refused with the proxy's
    /// own `unlisted` message. By default [`Approver::decide`]'s answer.
    fn ruling<'a>(
        &'a self,
        sandbox_id: &'a str,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, Option<Ruling>> {
        Box::pin(async move {
            self.decide(sandbox_id, host, port)
                .await
                .then(|| Ruling::Allow {
                    rule: "ask:approved".into(),
                })
        })
    }

    /// A second opinion on a host a rule or a live grant already allows
    /// (`rule` names it): `Some(Ruling::Deny)` refuses it anyway, e.g. an
    /// operator's policy that forbids it (an explicit deny wins over an
    /// allow list). `None`, the default, keeps the rule's answer.
    fn review<'a>(
        &'a self,
        _sandbox_id: &'a str,
        _host: &'a str,
        _port: u16,
        _rule: &'a str,
    ) -> BoxFuture<'a, Option<Ruling>> {
        Box::pin(async { None })
    }
}

/// An [`Approver`]'s answer, with the rule that gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ruling {
    Allow { rule: String },
    Deny { rule: String, message: String },
}

/// The approver used when none is set: refuses. The 403 the sandbox gets
/// says how to allow the host (`--allow-net HOST` or `network.allow`).
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyApprover;

impl Approver for DenyApprover {
    fn decide<'a>(&'a self, _: &'a str, _: &'a str, _: u16) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }
}

/// Takes over TLS tunnels to chosen hosts after the SNI check, e.g. to
/// terminate TLS with a per-run CA and inject bound secrets. Every other
/// tunnel stays an opaque splice. A tunnel to a host it claims must start
/// with a TLS ClientHello whose SNI names the host, on every port.
pub trait TlsInterceptor: Send + Sync {
    /// Whether tunnels to `host:port` go to [`TlsInterceptor::intercept`].
    fn intercepts(&self, host: &str, port: u16) -> bool;
    /// Runs the tunnel to its end. The future's bytes are metered (limits
    /// and byte counts apply) and one event is written when it finishes.
    fn intercept(&self, tunnel: InterceptedTunnel) -> BoxFuture<'static, io::Result<()>>;
    /// A watcher for one plain-HTTP request to `host:port` (cleartext, not
    /// intercepted): it sees every byte sent upstream (head and body) but
    /// cannot change them. `None` (the default): nothing to watch.
    fn watch_plain_http(&self, _host: &str, _port: u16) -> Option<Box<dyn PlainHttpWatch>> {
        None
    }
}

/// Sees the bytes of one plain-HTTP request on their way upstream.
pub trait PlainHttpWatch: Send {
    /// The next bytes sent upstream, in order.
    fn scan(&mut self, bytes: &[u8]);
    /// What to add to the request's event, once it is over.
    fn finish(&mut self) -> Option<SecretNote>;
}

/// What a watcher adds to an event: text appended to the rule and the
/// names for [`EgressEvent::secret_leak`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretNote {
    /// Appended to the event's rule after a space, e.g. `(secret A ...)`.
    pub note: String,
    /// Secret names whose placeholders went where they must not.
    pub leaked: Vec<String>,
}

impl SecretNote {
    /// Adds the note to an event.
    pub fn apply(&self, ev: &mut EgressEvent) {
        if !self.note.is_empty() {
            ev.rule = format!("{} {}", ev.rule, self.note);
        }
        if !self.leaked.is_empty() {
            ev.secret_leak = Some(self.leaked.join(","));
        }
    }
}

/// What an interceptor gets: the sandbox side (the ClientHello is replayed
/// first), a TCP connection to the pinned, checked upstream address, the
/// host the SNI and the rules agreed on, the rule that allowed it, and a
/// writer for events of its own (one per request inside the tunnel).
pub struct InterceptedTunnel {
    pub sandbox_id: String,
    pub host: String,
    pub port: u16,
    /// The rule that allowed the tunnel (`allow:HOSTRULE`, `ask:approved`).
    pub rule: String,
    pub client: TunnelStream,
    pub upstream: TcpStream,
    pub events: EventWriter,
    /// Asks the rate limits about each request after the first (the
    /// tunnel's admission counted the first).
    pub gate: RequestGate,
}

/// The rate limits and byte cap, for requests an interceptor parses inside
/// a tunnel: every request counts, as a plain one does.
#[derive(Clone)]
pub struct RequestGate {
    shared: Arc<Shared>,
}

impl fmt::Debug for RequestGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestGate").finish_non_exhaustive()
    }
}

/// Why a request was refused by a limit: the event's rule, the text for
/// the sandbox, and when to retry (for `Retry-After`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRefusal {
    pub rule: String,
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl RequestGate {
    /// Takes a request token for `host:port`, or says why not (answer 429).
    pub fn admit(&self, host: &str, port: u16) -> Result<(), LimitRefusal> {
        match self.shared.limiter.admit(host, port) {
            Ok(_) => Ok(()),
            Err(hit) => {
                let r = self.shared.limit_refusal(host, port, hit);
                Err(LimitRefusal {
                    rule: r.rule,
                    message: r.message,
                    retry_after: r.retry_after,
                })
            }
        }
    }
}

impl fmt::Debug for InterceptedTunnel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterceptedTunnel")
            .field("sandbox_id", &self.sandbox_id)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

/// Writes events to the proxy's sink and counts them in its totals.
#[derive(Clone)]
pub struct EventWriter {
    shared: Arc<Shared>,
}

impl fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventWriter").finish_non_exhaustive()
    }
}

impl EventWriter {
    /// Records one event (counted as allowed or denied; bytes are counted
    /// by the tunnel's own event, not again here).
    pub fn record(&self, ev: EgressEvent) {
        let st = &self.shared.stats;
        st.events.fetch_add(1, Ordering::Relaxed);
        match ev.decision {
            Decision::Allow => st.allowed.fetch_add(1, Ordering::Relaxed),
            Decision::Deny => st.denied.fetch_add(1, Ordering::Relaxed),
        };
        self.shared.sink.record(ev);
    }
}

/// Totals since the proxy started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EgressSummary {
    /// Client connections accepted.
    pub connections: u64,
    /// Events written (one per attempt).
    pub events: u64,
    pub allowed: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

#[derive(Debug, Default)]
struct Stats {
    connections: AtomicU64,
    events: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl Stats {
    fn summary(&self) -> EgressSummary {
        EgressSummary {
            connections: self.connections.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
        }
    }
}

struct Shared {
    cfg: Compiled,
    sink: Arc<dyn EventSink>,
    approver: Arc<dyn Approver>,
    interceptor: Option<Arc<dyn TlsInterceptor>>,
    limiter: Arc<Limiter>,
    stats: Stats,
    /// Relay tunnels with splice(2) (off: copy through user space).
    splice: bool,
    /// Hosts granted while it runs (crate::live).
    live: Option<LiveGrants>,
    /// The host network's own NAT64 prefixes, once learned (`crate::nat64`).
    nat64: tokio::sync::Mutex<Nat64State>,
}

/// A configured proxy, ready to serve a listener.
pub struct Egress {
    shared: Arc<Shared>,
    threads: usize,
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Egress")
            .field("config", &self.shared.cfg.cfg)
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// Validates the configuration. Events go nowhere until
    /// [`Egress::with_sink`] is called.
    pub fn new(config: EgressConfig) -> Result<Self, EgressError> {
        let cfg = config.compile()?;
        let limiter = Arc::new(Limiter::new(&cfg.cfg.rate_limits, cfg.cfg.max_bytes));
        Ok(Self {
            shared: Arc::new(Shared {
                cfg,
                sink: Arc::new(NullSink),
                approver: Arc::new(DenyApprover),
                interceptor: None,
                limiter,
                stats: Stats::default(),
                splice: std::env::var_os("CORDON_EGRESS_NO_SPLICE").is_none(),
                live: None,
                nat64: tokio::sync::Mutex::new(Nat64State::Unknown),
            }),
            threads: 1,
        })
    }

    fn edit(mut self, f: impl FnOnce(&mut Shared)) -> Self {
        if let Some(s) = Arc::get_mut(&mut self.shared) {
            f(s);
        }
        self
    }

    /// Where events go.
    pub fn with_sink(self, sink: Arc<dyn EventSink>) -> Self {
        self.edit(|s| s.sink = sink)
    }

    /// Who decides about unlisted hosts when `on_unlisted = ask`.
    pub fn with_approver(self, approver: Arc<dyn Approver>) -> Self {
        self.edit(|s| s.approver = approver)
    }

    /// Runtime threads for [`Egress::spawn`]: 1 (the default) runs a
    /// single-threaded runtime, more a multi-threaded one.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Consults `grants` for every attempt the allow rules do not cover
    /// (deny rules still win); revoking a grant cuts the connections it
    /// admitted. See [`LiveGrants`].
    pub fn with_live_grants(self, grants: LiveGrants) -> Self {
        self.edit(|s| s.live = Some(grants))
    }

    /// Hands TLS tunnels to chosen hosts to an interceptor.
    pub fn with_tls_interceptor(self, interceptor: Arc<dyn TlsInterceptor>) -> Self {
        self.edit(|s| s.interceptor = Some(interceptor))
    }

    /// Runs the proxy on its own thread with a single-threaded tokio
    /// runtime. `listener` is already bound (e.g. inside the sandbox's
    /// network namespace); it is set non-blocking here.
    pub fn spawn(self, listener: std::net::TcpListener) -> Result<ProxyHandle, EgressError> {
        listener
            .set_nonblocking(true)
            .map_err(EgressError::Listener)?;
        let local_addr = listener.local_addr().map_err(EgressError::Listener)?;
        let mut builder = if self.threads <= 1 {
            tokio::runtime::Builder::new_current_thread()
        } else {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(self.threads).thread_name("cordon-egress");
            b
        };
        let rt = builder
            .enable_io()
            .enable_time()
            .build()
            .map_err(EgressError::Runtime)?;
        let listener = {
            let _guard = rt.enter();
            TcpListener::from_std(listener).map_err(EgressError::Listener)?
        };
        let (tx, rx) = watch::channel(false);
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name("cordon-egress".into())
            .spawn(move || rt.block_on(run(self.shared, listener, rx)))
            .map_err(EgressError::Runtime)?;
        Ok(ProxyHandle {
            shutdown: tx,
            thread: Some(thread),
            shared,
            local_addr,
        })
    }

    /// Serves `listener` on the caller's runtime until `shutdown` completes,
    /// then closes every connection (live tunnels too) and returns totals.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> EgressSummary {
        let (tx, rx) = watch::channel(false);
        let server = run(self.shared, listener, rx);
        tokio::pin!(server);
        tokio::select! {
            s = &mut server => s,
            () = shutdown => {
                let _ = tx.send(true);
                server.await
            }
        }
    }
}

/// A proxy running on its own thread.
pub struct ProxyHandle {
    shutdown: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<EgressSummary>>,
    shared: Arc<Shared>,
    local_addr: SocketAddr,
}

impl fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyHandle")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl ProxyHandle {
    /// The address the proxy listens on (as seen in its namespace).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Totals so far, while it runs.
    pub fn summary(&self) -> EgressSummary {
        self.shared.stats.summary()
    }

    /// Stops accepting, closes every connection (live tunnels too; each
    /// still gets its event) and returns the totals.
    pub fn shutdown(mut self) -> EgressSummary {
        self.stop()
    }

    fn stop(&mut self) -> EgressSummary {
        let _ = self.shutdown.send(true);
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| self.shared.stats.summary()),
            None => self.shared.stats.summary(),
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}

async fn run(
    shared: Arc<Shared>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) -> EgressSummary {
    let mut tasks = JoinSet::new();
    let stop_rx = shutdown.clone();
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    shared.stats.connections.fetch_add(1, Ordering::Relaxed);
                    let shared = shared.clone();
                    let mut stop = stop_rx.clone();
                    let cut = Arc::new(Cut::default());
                    tasks.spawn(CONNECTION.scope(cut.clone(), async move {
                        tokio::select! {
                            () = handle_connection(shared, stream) => {}
                            () = stopped(&mut stop) => {}
                            // A grant that admitted it was revoked.
                            () = cut.wait() => {}
                        }
                    }));
                }
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "egress proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drop(listener);
    let _ = timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    shared.stats.summary()
}

/// Completes once shutdown is signalled (or the sender is gone).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, so callers stay `Send`.
    let _ = rx.wait_for(|v| *v).await.is_ok();
}

/// One attempt. Writes exactly one event when dropped, whatever path ended
/// it (answer, error, shutdown).
struct Attempt {
    shared: Arc<Shared>,
    ev: EgressEvent,
    start: Instant,
    meter: Arc<Meter>,
}

impl Attempt {
    fn new(shared: &Arc<Shared>, protocol: Protocol, method: &str) -> Self {
        Self {
            shared: shared.clone(),
            ev: EgressEvent {
                time: SystemTime::now(),
                sandbox_id: shared.cfg.cfg.sandbox_id.clone(),
                protocol,
                method: method.to_string(),
                host: String::new(),
                port: 0,
                path: None,
                bytes_up: 0,
                bytes_down: 0,
                duration: Duration::ZERO,
                decision: Decision::Deny,
                rule: "incomplete".into(),
                status: None,
                secret_leak: None,
                refusal: None,
            },
            start: Instant::now(),
            meter: Arc::new(Meter::default()),
        }
    }

    fn target(&mut self, host: &str, port: u16) {
        self.ev.host = host.to_string();
        self.ev.port = port;
    }

    fn deny(&mut self, rule: impl Into<String>) {
        self.ev.decision = Decision::Deny;
        self.ev.rule = rule.into();
    }

    fn allow(&mut self, rule: impl Into<String>) {
        self.ev.decision = Decision::Allow;
        self.ev.rule = rule.into();
    }

    /// The allowed attempt failed on the host side (`r.is_failure()`): it
    /// stays allowed, its rule says how it failed, and the proxy's answer
    /// is kept for the caller to say again.
    fn failed(&mut self, r: &Refusal) {
        self.ev.decision = Decision::Allow;
        self.ev.rule = format!("{} ({})", self.ev.rule, r.rule);
        self.answered(r);
    }

    /// The attempt is refused: `r`'s rule and status, and its message is
    /// what the sandbox is told next.
    fn refused(&mut self, r: &Refusal) {
        self.deny(r.rule.clone());
        self.answered(r);
    }

    /// The answer about to be given for `r`, told to the sink first: its
    /// HTTP status (SOCKS has none of its own; its reply code is `r`'s
    /// `socks_reply`) and its message.
    fn answered(&mut self, r: &Refusal) {
        self.ev.status = (self.ev.protocol != Protocol::Socks5).then_some(r.status);
        self.ev.refusal = Some(r.message.clone());
        self.shared.sink.refusing(&self.ev);
    }

    fn up(&self, n: usize) {
        self.meter.up.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn down(&self, n: usize) {
        self.meter.down.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        let mut ev = std::mem::replace(
            &mut self.ev,
            EgressEvent {
                time: SystemTime::UNIX_EPOCH,
                sandbox_id: String::new(),
                protocol: Protocol::Http,
                method: String::new(),
                host: String::new(),
                port: 0,
                path: None,
                bytes_up: 0,
                bytes_down: 0,
                duration: Duration::ZERO,
                decision: Decision::Deny,
                rule: String::new(),
                status: None,
                secret_leak: None,
                refusal: None,
            },
        );
        ev.duration = self.start.elapsed();
        ev.bytes_up = self.meter.up.load(Ordering::Relaxed);
        ev.bytes_down = self.meter.down.load(Ordering::Relaxed);
        match self.meter.hit() {
            HIT_RATE => {
                ev.decision = Decision::Deny;
                ev.rule = "rate-limit".into();
            }
            HIT_CAP => {
                ev.decision = Decision::Deny;
                ev.rule = "byte-cap".into();
            }
            _ => {}
        }
        let st = &self.shared.stats;
        st.events.fetch_add(1, Ordering::Relaxed);
        match ev.decision {
            Decision::Allow => st.allowed.fetch_add(1, Ordering::Relaxed),
            Decision::Deny => st.denied.fetch_add(1, Ordering::Relaxed),
        };
        st.bytes_up.fetch_add(ev.bytes_up, Ordering::Relaxed);
        st.bytes_down.fetch_add(ev.bytes_down, Ordering::Relaxed);
        tracing::debug!(
            protocol = ?ev.protocol,
            host = %ev.host,
            port = ev.port,
            decision = ?ev.decision,
            rule = %ev.rule,
            "egress"
        );
        self.shared.sink.record(ev);
    }
}

/// A refusal: the rule for the event, the status / SOCKS reply, and the
/// text for the sandbox.
struct Refusal {
    rule: String,
    status: u16,
    socks_reply: u8,
    message: String,
    retry_after: Option<Duration>,
}

impl Refusal {
    /// The rules allowed the attempt and the host side could not complete
    /// it (the name did not resolve, nothing answered): not a denial.
    fn is_failure(&self) -> bool {
        matches!(self.rule.as_str(), "connect-failed" | "resolve-failed")
    }
}

const SOCKS_GENERAL_FAILURE: u8 = 1;
const SOCKS_NOT_ALLOWED: u8 = 2;
const SOCKS_HOST_UNREACHABLE: u8 = 4;
const SOCKS_CONN_REFUSED: u8 = 5;
const SOCKS_CMD_UNSUPPORTED: u8 = 7;
const SOCKS_ATYP_UNSUPPORTED: u8 = 8;

fn fmt_dest(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Shared {
    /// Matches the rules (before any name is resolved). `Ok(rule)` to allow.
    async fn decide(&self, host: &str, port: u16) -> Result<String, Refusal> {
        let cfg = &self.cfg.cfg;
        let dest = fmt_dest(host, port);
        if let Some(r) = cfg.deny.iter().find(|r| r.matches(host, port)) {
            return Err(Refusal {
                rule: format!("deny:{r}"),
                status: 403,
                socks_reply: SOCKS_NOT_ALLOWED,
                message: format!(
                    "cordon: egress to {dest} denied by the rule deny:{r}. Deny rules win over allow rules; to allow it, an operator removes that rule from network.deny in the profile."
                ),
                retry_after: None,
            });
        }
        let listed = cfg
            .allow
            .iter()
            .find(|r| r.matches(host, port))
            .map(|r| format!("allow:{r}"))
            .or_else(|| {
                let live = self.live.as_ref()?;
                live.admit(host, port).map(|id| format!("grant:{id}"))
            });
        if let Some(rule) = listed {
            return match self
                .approver
                .review(&cfg.sandbox_id, host, port, &rule)
                .await
            {
                Some(Ruling::Deny { rule, message }) => Err(Refusal {
                    rule,
                    status: 403,
                    socks_reply: SOCKS_NOT_ALLOWED,
                    message,
                    retry_after: None,
                }),
                _ => Ok(rule),
            };
        }
        if cfg.on_unlisted == Unlisted::Ask {
            match self.approver.ruling(&cfg.sandbox_id, host, port).await {
                Some(Ruling::Allow { rule }) => return Ok(rule),
                Some(Ruling::Deny { rule, message }) => {
                    return Err(Refusal {
                        rule,
                        status: 403,
                        socks_reply: SOCKS_NOT_ALLOWED,
                        message,
                        retry_after: None,
                    })
                }
                None => {}
            }
        }
        Err(Refusal {
            rule: "unlisted".into(),
            status: 403,
            socks_reply: SOCKS_NOT_ALLOWED,
            message: format!(
                "cordon: egress to {dest} denied (not in the allowlist). To allow it: --allow-net {host} or network.allow in the profile."
            ),
            retry_after: None,
        })
    }

    fn limit_refusal(&self, host: &str, port: u16, hit: LimitHit) -> Refusal {
        let dest = fmt_dest(host, port);
        match hit {
            LimitHit::Rate { rule, retry_after } => Refusal {
                rule: "rate-limit".into(),
                status: 429,
                socks_reply: SOCKS_NOT_ALLOWED,
                message: format!(
                    "cordon: egress to {dest} refused: the rate limit for {rule} is used up; it refills in {:.1}s. An operator can raise it in [[network.rate_limit]].",
                    retry_after.as_secs_f64()
                ),
                retry_after: Some(retry_after),
            },
            LimitHit::Cap { max } => Refusal {
                rule: "byte-cap".into(),
                status: 429,
                socks_reply: SOCKS_NOT_ALLOWED,
                message: format!(
                    "cordon: egress to {dest} refused: this sandbox's total network byte cap ({max} bytes) is used up. An operator can raise network.max_bytes."
                ),
                retry_after: None,
            },
        }
    }

    /// Resolves on the host side (or through the overrides) and refuses
    /// when any address is not public, unless private addresses are allowed.
    async fn resolve(
        &self,
        host: &str,
        is_ip: bool,
        port: u16,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        // Operator-declared addresses are trusted, loopback included.
        if let Some(addrs) = self.cfg.override_for(host, port) {
            return Ok(addrs);
        }
        let dest = fmt_dest(host, port);
        let addrs: Vec<SocketAddr> = if is_ip {
            match host.parse::<IpAddr>() {
                Ok(ip) => vec![SocketAddr::new(ip, port)],
                Err(_) => Vec::new(),
            }
        } else {
            match timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await {
                Ok(Ok(it)) => it.collect(),
                _ => Vec::new(),
            }
        };
        if addrs.is_empty() {
            return Err(Refusal {
                rule: "resolve-failed".into(),
                status: 502,
                socks_reply: SOCKS_HOST_UNREACHABLE,
                message: format!(
                    "cordon: egress to {dest} is allowed, but {host} could not be resolved on \
                     the host (its DNS gave no address)."
                ),
                retry_after: None,
            });
        }
        if !self.cfg.cfg.allow_private {
            self.guard_addresses(&addrs, &dest, is_ip).await?;
        }
        Ok(addrs)
    }

    /// Refuses when any of `addrs` is not public: by the address itself,
    /// or, for an IPv6 address that looks public, by the IPv4 address it
    /// carries under one of the host network's NAT64 prefixes.
    async fn guard_addresses(
        &self,
        addrs: &[SocketAddr],
        dest: &str,
        is_ip: bool,
    ) -> Result<(), Refusal> {
        let mut refused = None;
        for a in addrs {
            // The prefixes are learned only when they could matter: for an
            // IPv6 address that is public by itself.
            let nat64 = match a.ip() {
                IpAddr::V6(_) if crate::addr::classify(a.ip()).is_none() => {
                    self.nat64_prefixes().await
                }
                _ => Vec::new(),
            };
            if let Some(found) = classify_on_network(a.ip(), &nat64) {
                refused = Some((a.ip(), found));
                break;
            }
        }
        let Some((ip, (class, translated))) = refused else {
            return Ok(());
        };
        let shown = if is_ip {
            String::new()
        } else {
            format!(" (it resolves to {ip})")
        };
        let (rule, what) = match class {
            AddrClass::Metadata => (
                format!("metadata-address {ip}"),
                "a cloud metadata address".to_string(),
            ),
            AddrClass::NotPublic(why) => {
                (format!("private-address {ip}"), format!("a {why} address"))
            }
        };
        let through = match translated {
            Some(Translated { prefix, carried }) => format!(
                " ({carried}, through this network's NAT64 prefix {prefix}, learned from {})",
                nat64::DISCOVERY_NAME
            ),
            None => String::new(),
        };
        Err(Refusal {
            rule,
            status: 403,
            socks_reply: SOCKS_NOT_ALLOWED,
            message: format!(
                "cordon: egress to {dest} denied{shown}: {ip} is {what}{through}, which sandboxes may not reach. To allow it: network.allow_private = true in the profile."
            ),
            retry_after: None,
        })
    }

    /// The host network's NAT64 prefixes (RFC 7050): from the AAAA answers
    /// for `ipv4only.arpa`, or from an operator's override of that name
    /// (`--resolve ipv4only.arpa=PREFIX::192.0.0.170` declares a prefix
    /// where the network has a translator but no DNS64 to announce it).
    /// Learned once per proxy. A lookup that fails gives none and is tried
    /// again after [`NAT64_RETRY`]: a DNS64 resolver answers this name
    /// (RFC 8880), so a failure most likely means there is none, and a
    /// passing failure must not hide the prefix for the proxy's life.
    async fn nat64_prefixes(&self) -> Vec<Nat64Prefix> {
        let mut state = self.nat64.lock().await;
        match &*state {
            Nat64State::Known(prefixes) => return prefixes.clone(),
            Nat64State::FailedAt(at) if at.elapsed() < NAT64_RETRY => return Vec::new(),
            _ => {}
        }
        let learned = if let Some(addrs) = self.cfg.override_for(nat64::DISCOVERY_NAME, 0) {
            Ok(nat64::prefixes_in(addrs.iter().map(SocketAddr::ip)))
        } else {
            match timeout(
                RESOLVE_TIMEOUT,
                tokio::net::lookup_host((nat64::DISCOVERY_NAME, 0)),
            )
            .await
            {
                Ok(Ok(answers)) => Ok(nat64::prefixes_in(answers.map(|a| a.ip()))),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("timed out".to_string()),
            }
        };
        match learned {
            Ok(prefixes) => {
                *state = Nat64State::Known(prefixes.clone());
                prefixes
            }
            Err(e) => {
                tracing::debug!("NAT64 prefix discovery ({}): {e}", nat64::DISCOVERY_NAME);
                *state = Nat64State::FailedAt(Instant::now());
                Vec::new()
            }
        }
    }
}

/// What the proxy knows of its network's NAT64 prefixes.
enum Nat64State {
    Unknown,
    Known(Vec<Nat64Prefix>),
    FailedAt(Instant),
}

/// How long a failed NAT64 prefix lookup stands before it is tried again.
const NAT64_RETRY: Duration = Duration::from_secs(60);

/// Connects to the first of the checked addresses that answers; no second
/// lookup happens, so the address that was checked is the one used.
async fn connect_pinned(addrs: &[SocketAddr], host: &str, port: u16) -> Result<TcpStream, Refusal> {
    let mut last: Option<io::Error> = None;
    for a in addrs {
        match timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => last = Some(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
        }
    }
    let refused = last
        .as_ref()
        .is_some_and(|e| e.kind() == io::ErrorKind::ConnectionRefused);
    Err(Refusal {
        rule: "connect-failed".into(),
        status: 502,
        socks_reply: if refused {
            SOCKS_CONN_REFUSED
        } else {
            SOCKS_HOST_UNREACHABLE
        },
        message: format!(
            "cordon: could not connect to {}: {}.",
            fmt_dest(host, port),
            last.map(|e| e.to_string()).unwrap_or_default()
        ),
        retry_after: None,
    })
}

async fn handle_connection(shared: Arc<Shared>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut client = BufStream::new(stream);
    match timeout(IDLE_TIMEOUT, client.fill(MAX_HEAD + 1)).await {
        Ok(Ok(n)) if n > 0 => {}
        _ => return,
    }
    if client.data().first() == Some(&5) {
        socks5(shared, client).await;
    } else {
        http_connection(shared, client).await;
    }
}

pub(crate) fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// After a refusal: discard what the client still sends (a request body,
/// pipelined requests) for a moment, so closing does not reset the
/// connection before the client has read the answer.
async fn linger(client: &mut TcpStream) {
    use tokio::io::AsyncReadExt;
    const LINGER: Duration = Duration::from_millis(500);
    const LINGER_BYTES: usize = 1 << 20;
    let mut buf = [0u8; 4096];
    let mut seen = 0;
    let deadline = tokio::time::Instant::now() + LINGER;
    while seen < LINGER_BYTES {
        match tokio::time::timeout_at(deadline, client.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => seen += n,
            _ => return,
        }
    }
}

/// Writes a plain-text answer from the proxy itself and asks to close.
async fn answer(
    client: &mut TcpStream,
    status: u16,
    message: &str,
    retry_after: Option<Duration>,
) -> usize {
    let body = format!("{message}\n");
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Cordon-Egress: refused\r\n",
        status_text(status),
        body.len()
    );
    if let Some(r) = retry_after {
        out.push_str(&format!(
            "Retry-After: {}\r\n",
            r.as_secs_f64().ceil().max(1.0) as u64
        ));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    let _ = client.write_all(out.as_bytes()).await;
    let _ = client.shutdown().await;
    linger(client).await;
    out.len()
}

async fn refuse_http(client: &mut TcpStream, att: &mut Attempt, r: Refusal) {
    att.refused(&r);
    let n = answer(client, r.status, &r.message, r.retry_after).await;
    att.down(n);
}

enum HeadRead {
    Head(RequestHead),
    Closed,
    Bad(RequestError),
}

async fn read_request_head(client: &mut BufStream, first: bool) -> HeadRead {
    let mut waited_idle = !first;
    loop {
        match parse_request_head(client.data()) {
            Ok(Some(h)) => return HeadRead::Head(h),
            Err(e) => return HeadRead::Bad(e),
            Ok(None) => {}
        }
        let started = !client.data().is_empty();
        let limit = if started {
            HANDSHAKE_TIMEOUT
        } else {
            IDLE_TIMEOUT
        };
        if !started && !waited_idle {
            waited_idle = true;
        }
        match timeout(limit, client.fill(MAX_HEAD + 1)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                if client.data().is_empty() {
                    return HeadRead::Closed;
                }
                return HeadRead::Bad(RequestError {
                    status: 400,
                    reason: "incomplete request head".into(),
                    method: String::new(),
                });
            }
            Ok(Ok(_)) => {}
            Err(_) => {
                if client.data().is_empty() {
                    return HeadRead::Closed;
                }
                return HeadRead::Bad(RequestError {
                    status: 408,
                    reason: "request head not completed in time".into(),
                    method: String::new(),
                });
            }
        }
    }
}

struct Upstream {
    host: String,
    port: u16,
    conn: BufStream,
}

async fn http_connection(shared: Arc<Shared>, mut client: BufStream) {
    let mut upstream: Option<Upstream> = None;
    let mut first = true;
    loop {
        let head = read_request_head(&mut client, first).await;
        first = false;
        let req = match head {
            HeadRead::Closed => return,
            HeadRead::Bad(e) => {
                let proto = if e.method == "CONNECT" {
                    Protocol::Connect
                } else {
                    Protocol::Http
                };
                let mut att = Attempt::new(&shared, proto, &e.method);
                att.up(client.data().len().min(MAX_HEAD));
                att.deny(format!("malformed: {}", e.reason));
                att.ev.status = Some(e.status);
                let msg = format!(
                    "cordon: malformed request refused: {}. The egress proxy accepts HTTP/1.1 proxy requests (absolute-form URLs, CONNECT host:port) and SOCKS5.",
                    e.reason
                );
                let n = answer(&mut client.s, e.status, &msg, None).await;
                att.down(n);
                return;
            }
            HeadRead::Head(h) => h,
        };
        client.consume(req.head_len);
        if req.method == "CONNECT" {
            let att = Attempt::new(&shared, Protocol::Connect, "CONNECT");
            att.up(req.head_len);
            connect_tunnel(&shared, client, req, att).await;
            return;
        }
        let keep = plain_request(&shared, &mut client, &mut upstream, req).await;
        if !keep {
            return;
        }
    }
}

/// Forwards one plain HTTP request. Returns whether the client connection
/// can carry another.
async fn plain_request(
    shared: &Arc<Shared>,
    client: &mut BufStream,
    upstream: &mut Option<Upstream>,
    req: RequestHead,
) -> bool {
    let mut att = Attempt::new(shared, Protocol::Http, &req.method);
    att.up(req.head_len);
    let (host, port, path) = match &req.target {
        Target::Absolute {
            host, port, path, ..
        } => (host.clone(), *port, path.clone()),
        Target::Authority { host, port, .. } => (host.clone(), *port, "/".into()),
    };
    att.target(&host, port);
    att.ev.path = Some(redact_url(&path));
    let dest = fmt_dest(&host, port);
    if let Some(r) = plain_http_refusal(&shared.cfg.cfg, &req.method, &host, &dest) {
        refuse_http(&mut client.s, &mut att, r).await;
        return false;
    }
    let rule = match shared.decide(&host, port).await {
        Ok(rule) => rule,
        Err(r) => {
            refuse_http(&mut client.s, &mut att, r).await;
            return false;
        }
    };
    let applicable = match shared.limiter.admit(&host, port) {
        Ok(a) => a,
        Err(hit) => {
            let r = shared.limit_refusal(&host, port, hit);
            refuse_http(&mut client.s, &mut att, r).await;
            return false;
        }
    };
    let mut watch = shared
        .interceptor
        .as_ref()
        .and_then(|i| i.watch_plain_http(&host, port));
    // Reuse the upstream connection when it goes to the same place. A
    // reused connection the origin closed while idle is replaced once, for
    // requests without a body and with a safe method.
    let mut fresh_tried = false;
    let result = loop {
        let reuse = upstream
            .as_ref()
            .is_some_and(|u| u.host == host && u.port == port);
        if !reuse {
            fresh_tried = true;
            *upstream = None;
            att.allow(rule.clone());
            let connected = match shared.resolve(&host, req.target.is_ip(), port).await {
                Ok(addrs) => connect_pinned(&addrs, &host, port).await,
                Err(r) => Err(r),
            };
            match connected {
                Ok(s) => {
                    *upstream = Some(Upstream {
                        host: host.clone(),
                        port,
                        conn: BufStream::new(s),
                    })
                }
                Err(r) if r.is_failure() => {
                    att.failed(&r);
                    let n = answer(&mut client.s, r.status, &r.message, None).await;
                    att.down(n);
                    return false;
                }
                Err(r) => {
                    refuse_http(&mut client.s, &mut att, r).await;
                    return false;
                }
            }
        }
        att.allow(rule.clone());
        let Some(up) = upstream.as_mut() else {
            return false;
        };
        let result = exchange(shared, client, up, &req, &att, &applicable, &mut watch).await;
        if let Some(note) = watch.as_mut().and_then(|w| w.finish()) {
            note.apply(&mut att.ev);
        }
        match result {
            Err(ExchangeError::IdleClosed)
                if !fresh_tried
                    && req.body == BodyKind::None
                    && matches!(req.method.as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE") =>
            {
                *upstream = None;
                continue;
            }
            Err(ExchangeError::IdleClosed) => {
                break Err(ExchangeError::BeforeResponse(
                    "upstream closed the connection".into(),
                ))
            }
            other => break other,
        }
    };
    match result {
        Ok((status, keep_client, keep_upstream)) => {
            att.ev.status = Some(status);
            if !keep_upstream {
                *upstream = None;
            }
            keep_client && req.keep_alive
        }
        Err(ExchangeError::BeforeResponse(msg)) => {
            *upstream = None;
            let (status, message) = failure_before_response(shared, &att, &host, port, &msg);
            att.ev.status = Some(status);
            let n = answer(&mut client.s, status, &message, None).await;
            att.down(n);
            false
        }
        Err(ExchangeError::AfterResponse) | Err(ExchangeError::IdleClosed) => {
            *upstream = None;
            false
        }
    }
}

/// A plain-HTTP request the sandbox's settings refuse before any rule is
/// asked: any plain HTTP under `https_only`, a method not listed.
fn plain_http_refusal(cfg: &EgressConfig, method: &str, host: &str, dest: &str) -> Option<Refusal> {
    if cfg.https_only {
        return Some(Refusal {
            rule: "https-only".into(),
            status: 403,
            socks_reply: SOCKS_NOT_ALLOWED,
            message: format!(
                "cordon: plain HTTP to {dest} refused: this sandbox may only use HTTPS. Use https://{host}/ (an operator can turn off network.https_only)."
            ),
            retry_after: None,
        });
    }
    if !cfg.methods.is_empty() && !cfg.methods.iter().any(|m| m == method) {
        return Some(Refusal {
            rule: format!("method {method}"),
            status: 403,
            socks_reply: SOCKS_NOT_ALLOWED,
            message: format!(
                "cordon: {method} to {dest} refused: only these HTTP methods are allowed: {}. An operator can change network.methods.",
                cfg.methods.join(", ")
            ),
            retry_after: None,
        });
    }
    None
}

/// The status and message for a request that failed before any of its
/// response reached the client: 429 when a limit cut it (the byte cap or
/// the request rate), 502 otherwise.
fn failure_before_response(
    shared: &Shared,
    att: &Attempt,
    host: &str,
    port: u16,
    why: &str,
) -> (u16, String) {
    let hit = match att.meter.hit() {
        0 => {
            let dest = fmt_dest(host, port);
            return (502, format!("cordon: the request to {dest} failed: {why}."));
        }
        HIT_CAP => LimitHit::Cap {
            max: shared.cfg.cfg.max_bytes.unwrap_or(0),
        },
        _ => LimitHit::Rate {
            rule: host.to_owned(),
            retry_after: Duration::from_secs(1),
        },
    };
    (429, shared.limit_refusal(host, port, hit).message)
}

enum ExchangeError {
    /// Nothing was sent to the client yet: answer with an error.
    BeforeResponse(String),
    /// The upstream closed before sending a byte of the response.
    IdleClosed,
    /// The response was under way: only closing is left.
    AfterResponse,
}

/// Sends request bytes upstream: the first `paid` (already granted), then
/// as many as the limits grant (the watcher sees what is sent); an error
/// once a limit cuts the request.
async fn send_up(
    shared: &Shared,
    up: &mut Upstream,
    bytes: &[u8],
    paid: usize,
    att: &Attempt,
    applicable: &Applicable,
    watch: &mut Option<Box<dyn PlainHttpWatch>>,
) -> Result<(), ExchangeError> {
    let (granted, cut) = grant(shared, att, applicable, bytes.len() - paid);
    let send = &bytes[..paid + granted];
    if let Some(w) = watch.as_mut() {
        w.scan(send);
    }
    up.conn
        .s
        .write_all(send)
        .await
        .map_err(|e| ExchangeError::BeforeResponse(format!("sending to upstream: {e}")))?;
    if cut {
        return Err(ExchangeError::BeforeResponse("limit".into()));
    }
    Ok(())
}

/// Charges an allowed tunnel's handshake with the proxy (what the attempt
/// counted so far and the `reply` about to be sent), so the cap and the
/// event count the same bytes. `false` (nothing charged) when it does not
/// fit.
fn charge_preamble(shared: &Shared, att: &Attempt, applicable: &Applicable, reply: usize) -> bool {
    let n = att.meter.up.load(Ordering::Relaxed) + att.meter.down.load(Ordering::Relaxed);
    let n = n as usize + reply;
    let (granted, cut) = grant(shared, att, applicable, n);
    if cut {
        shared.limiter.refund(granted);
    }
    !cut
}

fn cap_hit(shared: &Shared) -> LimitHit {
    LimitHit::Cap {
        max: shared.cfg.cfg.max_bytes.unwrap_or(0),
    }
}

/// How many of `n` bytes may be delivered now, and whether the traffic
/// must be cut after them (a limit was hit, which the event will name).
fn grant(shared: &Shared, att: &Attempt, applicable: &Applicable, n: usize) -> (usize, bool) {
    let (granted, hit) = shared.limiter.grant(applicable, n);
    if let Some(hit) = &hit {
        att.meter.record_hit(hit);
    }
    (granted, hit.is_some())
}

/// Sends the request and relays the response. Returns the status, whether
/// the client may send another request, whether the upstream connection is
/// reusable.
async fn exchange(
    shared: &Shared,
    client: &mut BufStream,
    up: &mut Upstream,
    req: &RequestHead,
    att: &Attempt,
    applicable: &Applicable,
    watch: &mut Option<Box<dyn PlainHttpWatch>>,
) -> Result<(u16, bool, bool), ExchangeError> {
    let mut x = Exchange {
        shared,
        client,
        up,
        req,
        att,
        applicable,
    };
    x.send_request(watch).await?;
    let resp = x.response_head().await?;
    x.relay_response(resp).await
}

/// One request and its response on a plain-HTTP connection, every byte
/// counted against the sandbox's limits.
struct Exchange<'a> {
    shared: &'a Shared,
    client: &'a mut BufStream,
    up: &'a mut Upstream,
    req: &'a RequestHead,
    att: &'a Attempt,
    applicable: &'a Applicable,
}

impl Exchange<'_> {
    /// [`grant`], for this exchange's bytes.
    fn grant(&self, n: usize) -> (usize, bool) {
        grant(self.shared, self.att, self.applicable, n)
    }

    /// Send the request upstream: its head, then its body as the client
    /// sends it (by length or chunked), counted against the byte cap.
    async fn send_request(
        &mut self,
        watch: &mut Option<Box<dyn PlainHttpWatch>>,
    ) -> Result<(), ExchangeError> {
        let before = |m: &str| ExchangeError::BeforeResponse(m.to_string());
        // The cap counts the head as the sandbox sent it, whole or not at all.
        let (granted, cut) = self.grant(self.req.head_len);
        if cut {
            self.shared.limiter.refund(granted);
            return Err(before("limit"));
        }
        let mut out = Vec::with_capacity(512);
        self.req.write_upstream(&mut out);
        let head_out = out.len();
        if self.req.expect_continue {
            self.client
                .s
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .map_err(|_| before("client went away"))?;
        }
        // Send the head and whatever part of the body is already buffered in
        // one write.
        let mut body_left = match self.req.body {
            BodyKind::Length(n) => n,
            _ => 0,
        };
        let mut scanner = ChunkedScanner::new();
        let mut chunked_done = self.req.body != BodyKind::Chunked;
        let buffered = self.client.data();
        let take = match self.req.body {
            BodyKind::Length(_) => (buffered.len() as u64).min(body_left) as usize,
            BodyKind::Chunked => scanner.feed(buffered).map_err(before)?,
            _ => 0,
        };
        out.extend_from_slice(&buffered[..take]);
        self.client.consume(take);
        body_left -= if matches!(self.req.body, BodyKind::Length(_)) {
            take as u64
        } else {
            0
        };
        if self.req.body == BodyKind::Chunked {
            chunked_done = scanner.is_done();
        }
        self.att.up(take);
        send_up(
            self.shared,
            self.up,
            &out,
            head_out,
            self.att,
            self.applicable,
            watch,
        )
        .await?;
        drop(out);
        // The rest of the request body.
        while body_left > 0 || !chunked_done {
            if self.client.data().is_empty() {
                match timeout(
                    HANDSHAKE_TIMEOUT,
                    self.client.fill(crate::stream::READ_CHUNK),
                )
                .await
                {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return Err(before("the request body ended early")),
                }
            }
            let data = self.client.data();
            let n = if chunked_done {
                (data.len() as u64).min(body_left) as usize
            } else {
                let n = scanner.feed(data).map_err(before)?;
                chunked_done = scanner.is_done();
                n
            };
            send_up(
                self.shared,
                self.up,
                &data[..n],
                0,
                self.att,
                self.applicable,
                watch,
            )
            .await?;
            self.att.up(n);
            self.client.consume(n);
            if body_left > 0 {
                body_left -= n as u64;
            }
        }
        Ok(())
    }

    /// The upstream's response head; interim 1xx heads are forwarded to an
    /// HTTP/1.1 client as they come and skipped for an HTTP/1.0 one.
    async fn response_head(&mut self) -> Result<ResponseHead, ExchangeError> {
        let before = |m: &str| ExchangeError::BeforeResponse(m.to_string());
        let head_request = self.req.method == "HEAD";
        let mut interim_sent = false;
        loop {
            let parsed = loop {
                match parse_response_head(self.up.conn.data(), head_request) {
                    Ok(Some(r)) => break r,
                    Ok(None) => {}
                    Err(e) => return Err(before(&e)),
                }
                match timeout(RESPONSE_TIMEOUT, self.up.conn.fill(MAX_HEAD + 1)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) if self.up.conn.data().is_empty() && !interim_sent => {
                        return Err(ExchangeError::IdleClosed)
                    }
                    Ok(_) => return Err(before("upstream closed the connection mid-response")),
                    Err(_) => return Err(before("upstream did not answer in time")),
                }
            };
            self.up.conn.consume(parsed.head_len);
            if (100..200).contains(&parsed.status) {
                if parsed.status == 101 {
                    return Err(before(
                        "upstream switched protocols, which the proxy does not relay",
                    ));
                }
                if self.req.minor_version == 0 {
                    // An HTTP/1.0 client gets no interim responses (RFC 9110
                    // section 15.2).
                    continue;
                }
                let mut interim = Vec::new();
                parsed.write_client(&mut interim, false, self.req.minor_version);
                let (granted, cut) = self.grant(interim.len());
                self.client
                    .s
                    .write_all(&interim[..granted])
                    .await
                    .map_err(|_| ExchangeError::AfterResponse)?;
                self.att.down(granted);
                if cut {
                    return Err(ExchangeError::AfterResponse);
                }
                interim_sent = true;
                continue;
            }
            return Ok(parsed);
        }
    }

    /// Relay the response to the client, counted against the byte cap:
    /// de-chunked for an HTTP/1.0 client, which is then told the connection
    /// closes. Returns the status and whether the client's and the
    /// upstream's connections may be kept.
    async fn relay_response(
        &mut self,
        mut resp: ResponseHead,
    ) -> Result<(u16, bool, bool), ExchangeError> {
        // An HTTP/1.0 client cannot read chunked framing: it gets the data,
        // delimited by the close.
        let dechunk = resp.body == BodyKind::Chunked && self.req.minor_version == 0;
        if dechunk {
            resp.headers
                .retain(|(n, _)| !n.eq_ignore_ascii_case("transfer-encoding"));
        }
        let until_close = resp.body == BodyKind::UntilClose;
        let keep_client = self.req.keep_alive && !until_close && !dechunk;
        let mut out = Vec::with_capacity(512);
        resp.write_client(&mut out, !keep_client, self.req.minor_version);
        let mut left = match resp.body {
            BodyKind::Length(n) => n,
            _ => 0,
        };
        let mut scanner = ChunkedScanner::new();
        let mut done = match resp.body {
            BodyKind::None => true,
            BodyKind::Length(_) | BodyKind::Chunked | BodyKind::UntilClose => false,
        };
        let after = |_| ExchangeError::AfterResponse;
        loop {
            let data = self.up.conn.data();
            let n = match resp.body {
                BodyKind::Length(_) => (data.len() as u64).min(left) as usize,
                BodyKind::Chunked if dechunk => {
                    let n = scanner
                        .decode(data, &mut out)
                        .map_err(|_| ExchangeError::AfterResponse)?;
                    done = scanner.is_done();
                    n
                }
                BodyKind::Chunked => {
                    let n = scanner
                        .feed(data)
                        .map_err(|_| ExchangeError::AfterResponse)?;
                    done = scanner.is_done();
                    n
                }
                BodyKind::UntilClose => data.len(),
                BodyKind::None => 0,
            };
            if !dechunk {
                out.extend_from_slice(&data[..n]);
            }
            self.up.conn.consume(n);
            if let BodyKind::Length(_) = resp.body {
                left -= n as u64;
                done = left == 0;
            }
            if !out.is_empty() {
                let (granted, cut) = self.grant(out.len());
                self.client
                    .s
                    .write_all(&out[..granted])
                    .await
                    .map_err(after)?;
                self.att.down(granted);
                out.clear();
                if cut {
                    return Err(ExchangeError::AfterResponse);
                }
            }
            if done {
                break;
            }
            match timeout(
                RESPONSE_TIMEOUT,
                self.up.conn.fill(crate::stream::READ_CHUNK),
            )
            .await
            {
                Ok(Ok(n)) if n > 0 => {}
                Ok(Ok(_)) if until_close => break,
                _ => return Err(ExchangeError::AfterResponse),
            }
        }
        let keep_upstream = resp.reusable && self.up.conn.data().is_empty();
        Ok((resp.status, keep_client, keep_upstream))
    }
}

/// After the rules allowed a tunnel: limits, resolution, connection.
async fn open_tunnel(
    shared: &Arc<Shared>,
    att: &mut Attempt,
    host: &str,
    is_ip: bool,
    port: u16,
) -> Result<(TcpStream, Applicable), Refusal> {
    let rule = shared.decide(host, port).await?;
    let applicable = shared
        .limiter
        .admit(host, port)
        .map_err(|hit| shared.limit_refusal(host, port, hit))?;
    att.allow(rule);
    let addrs = shared.resolve(host, is_ip, port).await?;
    let up = connect_pinned(&addrs, host, port).await?;
    Ok((up, applicable))
}

async fn connect_tunnel(
    shared: &Arc<Shared>,
    mut client: BufStream,
    req: RequestHead,
    mut att: Attempt,
) {
    let host = req.target.host().to_string();
    let port = req.target.port();
    att.target(&host, port);
    let (upstream, applicable) =
        match open_tunnel(shared, &mut att, &host, req.target.is_ip(), port).await {
            Ok(x) => x,
            Err(r) => {
                if r.is_failure() {
                    att.failed(&r);
                    let n = answer(&mut client.s, r.status, &r.message, None).await;
                    att.down(n);
                } else {
                    refuse_http(&mut client.s, &mut att, r).await;
                }
                return;
            }
        };
    const OK: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if !charge_preamble(shared, &att, &applicable, OK.len()) {
        let r = shared.limit_refusal(&host, port, cap_hit(shared));
        refuse_http(&mut client.s, &mut att, r).await;
        return;
    }
    if client.s.write_all(OK).await.is_err() {
        return;
    }
    att.down(OK.len());
    att.ev.status = Some(200);
    splice(shared, client, upstream, att, applicable, &host, port).await;
}

/// Checks the ClientHello where required, then relays bytes both ways
/// until either side closes, a limit is hit, or the proxy shuts down.
///
/// Whenever the sandbox's first bytes on a tunnel are a TLS ClientHello,
/// on any port, its SNI must name the tunnel's host (a ClientHello without
/// SNI only with `allow_missing_sni`). On port 443, under `https_only` and
/// for intercepted hosts the first bytes must be a ClientHello. On other
/// ports the destination may speak first (SMTP, SSH): what it sends is
/// relayed while the proxy waits for the sandbox's first bytes.
async fn splice(
    shared: &Arc<Shared>,
    mut client: BufStream,
    mut upstream: TcpStream,
    mut att: Attempt,
    applicable: Applicable,
    host: &str,
    port: u16,
) {
    let interceptor = shared
        .interceptor
        .as_ref()
        .filter(|i| i.intercepts(host, port));
    let needs_sni = port == 443 || shared.cfg.cfg.https_only || interceptor.is_some();
    if !needs_sni
        && !await_client_first(shared, &mut client, &mut upstream, &att, &applicable).await
    {
        return;
    }
    let tls = needs_sni || starts_like_tls(&mut client).await;
    if tls {
        let sni_optional = shared.cfg.cfg.allow_missing_sni && interceptor.is_none();
        let refused = match read_client_hello(&mut client).await {
            Ok(Some(sni)) if sni == host => None,
            Ok(Some(sni)) => Some(format!("sni-mismatch {sni}")),
            Ok(None) if sni_optional => None,
            Ok(None) => Some("sni-missing".to_string()),
            Err(HelloError::NotTls) if client.data().first().is_some_and(|b| b & 0x80 != 0) => {
                // An SSLv2-format ClientHello has no room for an SNI.
                (!sni_optional).then(|| "sni-missing (SSLv2-format ClientHello)".to_string())
            }
            Err(e) => Some(format!("malformed: {e}")),
        };
        if let Some(rule) = refused {
            att.deny(rule);
            deny_tls(&mut client.s).await;
            return;
        }
    }
    let buffered = client.take_buffered();
    let mut stream = client.s;
    // A tunnel that did not start with TLS may switch to it later
    // (STARTTLS): every byte the sandbox sends on it is watched.
    let mut late_tls = (!tls).then(|| LateHelloWatch::new(host, shared.cfg.cfg.allow_missing_sni));
    if let Some(watch) = &mut late_tls {
        if let Err(rule) = watch.judge(&buffered) {
            att.deny(rule);
            deny_tls(&mut stream).await;
            return;
        }
    }
    att.up(buffered.len());
    let (granted, cut) = grant(shared, &att, &applicable, buffered.len());
    if cut {
        let _ = upstream.write_all(&buffered[..granted]).await;
        return;
    }
    if needs_sni {
        if let Some(icpt) = interceptor {
            let metered = Metered::new(
                stream,
                att.meter.clone(),
                shared.limiter.clone(),
                applicable,
            );
            let tunnel = InterceptedTunnel {
                sandbox_id: shared.cfg.cfg.sandbox_id.clone(),
                host: host.to_string(),
                port,
                rule: att.ev.rule.clone(),
                client: TunnelStream::new(buffered, metered),
                upstream,
                events: EventWriter {
                    shared: shared.clone(),
                },
                gate: RequestGate {
                    shared: shared.clone(),
                },
            };
            if let Err(e) = icpt.intercept(tunnel).await {
                tracing::debug!(error = %e, "intercepted tunnel ended with an error");
            }
            return;
        }
    }
    if !buffered.is_empty() && upstream.write_all(&buffered).await.is_err() {
        return;
    }
    drop(buffered);
    if let Some(watch) = late_tls {
        relay_watching_for_tls(shared, &mut stream, &upstream, &mut att, &applicable, watch).await;
        return;
    }
    if let Some(pipes) = shared.splice.then(crate::splice::Pipes::new).flatten() {
        // Zero-copy relay; counting and limits per spliced chunk, granted
        // before it is written on.
        let on_up = |n: usize| relay_grant(shared, &att, &applicable, n, true);
        let on_down = |n: usize| relay_grant(shared, &att, &applicable, n, false);
        let _ = crate::splice::bidirectional(&stream, &upstream, &pipes, &on_up, &on_down).await;
        return;
    }
    let mut metered = Metered::new(
        stream,
        att.meter.clone(),
        shared.limiter.clone(),
        applicable,
    );
    let _ = tokio::io::copy_bidirectional_with_sizes(
        &mut metered,
        &mut upstream,
        TUNNEL_UP_BUF,
        TUNNEL_DOWN_BUF,
    )
    .await;
}

/// A relay's grant for a chunk of `n` bytes (see `crate::splice::OnBytes`):
/// counted as sent up or down, limits applied before it is written on.
fn relay_grant(
    shared: &Shared,
    att: &Attempt,
    applicable: &Applicable,
    n: usize,
    up: bool,
) -> io::Result<usize> {
    let (granted, cut) = grant(shared, att, applicable, n);
    let ctr = if up { &att.meter.up } else { &att.meter.down };
    ctr.fetch_add(granted as u64, Ordering::Relaxed);
    if cut && granted == n {
        return Err(io::Error::other("limit reached"));
    }
    Ok(granted)
}

/// Relays a tunnel that did not start with TLS, each chunk the sandbox
/// sends shown to `watch` before it is written on (`crate::late_tls`). At
/// the chunk that would complete a ClientHello the watch refuses, the
/// tunnel is cut and the sandbox gets a TLS alert.
async fn relay_watching_for_tls(
    shared: &Shared,
    stream: &mut TcpStream,
    upstream: &TcpStream,
    att: &mut Attempt,
    applicable: &Applicable,
    mut watch: LateHelloWatch,
) {
    let mut refused: Option<String> = None;
    {
        let pipes = shared.splice.then(crate::splice::Pipes::new).flatten();
        let att = &*att;
        let on_up = |n: usize| relay_grant(shared, att, applicable, n, true);
        let on_down = |n: usize| relay_grant(shared, att, applicable, n, false);
        let mut inspect = |chunk: &[u8]| {
            watch.judge(chunk).map_err(|rule| {
                refused = Some(rule);
                io::Error::other("a late ClientHello was refused")
            })
        };
        let _ = crate::splice::bidirectional_inspected(
            stream,
            upstream,
            pipes.as_ref(),
            &on_up,
            &on_down,
            &mut inspect,
        )
        .await;
    }
    if let Some(rule) = refused {
        att.deny(rule);
        deny_tls(stream).await;
    }
}

/// Waits for the sandbox's first bytes on a tunnel while relaying what the
/// destination sends first. `false` when either side closed or a limit
/// was hit before the sandbox sent anything.
async fn await_client_first(
    shared: &Shared,
    client: &mut BufStream,
    upstream: &mut TcpStream,
    att: &Attempt,
    applicable: &Applicable,
) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    while client.data().is_empty() {
        if buf.is_empty() {
            buf.resize(crate::stream::READ_CHUNK, 0);
        }
        tokio::select! {
            r = client.fill(MAX_CLIENT_HELLO) => match r {
                Ok(n) if n > 0 => {}
                _ => return false,
            },
            r = upstream.read(&mut buf) => match r {
                Ok(n) if n > 0 => {
                    let (granted, cut) = grant(shared, att, applicable, n);
                    if client.s.write_all(&buf[..granted]).await.is_err() || cut {
                        return false;
                    }
                    att.down(granted);
                }
                _ => return false,
            },
        }
    }
    true
}

/// Whether the buffered first bytes of a tunnel look like the start of a
/// TLS record (content type 20..=24, major version 3) or of an SSLv2-format
/// ClientHello; reads a few more bytes when too few are there to tell.
async fn starts_like_tls(client: &mut BufStream) -> bool {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    loop {
        let d = client.data();
        match d {
            [t, 3, ..] if (20..=24).contains(t) => return true,
            [t, _, 1, ..] if t & 0x80 != 0 => return true,
            [t, ..] if (20..=24).contains(t) && d.len() < 2 => {}
            [t, ..] if t & 0x80 != 0 && d.len() < 3 => {}
            _ => return false,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, client.fill(MAX_CLIENT_HELLO)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return false,
        }
    }
}

/// Reads until the ClientHello is complete. `Ok(None)`: no SNI.
async fn read_client_hello(client: &mut BufStream) -> Result<Option<String>, HelloError> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    loop {
        if let Some(hello) = parse_client_hello(client.data())? {
            return Ok(hello.sni);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, client.fill(MAX_CLIENT_HELLO)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => {
                return Err(HelloError::Malformed(
                    "connection ended before the ClientHello was complete",
                ))
            }
        }
    }
}

/// A fatal TLS `access_denied` alert, then close.
async fn deny_tls(client: &mut TcpStream) {
    let _ = client.write_all(&[21, 3, 3, 0, 2, 2, 49]).await;
    let _ = client.shutdown().await;
}

async fn socks5(shared: Arc<Shared>, mut client: BufStream) {
    let mut att = Attempt::new(&shared, Protocol::Socks5, "CONNECT");
    let handshake = timeout(HANDSHAKE_TIMEOUT, socks5_handshake(&mut client, &mut att)).await;
    let (host, is_ip, port) = match handshake {
        Ok(Ok(t)) => t,
        Ok(Err((rule, reply))) => {
            att.deny(rule);
            if let Some(code) = reply {
                let _ = socks_reply(&mut client.s, code).await;
            }
            return;
        }
        Err(_) => {
            att.deny("malformed: SOCKS5 handshake not completed in time");
            return;
        }
    };
    att.target(&host, port);
    let (upstream, applicable) = match open_tunnel(&shared, &mut att, &host, is_ip, port).await {
        Ok(x) => x,
        Err(r) => {
            if r.is_failure() {
                att.failed(&r);
            } else {
                att.refused(&r);
            }
            let _ = socks_reply(&mut client.s, r.socks_reply).await;
            let _ = client.s.shutdown().await;
            return;
        }
    };
    if !charge_preamble(&shared, &att, &applicable, 10) {
        att.deny("byte-cap");
        let _ = socks_reply(&mut client.s, SOCKS_NOT_ALLOWED).await;
        return;
    }
    if socks_reply(&mut client.s, 0).await.is_err() {
        return;
    }
    splice(&shared, client, upstream, att, applicable, &host, port).await;
}

async fn socks_reply(s: &mut TcpStream, code: u8) -> io::Result<()> {
    let ip = Ipv4Addr::UNSPECIFIED.octets();
    s.write_all(&[5, code, 0, 1, ip[0], ip[1], ip[2], ip[3], 0, 0])
        .await
}

/// Reads exactly `n` bytes from the buffered client (after what is consumed).
async fn need(client: &mut BufStream, n: usize) -> Result<(), (String, Option<u8>)> {
    while client.data().len() < n {
        match client.fill(1024).await {
            Ok(k) if k > 0 => {}
            _ => return Err(("malformed: SOCKS5 handshake cut short".into(), None)),
        }
    }
    Ok(())
}

type SocksTarget = (String, bool, u16);

async fn socks5_handshake(
    client: &mut BufStream,
    att: &mut Attempt,
) -> Result<SocksTarget, (String, Option<u8>)> {
    // Greeting: VER NMETHODS METHODS...
    need(client, 2).await?;
    let nmethods = client.data()[1] as usize;
    need(client, 2 + nmethods).await?;
    let no_auth = client.data()[2..2 + nmethods].contains(&0);
    att.up(2 + nmethods);
    client.consume(2 + nmethods);
    if !no_auth {
        let _ = client.s.write_all(&[5, 0xff]).await;
        return Err((
            "unsupported: SOCKS5 authentication (only no-auth is offered)".into(),
            None,
        ));
    }
    client
        .s
        .write_all(&[5, 0])
        .await
        .map_err(|_| ("malformed: client went away".to_string(), None))?;
    att.down(2);
    // Request: VER CMD RSV ATYP ADDR PORT
    need(client, 4).await?;
    let (ver, cmd, atyp) = (client.data()[0], client.data()[1], client.data()[3]);
    if ver != 5 {
        return Err((
            "malformed: SOCKS version in request".into(),
            Some(SOCKS_GENERAL_FAILURE),
        ));
    }
    let (host, is_ip, len) = match atyp {
        1 => {
            need(client, 4 + 4 + 2).await?;
            let d = client.data();
            let ip = Ipv4Addr::new(d[4], d[5], d[6], d[7]);
            (ip.to_string(), true, 10)
        }
        4 => {
            need(client, 4 + 16 + 2).await?;
            let mut o = [0u8; 16];
            o.copy_from_slice(&client.data()[4..20]);
            (std::net::Ipv6Addr::from(o).to_string(), true, 22)
        }
        3 => {
            need(client, 5).await?;
            let n = client.data()[4] as usize;
            need(client, 5 + n + 2).await?;
            let raw = String::from_utf8_lossy(&client.data()[5..5 + n]).into_owned();
            match DestHost::parse(raw.trim_start_matches('[').trim_end_matches(']')) {
                Ok(DestHost::Name(h)) => (h, false, 5 + n + 2),
                Ok(DestHost::Ip(ip)) => (ip.to_string(), true, 5 + n + 2),
                Err(e) => {
                    return Err((
                        format!("malformed: invalid host: {e}"),
                        Some(SOCKS_HOST_UNREACHABLE),
                    ));
                }
            }
        }
        _ => {
            return Err((
                "unsupported: SOCKS5 address type".into(),
                Some(SOCKS_ATYP_UNSUPPORTED),
            ));
        }
    };
    let d = client.data();
    let port = u16::from_be_bytes([d[len - 2], d[len - 1]]);
    att.up(len);
    client.consume(len);
    att.target(&host, port);
    match cmd {
        1 => {}
        2 => {
            return Err((
                "unsupported: SOCKS5 BIND".into(),
                Some(SOCKS_CMD_UNSUPPORTED),
            ))
        }
        3 => {
            return Err((
                "unsupported: SOCKS5 UDP ASSOCIATE".into(),
                Some(SOCKS_CMD_UNSUPPORTED),
            ))
        }
        _ => {
            return Err((
                "unsupported: SOCKS5 command".into(),
                Some(SOCKS_CMD_UNSUPPORTED),
            ))
        }
    }
    if port == 0 {
        return Err(("malformed: port 0".into(), Some(SOCKS_GENERAL_FAILURE)));
    }
    Ok((host, is_ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal for literal private and metadata addresses happens in
    /// `resolve`, before any connection: exercised here without a network.
    #[test]
    fn literal_private_and_metadata_refused_before_connecting() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let egress = Egress::new(EgressConfig::default()).unwrap();
        let shared = egress.shared;
        rt.block_on(async {
            for (ip, rule) in [
                ("169.254.169.254", "metadata-address 169.254.169.254"),
                ("fd00:ec2::254", "metadata-address fd00:ec2::254"),
                ("100.100.100.200", "metadata-address 100.100.100.200"),
                ("10.0.0.5", "private-address 10.0.0.5"),
                ("192.168.1.1", "private-address 192.168.1.1"),
                ("100.64.0.1", "private-address 100.64.0.1"),
                ("fe80::1", "private-address fe80::1"),
                ("::ffff:10.0.0.5", "private-address ::ffff:10.0.0.5"),
                ("224.0.0.1", "private-address 224.0.0.1"),
                // IPv6 forms that carry an IPv4 address (SIIT, NAT64, 6to4,
                // Teredo): judged by that address.
                (
                    "::ffff:0:169.254.169.254",
                    "metadata-address ::ffff:0:a9fe:a9fe",
                ),
                ("::ffff:0:127.0.0.1", "private-address ::ffff:0:7f00:1"),
                ("64:ff9b::7f00:1", "private-address 64:ff9b::7f00:1"),
                ("64:ff9b:1::a00:1", "private-address 64:ff9b:1::a00:1"),
                ("2002:a9fe:a9fe::1", "metadata-address 2002:a9fe:a9fe::1"),
                (
                    "2001:0:808:808::80ff:fffe",
                    "private-address 2001:0:808:808::80ff:fffe",
                ),
            ] {
                let r = shared.resolve(ip, true, 80).await.err().unwrap();
                assert_eq!(r.rule, rule);
                assert_eq!(r.status, 403);
                assert_eq!(r.socks_reply, SOCKS_NOT_ALLOWED);
                assert!(r.message.contains("network.allow_private"), "{}", r.message);
            }
            // A public literal passes the check (nothing is connected here).
            assert!(shared.resolve("93.184.216.34", true, 80).await.is_ok());
        });
    }

    /// Layer: the address guard's NAT64 prefixes. Under the network's own
    /// prefix (declared here by overriding `ipv4only.arpa`, as a DNS64
    /// resolver would answer it) an address that looks public is judged by
    /// the IPv4 address it carries; without the prefix it passes.
    #[test]
    fn addresses_under_the_networks_nat64_prefix_are_judged_by_what_they_carry() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let declared = |answers: &[&str]| {
            let mut cfg = EgressConfig::default();
            cfg.resolve_overrides.insert(
                nat64::DISCOVERY_NAME.into(),
                answers.iter().map(|a| a.parse().unwrap()).collect(),
            );
            Egress::new(cfg).unwrap().shared
        };
        let on_nat64 = declared(&["2602:fe00:64::c000:aa", "2602:fe00:64::c000:ab"]);
        let plain = declared(&["192.0.0.170", "192.0.0.171"]);
        rt.block_on(async {
            for (ip, rule, carried) in [
                (
                    "2602:fe00:64::a9fe:a9fe",
                    "metadata-address 2602:fe00:64::a9fe:a9fe",
                    "169.254.169.254",
                ),
                (
                    "2602:fe00:64::a00:5",
                    "private-address 2602:fe00:64::a00:5",
                    "10.0.0.5",
                ),
                (
                    "2602:fe00:64::7f00:1",
                    "private-address 2602:fe00:64::7f00:1",
                    "127.0.0.1",
                ),
            ] {
                let r = on_nat64.resolve(ip, true, 80).await.err().unwrap();
                assert_eq!(r.rule, rule);
                assert_eq!(r.status, 403);
                assert!(
                    r.message.contains(&format!(
                        "({carried}, through this network's NAT64 prefix 2602:fe00:64::/96"
                    )),
                    "{}",
                    r.message
                );
                // Control: with no DNS64 answer the address is public.
                assert!(plain.resolve(ip, true, 80).await.is_ok(), "{ip}");
            }
            // A public IPv4 address under the prefix is reachable.
            assert!(on_nat64
                .resolve("2602:fe00:64::808:808", true, 80)
                .await
                .is_ok());
            // Outside the prefix nothing changes.
            assert!(on_nat64
                .resolve("2602:fe00:65::a9fe:a9fe", true, 80)
                .await
                .is_ok());
        });
    }
}
