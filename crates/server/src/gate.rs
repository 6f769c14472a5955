//! Every API action through the Gate before it runs: the policy decides
//! (with what the profile or token alone says as its default), a grant
//! may lift an ask, an ask waits for a human, and the decision is in the
//! audit store with its rule. A refusal is a 403 naming the subject, the
//! rule and the grant that would allow it.

use std::sync::Arc;

use cordon_approvals::{Allowed, Approvals, Gate, DEFAULT_TIMEOUT};
use cordon_authz::{Action, DefaultVerdict, Request};

use crate::audit::AuditLog;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The rule named when the profile or token allows an action and no
/// policy rule matches.
pub const PROFILE_ALLOWS: &str = "builtin:profile-default";

/// A Gate with the builtin policy and approvals in memory (a server
/// without a state directory: routing tests).
pub fn in_memory(audit: &AuditLog) -> Result<Arc<Gate>, String> {
    let store = Approvals::open(std::path::Path::new(":memory:")).map_err(|e| e.to_string())?;
    let log: Arc<dyn cordon_approvals::DecisionLog> = Arc::new(audit.clone());
    Gate::new(Arc::new(store), None, DEFAULT_TIMEOUT, log)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// A request of `caller` for `action` (in sandbox `session`), which the
/// profile or token alone answers with `default`.
pub fn request(
    caller: &Caller,
    session: Option<&str>,
    action: Action,
    default: DefaultVerdict,
) -> Request {
    let mut r = Request::new(caller.principal(), action, default);
    r.session = session.map(str::to_owned);
    r
}

impl AppState {
    /// Pass `action` through the Gate; the profile or token allows it
    /// (checks of their own ran before). Refused (503) while the audit
    /// store cannot keep the action's record: before the Gate, and again
    /// after it, since an ask may wait minutes for its human.
    pub async fn check(
        &self,
        caller: &Caller,
        session: Option<&str>,
        action: Action,
    ) -> Result<Allowed, ApiError> {
        let asked = serde_json::to_value(&action).unwrap_or_default();
        self.audit().ready_for(caller, session, asked.clone())?;
        let req = request(
            caller,
            session,
            action,
            DefaultVerdict::Allow {
                rule: PROFILE_ALLOWS.into(),
            },
        );
        let allowed = self.gate().check(req).await?;
        self.audit().ready_for(caller, session, asked)?;
        Ok(allowed)
    }

    /// Record a refusal of the token's ceiling as the Gate's decision (a
    /// ceiling no rule lifts), and give back the ceiling's own error.
    pub async fn ceiling_refused(
        &self,
        caller: &Caller,
        session: Option<&str>,
        action: Action,
        err: ApiError,
    ) -> ApiError {
        let mut req = request(
            caller,
            session,
            action,
            DefaultVerdict::Deny {
                rule: "builtin:ceiling".into(),
            },
        );
        req.ceiling = Some(err.message.clone());
        let _ = self.gate().check(req).await;
        err
    }
}
