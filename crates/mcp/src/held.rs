//! A tool call that `cordon serve`'s policy puts to a person (`cordon mcp
//! --server`) waits at the server's API until the answer, and the MCP
//! client hears nothing meanwhile: an agent sees a call that hangs. So
//! while such a call is unanswered past a moment, the server's pending
//! approvals it may be waiting on are looked up, and each is named once:
//! to the client as a progress message of the call (when the call asked
//! for progress: `_meta.progressToken`), and as a line on stderr, which
//! MCP hosts keep in the server's log. (MCP's own logging notifications
//! are deprecated since the 2026-07-28 revision, which names stderr
//! instead.) The lookup only informs: when it fails, the call waits as
//! before.

use std::collections::HashSet;
use std::future::Future;

use cordon_approvals::waiting::{look_while, Look};
use cordon_approvals::Approval;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use rmcp::RoleServer;

use crate::remote::Remote;

/// Which approvals a call may be waiting on.
#[derive(Debug)]
pub struct Held<'a> {
    /// The sandbox the call acts in.
    pub session: &'a str,
    /// The approval kinds the call may raise (`exec`, `egress`, `path`, ...).
    pub kinds: &'a [&'a str],
}

impl Held<'_> {
    fn covers(&self, a: &Approval) -> bool {
        self.kinds.contains(&a.kind.as_str()) && a.session.as_deref() == Some(self.session)
    }
}

/// Where one call's notices go.
#[derive(Debug)]
pub struct Listener {
    peer: Peer<RoleServer>,
    progress: Option<ProgressToken>,
}

impl Listener {
    pub fn of(ctx: &RequestContext<RoleServer>) -> Listener {
        Listener {
            peer: ctx.peer.clone(),
            progress: ctx.meta.get_progress_token(),
        }
    }

    /// Name `a`, the `nth` approval this call waits on (progress must
    /// grow with each message).
    async fn tell(&self, a: &Approval, nth: usize) {
        let text = notice(a);
        eprintln!("cordon: {text}");
        if let Some(token) = &self.progress {
            let progress =
                ProgressNotificationParam::new(token.clone(), nth as f64).with_message(text);
            let _ = self.peer.notify_progress(progress).await;
        }
    }
}

/// Run `call`; while it waits on `remote`, tell `listener` of the
/// approvals it may be waiting on (each once). Without a remote server
/// (the local engine decides and asks by elicitation), just run it.
pub async fn while_held<T>(
    remote: Option<&Remote>,
    listener: Listener,
    held: Held<'_>,
    call: impl Future<Output = T>,
) -> T {
    let Some(remote) = remote else {
        return call.await;
    };
    let looker = Pending {
        remote,
        held,
        listener,
        told: HashSet::new(),
    };
    look_while(call, looker).await
}

/// The server's pending approvals a call may wait on, each named once.
struct Pending<'a> {
    remote: &'a Remote,
    held: Held<'a>,
    listener: Listener,
    told: HashSet<String>,
}

impl Look for Pending<'_> {
    async fn look(&mut self) {
        let Ok(pending) = self.remote.pending_approvals().await else {
            return;
        };
        for a in pending.iter().filter(|a| self.held.covers(a)) {
            if self.told.insert(a.id.clone()) {
                self.listener.tell(a, self.told.len()).await;
            }
        }
    }
}

/// "waiting for approval ap_…: exec of `rm -f x` (rule ask-rm,
/// policy.cedar:3); a person answers with ..."
fn notice(a: &Approval) -> String {
    let place = match (a.rule.file.as_str(), a.rule.line) {
        ("", _) => String::new(),
        (file, 0) => format!(", {file}"),
        (file, line) => format!(", {file}:{line}"),
    };
    format!(
        "waiting for approval {id}: {what} (rule {rule}{place}); a person answers with \
         `cordon approvals approve {id}` or `cordon approvals deny {id}`, or in the web console",
        id = a.id,
        what = a.subject.describe(),
        rule = a.rule.id,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval(kind: &str, session: Option<&str>) -> Approval {
        serde_json::from_value(json!({
            "id": "ap_0123456789abcdef", "session": session, "principal": "owner",
            "kind": kind,
            "subject": {"kind": "exec", "argv_prefix": ["rm", "-f", "/tmp/x"]},
            "grant_subject": {"kind": "exec", "argv_prefix": ["rm"]},
            "reason": "", "risk": [], "offers": ["once"],
            "created_unix_ms": 0, "expires_unix_ms": 0, "state": "pending",
            "decided_by": null, "decided_unix_ms": null, "scope": null,
            "rule": {"id": "ask-rm", "file": "/etc/cordon/policy.cedar", "line": 3},
            "grant": null,
        }))
        .unwrap()
    }

    #[test]
    fn only_the_calls_own_kinds_and_sandbox_are_named() {
        let exec = Held {
            session: "sb-1",
            kinds: &["exec", "egress"],
        };
        assert!(exec.covers(&approval("exec", Some("sb-1"))));
        assert!(exec.covers(&approval("egress", Some("sb-1"))));
        assert!(!exec.covers(&approval("exec", Some("sb-2"))));
        assert!(!exec.covers(&approval("exec", None)));
        assert!(!exec.covers(&approval("path", Some("sb-1"))));
        // A create (no sandbox yet) is never a call's own.
        assert!(!exec.covers(&approval("create", None)));
    }

    #[test]
    fn the_notice_names_the_approval_its_rule_and_the_answer() {
        assert_eq!(
            notice(&approval("exec", Some("sb-1"))),
            "waiting for approval ap_0123456789abcdef: exec of `rm -f /tmp/x` (rule ask-rm, \
             /etc/cordon/policy.cedar:3); a person answers with `cordon approvals approve \
             ap_0123456789abcdef` or `cordon approvals deny ap_0123456789abcdef`, or in the web \
             console"
        );
    }
}
