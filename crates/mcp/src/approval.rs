//! Policy decisions on what the tools do (`cordon mcp --policy FILE`, the
//! local engine): each `sandbox_exec` is an exec action decided by a Cedar
//! policy (`cordon_authz`). An ask goes to the person behind the client as
//! an MCP elicitation (the same form as `cordon mcp wrap`'s: approve or
//! deny, once or for the session) when the client declared that
//! capability; the answer decides. Without the capability, or unanswered
//! in time, the call is refused with a structured error that names the
//! subject, the rule and the grant that would allow it.
//!
//! With `--server` the sandboxes are the server's, and so are the
//! decisions: `cordon serve --policy` applies its own.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_authz::{Action, Authorizer, DefaultVerdict, Effect, Principal, Request};
use cordon_mcpgate::ask;
use cordon_server::wire::ExecLimitsView;
use cordon_server::Caller;
use rmcp::model::{ElicitRequestParams, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer};
use rmcp::RoleServer;
use serde_json::{json, Value};

use crate::error::ToolError;

/// The policy of a `cordon mcp` server.
#[derive(Debug, Clone)]
pub struct Approvals {
    authz: Arc<Authorizer>,
    timeout: Duration,
    /// Actions approved for the rest of the session: caller, sandbox, action.
    granted: Arc<Mutex<HashSet<String>>>,
}

/// A decision that let the action go ahead: the rule, how a person
/// answered when one was asked, and the limits of an allow with limits.
#[derive(Debug, Clone)]
pub struct Allowed {
    pub rule: String,
    pub answer: Option<&'static str>,
    /// The policy's limits (`@limit_memory`, `@limit_pids`,
    /// `@limit_timeout` on the permit that decided).
    pub limits: Option<ExecLimitsView>,
}

/// A decision and its audit record (an `api_action` named `decision`).
#[derive(Debug)]
pub struct Decided {
    pub result: Result<Allowed, ToolError>,
    pub record: Value,
}

impl Approvals {
    pub fn new(authz: Authorizer, timeout: Duration) -> Approvals {
        Approvals {
            authz: Arc::new(authz),
            timeout,
            granted: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Decide an exec of `argv` in the sandbox `id`; ask the client's
    /// person when the policy asks.
    pub async fn exec(
        &self,
        peer: &Peer<RoleServer>,
        caller: &Caller,
        id: &str,
        argv: &[String],
    ) -> Decided {
        let action = Action::Exec {
            argv: argv.to_vec(),
        };
        let mut req = Request::new(
            Principal::named(caller.name()),
            action.clone(),
            DefaultVerdict::Allow {
                rule: "profile:exec".into(),
            },
        );
        req.session = Some(id.to_owned());
        let d = self.authz.decide(&req);
        let result = self.exec_decided(peer, caller, id, argv, &d).await;
        let record = json!({
            "via": "mcp",
            "action": action,
            "effect": d.effect.name(),
            "outcome": if result.is_ok() { "allowed" } else { "refused" },
            "rule": d.rule,
            "reason": d.reason,
            "answer": result.as_ref().ok().and_then(|a| a.answer),
            "refusal": result.as_ref().err().and_then(|e| e.detail.as_ref()).map(|r| &r["error"]),
        });
        Decided { result, record }
    }

    async fn exec_decided(
        &self,
        peer: &Peer<RoleServer>,
        caller: &Caller,
        id: &str,
        argv: &[String],
        d: &cordon_authz::Decision,
    ) -> Result<Allowed, ToolError> {
        let action = Action::Exec {
            argv: argv.to_vec(),
        };
        let rule = d.rule.to_string();
        let subject = format!("exec `{}` in sandbox {id}", argv.join(" "));
        let refusal = |code: &str, message: String| {
            ToolError::new(message).with_detail(json!({
                "error": code,
                "subject": {"kind": "exec", "argv": argv, "sandbox_id": id},
                "rule": d.rule,
                "reason": d.reason,
                "would_allow": would_allow(argv, id),
            }))
        };
        match &d.effect {
            Effect::Allow | Effect::AllowWithLimits { .. } => Ok(Allowed {
                rule,
                answer: None,
                limits: ExecLimitsView::of_effect(&d.effect),
            }),
            Effect::Deny => Err(refusal(
                "policy_denied",
                format!("the policy denies {subject}: rule {rule}: {}", d.reason),
            )),
            Effect::Ask => {
                let key = json!([caller.name(), id, action]).to_string();
                if self.granted.lock().is_ok_and(|g| g.contains(&key)) {
                    return Ok(Allowed {
                        rule,
                        answer: Some("approved for this session"),
                        limits: None,
                    });
                }
                if !peer
                    .supported_elicitation_modes()
                    .contains(&ElicitationMode::Form)
                {
                    return Err(refusal(
                        "approval_required",
                        format!(
                            "{subject} needs a person's approval (rule {rule}: {}), and this client cannot be asked (it declared no elicitation capability). It would be allowed by {}",
                            d.reason,
                            would_allow(argv, id)
                        ),
                    ));
                }
                match self.elicit(peer, &subject, &rule, &d.reason).await {
                    Ok(ask::Answer::Once) => Ok(Allowed {
                        rule,
                        answer: Some("approved once"),
                        limits: None,
                    }),
                    Ok(ask::Answer::Session) => {
                        if let Ok(mut g) = self.granted.lock() {
                            g.insert(key);
                        }
                        Ok(Allowed {
                            rule,
                            answer: Some("approved for this session"),
                            limits: None,
                        })
                    }
                    Ok(ask::Answer::Deny) => Err(refusal(
                        "approval_denied",
                        format!("{subject} was denied by the person asked (rule {rule})"),
                    )),
                    Err(why) => Err(refusal(
                        "approval_expired",
                        format!(
                            "{subject} was not approved: {why} (rule {rule}). It would be allowed by {}",
                            would_allow(argv, id)
                        ),
                    )),
                }
            }
        }
    }

    /// Ask with the approval form; `Err` when there was no answer in time
    /// (or the client could not be asked after all).
    async fn elicit(
        &self,
        peer: &Peer<RoleServer>,
        subject: &str,
        rule: &str,
        reason: &str,
    ) -> Result<ask::Answer, String> {
        let schema: ElicitationSchema = serde_json::from_value(ask::schema())
            .map_err(|e| format!("the approval form is not valid: {e}"))?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: ask::message(subject, rule, reason),
            requested_schema: schema,
        };
        let result = peer
            .create_elicitation_with_timeout(params, Some(self.timeout))
            .await
            .map_err(|e| match e {
                rmcp::ServiceError::Timeout { .. } => {
                    format!("nobody answered within {}s", self.timeout.as_secs())
                }
                other => format!("the client could not be asked: {other}"),
            })?;
        let response = json!({"result": serde_json::to_value(&result).unwrap_or(Value::Null)});
        Ok(ask::answer(&response))
    }
}

fn would_allow(argv: &[String], id: &str) -> String {
    format!(
        "an approval of exec `{}` in sandbox {id} (once or for the session), or a rule in the policy that permits it",
        argv.join(" ")
    )
}
