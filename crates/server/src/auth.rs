//! Who is calling: the unix socket's caller is the owner (the socket is
//! 0600 and its peer's uid is checked at accept); a TCP caller is the
//! token whose secret it presents as `Authorization: Bearer`. A browser
//! logged in to the web console presents its console session cookie
//! instead, and on every request that changes something the session's
//! CSRF token as `X-CSRF-Token` (see [`crate::console`]). A browser's
//! cross-site request that would change something is refused whatever it
//! carries.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;
use crate::tokens::{Ceiling, OWNER};

/// How a request came in (set by the listener on every request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Unix,
    Tcp,
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    name: String,
    ceiling: Option<Ceiling>,
    /// May answer approvals (the owner, and tokens made with `--approver`).
    approver: bool,
}

impl Caller {
    pub fn owner() -> Caller {
        Caller {
            name: OWNER.to_owned(),
            ceiling: None,
            approver: true,
        }
    }

    pub fn token(name: String, ceiling: Ceiling) -> Caller {
        Caller {
            name,
            ceiling: Some(ceiling),
            approver: false,
        }
    }

    /// This token may answer approvals (never its own).
    pub fn with_approver(mut self, approver: bool) -> Caller {
        self.approver = approver;
        self
    }

    /// May this caller answer approvals (and see everyone's)?
    pub fn is_approver(&self) -> bool {
        self.approver
    }

    /// The caller as the policy sees it.
    pub fn principal(&self) -> cordon_authz::Principal {
        cordon_authz::Principal {
            name: self.name.clone(),
            preset: self.ceiling.as_ref().map(|c| c.preset.to_string()),
        }
    }

    /// The token's name, or `owner`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The token's ceiling; `None` for the owner (no ceiling).
    pub fn ceiling(&self) -> Option<&Ceiling> {
        self.ceiling.as_ref()
    }

    pub fn is_owner(&self) -> bool {
        self.ceiling.is_none()
    }

    /// May this caller see a sandbox owned by `owner`?
    pub fn may_see(&self, owner: &str) -> bool {
        self.is_owner() || self.name == owner
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("this request carries no identity"))
    }
}

/// Resolve the caller of every request; TCP without a valid token is 401.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let transport = req.extensions().get::<Transport>().copied();
    let caller = match transport {
        Some(t) => resolve(&state, &req, t),
        None => Err(ApiError::unauthorized("unknown transport")),
    };
    match caller {
        Ok(c) => {
            req.extensions_mut().insert(c);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

fn resolve(state: &AppState, req: &Request, transport: Transport) -> Result<Caller, ApiError> {
    crate::console::refuse_cross_site(req.method(), req.headers())?;
    if !req.headers().contains_key(AUTHORIZATION) {
        if let Some(cookie) = crate::console::session_cookie(req.headers()) {
            return crate::console::caller(state, req.method(), req.headers(), transport, cookie);
        }
    }
    match transport {
        Transport::Unix => Ok(Caller::owner()),
        Transport::Tcp => from_bearer(state, req),
    }
}

fn from_bearer(state: &AppState, req: &Request) -> Result<Caller, ApiError> {
    let fix = "send `Authorization: Bearer TOKEN` with a token from `cordon token create`";
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("a token is required over TCP").with_fix(fix))?;
    let secret = header
        .to_str()
        .ok()
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ApiError::unauthorized("the Authorization header is not `Bearer TOKEN`").with_fix(fix)
        })?;
    let record = state
        .tokens()
        .authenticate(secret)
        .map_err(|e| ApiError::internal(format!("cannot check the token: {e}")))?
        .ok_or_else(|| ApiError::unauthorized("unknown or revoked token").with_fix(fix))?;
    Ok(Caller::token(record.name, record.ceiling).with_approver(record.approver))
}
