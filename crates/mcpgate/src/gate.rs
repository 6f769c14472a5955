//! The gateway's decisions on each JSON-RPC message, in both directions:
//! `tools/list` answers are pinned, scanned and filtered, `tools/call`
//! requests are checked against the policy, every answer is redacted, and
//! every call becomes an audit record.
//!
//! Messages are JSON-RPC 2.0 objects, one per line (MCP's stdio framing).
//! The gateway forwards its own serialization of what it parsed, never the
//! bytes it received: the server cannot be handed a message that its JSON
//! parser reads differently from the gateway's (duplicate keys, odd
//! whitespace, invalid UTF-8).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use cordon_audit::{Decision as AuditDecision, Event, Incident, IncidentKind, McpCall, Severity};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::ask;
use crate::pins::{Check, Pins};
use crate::poison;
use crate::policy::{PoisoningAction, Policy, Verdict};

/// What to do with one message from the client.
#[derive(Debug, Default, PartialEq)]
pub struct Routed {
    /// A line for the server.
    pub to_upstream: Option<String>,
    /// Lines for the client (the gateway's own answers).
    pub to_client: Vec<String>,
    /// Questions sent to the client now: their ids and how long to wait
    /// before [`Gate::expire_ask`].
    pub asked: Vec<(String, Duration)>,
}

/// The ids of the gateway's own questions to the client start with this.
const ASK_ID_PREFIX: &str = "cordon-ask-";

/// The default wait for a person's answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(120);

/// A call waiting for the person's answer.
#[derive(Debug)]
struct Asked {
    msg: Value,
    id: Value,
    call: Call,
    rule: String,
    reason: String,
    timeout: Duration,
}

/// One `tools/call` as the gateway saw it.
#[derive(Debug, Clone)]
struct Call {
    tool: String,
    digest: String,
    args: Option<Value>,
}

/// What becomes of a call.
#[derive(Debug)]
enum Outcome {
    Pass { rule: Option<String> },
    Refuse { rule: String, message: String },
    Ask { rule: String, reason: String },
}

#[derive(Debug)]
struct Pending {
    method: String,
    /// The rule that let a call pass (a policy's, an approval's).
    rule: Option<String>,
    tool: Option<String>,
    args_digest: Option<String>,
    args: Option<Value>,
    at: Instant,
}

/// The gateway's state for one server.
#[derive(Debug)]
pub struct Gate {
    server: String,
    policy: Policy,
    pins: Pins,
    redactor: cordon_scan::Redactor,
    pending: HashMap<String, Pending>,
    /// Tools the server listed that the client may see.
    listed: HashSet<String>,
    /// Tools blocked (pin change, new since pinned, poisoning): why, and
    /// the rule.
    blocked: BTreeMap<String, (String, String)>,
    /// Incidents already raised (one per tool and cause in a run).
    raised: HashSet<String>,
    /// Audit records with the time each happened.
    events: Vec<(SystemTime, Event)>,
    /// Print what the gateway blocks on stderr.
    verbose: bool,
    /// Decides every call after the tool policy (`--cedar`).
    authz: Option<Arc<cordon_authz::Authorizer>>,
    /// The client declared form elicitation in `initialize`.
    elicits: bool,
    ask_timeout: Duration,
    /// Questions out, by their request id.
    asks: HashMap<String, Asked>,
    next_ask: u64,
    /// Tools approved for the rest of the session.
    granted: HashSet<String>,
}

impl Gate {
    pub fn new(
        server: &[String],
        policy: Policy,
        pins: Pins,
        mut redactor: cordon_scan::Redactor,
        verbose: bool,
    ) -> Gate {
        for c in &policy.canaries {
            redactor.add_value("canary", c);
        }
        Gate {
            server: server.join(" "),
            policy,
            pins,
            redactor,
            pending: HashMap::new(),
            listed: HashSet::new(),
            blocked: BTreeMap::new(),
            raised: HashSet::new(),
            events: Vec::new(),
            verbose,
            authz: None,
            elicits: false,
            ask_timeout: ASK_TIMEOUT,
            asks: HashMap::new(),
            next_ask: 1,
            granted: HashSet::new(),
        }
    }

    /// Decide every call with a policy (Cedar) as well: the tool policy's
    /// verdict is its default, and its denials are a ceiling.
    pub fn with_authz(mut self, authz: Arc<cordon_authz::Authorizer>) -> Gate {
        self.authz = Some(authz);
        self
    }

    /// How long a question to the client waits for its answer.
    pub fn with_ask_timeout(mut self, timeout: Duration) -> Gate {
        self.ask_timeout = timeout;
        self
    }

    /// The audit records collected since the last call.
    pub fn take_events(&mut self) -> Vec<(SystemTime, Event)> {
        std::mem::take(&mut self.events)
    }

    fn record(&mut self, event: Event) {
        self.events.push((SystemTime::now(), event));
    }

    /// One line from the client.
    pub fn from_client(&mut self, line: &[u8]) -> Routed {
        let msg: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                return Routed {
                    to_upstream: None,
                    to_client: vec![error_line(
                        &Value::Null,
                        -32700,
                        &format!("parse error: {e}"),
                    )],
                    asked: Vec::new(),
                }
            }
        };
        if !msg.is_object() {
            // Batches were removed from MCP (2025-06-18); a batch would
            // need every element checked, so none is passed.
            return Routed {
                to_upstream: None,
                to_client: vec![error_line(
                    &Value::Null,
                    -32600,
                    "cordon mcp wrap passes single JSON-RPC objects only (no batches)",
                )],
                asked: Vec::new(),
            };
        }
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        let id = msg.get("id").cloned();
        match (method.as_deref(), id) {
            (Some("tools/call"), Some(id)) => self.call(msg, id),
            // The client's answer to one of the gateway's questions.
            // (An answer to a question withdrawn already is dropped: the
            // server never asked it.)
            (None, Some(id)) if id.as_str().is_some_and(|i| i.starts_with(ASK_ID_PREFIX)) => {
                self.answered(&msg, &id)
            }
            (Some(m), Some(id)) => {
                if m == "initialize" {
                    self.elicits = ask::client_elicits(&msg);
                }
                if m == "tools/list" {
                    self.pending.insert(
                        key(&id),
                        Pending {
                            method: m.to_owned(),
                            rule: None,
                            tool: None,
                            args_digest: None,
                            args: None,
                            at: Instant::now(),
                        },
                    );
                }
                forward(&msg)
            }
            _ => forward(&msg),
        }
    }

    fn call(&mut self, msg: Value, id: Value) -> Routed {
        let params = msg.get("params");
        let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            return Routed {
                to_upstream: None,
                to_client: vec![error_line(&id, -32602, "tools/call needs params.name")],
                asked: Vec::new(),
            };
        };
        let tool = tool.to_owned();
        let args = params
            .and_then(|p| p.get("arguments"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        // serde_json's maps are sorted: this is the arguments' canonical
        // JSON (sorted keys, no whitespace).
        let digest = hex::encode(Sha256::digest(args.to_string().as_bytes()));
        let call = Call {
            args: self.policy.record_args(&tool).then(|| args.clone()),
            tool,
            digest,
        };
        let tool = &call.tool;
        // Blocked tools (pins, poisoning) and tools never listed are a
        // ceiling: no policy rule or approval lets them through.
        let (verdict, ceiling) = if let Some((why, rule)) = self.blocked.get(tool) {
            let v = Verdict::Deny {
                rule: rule.clone(),
                message: why.clone(),
            };
            (v, true)
        } else {
            match self.policy.check(tool, &args) {
                Verdict::Allow | Verdict::Ask { .. } if !self.listed.contains(tool) => (
                    Verdict::Deny {
                        rule: "listed".into(),
                        message: format!(
                            "the tool {tool} is not among the tools the server listed to this client; call tools/list first"
                        ),
                    },
                    true,
                ),
                Verdict::Deny { rule, message } => {
                    let ceiling = !self.policy.is_default_rule(&rule);
                    (Verdict::Deny { rule, message }, ceiling)
                }
                v => (v, false),
            }
        };
        match self.decide(&call, verdict, ceiling) {
            Outcome::Pass { rule } => self.pass(&msg, &id, call, rule),
            Outcome::Refuse { rule, message } => self.refuse(&id, call, rule, message),
            Outcome::Ask { rule, reason } => self.ask(msg, id, call, rule, reason),
        }
    }

    /// The tool policy's verdict, and the Cedar policy's decision on it.
    fn decide(&self, call: &Call, verdict: Verdict, ceiling: bool) -> Outcome {
        use cordon_authz::{Action, DefaultVerdict, Effect, Principal, Request};
        let Some(authz) = &self.authz else {
            return match verdict {
                Verdict::Allow => Outcome::Pass { rule: None },
                Verdict::Deny { rule, message } => Outcome::Refuse { rule, message },
                Verdict::Ask { rule, message } => Outcome::Ask {
                    rule,
                    reason: message,
                },
            };
        };
        let (default, ceiling) = match verdict {
            Verdict::Allow => (
                DefaultVerdict::Allow {
                    rule: self.policy.allow_rule(&call.tool),
                },
                None,
            ),
            Verdict::Ask { rule, .. } => (DefaultVerdict::Ask { rule }, None),
            Verdict::Deny { rule, message } => {
                let ceiling = ceiling.then(|| format!("{rule}: {message}"));
                (DefaultVerdict::Deny { rule }, ceiling)
            }
        };
        let mut req = Request::new(
            Principal::named("owner"),
            Action::ToolCall {
                server: self.server.clone(),
                tool: call.tool.clone(),
                args_digest: call.digest.clone(),
            },
            default,
        );
        req.ceiling = ceiling;
        let d = authz.decide(&req);
        let rule = d.rule.to_string();
        match d.effect {
            Effect::Allow | Effect::AllowWithLimits { .. } => Outcome::Pass { rule: Some(rule) },
            Effect::Deny => Outcome::Refuse {
                rule,
                message: d.reason,
            },
            Effect::Ask => Outcome::Ask {
                rule,
                reason: d.reason,
            },
        }
    }

    /// Pass the call to the server; its answer is recorded when it comes.
    fn pass(&mut self, msg: &Value, id: &Value, call: Call, rule: Option<String>) -> Routed {
        self.pending.insert(
            key(id),
            Pending {
                method: "tools/call".into(),
                rule,
                tool: Some(call.tool),
                args_digest: Some(call.digest),
                args: call.args,
                at: Instant::now(),
            },
        );
        forward(msg)
    }

    /// Answer the call with a tool error naming the rule; record it.
    fn refuse(&mut self, id: &Value, call: Call, rule: String, message: String) -> Routed {
        let Call { tool, digest, args } = call;
        let text = format!("cordon mcp wrap refused this call: {message} (rule: {rule})");
        if self.verbose {
            eprintln!("cordon: mcp: refused {tool}: {message} (rule: {rule})");
        }
        let reply = json!({
            "jsonrpc": "2.0",
            "id": id,
            "result": {"content": [{"type": "text", "text": text}], "isError": true},
        });
        let line = reply.to_string();
        self.record(
            McpCall {
                server: self.server.clone(),
                method: "tools/call".into(),
                tool: Some(tool.clone()),
                decision: AuditDecision::Deny,
                rule: Some(rule.clone()),
                args_digest: Some(digest),
                args,
                duration_ms: 0,
                result_bytes: line.len() as u64,
                error: true,
                redacted: 0,
            }
            .into(),
        );
        self.record(
            Incident {
                kind: IncidentKind::Mcp,
                severity: Severity::Medium,
                summary: format!("MCP call refused: {tool} ({rule})"),
                evidence: json!({"server": self.server, "tool": tool, "rule": rule, "message": message}),
            }
            .into(),
        );
        Routed {
            to_upstream: None,
            to_client: vec![line],
            asked: Vec::new(),
        }
    }

    /// A person decides: a tool approved for the session passes; a client
    /// that can be asked is asked; otherwise the call is refused with what
    /// would allow it.
    fn ask(&mut self, msg: Value, id: Value, call: Call, rule: String, reason: String) -> Routed {
        if self.granted.contains(&call.tool) {
            let rule = format!("{rule}, approved for this session");
            return self.pass(&msg, &id, call, Some(rule));
        }
        if !self.elicits {
            let message = format!(
                "{reason}; this client cannot be asked (it declared no elicitation capability). It would be allowed by an approval of the tool {} of this server (from a client that supports elicitation), or a rule in the policy that allows it",
                call.tool
            );
            return self.refuse(&id, call, rule, message);
        }
        let ask_id = format!("{ASK_ID_PREFIX}{}", self.next_ask);
        self.next_ask += 1;
        let subject = format!(
            "the tool {} of the MCP server `{}` (arguments sha256:{})",
            call.tool,
            self.server,
            call.digest.get(..16).unwrap_or(&call.digest)
        );
        let question = ask::request(&ask_id, &ask::message(&subject, &rule, &reason));
        let timeout = self.ask_timeout;
        self.asks.insert(
            key(&json!(ask_id)),
            Asked {
                msg,
                id,
                call,
                rule,
                reason,
                timeout,
            },
        );
        Routed {
            to_upstream: None,
            to_client: vec![question.to_string()],
            asked: vec![(ask_id, timeout)],
        }
    }

    /// The client answered a question: the call passes or is refused.
    fn answered(&mut self, response: &Value, ask_id: &Value) -> Routed {
        let Some(asked) = self.asks.remove(&key(ask_id)) else {
            return Routed::default();
        };
        let Asked {
            msg,
            id,
            call,
            rule,
            reason,
            ..
        } = asked;
        match ask::answer(response) {
            ask::Answer::Once => {
                let rule = format!("{rule}, approved once by the client");
                self.pass(&msg, &id, call, Some(rule))
            }
            ask::Answer::Session => {
                self.granted.insert(call.tool.clone());
                let rule = format!("{rule}, approved for this session by the client");
                self.pass(&msg, &id, call, Some(rule))
            }
            ask::Answer::Deny => {
                let message = format!("{reason}; the person asked denied it (approval_denied)");
                self.refuse(&id, call, rule, message)
            }
        }
    }

    /// A question unanswered in time: the call is refused and the client
    /// told to stop asking. Nothing when it was answered already.
    pub fn expire_ask(&mut self, ask_id: &str) -> Vec<String> {
        let Some(asked) = self.asks.remove(&key(&json!(ask_id))) else {
            return Vec::new();
        };
        let message = format!(
            "{}; nobody answered within {}s (approval_expired). It would be allowed by an approval of the tool {} of this server, or a rule in the policy that allows it",
            asked.reason,
            asked.timeout.as_secs(),
            asked.call.tool
        );
        let mut lines = self
            .refuse(&asked.id, asked.call, asked.rule, message)
            .to_client;
        lines.push(ask::cancelled(ask_id, "no answer in time").to_string());
        lines
    }

    /// One line from the server; the lines to pass to the client.
    pub fn from_upstream(&mut self, line: &[u8]) -> Option<String> {
        let mut msg: Value = match serde_json::from_slice(line) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                if self.verbose {
                    eprintln!(
                        "cordon: mcp: dropped a line from the server that is not a JSON-RPC object ({} bytes)",
                        line.len()
                    );
                }
                return None;
            }
        };
        let is_response = msg.get("method").is_none() && msg.get("id").is_some();
        let pending = if is_response {
            msg.get("id").and_then(|id| self.pending.remove(&key(id)))
        } else {
            None
        };
        if let Some(p) = &pending {
            if p.method == "tools/list" {
                self.filter_list(&mut msg);
            }
        }
        let redacted = redact(&mut msg, &self.redactor);
        let out = msg.to_string();
        if let Some(p) = pending {
            let at = SystemTime::now()
                .checked_sub(p.at.elapsed())
                .unwrap_or_else(SystemTime::now);
            let error = msg.get("error").is_some()
                || msg.pointer("/result/isError").and_then(Value::as_bool) == Some(true);
            let call = McpCall {
                server: self.server.clone(),
                method: p.method.clone(),
                tool: p.tool.clone(),
                decision: AuditDecision::Allow,
                rule: p.rule.clone(),
                args_digest: p.args_digest,
                args: p.args,
                duration_ms: p.at.elapsed().as_millis() as u64,
                result_bytes: out.len() as u64,
                error,
                redacted,
            };
            // The call's record carries the time of the request.
            self.events.push((at, call.into()));
        }
        if redacted > 0 {
            let what = msg
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("a result");
            self.record(
                Incident {
                    kind: IncidentKind::Secret,
                    severity: Severity::High,
                    summary: format!(
                        "MCP server sent a secret or canary ({redacted} redacted) in {what}"
                    ),
                    evidence: json!({"server": self.server, "redacted": redacted}),
                }
                .into(),
            );
        }
        Some(out)
    }

    /// Pin, scan and filter the tools of a `tools/list` answer.
    fn filter_list(&mut self, msg: &mut Value) {
        let Some(tools) = msg
            .pointer_mut("/result/tools")
            .and_then(Value::as_array_mut)
        else {
            return;
        };
        let mut kept = Vec::new();
        for tool in tools.drain(..) {
            let Some(name) = tool.get("name").and_then(Value::as_str).map(str::to_owned) else {
                continue;
            };
            self.blocked.remove(&name);
            self.listed.remove(&name);
            match self.pins.check(&tool) {
                Check::Pinned => {}
                Check::Changed { diff } => {
                    self.block(&name, "pin", "its definition changed since it was pinned; review it with `cordon mcp pins diff` and approve it with `cordon mcp pins approve`");
                    self.raise(
                        &name,
                        "changed",
                        Severity::High,
                        format!("MCP tool definition changed since pinned (rug pull): {name}"),
                        json!({"diff": diff}),
                        Some(&diff),
                    );
                }
                Check::New => {
                    self.block(&name, "pin", "it appeared after the server's tools were pinned; approve it with `cordon mcp pins approve`");
                    self.raise(
                        &name,
                        "new",
                        Severity::Medium,
                        format!("MCP tool added since pinned: {name}"),
                        json!({}),
                        None,
                    );
                }
            }
            let findings = poison::scan_tool(&tool);
            if !findings.is_empty() {
                let hide = self.policy.poisoning == PoisoningAction::Hide;
                if hide && !self.blocked.contains_key(&name) {
                    self.block(&name, "poisoning", "its description holds instructions aimed at the model (tool poisoning); set poisoning = \"flag\" in the policy to keep such tools");
                }
                self.raise(
                    &name,
                    "poisoning",
                    Severity::High,
                    format!("MCP tool description holds instructions aimed at the model: {name}"),
                    json!({"findings": findings, "hidden": hide}),
                    None,
                );
            }
            if !self.blocked.contains_key(&name) && self.policy.visible(&name) {
                self.listed.insert(name);
                kept.push(tool);
            }
        }
        *tools = kept;
        // A paginated list is one list: the first one is pinned whole.
        if msg.pointer("/result/nextCursor").is_none_or(Value::is_null) {
            self.pins.listed();
        }
        if let Err(e) = self.pins.save() {
            eprintln!("cordon: mcp: {e}");
        }
    }

    fn block(&mut self, name: &str, rule: &str, why: &str) {
        self.blocked.insert(
            name.to_owned(),
            (
                format!("the tool {name} is blocked: {why}"),
                rule.to_owned(),
            ),
        );
    }

    fn raise(
        &mut self,
        name: &str,
        cause: &str,
        severity: Severity,
        summary: String,
        evidence: Value,
        diff: Option<&str>,
    ) {
        if !self.raised.insert(format!("{cause}\0{name}")) {
            return;
        }
        if self.verbose {
            eprintln!("cordon: mcp: {summary}");
            if let Some(d) = diff {
                eprint!("{d}");
            }
        }
        let mut evidence = evidence;
        if let Value::Object(map) = &mut evidence {
            map.insert("server".into(), json!(self.server));
            map.insert("tool".into(), json!(name));
            map.insert(
                "pin_file".into(),
                json!(self.pins.path().display().to_string()),
            );
        }
        self.record(
            Incident {
                kind: IncidentKind::Mcp,
                severity,
                summary,
                evidence,
            }
            .into(),
        );
    }
}

/// A JSON-RPC id as a map key (numbers and strings kept apart).
fn key(id: &Value) -> String {
    id.to_string()
}

fn forward(msg: &Value) -> Routed {
    Routed {
        to_upstream: Some(msg.to_string()),
        to_client: Vec::new(),
        asked: Vec::new(),
    }
}

fn error_line(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// Redact every string in place; the number of secrets found.
fn redact(value: &mut Value, redactor: &cordon_scan::Redactor) -> u64 {
    match value {
        Value::String(s) => {
            let found = redactor.find(s.as_bytes()).len() as u64;
            if found > 0 {
                if let std::borrow::Cow::Owned(r) = redactor.redact(s) {
                    *s = r;
                }
            }
            found
        }
        Value::Array(items) => items.iter_mut().map(|v| redact(v, redactor)).sum(),
        Value::Object(map) => map.values_mut().map(|v| redact(v, redactor)).sum(),
        _ => 0,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn gate(dir: &std::path::Path, allow: &[&str]) -> Gate {
        let server = vec!["srv".to_owned()];
        let pins = Pins::open(dir.join("pins.json"), &server, false).unwrap();
        let allow: Vec<String> = allow.iter().map(|s| (*s).to_owned()).collect();
        Gate::new(
            &server,
            Policy::new(None, &allow, &[]),
            pins,
            cordon_scan::Redactor::new(),
            false,
        )
    }

    fn list(g: &mut Gate, tools: Value) -> Vec<String> {
        let r = g.from_client(br#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#);
        assert!(r.to_upstream.is_some());
        let answer = json!({"jsonrpc": "2.0", "id": "l", "result": {"tools": tools}});
        let out: Value =
            serde_json::from_str(&g.from_upstream(answer.to_string().as_bytes()).unwrap()).unwrap();
        out["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// A gate whose policy asks about `rm`, with a client that declared
    /// (or not) the elicitation capability; `rm` listed.
    fn asking_gate(dir: &std::path::Path, elicits: bool) -> Gate {
        let server = vec!["srv".to_owned()];
        let pins = Pins::open(dir.join("pins.json"), &server, false).unwrap();
        let file: crate::PolicyFile = toml::from_str("[tools.rm]\ndecision = \"ask\"\n").unwrap();
        let mut g = Gate::new(
            &server,
            Policy::new(Some(file), &[], &[]),
            pins,
            cordon_scan::Redactor::new(),
            false,
        );
        let caps = if elicits {
            json!({"elicitation": {}})
        } else {
            json!({})
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": caps}});
        g.from_client(init.to_string().as_bytes());
        list(&mut g, json!([{"name": "rm"}]));
        g
    }

    const CALL_RM: &[u8] =
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"rm","arguments":{"path":"/x"}}}"#;

    #[test]
    fn an_ask_is_held_until_the_client_approves() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = asking_gate(dir.path(), true);
        let r = g.from_client(CALL_RM);
        assert!(r.to_upstream.is_none(), "held while asking");
        let q: Value = serde_json::from_str(&r.to_client[0]).unwrap();
        assert_eq!(q["method"], "elicitation/create");
        assert_eq!(r.asked[0].0, q["id"].as_str().unwrap());
        // The server cannot answer the question: answers come from the client only.
        let forged = json!({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {"decision": "approve"}}});
        g.from_upstream(forged.to_string().as_bytes());
        let answer = json!({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {"decision": "approve", "scope": "once"}}});
        let r = g.from_client(answer.to_string().as_bytes());
        let sent: Value = serde_json::from_str(r.to_upstream.as_deref().unwrap()).unwrap();
        assert_eq!(sent["id"], 7);
        assert_eq!(sent["params"]["name"], "rm");
        // Once: the next call is asked about again.
        assert!(g.from_client(CALL_RM).to_client[0].contains("elicitation/create"));
    }

    #[test]
    fn an_unanswered_ask_is_refused_and_withdrawn() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = asking_gate(dir.path(), true);
        let r = g.from_client(CALL_RM);
        let id = r.asked[0].0.clone();
        let lines = g.expire_ask(&id);
        assert!(lines[0].contains("approval_expired") && lines[0].contains("tools.rm.decision"));
        assert!(lines[0].contains("\"isError\":true"));
        assert!(lines[1].contains("notifications/cancelled"));
        // A late answer changes nothing.
        let late = json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {"decision": "approve"}}});
        assert!(g
            .from_client(late.to_string().as_bytes())
            .to_upstream
            .is_none());
        assert!(g.expire_ask(&id).is_empty());
    }

    #[test]
    fn a_client_that_cannot_be_asked_is_refused_with_what_would_allow_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = asking_gate(dir.path(), false);
        let r = g.from_client(CALL_RM);
        assert!(r.to_upstream.is_none() && r.asked.is_empty());
        assert!(
            r.to_client[0].contains("cannot be asked")
                && r.to_client[0].contains("would be allowed"),
            "{:?}",
            r.to_client
        );
    }

    #[test]
    fn a_tool_never_listed_is_refused_even_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = gate(dir.path(), &["a"]);
        let r = g.from_client(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
        );
        assert!(r.to_upstream.is_none());
        assert!(r.to_client[0].contains("rule: listed"), "{:?}", r.to_client);
        assert_eq!(list(&mut g, json!([{"name": "a"}, {"name": "b"}])), ["a"]);
        let r = g.from_client(
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a"}}"#,
        );
        assert!(r.to_upstream.is_some());
    }

    #[test]
    fn the_server_gets_what_the_gateway_checked() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = gate(dir.path(), &["a"]);
        list(&mut g, json!([{"name": "a"}, {"name": "b"}]));
        // Duplicate keys: serde_json keeps the last; the server is handed
        // that one only, whatever its own parser would have picked.
        let r = g.from_client(
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"b","name":"a"}}"#,
        );
        let sent: Value = serde_json::from_str(r.to_upstream.as_deref().unwrap()).unwrap();
        assert_eq!(sent["params"]["name"], "a");
        assert_eq!(r.to_upstream.unwrap().matches("\"name\"").count(), 1);
        let batch = g.from_client(
            br#"[{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"b"}}]"#,
        );
        assert!(batch.to_upstream.is_none());
        assert!(batch.to_client[0].contains("no batches"));
    }

    #[test]
    fn a_paginated_first_list_is_pinned_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = gate(dir.path(), &[]);
        g.from_client(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        let page = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a"}], "nextCursor": "2"}});
        assert!(g
            .from_upstream(page.to_string().as_bytes())
            .unwrap()
            .contains("\"a\""));
        assert_eq!(list(&mut g, json!([{"name": "b"}])), ["b"]);
        assert!(
            list(&mut g, json!([{"name": "c"}])).is_empty(),
            "a tool added later is blocked"
        );
    }

    #[test]
    fn approving_changes_for_a_run_repins() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = gate(dir.path(), &[]);
        assert_eq!(
            list(&mut g, json!([{"name": "a", "description": "one"}])),
            ["a"]
        );
        assert!(list(&mut g, json!([{"name": "a", "description": "two"}])).is_empty());
        let server = vec!["srv".to_owned()];
        let pins = Pins::open(dir.path().join("pins.json"), &server, true).unwrap();
        let mut g = Gate::new(
            &server,
            Policy::new(None, &[], &[]),
            pins,
            cordon_scan::Redactor::new(),
            false,
        );
        assert_eq!(
            list(&mut g, json!([{"name": "a", "description": "two"}])),
            ["a"]
        );
        let pins = Pins::open(dir.path().join("pins.json"), &server, false).unwrap();
        let mut g = Gate::new(
            &server,
            Policy::new(None, &[], &[]),
            pins,
            cordon_scan::Redactor::new(),
            false,
        );
        assert_eq!(
            list(&mut g, json!([{"name": "a", "description": "two"}])),
            ["a"]
        );
    }
}
