//! Live escalation: a running session widened (an egress host, a host
//! path bound in, higher limits) and narrowed again, each change in effect
//! in the sandbox before the call returns.
//!
//! - Egress: a grant in the session's [`LiveGrants`], which its proxy
//!   consults per connection; narrowing revokes it, cutting the
//!   connections it admitted.
//! - Bind: attached into the live mount namespace by the spawner (a helper
//!   joins the sandbox's namespaces, as for a pool claim), then the init is
//!   told (later execs' Landlock covers it); narrowing detaches it and
//!   tells the init again.
//! - Limits: the cgroup's memory and process limits set by the spawner,
//!   the init's rlimits for later execs by telling it; a limit in force is
//!   the highest of the base and every active widening, so narrowing one
//!   restores what the rest allow.
//!
//! Ceilings are the caller's to check: the engine widens what it is told.

use std::path::PathBuf;
use std::sync::{Mutex, Weak};
use std::time::SystemTime;

use cordon_egress::{HostRule, LiveGrants};
use cordon_jail::session::{LateConfig, LiveBind};
use serde::{Deserialize, Serialize};

use crate::control::Control;
use crate::engine::{new_id, Engine, Session};
use crate::error::{Result, SessionError};
use crate::spawner::{Reply, Request};

/// One way to widen a running session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Widening {
    /// Connections to `host:port` through the session's egress proxy.
    Egress { host: String, port: u16 },
    /// The host tree at `host_path` bound at `sandbox_path`.
    Bind {
        host_path: PathBuf,
        sandbox_path: PathBuf,
        writable: bool,
    },
    /// Higher cgroup limits (bytes of memory, processes); `None` leaves
    /// that limit as it is.
    Limits {
        memory: Option<u64>,
        pids: Option<u64>,
    },
}

/// A widening's name, `gr-` and 16 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WideningId(pub String);

impl std::fmt::Display for WideningId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A widening in force.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ActiveWidening {
    pub id: WideningId,
    pub widening: Widening,
    /// When it is narrowed by itself (`None`: when asked, or with the
    /// session).
    pub until: Option<SystemTime>,
}

/// A session's widenings and what its init was last told.
#[derive(Debug, Default)]
pub(crate) struct Widenings {
    /// The proxy's live rule set (the server hands it to the proxy).
    pub(crate) grants: LiveGrants,
    active: Mutex<Vec<ActiveWidening>>,
    /// Changes one at a time; the init's configuration as last sent
    /// (`None` until the first widening computes it from the spec).
    change: tokio::sync::Mutex<Option<LateConfig>>,
}

/// What a change needs of its session.
pub(crate) struct Target<'a> {
    pub(crate) engine: Engine,
    pub(crate) id: &'a str,
    pub(crate) spec: &'a cordon_jail::Spec,
    pub(crate) control: &'a Control,
    pub(crate) has_cgroup: bool,
}

impl Widenings {
    pub(crate) fn list(&self) -> Vec<ActiveWidening> {
        self.active.lock().map(|a| a.clone()).unwrap_or_default()
    }

    pub(crate) async fn widen(
        &self,
        t: &Target<'_>,
        w: Widening,
        until: Option<SystemTime>,
    ) -> Result<WideningId> {
        let id = WideningId(new_id("gr"));
        let mut config = self.change.lock().await;
        if let Some(next) = self.apply(t, &id, &w, config.clone()).await? {
            *config = Some(next);
        }
        if let Ok(mut active) = self.active.lock() {
            active.push(ActiveWidening {
                id: id.clone(),
                widening: w,
                until,
            });
        }
        Ok(id)
    }

    /// Put `w` in force; returns the init's configuration after it (for
    /// binds and limits, which start from `config`).
    async fn apply(
        &self,
        t: &Target<'_>,
        id: &WideningId,
        w: &Widening,
        config: Option<LateConfig>,
    ) -> Result<Option<LateConfig>> {
        if let Widening::Egress { host, port } = w {
            if t.spec.network != cordon_jail::NetworkMode::Proxy {
                return Err(SessionError::Invalid(format!(
                        "this sandbox's network is {:?}, not the egress proxy: only a sandbox created with network through the proxy can be given a host",
                        t.spec.network
                    )));
            }
            self.grants.grant(&id.0, host_rule(host, *port)?);
            return Ok(None);
        }
        let mut config = match config {
            Some(c) => c,
            None => initial_config(t.spec)?,
        };
        match w {
            Widening::Egress { .. } => {}
            Widening::Bind {
                host_path,
                sandbox_path,
                writable,
            } => {
                let bind = LiveBind {
                    host_path: host_path.clone(),
                    path: sandbox_path.clone(),
                    writable: *writable,
                };
                if config.binds.iter().any(|b| b.path == *sandbox_path) {
                    return Err(SessionError::Invalid(format!(
                        "{} is already bound in this sandbox; narrow that first or pick another path",
                        sandbox_path.display()
                    )));
                }
                let request = Request::AttachLive {
                    id: t.id.to_owned(),
                    bind,
                };
                let planned = match t.engine.ask(request).await?.0 {
                    Reply::Attached { bind } => bind,
                    other => return Err(crate::engine::failure(other)),
                };
                config.binds.push(planned);
                if let Err(e) = t.control.configure(config.clone()).await {
                    let _ = detach(t, sandbox_path).await;
                    return Err(e);
                }
            }
            Widening::Limits { memory, pids } => {
                let base = (t.spec.limits.memory, t.spec.limits.pids);
                check_raise("memory", base.0, *memory)?;
                check_raise("pids", base.1, *pids)?;
                let mut all = self.limit_widenings(None);
                all.push((*memory, *pids));
                config.limits = limits_in_force(t, &config, base, &all).await?;
            }
        }
        Ok(Some(config))
    }

    /// Undo widening `id` exactly. On an error the widening stays listed
    /// (a retry can take it out), except a bind, whose session the caller
    /// ends.
    pub(crate) async fn narrow(&self, t: &Target<'_>, id: &WideningId) -> Result<()> {
        let mut config = self.change.lock().await;
        let Some(found) = self.list().into_iter().find(|a| a.id == *id) else {
            return Err(SessionError::NotFound(format!("grant {id}")));
        };
        if let Widening::Egress { .. } = found.widening {
            self.grants.revoke(&id.0);
            self.forget(id);
            return Ok(());
        }
        let mut current = match config.take() {
            Some(c) => c,
            None => initial_config(t.spec)?,
        };
        let result = match &found.widening {
            Widening::Egress { .. } => Ok(()),
            Widening::Bind { sandbox_path, .. } => {
                let detached = detach(t, sandbox_path).await;
                current.binds.retain(|b| b.path != *sandbox_path);
                self.forget(id);
                match detached {
                    Ok(()) => t.control.configure(current.clone()).await,
                    Err(e) => Err(e),
                }
            }
            Widening::Limits { .. } => {
                let base = (t.spec.limits.memory, t.spec.limits.pids);
                let rest = self.limit_widenings(Some(id));
                let set = limits_in_force(t, &current, base, &rest).await;
                set.map(|l| {
                    current.limits = l;
                    self.forget(id);
                })
            }
        };
        *config = Some(current);
        result
    }

    fn forget(&self, id: &WideningId) {
        if let Ok(mut active) = self.active.lock() {
            active.retain(|a| a.id != *id);
        }
    }

    /// The active limits widenings (but `except`).
    fn limit_widenings(&self, except: Option<&WideningId>) -> Vec<(Option<u64>, Option<u64>)> {
        self.list()
            .into_iter()
            .filter(|a| Some(&a.id) != except)
            .filter_map(|a| match a.widening {
                Widening::Limits { memory, pids } => Some((memory, pids)),
                _ => None,
            })
            .collect()
    }
}

/// The init's configuration before any widening: the spec's own binds,
/// overlay files and limits.
fn initial_config(spec: &cordon_jail::Spec) -> Result<LateConfig> {
    Ok(LateConfig {
        binds: cordon_jail::session::planned_binds(spec)?,
        limits: spec.limits.clone(),
        files: spec.files.iter().map(|f| f.path.clone()).collect(),
    })
}

/// `host:port` as a rule (IPv6 literals in brackets).
fn host_rule(host: &str, port: u16) -> Result<HostRule> {
    let text = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    HostRule::parse(&text).map_err(|e| SessionError::Invalid(format!("host {text}: {e}")))
}

/// A widening raises a limit or leaves it: never lowers it, never lifts
/// an unlimited one.
fn check_raise(what: &str, base: Option<u64>, asked: Option<u64>) -> Result<()> {
    match (base, asked) {
        (_, None) => Ok(()),
        (None, Some(_)) => Err(SessionError::Invalid(format!(
            "{what} is unlimited in this sandbox already; there is nothing to raise"
        ))),
        (Some(b), Some(a)) if a < b => Err(SessionError::Invalid(format!(
            "{what} {a} is below the sandbox's own limit {b}; a widening only raises it"
        ))),
        _ => Ok(()),
    }
}

/// Set the limits to the highest of the base and `widenings`, in the
/// cgroup and for later execs; returns the limits now in force.
async fn limits_in_force(
    t: &Target<'_>,
    config: &LateConfig,
    base: (Option<u64>, Option<u64>),
    widenings: &[(Option<u64>, Option<u64>)],
) -> Result<cordon_jail::Limits> {
    let memory = widenings.iter().filter_map(|w| w.0).chain(base.0).max();
    let pids = widenings.iter().filter_map(|w| w.1).chain(base.1).max();
    if t.has_cgroup {
        let request = Request::SetLimits {
            id: t.id.to_owned(),
            memory,
            pids,
        };
        match t.engine.ask(request).await?.0 {
            Reply::Done => {}
            other => return Err(crate::engine::failure(other)),
        }
    }
    let mut limits = config.limits.clone();
    limits.memory = memory;
    limits.pids = pids;
    let mut next = config.clone();
    next.limits = limits.clone();
    t.control.configure(next).await?;
    Ok(limits)
}

async fn detach(t: &Target<'_>, path: &std::path::Path) -> Result<()> {
    let request = Request::DetachLive {
        id: t.id.to_owned(),
        path: path.to_owned(),
    };
    match t.engine.ask(request).await?.0 {
        Reply::Done => Ok(()),
        other => Err(crate::engine::failure(other)),
    }
}

/// Told once a widening was narrowed by its expiry (or could not be): the
/// widening and the narrowing's result.
pub type ExpiryHook = Box<dyn FnOnce(&WideningId, &Result<()>) + Send + 'static>;

/// Narrow `id` at `until` (unless it was narrowed before, or the session
/// is gone), then tell `hook`.
pub(crate) fn expire_at(
    session: Weak<Session>,
    id: WideningId,
    until: SystemTime,
    hook: Option<ExpiryHook>,
) {
    tokio::spawn(async move {
        let wait = until.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::time::sleep(wait).await;
        let Some(session) = session.upgrade() else {
            return;
        };
        let result = session.narrow(id.clone()).await;
        match &result {
            Err(SessionError::NotFound(_)) | Err(SessionError::Ended(_)) => return,
            Err(e) => {
                tracing::warn!(session = session.id(), grant = %id, "cannot narrow at expiry: {e}")
            }
            Ok(()) => {}
        }
        if let Some(hook) = hook {
            hook(&id, &result);
        }
    });
}
