//! The code-context routes (`/v1/sandboxes/{id}/contexts...`): a
//! persistent interpreter per context, inside the sandbox
//! (`cordon_session::CodeContext`).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, post};
use axum::{Json, Router};
use cordon_session::{CellResult, CodeContext, ExecLimits, Language, DEFAULT_CELL_TIMEOUT};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;
use crate::wire::DurationValue;

/// Contexts one sandbox may have at once.
pub const MAX_CONTEXTS_PER_SANDBOX: usize = 16;

/// Characters of a cell's code kept in its audit record.
const AUDITED_CODE: usize = 4096;

/// Sandbox id -> context id -> context.
type Table = HashMap<String, HashMap<String, Arc<CodeContext>>>;

/// The live contexts, by sandbox and context id.
#[derive(Debug, Default)]
pub struct Contexts {
    by_sandbox: Mutex<Table>,
}

impl Contexts {
    fn table(&self) -> Result<std::sync::MutexGuard<'_, Table>, ApiError> {
        self.by_sandbox
            .lock()
            .map_err(|_| ApiError::internal("the contexts table is poisoned"))
    }

    fn count(&self, sandbox: &str) -> Result<usize, ApiError> {
        Ok(self.table()?.get(sandbox).map_or(0, HashMap::len))
    }

    fn insert(&self, sandbox: &str, id: String, ctx: Arc<CodeContext>) -> Result<(), ApiError> {
        let mut table = self.table()?;
        let contexts = table.entry(sandbox.to_owned()).or_default();
        if contexts.len() >= MAX_CONTEXTS_PER_SANDBOX {
            return Err(too_many());
        }
        contexts.insert(id, ctx);
        Ok(())
    }

    fn get(&self, sandbox: &str, id: &str) -> Result<Arc<CodeContext>, ApiError> {
        self.table()?
            .get(sandbox)
            .and_then(|c| c.get(id))
            .cloned()
            .ok_or_else(|| missing(id))
    }

    fn remove(&self, sandbox: &str, id: &str) -> Result<Arc<CodeContext>, ApiError> {
        self.table()?
            .get_mut(sandbox)
            .and_then(|c| c.remove(id))
            .ok_or_else(|| missing(id))
    }

    fn list(&self, sandbox: &str) -> Result<Vec<ContextView>, ApiError> {
        let table = self.table()?;
        let mut list: Vec<ContextView> = table
            .get(sandbox)
            .into_iter()
            .flatten()
            .map(|(id, c)| ContextView {
                id: id.clone(),
                language: c.language().as_str().to_owned(),
            })
            .collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(list)
    }

    /// The sandbox is gone: its contexts go with it.
    pub fn forget(&self, sandbox: &str) {
        if let Ok(mut table) = self.by_sandbox.lock() {
            table.remove(sandbox);
        }
    }
}

fn missing(id: &str) -> ApiError {
    ApiError::not_found(format!("no code context '{id}' in this sandbox"))
        .with_fix("create one with POST /v1/sandboxes/{id}/contexts")
}

fn too_many() -> ApiError {
    ApiError::conflict(format!(
        "this sandbox has {MAX_CONTEXTS_PER_SANDBOX} code contexts, the most it may have"
    ))
    .with_fix("delete one with DELETE /v1/sandboxes/{id}/contexts/{ctx}")
}

/// `POST /v1/sandboxes/{id}/contexts`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateContext {
    /// `python` (the only one so far).
    pub language: String,
}

/// A code context.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextView {
    /// `ctx-…`
    pub id: String,
    pub language: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextList {
    pub contexts: Vec<ContextView>,
}

/// `POST /v1/sandboxes/{id}/contexts/{ctx}/run`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCell {
    pub code: String,
    /// The interpreter is killed (its state lost) when the cell runs
    /// longer; default 300 s.
    pub timeout: Option<DurationValue>,
}

/// An exception the cell raised, or why it did not finish
/// (`TimeoutError`, `InterpreterDied`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CellErrorView {
    pub name: String,
    pub message: String,
    pub traceback: String,
}

/// What a cell did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CellReply {
    pub stdout: String,
    pub stderr: String,
    /// `repr` of the last expression, when the cell ends with one that is
    /// not `None`.
    pub value: Option<String>,
    pub error: Option<CellErrorView>,
    /// The interpreter had died and was started again for this cell: the
    /// earlier state is gone.
    pub restarted: bool,
}

impl From<CellResult> for CellReply {
    fn from(r: CellResult) -> CellReply {
        CellReply {
            stdout: r.stdout,
            stderr: r.stderr,
            value: r.value,
            error: r.error.map(|e| CellErrorView {
                name: e.name,
                message: e.message,
                traceback: e.traceback,
            }),
            restarted: r.restarted,
        }
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sandboxes/{id}/contexts", post(create).get(list))
        .route("/v1/sandboxes/{id}/contexts/{ctx}", delete(remove))
        .route("/v1/sandboxes/{id}/contexts/{ctx}/run", post(run))
}

fn new_context_id() -> Result<String, ApiError> {
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw)
        .map_err(|e| ApiError::internal(format!("no random bytes for an id: {e}")))?;
    Ok(format!("ctx-{}", hex::encode(raw)))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts", tag = "contexts",
    params(("id" = String, Path, description = "The sandbox id")),
    request_body = CreateContext,
    responses(
        (status = 201, description = "The interpreter is running inside the sandbox", body = ContextView),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "The sandbox has as many contexts as it may", body = ErrorBody),
        (status = 422, description = "An unsupported language, or no interpreter in the sandbox", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the action's record (`audit_unavailable`); nothing was done", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CreateContext>,
) -> Result<(StatusCode, Json<ContextView>), ApiError> {
    let session = state.session_for(&caller, &id)?;
    let language = Language::from_str(&body.language)?;
    let allowed = state
        .check(&caller, Some(&id), cell_action(language, None))
        .await?;
    if state.contexts().count(&id)? >= MAX_CONTEXTS_PER_SANDBOX {
        return Err(too_many());
    }
    // An allow with limits: the interpreter's own rlimits, and a cap on
    // every cell's timeout.
    let mut limits = ExecLimits::default();
    let mut max_cell = None;
    if let Some(l) = allowed.limits {
        limits.tighten(l.memory, l.pids);
        max_cell = l.timeout_ms.map(Duration::from_millis);
    }
    let ctx = Arc::new(CodeContext::start_limited(session, language, limits, max_cell).await?);
    let ctx_id = new_context_id()?;
    state.contexts().insert(&id, ctx_id.clone(), ctx)?;
    state.audit().record(
        &caller,
        "context_create",
        Some(&id),
        json!({"context": ctx_id, "language": language.as_str(), "limits": allowed.limits}),
    );
    let view = ContextView {
        id: ctx_id,
        language: language.as_str().to_owned(),
    };
    Ok((StatusCode::CREATED, Json(view)))
}

/// What the Gate is asked about a context: starting its interpreter
/// (`["python3"]`), or running a cell in it (`["python3", "-c", CODE]`).
fn cell_action(language: Language, code: Option<&str>) -> cordon_authz::Action {
    let interpreter = match language.as_str() {
        "python" => "python3".to_owned(),
        other => other.to_owned(),
    };
    let mut argv = vec![interpreter];
    if let Some(c) = code {
        argv.push("-c".into());
        argv.push(c.to_owned());
    }
    cordon_authz::Action::Exec { argv }
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/contexts", tag = "contexts",
    params(("id" = String, Path, description = "The sandbox id")),
    responses(
        (status = 200, description = "The sandbox's code contexts", body = ContextList),
        (status = 404, description = "No such sandbox", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ContextList>, ApiError> {
    state.session_for(&caller, &id)?;
    Ok(Json(ContextList {
        contexts: state.contexts().list(&id)?,
    }))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts/{ctx}/run", tag = "contexts",
    params(
        ("id" = String, Path, description = "The sandbox id"),
        ("ctx" = String, Path, description = "The context id"),
    ),
    request_body = RunCell,
    responses(
        (status = 200, description = "The cell ran (an exception, a timeout or a dead interpreter is in `error`)", body = CellReply),
        (status = 404, description = "No such sandbox or context", body = ErrorBody),
        (status = 409, description = "The sandbox has ended", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the action's record (`audit_unavailable`); nothing was done", body = ErrorBody),
    ))]
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, ctx_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<RunCell>,
) -> Result<Json<CellReply>, ApiError> {
    state.session_for(&caller, &id)?;
    let ctx = state.contexts().get(&id, &ctx_id)?;
    let allowed = state
        .check(
            &caller,
            Some(&id),
            cell_action(ctx.language(), Some(&body.code)),
        )
        .await?;
    let mut timeout = match &body.timeout {
        Some(t) => t.to_duration("timeout")?,
        None => DEFAULT_CELL_TIMEOUT,
    };
    if let Some(l) = allowed.limits {
        if let Some(ms) = l.timeout_ms {
            timeout = timeout.min(Duration::from_millis(ms));
        }
        // A running interpreter cannot take lower rlimits for one cell.
        let have = ctx.limits();
        let looser =
            |have: Option<u64>, want: Option<u64>| want.is_some_and(|w| have.is_none_or(|h| h > w));
        if looser(have.memory, l.memory) || looser(have.pids, l.pids) {
            let shown = |v: Option<u64>| v.map_or("none".to_owned(), |v| v.to_string());
            return Err(ApiError::forbidden(format!(
                "the policy allows this cell only with limits (rule {}: memory {} bytes, pids {}) that the context's running interpreter cannot take",
                allowed.rule,
                shown(l.memory),
                shown(l.pids)
            ))
            .with_fix("run the code with POST /v1/sandboxes/{id}/exec, which takes them, or start the context under a rule with limits at least as low"));
        }
    }
    // The cell runs to its end even if the client goes away, so the
    // interpreter stays in step with its cells (and keeps its state).
    let code = body.code.clone();
    let result = tokio::spawn(async move { ctx.run(&code, timeout).await })
        .await
        .map_err(|e| ApiError::internal(format!("the cell's task failed: {e}")))??;
    let code: String = body.code.chars().take(AUDITED_CODE).collect();
    state.audit().record(
        &caller,
        "context_run",
        Some(&id),
        json!({
            "context": ctx_id,
            "code": code,
            "error": result.error.as_ref().map(|e| &e.name),
            "restarted": result.restarted,
            "limits": allowed.limits,
        }),
    );
    Ok(Json(CellReply::from(result)))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/contexts/{ctx}", tag = "contexts",
    params(
        ("id" = String, Path, description = "The sandbox id"),
        ("ctx" = String, Path, description = "The context id"),
    ),
    responses(
        (status = 204, description = "The interpreter is stopped"),
        (status = 404, description = "No such sandbox or context", body = ErrorBody),
    ))]
pub async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, ctx_id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state.session_for(&caller, &id)?;
    let ctx = state.contexts().remove(&id, &ctx_id)?;
    ctx.close().await;
    state.audit().record(
        &caller,
        "context_delete",
        Some(&id),
        json!({"context": ctx_id}),
    );
    Ok(StatusCode::NO_CONTENT)
}
