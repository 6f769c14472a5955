//! One exec in a session: its request, its events, how it ended.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A command to run in a live session.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    /// Added to (and overriding) the session's environment.
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox; the session's when `None`.
    pub cwd: Option<PathBuf>,
    /// Bytes written to the command's stdin, which is then closed; with
    /// `keep_stdin_open` more can be written with [`Process::write_stdin`].
    pub stdin: Option<Vec<u8>>,
    pub keep_stdin_open: bool,
    /// Killed with its whole process tree after this long (exit 124,
    /// `timed_out`).
    pub timeout: Option<Duration>,
    /// Output kept per stream (bytes); the rest is counted and dropped.
    pub output_limit: Option<u64>,
}

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamName {
    Stdout,
    Stderr,
}

/// Why an exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// The command exited on its own.
    Exited,
    /// A signal ended it (sent by someone, or a limit).
    Signaled,
    /// Its timeout passed; its process tree was killed.
    TimedOut,
    /// Killed on request (or because the session ended).
    Killed,
    /// It could not be started (command not found, bad cwd, ...).
    SetupFailed,
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// The command's code; 128+N for signal N; 124 on timeout; 126/127
    /// when it could not be run / was not found.
    pub exit_code: i32,
    pub reason: ExitReason,
    pub timed_out: bool,
    pub signal: Option<i32>,
    /// Why it could not be started, or what killed it.
    pub message: Option<String>,
    pub usage: ExecUsage,
}

/// What an exec used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecUsage {
    pub wall_ms: u64,
    pub user_ms: u64,
    pub system_ms: u64,
    /// Largest resident set of one of its processes, KiB.
    pub max_rss_kib: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Output beyond the limit, counted but not kept.
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
}

/// One thing that happened to a process, numbered from 1 in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    Started {
        pid: u64,
    },
    Output {
        stream: StreamName,
        data: Vec<u8>,
    },
    /// Older events were dropped from the buffer (more than its cap).
    Gap {
        dropped_events: u64,
    },
    Exited(ExitInfo),
}
