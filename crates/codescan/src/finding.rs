//! What a scan reports.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; never stops a run.
    Info,
    /// Suspicious; shown before the run.
    Warn,
    /// Almost never legitimate in agent code; stops the run in `block` mode.
    Block,
}

impl Severity {
    /// The word used in rule files and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Block => "block",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Severity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "info" => Ok(Severity::Info),
            "warn" | "warning" => Ok(Severity::Warn),
            "block" => Ok(Severity::Block),
            _ => Err(format!("'{s}' is not a severity (info, warn, block)")),
        }
    }
}

/// One match of one rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule's id, e.g. `pipe-to-shell`.
    pub rule: String,
    /// The rule's severity.
    pub severity: Severity,
    /// One line: what was found.
    pub message: String,
    /// Why it matters and what legitimate code does instead.
    pub explanation: String,
    /// The file, or a name for inline code (`<command line>`).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// The source line (trimmed, at most 200 characters).
    pub snippet: String,
    /// The language the match was made in (`bash` for a shell command
    /// found inside a Python string, for example).
    pub language: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {} [{}] {}",
            self.file, self.line, self.column, self.severity, self.rule, self.message
        )
    }
}

/// A host the code names (a URL in a string, `/dev/tcp/HOST/PORT`), for
/// checking against the hosts a profile allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRef {
    /// Host name or address as written.
    pub host: String,
    /// Port, when written.
    pub port: Option<u16>,
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// The source line.
    pub snippet: String,
}
