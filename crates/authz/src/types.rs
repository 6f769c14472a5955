//! The vocabulary of a decision: who asks, for what, what the profile alone
//! says, and what was decided by which rule.

use serde::{Deserialize, Serialize};
use std::time::SystemTime;

/// Who asks: a token by name (`"owner"` for the owner of the unix socket),
/// with the preset it was created with, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub name: String,
    #[serde(default)]
    pub preset: Option<String>,
}

impl Principal {
    /// A principal without a preset.
    pub fn named(name: impl Into<String>) -> Principal {
        Principal {
            name: name.into(),
            preset: None,
        }
    }
}

/// Everything an agent can ask cordon to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Create a sandbox with a profile or preset.
    CreateSandbox { profile: String },
    /// Run a command in a sandbox.
    Exec { argv: Vec<String> },
    /// Open a connection out of the sandbox.
    Egress { host: String, port: u16 },
    /// Read a file inside the sandbox through the API.
    FileRead { path: String },
    /// Write a file inside the sandbox through the API.
    FileWrite { path: String },
    /// Bind a host path into a running sandbox.
    Bind {
        host_path: String,
        #[serde(default)]
        writable: bool,
    },
    /// Raise a running sandbox's memory or process limit.
    RaiseLimits {
        #[serde(default)]
        memory: Option<u64>,
        #[serde(default)]
        pids: Option<u64>,
    },
    /// Hand a secret to a sandbox.
    UseSecret { name: String },
    /// Call an MCP tool through the gateway.
    ToolCall {
        server: String,
        tool: String,
        #[serde(default)]
        args_digest: String,
    },
    /// Promote a staged run's outputs to the host.
    Promote {
        run: String,
        #[serde(default)]
        paths: Vec<String>,
    },
}

impl Action {
    /// The action's name in policies (`exec`, `egress`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Action::CreateSandbox { .. } => "create_sandbox",
            Action::Exec { .. } => "exec",
            Action::Egress { .. } => "egress",
            Action::FileRead { .. } => "file_read",
            Action::FileWrite { .. } => "file_write",
            Action::Bind { .. } => "bind",
            Action::RaiseLimits { .. } => "raise_limits",
            Action::UseSecret { .. } => "use_secret",
            Action::ToolCall { .. } => "tool_call",
            Action::Promote { .. } => "promote",
        }
    }
}

/// Every action kind, in the order the docs list them.
pub const ACTION_KINDS: [&str; 10] = [
    "create_sandbox",
    "exec",
    "egress",
    "file_read",
    "file_write",
    "bind",
    "raise_limits",
    "use_secret",
    "tool_call",
    "promote",
];

/// What the profile or token alone says about an action, before any policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum DefaultVerdict {
    Allow { rule: String },
    Deny { rule: String },
    Ask { rule: String },
}

impl DefaultVerdict {
    /// The name of the profile rule behind this verdict.
    pub fn rule(&self) -> &str {
        match self {
            DefaultVerdict::Allow { rule }
            | DefaultVerdict::Deny { rule }
            | DefaultVerdict::Ask { rule } => rule,
        }
    }
}

/// One request for a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub principal: Principal,
    pub action: Action,
    /// The session (sandbox id) the action is for, if any.
    #[serde(default)]
    pub session: Option<String>,
    /// Scanner rule ids found in what the action carries.
    #[serde(default)]
    pub findings: Vec<String>,
    pub time: SystemTime,
    /// What the profile/token alone says.
    pub default: DefaultVerdict,
    /// `Some(reason)`: a profile or token ceiling forbids the action; no rule lifts it.
    #[serde(default)]
    pub ceiling: Option<String>,
}

impl Request {
    /// A request at the current time, with no session, findings or ceiling.
    pub fn new(principal: Principal, action: Action, default: DefaultVerdict) -> Request {
        Request {
            principal,
            action,
            session: None,
            findings: Vec::new(),
            time: SystemTime::now(),
            default,
            ceiling: None,
        }
    }
}

/// The outcome of a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Effect {
    Allow,
    Deny,
    Ask,
    AllowWithLimits {
        memory: Option<u64>,
        pids: Option<u64>,
        timeout_ms: Option<u64>,
    },
}

impl Effect {
    /// `allow`, `deny`, `ask` or `allow_with_limits`.
    pub fn name(&self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
            Effect::Ask => "ask",
            Effect::AllowWithLimits { .. } => "allow_with_limits",
        }
    }

    /// True for `Allow` and `AllowWithLimits`.
    pub fn allows(&self) -> bool {
        matches!(self, Effect::Allow | Effect::AllowWithLimits { .. })
    }
}

/// The rule that decided: a policy's `@id` (or Cedar's `policyN`) with the
/// file and line it starts on; for builtin, default and ceiling decisions a
/// synthetic file such as `<profile>` and line 0.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RuleRef {
    pub id: String,
    pub file: String,
    pub line: u32,
}

impl RuleRef {
    /// A rule that lives in no file (profile defaults, ceilings).
    pub fn synthetic(id: impl Into<String>, file: &str) -> RuleRef {
        RuleRef {
            id: id.into(),
            file: file.to_string(),
            line: 0,
        }
    }
}

impl std::fmt::Display for RuleRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}:{})", self.id, self.file, self.line)
    }
}

/// Which step of the combination order decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionSource {
    /// A profile or token ceiling: nothing lifts it.
    Ceiling,
    /// A Cedar `forbid`: nothing lifts it.
    Forbid,
    /// A `permit` annotated `@ask`.
    AskRule,
    /// A `permit` (possibly with limits).
    Permit,
    /// No rule matched: the profile's default verdict.
    Default,
}

/// Grants a human may choose when an action is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    Once,
    Session,
    Duration,
    Persistent,
}

impl ScopeKind {
    /// `once`, `session`, `duration` or `persistent`.
    pub fn name(self) -> &'static str {
        match self {
            ScopeKind::Once => "once",
            ScopeKind::Session => "session",
            ScopeKind::Duration => "duration",
            ScopeKind::Persistent => "persistent",
        }
    }

    /// Parses a scope name.
    pub fn parse(name: &str) -> Option<ScopeKind> {
        match name.trim() {
            "once" => Some(ScopeKind::Once),
            "session" => Some(ScopeKind::Session),
            "duration" => Some(ScopeKind::Duration),
            "persistent" => Some(ScopeKind::Persistent),
            _ => None,
        }
    }

    /// What an ask offers when its rule names no `@offer`: every scope but
    /// persistent (a persistent grant rewrites the policy file).
    pub fn default_offers() -> Vec<ScopeKind> {
        vec![ScopeKind::Once, ScopeKind::Session, ScopeKind::Duration]
    }
}

/// A decision with the rule behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub effect: Effect,
    pub rule: RuleRef,
    pub reason: String,
    /// Grants on offer when `effect` is `Ask`; empty otherwise.
    pub offers: Vec<ScopeKind>,
    /// Which step of the combination order decided.
    pub source: DecisionSource,
}

impl Decision {
    /// Whether a grant (an approval) may turn this decision into an allow:
    /// true for an ask and for a deny that only the profile's default gave;
    /// never for a `forbid` or a ceiling.
    pub fn grantable(&self) -> bool {
        match self.effect {
            Effect::Ask => true,
            Effect::Deny => self.source == DecisionSource::Default,
            Effect::Allow | Effect::AllowWithLimits { .. } => false,
        }
    }
}
