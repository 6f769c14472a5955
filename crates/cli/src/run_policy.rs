//! `cordon run --policy FILE`: the run's command (an exec action) and each
//! of its egress connections (an egress action) are decided by the policy
//! (`cordon_authz`) before they happen. What the profile alone says is the
//! default the policy starts from; the profile's deny rules stay in the
//! proxy, ahead of any policy (a ceiling no rule lifts).
//!
//! An `ask` goes to the person at cordon's terminal ([`crate::tty_ask`]):
//! once, for this run, or deny; no answer in time is a deny. Without a
//! terminal an ask is a deny whose message names the grant that would
//! allow it. Every decision, with its rule, goes to the run's audit record.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cordon_authz::{Action, Authorizer, Decision, DefaultVerdict, Effect, Principal, Request};
use cordon_egress::{BoxFuture, HostRule, Ruling};
use cordon_server::wire::ExecLimitsView;
use serde_json::json;

use crate::tty_ask::{self, Answer, Question};

/// Who decides an `ask`.
#[derive(Debug, Clone, Copy)]
pub enum Asker {
    /// The person at cordon's terminal, within this long.
    Terminal(Duration),
    /// Nobody (no terminal): an ask is a deny.
    Nobody,
}

impl Asker {
    /// The terminal if cordon has one, else nobody.
    pub fn detect(timeout: Duration) -> Asker {
        match tty_ask::terminal() {
            Some(_) => Asker::Terminal(timeout),
            None => Asker::Nobody,
        }
    }
}

/// The outcome for one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed; with `limits` when the deciding permit carries
    /// `@limit_*` annotations (an allow with limits).
    Allowed {
        rule: String,
        limits: Option<ExecLimitsView>,
    },
    Refused {
        rule: String,
        message: String,
    },
}

/// Tighten a run's limits with a policy's (each the lower of the two; a
/// limit the run did not have is set).
pub fn tighten(policy: &ExecLimitsView, limits: &mut cordon_jail::Limits) {
    limits.tighten(policy.memory, policy.pids);
    if let Some(ms) = policy.timeout_ms {
        let cap = Duration::from_millis(ms);
        limits.wall = Some(limits.wall.map_or(cap, |w| w.min(cap)));
    }
}

/// The policy of one run: decisions, the run's grants, and the record.
pub struct RunPolicy {
    authz: Authorizer,
    principal: Principal,
    run_id: String,
    asker: Asker,
    /// The profile's egress allow rules: the default for hosts they cover.
    allow: Vec<HostRule>,
    /// The profile's `on_unlisted`: ask (true) or deny.
    unlisted_asks: bool,
    /// Actions allowed "for this run" at the terminal.
    granted: Mutex<HashSet<String>>,
    /// One question on the terminal at a time.
    asking: Mutex<()>,
    /// Every decision, for the run's audit record.
    record: Mutex<Vec<(SystemTime, cordon_audit::ApiAction)>>,
}

impl std::fmt::Debug for RunPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunPolicy")
            .field("run_id", &self.run_id)
            .field("asker", &self.asker)
            .finish_non_exhaustive()
    }
}

impl RunPolicy {
    /// Load the policy file for the run `run_id` of `profile`.
    pub fn load(
        path: &Path,
        profile: &cordon_policy::Profile,
        run_id: &str,
        asker: Asker,
    ) -> anyhow::Result<RunPolicy> {
        let authz = Authorizer::load(path).map_err(|e| anyhow::anyhow!("--policy: {e}"))?;
        Ok(RunPolicy {
            authz,
            principal: Principal {
                name: "owner".into(),
                preset: Some(profile.origin.clone()),
            },
            run_id: run_id.to_owned(),
            asker,
            allow: profile.network.allow.clone(),
            unlisted_asks: profile.network.on_unlisted == cordon_policy::OnUnlisted::Ask,
            granted: Mutex::new(HashSet::new()),
            asking: Mutex::new(()),
            record: Mutex::new(Vec::new()),
        })
    }

    /// The run's command: the profile lets any command run in the sandbox,
    /// so the policy decides.
    pub fn exec(&self, argv: &[String]) -> Verdict {
        self.decide(
            Action::Exec {
                argv: argv.to_vec(),
            },
            DefaultVerdict::Allow {
                rule: "profile:exec".into(),
            },
        )
    }

    /// One egress connection to `host:port` (the profile's deny rules
    /// were checked before by the proxy).
    pub fn egress(&self, host: &str, port: u16) -> Verdict {
        let default = match self.allow.iter().find(|r| r.matches(host, port)) {
            Some(r) => DefaultVerdict::Allow {
                rule: format!("allow:{r}"),
            },
            None if self.unlisted_asks => DefaultVerdict::Ask {
                rule: "on_unlisted:ask".into(),
            },
            None => DefaultVerdict::Deny {
                rule: "unlisted".into(),
            },
        };
        self.decide(
            Action::Egress {
                host: host.to_owned(),
                port,
            },
            default,
        )
    }

    /// The decisions so far, as audit records (taken: each is written once).
    pub fn take_records(&self) -> Vec<(SystemTime, cordon_audit::ApiAction)> {
        self.record
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    fn decide(&self, action: Action, default: DefaultVerdict) -> Verdict {
        let mut req = Request::new(self.principal.clone(), action.clone(), default);
        req.session = Some(self.run_id.clone());
        let decision = self.authz.decide(&req);
        let rule = decision.rule.to_string();
        let subject = subject(&action);
        let (verdict, answer) = match &decision.effect {
            Effect::Allow | Effect::AllowWithLimits { .. } => (
                Verdict::Allowed {
                    rule: rule.clone(),
                    limits: ExecLimitsView::of_effect(&decision.effect),
                },
                None,
            ),
            Effect::Deny => (
                Verdict::Refused {
                    rule: rule.clone(),
                    message: denied(&subject, &decision),
                },
                None,
            ),
            Effect::Ask => {
                let (verdict, answer) = self.ask(&action, &subject, &decision);
                (verdict, Some(answer))
            }
        };
        self.note(&action, &decision, &verdict, answer);
        verdict
    }

    /// An ask: a grant of this run, else the terminal, else a deny.
    fn ask(&self, action: &Action, subject: &str, decision: &Decision) -> (Verdict, &'static str) {
        let rule = decision.rule.to_string();
        let key = key(action);
        let granted =
            |g: &Mutex<HashSet<String>>| g.lock().map(|g| g.contains(&key)).unwrap_or(false);
        if granted(&self.granted) {
            return (
                Verdict::Allowed { rule, limits: None },
                "granted for this run",
            );
        }
        let Asker::Terminal(timeout) = self.asker else {
            let message = format!(
                "cordon: policy: {subject} needs a person's approval (rule {}: {}) and cordon has no terminal to ask. It would be allowed by {}",
                decision.rule,
                decision.reason,
                would_allow(action)
            );
            return (Verdict::Refused { rule, message }, "no terminal");
        };
        // One question at a time; an answer "for this run" given while this
        // one waited covers it.
        let _turn = self.asking.lock();
        if granted(&self.granted) {
            return (
                Verdict::Allowed { rule, limits: None },
                "granted for this run",
            );
        }
        let answer = match tty_ask::terminal() {
            Some(mut tty) => tty_ask::ask(
                &mut tty,
                &Question {
                    subject,
                    rule: &rule,
                    reason: &decision.reason,
                },
                timeout,
            ),
            None => Answer::TimedOut,
        };
        match answer {
            Answer::Once => (Verdict::Allowed { rule, limits: None }, "allowed once"),
            Answer::Run => {
                if let Ok(mut g) = self.granted.lock() {
                    g.insert(key);
                }
                (
                    Verdict::Allowed { rule, limits: None },
                    "allowed for this run",
                )
            }
            Answer::Deny => {
                let message = format!(
                    "cordon: policy: {subject} was denied at cordon's terminal (rule {}: {})",
                    decision.rule, decision.reason
                );
                (Verdict::Refused { rule, message }, "denied")
            }
            Answer::TimedOut => {
                let message = format!(
                    "cordon: policy: {subject} was not answered at cordon's terminal within {}s (rule {}: {}). It would be allowed by {}",
                    timeout.as_secs(),
                    decision.rule,
                    decision.reason,
                    would_allow(action)
                );
                (Verdict::Refused { rule, message }, "no answer")
            }
        }
    }

    fn note(&self, action: &Action, d: &Decision, verdict: &Verdict, answer: Option<&str>) {
        let (allowed, limits) = match verdict {
            Verdict::Allowed { limits, .. } => (true, *limits),
            Verdict::Refused { .. } => (false, None),
        };
        let record = cordon_audit::ApiAction {
            actor: self.principal.name.clone(),
            action: "decision".into(),
            sandbox: Some(self.run_id.clone()),
            detail: json!({
                "action": action,
                "effect": d.effect.name(),
                "outcome": if allowed { "allowed" } else { "refused" },
                "rule": d.rule,
                "reason": d.reason,
                "answer": answer,
                "limits": limits,
            }),
        };
        if let Ok(mut r) = self.record.lock() {
            r.push((SystemTime::now(), record));
        }
    }
}

/// The proxy asks the policy about every connection the profile's deny
/// rules let through.
#[derive(Debug, Clone)]
pub struct PolicyApprover(pub Arc<RunPolicy>);

impl cordon_egress::Approver for PolicyApprover {
    fn decide<'a>(&'a self, _: &'a str, host: &'a str, port: u16) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            matches!(
                self.ruling_now(host, port).await,
                Some(Ruling::Allow { .. })
            )
        })
    }

    fn ruling<'a>(&'a self, _: &'a str, host: &'a str, port: u16) -> BoxFuture<'a, Option<Ruling>> {
        Box::pin(self.ruling_now(host, port))
    }
}

impl PolicyApprover {
    /// The terminal blocks: the question is asked off the proxy's threads.
    async fn ruling_now(&self, host: &str, port: u16) -> Option<Ruling> {
        let policy = Arc::clone(&self.0);
        let host = host.to_owned();
        let verdict = tokio::task::spawn_blocking(move || policy.egress(&host, port))
            .await
            .ok()?;
        Some(match verdict {
            Verdict::Allowed { rule, .. } => Ruling::Allow { rule },
            Verdict::Refused { rule, message } => Ruling::Deny { rule, message },
        })
    }
}

/// The action in words: "exec `git push`", "egress to host:443".
pub fn subject(action: &Action) -> String {
    match action {
        Action::Exec { argv } => format!("exec `{}`", shown_argv(argv)),
        Action::Egress { host, port } => format!("egress to {host}:{port}"),
        other => format!("{} {}", other.kind(), json!(other)),
    }
}

fn shown_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("{a:?}")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The grant that would allow `action`, in words.
fn would_allow(action: &Action) -> String {
    let what = match action {
        Action::Exec { argv } => format!("a grant for exec of `{}`", shown_argv(argv)),
        Action::Egress { host, port } => format!("a grant for egress to {host}:{port}"),
        other => format!("a grant for this {}", other.kind()),
    };
    format!(
        "{what}: run it at a terminal and answer \"once\" or \"for this run\", or add a permit rule for it to the policy file"
    )
}

fn denied(subject: &str, d: &Decision) -> String {
    let lift = if d.grantable() {
        ""
    } else {
        " An explicit forbid or a ceiling: no approval lifts it."
    };
    format!(
        "cordon: policy: {subject} denied by {}: {}.{lift}",
        d.rule, d.reason
    )
}

fn key(action: &Action) -> String {
    json!(action).to_string()
}
