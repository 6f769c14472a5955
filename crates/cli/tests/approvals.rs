//! Approvals end to end through the real binary: `cordon serve --policy`
//! with a Cedar policy that asks about some execs, an exec that waits on
//! its approval and runs once it is answered (through the API, then
//! `cordon approvals`), refusals with the structured error, scopes, a
//! restart with approvals pending, approver tokens, a forbid no grant
//! lifts, and an egress ask from curl inside the sandbox.
//!
//! The layer proven throughout is the Gate (crates/approvals) wired into
//! the server: without it the execs would run at once, and the refusals
//! and approvals asserted here would not exist.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const POLICY: &str = r#"
@id("ask-deploy")
@ask
@offer("once,session,duration,persistent")
permit(principal, action == Action::"exec", resource)
when { context.program == "echo" && context.argv.contains("deploy") };

@id("no-force")
forbid(principal, action == Action::"exec", resource)
when { context.argv.contains("--force") };

@id("no-high")
forbid(principal, action == Action::"create_sandbox", resource)
when { context.profile == "high" };

@id("keep-out")
forbid(principal, action == Action::"file_write", resource)
when { context.path like "/workspace/keep-out*" };
"#;

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

struct Server {
    child: Option<Child>,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    socket: PathBuf,
    tcp: Option<String>,
}

impl Server {
    fn start(flags: &[&str]) -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::write(dir.join("policy.cedar"), POLICY).unwrap();
        let mut s = Server::start_in(&dir, flags);
        s._tmp = Some(tmp);
        s
    }

    /// A server on `dir` (its socket, audit store, state and policy).
    fn start_in(dir: &std::path::Path, flags: &[&str]) -> Server {
        let policy = dir.join("policy.cedar");
        let mut all = Vec::new();
        if policy.exists() {
            all.extend(["--policy", policy.to_str().unwrap()]);
        }
        all.extend_from_slice(flags);
        let (child, ready) = start_serve(dir, &all);
        Server {
            child: Some(child),
            dir: dir.to_path_buf(),
            _tmp: None,
            socket: dir.join("cordon.sock"),
            tcp: ready["listen"].as_str().map(str::to_owned),
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(c.id() as i32).unwrap(),
                rustix::process::Signal::TERM,
            );
            let _ = c.wait();
        }
    }

    fn unix(&self, method: &str, path: &str, body: Option<&Value>) -> Reply {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        exchange(s, method, path, None, body, None)
    }

    fn tcp(&self, token: &str, method: &str, path: &str, body: Option<&Value>) -> Reply {
        let s = TcpStream::connect(self.tcp.as_ref().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        exchange(s, method, path, Some(token), body, None)
    }

    fn token(&self, args: &[&str]) -> String {
        create_token(&self.dir.join("state"), args)
    }

    /// `cordon approvals ARGS` against this server.
    fn approvals(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(cordon_bin())
            .arg("approvals")
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn create(&self, body: Value) -> String {
        let r = self.unix("POST", "/v1/sandboxes", Some(&body));
        assert_eq!(r.status, 201, "{}", r.body);
        r.json()["id"].as_str().unwrap().to_owned()
    }

    /// Exec `argv` in `sb` as the owner.
    fn exec(&self, sb: &str, argv: &[&str]) -> Reply {
        let body = json!({"argv": argv});
        self.unix("POST", &format!("/v1/sandboxes/{sb}/exec"), Some(&body))
    }

    /// Exec `argv` in `sb` as the owner, on a thread (it may wait for an
    /// approval).
    fn exec_bg(&self, sb: &str, argv: &[&str]) -> std::thread::JoinHandle<Reply> {
        let socket = self.socket.clone();
        let path = format!("/v1/sandboxes/{sb}/exec");
        let body = json!({"argv": argv});
        std::thread::spawn(move || {
            let s = UnixStream::connect(&socket).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
            exchange(s, "POST", &path, None, Some(&body), None)
        })
    }

    /// The pending approvals (as the owner sees them).
    fn pending(&self) -> Vec<Value> {
        let r = self.unix("GET", "/v1/approvals?state=pending", None);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["approvals"].as_array().unwrap().clone()
    }

    /// Wait for exactly one more pending approval than `before`; return it.
    fn next_pending(&self, seen: &[String]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(a) = self
                .pending()
                .into_iter()
                .find(|a| !seen.contains(&a["id"].as_str().unwrap().to_owned()))
            {
                return a;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no approval became pending");
    }

    fn answer(&self, id: &str, body: Value) -> Reply {
        self.unix("POST", &format!("/v1/approvals/{id}"), Some(&body))
    }

    fn audit_has(&self, needles: &[&str]) {
        let mut text = String::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let out = Command::new(cordon_bin())
                .args(["audit", "tail", "-n", "2000", "--json", "--store"])
                .arg(self.dir.join("audit.db"))
                .output()
                .unwrap();
            text = String::from_utf8_lossy(&out.stdout).into_owned();
            if needles.iter().all(|n| text.contains(n)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the audit store lacks one of {needles:?}: {text}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn ids(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_exec_waits_for_its_approval_through_the_api_then_the_cli() {
    if ready() {
        return;
    }
    let srv = Server::start(&[]);
    let sb = srv.create(json!({}));
    // Not asked about: runs at once.
    let r = srv.exec(&sb, &["echo", "hello"]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(srv.pending().is_empty());

    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "prod"]);
    let a = srv.next_pending(&[]);
    let id = a["id"].as_str().unwrap().to_owned();
    assert_eq!(a["kind"], "exec");
    assert_eq!(a["session"], sb.as_str());
    assert_eq!(a["principal"], "owner");
    assert_eq!(
        a["subject"]["argv_prefix"],
        json!(["echo", "deploy", "prod"])
    );
    assert_eq!(a["grant_subject"]["argv_prefix"], json!(["echo", "deploy"]));
    assert_eq!(a["rule"]["id"], "ask-deploy");
    assert!(a["rule"]["line"].as_u64().unwrap() > 0, "{a}");
    assert!(a["offers"].as_array().unwrap().contains(&json!("session")));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiting.is_finished(), "the exec waits for the answer");
    let r = srv.answer(&id, json!({"decision": "approve", "scope": "once"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["state"], "approved");
    let done = waiting.join().unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.json()["stdout"], "deploy prod\n");

    // Once does not cover a second call: it asks again; answered by the CLI.
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "prod"]);
    let again = srv.next_pending(std::slice::from_ref(&id));
    let id2 = again["id"].as_str().unwrap().to_owned();
    assert_ne!(id2, id);
    let (code, out, err) = srv.approvals(&["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&id2) && out.contains("echo deploy prod"),
        "{out}"
    );
    let (code, out, err) = srv.approvals(&["approve", &id2]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("approved"), "{out}");
    let done = waiting.join().unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.json()["stdout"], "deploy prod\n");
    let (code, out, _) = srv.approvals(&["list", "--state", "all", "--json"]);
    assert_eq!(code, 0);
    let all: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(all["approvals"].as_array().unwrap().len(), 2);

    // Every decision is in the audit store with its rule.
    srv.audit_has(&[
        "\"decision\"",
        "ask-deploy",
        "builtin:profile-default",
        "approval_created",
        "approval_decided",
        &id2,
    ]);
}

/// `cordon sandbox exec` held by an ask is not silent: it names the
/// approval it waits on, its rule, and the command that answers it, once;
/// then it ends as the answer says.
/// `cordon sandbox exec SB -- ARGV` started, and the first line of its
/// stderr (the notice, when the call waits on an ask).
fn cli_exec_until_told(
    srv: &Server,
    sb: &str,
    argv: &[&str],
) -> (Child, std::io::BufReader<std::process::ChildStderr>, String) {
    use std::io::BufRead;
    let mut child = Command::new(cordon_bin())
        .args(["sandbox", "--socket"])
        .arg(&srv.socket)
        .args(["exec", sb, "--"])
        .args(argv)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    (child, stderr, line)
}

/// The id of the one approval pending.
fn only_pending(srv: &Server) -> String {
    let pending = srv.pending();
    assert_eq!(pending.len(), 1, "{pending:?}");
    pending[0]["id"].as_str().unwrap().to_owned()
}

#[test]
fn the_cli_says_which_approval_it_waits_on() {
    if ready() {
        return;
    }
    let srv = Server::start(&[]);
    let sb = srv.create(json!({}));
    let (child, mut stderr, line) = cli_exec_until_told(&srv, &sb, &["echo", "deploy", "cli"]);
    let id = only_pending(&srv);
    assert!(
        line.starts_with(&format!(
            "cordon: waiting for approval {id}: exec `echo deploy cli` (rule ask-deploy, "
        )) && line.contains(&format!("`cordon approvals approve {id}`")),
        "{line}"
    );
    let r = srv.answer(&id, json!({"decision": "approve", "scope": "once"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let out = child.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(out.status.code(), Some(0), "{rest}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "deploy cli\n");
    assert!(!rest.contains("waiting for approval"), "named once: {rest}");
}

#[test]
fn denied_and_expired_approvals_fail_with_the_structured_error() {
    if ready() {
        return;
    }
    let srv = Server::start(&["--approval-timeout", "2s"]);
    let sb = srv.create(json!({}));
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "x"]);
    let a = srv.next_pending(&[]);
    let id = a["id"].as_str().unwrap().to_owned();
    let (code, out, err) = srv.approvals(&["deny", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("denied"), "{out}");
    let r = waiting.join().unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "approval_denied");
    assert_eq!(e["approval"], id.as_str());
    assert_eq!(e["subject"]["kind"], "exec");
    assert_eq!(e["subject"]["argv_prefix"], json!(["echo", "deploy", "x"]));
    assert_eq!(e["rule"]["id"], "ask-deploy");
    assert!(
        e["would_allow"].as_str().unwrap().contains("echo deploy"),
        "{e}"
    );
    assert!(
        e["message"].as_str().unwrap().contains("echo deploy x"),
        "{e}"
    );

    // Nobody answers: after 2 s it expires.
    let t0 = Instant::now();
    let r = srv.exec(&sb, &["echo", "deploy", "y"]);
    assert!(t0.elapsed() >= Duration::from_millis(1900));
    assert_eq!(r.status, 403, "{}", r.body);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "approval_expired");
    assert_eq!(e["subject"]["argv_prefix"], json!(["echo", "deploy", "y"]));
    assert!(
        e["would_allow"].as_str().unwrap().contains("echo deploy"),
        "{e}"
    );
    let expired = srv.unix(
        "GET",
        &format!("/v1/approvals/{}", e["approval"].as_str().unwrap()),
        None,
    );
    assert_eq!(expired.json()["state"], "expired");
}

#[test]
fn scopes_hold_session_ends_with_the_session_duration_ends_in_time() {
    if ready() {
        return;
    }
    let srv = Server::start(&["--approval-timeout", "2s"]);
    let sb = srv.create(json!({}));
    let other = srv.create(json!({}));
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "a"]);
    let a = srv.next_pending(&[]);
    let r = srv.answer(
        a["id"].as_str().unwrap(),
        json!({"decision": "approve", "scope": "session"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(waiting.join().unwrap().status, 200);
    // The narrowed prefix `echo deploy` runs in that session without asking.
    let r = srv.exec(&sb, &["echo", "deploy", "b"]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["stdout"], "deploy b\n");
    assert!(srv.pending().is_empty());
    // Not in another session.
    let r = srv.exec(&other, &["echo", "deploy", "b"]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "approval_expired");
    // The session ends: so does its grant.
    let r = srv.unix("DELETE", &format!("/v1/sandboxes/{sb}"), None);
    assert_eq!(r.status, 204);
    srv.audit_has(&["grant_ended", "session_ended"]);

    // A duration grant holds for its time, then asks again.
    let seen = ids(srv.unix("GET", "/v1/approvals", None).json()["approvals"]
        .as_array()
        .unwrap());
    let waiting = srv.exec_bg(&other, &["echo", "deploy", "c"]);
    let a = srv.next_pending(&seen);
    let r = srv.answer(
        a["id"].as_str().unwrap(),
        json!({"decision": "approve", "scope": "duration", "duration": "3s"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["scope"], json!({"kind": "duration", "seconds": 3}));
    assert_eq!(waiting.join().unwrap().status, 200);
    let r = srv.exec(&other, &["echo", "deploy", "d"]);
    assert_eq!(r.status, 200, "{}", r.body);
    std::thread::sleep(Duration::from_millis(3500));
    let r = srv.exec(&other, &["echo", "deploy", "d"]);
    assert_eq!(r.status, 403, "{}", r.body);
    srv.audit_has(&["\"why\":\"expired\""]);
}

#[test]
fn pending_approvals_survive_a_restart_and_expire_after_it() {
    if ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("policy.cedar"), POLICY).unwrap();
    let mut srv = Server::start_in(tmp.path(), &["--approval-timeout", "6s"]);
    let sb = srv.create(json!({}));
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "restart"]);
    let a = srv.next_pending(&[]);
    let id = a["id"].as_str().unwrap().to_owned();
    srv.stop();
    let r = waiting.join().unwrap();
    assert_ne!(r.status, 200, "the exec did not run: {}", r.body);

    let srv = Server::start_in(tmp.path(), &["--approval-timeout", "6s"]);
    let pending = srv.pending();
    assert_eq!(
        ids(&pending),
        vec![id.clone()],
        "the approval survived the restart"
    );
    assert_eq!(
        pending[0]["subject"]["argv_prefix"],
        json!(["echo", "deploy", "restart"])
    );
    // Nobody answers it: it expires at its time, on the new server.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut state = String::new();
    while Instant::now() < deadline {
        state = srv.unix("GET", &format!("/v1/approvals/{id}"), None).json()["state"]
            .as_str()
            .unwrap()
            .to_owned();
        if state == "expired" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(state, "expired");
    srv.audit_has(&["approval_expired", &id]);
}

/// An ask about a sandbox that is then deleted is closed with it: no
/// approver is left a question about a sandbox that is gone (approving it
/// would do nothing), and the call that waited is refused. A sandbox ended
/// by its idle timeout closes its asks the same way; a server's shutdown
/// does not (the test above: they outlive a restart).
#[test]
fn the_asks_of_a_deleted_or_ended_sandbox_are_expired_with_it() {
    if ready() {
        return;
    }
    let srv = Server::start(&[]);
    let sb = srv.create(json!({}));
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "gone"]);
    let a = srv.next_pending(&[]);
    let id = a["id"].as_str().unwrap().to_owned();
    assert_eq!(a["session"], sb.as_str());
    // Another sandbox's ask stays pending through the delete.
    let other = srv.create(json!({"idle_timeout": "3s"}));
    let waiting_other = srv.exec_bg(&other, &["echo", "deploy", "idle"]);
    let b = srv.next_pending(std::slice::from_ref(&id));
    let other_id = b["id"].as_str().unwrap().to_owned();

    let r = srv.unix("DELETE", &format!("/v1/sandboxes/{sb}"), None);
    assert_eq!(r.status, 204, "{}", r.body);
    let got = srv.unix("GET", &format!("/v1/approvals/{id}"), None).json();
    assert_eq!(got["state"], "expired", "{got}");
    assert_eq!(ids(&srv.pending()), vec![other_id.clone()]);
    let r = waiting.join().unwrap();
    assert_eq!(r.status, 403, "{}", r.body);

    // The other sandbox ends by its idle timeout (its waiting exec does
    // not count as use): its ask goes with it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !srv.pending().is_empty() {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(srv.pending().is_empty(), "{:?}", srv.pending());
    let got = srv
        .unix("GET", &format!("/v1/approvals/{other_id}"), None)
        .json();
    assert_eq!(got["state"], "expired", "{got}");
    let r = waiting_other.join().unwrap();
    assert_ne!(r.status, 200, "{}", r.body);
    srv.audit_has(&["approval_expired", &id, &other_id]);
}

#[test]
fn an_approver_token_answers_the_asking_token_cannot() {
    if ready() {
        return;
    }
    let srv = Server::start(&["--listen", "127.0.0.1:0"]);
    let agent = srv.token(&["--name", "agent", "--preset", "low"]);
    let other = srv.token(&["--name", "other", "--preset", "low"]);
    let reviewer = srv.token(&["--name", "reviewer", "--approver"]);
    let r = srv.tcp(
        &agent,
        "POST",
        "/v1/sandboxes",
        Some(&json!({"preset": "low"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let sb = r.json()["id"].as_str().unwrap().to_owned();
    let waiting = {
        let addr = srv.tcp.clone().unwrap();
        let agent = agent.clone();
        let sb = sb.clone();
        std::thread::spawn(move || {
            let s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
            exchange(
                s,
                "POST",
                &format!("/v1/sandboxes/{sb}/exec"),
                Some(&agent),
                Some(&json!({"argv": ["echo", "deploy", "t"]})),
                None,
            )
        })
    };
    let a = srv.next_pending(&[]);
    let id = a["id"].as_str().unwrap().to_owned();
    assert_eq!(a["principal"], "agent");
    let approve = json!({"decision": "approve"});
    // The asking token sees its approval but may not answer it.
    let mine = srv.tcp(&agent, "GET", "/v1/approvals?state=pending", None);
    assert_eq!(
        ids(mine.json()["approvals"].as_array().unwrap()),
        vec![id.clone()]
    );
    let r = srv.tcp(
        &agent,
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(&approve),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // Another token without --approver neither sees nor answers it.
    let r = srv.tcp(&other, "GET", "/v1/approvals?state=pending", None);
    assert!(r.json()["approvals"].as_array().unwrap().is_empty());
    let r = srv.tcp(
        &other,
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(&approve),
    );
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(
        srv.unix("GET", &format!("/v1/approvals/{id}"), None).json()["state"],
        "pending"
    );
    // The approver answers.
    let r = srv.tcp(
        &reviewer,
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(&approve),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["decided_by"], "reviewer");
    let done = waiting.join().unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.json()["stdout"], "deploy t\n");
}

#[test]
fn a_policy_forbid_is_never_lifted_by_a_grant() {
    if ready() {
        return;
    }
    let srv = Server::start(&["--approval-timeout", "2s"]);
    let sb = srv.create(json!({}));
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "a"]);
    let a = srv.next_pending(&[]);
    let r = srv.answer(
        a["id"].as_str().unwrap(),
        json!({"decision": "approve", "scope": "session"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(waiting.join().unwrap().status, 200);
    // The session grant covers `echo deploy ...`, but a forbid matches.
    let r = srv.exec(&sb, &["echo", "deploy", "--force"]);
    assert_eq!(r.status, 403, "{}", r.body);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "policy_denied");
    assert_eq!(e["rule"]["id"], "no-force");
    assert!(e["approval"].is_null(), "a forbid asks nobody: {e}");
    assert!(
        e["would_allow"].is_null(),
        "nothing but the policy would allow it: {e}"
    );
    assert!(srv.pending().is_empty());
    srv.audit_has(&["no-force", "policy_denied"]);
}

#[test]
fn a_persistent_grant_needs_a_second_confirmation_and_is_a_rule_in_the_policy() {
    if ready() {
        return;
    }
    let srv = Server::start(&["--approval-timeout", "2s"]);
    let sb = srv.create(json!({}));
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "p"]);
    let a = srv.next_pending(&[]);
    let id = a["id"].as_str().unwrap().to_owned();
    let body = json!({"decision": "approve", "scope": "persistent"});
    let r = srv.answer(&id, body.clone());
    assert_eq!(r.status, 409, "{}", r.body);
    let confirm = r.json();
    let rule = confirm["rule"].as_str().unwrap().to_owned();
    assert!(rule.contains(&format!("grant-{id}")), "{rule}");
    assert!(rule.contains("echo deploy"), "{rule}");
    let policy = srv.dir.join("policy.cedar");
    assert_eq!(
        std::fs::read_to_string(&policy).unwrap(),
        POLICY,
        "nothing written yet"
    );
    let mut second = body.clone();
    second["confirm"] = json!("cf_wrong");
    assert_eq!(srv.answer(&id, second.clone()).status, 409);
    second["confirm"] = confirm["confirm"].clone();
    let r = srv.answer(&id, second);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(waiting.join().unwrap().status, 200);
    let text = std::fs::read_to_string(&policy).unwrap();
    assert!(text.starts_with(POLICY) && text.contains(&rule), "{text}");
    // In every session now, with no question.
    let other = srv.create(json!({}));
    let r = srv.exec(&other, &["echo", "deploy", "q"]);
    assert_eq!(r.status, 200, "{}", r.body);
    // A reviewer removes the rule: the grant is gone with it.
    std::fs::write(&policy, POLICY).unwrap();
    let r = srv.exec(&other, &["echo", "deploy", "q"]);
    assert_eq!(r.status, 403, "{}", r.body);
}

/// An HTTP server on the host for `n` requests: answers `hello` to each.
fn host_http(n: usize) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        for s in l.incoming().take(n) {
            let mut s = s.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n",
            );
        }
    });
    (port, h)
}

/// A server without a policy file and a sandbox whose profile asks about
/// every unlisted host (`on_unlisted = "ask"`), for curl inside; None
/// when the test cannot run here (said as SKIPPED).
fn server_asking_about_unlisted_hosts() -> Option<(tempfile::TempDir, Server, String)> {
    if ready()
        || skip_unless(
            Command::new("curl").arg("--version").output().is_ok(),
            "curl is not installed",
        )
    {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let srv = Server::start_in(tmp.path(), &[]);
    let sb = srv.create(json!({"profile": {
        "extends": "low",
        "network": {"mode": "proxy", "on_unlisted": "ask", "allow_private": true}
    }}));
    Some((tmp, srv, sb))
}

#[test]
fn an_unlisted_host_under_ask_waits_for_its_approval_then_curl_reaches_it() {
    let Some((_tmp, srv, sb)) = server_asking_about_unlisted_hosts() else {
        return;
    };
    let (port, host) = host_http(3);
    let url = format!("http://127.0.0.1:{port}/");
    let waiting = srv.exec_bg(&sb, &["curl", "-sS", "--max-time", "60", &url]);
    let a = srv.next_pending(&[]);
    assert_eq!(a["kind"], "egress");
    assert_eq!(
        a["subject"],
        json!({"kind": "egress", "host": "127.0.0.1", "port": port})
    );
    assert_eq!(a["rule"]["id"], "profile:network.on_unlisted=ask");
    assert!(!waiting.is_finished(), "curl waits on the approval");
    let r = srv.answer(a["id"].as_str().unwrap(), json!({"decision": "approve"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let done = waiting.join().unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.json()["stdout"], "hello\n", "{}", done.body);
    // Once was one connection: the next asks again; approved for the
    // session, the host joins the sandbox's proxy rules (a live grant).
    let seen = vec![a["id"].as_str().unwrap().to_owned()];
    let waiting = srv.exec_bg(&sb, &["curl", "-sS", "--max-time", "60", &url]);
    let b = srv.next_pending(&seen);
    let r = srv.answer(
        b["id"].as_str().unwrap(),
        json!({"decision": "approve", "scope": "session"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(waiting.join().unwrap().json()["stdout"], "hello\n");
    let grants = srv
        .unix("GET", &format!("/v1/sandboxes/{sb}/grants"), None)
        .json();
    assert_eq!(grants["grants"][0]["host"], "127.0.0.1", "{grants}");
    assert_eq!(grants["grants"][0]["port"], port, "{grants}");
    let r = srv.exec(&sb, &["curl", "-sS", "--max-time", "10", &url]);
    assert_eq!(r.json()["stdout"], "hello\n", "{}", r.body);
    assert!(srv.pending().is_empty(), "asked nobody");
    host.join().unwrap();
    srv.audit_has(&[
        "\"egress\"",
        "profile:network.on_unlisted=ask",
        "approval_decided",
    ]);
}

/// `cordon sandbox exec` names an ask that its command's connection
/// waits on (the exec itself was allowed and its stream is open).
#[test]
fn the_cli_names_the_egress_ask_its_command_waits_on() {
    let Some((_tmp, srv, sb)) = server_asking_about_unlisted_hosts() else {
        return;
    };
    let (port, host) = host_http(1);
    let url = format!("http://127.0.0.1:{port}/");
    let argv = ["curl", "-sS", "--max-time", "60", &url];
    let (child, _stderr, line) = cli_exec_until_told(&srv, &sb, &argv);
    let id = only_pending(&srv);
    assert!(
        line.starts_with(&format!(
            "cordon: waiting for approval {id}: egress `127.0.0.1:{port}` (rule \
             profile:network.on_unlisted=ask"
        )),
        "{line}"
    );
    let r = srv.answer(&id, json!({"decision": "approve"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    host.join().unwrap();
}

/// Read from `s` until the text holds every one of `needles` (or 20 s).
fn read_until(s: &mut UnixStream, needles: &[&str]) -> String {
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while Instant::now() < deadline && !needles.iter().all(|n| text.contains(n)) {
        if let Ok(n) = s.read(&mut buf) {
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    text
}

/// A webhook receiver on the host: the first request's head and body.
fn webhook_receiver() -> (u16, std::thread::JoinHandle<(String, String)>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut data = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).unwrap_or(0);
            data.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&data).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= len || n == 0 {
                    let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
                    return (head.to_owned(), body.to_owned());
                }
            }
            if n == 0 {
                return (text, String::new());
            }
        }
    });
    (port, h)
}

#[test]
fn a_new_approval_reaches_the_event_stream_and_the_webhook() {
    if ready() {
        return;
    }
    let (port, hook) = webhook_receiver();
    let url = format!("http://127.0.0.1:{port}/hook");
    let srv = Server::start(&["--approval-webhook", &url]);
    let sb = srv.create(json!({}));
    let mut events = UnixStream::connect(&srv.socket).unwrap();
    events
        .write_all(b"GET /v1/approvals/events HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let head = read_until(&mut events, &["\r\n\r\n"]);
    assert!(head.contains("text/event-stream"), "{head}");
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "sse"]);
    let a = srv.next_pending(&[]);
    let id = a["id"].as_str().unwrap().to_owned();
    let text = read_until(&mut events, &["event: approval", &id]);
    assert!(
        text.contains("event: approval") && text.contains(&id),
        "{text}"
    );
    let (hook_head, hook_body) = hook.join().unwrap();
    assert!(hook_head.starts_with("POST /hook "), "{hook_head}");
    assert!(
        hook_head
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{hook_head}"
    );
    let posted: Value = serde_json::from_str(&hook_body).unwrap();
    assert_eq!(posted["id"], id.as_str());
    assert_eq!(
        posted["subject"]["argv_prefix"],
        json!(["echo", "deploy", "sse"])
    );
    assert_eq!(srv.answer(&id, json!({"decision": "approve"})).status, 200);
    let text = read_until(&mut events, &["\"state\":\"approved\""]);
    assert!(text.contains("\"state\":\"approved\""), "{text}");
    assert_eq!(waiting.join().unwrap().status, 200);
}

#[test]
fn creates_and_file_writes_pass_the_gate_too() {
    if ready() {
        return;
    }
    let srv = Server::start(&[]);
    let r = srv.unix("POST", "/v1/sandboxes", Some(&json!({"preset": "high"})));
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "policy_denied");
    assert_eq!(r.json()["error"]["rule"]["id"], "no-high");
    let sb = srv.create(json!({"preset": "low"}));
    let put = |path: &str| {
        let s = UnixStream::connect(&srv.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        exchange(
            s,
            "PUT",
            &format!("/v1/sandboxes/{sb}/files{path}"),
            None,
            Some(&json!("x")),
            None,
        )
    };
    assert_eq!(put("/workspace/fine.txt").status, 204);
    let r = put("/workspace/keep-out/a.txt");
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["error"]["rule"]["id"], "keep-out");
    assert_eq!(
        r.json()["error"]["subject"],
        json!({"kind": "path", "path": "/workspace/keep-out/a.txt", "writable": true})
    );
    srv.audit_has(&["no-high", "keep-out"]);
}

/// Layer: the policy (Cedar) over the proxy's allow list. A host the
/// profile allows is still an egress action the policy decides, so a
/// `forbid` on it wins; the same request in the same sandbox without that
/// rule reaches the host (the refusal is the forbid's, not the profile's).
#[test]
fn a_policy_forbid_wins_over_the_profiles_allow_list() {
    if ready()
        || skip_unless(
            Command::new("curl").arg("--version").output().is_ok(),
            "curl is not installed",
        )
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("policy.cedar");
    let (port, host) = host_http(1);
    let forbid = format!(
        "@id(\"no-local-web\")\nforbid(principal, action == Action::\"egress\", resource)\nwhen {{ context.host == \"127.0.0.1\" && context.port == {port} }};\n"
    );
    std::fs::write(&policy, &forbid).unwrap();
    let srv = Server::start_in(tmp.path(), &[]);
    let sb = srv.create(json!({"profile": {
        "extends": "low",
        "network": {"mode": "proxy", "allow": [format!("127.0.0.1:{port}")], "allow_private": true}
    }}));
    let url = format!("http://127.0.0.1:{port}/");
    let curl = [
        "curl",
        "-sS",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code}",
        &url,
    ];
    let r = srv.exec(&sb, &curl);
    let out = r.json()["stdout"].as_str().unwrap_or_default().to_owned();
    assert!(out.ends_with("403"), "the forbid refuses: {}", r.body);
    assert!(out.contains("no-local-web"), "names the rule: {}", r.body);
    // The policy file is read again when it changes: without the forbid the
    // allow list's answer stands and the host is reached.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&policy, "// no rules\n").unwrap();
    let r = srv.exec(&sb, &curl);
    let out = r.json()["stdout"].as_str().unwrap_or_default().to_owned();
    assert!(
        out.starts_with("hello") && out.ends_with("200"),
        "{}",
        r.body
    );
    host.join().unwrap();
    srv.audit_has(&["no-local-web", "\"decision\""]);
}

/// Layer: the audit check after the Gate. An ask may wait minutes for
/// its human, and the audit store may fail meanwhile: an exec approved
/// then is refused (503 `audit_unavailable`), not run unrecorded. Fails
/// with the check after the Gate removed (the check before it passed).
#[test]
fn an_exec_approved_after_the_audit_store_broke_is_not_run() {
    if ready() {
        return;
    }
    let srv = Server::start(&[]);
    let sb = srv.create(json!({}));
    let waiting = srv.exec_bg(&sb, &["echo", "deploy", "prod"]);
    let id = srv.next_pending(&[])["id"].as_str().unwrap().to_owned();
    // A directory where the store's head file was: no commit goes
    // through; a create (which waits for its record's commit) finds it.
    let head = srv.dir.join("audit.db.head");
    std::fs::remove_file(&head).unwrap();
    std::fs::create_dir(&head).unwrap();
    let r = srv.unix("POST", "/v1/sandboxes", Some(&json!({})));
    assert_eq!(r.status, 503, "{}", r.body);
    let r = srv.answer(&id, json!({"decision": "approve", "scope": "once"}));
    assert_eq!(r.status, 200, "the human's answer is taken: {}", r.body);
    let done = waiting.join().unwrap();
    assert_eq!(
        done.status, 503,
        "an approved exec ran unrecorded: {}",
        done.body
    );
    assert_eq!(
        done.json()["error"]["code"],
        "audit_unavailable",
        "{}",
        done.body
    );
    std::fs::remove_dir(&head).unwrap();
    srv.audit_has(&["refused_unrecorded", "approval_decided", &id]);
}

/// Layer: the audit check of an unlisted host's ask. While the audit
/// store cannot record it, a command already running is refused at once,
/// told why, and no human is asked.
#[test]
fn an_unlisted_host_is_not_asked_about_while_the_audit_store_fails() {
    let Some((tmp, srv, sb)) = server_asking_about_unlisted_hosts() else {
        return;
    };
    let curl =
        "sleep 3; curl -s -o /dev/null -w 'code=%{http_code}\\n' --max-time 20 http://127.0.0.1:9/";
    let waiting = srv.exec_bg(&sb, &["sh", "-c", curl]);
    // Nothing waits to be committed: the create below finds the store
    // broken before the command connects.
    srv.audit_has(&["sleep 3; curl"]);
    let head = tmp.path().join("audit.db.head");
    std::fs::remove_file(&head).unwrap();
    std::fs::create_dir(&head).unwrap();
    let r = srv.unix("POST", "/v1/sandboxes", Some(&json!({})));
    assert_eq!(r.status, 503, "{}", r.body);
    let done = waiting.join().unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    let v = done.json();
    assert_eq!(v["stdout"], "code=403\n", "{v}");
    let told = v["hints"].to_string();
    assert!(told.contains("the audit store cannot record it"), "{v}");
    assert!(srv.pending().is_empty(), "a human was asked");
    std::fs::remove_dir(&head).unwrap();
    srv.audit_has(&["builtin:audit-unavailable"]);
}
