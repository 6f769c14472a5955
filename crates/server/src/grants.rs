//! Live escalation over HTTP (`/v1/sandboxes/{id}/grants`): a running
//! sandbox widened (an egress host, a host path bound in, higher limits)
//! and narrowed again, through the session engine
//! (`cordon_session::Session::widen`).
//!
//! [`apply`] is the one way in: it checks the sandbox owner's ceiling (a
//! widening never goes past it, whoever approved it), widens, and records
//! the grant. A widening passes the Gate first: the owner's is allowed
//! unless the policy says otherwise, a token's asks an approver; one
//! allowed through an approval's grant ends with that grant
//! ([`crate::escalation`]). Anyone who may see the sandbox may list and
//! narrow its grants (narrowing only takes access away).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, post};
use axum::{Json, Router};
use cordon_authz::{Action, DefaultVerdict};
use cordon_session::{ActiveWidening, Session, Widening, WideningId};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;
use crate::wire::{DurationValue, SizeValue};

/// Longest `expires_in` accepted.
const MAX_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// `POST /v1/sandboxes/{id}/grants`: one widening. `kind` says which
/// fields apply.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// `egress`, `bind` or `limits`.
    pub kind: String,
    /// egress: the host (a name or an IP address; not a pattern).
    pub host: Option<String>,
    /// egress: the port.
    pub port: Option<u16>,
    /// bind: the absolute host path to bind in.
    pub host_path: Option<String>,
    /// bind: where it appears inside (default: the host path). Every
    /// directory above it must be read-only inside the sandbox (not under
    /// /tmp, /workspace or a writable bind).
    pub path: Option<String>,
    /// bind: writable (default read-only).
    #[serde(default)]
    pub writable: bool,
    /// limits: the memory limit to raise to.
    pub memory: Option<SizeValue>,
    /// limits: the process limit to raise to.
    pub pids: Option<u64>,
    /// Narrowed by itself after this long (default: when deleted, or with
    /// the sandbox).
    pub expires_in: Option<DurationValue>,
}

/// A grant in force.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GrantView {
    pub id: String,
    /// `egress`, `bind` or `limits`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// When it ends by itself (Unix ms), if it does.
    pub expires_unix_ms: Option<u64>,
}

/// `GET /v1/sandboxes/{id}/grants`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GrantList {
    pub grants: Vec<GrantView>,
}

impl From<&ActiveWidening> for GrantView {
    fn from(a: &ActiveWidening) -> GrantView {
        let mut v = GrantView {
            id: a.id.0.clone(),
            kind: String::new(),
            host: None,
            port: None,
            host_path: None,
            path: None,
            writable: None,
            memory_bytes: None,
            pids: None,
            expires_unix_ms: a.until.map(unix_ms),
        };
        match &a.widening {
            Widening::Egress { host, port } => {
                v.kind = "egress".into();
                v.host = Some(host.clone());
                v.port = Some(*port);
            }
            Widening::Bind {
                host_path,
                sandbox_path,
                writable,
            } => {
                v.kind = "bind".into();
                v.host_path = Some(host_path.display().to_string());
                v.path = Some(sandbox_path.display().to_string());
                v.writable = Some(*writable);
            }
            Widening::Limits { memory, pids } => {
                v.kind = "limits".into();
                v.memory_bytes = *memory;
                v.pids = *pids;
            }
        }
        v
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sandboxes/{id}/grants", post(create).get(list))
        .route("/v1/sandboxes/{id}/grants/{gid}", delete(remove))
}

/// The request as a widening and its expiry.
pub fn widening_of(req: &GrantRequest) -> Result<(Widening, Option<Duration>), ApiError> {
    let need =
        |field: &str| ApiError::bad_request(format!("a {} grant needs \"{field}\"", req.kind));
    let widening = match req.kind.as_str() {
        "egress" => Widening::Egress {
            host: req.host.clone().ok_or_else(|| need("host"))?,
            port: req.port.ok_or_else(|| need("port"))?,
        },
        "bind" => {
            let host_path =
                PathBuf::from(req.host_path.as_deref().ok_or_else(|| need("host_path"))?);
            let sandbox_path = req
                .path
                .as_deref()
                .map_or_else(|| host_path.clone(), PathBuf::from);
            for (field, p) in [("host_path", &host_path), ("path", &sandbox_path)] {
                if !p.is_absolute() {
                    return Err(ApiError::bad_request(format!(
                        "{field}: '{}' is not an absolute path",
                        p.display()
                    )));
                }
            }
            Widening::Bind {
                host_path,
                sandbox_path,
                writable: req.writable,
            }
        }
        "limits" => {
            let memory = req
                .memory
                .as_ref()
                .map(|m| m.to_bytes("memory"))
                .transpose()?;
            if memory.is_none() && req.pids.is_none() {
                return Err(ApiError::bad_request(
                    "a limits grant needs \"memory\" or \"pids\"",
                ));
            }
            Widening::Limits {
                memory,
                pids: req.pids,
            }
        }
        other => {
            return Err(
                ApiError::bad_request(format!("kind: '{other}' is not a grant kind"))
                    .with_fix("use \"egress\", \"bind\" or \"limits\""),
            )
        }
    };
    let expires = req
        .expires_in
        .as_ref()
        .map(|d| d.to_duration("expires_in"))
        .transpose()?;
    if let Some(d) = expires {
        if d.is_zero() || d > MAX_EXPIRY {
            return Err(ApiError::bad_request(
                "expires_in: between 1 second and 7 days",
            ));
        }
    }
    Ok((widening, expires))
}

/// What the Gate is asked about a widening.
pub fn action_of(w: &Widening) -> Action {
    match w {
        Widening::Egress { host, port } => Action::Egress {
            host: host.clone(),
            port: *port,
        },
        Widening::Bind {
            host_path,
            writable,
            ..
        } => Action::Bind {
            host_path: host_path.display().to_string(),
            writable: *writable,
        },
        Widening::Limits { memory, pids } => Action::RaiseLimits {
            memory: *memory,
            pids: *pids,
        },
    }
}

/// Refuse a widening beyond the ceiling of the token that owns the
/// sandbox (the owner's sandboxes have none). Whoever approved it, a
/// widening never goes past what the sandbox's owner could have asked for
/// at create.
pub fn check_ceiling(state: &AppState, session: &Session, w: &Widening) -> Result<(), ApiError> {
    if session.owner() == crate::tokens::OWNER {
        return Ok(());
    }
    let record = state
        .tokens()
        .list()
        .map_err(|e| ApiError::internal(format!("cannot read the tokens: {e}")))?
        .into_iter()
        .find(|t| t.name == session.owner())
        .ok_or_else(|| {
            ApiError::forbidden(format!(
                "the sandbox's token '{}' is revoked; its sandbox cannot be widened",
                session.owner()
            ))
        })?;
    let c = &record.ceiling;
    let beyond = |what: String| {
        ApiError::forbidden(format!("token '{}': {what}", record.name))
            .with_fix("widen within the token's ceiling (`cordon token list` shows it)")
    };
    match w {
        Widening::Egress { host, port } => {
            let asked = cordon_hostpattern::HostPattern::parse(&format!("{host}:{port}"))
                .map_err(|e| ApiError::bad_request(format!("host: {e}")))?;
            let covered = c
                .allow_net
                .iter()
                .any(|p| cordon_hostpattern::HostPattern::parse(p).is_ok_and(|p| p.covers(&asked)));
            if !covered {
                return Err(beyond(format!(
                    "host {host}:{port} is not among the hosts this token may allow"
                )));
            }
        }
        Widening::Bind { .. } => {
            return Err(beyond("binding host paths is for the owner only".into()))
        }
        Widening::Limits { memory, pids } => {
            if let (Some(max), Some(m)) = (c.memory, memory) {
                if m > &max {
                    return Err(beyond(format!(
                        "memory {m} is beyond the ceiling of {max} bytes"
                    )));
                }
            }
            if let (Some(max), Some(p)) = (c.pids, pids) {
                if p > &max {
                    return Err(beyond(format!("pids {p} is beyond the ceiling of {max}")));
                }
            }
        }
    }
    Ok(())
}

/// A grant's subject as audit records name it (`{"kind": "egress",
/// "host": .., "port": ..}`, ...).
fn subject(view: &GrantView) -> serde_json::Value {
    let mut v = serde_json::to_value(view).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        map.remove("id");
        map.remove("expires_unix_ms");
    }
    v
}

/// Record that grant `view` ended (`why`: revoked, expired).
fn record_end(state: &AppState, actor: &str, sandbox: &str, view: &GrantView, why: &str) {
    state.audit().record_by(
        actor,
        "grant_ended",
        Some(sandbox),
        json!({"why": why, "grant": {"id": view.id, "subject": subject(view)}}),
    );
}

/// Widen `session` (after the caller's decision that it may be): within
/// the owner's ceiling, in effect when this returns, recorded in the
/// audit log (`grant_started`; `grant_ended` when it expires). `until`:
/// narrowed by itself then.
pub async fn apply(
    state: &AppState,
    actor: &str,
    session: &Arc<Session>,
    widening: Widening,
    until: Option<SystemTime>,
) -> Result<GrantView, ApiError> {
    check_ceiling(state, session, &widening)?;
    let on_expiry: Option<cordon_session::ExpiryHook> = until.map(|_| {
        let state = state.clone();
        let sandbox = session.id().to_owned();
        let widening = widening.clone();
        let hook: cordon_session::ExpiryHook = Box::new(move |id, result| {
            let view = GrantView::from(&ActiveWidening {
                id: id.clone(),
                widening,
                until,
            });
            let why = if result.is_ok() {
                "expired"
            } else {
                "expired_unclean"
            };
            record_end(&state, "server", &sandbox, &view, why);
        });
        hook
    });
    let id = session
        .widen_until(widening.clone(), until, on_expiry)
        .await
        .map_err(ApiError::from)?;
    let view = GrantView::from(&ActiveWidening {
        id,
        widening,
        until,
    });
    let scope = if until.is_some() {
        "duration"
    } else {
        "session"
    };
    state.audit().record_by(
        actor,
        "grant_started",
        Some(session.id()),
        json!({"id": view.id, "subject": subject(&view), "scope": {"kind": scope},
               "expires_unix_ms": view.expires_unix_ms}),
    );
    Ok(view)
}

/// Narrow grant `gid` of `session` now.
pub async fn revoke(
    state: &AppState,
    actor: &str,
    session: &Session,
    gid: &str,
) -> Result<(), ApiError> {
    let missing = || {
        ApiError::not_found(format!("no grant '{gid}' in this sandbox"))
            .with_fix("GET /v1/sandboxes/{id}/grants lists them")
    };
    let view = session
        .active_widenings()
        .iter()
        .find(|a| a.id.0 == gid)
        .map(GrantView::from)
        .ok_or_else(missing)?;
    session
        .narrow(WideningId(gid.to_owned()))
        .await
        .map_err(|e| match e {
            cordon_session::SessionError::NotFound(_) => missing(),
            other => ApiError::from(other),
        })?;
    record_end(state, actor, session.id(), &view, "revoked");
    Ok(())
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/grants", tag = "grants",
    params(("id" = String, Path, description = "The sandbox id")),
    request_body = GrantRequest,
    responses(
        (status = 201, description = "In effect inside the sandbox", body = GrantView),
        (status = 400, description = "Bad request", body = ErrorBody),
        (status = 403, description = "Refused by the policy or an approver (a token's widening asks), or beyond the sandbox's ceiling", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 422, description = "The sandbox cannot be widened so", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the action's record (`audit_unavailable`); nothing was done", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<GrantRequest>,
) -> Result<(StatusCode, Json<GrantView>), ApiError> {
    let session = state.session_for(&caller, &id)?;
    let (widening, expires) = widening_of(&req)?;
    // The owner widens its own sandboxes; a token asks (an approver
    // answers), unless the policy decides otherwise.
    let default = if caller.is_owner() {
        DefaultVerdict::Allow {
            rule: "builtin:owner-widens".into(),
        }
    } else {
        DefaultVerdict::Ask {
            rule: "builtin:token-asks-to-widen".into(),
        }
    };
    let asked = action_of(&widening);
    let recorded = serde_json::to_value(&asked).unwrap_or_default();
    state
        .audit()
        .ready_for(&caller, Some(&id), recorded.clone())?;
    let req = crate::gate::request(&caller, Some(&id), asked, default);
    let allowed = state.gate().check(req).await?;
    // An ask waits for its human; the store may have failed meanwhile.
    state.audit().ready_for(&caller, Some(&id), recorded)?;
    let until = expires.map(|d| SystemTime::now() + d);
    let view = crate::escalation::widen(&state, caller.name(), &session, widening, until, &allowed)
        .await?;
    Ok((StatusCode::CREATED, Json(view)))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/grants", tag = "grants",
    params(("id" = String, Path, description = "The sandbox id")),
    responses(
        (status = 200, description = "The grants in force", body = GrantList),
        (status = 404, description = "No such sandbox", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<GrantList>, ApiError> {
    let session = state.session_for(&caller, &id)?;
    let grants = session
        .active_widenings()
        .iter()
        .map(GrantView::from)
        .collect();
    Ok(Json(GrantList { grants }))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/grants/{gid}", tag = "grants",
    params(("id" = String, Path, description = "The sandbox id"),
           ("gid" = String, Path, description = "The grant id")),
    responses(
        (status = 204, description = "Narrowed: out of effect inside the sandbox"),
        (status = 404, description = "No such sandbox or grant", body = ErrorBody),
    ))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, gid)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let session = state.session_for(&caller, &id)?;
    revoke(&state, caller.name(), &session, &gid).await?;
    Ok(StatusCode::NO_CONTENT)
}
