//! `/v1/approvals`: what waits for a human, the answers, and a server-sent
//! event stream of both. The owner and `--approver` tokens see and answer
//! every approval (never their own, for a token); any other token sees
//! only its own.

use std::convert::Infallible;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_approvals::{Answer, Approval, ApprovalError, ApprovalEvent, ApprovalState, Scope};
use futures_util::stream::{self, Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody, ErrorDetail};
use crate::extract::ApiJson;
use crate::state::AppState;
use crate::wire::DurationValue;

/// `GET /v1/approvals`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalList {
    pub approvals: Vec<Approval>,
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct ListQuery {
    /// `pending`, `approved`, `denied` or `expired` (default: all).
    pub state: Option<String>,
}

/// `POST /v1/approvals/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// `approve` or `deny`.
    pub decision: String,
    /// `once` (default), `session`, `duration` (with `duration`) or
    /// `persistent` (two calls: the second with `confirm`).
    pub scope: Option<String>,
    /// How long a `duration` grant holds: `"10m"`.
    pub duration: Option<DurationValue>,
    /// The token the first answer of a persistent approval gave back.
    pub confirm: Option<String>,
}

/// The 409 of the first answer of a persistent approval.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfirmReply {
    pub error: ErrorDetail,
    /// Send the answer again with `"confirm": this` to append `rule`.
    pub confirm: String,
    /// The Cedar rule that will be appended to the policy file.
    pub rule: String,
}

fn visible(caller: &Caller, a: &Approval) -> bool {
    caller.is_approver() || a.principal == caller.name()
}

fn missing(id: &str) -> ApiError {
    ApiError::not_found(format!("no approval '{id}'"))
        .with_fix("GET /v1/approvals?state=pending lists the approvals you can see")
}

#[utoipa::path(get, path = "/v1/approvals", tag = "approvals",
    params(ListQuery),
    responses(
        (status = 200, description = "Approvals, newest first (a token without --approver sees only its own)", body = ApprovalList),
        (status = 400, description = "Unknown state", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<ApprovalList>, ApiError> {
    let filter = match q.state.as_deref() {
        None | Some("") | Some("all") => None,
        Some(s) => Some(ApprovalState::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!("state: '{s}' is not a state"))
                .with_fix("use pending, approved, denied or expired")
        })?),
    };
    let approvals = state
        .gate()
        .approvals()
        .list(filter)
        .into_iter()
        .filter(|a| visible(&caller, a))
        .collect();
    Ok(Json(ApprovalList { approvals }))
}

#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals",
    params(("id" = String, Path, description = "The approval id (ap_...)")),
    responses(
        (status = 200, description = "The approval", body = Approval),
        (status = 404, description = "No such approval (or not yours)", body = ErrorBody),
    ))]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Approval>, ApiError> {
    state
        .gate()
        .approvals()
        .get(&id)
        .filter(|a| visible(&caller, a))
        .map(Json)
        .ok_or_else(|| missing(&id))
}

/// The answer a body asks for.
fn answer_of(body: &AnswerBody) -> Result<Answer, ApiError> {
    match body.decision.as_str() {
        "deny" => Ok(Answer::Deny),
        "approve" => {
            let scope = match body.scope.as_deref().unwrap_or("once") {
                "once" => Scope::Once,
                "session" => Scope::Session,
                "persistent" => Scope::Persistent,
                "duration" => {
                    let d = body
                        .duration
                        .as_ref()
                        .ok_or_else(|| {
                            ApiError::bad_request("scope duration needs \"duration\"")
                                .with_fix("send e.g. \"duration\": \"10m\"")
                        })?
                        .to_duration("duration")?;
                    Scope::For(d)
                }
                other => {
                    return Err(
                        ApiError::bad_request(format!("scope: '{other}' is not a scope"))
                            .with_fix("use once, session, duration or persistent"),
                    )
                }
            };
            Ok(Answer::Approve {
                scope,
                confirm: body.confirm.clone(),
            })
        }
        other => Err(ApiError::bad_request(format!(
            "decision: '{other}' is neither approve nor deny"
        ))
        .with_fix("send \"decision\": \"approve\" or \"deny\"")),
    }
}

fn answer_error(id: &str, e: ApprovalError) -> Response {
    let message = e.to_string();
    let err = match e {
        ApprovalError::NotFound(_) => missing(id),
        ApprovalError::NotPending { .. } => ApiError::conflict(message),
        ApprovalError::SelfApproval(_) => ApiError::forbidden(message)
            .with_fix("have the owner or another token created with --approver answer it"),
        ApprovalError::NotOffered(_) => {
            ApiError::unprocessable(message).with_fix("choose one of the approval's \"offers\"")
        }
        ApprovalError::NoSession | ApprovalError::NoDuration => ApiError::unprocessable(message),
        ApprovalError::NoPolicyFile => ApiError::unprocessable(message)
            .with_fix("restart the server with --policy FILE, or choose another scope"),
        ApprovalError::BadConfirm => ApiError::conflict(message),
        ApprovalError::Policy(_) => ApiError::unprocessable(message),
        ApprovalError::Store(_) => ApiError::internal(message),
        ApprovalError::ConfirmPersistent { confirm, rule } => {
            let body = ConfirmReply {
                error: ApiError::conflict(
                    "a persistent grant appends a rule to the policy file; confirm it",
                )
                .with_fix(
                    "answer again with the same decision and scope and \"confirm\": the token here",
                )
                .body()
                .error,
                confirm,
                rule,
            };
            return (StatusCode::CONFLICT, Json(body)).into_response();
        }
    };
    err.into_response()
}

#[utoipa::path(post, path = "/v1/approvals/{id}", tag = "approvals",
    params(("id" = String, Path, description = "The approval id (ap_...)")),
    request_body = AnswerBody,
    responses(
        (status = 200, description = "Answered", body = Approval),
        (status = 403, description = "This caller may not answer it (not an approver, or its own)", body = ErrorBody),
        (status = 404, description = "No such approval", body = ErrorBody),
        (status = 409, description = "Already answered; or the first answer of a persistent grant: confirm it", body = ConfirmReply),
        (status = 422, description = "The scope is not on offer or not possible", body = ErrorBody),
    ))]
pub async fn answer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AnswerBody>,
) -> Response {
    let store = state.gate().approvals();
    if store.get(&id).filter(|a| visible(&caller, a)).is_none() {
        return missing(&id).into_response();
    }
    if !caller.is_approver() {
        return ApiError::forbidden(format!(
            "token '{}' may not answer approvals",
            caller.name()
        ))
        .with_fix("answer as the owner (the unix socket), or with a token made by `cordon token create --approver`")
        .into_response();
    }
    let answer = match answer_of(&body) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    match store.decide(&id, answer, caller.name()) {
        Ok(a) => Json(a).into_response(),
        Err(e) => answer_error(&id, e),
    }
}

#[utoipa::path(get, path = "/v1/approvals/events", tag = "approvals",
    responses((status = 200, description = "text/event-stream: an `approval` event (the Approval JSON) for each pending approval at once, then one whenever an approval is created, answered or expires; `grant` events when a grant starts or ends; keepalive comments", content_type = "text/event-stream")))]
pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let store = state.gate().approvals();
    let rx = store.subscribe();
    let pending: Vec<Event> = store
        .list(Some(ApprovalState::Pending))
        .iter()
        .rev()
        .filter(|a| visible(&caller, a))
        .filter_map(approval_event)
        .collect();
    let live = stream::unfold((rx, caller), |(mut rx, caller)| async move {
        loop {
            match rx.recv().await {
                Ok(e) => {
                    if let Some(ev) = sse_of(&e, &caller) {
                        return Some((ev, (rx, caller)));
                    }
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    });
    let all = stream::iter(pending).chain(live).map(Ok);
    Sse::new(all).keep_alive(KeepAlive::new().interval(state.limits().keepalive))
}

fn approval_event(a: &Approval) -> Option<Event> {
    Event::default().event("approval").json_data(a).ok()
}

fn sse_of(e: &ApprovalEvent, caller: &Caller) -> Option<Event> {
    match e {
        ApprovalEvent::Created(a) | ApprovalEvent::Decided(a) | ApprovalEvent::Expired(a) => {
            visible(caller, a).then(|| approval_event(a)).flatten()
        }
        ApprovalEvent::GrantStarted(g) | ApprovalEvent::GrantEnded { grant: g, .. } => {
            if !(caller.is_approver() || g.principal == caller.name()) {
                return None;
            }
            Event::default().event("grant").json_data(e).ok()
        }
    }
}
