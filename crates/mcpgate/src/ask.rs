//! Asking the person behind the MCP client about one tool call, with MCP's
//! elicitation (`elicitation/create`, a form): approve or deny, and the
//! scope of an approval (this call, or this tool for the rest of the
//! session). Only clients that declared the `elicitation` capability in
//! `initialize` are asked.

use serde_json::{json, Value};

/// The person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Approved for this one call.
    Once,
    /// Approved for this tool until the session ends.
    Session,
    /// Denied (declined, cancelled, or "deny" chosen).
    Deny,
}

/// Whether an `initialize` request's client capabilities include form
/// elicitation (`"elicitation": {}` or `{"form": {...}}`).
pub fn client_elicits(initialize: &Value) -> bool {
    match initialize.pointer("/params/capabilities/elicitation") {
        Some(Value::Object(modes)) => modes.is_empty() || modes.contains_key("form"),
        _ => false,
    }
}

/// The form the client shows: a decision and a scope.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "description": "Approve or deny this action",
                "enum": ["approve", "deny"],
                "enumNames": ["Approve", "Deny"]
            },
            "scope": {
                "type": "string",
                "title": "Scope of an approval",
                "description": "once: this call only; session: until this session ends",
                "enum": ["once", "session"],
                "enumNames": ["This call only", "Until this session ends"],
                "default": "once"
            }
        },
        "required": ["decision"]
    })
}

/// The `elicitation/create` request with the gateway's own `id`.
pub fn request(id: &str, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "elicitation/create",
        "params": {"message": message, "requestedSchema": schema()},
    })
}

/// The words of the question: what is asked for, the rule and why.
pub fn message(subject: &str, rule: &str, reason: &str) -> String {
    format!(
        "cordon asks before this action.\nSubject: {subject}\nRule: {rule}\nReason: {reason}\nApprove it?"
    )
}

/// The client's answer to the request (a JSON-RPC response): only an
/// accepted form that says "approve" approves.
pub fn answer(response: &Value) -> Answer {
    let Some(result) = response.get("result") else {
        return Answer::Deny;
    };
    if result.get("action").and_then(Value::as_str) != Some("accept") {
        return Answer::Deny;
    }
    let content = result.get("content");
    let field = |name: &str| content.and_then(|c| c.get(name)).and_then(Value::as_str);
    match (field("decision"), field("scope")) {
        (Some("approve"), Some("session")) => Answer::Session,
        (Some("approve"), _) => Answer::Once,
        _ => Answer::Deny,
    }
}

/// Tell the client the gateway stopped waiting for its answer.
pub fn cancelled(id: &str, reason: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": reason},
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_an_accepted_approve_approves() {
        let r = |v: Value| answer(&json!({"jsonrpc": "2.0", "id": "a", "result": v}));
        assert_eq!(
            r(json!({"action": "accept", "content": {"decision": "approve"}})),
            Answer::Once
        );
        assert_eq!(
            r(json!({"action": "accept", "content": {"decision": "approve", "scope": "session"}})),
            Answer::Session
        );
        assert_eq!(
            r(json!({"action": "accept", "content": {"decision": "deny", "scope": "session"}})),
            Answer::Deny
        );
        assert_eq!(
            r(json!({"action": "decline", "content": {"decision": "approve"}})),
            Answer::Deny
        );
        assert_eq!(r(json!({"action": "cancel"})), Answer::Deny);
        assert_eq!(
            answer(&json!({"jsonrpc": "2.0", "id": "a", "error": {"code": -1, "message": "no"}})),
            Answer::Deny
        );
    }

    #[test]
    fn the_capability_is_read_from_initialize() {
        let init = |caps: Value| json!({"method": "initialize", "params": {"capabilities": caps}});
        assert!(client_elicits(&init(json!({"elicitation": {}}))));
        assert!(client_elicits(&init(json!({"elicitation": {"form": {}}}))));
        assert!(!client_elicits(&init(json!({"elicitation": {"url": {}}}))));
        assert!(!client_elicits(&init(json!({}))));
    }
}
