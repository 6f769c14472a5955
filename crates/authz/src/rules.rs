//! What cordon reads from a policy's annotations: its name, whether it asks,
//! the grants it offers, the limits it allows with and its reason.

use crate::types::{RuleRef, ScopeKind};

/// The annotations cordon knows; any other is refused (a typo would
/// otherwise silently turn an ask into an allow).
pub const KNOWN_ANNOTATIONS: [&str; 7] = [
    "id",
    "ask",
    "offer",
    "reason",
    "limit_memory",
    "limit_pids",
    "limit_timeout",
];

/// Limits a permit allows with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub timeout_ms: Option<u64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.pids.is_none() && self.timeout_ms.is_none()
    }

    /// The tighter of two limits, field by field.
    pub fn tightest(self, other: Limits) -> Limits {
        fn min(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Limits {
            memory: min(self.memory, other.memory),
            pids: min(self.pids, other.pids),
            timeout_ms: min(self.timeout_ms, other.timeout_ms),
        }
    }
}

/// What a rule does, read from its effect and annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RuleKind {
    Forbid,
    Ask { offers: Vec<ScopeKind> },
    Permit { limits: Limits },
}

/// One policy of the file, as cordon uses it.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub rule: RuleRef,
    pub kind: RuleKind,
    pub reason: Option<String>,
    /// Position in the file, for "the first rule that matched".
    pub order: usize,
}

impl Rule {
    /// The limits a permit allows with (none for other rules).
    pub fn limits(&self) -> Limits {
        match &self.kind {
            RuleKind::Permit { limits } => *limits,
            _ => Limits::default(),
        }
    }
}

/// A problem with one policy's annotations: message and how to fix it.
pub(crate) type AnnotationError = (String, String);

/// Reads a rule from a Cedar policy's effect and annotations.
pub(crate) fn read_rule<'a>(
    forbid: bool,
    annotations: impl Iterator<Item = (&'a str, &'a str)>,
    rule: RuleRef,
    order: usize,
) -> Result<Rule, AnnotationError> {
    let mut ask = false;
    let mut offers = None;
    let mut reason = None;
    let mut limits = Limits::default();
    for (key, value) in annotations {
        match key {
            "id" => {}
            "ask" => ask = true,
            "reason" => reason = Some(value.to_string()),
            "offer" => offers = Some(parse_offers(value)?),
            "limit_memory" => limits.memory = Some(parse_memory(value)?),
            "limit_pids" => limits.pids = Some(parse_pids(value)?),
            "limit_timeout" => limits.timeout_ms = Some(parse_timeout(value)?),
            other => {
                return Err((
                    format!("unknown annotation @{other}"),
                    format!("cordon knows @{}", KNOWN_ANNOTATIONS.join(", @")),
                ))
            }
        }
    }
    let kind = if forbid {
        if ask || offers.is_some() || !limits.is_empty() {
            return Err((
                "a forbid cannot carry @ask, @offer or @limit_*".into(),
                "a forbid always denies; write a permit with @ask to ask instead".into(),
            ));
        }
        RuleKind::Forbid
    } else if ask {
        if !limits.is_empty() {
            return Err((
                "an @ask rule cannot carry @limit_*".into(),
                "write the limits on a separate permit, or drop @ask".into(),
            ));
        }
        RuleKind::Ask {
            offers: offers.unwrap_or_else(ScopeKind::default_offers),
        }
    } else {
        if offers.is_some() {
            return Err((
                "@offer without @ask".into(),
                "add @ask to this permit, or drop @offer".into(),
            ));
        }
        RuleKind::Permit { limits }
    };
    Ok(Rule {
        rule,
        kind,
        reason,
        order,
    })
}

fn parse_offers(value: &str) -> Result<Vec<ScopeKind>, AnnotationError> {
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let scope = ScopeKind::parse(name).ok_or_else(|| {
            (
                format!("@offer: unknown scope '{name}'"),
                "scopes are once, session, duration, persistent, e.g. @offer(\"once,session\")"
                    .to_string(),
            )
        })?;
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    if out.is_empty() {
        return Err((
            "@offer names no scope".into(),
            "e.g. @offer(\"once,session,duration\")".into(),
        ));
    }
    Ok(out)
}

fn parse_memory(value: &str) -> Result<u64, AnnotationError> {
    cordon_policy::parse_size(value)
        .map(|s| s.as_u64())
        .map_err(|e| {
            (
                format!("@limit_memory: {e}"),
                "e.g. @limit_memory(\"512MiB\")".into(),
            )
        })
}

fn parse_pids(value: &str) -> Result<u64, AnnotationError> {
    value.trim().parse::<u64>().map_err(|_| {
        (
            format!("@limit_pids: '{value}' is not a whole number"),
            "e.g. @limit_pids(\"64\")".into(),
        )
    })
}

fn parse_timeout(value: &str) -> Result<u64, AnnotationError> {
    cordon_policy::parse_duration(value)
        .map(|d| d.as_millis())
        .map_err(|e| {
            (
                format!("@limit_timeout: {e}"),
                "e.g. @limit_timeout(\"30s\")".into(),
            )
        })
}
