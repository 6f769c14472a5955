//! Approvals, their answers, the grants they make, and the events about
//! them, with their JSON forms (docs/api.md).

use std::time::{Duration, SystemTime};

use cordon_authz::{RuleRef, ScopeKind};
use serde::{Deserialize, Serialize};

use crate::subject::Subject;

/// How long an approved answer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This one call, exactly as asked.
    Once,
    /// Until the session ends.
    Session,
    /// For this long.
    For(Duration),
    /// A rule appended to the policy file (after a second confirmation).
    Persistent,
}

/// JSON of a scope: `{"kind": "once"}`, `{"kind": "duration", "seconds": 600}`.
#[derive(Serialize, Deserialize)]
struct ScopeJson {
    kind: ScopeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seconds: Option<u64>,
}

impl Serialize for Scope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ScopeJson {
            kind: self.kind(),
            seconds: match self {
                Scope::For(d) => Some(d.as_secs()),
                _ => None,
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
        let j = ScopeJson::deserialize(d)?;
        Ok(match j.kind {
            ScopeKind::Once => Scope::Once,
            ScopeKind::Session => Scope::Session,
            ScopeKind::Duration => Scope::For(Duration::from_secs(j.seconds.unwrap_or(0))),
            ScopeKind::Persistent => Scope::Persistent,
        })
    }
}

impl Scope {
    pub fn kind(&self) -> ScopeKind {
        match self {
            Scope::Once => ScopeKind::Once,
            Scope::Session => ScopeKind::Session,
            Scope::For(_) => ScopeKind::Duration,
            Scope::Persistent => ScopeKind::Persistent,
        }
    }

    /// For people: `once`, `for the session`, `for 600s`, `persistently`.
    pub fn describe(&self) -> String {
        match self {
            Scope::Once => "once".into(),
            Scope::Session => "for the session".into(),
            Scope::For(d) => format!("for {}s", d.as_secs()),
            Scope::Persistent => "persistently (a rule in the policy file)".into(),
        }
    }
}

/// Where an approval is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
    Expired,
}

impl ApprovalState {
    pub fn word(&self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<ApprovalState> {
        [
            ApprovalState::Pending,
            ApprovalState::Approved,
            ApprovalState::Denied,
            ApprovalState::Expired,
        ]
        .into_iter()
        .find(|st| st.word() == s)
    }
}

/// A question to a human: may this action happen?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Approval {
    /// `ap_` and 16 hex digits.
    pub id: String,
    pub session: Option<String>,
    /// Who asked (a token's name, or `owner`).
    pub principal: String,
    /// The subject's kind (`exec`, `egress`, ...).
    pub kind: String,
    /// Exactly what was asked for (`{"kind": "exec", "argv_prefix": [..]}`, ...).
    #[schema(value_type = Object)]
    pub subject: Subject,
    /// What a grant longer than once would cover (narrowed).
    #[schema(value_type = Object)]
    pub grant_subject: Subject,
    /// Why the policy asks.
    pub reason: String,
    /// Scanner findings about the action, when there are any.
    pub risk: Vec<String>,
    /// The scopes the answer may choose from (`once`, `session`, `duration`, `persistent`).
    #[schema(value_type = Vec<String>)]
    pub offers: Vec<ScopeKind>,
    pub created_unix_ms: u64,
    pub expires_unix_ms: u64,
    pub state: ApprovalState,
    pub decided_by: Option<String>,
    pub decided_unix_ms: Option<u64>,
    /// The scope of the answer: `{"kind": "duration", "seconds": 600}`.
    #[schema(value_type = Option<Object>)]
    pub scope: Option<Scope>,
    /// The rule that asked: `{"id", "file", "line"}`.
    #[schema(value_type = Object)]
    pub rule: RuleRef,
    /// The grant the approval made, when approved.
    pub grant: Option<String>,
}

/// What the answer was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `confirm` is the token the first answer of a persistent approval
    /// gave back (see [`crate::ApprovalError::ConfirmPersistent`]).
    Approve {
        scope: Scope,
        confirm: Option<String>,
    },
    Deny,
}

/// What an approved approval allows, for how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// `gr_` and 16 hex digits.
    pub id: String,
    pub approval: String,
    pub principal: String,
    pub session: Option<String>,
    /// Narrowed (the exact subject for `once`).
    pub subject: Subject,
    pub scope: Scope,
    /// When a duration grant (or an unclaimed once grant) ends.
    pub until_unix_ms: Option<u64>,
}

impl Grant {
    pub fn until(&self) -> Option<SystemTime> {
        self.until_unix_ms
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }
}

/// Why a grant ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantEnd {
    /// A once grant was used.
    Used,
    /// Its session ended.
    SessionEnded,
    /// Its duration passed.
    Expired,
    /// Taken back before its time.
    Revoked,
}

/// Something happened to an approval or a grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ApprovalEvent {
    Created(Approval),
    Decided(Approval),
    Expired(Approval),
    GrantStarted(Grant),
    GrantEnded { grant: Grant, why: GrantEnd },
}

impl ApprovalEvent {
    /// The approval this event is about, when it is one.
    pub fn approval(&self) -> Option<&Approval> {
        match self {
            ApprovalEvent::Created(a) | ApprovalEvent::Decided(a) | ApprovalEvent::Expired(a) => {
                Some(a)
            }
            _ => None,
        }
    }
}

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

pub(crate) fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}
