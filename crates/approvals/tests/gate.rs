//! The Gate and the store together: an ask waits for an answer; scopes
//! hold; pending approvals survive a reopen of the store; decisions are
//! logged with their rule.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_approvals::{
    Answer, ApprovalError, ApprovalEvent, ApprovalState, Approvals, DecisionLog, DecisionRecord,
    Gate, Scope,
};
use cordon_authz::{Action, DefaultVerdict, Principal, Request};

#[derive(Default)]
struct Log(Mutex<Vec<DecisionRecord>>);

impl DecisionLog for Log {
    fn decided(&self, r: &DecisionRecord) {
        self.0.lock().unwrap().push(r.clone());
    }
}

fn gate(dir: &Path, timeout: Duration) -> (Arc<Gate>, Arc<Log>) {
    let store = Arc::new(Approvals::open(&dir.join("approvals.db")).unwrap());
    let log = Arc::new(Log::default());
    let g = Gate::new(store, None, timeout, log.clone()).unwrap();
    (Arc::new(g), log)
}

/// An exec the profile asks about (no policy file: the default verdict).
fn ask_exec(who: &str, session: &str, argv: &[&str]) -> Request {
    let mut r = Request::new(
        Principal::named(who),
        Action::Exec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
        },
        DefaultVerdict::Ask {
            rule: "profile:exec.ask".into(),
        },
    );
    r.session = Some(session.into());
    r
}

/// Answer the next approval created with `answer`, as `by`.
fn answer_next(g: &Arc<Gate>, answer: Answer, by: &'static str) -> tokio::task::JoinHandle<String> {
    let store = g.approvals().clone();
    let mut events = store.subscribe();
    tokio::spawn(async move {
        loop {
            if let Ok(ApprovalEvent::Created(a)) = events.recv().await {
                store.decide(&a.id, answer.clone(), by).unwrap();
                return a.id;
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_is_one_call_and_the_decision_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let (g, log) = gate(dir.path(), Duration::from_secs(30));
    let h = answer_next(
        &g,
        Answer::Approve {
            scope: Scope::Once,
            confirm: None,
        },
        "alice",
    );
    let ok = g
        .check(ask_exec("agent", "sb-1", &["git", "push"]))
        .await
        .unwrap();
    let id = h.await.unwrap();
    assert!(ok.grant.is_some());
    assert_eq!(ok.scope, Some(Scope::Once));
    assert_eq!(
        g.approvals().get(&id).unwrap().state,
        ApprovalState::Approved
    );
    // The once grant is used up: the same call asks again (and, with
    // nobody answering, expires).
    let (short, _) = gate(dir.path(), Duration::from_millis(300));
    let r = short
        .check(ask_exec("agent", "sb-1", &["git", "push"]))
        .await
        .unwrap_err();
    assert_eq!(r.code, "approval_expired");
    let logged = log.0.lock().unwrap();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].outcome, "allowed");
    assert_eq!(logged[0].rule.id, "profile:exec.ask");
    assert_eq!(logged[0].grant, ok.grant);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_and_expired_are_structured_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let (g, _) = gate(dir.path(), Duration::from_millis(400));
    let h = answer_next(&g, Answer::Deny, "alice");
    let r = g
        .check(ask_exec("agent", "sb-1", &["rm", "-rf", "/w"]))
        .await
        .unwrap_err();
    let id = h.await.unwrap();
    assert_eq!(r.code, "approval_denied");
    assert_eq!(r.approval.as_deref(), Some(id.as_str()));
    assert!(r.message.contains("rm -rf /w"), "{}", r.message);
    assert!(r.would_allow.is_some());
    assert_eq!(r.rule.id, "profile:exec.ask");
    let r = g
        .check(ask_exec("agent", "sb-1", &["ls"]))
        .await
        .unwrap_err();
    assert_eq!(r.code, "approval_expired");
    let a = g.approvals().get(r.approval.as_deref().unwrap()).unwrap();
    assert_eq!(a.state, ApprovalState::Expired);
    assert!(r.would_allow.unwrap().contains("exec of `ls`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_grants_cover_the_prefix_in_that_session_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (g, _) = gate(dir.path(), Duration::from_millis(400));
    let h = answer_next(
        &g,
        Answer::Approve {
            scope: Scope::Session,
            confirm: None,
        },
        "owner",
    );
    g.check(ask_exec(
        "agent",
        "sb-1",
        &["git", "push", "origin", "main"],
    ))
    .await
    .unwrap();
    h.await.unwrap();
    let again = g
        .check(ask_exec("agent", "sb-1", &["git", "push", "origin", "dev"]))
        .await
        .unwrap();
    assert_eq!(again.scope, Some(Scope::Session));
    // Not another session, not another prefix, not another principal.
    for req in [
        ask_exec("agent", "sb-2", &["git", "push"]),
        ask_exec("agent", "sb-1", &["git", "pull"]),
        ask_exec("other", "sb-1", &["git", "push"]),
    ] {
        assert_eq!(g.check(req).await.unwrap_err().code, "approval_expired");
    }
    g.approvals().session_ended("sb-1").unwrap();
    assert_eq!(
        g.check(ask_exec("agent", "sb-1", &["git", "push"]))
            .await
            .unwrap_err()
            .code,
        "approval_expired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_grants_end_when_their_time_is_up() {
    let dir = tempfile::tempdir().unwrap();
    let (g, _) = gate(dir.path(), Duration::from_millis(400));
    let mut events = g.approvals().subscribe();
    let h = answer_next(
        &g,
        Answer::Approve {
            scope: Scope::For(Duration::from_secs(1)),
            confirm: None,
        },
        "owner",
    );
    g.check(ask_exec("agent", "sb-1", &["make", "test"]))
        .await
        .unwrap();
    h.await.unwrap();
    assert!(g
        .check(ask_exec("agent", "sb-1", &["make", "test"]))
        .await
        .is_ok());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    g.approvals().sweep().unwrap();
    assert!(g
        .check(ask_exec("agent", "sb-1", &["make", "test"]))
        .await
        .is_err());
    let mut ended = false;
    while let Ok(e) = events.try_recv() {
        ended |= matches!(e, ApprovalEvent::GrantEnded { .. });
    }
    assert!(
        ended,
        "the end of the grant is an event (the hook that narrows a widening)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_cannot_answer_its_own_approval() {
    let dir = tempfile::tempdir().unwrap();
    let (g, _) = gate(dir.path(), Duration::from_millis(500));
    let store = g.approvals().clone();
    let mut events = store.subscribe();
    let t = tokio::spawn({
        let g = g.clone();
        async move { g.check(ask_exec("agent", "sb-1", &["id"])).await }
    });
    let Ok(ApprovalEvent::Created(a)) = events.recv().await else {
        panic!("no approval")
    };
    let approve = Answer::Approve {
        scope: Scope::Once,
        confirm: None,
    };
    assert!(matches!(
        store.decide(&a.id, approve.clone(), "agent"),
        Err(ApprovalError::SelfApproval(_))
    ));
    assert!(matches!(
        store.decide(
            &a.id,
            Answer::Approve {
                scope: Scope::Persistent,
                confirm: None
            },
            "alice"
        ),
        Err(ApprovalError::NotOffered(_))
    ));
    store.decide(&a.id, approve.clone(), "alice").unwrap();
    assert!(t.await.unwrap().is_ok());
    assert!(matches!(
        store.decide(&a.id, approve, "bob"),
        Err(ApprovalError::NotPending { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_approvals_survive_a_reopen_and_expire_at_their_time() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (g, _) = gate(dir.path(), Duration::from_secs(1));
        // The asker goes away (its request dropped, as when the server dies).
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            g.check(ask_exec("agent", "sb-1", &["deploy", "prod"])),
        )
        .await;
    }
    let store = Approvals::open(&dir.path().join("approvals.db")).unwrap();
    let pending = store.list(Some(ApprovalState::Pending));
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].principal, "agent");
    store.sweep().unwrap();
    assert_eq!(
        store.list(Some(ApprovalState::Pending)).len(),
        1,
        "not yet due"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    store.sweep().unwrap();
    assert_eq!(
        store.get(&pending[0].id).unwrap().state,
        ApprovalState::Expired
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_after_its_asker_left_lets_the_retry_through_once() {
    let dir = tempfile::tempdir().unwrap();
    let (g, _) = gate(dir.path(), Duration::from_secs(5));
    let _ = tokio::time::timeout(
        Duration::from_millis(200),
        g.check(ask_exec("agent", "sb-1", &["deploy", "prod"])),
    )
    .await;
    let a = g.approvals().list(Some(ApprovalState::Pending)).remove(0);
    g.approvals()
        .decide(
            &a.id,
            Answer::Approve {
                scope: Scope::Once,
                confirm: None,
            },
            "owner",
        )
        .unwrap();
    let ok = g
        .check(ask_exec("agent", "sb-1", &["deploy", "prod"]))
        .await
        .unwrap();
    assert_eq!(
        ok.grant,
        a.grant.or(g.approvals().get(&a.id).unwrap().grant)
    );
    let (short, _) = gate(dir.path(), Duration::from_millis(200));
    assert!(short
        .check(ask_exec("agent", "sb-1", &["deploy", "prod"]))
        .await
        .is_err());
}

/// Pruning deletes closed approvals older than the window and their ended
/// grants, and never a pending approval or one whose grant is in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_keeps_what_is_pending_or_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let (g, _) = gate(dir.path(), Duration::from_secs(30));
    let store = g.approvals().clone();
    // Denied (closed, no grant).
    let t = answer_next(&g, Answer::Deny, "owner");
    assert!(g
        .check(ask_exec("agent", "sb-1", &["rm", "x"]))
        .await
        .is_err());
    let denied = t.await.unwrap();
    let approved_for_session = |session: &'static str, argv: &'static [&'static str]| {
        let g = g.clone();
        async move {
            let session_scope = Answer::Approve {
                scope: Scope::Session,
                confirm: None,
            };
            let t = answer_next(&g, session_scope, "owner");
            g.check(ask_exec("agent", session, argv)).await.unwrap();
            t.await.unwrap()
        }
    };
    // Approved for the session: closed, its grant in force.
    let in_force = approved_for_session("sb-2", &["make", "build"]).await;
    // Approved for the session, whose session then ended: grant ended.
    let ended = approved_for_session("sb-3", &["make", "test"]).await;
    store.session_ended("sb-3").unwrap();
    // Pending: its asker went away.
    let _ = tokio::time::timeout(
        Duration::from_millis(200),
        g.check(ask_exec("agent", "sb-4", &["deploy"])),
    )
    .await;
    let pending = store.list(Some(ApprovalState::Pending)).remove(0).id;

    // A window longer than their age deletes nothing.
    assert_eq!(store.prune(Duration::from_secs(3600)).unwrap(), 0);
    assert_eq!(store.list(None).len(), 4);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.prune(Duration::ZERO).unwrap(), 2);
    assert!(store.get(&denied).is_none(), "closed, no grant: pruned");
    assert!(store.get(&ended).is_none(), "closed, grant ended: pruned");
    assert!(store.get(&in_force).is_some(), "its grant is in force");
    assert!(store.get(&pending).is_some(), "pending");
    assert_eq!(store.live_grants(None, Some("sb-2")).unwrap().len(), 1);
    assert!(store.live_grants(None, Some("sb-3")).unwrap().is_empty());
}
