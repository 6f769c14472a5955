//! The Gate: one call that decides an action. The policy decides; a grant
//! may lift an ask or a default deny (never a `forbid` or a ceiling); an
//! ask without a grant becomes a pending approval the call waits on until
//! it is answered or expires. Every decision is logged with its rule.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use cordon_authz::{Action, Authorizer, AuthzError, Decision, Effect, Request, RuleRef};
use serde::Serialize;

use crate::model::{now_ms, Approval, ApprovalState, Grant, Scope};
use crate::store::{new_id, Approvals};
use crate::subject::Subject;

/// Where decisions are recorded (the server's audit log, `cordon run`'s).
pub trait DecisionLog: Send + Sync {
    fn decided(&self, record: &DecisionRecord);
}

/// One decision, as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    pub principal: String,
    pub session: Option<String>,
    pub action: Action,
    /// What the policy said: `allow`, `deny`, `ask`, `allow_with_limits`.
    pub effect: &'static str,
    /// What happened: `allowed` or `refused`.
    pub outcome: &'static str,
    /// The refusal's code, when refused.
    pub code: Option<&'static str>,
    /// The rule that decided (the policy's; a grant's approval is named
    /// beside it).
    pub rule: RuleRef,
    pub grant: Option<String>,
    pub approval: Option<String>,
    pub reason: String,
}

/// Limits an allow came with (`@limit_memory(..)` and the like).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub timeout_ms: Option<u64>,
}

/// The action may go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    pub rule: RuleRef,
    /// The grant that allowed it, when one did.
    pub grant: Option<String>,
    /// That grant's scope.
    pub scope: Option<Scope>,
    pub limits: Option<Limits>,
}

/// The action may not go ahead, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// `policy_denied`, `approval_denied`, `approval_expired`, or
    /// `approval_unavailable` (the approvals store failed: refused).
    pub code: &'static str,
    pub message: String,
    pub subject: Subject,
    pub rule: RuleRef,
    pub approval: Option<String>,
    /// The grant that would allow it, in words.
    pub would_allow: Option<String>,
}

/// The policy file, read again when it changes on disk (so `cordon policy`
/// edits and persistent grants take effect on a running server).
#[derive(Debug)]
struct Policy {
    path: Option<PathBuf>,
    current: RwLock<Loaded>,
}

/// The policy as last read: the file's stamp, the authorizer, its text.
#[derive(Debug, Clone)]
struct Loaded {
    stamp: Option<(SystemTime, u64)>,
    authorizer: Arc<Authorizer>,
    text: Arc<str>,
}

fn stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl Policy {
    fn read(path: &std::path::Path) -> Result<Loaded, AuthzError> {
        let stamp = stamp(path);
        let text = std::fs::read_to_string(path).map_err(|source| AuthzError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let authorizer = Authorizer::parse(&text, &path.display().to_string())?;
        Ok(Loaded {
            stamp,
            authorizer: Arc::new(authorizer),
            text: text.into(),
        })
    }

    fn load(path: Option<PathBuf>) -> Result<Policy, AuthzError> {
        let loaded = match &path {
            Some(p) => Policy::read(p)?,
            None => Loaded {
                stamp: None,
                authorizer: Arc::new(Authorizer::builtin()),
                text: "".into(),
            },
        };
        Ok(Policy {
            path,
            current: RwLock::new(loaded),
        })
    }

    /// The policy in force, read again if the file changed.
    fn current(&self) -> Loaded {
        let cached = match self.current.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let Some(path) = &self.path else {
            return cached;
        };
        if stamp(path) == cached.stamp {
            return cached;
        }
        match Policy::read(path) {
            Ok(fresh) => {
                if let Ok(mut c) = self.current.write() {
                    *c = fresh.clone();
                }
                fresh
            }
            Err(e) => {
                tracing::warn!(
                    "{}: the changed policy does not load ({e}); the previous one stays in force",
                    path.display()
                );
                cached
            }
        }
    }
}

/// Decides actions (cheap to share in an `Arc`).
pub struct Gate {
    approvals: Arc<Approvals>,
    policy: Policy,
    timeout: Duration,
    log: Arc<dyn DecisionLog>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("policy", &self.policy.path)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The default time a human has to answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

impl Gate {
    /// A gate on the policy file `policy` (none: every action gets the
    /// verdict its profile or token gives it).
    pub fn new(
        approvals: Arc<Approvals>,
        policy: Option<PathBuf>,
        timeout: Duration,
        log: Arc<dyn DecisionLog>,
    ) -> Result<Gate, AuthzError> {
        Ok(Gate {
            approvals,
            policy: Policy::load(policy)?,
            timeout,
            log,
        })
    }

    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether an operator's policy file is in force (without one every
    /// action gets the verdict its profile or token gives it).
    pub fn has_policy_file(&self) -> bool {
        self.policy.path.is_some()
    }

    /// The policy's decision alone (no grants, no asking).
    pub fn decide(&self, req: &Request) -> Decision {
        self.policy.current().authorizer.decide(req)
    }

    /// Decide `req`: allowed, or refused with what would allow it. An ask
    /// waits for a human (at most the approval timeout).
    pub async fn check(&self, req: Request) -> Result<Allowed, Refusal> {
        let d = self.decide(&req);
        let outcome = match &d.effect {
            Effect::Allow => Ok(allowed(&d, None, None)),
            Effect::AllowWithLimits {
                memory,
                pids,
                timeout_ms,
            } => Ok(allowed(
                &d,
                None,
                Some(Limits {
                    memory: *memory,
                    pids: *pids,
                    timeout_ms: *timeout_ms,
                }),
            )),
            Effect::Deny => match self.granted(&req, &d) {
                Some(g) => Ok(allowed(&d, Some(&g), None)),
                None => Err(self.denied(&req, &d)),
            },
            Effect::Ask => match self.granted(&req, &d) {
                Some(g) => Ok(allowed(&d, Some(&g), None)),
                None => self.ask(&req, &d).await,
            },
        };
        self.record(&req, &d, &outcome);
        outcome
    }

    /// A live grant that lifts this decision (only an ask or a default
    /// deny can be lifted).
    fn granted(&self, req: &Request, d: &Decision) -> Option<Grant> {
        if !d.grantable() {
            return None;
        }
        let text = self.policy.current().text;
        let in_force = |id: &str| text.contains(&format!("@id(\"{id}\")"));
        match self.approvals.find_grant(
            &req.principal.name,
            req.session.as_deref(),
            &req.action,
            &in_force,
        ) {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!("approvals: {e}");
                None
            }
        }
    }

    fn denied(&self, req: &Request, d: &Decision) -> Refusal {
        let subject = Subject::exact(&req.action);
        let (message, would_allow) = if d.grantable() {
            (
                format!(
                    "{} is denied by {} ({}:{})",
                    subject.describe(),
                    d.rule.id,
                    d.rule.file,
                    d.rule.line
                ),
                Some(format!(
                    "a permit in the policy file for {}, or a grant of it",
                    Subject::narrowed(&req.action).describe()
                )),
            )
        } else {
            (
                format!(
                    "{} is forbidden by {} ({}:{}); no approval can lift it",
                    subject.describe(),
                    d.rule.id,
                    d.rule.file,
                    d.rule.line
                ),
                None,
            )
        };
        Refusal {
            code: "policy_denied",
            message,
            subject,
            rule: d.rule.clone(),
            approval: None,
            would_allow,
        }
    }

    async fn ask(&self, req: &Request, d: &Decision) -> Result<Allowed, Refusal> {
        let id = new_id("ap_");
        let unavailable = |e: crate::ApprovalError| Refusal {
            code: "approval_unavailable",
            message: format!("cannot ask for an approval: {e}"),
            subject: Subject::exact(&req.action),
            rule: d.rule.clone(),
            approval: None,
            would_allow: None,
        };
        let mut waiting = self.approvals.wait(&id).map_err(unavailable)?;
        let created = now_ms();
        let expires = created.saturating_add(u64::try_from(self.timeout.as_millis()).unwrap_or(0));
        let subject = Subject::exact(&req.action);
        let approval = Approval {
            id: id.clone(),
            session: req.session.clone(),
            principal: req.principal.name.clone(),
            kind: subject.kind().to_owned(),
            grant_subject: Subject::narrowed(&req.action),
            subject,
            reason: d.reason.clone(),
            risk: req.findings.clone(),
            offers: d.offers.clone(),
            created_unix_ms: created,
            expires_unix_ms: expires,
            state: ApprovalState::Pending,
            decided_by: None,
            decided_unix_ms: None,
            scope: None,
            rule: d.rule.clone(),
            grant: None,
        };
        self.approvals.create(approval).map_err(unavailable)?;
        let answered = tokio::time::timeout(self.timeout, waiting.answered()).await;
        let a = match answered {
            Ok(Some(a)) => a,
            _ => self.approvals.expire(&id).map_err(unavailable)?,
        };
        drop(waiting);
        let claimed = match a.state {
            ApprovalState::Approved => self.approvals.claim(&a.id).map_err(unavailable)?,
            _ => None,
        };
        self.answered(d, a, claimed)
    }

    /// The outcome of an answered (or expired) approval; `claimed`: the
    /// grant an approved one made, for its asker. (A `Refusal` is what
    /// [`Gate::check`] hands back as is, once per call: not boxed.)
    #[allow(clippy::result_large_err)]
    fn answered(
        &self,
        d: &Decision,
        a: Approval,
        claimed: Option<Grant>,
    ) -> Result<Allowed, Refusal> {
        let refusal = |code: &'static str, message: String, would: String| Refusal {
            code,
            message,
            subject: a.subject.clone(),
            rule: d.rule.clone(),
            approval: Some(a.id.clone()),
            would_allow: Some(would),
        };
        let what = a.subject.describe();
        match a.state {
            ApprovalState::Approved => match claimed {
                Some(g) => Ok(allowed(d, Some(&g), None)),
                None => Err(refusal(
                    "approval_expired",
                    format!("approval {} of {what} was approved, but its grant has ended", a.id),
                    format!("retry, and approve the new approval for {what}"),
                )),
            },
            ApprovalState::Denied => Err(refusal(
                "approval_denied",
                format!(
                    "{what} was denied by {} (approval {}, asked by rule {})",
                    a.decided_by.as_deref().unwrap_or("an approver"),
                    a.id,
                    d.rule.id
                ),
                format!(
                    "an approval of {} answered approve (cordon approvals approve ID --scope once|session|duration)",
                    a.grant_subject.describe()
                ),
            )),
            ApprovalState::Expired | ApprovalState::Pending => Err(refusal(
                "approval_expired",
                format!(
                    "nobody answered approval {} of {what} within {}s (asked by rule {}); it expired",
                    a.id,
                    self.timeout.as_secs(),
                    d.rule.id
                ),
                format!(
                    "retry, and have the new approval answered within {}s (cordon approvals approve ID --scope session grants {} for the session)",
                    self.timeout.as_secs(),
                    a.grant_subject.describe()
                ),
            )),
        }
    }

    fn record(&self, req: &Request, d: &Decision, outcome: &Result<Allowed, Refusal>) {
        let effect = match d.effect {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
            Effect::Ask => "ask",
            Effect::AllowWithLimits { .. } => "allow_with_limits",
        };
        let (result, code, grant, approval) = match outcome {
            Ok(a) => ("allowed", None, a.grant.clone(), None),
            Err(r) => ("refused", Some(r.code), None, r.approval.clone()),
        };
        self.log.decided(&DecisionRecord {
            principal: req.principal.name.clone(),
            session: req.session.clone(),
            action: req.action.clone(),
            effect,
            outcome: result,
            code,
            rule: d.rule.clone(),
            grant,
            approval,
            reason: d.reason.clone(),
        });
    }
}

fn allowed(d: &Decision, g: Option<&Grant>, limits: Option<Limits>) -> Allowed {
    Allowed {
        rule: d.rule.clone(),
        grant: g.map(|g| g.id.clone()),
        scope: g.map(|g| g.scope),
        limits,
    }
}
