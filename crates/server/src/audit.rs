//! The server's one audit writer. A sandbox is a run in the store (started
//! when it is created, ended when it goes); every API action is an
//! `api_action` record with the caller's name, under the sandbox's run id
//! (or the server's own run for actions on no sandbox).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cordon_audit::{ApiAction, AuditWriter, EndReason, RunEnded, RunStarted};
use serde_json::{json, Value};

use crate::auth::Caller;

/// A cheap handle on the writer; `None` when auditing is off.
#[derive(Debug, Clone)]
pub struct AuditLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    writer: Option<AuditWriter>,
    server_run: String,
    /// sandbox id -> run id
    runs: Mutex<HashMap<String, String>>,
    /// Refusals since the store last took a commit (see
    /// [`AuditLog::ready_for`]).
    refusals: AtomicU64,
}

/// The refusals of one failure of the store recorded one by one; the
/// rest are counted in the log only, so that a client retrying against a
/// broken store cannot grow the writer's queue without bound. (A refusal
/// is not an action: nothing was done.)
const REFUSALS_RECORDED: u64 = 1000;

impl AuditLog {
    pub fn new(writer: Option<AuditWriter>) -> AuditLog {
        AuditLog {
            inner: Arc::new(Inner {
                writer,
                server_run: cordon_audit::new_run_id(),
                runs: Mutex::new(HashMap::new()),
                refusals: AtomicU64::new(0),
            }),
        }
    }

    /// Auditing off (tests of the routing, `--no-audit`).
    pub fn disabled() -> AuditLog {
        AuditLog::new(None)
    }

    fn append(&self, run_id: &str, event: impl Into<cordon_audit::Event>) {
        if let Some(w) = &self.inner.writer {
            if let Err(e) = w.append(run_id, event) {
                tracing::warn!("audit: {e}");
            }
        }
    }

    fn run_of(&self, sandbox: Option<&str>) -> String {
        sandbox
            .and_then(|id| self.inner.runs.lock().ok()?.get(id).cloned())
            .unwrap_or_else(|| self.inner.server_run.clone())
    }

    /// The server started (its own run).
    pub fn server_started(&self, argv: Vec<String>, detail: Value) {
        self.append(
            &self.inner.server_run,
            RunStarted {
                argv,
                cordon_version: env!("CARGO_PKG_VERSION").to_owned(),
                profile_name: Some("server".into()),
                enforcement: detail,
                ..RunStarted::default()
            },
        );
    }

    /// The store's path; `None` when auditing is off.
    pub fn store_path(&self) -> Option<&std::path::Path> {
        self.inner.writer.as_ref().map(AuditWriter::path)
    }

    /// The run of a live sandbox.
    pub fn live_run(&self, sandbox: &str) -> Option<String> {
        self.inner.runs.lock().ok()?.get(sandbox).cloned()
    }

    /// This server's own run id.
    pub fn server_run(&self) -> &str {
        &self.inner.server_run
    }

    /// End a run a previous server left open (see `lost.rs`).
    pub(crate) fn lost(&self, run_id: &str, sandbox: Option<&str>, detail: Value) {
        self.append(
            run_id,
            ApiAction {
                actor: "server".into(),
                action: "lost".into(),
                sandbox: sandbox.map(str::to_owned),
                detail,
            },
        );
        self.append(run_id, ended(EndReason::Killed));
    }

    /// The server stopped.
    pub fn server_stopped(&self, detail: Value) {
        self.action_by("server", "shutdown", None, detail);
        self.append(&self.inner.server_run, ended(EndReason::Killed));
    }

    /// A sandbox was made: it becomes a run in the store.
    pub fn sandbox_created(&self, caller: &Caller, id: &str, profile_name: &str, detail: Value) {
        let run = cordon_audit::new_run_id();
        if let Ok(mut runs) = self.inner.runs.lock() {
            runs.insert(id.to_owned(), run.clone());
        }
        self.append(
            &run,
            RunStarted {
                argv: Vec::new(),
                cwd: None,
                profile_name: Some(profile_name.to_owned()),
                enforcement: json!({"sandbox": id, "owner": caller.name(), "server_run": self.inner.server_run}),
                cordon_version: env!("CARGO_PKG_VERSION").to_owned(),
                ..RunStarted::default()
            },
        );
        self.record(caller, "create", Some(id), detail);
    }

    /// A sandbox is gone (deleted, timed out, died, shut down).
    pub fn sandbox_ended(&self, actor: &str, id: &str, cause: &str, clean: bool) {
        self.action_by(
            actor,
            "end",
            Some(id),
            json!({"cause": cause, "clean": clean}),
        );
        let run = self.inner.runs.lock().ok().and_then(|mut r| r.remove(id));
        if let Some(run) = run {
            let reason = if cause == "died" {
                EndReason::Signal
            } else {
                EndReason::Killed
            };
            self.append(&run, ended(reason));
        }
    }

    /// One API action by `caller` (the files and contexts routes call
    /// this too: `file_write`, `file_read`, `file_delete`, `context_run`, ...).
    pub fn record(&self, caller: &Caller, action: &str, sandbox: Option<&str>, detail: Value) {
        self.action_by(caller.name(), action, sandbox, detail);
    }

    /// [`AuditLog::record`] for an actor named directly (a grant given
    /// on someone's decision).
    pub fn record_by(&self, actor: &str, action: &str, sandbox: Option<&str>, detail: Value) {
        self.action_by(actor, action, sandbox, detail);
    }

    fn action_by(&self, actor: &str, action: &str, sandbox: Option<&str>, detail: Value) {
        let run = self.run_of(sandbox);
        self.append(
            &run,
            ApiAction {
                actor: actor.to_owned(),
                action: action.to_owned(),
                sandbox: sandbox.map(str::to_owned),
                detail,
            },
        );
    }

    /// Wait until everything recorded is on disk.
    pub fn flush(&self) {
        if let Some(w) = &self.inner.writer {
            if let Err(e) = w.flush() {
                tracing::warn!("audit flush: {e}");
            }
        }
    }

    /// Wait until everything recorded is committed to the store's files
    /// (it survives the death of this process), not for the disk: the
    /// sync for a power loss follows at once on the writer's thread. An
    /// error when the commit failed (the records stay queued and are
    /// tried again).
    pub async fn committed(&self) -> Result<(), String> {
        let Some(w) = &self.inner.writer else {
            return Ok(());
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        w.committed_then(move |r| {
            let _ = tx.send(r);
        })
        .map_err(|e| e.to_string())?;
        match rx.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("the audit writer has stopped".into()),
        }
    }

    /// Why the store cannot take records now (its last commit failed, or
    /// the writer stopped); `None` when it can, or auditing is off.
    pub fn failing(&self) -> Option<String> {
        self.inner.writer.as_ref().and_then(AuditWriter::failing)
    }

    /// Refuse an action while the store cannot keep its record: the
    /// server does nothing it cannot record. The refusal itself is
    /// recorded (queued), so the writer keeps trying the store, and
    /// actions resume once a commit goes through.
    pub fn ready_for(
        &self,
        caller: &Caller,
        sandbox: Option<&str>,
        action: Value,
    ) -> Result<(), crate::error::ApiError> {
        let Some(error) = self.failing() else {
            self.inner.refusals.store(0, Ordering::Relaxed);
            return Ok(());
        };
        let n = self.inner.refusals.fetch_add(1, Ordering::Relaxed);
        if n < REFUSALS_RECORDED {
            self.record(
                caller,
                "refused_unrecorded",
                sandbox,
                json!({"action": action, "audit_error": error}),
            );
        } else if n.is_multiple_of(REFUSALS_RECORDED) {
            tracing::warn!("audit: {n} actions refused while the store cannot be written: {error}");
        }
        Err(crate::error::ApiError::audit_unavailable(
            &error,
            self.store_path(),
        ))
    }

    /// An egress decision of a sandbox's proxy.
    pub fn egress(&self, sandbox: &str, event: cordon_audit::Egress) {
        let run = self.run_of(Some(sandbox));
        self.append(&run, event);
    }
}

/// Every decision of the Gate is a `decision` record (under the sandbox's
/// run when it is about one) with the rule that made it.
impl cordon_approvals::DecisionLog for AuditLog {
    fn decided(&self, r: &cordon_approvals::DecisionRecord) {
        let detail = serde_json::to_value(r).unwrap_or(Value::Null);
        self.action_by(&r.principal, "decision", r.session.as_deref(), detail);
    }
}

impl AuditLog {
    /// An approval was asked, answered or expired (`approval_created`,
    /// `approval_decided`, `approval_expired`), or a grant started or ended.
    pub fn approval_event(&self, e: &cordon_approvals::ApprovalEvent) {
        use cordon_approvals::ApprovalEvent as E;
        let (actor, action, session, detail) = match e {
            E::Created(a) => (
                a.principal.clone(),
                "approval_created",
                a.session.clone(),
                serde_json::to_value(a),
            ),
            E::Decided(a) => (
                a.decided_by.clone().unwrap_or_default(),
                "approval_decided",
                a.session.clone(),
                serde_json::to_value(a),
            ),
            E::Expired(a) => (
                "server".into(),
                "approval_expired",
                a.session.clone(),
                serde_json::to_value(a),
            ),
            E::GrantStarted(g) => (
                "server".into(),
                "grant_started",
                g.session.clone(),
                serde_json::to_value(g),
            ),
            E::GrantEnded { grant, why } => (
                "server".into(),
                "grant_ended",
                grant.session.clone(),
                serde_json::to_value(json!({"grant": grant, "why": why})),
            ),
        };
        self.action_by(
            &actor,
            action,
            session.as_deref(),
            detail.unwrap_or(Value::Null),
        );
    }
}

fn ended(reason: EndReason) -> RunEnded {
    RunEnded {
        reason,
        exit_code: None,
        signal: None,
        wall_ms: 0,
        user_ms: 0,
        sys_ms: 0,
        peak_memory_bytes: None,
        stdout: Default::default(),
        stderr: Default::default(),
        enforcement: Value::Null,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// While the store fails, refusals are recorded one by one up to
    /// [`REFUSALS_RECORDED`]; a client that keeps retrying does not grow
    /// the writer's queue beyond that. After the store is back, the count
    /// starts again.
    #[test]
    fn refusals_of_one_failure_are_recorded_up_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.db");
        let writer = AuditWriter::open(&path).unwrap();
        let log = AuditLog::new(Some(writer));
        let owner = Caller::owner();
        log.record(&owner, "before", None, json!({}));
        log.flush();
        assert!(log.ready_for(&owner, None, json!("x")).is_ok());
        let head = cordon_audit::chain::head_file_path(&path);
        std::fs::remove_file(&head).unwrap();
        std::fs::create_dir(&head).unwrap();
        log.record(&owner, "finds the failure", None, json!({}));
        log.flush();
        for _ in 0..REFUSALS_RECORDED + 50 {
            let refused = log.ready_for(&owner, None, json!("x")).unwrap_err();
            assert_eq!(refused.code, "audit_unavailable");
        }
        std::fs::remove_dir(&head).unwrap();
        log.flush();
        assert!(log.failing().is_none());
        assert!(log.ready_for(&owner, None, json!("x")).is_ok());
        assert_eq!(log.inner.refusals.load(Ordering::Relaxed), 0);
        let store = cordon_audit::AuditStore::open(&path).unwrap();
        let refusals = store
            .tail(5000)
            .unwrap()
            .iter()
            .filter(|r| r.body["action"] == "refused_unrecorded")
            .count();
        assert_eq!(refusals as u64, REFUSALS_RECORDED);
    }
}
