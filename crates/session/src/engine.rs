//! The engine: sessions by id, made by the spawner, torn down on request,
//! on idle timeout, at the end of their lifetime, when their init dies, or
//! with the engine.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;

use crate::control::Control;
use crate::error::{Result, SessionError};
pub use crate::process::Process;
use crate::process::{ExecBook, ExecRequest, StartWith};
use crate::spawner::{read_frame_with_fds, write_frame, Created, Reply, Request, Spawner};
use crate::widen::{ActiveWidening, Widening, WideningId};

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Most sessions alive at once (create beyond it: `SessionError::AtCapacity`).
    pub max_sessions: usize,
    /// Most execs running at once in one session.
    pub max_execs_per_session: usize,
    /// Output kept per process for re-attaching (bytes); older output is
    /// dropped first.
    pub event_buffer: usize,
    /// Output kept of a session's finished execs, all together (bytes);
    /// past it the oldest finished exec's output is dropped.
    pub finished_output: usize,
    /// Finished execs whose output is kept, per session; past it the
    /// oldest one's output is dropped.
    pub finished_kept: usize,
    /// Warm pools (one per profile): sandboxes built ahead from each base
    /// spec's shape (crate::pool), claimed by creates whose spec differs
    /// from one only
    /// in what can be given late.
    pub pools: Vec<crate::pool::PoolConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_sessions: 1000,
            max_execs_per_session: 64,
            event_buffer: 4 << 20,
            finished_output: 64 << 20,
            finished_kept: 1000,
            pools: Vec::new(),
        }
    }
}

/// What a new session is made of.
#[derive(Debug, Clone)]
pub struct CreateSession {
    /// The sandbox (argv is ignored; the environment and working directory
    /// are every exec's defaults).
    pub spec: cordon_jail::Spec,
    /// Ended after this long without an exec or file operation.
    pub idle_timeout: Option<Duration>,
    /// Ended this long after creation, whatever it does.
    pub ttl: Option<Duration>,
    /// Who made it (the server puts the token's name here).
    pub owner: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Running,
    Ended,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndCause {
    Deleted,
    IdleTimeout,
    Ttl,
    /// Its init died (killed from outside, or a limit).
    Died,
    Shutdown,
}

/// What the session uses now (cgroup counters where there are some).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionUsage {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_usec: Option<u64>,
    pub execs_total: u64,
    pub execs_running: u64,
}

/// A session as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionInfo {
    pub id: String,
    pub owner: String,
    pub state: SessionState,
    pub created_unix_ms: u64,
    pub ended: Option<EndCause>,
    pub usage: SessionUsage,
}

/// What was torn down.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Teardown {
    pub id: String,
    pub cause: EndCause,
    /// The init and the groups are gone (false: a group could not be
    /// removed; the spawner's sweeper retries when it exits).
    pub clean: bool,
}

/// The session engine. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: EngineConfig,
    /// Requests to the spawner, one at a time.
    spawner: Mutex<UnixStream>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Sessions being created (counted against the capacity).
    pending: AtomicU64,
    pools: Vec<Arc<crate::pool::Pool>>,
    /// Notified when sessions work (an exec starts, a session ends): the
    /// pools' refills wait for a pause in it.
    activity: Arc<tokio::sync::Notify>,
}

impl Engine {
    /// Start the engine on a spawner forked earlier (inside a tokio
    /// runtime).
    pub fn new(spawner: Spawner, config: EngineConfig) -> Result<Engine> {
        let activity = Arc::new(tokio::sync::Notify::new());
        let pools: Vec<Arc<crate::pool::Pool>> = config
            .pools
            .iter()
            .filter(|c| c.size > 0)
            .map(|c| Arc::new(crate::pool::Pool::new(c.clone(), activity.clone())))
            .collect();
        let engine = Engine {
            inner: Arc::new(Inner {
                config,
                spawner: Mutex::new(spawner.socket),
                sessions: Mutex::new(HashMap::new()),
                pending: AtomicU64::new(0),
                pools,
                activity,
            }),
        };
        for pool in &engine.inner.pools {
            let refill = engine.clone();
            let pool = pool.clone();
            tokio::spawn(async move { refill.refill_pool(&pool).await });
        }
        Ok(engine)
    }

    /// The warm pools' counters, added up.
    pub fn pool_stats(&self) -> crate::pool::PoolStats {
        crate::pool::PoolStats::sum(self.pools_stats())
    }

    /// Each warm pool's counters, in the order they were configured.
    pub fn pools_stats(&self) -> Vec<crate::pool::PoolStats> {
        self.inner.pools.iter().map(|p| p.stats()).collect()
    }

    /// Keep a pool at its target: build whenever it is short.
    async fn refill_pool(&self, pool: &crate::pool::Pool) {
        loop {
            while pool.short() {
                pool.wait_for_quiet().await;
                let started = Instant::now();
                match self.build(pool.base_spec()).await {
                    Ok(parts) => {
                        // The first exec waits ready in the pool, not on
                        // the request path; without it (a pids limit
                        // reached) that exec starts on order.
                        if let Err(e) = parts.control.start_ahead().await {
                            tracing::warn!("cannot start a pooled sandbox's first exec: {e}");
                        }
                        pool.put(parts, started.elapsed())
                    }
                    Err(e) => {
                        tracing::warn!("cannot build a pooled sandbox: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            pool.wait_for_claim().await;
        }
    }

    /// Ask the spawner for a sandbox built from `spec`.
    async fn build(&self, spec: cordon_jail::Spec) -> Result<Parts> {
        let id = new_id("sb");
        let max_execs = self.inner.config.max_execs_per_session as u64;
        let request = Request::Create {
            id: id.clone(),
            spec: Box::new(spec),
            max_execs,
        };
        let (reply, fds) = self.ask(request).await?;
        match reply {
            Reply::Created(created) => {
                Parts::receive(id, *created, fds, self.inner.config.max_execs_per_session)
            }
            other => Err(failure(other)),
        }
    }

    /// Give a pooled sandbox the request's binds and limits.
    /// Only what differs from the pool's base is done: binds and cgroup
    /// limits through the spawner, the rest of the limits by telling the
    /// init, nothing at all for a request of the base's own settings.
    async fn claim(
        &self,
        base: &cordon_jail::Spec,
        parts: &Parts,
        spec: &cordon_jail::Spec,
    ) -> Result<()> {
        let same_limits =
            serde_json::to_value(&base.limits).ok() == serde_json::to_value(&spec.limits).ok();
        if spec.binds.is_empty() && spec.files.is_empty() && same_limits {
            return Ok(());
        }
        let cgroup_same =
            base.limits.memory == spec.limits.memory && base.limits.pids == spec.limits.pids;
        if spec.binds.is_empty() && spec.files.is_empty() && cgroup_same {
            return parts
                .control
                .configure(cordon_jail::session::LateConfig {
                    binds: Vec::new(),
                    limits: spec.limits.clone(),
                    files: Vec::new(),
                })
                .await;
        }
        let request = Request::Claim {
            id: parts.id.clone(),
            spec: Box::new(spec.clone()),
        };
        match self.ask(request).await?.0 {
            Reply::Claimed { config } => parts.control.configure(config).await,
            other => Err(failure(other)),
        }
    }

    /// Throw a sandbox away that never became a session.
    async fn discard(&self, parts: Parts) {
        parts.control.close();
        end_sandbox(&parts.pidfd, &parts.cgroup_dirs).await;
        self.forget(&parts.id);
    }

    /// Let the spawner reap a sandbox that has ended and forget it, in the
    /// background: nobody waits for it (it may be busy building one).
    fn forget(&self, id: &str) {
        let engine = self.clone();
        let id = id.to_owned();
        tokio::spawn(async move {
            let _ = engine.ask(Request::Destroy { id }).await;
        });
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Build a sandbox (or claim a pooled one) and keep it as a session.
    pub async fn create(&self, req: CreateSession) -> Result<Arc<Session>> {
        let _slot = self.reserve()?;
        let mut dead = Vec::new();
        let pooled = self
            .inner
            .pools
            .iter()
            .find(|p| p.fits(&req.spec))
            .and_then(|p| Some((p.base_spec(), p.take(&mut dead)?)));
        if pooled.is_none() {
            if let Some(first) = self.inner.pools.first() {
                first.count_miss();
            }
        }
        for parts in dead {
            self.discard(parts).await;
        }
        let parts = match pooled {
            Some((base, parts)) => match self.claim(&base, &parts, &req.spec).await {
                Ok(()) => parts,
                Err(e) => {
                    // Half-given: never used for anything else.
                    self.discard(parts).await;
                    return Err(e);
                }
            },
            None => self.build(req.spec.clone()).await?,
        };
        let session = Session::assemble(req, self, parts);
        let id = session.id().to_owned();
        self.inner
            .sessions
            .lock()
            .map_err(|_| poisoned())?
            .insert(id, session.clone());
        self.watch(session.clone());
        Ok(session)
    }

    fn reserve(&self) -> Result<PendingSlot> {
        let live = self.inner.sessions.lock().map_err(|_| poisoned())?.len() as u64;
        let pending = self.inner.pending.fetch_add(1, Ordering::SeqCst);
        let slot = PendingSlot(self.inner.clone());
        if live + pending >= self.inner.config.max_sessions as u64 {
            return Err(SessionError::AtCapacity(format!(
                "{} sessions are alive, the most this server allows",
                self.inner.config.max_sessions
            )));
        }
        Ok(slot)
    }

    /// One request to the spawner and its reply (on a blocking thread: the
    /// spawner answers one request at a time).
    pub(crate) async fn ask(&self, request: Request) -> Result<(Reply, Vec<OwnedFd>)> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let socket = inner.spawner.lock().map_err(|_| poisoned())?;
            write_frame(&socket, &request, &[])
                .map_err(|e| SessionError::SpawnerGone(e.to_string()))?;
            match read_frame_with_fds::<Reply>(&socket) {
                Ok(Some(reply)) => Ok(reply),
                Ok(None) => Err(SessionError::SpawnerGone("it closed its socket".into())),
                Err(e) => Err(SessionError::SpawnerGone(e.to_string())),
            }
        })
        .await
        .map_err(|e| SessionError::SpawnerGone(e.to_string()))?
    }

    /// End the session when its init dies, when it idles too long, or at
    /// the end of its lifetime.
    fn watch(&self, session: Arc<Session>) {
        let engine = self.clone();
        tokio::spawn(async move {
            let cause = session.wait_for_end().await;
            let _ = engine.destroy(session.id(), cause).await;
        });
    }

    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.inner.sessions.lock().ok()?.get(id).cloned()
    }

    pub fn sessions(&self) -> Vec<Arc<Session>> {
        self.inner
            .sessions
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Tear the session down: every process in it, its root, its groups.
    pub async fn destroy(&self, id: &str, cause: EndCause) -> Result<Teardown> {
        self.inner.activity.notify_waiters();
        let session = self
            .inner
            .sessions
            .lock()
            .map_err(|_| poisoned())?
            .remove(id)
            .ok_or_else(|| SessionError::NotFound(format!("sandbox {id}")))?;
        session.mark_ended(cause);
        let clean = end_sandbox(&session.pidfd, &session.cgroup_dirs).await;
        self.forget(id);
        if !clean {
            tracing::warn!(session = id, "a cgroup of the session could not be removed");
        }
        Ok(Teardown {
            id: id.to_owned(),
            cause,
            clean,
        })
    }

    /// Tear every session down (SIGTERM of the server).
    pub async fn shutdown(&self) -> Vec<Teardown> {
        for pool in &self.inner.pools {
            for parts in pool.drain() {
                self.discard(parts).await;
            }
        }
        let mut done = Vec::new();
        for session in self.sessions() {
            if let Ok(t) = self.destroy(session.id(), EndCause::Shutdown).await {
                done.push(t);
            }
        }
        done
    }
}

/// A create in flight, counted against the capacity until dropped.
struct PendingSlot(Arc<Inner>);

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long a killed sandbox's init may take to be gone.
const END_TIMEOUT: Duration = Duration::from_secs(10);

/// Kill a sandbox from here (its pidfd), wait until its init has exited
/// (a PID namespace's init exits only once every process in it has), and
/// remove its groups. Returns whether everything is gone. The spawner,
/// told afterwards, only reaps the init.
async fn end_sandbox(pidfd: &OwnedFd, cgroup_dirs: &[PathBuf]) -> bool {
    let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL);
    let exited = match pidfd.try_clone() {
        Ok(own) => {
            // The AsyncFd owns its descriptor (the I/O-safety condition of
            // `AsyncFd::register`).
            #[allow(deprecated)]
            let watch = AsyncFd::with_interest(own, tokio::io::Interest::READABLE);
            match watch {
                Ok(fd) => tokio::time::timeout(END_TIMEOUT, fd.readable())
                    .await
                    .is_ok(),
                Err(_) => false,
            }
        }
        Err(_) => false,
    };
    // The groups are empty once the init is gone: removed at once, no
    // thread to wait on; the patient way (which sleeps between tries) on a
    // blocking thread otherwise.
    let removed = cordon_jail::cgroup::remove_dirs_now(cgroup_dirs) || {
        let dirs = cgroup_dirs.to_vec();
        tokio::task::spawn_blocking(move || cordon_jail::cgroup::remove_dirs(&dirs))
            .await
            .unwrap_or(false)
    };
    exited && removed
}

/// A reply other than the one asked for, as an error.
pub(crate) fn failure(reply: Reply) -> SessionError {
    match reply {
        Reply::Failed {
            layer: Some(layer),
            message,
            fix,
        } => SessionError::Jail(cordon_jail::JailError::Setup {
            layer,
            message,
            fix,
        }),
        Reply::Failed { message, .. } => SessionError::SpawnerGone(message),
        other => SessionError::SpawnerGone(format!("unexpected reply: {other:?}")),
    }
}

fn poisoned() -> SessionError {
    SessionError::Invalid("internal state poisoned by an earlier panic".into())
}

/// `prefix-` and 16 random hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    let mut b = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    format!("{prefix}-{:016x}", u64::from_le_bytes(b))
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One live sandbox.
#[derive(Debug)]
pub struct Session {
    id: String,
    owner: String,
    spec: cordon_jail::Spec,
    created: SystemTime,
    started: Instant,
    idle_timeout: Option<Duration>,
    ttl: Option<Duration>,
    /// The init's pid on the host (shown by `Debug`, for diagnostics).
    #[allow(dead_code)]
    pid: i32,
    pidfd: OwnedFd,
    cgroup_dirs: Vec<PathBuf>,
    usage_files: cordon_jail::session::UsageFiles,
    pipe_owner: Option<(u32, u32)>,
    /// Memory is RLIMIT_AS (no memory cgroup).
    memory_by_rlimit: bool,
    control: Arc<Control>,
    /// The init's `/` (see `open_root`), asked for on first use.
    root: tokio::sync::OnceCell<OwnedFd>,
    proxy_listener: Mutex<Option<std::net::TcpListener>>,
    /// Milliseconds since `started` of the last activity.
    last_active_ms: AtomicU64,
    ended: Mutex<Option<EndCause>>,
    end_signal: tokio::sync::Notify,
    /// Shared with the task that starts each exec (see [`Session::exec`]).
    processes: Arc<Mutex<Vec<Arc<Process>>>>,
    /// How many execs run; which finished ones keep their output.
    book: Arc<ExecBook>,
    next_process: AtomicU64,
    event_buffer: usize,
    /// The engine, for changes made through the spawner (widenings).
    engine: std::sync::Weak<Inner>,
    widenings: crate::widen::Widenings,
    /// The engine's (see `Inner::activity`).
    activity: Arc<tokio::sync::Notify>,
}

impl Session {
    fn assemble(req: CreateSession, engine: &Engine, parts: Parts) -> Arc<Session> {
        let config = &engine.inner.config;
        Arc::new(Session {
            id: parts.id,
            owner: req.owner,
            spec: req.spec,
            created: SystemTime::now(),
            started: Instant::now(),
            idle_timeout: req.idle_timeout,
            ttl: req.ttl,
            pid: parts.pid,
            pidfd: parts.pidfd,
            cgroup_dirs: parts.cgroup_dirs,
            usage_files: parts.usage_files,
            pipe_owner: parts.pipe_owner,
            memory_by_rlimit: parts.memory_by_rlimit,
            control: parts.control,
            root: tokio::sync::OnceCell::new(),
            proxy_listener: Mutex::new(parts.proxy_listener),
            last_active_ms: AtomicU64::new(0),
            ended: Mutex::new(None),
            end_signal: tokio::sync::Notify::new(),
            processes: Arc::new(Mutex::new(Vec::new())),
            book: Arc::new(ExecBook::new(config.finished_output, config.finished_kept)),
            next_process: AtomicU64::new(1),
            event_buffer: config.event_buffer,
            engine: Arc::downgrade(&engine.inner),
            widenings: crate::widen::Widenings::default(),
            activity: engine.inner.activity.clone(),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How the session ended, if it has. Unlike [`Session::info`] this
    /// reads nothing from the session's groups: for sweeps over every
    /// session.
    pub fn ended(&self) -> Option<EndCause> {
        self.ended.lock().ok().and_then(|e| *e)
    }

    pub fn info(&self) -> SessionInfo {
        let ended = self.ended();
        let usage = self.usage_files.read();
        let execs_total = self.processes.lock().map_or(0, |l| l.len()) as u64;
        SessionInfo {
            id: self.id.clone(),
            owner: self.owner.clone(),
            state: if ended.is_some() {
                SessionState::Ended
            } else {
                SessionState::Running
            },
            created_unix_ms: unix_ms(self.created),
            ended,
            usage: SessionUsage {
                memory_bytes: usage.memory_bytes,
                pids: usage.pids,
                cpu_usec: usage.cpu_usec,
                execs_total,
                execs_running: self.book.running() as u64,
            },
        }
    }

    /// The spec the sandbox was built from.
    pub fn spec(&self) -> &cordon_jail::Spec {
        &self.spec
    }

    /// The listener the sandbox's init opened in its network namespace
    /// (network mode proxy); the caller serves the egress proxy on it.
    /// `None` after the first call.
    pub fn take_proxy_listener(&self) -> Option<std::net::TcpListener> {
        self.proxy_listener.lock().ok()?.take()
    }

    /// The sandbox's root directory as its processes see it (O_PATH):
    /// resolve paths under it with `RESOLVE_IN_ROOT` so a planted symlink
    /// stays inside. The init opens its own `/` and hands it over once
    /// (its `/proc/<pid>/root` is closed to an unprivileged caller: the
    /// init is not dumpable); each call gets a duplicate.
    pub async fn open_root(&self) -> Result<OwnedFd> {
        self.ensure_running()?;
        let root = self
            .root
            .get_or_try_init(|| self.control.open_root())
            .await?;
        rustix::io::fcntl_dupfd_cloexec(root, 0)
            .map_err(|e| SessionError::io("duplicate the sandbox's root", e.into()))
    }

    /// The host uid and gid the sandbox's processes run as when they are
    /// not the server's own (a sandbox started by root runs as an id that
    /// is no one's). Work done in the sandbox's files on its behalf takes
    /// them (`files::as_sandbox_user`), so what it creates is the
    /// sandbox's and it can do no more than the sandbox could.
    pub fn host_ids(&self) -> Option<(u32, u32)> {
        self.pipe_owner
    }

    /// The egress hosts granted while it runs, which its proxy consults
    /// per connection: give it to the proxy
    /// (`cordon_egress::Egress::with_live_grants`).
    pub fn live_grants(&self) -> cordon_egress::LiveGrants {
        self.widenings.grants.clone()
    }

    fn widen_target(&self) -> Result<crate::widen::Target<'_>> {
        let inner = self
            .engine
            .upgrade()
            .ok_or_else(|| SessionError::Ended("the engine is shutting down".into()))?;
        Ok(crate::widen::Target {
            engine: Engine { inner },
            id: &self.id,
            spec: &self.spec,
            control: &self.control,
            has_cgroup: !self.cgroup_dirs.is_empty(),
        })
    }

    /// Widen the running sandbox; returns once the change is in effect
    /// (the next connection, exec or allocation sees it).
    pub async fn widen(&self, w: Widening) -> Result<WideningId> {
        self.ensure_running()?;
        self.widenings.widen(&self.widen_target()?, w, None).await
    }

    /// [`Session::widen`], narrowed by itself at `until` when given;
    /// `on_expiry` is told once that happened.
    pub async fn widen_until(
        self: &Arc<Self>,
        w: Widening,
        until: Option<SystemTime>,
        on_expiry: Option<crate::widen::ExpiryHook>,
    ) -> Result<WideningId> {
        self.ensure_running()?;
        let id = self
            .widenings
            .widen(&self.widen_target()?, w, until)
            .await?;
        if let Some(at) = until {
            crate::widen::expire_at(Arc::downgrade(self), id.clone(), at, on_expiry);
        }
        Ok(id)
    }

    /// Undo widening `id` exactly; returns once it is out of effect. A
    /// bind that cannot be detached ends the session instead: a revoked
    /// path must not stay reachable.
    pub async fn narrow(&self, id: WideningId) -> Result<()> {
        self.ensure_running()?;
        let bind = self
            .active_widenings()
            .iter()
            .any(|a| a.id == id && matches!(a.widening, Widening::Bind { .. }));
        let result = self.widenings.narrow(&self.widen_target()?, &id).await;
        if let (Err(e), true) = (&result, bind) {
            tracing::warn!(session = %self.id, grant = %id, "a bind could not be taken out; ending the sandbox: {e}");
            self.mark_ended(EndCause::Deleted);
        }
        result
    }

    /// The widenings in force.
    pub fn widenings(&self) -> Vec<(WideningId, Widening)> {
        self.active_widenings()
            .into_iter()
            .map(|a| (a.id, a.widening))
            .collect()
    }

    /// The memory and process limits in force: the spec's, raised by the
    /// active limits widenings.
    pub fn limits_in_force(&self) -> (Option<u64>, Option<u64>) {
        let mut limits = (self.spec.limits.memory, self.spec.limits.pids);
        for a in self.active_widenings() {
            if let Widening::Limits { memory, pids } = a.widening {
                limits = (limits.0.max(memory), limits.1.max(pids));
            }
        }
        limits
    }

    /// The widenings in force, with when each ends by itself.
    pub fn active_widenings(&self) -> Vec<ActiveWidening> {
        self.widenings.list()
    }

    /// Note activity (resets the idle timeout).
    pub fn touch(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.last_active_ms.store(now, Ordering::Relaxed);
    }

    fn ensure_running(&self) -> Result<()> {
        match self.ended.lock().map_err(|_| poisoned())?.as_ref() {
            Some(_) => Err(SessionError::Ended(self.id.clone())),
            None => Ok(()),
        }
    }

    /// Start a command in the session.
    pub async fn exec(&self, req: ExecRequest) -> Result<Arc<Process>> {
        self.ensure_running()?;
        self.touch();
        self.activity.notify_waiters();
        if req.argv.is_empty() {
            return Err(SessionError::Invalid("argv is empty".into()));
        }
        let running = self.book.running();
        if running >= self.control.max_execs {
            return Err(SessionError::AtCapacity(format!(
                "{running} commands are running in this sandbox, the most it allows"
            )));
        }
        let id = self.next_process.fetch_add(1, Ordering::SeqCst);
        let env = merged_env(&self.spec.env, &req.env);
        let cwd = req.cwd.clone().unwrap_or_else(|| self.spec.cwd.clone());
        // Once the order is sent the init may start the command at any
        // moment (at once, or after holding it at the process limit), so
        // the start runs in a task of its own that a caller who goes away
        // (a client that disconnects) cannot cancel: a command it started
        // is always listed, bounded by its timeout and killable, never
        // left running with no one to see it.
        let (control, book) = (self.control.clone(), self.book.clone());
        let with = StartWith {
            pipe_owner: self.pipe_owner,
            event_buffer: self.event_buffer,
            memory_by_rlimit: self.memory_by_rlimit,
        };
        let processes = self.processes.clone();
        tokio::spawn(async move {
            let process = Process::start(control, book, id, &req, env, cwd, with).await?;
            if let Ok(mut list) = processes.lock() {
                list.push(process.clone());
            }
            Ok(process)
        })
        .await
        .map_err(|e| SessionError::Invalid(format!("the exec's start did not finish: {e}")))?
    }

    pub fn process(&self, id: u64) -> Option<Arc<Process>> {
        self.processes
            .lock()
            .ok()?
            .iter()
            .find(|p| p.id() == id)
            .cloned()
    }

    pub fn processes(&self) -> Vec<Arc<Process>> {
        self.processes.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn mark_ended(&self, cause: EndCause) {
        if let Ok(mut ended) = self.ended.lock() {
            ended.get_or_insert(cause);
        }
        // Closing the control socket ends the init, and with it every
        // process of the sandbox.
        self.control.close();
        for p in self.processes() {
            p.session_ended();
        }
        self.end_signal.notify_waiters();
    }

    /// Resolves with the reason once the session should end by itself.
    async fn wait_for_end(&self) -> EndCause {
        // The watcher owns its own copy of the pidfd: the registration
        // can never outlive the descriptor (the I/O-safety condition of
        // `AsyncFd::register`, which `with_interest` meets for an owned fd).
        let Ok(own) = self.pidfd.try_clone() else {
            return EndCause::Died;
        };
        #[allow(deprecated)]
        let pidfd = match AsyncFd::with_interest(own, tokio::io::Interest::READABLE) {
            Ok(fd) => fd,
            Err(_) => return EndCause::Died,
        };
        loop {
            if self.ended.lock().map_or(true, |e| e.is_some()) {
                return EndCause::Deleted;
            }
            let now = self.started.elapsed();
            let mut deadline: Option<(Duration, EndCause)> = self.ttl.map(|t| (t, EndCause::Ttl));
            if let Some(idle) = self.idle_timeout {
                let busy = self.book.running() > 0;
                let last = Duration::from_millis(self.last_active_ms.load(Ordering::Relaxed));
                let at = if busy { now + idle } else { last + idle };
                if deadline.is_none_or(|(d, _)| at < d) {
                    deadline = Some((at, EndCause::IdleTimeout));
                }
            }
            if let Some((at, cause)) = deadline {
                if at <= now {
                    return cause;
                }
            }
            let sleep = deadline.map_or(Duration::from_secs(3600), |(at, _)| at - now);
            tokio::select! {
                _ = pidfd.readable() => return EndCause::Died,
                _ = tokio::time::sleep(sleep.min(Duration::from_secs(60))) => {}
                _ = self.end_signal.notified() => return EndCause::Deleted,
            }
        }
    }
}

/// The session's environment with the request's entries added or
/// replacing.
fn merged_env(base: &[(String, String)], extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = base
        .iter()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
        .cloned()
        .collect();
    env.extend(extra.iter().cloned());
    env
}

/// A built sandbox as the engine holds it, before it is a session.
#[derive(Debug)]
pub(crate) struct Parts {
    pub(crate) id: String,
    pid: i32,
    pub(crate) pidfd: OwnedFd,
    control: Arc<Control>,
    proxy_listener: Option<std::net::TcpListener>,
    cgroup_dirs: Vec<PathBuf>,
    /// Found when the sandbox is built, not on each `info`.
    usage_files: cordon_jail::session::UsageFiles,
    pipe_owner: Option<(u32, u32)>,
    memory_by_rlimit: bool,
}

impl Parts {
    /// The spawner's reply and the descriptors that came with it: the
    /// pidfd, the control socket, and the proxy listener when there is one.
    fn receive(id: String, created: Created, fds: Vec<OwnedFd>, max_execs: usize) -> Result<Parts> {
        let mut fds = fds.into_iter();
        let (Some(pidfd), Some(control)) = (fds.next(), fds.next()) else {
            return Err(SessionError::SpawnerGone(
                "the sandbox's descriptors did not arrive".into(),
            ));
        };
        let proxy_listener = if created.proxy {
            Some(std::net::TcpListener::from(fds.next().ok_or_else(
                || SessionError::SpawnerGone("the proxy listener did not arrive".into()),
            )?))
        } else {
            None
        };
        Ok(Parts {
            id,
            pid: created.pid,
            pidfd,
            control: Control::new(control, max_execs)?,
            proxy_listener,
            usage_files: cordon_jail::session::UsageFiles::find(&created.cgroup_dirs),
            cgroup_dirs: created.cgroup_dirs,
            pipe_owner: created.pipe_owner,
            memory_by_rlimit: created.memory_by_rlimit,
        })
    }
}
