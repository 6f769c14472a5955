//! The engine: sessions by id, made by the spawner, torn down on request,
//! on idle timeout, at the end of their lifetime, or with the engine.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{Result, SessionError};
use crate::process::{Event, ExecRequest, ExitInfo};
use crate::spawner::Spawner;

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Most sessions alive at once (create beyond it: `SessionError::AtCapacity`).
    pub max_sessions: usize,
    /// Most execs running at once in one session.
    pub max_execs_per_session: usize,
    /// Output events kept per process for re-attaching (bytes).
    pub event_buffer: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_sessions: 1000,
            max_execs_per_session: 64,
            event_buffer: 4 << 20,
        }
    }
}

/// What a new session is made of.
#[derive(Debug, Clone)]
pub struct CreateSession {
    /// The sandbox (argv is ignored; `limits.wall` is the session's
    /// lifetime when `ttl` is not given).
    pub spec: cordon_jail::Spec,
    /// Ended after this long without an exec or file operation.
    pub idle_timeout: Option<Duration>,
    /// Ended this long after creation, whatever it does.
    pub ttl: Option<Duration>,
    /// Free text carried into `SessionInfo` (the server puts the token's
    /// name here).
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
    /// The groups and the init are gone (false: something is left and was
    /// logged).
    pub clean: bool,
}

/// The session engine. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Engine {
    _inner: Arc<()>,
}

impl Engine {
    /// Start the engine on a spawner forked earlier (inside a tokio
    /// runtime).
    pub fn new(_spawner: Spawner, _config: EngineConfig) -> Result<Engine> {
        Err(SessionError::Invalid("the engine is not built yet".into()))
    }

    pub async fn create(&self, _req: CreateSession) -> Result<Arc<Session>> {
        Err(SessionError::Invalid("the engine is not built yet".into()))
    }

    pub fn session(&self, _id: &str) -> Option<Arc<Session>> {
        None
    }

    pub fn sessions(&self) -> Vec<Arc<Session>> {
        Vec::new()
    }

    pub async fn destroy(&self, id: &str, _cause: EndCause) -> Result<Teardown> {
        Err(SessionError::NotFound(id.to_owned()))
    }

    /// Tear every session down (SIGTERM of the server).
    pub async fn shutdown(&self) -> Vec<Teardown> {
        Vec::new()
    }
}

/// One live sandbox.
#[derive(Debug)]
pub struct Session {
    id: String,
}

impl Session {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn info(&self) -> SessionInfo {
        unimplemented_info(&self.id)
    }

    /// The spec the sandbox was built from.
    pub fn spec(&self) -> &cordon_jail::Spec {
        unreachable_spec()
    }

    /// The listener the sandbox's init opened in its network namespace
    /// (network mode proxy); the caller serves the egress proxy on it.
    /// `None` after the first call.
    pub fn take_proxy_listener(&self) -> Option<std::net::TcpListener> {
        None
    }

    /// The sandbox's root directory as its processes see it
    /// (`/proc/<init>/root`, O_PATH): resolve paths under it with
    /// `RESOLVE_IN_ROOT` so a planted symlink stays inside.
    pub fn open_root(&self) -> Result<OwnedFd> {
        Err(SessionError::Ended(self.id.clone()))
    }

    /// Note activity (resets the idle timeout).
    pub fn touch(&self) {}

    pub async fn exec(&self, _req: ExecRequest) -> Result<Arc<Process>> {
        Err(SessionError::Ended(self.id.clone()))
    }

    pub fn process(&self, _id: u64) -> Option<Arc<Process>> {
        None
    }

    pub fn processes(&self) -> Vec<Arc<Process>> {
        Vec::new()
    }
}

fn unimplemented_info(id: &str) -> SessionInfo {
    SessionInfo {
        id: id.to_owned(),
        owner: String::new(),
        state: SessionState::Ended,
        created_unix_ms: SystemTime::UNIX_EPOCH
            .elapsed()
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        ended: None,
        usage: SessionUsage::default(),
    }
}

fn unreachable_spec() -> &'static cordon_jail::Spec {
    static SPEC: std::sync::OnceLock<cordon_jail::Spec> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| cordon_jail::Spec::new(Vec::new(), "/".into()))
}

/// One exec: a process tree in its own PID namespace inside the session.
#[derive(Debug)]
pub struct Process {
    id: u64,
}

impl Process {
    /// The process id the API shows (unique in the session).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Events after `after_seq` (0: from the start), waiting until there is
    /// at least one or the process has ended. Returns the events and
    /// whether the process has ended and everything was delivered.
    pub async fn events_after(&self, _after_seq: u64) -> (Vec<Event>, bool) {
        (Vec::new(), true)
    }

    /// Wait for the end.
    pub async fn wait(&self) -> ExitInfo {
        std::future::pending().await
    }

    /// How it ended, if it has.
    pub fn exit(&self) -> Option<ExitInfo> {
        None
    }

    /// Send a signal to the command's process group.
    pub fn signal(&self, _signal: i32) -> Result<()> {
        Err(SessionError::Ended(String::new()))
    }

    /// Kill the whole process tree.
    pub fn kill(&self) {}

    pub async fn write_stdin(&self, _data: &[u8]) -> Result<()> {
        Err(SessionError::Ended(String::new()))
    }

    pub fn close_stdin(&self) {}
}
