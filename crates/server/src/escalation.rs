//! Approved grants that widen a running sandbox (an egress host, a bind,
//! higher limits) last exactly as long as the grant: each widening made
//! under a grant is remembered here, and when the grant ends (its session
//! ended, its duration passed, it was revoked) the widening is narrowed
//! again; for an egress host that cuts its open connections.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use cordon_approvals::{Allowed, ApprovalEvent, Grant, Scope};
use cordon_session::{Session, Widening, WideningId};
use tokio::sync::broadcast::error::RecvError;

use crate::error::ApiError;
use crate::grants::GrantView;
use crate::state::AppState;

/// grant id -> the widenings made under it: (sandbox, widening).
#[derive(Debug, Default)]
pub struct Widened(Mutex<HashMap<String, Vec<(String, WideningId)>>>);

impl Widened {
    fn add(&self, grant: &str, sandbox: &str, id: WideningId) {
        if let Ok(mut m) = self.0.lock() {
            m.entry(grant.to_owned())
                .or_default()
                .push((sandbox.to_owned(), id));
        }
    }

    fn take(&self, grant: &str) -> Vec<(String, WideningId)> {
        self.0
            .lock()
            .ok()
            .and_then(|mut m| m.remove(grant))
            .unwrap_or_default()
    }
}

/// The live grant `allowed` came through, if it outlasts this one call.
fn lasting_grant(state: &AppState, session: &str, allowed: &Allowed) -> Option<Grant> {
    let gid = allowed.grant.as_deref()?;
    if allowed.scope == Some(Scope::Once) {
        return None;
    }
    let grants = state.gate().approvals();
    let mine = grants.live_grants(None, Some(session)).ok()?;
    let any = grants.live_grants(None, None).ok()?;
    mine.into_iter().chain(any).find(|g| g.id == gid)
}

/// Widen `session` as the Gate allowed: under a lasting grant the widening
/// ends with the grant (and at the grant's time, if it has one, or
/// `until`, whichever is first); otherwise at `until`.
pub async fn widen(
    state: &AppState,
    actor: &str,
    session: &std::sync::Arc<Session>,
    widening: Widening,
    until: Option<SystemTime>,
    allowed: &Allowed,
) -> Result<GrantView, ApiError> {
    let grant = lasting_grant(state, session.id(), allowed);
    let until = match (until, grant.as_ref().and_then(Grant::until)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let view = crate::grants::apply(state, actor, session, widening, until).await?;
    if let Some(g) = grant {
        state
            .widened()
            .add(&g.id, session.id(), WideningId(view.id.clone()));
    }
    Ok(view)
}

/// Narrow every widening of a grant that ended.
async fn narrow(state: &AppState, grant: &Grant) {
    for (sb, wid) in state.widened().take(&grant.id) {
        let Some(session) = state.engine().ok().and_then(|e| e.session(&sb)) else {
            continue;
        };
        if let Err(e) = crate::grants::revoke(state, "approvals", &session, &wid.0).await {
            tracing::debug!("grant {}: narrowing {sb}: {e}", grant.id);
        }
    }
}

/// Follow the approvals' events: a grant that ends narrows what was
/// widened under it.
pub fn start(state: AppState) {
    let mut events = state.gate().approvals().subscribe();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(ApprovalEvent::GrantEnded { grant, .. }) => narrow(&state, &grant).await,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    });
}
