//! The API's errors: a status code and a JSON body
//! `{"error": {"code", "message", "fix"?}}` (see docs/api.md).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cordon_session::SessionError;
use serde::Serialize;
use utoipa::ToSchema;

/// Seconds a client is told to wait before retrying after a 429 or 503.
pub const RETRY_AFTER_SECS: u64 = 1;

/// An error answer of the API.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub fix: Option<String>,
    /// A refusal of the Gate: what was refused, by which rule, and what
    /// would allow it.
    pub refusal: Option<Box<cordon_approvals::Refusal>>,
}

/// The JSON body of an error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable word: `bad_request`, `unauthorized`, `forbidden`,
    /// `not_found`, `conflict`, `too_large`, `unsupported_media_type`,
    /// `unprocessable`, `at_capacity`, `internal`, `unavailable`,
    /// `audit_unavailable`, `quota`, ...
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// How to fix it, when there is something to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// A policy or approval refusal (`policy_denied`, `approval_denied`,
    /// `approval_expired`): what was refused, e.g. `{"kind": "exec",
    /// "argv_prefix": ["git", "push"]}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub subject: Option<serde_json::Value>,
    /// The rule that decided: `{"id", "file", "line"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub rule: Option<serde_json::Value>,
    /// The approval that was asked (`ap_...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The grant that would allow it, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_allow: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            fix: None,
            refusal: None,
        }
    }

    pub fn with_fix(mut self, fix: impl Into<String>) -> ApiError {
        self.fix = Some(fix.into());
        self
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", message)
    }

    pub fn at_capacity(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "at_capacity", message)
            .with_fix("retry after the number of seconds in Retry-After")
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 503: the audit store cannot take the action's record, so the
    /// action is not done.
    pub fn audit_unavailable(error: &str, store: Option<&std::path::Path>) -> ApiError {
        let store = store.map_or_else(|| "the audit store".to_owned(), |p| p.display().to_string());
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "audit_unavailable",
            format!("refused: the server records every action before it is done, and its audit store cannot be written: {error}"),
        )
        .with_fix(format!(
            "make {store} writable again (free space, permissions, its head file); actions resume by themselves once a commit goes through. Only to run without records: restart the server with --no-audit"
        ))
    }

    pub fn not_implemented(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_implemented", message)
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        let r = self.refusal.as_deref();
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
                fix: self.fix.clone(),
                subject: r.and_then(|r| serde_json::to_value(&r.subject).ok()),
                rule: r.and_then(|r| serde_json::to_value(&r.rule).ok()),
                approval: r.and_then(|r| r.approval.clone()),
                would_allow: r.and_then(|r| r.would_allow.clone()),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry = matches!(
            self.status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        );
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if retry {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        resp
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> ApiError {
        let message = e.to_string();
        match e {
            SessionError::NotFound(_) => ApiError::not_found(message),
            SessionError::Ended(_) => {
                ApiError::conflict(message).with_fix("create a new sandbox; this one has ended")
            }
            SessionError::Invalid(_) => ApiError::unprocessable(message),
            SessionError::AtCapacity(_) => ApiError::at_capacity(message),
            SessionError::Busy(_) => ApiError::unavailable(message)
                .with_fix("retry after the number of seconds in Retry-After"),
            SessionError::SpawnerGone(_) => ApiError::unavailable(message)
                .with_fix("restart `cordon serve`; its sandbox spawner has exited"),
            SessionError::Jail(_) => ApiError::unprocessable(message),
            SessionError::Io { .. } => ApiError::internal(message),
            SessionError::Context(_) => ApiError::unprocessable(message),
            // A variant added later is an internal error until mapped.
            #[allow(unreachable_patterns)]
            _ => ApiError::internal(message),
        }
    }
}

impl From<cordon_approvals::Refusal> for ApiError {
    /// 403 with the refusal's code (503 when the approvals store failed).
    fn from(r: cordon_approvals::Refusal) -> ApiError {
        let status = if r.code == "approval_unavailable" {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::FORBIDDEN
        };
        let fix = match r.code {
            "approval_denied" | "approval_expired" => {
                "retry once an approver will answer: `cordon approvals list` shows what waits, `cordon approvals approve ID --scope session` grants it"
            }
            "policy_denied" if r.would_allow.is_some() => {
                "ask the owner for a grant or a permit in the policy file (cordon serve --policy FILE)"
            }
            _ => "the policy forbids this; only a change of the policy file (by its owner) can allow it",
        };
        let mut e = ApiError::new(status, r.code, r.message.clone()).with_fix(fix);
        e.refusal = Some(Box::new(r));
        e
    }
}
