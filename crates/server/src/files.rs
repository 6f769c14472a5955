//! The files routes (`/v1/sandboxes/{id}/files/{path}`): read, list, tar,
//! write, delete, by the paths the sandbox sees. Every lookup is
//! `cordon_session::files` (openat2 `RESOLVE_IN_ROOT` from the sandbox's
//! root, as the sandbox's user); this module is HTTP: streaming bodies in
//! and out, the per-file limit and the per-sandbox quota, the audit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bytes::{Bytes, BytesMut};
use cordon_session::files::{
    as_sandbox_user, too_large, FilesError, FilesErrorKind, Listing, Node, PendingWrite, Quota,
    SandboxPath, SandboxRoot,
};
use cordon_session::Session;
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

mod stream;

/// Body bytes gathered before one write to the file.
const WRITE_CHUNK: usize = 256 << 10;

/// The files quotas of the live sandboxes.
#[derive(Debug, Default)]
pub struct FilesState {
    quotas: Mutex<HashMap<String, Arc<Quota>>>,
}

impl FilesState {
    /// Sandbox `id`'s quota (made with `limit` on first use).
    fn quota(&self, id: &str, limit: u64) -> Arc<Quota> {
        match self.quotas.lock() {
            Ok(mut q) => q
                .entry(id.to_owned())
                .or_insert_with(|| Arc::new(Quota::new(limit)))
                .clone(),
            // A poisoned table still bounds this write on its own.
            Err(_) => Arc::new(Quota::new(limit)),
        }
    }

    /// The sandbox is gone.
    pub fn forget(&self, id: &str) {
        if let Ok(mut q) = self.quotas.lock() {
            q.remove(id);
        }
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sandboxes/{id}/files", get(read_root))
        .route("/v1/sandboxes/{id}/files/", get(read_root))
        .route(
            "/v1/sandboxes/{id}/files/{*path}",
            get(read).put(write).delete(delete),
        )
}

/// One name in a directory.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EntryView {
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Bytes (of a symlink: its target's length).
    pub size: u64,
}

/// `GET .../files/{dir}`: the directory's entries, sorted by name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ListingView {
    pub entries: Vec<EntryView>,
    /// More entries than one listing holds: the rest are not listed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl From<Listing> for ListingView {
    fn from(l: Listing) -> ListingView {
        ListingView {
            entries: l
                .entries
                .into_iter()
                .map(|e| EntryView {
                    name: e.name,
                    kind: serde_json::to_value(e.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| "other".into()),
                    size: e.size,
                })
                .collect(),
            truncated: l.truncated,
        }
    }
}

/// The API's answer for a files error.
fn api_error(e: FilesError) -> ApiError {
    let (status, code) = match e.kind {
        FilesErrorKind::BadPath => (StatusCode::BAD_REQUEST, "bad_request"),
        FilesErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found"),
        FilesErrorKind::Conflict => (StatusCode::CONFLICT, "conflict"),
        FilesErrorKind::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
        FilesErrorKind::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        FilesErrorKind::Quota => (StatusCode::INSUFFICIENT_STORAGE, "quota"),
        FilesErrorKind::Io => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    };
    let err = ApiError::new(status, code, e.message);
    match e.fix {
        Some(fix) => err.with_fix(fix),
        None => err,
    }
}

/// The session, its root and the path, checked.
struct Target {
    session: Arc<Session>,
    root: SandboxRoot,
    path: SandboxPath,
}

/// The sandbox and the path a files request is about, once the Gate
/// allowed reading (or, `writes`, writing) it.
async fn target(
    state: &AppState,
    caller: &Caller,
    id: &str,
    raw: &str,
    writes: bool,
) -> Result<Target, ApiError> {
    let session = state.session_for(caller, id)?;
    let path = SandboxPath::parse(raw).map_err(api_error)?;
    let shown = path.to_string();
    let action = if writes {
        cordon_authz::Action::FileWrite { path: shown }
    } else {
        cordon_authz::Action::FileRead { path: shown }
    };
    state.check(caller, Some(id), action).await?;
    let root = SandboxRoot::new(session.open_root().await?);
    Ok(Target {
        session,
        root,
        path,
    })
}

/// Record a files action with its outcome (refusals too: an escape
/// attempt is worth a record).
fn record<T>(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: &str,
    path: &str,
    result: &Result<T, ApiError>,
) {
    let outcome = match result {
        Ok(_) => json!("ok"),
        Err(e) => json!({"status": e.status.as_u16(), "code": e.code, "message": e.message}),
    };
    state.audit().record(
        caller,
        action,
        Some(id),
        json!({"path": path, "outcome": outcome}),
    );
}

#[derive(Debug, Deserialize)]
pub struct ReadQuery {
    /// `tar`: a directory as a tar stream.
    format: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct DeleteQuery {
    /// Delete a directory with everything in it.
    #[serde(default)]
    recursive: bool,
}

async fn read_root(
    state: State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Query<ReadQuery>,
) -> Result<Response, ApiError> {
    read(state, caller, Path((id, "/".to_owned())), query).await
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/{path}", tag = "files",
    params(
        ("id" = String, Path, description = "The sandbox id"),
        ("path" = String, Path, description = "The path inside the sandbox, e.g. `workspace/a.py`"),
        ("format" = Option<String>, Query, description = "`tar`: the directory as a tar stream"),
    ),
    responses(
        (status = 200, description = "A file's bytes (application/octet-stream), a directory's listing (JSON), or a tar stream (application/x-tar)", body = ListingView),
        (status = 400, description = "A path with NUL or `..`", body = ErrorBody),
        (status = 403, description = "A kernel filesystem, or a magic link", body = ErrorBody),
        (status = 404, description = "No such file in the sandbox (a symlink leading out of it leads nowhere)", body = ErrorBody),
        (status = 409, description = "Not a regular file or a directory", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the action's record (`audit_unavailable`); nothing was done", body = ErrorBody),
    ))]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, raw)): Path<(String, String)>,
    Query(q): Query<ReadQuery>,
) -> Result<Response, ApiError> {
    let tar = match q.format.as_deref() {
        None | Some("") | Some("raw") => false,
        Some("tar") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!("format={other}: unknown"))
                .with_fix("leave it out for the raw bytes or the listing, or ask for format=tar"))
        }
    };
    let action = if tar { "file_tar" } else { "file_read" };
    let result = read_target(&state, &caller, &id, &raw, tar).await;
    record(&state, &caller, &id, action, &raw, &result);
    result
}

async fn read_target(
    state: &AppState,
    caller: &Caller,
    id: &str,
    raw: &str,
    tar: bool,
) -> Result<Response, ApiError> {
    let Target {
        session,
        root,
        path,
    } = target(state, caller, id, raw, false).await?;
    let ids = session.host_ids();
    let p = path.clone();
    let node = as_sandbox_user(ids, move || root.open(&p))
        .await
        .map_err(api_error)?;
    match (node, tar) {
        (Node::File { file, size }, false) => {
            let body = stream::from_blocking(ids, move |out| stream::copy_exactly(file, size, out));
            Ok(Response::builder()
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .header(header::CONTENT_LENGTH, size)
                .body(body)
                .map_err(|e| ApiError::internal(e.to_string()))?)
        }
        (Node::Dir(fd), false) => {
            let p = path.clone();
            let listing = as_sandbox_user(ids, move || {
                use std::os::fd::AsFd;
                Listing::read(fd.as_fd(), &p)
            })
            .await
            .map_err(api_error)?;
            Ok(Json(ListingView::from(listing)).into_response())
        }
        (Node::Dir(fd), true) => {
            let body = stream::from_blocking(ids, move |out| {
                cordon_session::files::write_tar(fd, &path, out)
            });
            Ok(Response::builder()
                .header(header::CONTENT_TYPE, "application/x-tar")
                .body(body)
                .map_err(|e| ApiError::internal(e.to_string()))?)
        }
        (Node::File { .. }, true) => Err(ApiError::conflict(format!(
            "{path} is a file, not a directory"
        ))
        .with_fix("leave out format=tar to read the file")),
    }
}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/files/{path}", tag = "files",
    params(
        ("id" = String, Path, description = "The sandbox id"),
        ("path" = String, Path, description = "The path inside the sandbox; missing directories are made"),
    ),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file's bytes"),
    responses(
        (status = 204, description = "Written: the whole file is in place (renamed over the old one), or nothing is"),
        (status = 400, description = "A path with NUL or `..`", body = ErrorBody),
        (status = 403, description = "Read-only, not permitted, or a kernel filesystem", body = ErrorBody),
        (status = 404, description = "A directory on the way leads nowhere in the sandbox", body = ErrorBody),
        (status = 408, description = "The body stopped arriving", body = ErrorBody),
        (status = 409, description = "The path is a directory", body = ErrorBody),
        (status = 413, description = "Larger than the per-file limit", body = ErrorBody),
        (status = 507, description = "Over the sandbox's files quota, or its filesystem is full", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the action's record (`audit_unavailable`); nothing was done", body = ErrorBody),
    ))]
pub async fn write(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, raw)): Path<(String, String)>,
    headers: HeaderMap,
    req: Request,
) -> Result<StatusCode, ApiError> {
    let mut body = req.into_body();
    let result = write_target(&state, &caller, &id, &raw, &headers, &mut body).await;
    if let Err(e) = &result {
        if e.status != StatusCode::REQUEST_TIMEOUT {
            drain(&mut body, state.limits().body_timeout).await;
        }
    }
    record(&state, &caller, &id, "file_write", &raw, &result);
    result.map(|_bytes| StatusCode::NO_CONTENT)
}

/// Most bytes of a refused upload read (and dropped) before the answer.
const DRAIN_LIMIT: usize = 8 << 20;

/// Read what is left of a refused upload, up to [`DRAIN_LIMIT`] and within
/// `deadline`, before answering: a connection closed with bytes unread is
/// reset by the kernel, and the reset throws away the answer (the 413, 409
/// or 507) before the client has read it. hyper does not drain a body its
/// handler left unread, so this does.
async fn drain(body: &mut Body, deadline: Duration) {
    let read = async {
        let mut left = DRAIN_LIMIT;
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, |d| d.len());
            if n >= left {
                return;
            }
            left -= n;
        }
    };
    let _ = tokio::time::timeout(deadline, read).await;
}

async fn write_target(
    state: &AppState,
    caller: &Caller,
    id: &str,
    raw: &str,
    headers: &HeaderMap,
    body: &mut Body,
) -> Result<u64, ApiError> {
    let Target {
        session,
        root,
        path,
    } = target(state, caller, id, raw, true).await?;
    let limits = state.limits();
    let max_file = limits.max_file_bytes;
    let quota = state.files().quota(id, limits.files_quota_bytes);
    // A declared length over a bound is refused before a byte is read.
    if let Some(len) = content_length(headers) {
        if len > max_file {
            return Err(api_error(too_large(&path, max_file)));
        }
        quota.check(len).map_err(api_error)?;
    }
    let ids = session.host_ids();
    let p = path.clone();
    let mut pending = as_sandbox_user(ids, move || PendingWrite::begin(&root, &p, max_file, quota))
        .await
        .map_err(api_error)?;
    let mut buf = BytesMut::new();
    loop {
        let frame = match tokio::time::timeout(limits.body_timeout, body.frame()).await {
            Err(_) => return Err(stalled(limits.body_timeout)),
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(ApiError::bad_request(format!(
                    "cannot read the request body: {e}"
                )))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
            if buf.len() >= WRITE_CHUNK {
                pending = write_chunk(pending, buf.split().freeze()).await?;
            }
        }
    }
    if !buf.is_empty() {
        pending = write_chunk(pending, buf.freeze()).await?;
    }
    as_sandbox_user(ids, move || pending.commit())
        .await
        .map_err(api_error)
}

/// Append `data` on a blocking thread (the file is open: no lookup, no
/// credentials needed).
async fn write_chunk(mut pending: PendingWrite, data: Bytes) -> Result<PendingWrite, ApiError> {
    tokio::task::spawn_blocking(move || pending.write(&data).map(|()| pending))
        .await
        .map_err(|e| ApiError::internal(format!("a file write failed: {e}")))?
        .map_err(api_error)
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn stalled(after: Duration) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        format!("the request body stopped arriving for {}s", after.as_secs()),
    )
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files/{path}", tag = "files",
    params(
        ("id" = String, Path, description = "The sandbox id"),
        ("path" = String, Path, description = "The path inside the sandbox"),
        ("recursive" = Option<bool>, Query, description = "Delete a directory with everything in it"),
    ),
    responses(
        (status = 204, description = "Deleted (a symlink is deleted, not what it points to)"),
        (status = 404, description = "No such file in the sandbox", body = ErrorBody),
        (status = 409, description = "A directory that is not empty (without recursive=true)", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the action's record (`audit_unavailable`); nothing was done", body = ErrorBody),
    ))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, raw)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let result = async {
        let Target {
            session,
            root,
            path,
        } = target(&state, &caller, &id, &raw, true).await?;
        as_sandbox_user(session.host_ids(), move || root.remove(&path, q.recursive))
            .await
            .map_err(api_error)
    }
    .await;
    record(&state, &caller, &id, "file_delete", &raw, &result);
    result.map(|()| StatusCode::NO_CONTENT)
}
