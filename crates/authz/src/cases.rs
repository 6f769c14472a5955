//! Case tables: actions with the decision a policy must give them, for
//! `cordon policy test` and users' own CI.
//!
//! ```toml
//! [defaults]                 # merged into every case (a case's own keys win)
//! principal = "ci"
//! default = "deny"           # what the profile alone says: allow | deny | ask
//!
//! [[case]]
//! name = "git push asks"
//! kind = "exec"
//! argv = ["git", "push"]
//! expect = "ask"             # allow | deny | ask | allow_with_limits
//! rule = "git-push-asks"     # optional: the rule that must decide
//! ```
//!
//! Time is fixed so that a table gives the same answers every day: Monday
//! 2026-01-05 12:00 UTC, moved by `hour` (0-23) and `weekday` (0 = Sunday).

use crate::error::{AuthzError, Diagnostic};
use crate::locate::line_col;
use crate::types::{Action, Decision, DefaultVerdict, Effect, Principal, Request, ScopeKind};
use crate::Authorizer;
use serde::Serialize;
use std::time::{Duration, UNIX_EPOCH};

/// Monday 2026-01-05 00:00 UTC.
const BASE_MONDAY: u64 = 1_767_571_200;

const COMMON_KEYS: [&str; 16] = [
    "name",
    "principal",
    "preset",
    "kind",
    "session",
    "findings",
    "hour",
    "weekday",
    "default",
    "default_rule",
    "ceiling",
    "expect",
    "rule",
    "offers",
    "grantable",
    "limits",
];

/// The keys each action kind takes (besides the common ones).
fn action_keys(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "create_sandbox" => &["profile"],
        "exec" => &["argv"],
        "egress" => &["host", "port"],
        "file_read" | "file_write" => &["path"],
        "bind" => &["host_path", "writable"],
        "raise_limits" => &["memory", "pids"],
        // `name` is the case's own name; the secret's is `secret`.
        "use_secret" => &["secret"],
        "tool_call" => &["server", "tool", "args_digest"],
        "promote" => &["run", "paths"],
        _ => return None,
    })
}

/// What a case expects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Expect {
    /// `allow`, `deny`, `ask` or `allow_with_limits`.
    pub effect: String,
    pub rule: Option<String>,
    pub offers: Option<Vec<ScopeKind>>,
    pub grantable: Option<bool>,
    /// Expected limits (memory bytes, pids, timeout ms) for `allow_with_limits`.
    pub limits: Option<Effect>,
}

/// One row of a case table.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub name: String,
    /// 1-based line of the case in its file.
    pub line: u32,
    pub request: Request,
    pub expect: Expect,
}

/// A case run against a policy.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub name: String,
    /// The action's kind (`exec`, `egress`, ...).
    pub kind: String,
    pub line: u32,
    pub passed: bool,
    /// What differs from the expectation; empty when it passed.
    pub mismatches: Vec<String>,
    pub decision: Decision,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    defaults: toml::Table,
    #[serde(default)]
    case: Vec<toml::Spanned<toml::Table>>,
}

/// Reads a case table.
pub fn parse_cases(src: &str, file: &str) -> Result<Vec<Case>, AuthzError> {
    let diag = |line: u32, message: String, help: &str| Diagnostic {
        file: file.to_string(),
        line,
        column: u32::from(line > 0),
        message,
        help: Some(help.to_string()),
    };
    let raw: RawFile = toml::from_str(src).map_err(|e| {
        let line = e.span().map_or(0, |s| line_col(src, s.start).0);
        AuthzError::Invalid(vec![diag(
            line,
            e.message().to_string(),
            "a case table has an optional [defaults] table and [[case]] entries",
        )])
    })?;
    let mut cases = Vec::new();
    let mut errors = Vec::new();
    for (i, spanned) in raw.case.iter().enumerate() {
        let line = line_col(src, spanned.span().start).0;
        let mut table = raw.defaults.clone();
        table.extend(spanned.get_ref().clone());
        match case_from(i, line, table) {
            Ok(c) => cases.push(c),
            Err((message, help)) => errors.push(diag(line, message, &help)),
        }
    }
    if cases.is_empty() && errors.is_empty() {
        errors.push(diag(
            0,
            "no [[case]] in the file".into(),
            "add [[case]] entries",
        ));
    }
    if errors.is_empty() {
        Ok(cases)
    } else {
        Err(AuthzError::Invalid(errors))
    }
}

type CaseError = (String, String);

fn case_from(index: usize, line: u32, mut t: toml::Table) -> Result<Case, CaseError> {
    let kind = str_key(&t, "kind")?.ok_or_else(|| {
        (
            "the case names no kind".to_string(),
            format!("kind = one of {}", crate::ACTION_KINDS.join(", ")),
        )
    })?;
    let own = action_keys(&kind).ok_or_else(|| {
        (
            format!("unknown kind '{kind}'"),
            format!("kind = one of {}", crate::ACTION_KINDS.join(", ")),
        )
    })?;
    if let Some(k) = t
        .keys()
        .find(|k| !COMMON_KEYS.contains(&k.as_str()) && !own.contains(&k.as_str()))
    {
        return Err((
            format!("unknown key '{k}' for kind {kind}"),
            format!(
                "{kind} takes {}, besides {}",
                own.join(", "),
                COMMON_KEYS.join(", ")
            ),
        ));
    }
    let name = str_key(&t, "name")?.unwrap_or_else(|| format!("case {}", index + 1));
    let principal = Principal {
        name: str_key(&t, "principal")?.unwrap_or_else(|| "owner".into()),
        preset: str_key(&t, "preset")?,
    };
    if let Some(toml::Value::String(size)) = t.get("memory").cloned() {
        let bytes = cordon_policy::parse_size(&size)
            .map_err(|e| (format!("memory: {e}"), "e.g. memory = \"1GiB\"".to_string()))?;
        let bytes = i64::try_from(bytes.as_u64()).unwrap_or(i64::MAX);
        t.insert("memory".into(), toml::Value::Integer(bytes));
    }
    let mut action_table = toml::Table::new();
    for k in own.iter().chain(["kind"].iter()) {
        if let Some(v) = t.get(*k) {
            let field = if *k == "secret" { "name" } else { *k };
            action_table.insert(field.to_string(), v.clone());
        }
    }
    let action: Action =
        toml::Value::Table(action_table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                (
                    format!("{kind}: {}", e.message()),
                    format!("{kind} takes {}", own.join(", ")),
                )
            })?;
    let default_rule = str_key(&t, "default_rule")?.unwrap_or_else(|| "profile:default".into());
    let default = match str_key(&t, "default")?.as_deref().unwrap_or("deny") {
        "allow" => DefaultVerdict::Allow { rule: default_rule },
        "deny" => DefaultVerdict::Deny { rule: default_rule },
        "ask" => DefaultVerdict::Ask { rule: default_rule },
        other => {
            return Err((
                format!("default = '{other}'"),
                "default is allow, deny or ask (what the profile alone says)".into(),
            ))
        }
    };
    let hour = int_key(&t, "hour", 23)?.unwrap_or(12);
    let weekday = int_key(&t, "weekday", 6)?.unwrap_or(1);
    let days_from_monday = (weekday + 6) % 7;
    let time =
        UNIX_EPOCH + Duration::from_secs(BASE_MONDAY + days_from_monday * 86_400 + hour * 3600);
    let request = Request {
        principal,
        action,
        session: str_key(&t, "session")?,
        findings: list_key(&t, "findings")?,
        time,
        default,
        ceiling: str_key(&t, "ceiling")?,
    };
    Ok(Case {
        name,
        line,
        request,
        expect: expect_from(&t)?,
    })
}

fn expect_from(t: &toml::Table) -> Result<Expect, CaseError> {
    let effect = str_key(t, "expect")?.ok_or_else(|| {
        (
            "the case has no expect".to_string(),
            "expect = allow | deny | ask | allow_with_limits".to_string(),
        )
    })?;
    if !["allow", "deny", "ask", "allow_with_limits"].contains(&effect.as_str()) {
        return Err((
            format!("expect = '{effect}'"),
            "expect = allow | deny | ask | allow_with_limits".into(),
        ));
    }
    let offers = match t.get("offers") {
        None => None,
        Some(_) => Some(
            list_key(t, "offers")?
                .iter()
                .map(|s| {
                    ScopeKind::parse(s).ok_or_else(|| {
                        (
                            format!("offers: unknown scope '{s}'"),
                            "scopes are once, session, duration, persistent".to_string(),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let grantable = match t.get("grantable") {
        None => None,
        Some(toml::Value::Boolean(b)) => Some(*b),
        Some(_) => {
            return Err((
                "grantable must be true or false".into(),
                "grantable = false".into(),
            ))
        }
    };
    let limits = match t.get("limits") {
        None => None,
        Some(toml::Value::Table(l)) => Some(limits_from(l)?),
        Some(_) => {
            return Err((
                "limits must be a table".into(),
                "limits = { memory = \"512MiB\", pids = 64, timeout = \"30s\" }".into(),
            ))
        }
    };
    Ok(Expect {
        effect,
        rule: str_key(t, "rule")?,
        offers,
        grantable,
        limits,
    })
}

fn limits_from(l: &toml::Table) -> Result<Effect, CaseError> {
    let help = || "limits = { memory = \"512MiB\", pids = 64, timeout = \"30s\" }".to_string();
    let memory = str_key(l, "memory")?
        .map(|s| cordon_policy::parse_size(&s).map(|b| b.as_u64()))
        .transpose()
        .map_err(|e| (format!("limits.memory: {e}"), help()))?;
    let timeout_ms = str_key(l, "timeout")?
        .map(|s| cordon_policy::parse_duration(&s).map(|d| d.as_millis()))
        .transpose()
        .map_err(|e| (format!("limits.timeout: {e}"), help()))?;
    let pids = int_key(l, "pids", u64::MAX)?;
    if let Some(k) = l
        .keys()
        .find(|k| !["memory", "pids", "timeout"].contains(&k.as_str()))
    {
        return Err((format!("limits: unknown key '{k}'"), help()));
    }
    Ok(Effect::AllowWithLimits {
        memory,
        pids,
        timeout_ms,
    })
}

fn str_key(t: &toml::Table, key: &str) -> Result<Option<String>, CaseError> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err((
            format!("{key} must be a string, not {}", v.type_str()),
            format!("{key} = \"...\""),
        )),
    }
}

fn int_key(t: &toml::Table, key: &str, max: u64) -> Result<Option<u64>, CaseError> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(n)) => match u64::try_from(*n) {
            Ok(n) if n <= max => Ok(Some(n)),
            _ => Err((
                format!("{key} = {n} is out of range"),
                format!("0 <= {key} <= {max}"),
            )),
        },
        Some(v) => Err((
            format!("{key} must be a whole number, not {}", v.type_str()),
            format!("{key} = 3"),
        )),
    }
}

fn list_key(t: &toml::Table, key: &str) -> Result<Vec<String>, CaseError> {
    let bad = || {
        (
            format!("{key} must be a list of strings"),
            format!("{key} = [\"...\"]"),
        )
    };
    match t.get(key) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// Decides a case and compares with what it expects.
pub fn run_case(authorizer: &Authorizer, case: &Case) -> Outcome {
    let decision = authorizer.decide(&case.request);
    let e = &case.expect;
    let mut mismatches = Vec::new();
    if decision.effect.name() != e.effect {
        mismatches.push(format!(
            "expected {}, got {}",
            e.effect,
            decision.effect.name()
        ));
    }
    if let Some(rule) = &e.rule {
        if *rule != decision.rule.id {
            mismatches.push(format!("expected rule {rule}, got {}", decision.rule.id));
        }
    }
    if let Some(offers) = &e.offers {
        if *offers != decision.offers {
            mismatches.push(format!(
                "expected offers [{}], got [{}]",
                names(offers),
                names(&decision.offers)
            ));
        }
    }
    if let Some(g) = e.grantable {
        if g != decision.grantable() {
            mismatches.push(format!(
                "expected grantable = {g}, got {}",
                decision.grantable()
            ));
        }
    }
    if let Some(limits) = &e.limits {
        if *limits != decision.effect {
            mismatches.push(format!("expected {limits:?}, got {:?}", decision.effect));
        }
    }
    Outcome {
        name: case.name.clone(),
        kind: case.request.action.kind().to_string(),
        line: case.line,
        passed: mismatches.is_empty(),
        mismatches,
        decision,
    }
}

fn names(scopes: &[ScopeKind]) -> String {
    scopes
        .iter()
        .map(|s| s.name())
        .collect::<Vec<_>>()
        .join(",")
}
