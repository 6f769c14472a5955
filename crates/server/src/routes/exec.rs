//! Exec and the processes it makes: a JSON reply, an NDJSON stream, or a
//! background process re-attached by sequence number; signals and stdin.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use cordon_session::{EventKind, ExecRequest, ExitInfo, Process, StreamName};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::json;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{read_body, ApiJson, STDIN_BODY_LIMIT};
use crate::state::AppState;
use crate::wire::{
    event_json, text_or_base64, ExecBody, ExecLimitsView, ExecReply, ExitView, OutputReply,
    ProcessList, ProcessView, SignalBody, Started,
};

pub const NDJSON: &str = "application/x-ndjson";

fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().starts_with(NDJSON)))
}

/// Kills a foreground exec whose client went away before it ended.
struct KillOnDrop(Option<Arc<Process>>);

impl KillOnDrop {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            if p.exit().is_none() {
                tokio::spawn(async move { p.kill().await });
            }
        }
    }
}

/// The engine's request for an exec body, or why it is refused (4xx).
pub fn exec_request(body: &ExecBody) -> Result<ExecRequest, ApiError> {
    if body.argv.is_empty() || body.argv[0].is_empty() {
        return Err(ApiError::bad_request("argv is empty")
            .with_fix("send the command as a list, e.g. [\"python3\", \"a.py\"]"));
    }
    if body.argv.iter().any(|a| a.contains('\0'))
        || body
            .env
            .iter()
            .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return Err(ApiError::bad_request(
            "argv and env may not contain NUL bytes",
        ));
    }
    if let Some(bad) = body.env.keys().find(|k| !cordon_policy::is_env_name(k)) {
        return Err(ApiError::bad_request(format!(
            "env: '{bad}' is not a variable name"
        )));
    }
    let cwd = match &body.cwd {
        Some(c) if !c.starts_with('/') || c.contains('\0') => {
            return Err(ApiError::bad_request(format!(
                "cwd: '{c}' is not an absolute path inside the sandbox"
            )))
        }
        Some(c) => Some(c.into()),
        None => None,
    };
    Ok(ExecRequest {
        argv: body.argv.clone(),
        env: body
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cwd,
        stdin: body.stdin.as_ref().map(|s| s.as_bytes().to_vec()),
        keep_stdin_open: body.background && body.stdin.is_none(),
        timeout: body
            .timeout
            .as_ref()
            .map(|t| t.to_duration("timeout"))
            .transpose()?,
        output_limit: None,
        limits: Default::default(),
    })
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", tag = "exec",
    params(("id" = String, Path, description = "The sandbox id")),
    request_body = ExecBody,
    responses(
        (status = 200, description = "The command ended (JSON), or its events as NDJSON with `Accept: application/x-ndjson`", body = ExecReply),
        (status = 202, description = "Started in the background", body = Started),
        (status = 403, description = "Refused by the policy or by an approver, or its approval expired (`policy_denied`, `approval_denied`, `approval_expired`, with the subject, the rule and what would allow it)", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "The sandbox has ended", body = ErrorBody),
        (status = 429, description = "Too many execs at once", body = ErrorBody),
        (status = 503, description = "The sandbox cannot start another process now (its process limit, or namespaces the kernel has not yet freed), or the audit store cannot take the exec's record (`audit_unavailable`); retry after Retry-After", body = ErrorBody),
    ))]
pub async fn exec(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<ExecBody>,
) -> Result<Response, ApiError> {
    let session = state.session_for(&caller, &id)?;
    let mut req = exec_request(&body)?;
    let allowed = state
        .check(
            &caller,
            Some(&id),
            cordon_authz::Action::Exec {
                argv: body.argv.clone(),
            },
        )
        .await?;
    let limits = allowed
        .limits
        .map(|l| limit_exec(&mut req, &ExecLimitsView::from(&l)));
    let process = session.exec(req).await?;
    let pid = process.id();
    state.audit().record(
        &caller,
        "exec",
        Some(&id),
        json!({"pid": pid, "argv": body.argv, "cwd": body.cwd, "background": body.background, "rule": allowed.rule, "grant": allowed.grant, "limits": limits}),
    );
    record_end(&state, &caller, &id, &process);
    if body.background {
        return Ok((StatusCode::ACCEPTED, Json(Started { pid, limits })).into_response());
    }
    let guard = KillOnDrop(Some(process.clone()));
    let told = EgressTold::of(&state, &id);
    if wants_ndjson(&headers) {
        return Ok(ndjson(event_stream(
            process,
            0,
            state.limits().keepalive,
            Some(guard),
            told,
        )));
    }
    let mut reply = collect(process.clone(), guard).await;
    reply.exit.hints.extend(told.hints(&process));
    reply.limits = limits;
    Ok(Json(reply).into_response())
}

/// Put a policy's limits on an exec (here and in `cordon mcp --policy`):
/// its timeout, and its own memory and process rlimits, each only ever
/// tightening what the request asked. Returns the limits as applied.
pub fn limit_exec(req: &mut ExecRequest, l: &ExecLimitsView) -> ExecLimitsView {
    if let Some(ms) = l.timeout_ms {
        let cap = Duration::from_millis(ms);
        req.timeout = Some(req.timeout.map_or(cap, |t| t.min(cap)));
    }
    req.limits.tighten(l.memory, l.pids);
    ExecLimitsView {
        memory: req.limits.memory,
        pids: req.limits.pids,
        timeout_ms: l
            .timeout_ms
            .and(req.timeout)
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
    }
}

/// The proxy's answers while an exec ran, as hints of its end (see
/// [`crate::egress_notes`]).
#[derive(Clone)]
struct EgressTold {
    notes: Arc<crate::egress_notes::EgressNotes>,
    sandbox: String,
}

impl EgressTold {
    fn of(state: &AppState, sandbox: &str) -> EgressTold {
        EgressTold {
            notes: state.egress_notes().clone(),
            sandbox: sandbox.to_owned(),
        }
    }

    fn hints(&self, process: &Process) -> Vec<crate::hints::HintView> {
        let (from, to) = process.span();
        crate::hints::egress(self.notes.between(&self.sandbox, from, to))
    }

    /// An event as the API shows it, the `exited` one with these hints.
    fn event_json(&self, process: &Process, e: &cordon_session::Event) -> serde_json::Value {
        let mut v = event_json(e);
        if matches!(e.kind, EventKind::Exited(_)) {
            let more = self.hints(process);
            if let (false, Some(hints)) = (more.is_empty(), v["hints"].as_array_mut()) {
                hints.extend(more.iter().filter_map(|h| serde_json::to_value(h).ok()));
            }
        }
        v
    }
}

/// Record how the exec ended, whenever it does (foreground or not).
fn record_end(state: &AppState, caller: &Caller, id: &str, process: &Arc<Process>) {
    let (audit, caller, id, process) = (
        state.audit().clone(),
        caller.clone(),
        id.to_owned(),
        process.clone(),
    );
    tokio::spawn(async move {
        let x = process.wait().await;
        audit.record(
            &caller,
            "exec_ended",
            Some(&id),
            json!({"pid": process.id(), "exit_code": x.exit_code, "reason": crate::wire::word(&x.reason), "timed_out": x.timed_out, "wall_ms": x.usage.wall_ms}),
        );
    });
}

/// Wait for a foreground exec and gather its output.
async fn collect(process: Arc<Process>, mut guard: KillOnDrop) -> ExecReply {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut exit: Option<ExitInfo> = None;
    let mut seq = 0;
    loop {
        let (events, done) = process.events_after(seq).await;
        for e in events {
            seq = seq.max(e.seq);
            match e.kind {
                EventKind::Output {
                    stream: StreamName::Stdout,
                    data,
                } => out.extend_from_slice(&data),
                EventKind::Output {
                    stream: StreamName::Stderr,
                    data,
                } => err.extend_from_slice(&data),
                EventKind::Exited(info) => exit = Some(info),
                EventKind::Started { .. } | EventKind::Gap { .. } => {}
            }
        }
        if done {
            break;
        }
    }
    guard.disarm();
    let exit = match exit {
        Some(x) => x,
        None => process.wait().await,
    };
    let (stdout, stdout_encoding) = text_or_base64(&out);
    let (stderr, stderr_encoding) = text_or_base64(&err);
    ExecReply {
        pid: process.id(),
        stdout,
        stdout_encoding,
        stderr,
        stderr_encoding,
        exit: ExitView::from(&exit),
        limits: None,
    }
}

struct StreamState {
    process: Arc<Process>,
    seq: u64,
    done: bool,
    keepalive: Duration,
    guard: Option<KillOnDrop>,
    told: EgressTold,
}

/// The events of a process after `after_seq` as NDJSON lines, with a
/// keepalive line whenever nothing happened for `keepalive`. Dropping the
/// stream (the client went away) kills a foreground exec (`guard`).
fn event_stream(
    process: Arc<Process>,
    after_seq: u64,
    keepalive: Duration,
    guard: Option<KillOnDrop>,
    told: EgressTold,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let st = StreamState {
        process,
        seq: after_seq,
        done: false,
        keepalive,
        guard,
        told,
    };
    stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let wait = st.process.events_after(st.seq);
        let lines = match tokio::time::timeout(st.keepalive, wait).await {
            Err(_) => vec![json!({"event": "keepalive"})],
            Ok((events, done)) => {
                if done {
                    st.done = true;
                    if let Some(g) = st.guard.as_mut() {
                        g.disarm();
                    }
                }
                if let Some(last) = events.last() {
                    st.seq = st.seq.max(last.seq);
                }
                events
                    .iter()
                    .map(|e| st.told.event_json(&st.process, e))
                    .collect()
            }
        };
        let mut buf = Vec::new();
        for line in lines {
            if serde_json::to_writer(&mut buf, &line).is_ok() {
                buf.push(b'\n');
            }
        }
        Some((Ok(Bytes::from(buf)), st))
    })
}

fn ndjson(s: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static) -> Response {
    let mut resp = Response::new(Body::from_stream(s));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn process_of(
    state: &AppState,
    caller: &Caller,
    id: &str,
    pid: u64,
) -> Result<Arc<Process>, ApiError> {
    let session = state.session_for(caller, id)?;
    session
        .process(pid)
        .ok_or_else(|| ApiError::not_found(format!("no process {pid} in sandbox {id}")))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/processes", tag = "exec",
    params(("id" = String, Path, description = "The sandbox id")),
    responses((status = 200, description = "The sandbox's execs", body = ProcessList)))]
pub async fn processes(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ProcessList>, ApiError> {
    let session = state.session_for(&caller, &id)?;
    let processes = session
        .processes()
        .iter()
        .map(|p| {
            let exit = p.exit();
            ProcessView {
                pid: p.id(),
                argv: p.argv().to_vec(),
                running: exit.is_none(),
                exit_code: exit.map(|x| x.exit_code),
            }
        })
        .collect();
    Ok(Json(ProcessList { processes }))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct OutputQuery {
    /// Events after this sequence number (0: from the start).
    #[serde(default)]
    pub after_seq: u64,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/processes/{pid}/output", tag = "exec",
    params(("id" = String, Path, description = "The sandbox id"), ("pid" = u64, Path, description = "The process id"), OutputQuery),
    responses(
        (status = 200, description = "Events after `after_seq` (NDJSON stream with `Accept: application/x-ndjson`)", body = OutputReply),
        (status = 404, description = "No such sandbox or process", body = ErrorBody),
    ))]
pub async fn output(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, pid)): Path<(String, u64)>,
    Query(q): Query<OutputQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let process = process_of(&state, &caller, &id, pid)?;
    let told = EgressTold::of(&state, &id);
    if wants_ndjson(&headers) {
        return Ok(ndjson(event_stream(
            process,
            q.after_seq,
            state.limits().keepalive,
            None,
            told,
        )));
    }
    let (events, done) = process.events_now(q.after_seq);
    Ok(Json(OutputReply {
        events: events
            .iter()
            .map(|e| told.event_json(&process, e))
            .collect::<Vec<_>>(),
        done,
    })
    .into_response())
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/processes/{pid}/signal", tag = "exec",
    params(("id" = String, Path, description = "The sandbox id"), ("pid" = u64, Path, description = "The process id")),
    request_body = SignalBody,
    responses(
        (status = 204, description = "Sent to the command's process group"),
        (status = 404, description = "No such sandbox or process", body = ErrorBody),
        (status = 409, description = "The process has ended", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the action's record (`audit_unavailable`); nothing was sent; SIGKILL and SIGTERM are never refused", body = ErrorBody),
    ))]
pub async fn signal(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, pid)): Path<(String, u64)>,
    ApiJson(body): ApiJson<SignalBody>,
) -> Result<StatusCode, ApiError> {
    let number = body.signal.number()?;
    let process = process_of(&state, &caller, &id, pid)?;
    // Ending a process, like deleting a sandbox, is never refused; any
    // other signal may make it act, and waits for a store that records it.
    if !matches!(number, libc::SIGKILL | libc::SIGTERM) {
        let asked = json!({"kind": "signal", "pid": pid, "signal": number});
        state.audit().ready_for(&caller, Some(&id), asked)?;
    }
    process.signal(number).await?;
    state.audit().record(
        &caller,
        "signal",
        Some(&id),
        json!({"pid": pid, "signal": number}),
    );
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct StdinQuery {
    /// Close stdin after writing.
    #[serde(default)]
    pub eof: bool,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/processes/{pid}/stdin", tag = "exec",
    params(("id" = String, Path, description = "The sandbox id"), ("pid" = u64, Path, description = "The process id"), StdinQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses(
        (status = 204, description = "Written"),
        (status = 404, description = "No such sandbox or process", body = ErrorBody),
        (status = 409, description = "The process has ended or its stdin is closed", body = ErrorBody),
        (status = 413, description = "More than 8 MiB in one write", body = ErrorBody),
        (status = 503, description = "The audit store cannot take the action's record (`audit_unavailable`); nothing was done", body = ErrorBody),
    ))]
pub async fn stdin(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, pid)): Path<(String, u64)>,
    Query(q): Query<StdinQuery>,
    req: Request,
) -> Result<StatusCode, ApiError> {
    let process = process_of(&state, &caller, &id, pid)?;
    // Input to a running shell is a command: not while it goes unrecorded.
    let asked = json!({"kind": "stdin", "pid": pid});
    state.audit().ready_for(&caller, Some(&id), asked)?;
    let data = read_body(
        req.into_body(),
        STDIN_BODY_LIMIT,
        state.limits().body_timeout,
    )
    .await?;
    if !data.is_empty() {
        process.write_stdin(&data).await?;
    }
    if q.eof {
        process.close_stdin().await;
    }
    state.audit().record(
        &caller,
        "stdin",
        Some(&id),
        json!({"pid": pid, "bytes": data.len(), "eof": q.eof}),
    );
    Ok(StatusCode::NO_CONTENT)
}
