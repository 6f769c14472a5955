//! Each sandbox's egress proxy, served on the server's runtime on the
//! listener the sandbox's init opened; its decisions go to the audit log
//! under the sandbox's run.

use std::sync::Arc;

use cordon_egress::{EgressEvent, EventSink};
use tokio::sync::oneshot;

use crate::audit::AuditLog;
use crate::error::ApiError;

/// Where a sandbox's egress decisions go: the audit log, and the recent
/// answers an exec's reply says again ([`crate::egress_notes`]).
#[derive(Debug, Clone)]
pub struct Recorders {
    pub audit: AuditLog,
    pub notes: Arc<crate::egress_notes::EgressNotes>,
}

struct AuditSink {
    audit: AuditLog,
    sandbox: String,
    notes: Arc<crate::egress_notes::EgressNotes>,
}

impl EventSink for AuditSink {
    /// Noted before the sandbox is told, so the reply of the exec whose
    /// client it was (which may end the moment it reads the answer) says
    /// it again.
    fn refusing(&self, e: &EgressEvent) {
        if let Some(message) = &e.refusal {
            self.notes.note(&self.sandbox, &e.rule, message);
        }
    }

    fn record(&self, e: EgressEvent) {
        self.audit.egress(
            &self.sandbox,
            cordon_audit::Egress {
                method: e.method.clone(),
                host: e.host.clone(),
                port: e.port,
                path: e.path.clone(),
                bytes_sent: e.bytes_up,
                bytes_received: e.bytes_down,
                duration_ms: u64::try_from(e.duration.as_millis()).unwrap_or(u64::MAX),
                decision: match e.decision {
                    cordon_egress::Decision::Allow => cordon_audit::Decision::Allow,
                    cordon_egress::Decision::Deny => cordon_audit::Decision::Deny,
                },
                rule: Some(e.rule.clone()),
                reason: e.status.map(|s| format!("status {s}")),
            },
        );
    }
}

/// Hosts no rule of the profile covers, under `on_unlisted = "ask"`: the
/// Gate decides (a policy rule, a grant, or a human answering an approval
/// while the connection waits).
/// An approval granted for longer than once widens the session's proxy
/// rules for the grant's life ([`crate::escalation`]): later connections
/// go through without asking, and when the grant ends the host's open
/// connections are cut.
#[derive(Debug)]
pub struct GateApprover {
    pub state: crate::state::AppState,
    pub principal: cordon_authz::Principal,
}

/// The rule named when a connection is refused because the audit store
/// cannot record it.
pub const AUDIT_UNAVAILABLE: &str = "builtin:audit-unavailable";

/// The rule an unlisted host is asked about under.
pub const ON_UNLISTED_ASK: &str = "profile:network.on_unlisted=ask";

impl GateApprover {
    /// The egress action `host:port` from `sandbox_id`, with what the
    /// profile alone says about it.
    fn request(
        &self,
        sandbox_id: &str,
        host: &str,
        port: u16,
        default: cordon_authz::DefaultVerdict,
    ) -> cordon_authz::Request {
        let action = cordon_authz::Action::Egress {
            host: host.to_owned(),
            port,
        };
        let mut req = cordon_authz::Request::new(self.principal.clone(), action, default);
        req.session = Some(sandbox_id.to_owned());
        req
    }
}

impl cordon_egress::Approver for GateApprover {
    fn decide<'a>(
        &'a self,
        sandbox_id: &'a str,
        host: &'a str,
        port: u16,
    ) -> cordon_egress::BoxFuture<'a, bool> {
        Box::pin(async move {
            let default = cordon_authz::DefaultVerdict::Ask {
                rule: ON_UNLISTED_ASK.into(),
            };
            let req = self.request(sandbox_id, host, port, default);
            let Ok(allowed) = self.state.gate().check(req).await else {
                return false;
            };
            let session = self.state.engine().ok().and_then(|e| e.session(sandbox_id));
            if let (Some(session), Some(_)) = (session, &allowed.grant) {
                if allowed.scope != Some(cordon_approvals::Scope::Once) {
                    let w = cordon_session::Widening::Egress {
                        host: host.to_owned(),
                        port,
                    };
                    let actor = "approvals";
                    let widened =
                        crate::escalation::widen(&self.state, actor, &session, w, None, &allowed);
                    if let Err(e) = widened.await {
                        tracing::warn!("egress grant for {host}:{port} in {sandbox_id}: {e}");
                    }
                }
            }
            true
        })
    }

    /// An unlisted host under ask: refused up front while the audit store
    /// cannot record it (saying so), otherwise [`Self::decide`]'s answer.
    fn ruling<'a>(
        &'a self,
        sandbox_id: &'a str,
        host: &'a str,
        port: u16,
    ) -> cordon_egress::BoxFuture<'a, Option<cordon_egress::Ruling>> {
        Box::pin(async move {
            if let Some(refused) = unrecordable(self.state.audit(), host, port) {
                return Some(refused);
            }
            self.decide(sandbox_id, host, port)
                .await
                .then(|| cordon_egress::Ruling::Allow {
                    rule: "ask:approved".into(),
                })
        })
    }

    /// With a policy file, a host the profile's allow list or a live grant
    /// admits is still an egress action the policy decides: an explicit
    /// `forbid` wins over the allow list (docs/policy.md). Without a
    /// store that can record it, no connection is made at all: the
    /// refusal's own event waits in the writer's queue, which keeps the
    /// writer retrying.
    fn review<'a>(
        &'a self,
        sandbox_id: &'a str,
        host: &'a str,
        port: u16,
        rule: &'a str,
    ) -> cordon_egress::BoxFuture<'a, Option<cordon_egress::Ruling>> {
        Box::pin(async move {
            if let Some(refused) = unrecordable(self.state.audit(), host, port) {
                return Some(refused);
            }
            if !self.state.gate().has_policy_file() {
                return None;
            }
            let default = cordon_authz::DefaultVerdict::Allow {
                rule: format!("profile:{rule}"),
            };
            let req = self.request(sandbox_id, host, port, default);
            match self.state.gate().check(req).await {
                Ok(_) => None,
                Err(refusal) => Some(cordon_egress::Ruling::Deny {
                    rule: refusal.rule.id.clone(),
                    message: format!("cordon: {}", refusal.message),
                }),
            }
        })
    }
}

/// The refusal of a connection the audit store cannot record now.
fn unrecordable(audit: &AuditLog, host: &str, port: u16) -> Option<cordon_egress::Ruling> {
    let error = audit.failing()?;
    Some(cordon_egress::Ruling::Deny {
        rule: AUDIT_UNAVAILABLE.into(),
        message: format!(
            "cordon: egress to {host}:{port} refused: the audit store cannot record it ({error})"
        ),
    })
}

/// The approver of a proxy without a Gate (`cordon mcp`'s own engine):
/// refuses unlisted hosts, as no approver would, and any connection the
/// audit store cannot record.
#[derive(Debug)]
struct AuditGuard {
    audit: AuditLog,
}

impl cordon_egress::Approver for AuditGuard {
    fn decide<'a>(&'a self, _: &'a str, _: &'a str, _: u16) -> cordon_egress::BoxFuture<'a, bool> {
        Box::pin(async { false })
    }

    fn review<'a>(
        &'a self,
        _sandbox_id: &'a str,
        host: &'a str,
        port: u16,
        _rule: &'a str,
    ) -> cordon_egress::BoxFuture<'a, Option<cordon_egress::Ruling>> {
        Box::pin(async move { unrecordable(&self.audit, host, port) })
    }
}

/// Serve the proxy for `sandbox` until the returned sender is dropped or
/// fired; `approver` decides unlisted hosts under `on_unlisted = "ask"`
/// (none: they are refused, and so is every connection while the audit
/// store cannot record it); its decisions go to `recorders`.
pub fn start(
    profile: &cordon_policy::Profile,
    sandbox: &str,
    listener: std::net::TcpListener,
    recorders: Recorders,
    identity: Option<cordon_egress::Identity>,
    grants: cordon_egress::LiveGrants,
    approver: Option<GateApprover>,
) -> Result<oneshot::Sender<()>, ApiError> {
    let config = cordon_plan::egress::config(profile, sandbox, &[]);
    let mut egress = cordon_egress::Egress::new(config)
        .map_err(|e| ApiError::unprocessable(format!("the sandbox's egress rules: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| ApiError::internal(format!("the sandbox's proxy listener: {e}")))?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| ApiError::internal(format!("the sandbox's proxy listener: {e}")))?;
    let guard = AuditGuard {
        audit: recorders.audit.clone(),
    };
    let sink = Arc::new(AuditSink {
        audit: recorders.audit,
        sandbox: sandbox.to_owned(),
        notes: recorders.notes,
    });
    // Hosts granted while it runs (crate::grants).
    egress = egress.with_sink(sink).with_live_grants(grants);
    egress = match approver {
        Some(a) => egress.with_approver(Arc::new(a)),
        None => egress.with_approver(Arc::new(guard)),
    };
    if let Some(id) = identity {
        egress = egress.with_tls_interceptor(Arc::new(id));
    }
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        egress.serve(listener, shutdown).await;
    });
    Ok(stop)
}
