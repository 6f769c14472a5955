//! A `cordon sandbox` call that the server's policy puts to a human waits
//! at the API until the answer, and the request alone says nothing while
//! it waits. So while a call is unanswered past a moment, the pending
//! approvals it may be waiting on are looked up (on a connection of their
//! own) and each is named once on stderr with the command that answers it.
//! The lookup only informs: when it fails, the call waits as before.

use std::collections::HashSet;
use std::future::Future;
use std::path::Path;

use cordon_approvals::waiting::{look_while, Look};

use hyper::Method;
use serde_json::Value;

use crate::api_client::Client;
use crate::approvals_cmd::subject_text;

/// Which approvals a call may be waiting on.
pub struct Asked<'a> {
    /// The sandbox the call acts in (None for a create).
    pub session: Option<&'a str>,
    /// The approval kinds the call may raise (`exec`, `path`, `create`, ...).
    pub kinds: &'a [&'a str],
}

impl Asked<'_> {
    fn covers(&self, a: &Value) -> bool {
        let kind = a["kind"].as_str().unwrap_or("");
        self.kinds.contains(&kind) && a["session"].as_str() == self.session
    }
}

/// Run `call`; while it waits, name the approvals it may be waiting on.
pub async fn while_waiting<T>(socket: &Path, asked: Asked<'_>, call: impl Future<Output = T>) -> T {
    let looker = Pending {
        socket,
        asked,
        told: HashSet::new(),
    };
    look_while(call, looker).await
}

/// The pending approvals a call may wait on, each named once.
struct Pending<'a> {
    socket: &'a Path,
    asked: Asked<'a>,
    told: HashSet<String>,
}

impl Look for Pending<'_> {
    async fn look(&mut self) {
        tell_pending(self.socket, &self.asked, &mut self.told).await
    }
}

async fn tell_pending(socket: &Path, asked: &Asked<'_>, told: &mut HashSet<String>) {
    let Ok(mut client) = Client::connect(socket).await else {
        return;
    };
    let Ok(list) = client
        .json(Method::GET, "/v1/approvals?state=pending", None)
        .await
    else {
        return;
    };
    for a in list["approvals"].as_array().into_iter().flatten() {
        let Some(id) = a["id"].as_str() else { continue };
        if asked.covers(a) && told.insert(id.to_owned()) {
            eprintln!("{}", notice(a));
        }
    }
}

/// "cordon: waiting for approval ap_…: exec `rm -f x` (rule ask-rm,
/// policy.cedar:3); answer with ..."
fn notice(a: &Value) -> String {
    let id = a["id"].as_str().unwrap_or("");
    let rule = &a["rule"];
    let place = match (rule["file"].as_str(), rule["line"].as_u64()) {
        (Some(file), Some(line)) => format!(", {file}:{line}"),
        _ => String::new(),
    };
    format!(
        "cordon: waiting for approval {id}: {} `{}` (rule {}{place}); a human answers with \
         `cordon approvals approve {id}` or `cordon approvals deny {id}`",
        a["kind"].as_str().unwrap_or("action"),
        subject_text(&a["subject"]),
        rule["id"].as_str().unwrap_or("?"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_calls_own_kind_and_sandbox_are_named() {
        let exec_in = |sb: Option<&str>| json!({"id": "ap_1", "kind": "exec", "session": sb});
        let asked = Asked {
            session: Some("sb-1"),
            kinds: &["exec"],
        };
        assert!(asked.covers(&exec_in(Some("sb-1"))));
        assert!(!asked.covers(&exec_in(Some("sb-2"))));
        assert!(!asked.covers(&exec_in(None)));
        assert!(!asked.covers(&json!({"kind": "path", "session": "sb-1"})));
        let create = Asked {
            session: None,
            kinds: &["create", "secret"],
        };
        assert!(create.covers(&json!({"kind": "create", "session": null})));
        assert!(!create.covers(&json!({"kind": "create", "session": "sb-1"})));
    }

    #[test]
    fn the_notice_names_the_approval_its_rule_and_the_answer() {
        let a = json!({
            "id": "ap_9", "kind": "exec",
            "subject": {"kind": "exec", "argv_prefix": ["rm", "-f", "/tmp/x"]},
            "rule": {"id": "ask-rm", "file": "/etc/cordon/policy.cedar", "line": 3},
        });
        assert_eq!(
            notice(&a),
            "cordon: waiting for approval ap_9: exec `rm -f /tmp/x` (rule ask-rm, \
             /etc/cordon/policy.cedar:3); a human answers with `cordon approvals approve ap_9` \
             or `cordon approvals deny ap_9`"
        );
    }
}
