//! What the store records: the typed events callers append, and the
//! stored [`Record`] that wraps each one in the hash chain.
//!
//! Bodies are stored as JSON, so adding a field never needs a migration;
//! readers get [`Record::body`] as a [`serde_json::Value`] and can ask for
//! the typed form with [`Record::event`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Record kind of [`RunStarted`].
pub const KIND_RUN_STARTED: &str = "run_started";
/// Record kind of [`RunEnded`].
pub const KIND_RUN_ENDED: &str = "run_ended";
/// Record kind of [`Egress`].
pub const KIND_EGRESS: &str = "egress";
/// Record kind of [`Incident`].
pub const KIND_INCIDENT: &str = "incident";
/// Kind of [`Promotion`] records.
pub const KIND_PROMOTION: &str = "promotion";
/// Record kind for an action taken through the HTTP API of `cordon serve`.
pub const KIND_API_ACTION: &str = "api_action";
/// Kind of [`McpCall`] records.
pub const KIND_MCP_CALL: &str = "mcp_call";
/// Record kind written by the store itself when, before a write, it found
/// that the store's last record did not match the head file (records were
/// removed or the head file replaced). `verify` always reports it.
pub const KIND_HEAD_MISMATCH: &str = "head_mismatch";

/// A run began. The record's time is the start time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    /// The command and its arguments, as given.
    pub argv: Vec<String>,
    /// Working directory inside the sandbox (or on the host, if relevant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// How the code was given when not as a command: `script` or `stdin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_source: Option<String>,
    /// Blob hash of the code the run executed (see
    /// [`crate::AuditWriter::start_run`]); the blob holds the redacted text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_hash: Option<String>,
    /// Name of the profile (preset or file) the run used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_name: Option<String>,
    /// Blob hash of the resolved profile text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_hash: Option<String>,
    /// The host's enforcement level as `cordon doctor` sees it, supplied by
    /// the caller as JSON.
    #[serde(default)]
    pub enforcement: Value,
    /// Version of cordon that ran it.
    pub cordon_version: String,
    /// What the pre-execution scanner found in the code before the run
    /// (`{"mode": ..., "findings": [...]}`), when it was on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<Value>,
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The workload exited by itself.
    Exited,
    /// The workload was killed by a signal it did not get from cordon.
    Signal,
    /// The wall-clock deadline passed.
    Timeout,
    /// The memory limit was hit (OOM kill).
    MemoryLimit,
    /// The pids limit was hit.
    PidsLimit,
    /// The output limit was hit.
    OutputLimit,
    /// The CPU time limit was hit.
    CpuLimit,
    /// The file size limit was hit.
    FileSizeLimit,
    /// The command could not be executed (not found, not executable).
    ExecFailed,
    /// Scratch or a writable mount filled up.
    DiskLimit,
    /// Stopped by the operator or the supervisor (cancel, shutdown).
    Killed,
    /// The sandbox could not be set up or the workload not started.
    SpawnFailed,
    /// cordon refused to start it (the pre-execution scanner's block or an
    /// unanswered ask).
    Refused,
    /// A reason this version does not know (written by a newer cordon).
    #[serde(other)]
    Other,
}

impl EndReason {
    /// The stored spelling, e.g. `memory_limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Exited => "exited",
            EndReason::Signal => "signal",
            EndReason::Timeout => "timeout",
            EndReason::MemoryLimit => "memory_limit",
            EndReason::PidsLimit => "pids_limit",
            EndReason::OutputLimit => "output_limit",
            EndReason::CpuLimit => "cpu_limit",
            EndReason::FileSizeLimit => "file_size_limit",
            EndReason::ExecFailed => "exec_failed",
            EndReason::DiskLimit => "disk_limit",
            EndReason::Killed => "killed",
            EndReason::SpawnFailed => "spawn_failed",
            EndReason::Refused => "refused",
            EndReason::Other => "other",
        }
    }
}

/// What happened to one output stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// Bytes kept (delivered to the caller).
    pub kept_bytes: u64,
    /// Bytes dropped because of the output limit.
    pub dropped_bytes: u64,
    /// An excerpt of the output (the writer redacts it before storage).
    #[serde(default)]
    pub excerpt: String,
}

/// A run ended. The record's time is the end time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnded {
    /// Why it ended.
    pub reason: EndReason,
    /// Exit code, when the workload exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Signal number, when it was killed by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Wall-clock time in milliseconds.
    pub wall_ms: u64,
    /// User CPU time in milliseconds.
    pub user_ms: u64,
    /// System CPU time in milliseconds.
    pub sys_ms: u64,
    /// Peak memory in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// Standard output.
    #[serde(default)]
    pub stdout: StreamSummary,
    /// Standard error.
    #[serde(default)]
    pub stderr: StreamSummary,
    /// What the host enforced for this run, layer by layer (isolation
    /// level, Landlock ABI, cgroup version, degraded layers), as supplied by
    /// the caller.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub enforcement: Value,
}

/// The proxy's decision on one connection or request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Let through.
    Allow,
    /// Refused.
    Deny,
}

/// One egress decision. The record's time is when the request started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Egress {
    /// `GET`, `CONNECT`, `SOCKS5`, …
    pub method: String,
    /// Host name or address asked for.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Request path, when the proxy saw one (plain HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Bytes sent upstream.
    #[serde(default)]
    pub bytes_sent: u64,
    /// Bytes received from upstream.
    #[serde(default)]
    pub bytes_received: u64,
    /// Duration in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// Allowed or denied.
    pub decision: Decision,
    /// The rule that decided, as written in the profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Why, in words (e.g. "private address", "rate limit").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Which boundary an incident touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentKind {
    /// A denied syscall from the sensitive set.
    Syscall,
    /// Denied egress.
    Egress,
    /// A limit breach (memory, pids, deadline, output, disk).
    Limit,
    /// A Landlock denial.
    Landlock,
    /// A secret showed up where it must not (e.g. in output).
    Secret,
    /// The pre-execution scanner flagged the code at block level.
    Scan,
    /// An MCP server's tools or results crossed the gateway's policy: a
    /// changed tool definition, instructions hidden in a description, a
    /// refused call, a secret in a result.
    Mcp,
    /// A kind this version does not know.
    #[serde(other)]
    Other,
}

impl IncidentKind {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentKind::Syscall => "syscall",
            IncidentKind::Egress => "egress",
            IncidentKind::Limit => "limit",
            IncidentKind::Landlock => "landlock",
            IncidentKind::Secret => "secret",
            IncidentKind::Scan => "scan",
            IncidentKind::Mcp => "mcp",
            IncidentKind::Other => "other",
        }
    }
}

/// How bad an incident is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Expected friction (e.g. output cut).
    Low,
    /// Worth a look.
    Medium,
    /// Likely an attempt to cross a boundary.
    High,
    /// An attempt to escape the sandbox.
    Critical,
}

impl Severity {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

/// An attempt to cross a boundary, or a limit breach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// Which boundary.
    pub kind: IncidentKind,
    /// How bad.
    pub severity: Severity,
    /// One line for people.
    pub summary: String,
    /// Details as JSON, e.g. `{"syscall":"mount","nr":165,"args":[…],"pid":7}`.
    /// Evidence read from the workload's memory is evidence only.
    #[serde(default)]
    pub evidence: Value,
}

/// Staged changes applied to a host tree (`cordon promote`), recorded
/// under the staged run's id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Promotion {
    /// The host directory written.
    pub target: String,
    /// SHA-256 of the run's whole change set, as captured when it ended.
    pub change_set: String,
    /// SHA-256 of the entries applied by this promotion.
    pub applied: String,
    /// `op path` of each applied entry.
    pub entries: Vec<String>,
    /// Policy rules the caller overrode (`--allow`) or a person answered
    /// yes to.
    #[serde(default)]
    pub allowed_rules: Vec<String>,
}

/// An action taken through the HTTP API of `cordon serve` (create, exec,
/// file operation, delete, ...), recorded under the sandbox's run id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiAction {
    /// Who asked: the token's name, or `owner` for the unix socket.
    pub actor: String,
    /// What: `create`, `exec`, `signal`, `file_write`, `delete`, ...
    pub action: String,
    /// The sandbox it touched, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The details (the command, the path, the outcome).
    #[serde(default)]
    pub detail: Value,
}

/// One MCP request (`tools/call`, `tools/list`, ...) that `cordon mcp
/// wrap` passed to, or refused for, the server it runs in a sandbox;
/// recorded under the sandbox's run id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpCall {
    /// The server: its command line.
    pub server: String,
    /// The MCP method, e.g. `tools/call`.
    pub method: String,
    /// The tool called (`tools/call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Passed to the server, or refused by the gateway.
    pub decision: Decision,
    /// The policy rule that decided, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// SHA-256 of the arguments' canonical JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_digest: Option<String>,
    /// The arguments themselves, only when the policy asks to record them
    /// (redacted like every stored string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// From the request to the server's answer, in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// Bytes of the result as passed to the client.
    #[serde(default)]
    pub result_bytes: u64,
    /// The server answered with an error (or `isError`).
    #[serde(default)]
    pub error: bool,
    /// Secrets or canaries redacted from the result.
    #[serde(default)]
    pub redacted: u64,
}

/// One event to append.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// See [`RunStarted`].
    RunStarted(RunStarted),
    /// See [`RunEnded`].
    RunEnded(RunEnded),
    /// See [`Egress`].
    Egress(Egress),
    /// See [`Incident`].
    Incident(Incident),
    /// See [`Promotion`].
    Promotion(Promotion),
    /// See [`ApiAction`].
    ApiAction(ApiAction),
    /// See [`McpCall`].
    McpCall(McpCall),
}

impl Event {
    /// The record kind, e.g. `run_started`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted(_) => KIND_RUN_STARTED,
            Event::RunEnded(_) => KIND_RUN_ENDED,
            Event::Egress(_) => KIND_EGRESS,
            Event::Incident(_) => KIND_INCIDENT,
            Event::Promotion(_) => KIND_PROMOTION,
            Event::ApiAction(_) => KIND_API_ACTION,
            Event::McpCall(_) => KIND_MCP_CALL,
        }
    }

    /// The body as JSON.
    pub fn to_body(&self) -> Result<Value, serde_json::Error> {
        match self {
            Event::RunStarted(e) => serde_json::to_value(e),
            Event::RunEnded(e) => serde_json::to_value(e),
            Event::Egress(e) => serde_json::to_value(e),
            Event::Incident(e) => serde_json::to_value(e),
            Event::Promotion(e) => serde_json::to_value(e),
            Event::ApiAction(e) => serde_json::to_value(e),
            Event::McpCall(e) => serde_json::to_value(e),
        }
    }

    /// Parses a stored body of a known kind; `None` for other kinds.
    pub fn from_body(kind: &str, body: &Value) -> Option<Result<Event, serde_json::Error>> {
        let parse = |f: fn(Value) -> Result<Event, serde_json::Error>| Some(f(body.clone()));
        match kind {
            KIND_RUN_STARTED => parse(|v| serde_json::from_value(v).map(Event::RunStarted)),
            KIND_RUN_ENDED => parse(|v| serde_json::from_value(v).map(Event::RunEnded)),
            KIND_EGRESS => parse(|v| serde_json::from_value(v).map(Event::Egress)),
            KIND_INCIDENT => parse(|v| serde_json::from_value(v).map(Event::Incident)),
            KIND_PROMOTION => parse(|v| serde_json::from_value(v).map(Event::Promotion)),
            KIND_API_ACTION => parse(|v| serde_json::from_value(v).map(Event::ApiAction)),
            KIND_MCP_CALL => parse(|v| serde_json::from_value(v).map(Event::McpCall)),
            _ => None,
        }
    }
}

impl From<RunStarted> for Event {
    fn from(e: RunStarted) -> Self {
        Event::RunStarted(e)
    }
}
impl From<RunEnded> for Event {
    fn from(e: RunEnded) -> Self {
        Event::RunEnded(e)
    }
}
impl From<Egress> for Event {
    fn from(e: Egress) -> Self {
        Event::Egress(e)
    }
}
impl From<Promotion> for Event {
    fn from(e: Promotion) -> Self {
        Event::Promotion(e)
    }
}
impl From<ApiAction> for Event {
    fn from(e: ApiAction) -> Self {
        Event::ApiAction(e)
    }
}
impl From<McpCall> for Event {
    fn from(e: McpCall) -> Self {
        Event::McpCall(e)
    }
}
impl From<Incident> for Event {
    fn from(e: Incident) -> Self {
        Event::Incident(e)
    }
}

/// One stored record, as read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Position in the chain, from 1, without gaps.
    pub seq: u64,
    /// RFC 3339 UTC, derived from `time_ns`.
    pub time: String,
    /// Nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// The run this record belongs to (empty for store-level records).
    pub run_id: String,
    /// `run_started`, `run_ended`, `egress`, `incident`, `head_mismatch`.
    pub kind: String,
    /// The body (a JSON string if the stored text is not valid JSON).
    pub body: Value,
    /// Hash of the previous record (64 zeros for the first).
    pub prev_hash: String,
    /// This record's hash.
    pub hash: String,
}

impl Record {
    /// The typed event, for the four event kinds.
    pub fn event(&self) -> Option<Result<Event, serde_json::Error>> {
        Event::from_body(&self.kind, &self.body)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let ev = Event::Incident(Incident {
            kind: IncidentKind::Syscall,
            severity: Severity::Critical,
            summary: "mount denied".into(),
            evidence: serde_json::json!({"syscall": "mount", "nr": 165, "pid": 7}),
        });
        let body = ev.to_body().unwrap();
        assert_eq!(body["kind"], "syscall");
        assert_eq!(body["severity"], "critical");
        let back = Event::from_body(ev.kind(), &body).unwrap().unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn unknown_enum_values_and_extra_fields_read() {
        let body = serde_json::json!({
            "reason": "cosmic_ray", "wall_ms": 1, "user_ms": 0, "sys_ms": 0, "new_field": true
        });
        let Some(Ok(Event::RunEnded(e))) = Event::from_body(KIND_RUN_ENDED, &body) else {
            panic!("did not parse");
        };
        assert_eq!(e.reason, EndReason::Other);
    }
}
