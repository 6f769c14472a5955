//! What every handler shares: the engine, the tokens, the audit log, the
//! server's limits, and what the server knows of each sandbox beyond the
//! engine (its preset, its hosts, its proxy).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_session::{Engine, Session};
use tokio::sync::oneshot;

use crate::audit::AuditLog;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::tokens::TokenStore;

/// The server's own bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A request body must have arrived within this.
    pub body_timeout: Duration,
    /// A request's headers must have arrived within this.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight and no bytes moving is
    /// closed after this.
    pub idle_timeout: Duration,
    /// Connections open at once; the next one is answered 429 and closed.
    pub max_connections: usize,
    /// Requests being handled at once; the next one is answered 429.
    pub max_requests: usize,
    /// A streamed reply sends a keepalive line at least this often.
    pub keepalive: Duration,
    /// Largest file one PUT of the files API may write (413 beyond).
    pub max_file_bytes: u64,
    /// Bytes the files API may write into one sandbox, all files together
    /// (507 beyond).
    pub files_quota_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connections: 1024,
            max_requests: 512,
            keepalive: Duration::from_secs(10),
            max_file_bytes: 256 << 20,
            files_quota_bytes: 1 << 30,
        }
    }
}

/// What the server keeps per sandbox.
#[derive(Debug)]
pub struct SandboxMeta {
    pub owner: String,
    pub preset: String,
    pub allow_net: Vec<String>,
    /// Stops the sandbox's egress proxy.
    pub proxy_stop: Option<oneshot::Sender<()>>,
}

/// Shared by every handler (cheap to clone).
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    engine: Option<Engine>,
    tokens: TokenStore,
    audit: AuditLog,
    limits: Limits,
    sandboxes: Mutex<HashMap<String, SandboxMeta>>,
    /// Creates in flight per owner (counted against `max_sandboxes`).
    reserved: Mutex<HashMap<String, usize>>,
    requests: Arc<tokio::sync::Semaphore>,
    files: crate::files::FilesState,
    contexts: crate::contexts::Contexts,
    console: cordon_console::ConsoleSessions,
    verifier: crate::timeline::Verifier,
    gate: Arc<cordon_approvals::Gate>,
    widened: crate::escalation::Widened,
    egress_notes: Arc<crate::egress_notes::EgressNotes>,
}

impl AppState {
    /// `engine` is `None` only where no sandbox can be made (printing the
    /// OpenAPI document, routing tests).
    /// `gate` is what every action passes (`cordon serve --policy`;
    /// [`crate::gate::in_memory`] for the builtin policy).
    pub fn new(
        engine: Option<Engine>,
        tokens: TokenStore,
        audit: AuditLog,
        limits: Limits,
        gate: Arc<cordon_approvals::Gate>,
    ) -> AppState {
        let requests = Arc::new(tokio::sync::Semaphore::new(limits.max_requests));
        AppState {
            inner: Arc::new(Inner {
                engine,
                tokens,
                audit,
                limits,
                sandboxes: Mutex::new(HashMap::new()),
                reserved: Mutex::new(HashMap::new()),
                requests,
                files: crate::files::FilesState::default(),
                contexts: crate::contexts::Contexts::default(),
                console: cordon_console::ConsoleSessions::default(),
                verifier: crate::timeline::Verifier::default(),
                gate,
                widened: crate::escalation::Widened::default(),
                egress_notes: Arc::default(),
            }),
        }
    }

    pub fn engine(&self) -> Result<&Engine, ApiError> {
        self.inner
            .engine
            .as_ref()
            .ok_or_else(|| ApiError::unavailable("this server has no sandbox engine"))
    }

    /// The Gate: policy, grants and approvals (see [`crate::gate`]).
    pub fn gate(&self) -> &Arc<cordon_approvals::Gate> {
        &self.inner.gate
    }

    /// What each sandbox's proxy refused lately (see [`crate::egress_notes`]).
    pub fn egress_notes(&self) -> &Arc<crate::egress_notes::EgressNotes> {
        &self.inner.egress_notes
    }

    /// The widenings made under approval grants (see [`crate::escalation`]).
    pub fn widened(&self) -> &crate::escalation::Widened {
        &self.inner.widened
    }

    pub fn tokens(&self) -> &TokenStore {
        &self.inner.tokens
    }

    /// The audit log: `state.audit().record(&caller, "file_write", Some(id), detail)`.
    pub fn audit(&self) -> &AuditLog {
        &self.inner.audit
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The files API's per-sandbox quotas.
    pub fn files(&self) -> &crate::files::FilesState {
        &self.inner.files
    }

    /// The sandboxes' code contexts.
    pub fn contexts(&self) -> &crate::contexts::Contexts {
        &self.inner.contexts
    }

    /// The web console's sessions (cookie logins).
    pub fn console(&self) -> &cordon_console::ConsoleSessions {
        &self.inner.console
    }

    /// The audit chain's check, one at a time and briefly remembered.
    pub(crate) fn verifier(&self) -> &crate::timeline::Verifier {
        &self.inner.verifier
    }

    pub(crate) fn requests(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.inner.requests
    }

    /// The live session `id` if `caller` may touch it; another token's
    /// sandbox answers 404 exactly like one that does not exist. Notes
    /// activity (the idle timeout starts again).
    pub fn session_for(&self, caller: &Caller, id: &str) -> Result<Arc<Session>, ApiError> {
        let missing = || {
            ApiError::not_found(format!("no sandbox '{id}'"))
                .with_fix("GET /v1/sandboxes lists the sandboxes you can use")
        };
        let session = self.engine()?.session(id).ok_or_else(missing)?;
        if !caller.may_see(session.owner()) {
            return Err(missing());
        }
        session.touch();
        Ok(session)
    }

    /// Run `f` on the server's record of sandbox `id`.
    pub fn with_meta<T>(&self, id: &str, f: impl FnOnce(&mut SandboxMeta) -> T) -> Option<T> {
        let mut map = self.inner.sandboxes.lock().ok()?;
        map.get_mut(id).map(f)
    }

    pub(crate) fn insert_meta(&self, id: String, meta: SandboxMeta) {
        if let Ok(mut map) = self.inner.sandboxes.lock() {
            map.insert(id, meta);
        }
    }

    pub(crate) fn remove_meta(&self, id: &str) -> Option<SandboxMeta> {
        self.inner.sandboxes.lock().ok()?.remove(id)
    }

    pub(crate) fn meta_ids(&self) -> Vec<String> {
        self.inner
            .sandboxes
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Take a slot of `caller`'s `max_sandboxes` for a create; the slot is
    /// given back when the returned guard goes.
    pub(crate) fn reserve(&self, caller: &Caller) -> Result<Reservation, ApiError> {
        let name = caller.name().to_owned();
        if let Some(ceiling) = caller.ceiling() {
            let alive = self
                .engine()?
                .sessions()
                .iter()
                .filter(|s| s.owner() == name && s.ended().is_none())
                .count();
            let mut reserved = self
                .inner
                .reserved
                .lock()
                .map_err(|_| ApiError::internal("reservation table poisoned"))?;
            let pending = reserved.get(&name).copied().unwrap_or(0);
            if alive + pending >= ceiling.max_sandboxes {
                return Err(ApiError::forbidden(format!(
                    "token '{name}' may have {} sandboxes at once and has {}",
                    ceiling.max_sandboxes,
                    alive + pending
                ))
                .with_fix("delete a sandbox first, or ask the owner for a token with a larger --max-sandboxes"));
            }
            *reserved.entry(name.clone()).or_insert(0) += 1;
        }
        Ok(Reservation {
            state: self.clone(),
            name,
            counted: caller.ceiling().is_some(),
        })
    }
}

/// A create's slot (see [`AppState::reserve`]).
#[derive(Debug)]
pub(crate) struct Reservation {
    state: AppState,
    name: String,
    counted: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        if let Ok(mut r) = self.state.inner.reserved.lock() {
            if let Some(n) = r.get_mut(&self.name) {
                *n = n.saturating_sub(1);
            }
        }
    }
}
