//! Reading the audit store back through the API: a sandbox's timeline
//! (`GET /v1/sandboxes/{id}/timeline`: its execs, egress, incidents,
//! approvals and other actions, in order) and the hash chain's check
//! (`GET /v1/audit/verify`).

use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use cordon_audit::{AuditStore, Record};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sandboxes/{id}/timeline", get(timeline))
        .route("/v1/audit/verify", get(verify))
}

/// Entries one timeline answer holds at most.
const MAX_ENTRIES: usize = 5000;

/// How long a chain check is reused before the store is read again.
const VERIFY_REUSE: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TimelineQuery {
    /// Only records after this seq (for polling: the last seq seen).
    pub after: Option<u64>,
    /// At most this many entries (default and most: 5000).
    pub limit: Option<usize>,
}

/// One thing that happened to a sandbox.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TimelineEntry {
    /// The record's position in the audit chain.
    pub seq: u64,
    /// RFC 3339 UTC.
    pub time: String,
    /// `run`, `exec`, `egress`, `incident`, `approval`, `file` or `action`.
    pub category: String,
    /// The record's kind (`api_action`, `egress`, `incident`, ...).
    pub kind: String,
    /// For API actions: the action (`exec`, `exec_ended`, `file_write`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// For API actions: who (a token's name, `owner`, `server`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// One line for people.
    pub summary: String,
    /// The record's body as stored (redacted).
    #[schema(value_type = Object)]
    pub detail: Value,
}

/// A sandbox's records, oldest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Timeline {
    pub sandbox: String,
    /// Its run id in the audit store (`cordon audit show RUN`).
    pub run: String,
    pub entries: Vec<TimelineEntry>,
    /// More entries follow: ask again with `after` = the last seq.
    pub truncated: bool,
}

fn word(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn argv_text(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().map_or_else(|| s.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The category and one-line summary of an `api_action` record.
fn action_summary(action: &str, d: &Value) -> (&'static str, String) {
    let pid = word(d, "pid");
    match action {
        "exec" => (
            "exec",
            format!("exec {} (pid {pid})", argv_text(&d["argv"])),
        ),
        "exec_ended" => {
            let how = match d.get("exit_code").and_then(Value::as_i64) {
                Some(code) => format!("exit {code}"),
                None => word(d, "reason"),
            };
            let timed_out = if d["timed_out"].as_bool() == Some(true) {
                ", timed out"
            } else {
                ""
            };
            (
                "exec",
                format!(
                    "exec pid {pid} ended: {how}{timed_out} after {} ms",
                    word(d, "wall_ms")
                ),
            )
        }
        "create" => ("run", format!("created (preset {})", word(d, "preset"))),
        "end" => ("run", format!("ended: {}", word(d, "cause"))),
        "lost" => ("run", "lost with its server".to_owned()),
        a if a.starts_with("file_") => (
            "file",
            format!("{} {}", a.replace('_', " "), word(d, "path")),
        ),
        a if a.starts_with("context") => (
            "exec",
            format!("{} {}", a.replace('_', " "), word(d, "context")),
        ),
        "decision" => ("approval", decision_summary(d)),
        a if a.starts_with("approval_") || a.starts_with("grant_") => {
            ("approval", approval_summary(a, d))
        }
        a => ("action", format!("{} {}", a.replace('_', " "), compact(d))),
    }
}

/// An approval's (or grant's, or action's) subject in a few words:
/// `{"kind": "exec", "argv_prefix": [..]}` -> `exec git push`.
fn subject_text(v: &Value) -> String {
    let kind = word(v, "kind");
    let what = match kind.as_str() {
        "exec" => argv_text(v.get("argv_prefix").unwrap_or(&v["argv"])),
        "egress" => format!("{}:{}", word(v, "host"), word(v, "port")),
        "path" | "file_read" | "file_write" => word(v, "path"),
        "bind" => word(v, "host_path"),
        "tool" | "tool_call" => format!("{}/{}", word(v, "server"), word(v, "tool")),
        "create" | "create_sandbox" => word(v, "profile"),
        "secret" | "use_secret" => word(v, "name"),
        "promote" => word(v, "run"),
        _ => compact(v),
    };
    format!("{kind} {what}")
}

/// A policy decision: what the policy said, what happened, which rule.
fn decision_summary(d: &Value) -> String {
    let rule = &d["rule"];
    let grant = match d.get("grant").and_then(Value::as_str) {
        Some(g) => format!(", grant {g}"),
        None => String::new(),
    };
    format!(
        "policy {} -> {}: {} (rule {} at {}:{}{grant})",
        word(d, "effect"),
        word(d, "outcome"),
        subject_text(&d["action"]),
        word(rule, "id"),
        word(rule, "file"),
        word(rule, "line"),
    )
}

/// An approval asked, answered or expired; a grant started or ended.
fn approval_summary(action: &str, d: &Value) -> String {
    match action {
        "approval_created" => format!(
            "approval asked: {} ({})",
            subject_text(&d["subject"]),
            word(d, "reason")
        ),
        "approval_decided" => format!(
            "approval {} by {}: {} (scope {})",
            word(d, "state"),
            word(d, "decided_by"),
            subject_text(&d["subject"]),
            word(&d["scope"], "kind"),
        ),
        "approval_expired" => format!(
            "approval expired unanswered: {}",
            subject_text(&d["subject"])
        ),
        "grant_started" => format!(
            "grant started: {} (scope {})",
            subject_text(&d["subject"]),
            word(&d["scope"], "kind")
        ),
        "grant_ended" => format!(
            "grant ended ({}): {}",
            word(d, "why"),
            subject_text(&d["grant"]["subject"])
        ),
        a => format!("{} {}", a.replace('_', " "), compact(d)),
    }
}

/// A body as short JSON for a summary line.
fn compact(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 160 {
        return s;
    }
    let mut end = 157;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// A record as a timeline entry.
pub fn entry(r: &Record) -> TimelineEntry {
    let b = &r.body;
    let (category, action, actor, summary) = match r.kind.as_str() {
        "api_action" => {
            let action = word(b, "action");
            let (cat, summary) = action_summary(&action, &b["detail"]);
            (cat, Some(action), Some(word(b, "actor")), summary)
        }
        "egress" => {
            let target = format!("{}:{}", word(b, "host"), word(b, "port"));
            let why = [word(b, "rule"), word(b, "reason")]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            let why = if why.is_empty() {
                why
            } else {
                format!(" ({why})")
            };
            (
                "egress",
                None,
                None,
                format!(
                    "{} {} {target}{why}",
                    word(b, "decision"),
                    word(b, "method")
                ),
            )
        }
        "incident" => (
            "incident",
            None,
            None,
            format!(
                "{} {}: {}",
                word(b, "severity"),
                word(b, "kind"),
                word(b, "summary")
            ),
        ),
        "run_started" => (
            "run",
            None,
            None,
            format!("run started (profile {})", word(b, "profile_name")),
        ),
        "run_ended" => (
            "run",
            None,
            None,
            format!("run ended: {}", word(b, "reason")),
        ),
        k if k.contains("approval") || k.contains("decision") || k.contains("grant") => (
            "approval",
            None,
            None,
            format!("{} {}", k.replace('_', " "), compact(b)),
        ),
        k => ("action", None, None, format!("{k} {}", compact(b))),
    };
    TimelineEntry {
        seq: r.seq,
        time: r.time.clone(),
        category: category.to_owned(),
        kind: r.kind.clone(),
        action,
        actor,
        summary,
        detail: b.clone(),
    }
}

fn no_audit() -> ApiError {
    ApiError::unavailable("auditing is off on this server")
        .with_fix("start cordon serve without --no-audit")
}

fn store_err(e: cordon_audit::AuditError) -> ApiError {
    ApiError::internal(format!("cannot read the audit store: {e}"))
}

/// Read the timeline from the store (blocking).
fn read_timeline(
    path: &std::path::Path,
    live_run: Option<String>,
    caller: &Caller,
    id: &str,
    after: u64,
    limit: usize,
) -> Result<Timeline, ApiError> {
    let missing = || {
        ApiError::not_found(format!("no sandbox '{id}' in the audit store"))
            .with_fix("GET /v1/sandboxes lists the sandboxes you can use")
    };
    let store = AuditStore::open(path).map_err(store_err)?;
    let run = match live_run {
        Some(r) => r,
        None => store
            .run_started_with("sandbox", id)
            .map_err(store_err)?
            .ok_or_else(missing)?,
    };
    let view = store.show(&run).map_err(store_err)?;
    let owner = view
        .records
        .first()
        .filter(|r| r.kind == "run_started")
        .map(|r| word(&r.body["enforcement"], "owner"))
        .unwrap_or_default();
    // Another token's sandbox answers exactly like one that does not exist.
    if !caller.may_see(&owner) {
        return Err(missing());
    }
    let mut entries: Vec<TimelineEntry> = view
        .records
        .iter()
        .filter(|r| r.seq > after)
        .map(entry)
        .collect();
    let truncated = entries.len() > limit;
    entries.truncate(limit);
    Ok(Timeline {
        sandbox: id.to_owned(),
        run,
        entries,
        truncated,
    })
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/timeline", tag = "audit",
    params(("id" = String, Path, description = "The sandbox id"), TimelineQuery),
    responses(
        (status = 200, description = "The sandbox's records from the audit store, oldest first (also after it ended)", body = Timeline),
        (status = 404, description = "No such sandbox (or another token's)", body = ErrorBody),
        (status = 503, description = "Auditing is off", body = ErrorBody),
    ))]
pub async fn timeline(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<TimelineQuery>,
) -> Result<Json<Timeline>, ApiError> {
    let audit = state.audit().clone();
    let path = audit.store_path().ok_or_else(no_audit)?.to_path_buf();
    let live_run = audit.live_run(&id);
    let limit = q.limit.unwrap_or(MAX_ENTRIES).clamp(1, MAX_ENTRIES);
    let after = q.after.unwrap_or(0);
    tokio::task::spawn_blocking(move || {
        // What was recorded before this request is on disk first.
        audit.flush();
        read_timeline(&path, live_run, &caller, &id, after, limit)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the timeline reader failed: {e}")))?
    .map(Json)
}

/// One thing found wrong with the store.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProblemView {
    pub seq: Option<u64>,
    /// The record's run (shown to the owner only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub kind: Option<String>,
    pub what: String,
}

/// The audit chain's state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VerifyView {
    /// False when the server runs with auditing off (nothing else is set).
    pub enabled: bool,
    /// True when the chain, the head file and every blob check out.
    pub ok: bool,
    /// Records checked.
    pub records: u64,
    pub blobs: u64,
    /// The last record's seq and hash.
    pub head_seq: u64,
    pub head_hash: String,
    /// What is wrong, the first broken record first (empty when `ok`).
    pub problems: Vec<ProblemView>,
    /// When the check ran (a check is reused for up to 5 s).
    pub checked_unix_ms: u64,
}

/// One chain check at a time; the last one reused for `VERIFY_REUSE`.
#[derive(Debug, Default)]
pub struct Verifier {
    last: tokio::sync::Mutex<Option<(Instant, VerifyView)>>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn check_chain(path: &std::path::Path) -> Result<VerifyView, ApiError> {
    let report = AuditStore::open(path)
        .and_then(|s| s.verify())
        .map_err(store_err)?;
    Ok(VerifyView {
        enabled: true,
        ok: report.ok,
        records: report.records,
        blobs: report.blobs,
        head_seq: report.head.seq,
        head_hash: report.head.hash,
        problems: report
            .problems
            .into_iter()
            .map(|p| ProblemView {
                seq: p.seq,
                run_id: p.run_id,
                kind: p.kind,
                what: p.what,
            })
            .collect(),
        checked_unix_ms: now_ms(),
    })
}

#[utoipa::path(get, path = "/v1/audit/verify", tag = "audit",
    responses(
        (status = 200, description = "The hash chain's check (as `cordon audit verify`); a token sees no run ids", body = VerifyView),
    ))]
pub async fn verify(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<VerifyView>, ApiError> {
    let audit = state.audit().clone();
    let Some(path) = audit.store_path().map(std::path::Path::to_path_buf) else {
        return Ok(Json(VerifyView {
            enabled: false,
            ok: false,
            records: 0,
            blobs: 0,
            head_seq: 0,
            head_hash: String::new(),
            problems: Vec::new(),
            checked_unix_ms: now_ms(),
        }));
    };
    let mut last = state.verifier().last.lock().await;
    let fresh = last
        .as_ref()
        .filter(|(at, _)| at.elapsed() < VERIFY_REUSE)
        .map(|(_, v)| v.clone());
    let mut view = match fresh {
        Some(v) => v,
        None => {
            let v = tokio::task::spawn_blocking(move || {
                audit.flush();
                check_chain(&path)
            })
            .await
            .map_err(|e| ApiError::internal(format!("the chain check failed: {e}")))??;
            *last = Some((Instant::now(), v.clone()));
            v
        }
    };
    drop(last);
    if !caller.is_owner() {
        for p in &mut view.problems {
            p.run_id = None;
        }
    }
    Ok(Json(view))
}
