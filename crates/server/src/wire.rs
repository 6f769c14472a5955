//! The JSON the API reads and writes (see docs/api.md). Request bodies
//! refuse unknown fields, so a misspelt option is an error, not a silent
//! default.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use cordon_session::{Event, EventKind, ExecUsage, ExitInfo, SessionUsage, StreamName};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::error::ApiError;

/// A duration: `"30s"`, `"10m"`, `"1h"`, or a number of seconds.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DurationValue {
    Seconds(u64),
    Text(String),
}

impl DurationValue {
    pub fn to_duration(&self, field: &str) -> Result<Duration, ApiError> {
        match self {
            DurationValue::Seconds(s) => Ok(Duration::from_secs(*s)),
            DurationValue::Text(t) => cordon_policy::parse_duration(t)
                .map(|d| d.as_duration())
                .map_err(|e| ApiError::bad_request(format!("{field}: {e}"))),
        }
    }
}

/// A size: `"512M"`, `"1GiB"`, or a number of bytes.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    pub fn to_bytes(&self, field: &str) -> Result<u64, ApiError> {
        match self {
            SizeValue::Bytes(b) => Ok(*b),
            SizeValue::Text(t) => cordon_policy::parse_size(t)
                .map(|s| s.0)
                .map_err(|e| ApiError::bad_request(format!("{field}: {e}"))),
        }
    }
}

/// `POST /v1/sandboxes`. Every field is optional.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// `untrusted` (default), `low`, `medium` or `high`.
    pub preset: Option<String>,
    /// A profile in the JSON form of a profile file (owner only).
    #[schema(value_type = Option<Object>)]
    pub profile: Option<Value>,
    /// Host paths bound writable, at the same path (owner only).
    #[serde(default)]
    pub rw: Vec<String>,
    /// Host paths bound read-only, at the same path (owner only).
    #[serde(default)]
    pub ro: Vec<String>,
    pub memory: Option<SizeValue>,
    pub pids: Option<u64>,
    /// Host patterns the sandbox may reach through its egress proxy.
    #[serde(default)]
    pub allow_net: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Host secrets the sandbox may use without seeing them, as
    /// `NAME@host[,host...]` (owner only): the value is read from the
    /// server's environment variable NAME; inside, $NAME is a placeholder
    /// the proxy replaces in requests to those hosts.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Ended after this long without an exec or file operation.
    pub idle_timeout: Option<DurationValue>,
    /// Ended this long after creation, whatever it does.
    pub ttl: Option<DurationValue>,
}

/// The limits a sandbox runs under.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LimitsView {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub open_files: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub output_bytes: Option<u64>,
    /// `none`, `loopback` or `proxy`.
    pub network: String,
    pub allow_net: Vec<String>,
}

/// What a sandbox uses now.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageView {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_usec: Option<u64>,
    pub execs_total: u64,
    pub execs_running: u64,
}

impl From<&SessionUsage> for UsageView {
    fn from(u: &SessionUsage) -> UsageView {
        UsageView {
            memory_bytes: u.memory_bytes,
            pids: u.pids,
            cpu_usec: u.cpu_usec,
            execs_total: u.execs_total,
            execs_running: u.execs_running,
        }
    }
}

/// A sandbox.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SandboxView {
    pub id: String,
    /// `running` or `ended`.
    pub state: String,
    /// The token's name, or `owner` for the unix socket.
    pub owner: String,
    pub preset: String,
    pub created_unix_ms: u64,
    /// Why it ended: `deleted`, `idle_timeout`, `ttl`, `died`, `shutdown`.
    pub ended: Option<String>,
    pub limits: LimitsView,
    pub usage: UsageView,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SandboxList {
    pub sandboxes: Vec<SandboxView>,
}

/// `POST /v1/sandboxes/{id}/exec`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    pub argv: Vec<String>,
    /// Written to the command's stdin, which is then closed (unless
    /// `background`, where more can be sent to `.../stdin`).
    pub stdin: Option<String>,
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Killed with its whole process tree after this long (exit 124).
    pub timeout: Option<DurationValue>,
    /// Answer `202 {"pid"}` at once; re-attach with `.../output`.
    #[serde(default)]
    pub background: bool,
}

/// What an exec used.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExecUsageView {
    pub wall_ms: u64,
    pub user_ms: u64,
    pub system_ms: u64,
    pub max_rss_kib: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
}

impl From<&ExecUsage> for ExecUsageView {
    fn from(u: &ExecUsage) -> ExecUsageView {
        ExecUsageView {
            wall_ms: u.wall_ms,
            user_ms: u.user_ms,
            system_ms: u.system_ms,
            max_rss_kib: u.max_rss_kib,
            stdout_bytes: u.stdout_bytes,
            stderr_bytes: u.stderr_bytes,
            stdout_dropped: u.stdout_dropped,
            stderr_dropped: u.stderr_dropped,
        }
    }
}

/// How an exec ended (also the `exited` event's fields).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExitView {
    pub exit_code: i32,
    /// `exited`, `signaled`, `timed_out`, `killed` or `setup_failed`.
    pub reason: String,
    pub timed_out: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub usage: ExecUsageView,
    /// What the output said that the sandbox explains (a read-only write,
    /// a failed name lookup, a refused fork or allocation), each with what
    /// the sandbox allows and how to change it; usually empty.
    pub hints: Vec<crate::hints::HintView>,
}

impl ExecLimitsView {
    /// The limits of a decision that allows with limits; `None` for any
    /// other effect.
    pub fn of_effect(effect: &cordon_authz::Effect) -> Option<ExecLimitsView> {
        match *effect {
            cordon_authz::Effect::AllowWithLimits {
                memory,
                pids,
                timeout_ms,
            } => Some(ExecLimitsView {
                memory,
                pids,
                timeout_ms,
            }),
            _ => None,
        }
    }
}

impl From<&cordon_approvals::Limits> for ExecLimitsView {
    fn from(l: &cordon_approvals::Limits) -> ExecLimitsView {
        ExecLimitsView {
            memory: l.memory,
            pids: l.pids,
            timeout_ms: l.timeout_ms,
        }
    }
}

/// A unit enum's serde spelling (`timed_out`, `idle_timeout`, ...).
pub fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::from("unknown"),
    }
}

impl From<&ExitInfo> for ExitView {
    fn from(x: &ExitInfo) -> ExitView {
        ExitView {
            exit_code: x.exit_code,
            reason: word(&x.reason),
            timed_out: x.timed_out,
            signal: x.signal,
            message: x.message.clone(),
            usage: ExecUsageView::from(&x.usage),
            hints: crate::hints::of(&x.said),
        }
    }
}

/// The answer of a foreground exec.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExecReply {
    pub pid: u64,
    pub stdout: String,
    /// `base64` when stdout was not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_encoding: Option<String>,
    pub stderr: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_encoding: Option<String>,
    #[serde(flatten)]
    pub exit: ExitView,
    /// The limits the policy's decision put on this exec, when it allowed
    /// it with limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<ExecLimitsView>,
}

/// The answer of a background exec.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Started {
    pub pid: u64,
    /// As in [`ExecReply`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<ExecLimitsView>,
}

/// Limits a policy's `allow with limits` put on one exec (only ever
/// lower than the sandbox's own): `memory` bytes of address space per
/// process (RLIMIT_AS), `pids` processes of the sandbox's user
/// (RLIMIT_NPROC, the sandbox's other processes count too), `timeout_ms`
/// the exec's timeout (the shorter of the request's and the policy's).
/// Also the decision's own limits before they are applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct ExecLimitsView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProcessView {
    pub pid: u64,
    pub argv: Vec<String>,
    pub running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProcessList {
    pub processes: Vec<ProcessView>,
}

/// `GET .../output` without the NDJSON Accept header.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OutputReply {
    /// Events as in the NDJSON stream: `started`, `stdout`, `stderr`,
    /// `gap`, `exited`.
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    /// The process has ended and every event was delivered.
    pub done: bool,
}

/// `POST .../signal`: a name (`TERM`, `SIGKILL`) or a number.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    pub signal: SignalValue,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum SignalValue {
    Number(i32),
    Name(String),
}

impl SignalValue {
    pub fn number(&self) -> Result<i32, ApiError> {
        const NAMES: &[(&str, i32)] = &[
            ("HUP", libc::SIGHUP),
            ("INT", libc::SIGINT),
            ("QUIT", libc::SIGQUIT),
            ("KILL", libc::SIGKILL),
            ("USR1", libc::SIGUSR1),
            ("USR2", libc::SIGUSR2),
            ("PIPE", libc::SIGPIPE),
            ("ALRM", libc::SIGALRM),
            ("TERM", libc::SIGTERM),
            ("CONT", libc::SIGCONT),
            ("STOP", libc::SIGSTOP),
            ("TSTP", libc::SIGTSTP),
            ("WINCH", libc::SIGWINCH),
        ];
        let n = match self {
            SignalValue::Number(n) => *n,
            SignalValue::Name(s) => {
                let up = s.trim().to_ascii_uppercase();
                let bare = up.strip_prefix("SIG").unwrap_or(&up);
                NAMES
                    .iter()
                    .find(|(name, _)| *name == bare)
                    .map(|(_, n)| *n)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("'{s}' is not a signal name"))
                            .with_fix("use TERM, KILL, INT, HUP, QUIT, USR1, USR2, ... or a number")
                    })?
            }
        };
        if !(1..=64).contains(&n) {
            return Err(ApiError::bad_request(format!(
                "{n} is not a signal number (1-64)"
            )));
        }
        Ok(n)
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub sessions: usize,
    #[schema(value_type = Object)]
    pub pool: Value,
}

/// Text for JSON: UTF-8 as is, anything else as base64 (and the encoding
/// that says so).
pub fn text_or_base64(bytes: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), None),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(bytes),
            Some("base64".to_owned()),
        ),
    }
}

/// One event as it goes over the wire (an NDJSON line, or an item of
/// `events`).
pub fn event_json(e: &Event) -> Value {
    match &e.kind {
        EventKind::Started { pid } => json!({"event": "started", "seq": e.seq, "pid": pid}),
        EventKind::Output { stream, data } => {
            let name = match stream {
                StreamName::Stdout => "stdout",
                StreamName::Stderr => "stderr",
            };
            let (data, encoding) = text_or_base64(data);
            let mut v = json!({"event": name, "seq": e.seq, "data": data});
            if let (Some(enc), Some(obj)) = (encoding, v.as_object_mut()) {
                obj.insert("encoding".into(), Value::String(enc));
            }
            v
        }
        EventKind::Gap { dropped_events } => {
            json!({"event": "gap", "seq": e.seq, "dropped_events": dropped_events})
        }
        EventKind::Exited(info) => {
            let mut v = serde_json::to_value(ExitView::from(info)).unwrap_or_else(|_| json!({}));
            if let Some(obj) = v.as_object_mut() {
                obj.insert("event".into(), Value::String("exited".into()));
                obj.insert("seq".into(), json!(e.seq));
            }
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_and_number() {
        let n = |v: &str| {
            serde_json::from_str::<SignalBody>(v)
                .unwrap()
                .signal
                .number()
        };
        assert_eq!(n(r#"{"signal":"TERM"}"#).unwrap(), libc::SIGTERM);
        assert_eq!(n(r#"{"signal":"sigkill"}"#).unwrap(), libc::SIGKILL);
        assert_eq!(n(r#"{"signal":9}"#).unwrap(), 9);
        assert!(n(r#"{"signal":"NOPE"}"#).is_err());
        assert!(n(r#"{"signal":0}"#).is_err());
    }

    #[test]
    fn output_that_is_not_utf8_is_base64() {
        let e = Event {
            seq: 2,
            kind: EventKind::Output {
                stream: StreamName::Stderr,
                data: vec![0xff, 0x00],
            },
        };
        let v = event_json(&e);
        assert_eq!(v["event"], "stderr");
        assert_eq!(v["encoding"], "base64");
        assert_eq!(v["data"], "/wA=");
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(serde_json::from_str::<CreateSandbox>(r#"{"presett":"low"}"#).is_err());
        assert!(serde_json::from_str::<ExecBody>(r#"{"argv":["x"],"bg":true}"#).is_err());
    }
}
