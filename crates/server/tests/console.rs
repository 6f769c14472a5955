//! The web console's server side through real sockets and raw HTTP: login
//! into an HttpOnly, SameSite=Strict cookie; the cookie accepted by the API
//! only with the session's CSRF token on requests that change something;
//! cross-site writes refused; sessions bound to their listener and ended by
//! logout and by revoking their token; the security headers of the pages;
//! and the audit endpoints the console reads (a sandbox's timeline, the
//! chain's check). No sandbox engine here (the sandbox routes answer 503
//! once a request is authenticated); the console in a real browser against
//! real sandboxes is tests/console (headless Chromium, `.ci/console.sh`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cloned_ref_to_slice_refs
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use cordon_policy::TrustLevel;
use cordon_server::tokens::{Ceiling, TokenStore};
use cordon_server::{AppState, AuditLog, Bound, Caller, Limits};
use serde_json::{json, Value};

struct Server {
    socket: PathBuf,
    tcp: SocketAddr,
    tokens: PathBuf,
    audit_path: PathBuf,
    audit: AuditLog,
    alpha: String,
    beta: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ceiling() -> Ceiling {
    Ceiling {
        preset: TrustLevel::Low,
        memory: None,
        pids: None,
        allow_net: vec![],
        max_sandboxes: 2,
    }
}

fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cordon.sock");
    let tokens_path = dir.path().join("tokens.json");
    let audit_path = dir.path().join("audit.db");
    let tokens = TokenStore::new(tokens_path.clone());
    let alpha = tokens.create("alpha", ceiling()).unwrap();
    let beta = tokens.create("beta", ceiling()).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let sock = socket.clone();
    let apath = audit_path.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let audit = cordon_server::open_audit(Some(&apath)).unwrap();
            audit.server_started(vec!["test".into()], json!({}));
            let bound = Bound::bind(&sock, Some("127.0.0.1:0".parse().unwrap())).unwrap();
            ready_tx
                .send((bound.tcp_addr().unwrap(), audit.clone()))
                .unwrap();
            let gate = cordon_server::gate::in_memory(&audit).unwrap();
            let state = AppState::new(None, tokens, audit.clone(), Limits::default(), gate);
            let stop = async {
                let _ = stopped.await;
            };
            bound
                .run(state, stop, || async move { audit.flush() })
                .await;
        });
    });
    let (tcp, audit) = ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    Server {
        socket,
        tcp,
        tokens: tokens_path,
        audit_path,
        audit,
        alpha,
        beta,
        stop: Some(stop),
        thread: Some(thread),
        _dir: dir,
    }
}

impl Server {
    fn get(&self, via: Via, path: &str, headers: &[String]) -> Reply {
        send(self, via, "GET", path, headers, "")
    }

    fn post(&self, via: Via, path: &str, headers: &[String], body: &str) -> Reply {
        send(self, via, "POST", path, headers, body)
    }

    /// The status of `GET /ui/session` with this cookie.
    fn session_status(&self, cookie: &str) -> u16 {
        send(
            self,
            Via::Tcp,
            "GET",
            "/ui/session",
            &[cookie.to_owned()],
            "",
        )
        .status
    }
}

/// An answer: status, headers (lower-case names), body.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

#[derive(Clone, Copy)]
enum Via {
    Tcp,
    Unix,
}

/// One request (`Connection: close`): method, path, extra header lines,
/// body.
fn send(s: &Server, via: Via, method: &str, path: &str, headers: &[String], body: &str) -> Reply {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Length: {}\r\n",
        s.tcp.port(),
        body.len()
    );
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    let mut out = Vec::new();
    match via {
        Via::Tcp => {
            let mut t = TcpStream::connect(s.tcp).unwrap();
            t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            t.write_all(req.as_bytes()).unwrap();
            let _ = t.read_to_end(&mut out);
        }
        Via::Unix => {
            let mut u = UnixStream::connect(&s.socket).unwrap();
            u.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            u.write_all(req.as_bytes()).unwrap();
            let _ = u.read_to_end(&mut out);
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

const FORM: &str = "Content-Type: application/x-www-form-urlencoded";
const JSON: &str = "Content-Type: application/json";

/// Log in with `token` (empty: the owner, on the unix socket); returns the
/// cookie header line and the CSRF token.
fn login(s: &Server, via: Via, token: &str) -> (String, String) {
    let r = send(
        s,
        via,
        "POST",
        "/ui/login",
        &[FORM.into()],
        &format!("token={token}"),
    );
    assert_eq!(r.status, 303, "login: {}", r.body);
    assert_eq!(r.header("location"), Some("/ui"));
    let set = r.header("set-cookie").expect("a cookie is set").to_owned();
    let value = set.split(';').next().unwrap().to_owned();
    let cookie = format!("Cookie: {value}");
    let session = send(s, via, "GET", "/ui/session", &[cookie.clone()], "");
    assert_eq!(session.status, 200, "{}", session.body);
    let csrf = session.json()["csrf"].as_str().unwrap().to_owned();
    (cookie, csrf)
}

/// A 403 with this error code.
fn refused(r: &Reply, code: &str, context: &str) {
    assert_eq!(
        (r.status, r.code().as_str()),
        (403, code),
        "{context}: {}",
        r.body
    );
}

fn csrf_header(csrf: &str) -> String {
    format!("X-CSRF-Token: {csrf}")
}

#[test]
fn login_sets_an_httponly_strict_cookie_and_pages_carry_a_strict_csp() {
    let s = start();
    let r = s.get(Via::Tcp, "/ui", &[]);
    assert_eq!(r.status, 303, "not logged in: to the login page");
    assert_eq!(r.header("location"), Some("/ui/login"));
    let page = s.get(Via::Tcp, "/ui/login", &[]);
    assert_eq!(page.status, 200);
    assert!(page
        .body
        .contains("<form method=\"post\" action=\"/ui/login\""));
    let csp = page.header("content-security-policy").unwrap();
    for part in [
        "script-src 'self'",
        "frame-ancestors 'none'",
        "default-src 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));

    let bad = s.post(Via::Tcp, "/ui/login", &[FORM.into()], "token=cordon_0000");
    assert_eq!(bad.status, 401);
    assert!(bad.header("set-cookie").is_none());
    assert!(bad.body.contains("unknown or revoked"));
    let empty = s.post(Via::Tcp, "/ui/login", &[FORM.into()], "token=");
    assert_eq!(
        empty.status, 401,
        "an empty token is the owner only on the unix socket"
    );

    let r = send(
        &s,
        Via::Tcp,
        "POST",
        "/ui/login",
        &[FORM.into()],
        &format!("token={}", s.alpha),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let set = r.header("set-cookie").unwrap();
    for part in [
        "cordon_console=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=",
    ] {
        assert!(set.contains(part), "{set}");
    }
    assert!(!set.contains(&s.alpha), "the cookie is not the token");
    let (cookie, csrf) = login(&s, Via::Tcp, &s.alpha);
    let page = s.get(Via::Tcp, "/ui", &[cookie.clone()]);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/ui/assets/app.js"));
    let session = s.get(Via::Tcp, "/ui/session", &[cookie.clone()]).json();
    assert_eq!(session["name"], "alpha");
    assert_eq!(session["owner"], false);
    assert_eq!(session["approver"], false);
    // An --approver token's console session may answer approvals.
    let reviewer = TokenStore::new(s.tokens.clone())
        .create_with("reviewer", ceiling(), true)
        .unwrap();
    let (rc, _) = login(&s, Via::Tcp, &reviewer);
    let me = s.get(Via::Tcp, "/ui/session", &[rc]).json();
    assert_eq!(
        (me["name"].as_str(), me["approver"].as_bool()),
        (Some("reviewer"), Some(true))
    );
    assert_eq!(session["csrf"], csrf.as_str());
    let js = s.get(Via::Tcp, "/ui/assets/app.js", &[]);
    assert_eq!(js.status, 200);
    assert!(js
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
    assert_eq!(js.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        s.get(Via::Tcp, "/ui/assets/..%2fCargo.toml", &[]).status,
        404
    );

    // The owner logs in on the unix socket with no token.
    let (owner, _) = login(&s, Via::Unix, "");
    let me = s.get(Via::Unix, "/ui/session", &[owner]).json();
    assert_eq!(me["name"], "owner");
    assert_eq!(me["owner"], true);
    assert_eq!(me["approver"], true);
}

/// Layer: the CSRF check on cookie-authenticated writes
/// (`console::caller`). Without it the cookie alone would pass and these
/// writes would reach the handler (503 here, no engine).
#[test]
fn hostile_a_cookie_without_the_right_csrf_token_cannot_write() {
    let s = start();
    let (cookie, csrf) = login(&s, Via::Tcp, &s.alpha);
    let create = r#"{"preset":"low"}"#;
    // A read with the cookie alone is fine.
    let r = s.get(Via::Tcp, "/v1/sandboxes", &[cookie.clone()]);
    assert_eq!(r.status, 503, "authenticated by the cookie: {}", r.body);
    // A write without the header, with a wrong one, with another session's.
    let (_, other_csrf) = login(&s, Via::Tcp, &s.alpha);
    for bad in [
        None,
        Some("0".repeat(64)),
        Some(String::new()),
        Some(other_csrf),
    ] {
        let mut h = vec![cookie.clone(), JSON.into()];
        if let Some(b) = &bad {
            h.push(csrf_header(b));
        }
        let r = s.post(Via::Tcp, "/v1/sandboxes", &h, create);
        assert_eq!(r.status, 403, "csrf {bad:?}: {}", r.body);
        assert_eq!(r.code(), "csrf");
        let r = send(&s, Via::Tcp, "DELETE", "/v1/sandboxes/x", &h[..1], "");
        assert_eq!(r.status, 403, "delete with csrf {bad:?}");
    }
    // The right token passes (and reaches the handler: no engine, 503).
    let h = [cookie.clone(), JSON.into(), csrf_header(&csrf)];
    let r = s.post(Via::Tcp, "/v1/sandboxes", &h, create);
    assert_eq!(r.status, 503, "{}", r.body);
    // Bearer requests are unchanged: no CSRF token needed.
    let bearer = format!("Authorization: Bearer {}", s.alpha);
    let r = s.post(Via::Tcp, "/v1/sandboxes", &[bearer, JSON.into()], create);
    assert_eq!(r.status, 503, "{}", r.body);
    // Logout is a write too.
    let r = s.post(Via::Tcp, "/ui/logout", &[cookie.clone()], "");
    assert_eq!(r.status, 403);
    assert_eq!(
        s.get(Via::Tcp, "/ui/session", &[cookie]).status,
        200,
        "still logged in"
    );
}

/// Layer: the cross-site check (`console::refuse_cross_site`): a browser's
/// cross-site write is refused whatever it carries, also on the unix
/// socket (where no credential is needed) and at login (login CSRF).
#[test]
fn hostile_cross_site_writes_are_refused_with_any_credentials() {
    let s = start();
    let (cookie, csrf) = login(&s, Via::Tcp, &s.alpha);
    let create = r#"{"preset":"low"}"#;
    let cross = [
        "Sec-Fetch-Site: cross-site".to_owned(),
        "Origin: http://evil.example".to_owned(),
        "Origin: null".to_owned(),
    ];
    for c in &cross {
        let h = [cookie.clone(), JSON.into(), csrf_header(&csrf), c.clone()];
        let r = s.post(Via::Tcp, "/v1/sandboxes", &h, create);
        refused(&r, "cross_site", c);
        let r = s.post(
            Via::Unix,
            "/v1/sandboxes",
            &[JSON.into(), c.clone()],
            create,
        );
        refused(&r, "cross_site", &format!("unix {c}"));
        let r = send(
            &s,
            Via::Tcp,
            "POST",
            "/ui/login",
            &[FORM.into(), c.clone()],
            &format!("token={}", s.alpha),
        );
        assert_eq!(r.status, 403, "login from another site {c}");
        assert!(r.header("set-cookie").is_none());
    }
    // The console's own requests are same-origin.
    let own = [
        cookie,
        JSON.into(),
        csrf_header(&csrf),
        "Sec-Fetch-Site: same-origin".into(),
        format!("Origin: http://127.0.0.1:{}", s.tcp.port()),
    ];
    let r = s.post(Via::Tcp, "/v1/sandboxes", &own, create);
    assert_eq!(r.status, 503, "{}", r.body);
}

/// Layer: the token check on every cookie request (`console::active`):
/// revoking a token ends its console sessions at once, and a new token of
/// the same name does not revive them.
#[test]
fn hostile_a_revoked_token_ends_its_console_sessions() {
    let s = start();
    let (alpha1, _) = login(&s, Via::Tcp, &s.alpha);
    let (alpha2, _) = login(&s, Via::Tcp, &s.alpha);
    let (beta, _) = login(&s, Via::Tcp, &s.beta);
    let store = TokenStore::new(s.tokens.clone());
    store.revoke("alpha").unwrap();
    let r = s.get(Via::Tcp, "/v1/sandboxes", &[alpha1.clone()]);
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("revoked"), "{}", r.body);
    // That ended every session of the token, not only the one used.
    assert_eq!(s.session_status(&alpha2), 401);
    for c in [&alpha1, &alpha2] {
        assert_eq!(s.get(Via::Tcp, "/ui", &[c.clone()]).status, 303);
    }
    store.create("alpha", ceiling()).unwrap();
    let r = s.get(Via::Tcp, "/v1/sandboxes", &[alpha1]);
    assert_eq!(r.status, 401, "a new token named alpha is another token");
    let r = s.get(Via::Tcp, "/v1/sandboxes", &[beta]);
    assert_eq!(r.status, 503, "beta's session lives on: {}", r.body);
    let r = send(
        &s,
        Via::Tcp,
        "POST",
        "/ui/login",
        &[FORM.into()],
        &format!("token={}", s.alpha),
    );
    assert_eq!(r.status, 401, "the revoked token cannot log in");
}

/// Layer: the listener binding of a console session: a cookie made over
/// TCP is not the owner on the unix socket, and the owner's unix cookie
/// is nothing over TCP.
#[test]
fn hostile_a_console_session_is_good_only_on_its_listener() {
    let s = start();
    let (tcp_cookie, tcp_csrf) = login(&s, Via::Tcp, &s.alpha);
    let (owner_cookie, owner_csrf) = login(&s, Via::Unix, "");
    let r = s.get(Via::Unix, "/v1/sandboxes", &[tcp_cookie.clone()]);
    assert_eq!(r.status, 401, "{}", r.body);
    let h = [owner_cookie.clone(), JSON.into(), csrf_header(&owner_csrf)];
    let r = send(
        &s,
        Via::Tcp,
        "POST",
        "/v1/sandboxes",
        &h,
        r#"{"preset":"high"}"#,
    );
    assert_eq!(r.status, 401, "{}", r.body);
    // Each on its own listener works.
    let h = [tcp_cookie, csrf_header(&tcp_csrf)];
    assert_eq!(s.get(Via::Tcp, "/v1/sandboxes", &h).status, 503);
    let h = [owner_cookie, csrf_header(&owner_csrf)];
    assert_eq!(s.get(Via::Unix, "/v1/sandboxes", &h).status, 503);
}

#[test]
fn logout_ends_the_session_and_clears_the_cookie() {
    let s = start();
    let (cookie, csrf) = login(&s, Via::Tcp, &s.alpha);
    let r = s.post(
        Via::Tcp,
        "/ui/logout",
        &[cookie.clone(), csrf_header(&csrf)],
        "",
    );
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(
        s.get(Via::Tcp, "/ui/session", &[cookie.clone()]).status,
        401
    );
    assert_eq!(s.get(Via::Tcp, "/v1/sandboxes", &[cookie]).status, 401);
}

/// A sandbox's run written through the server's audit log, as the
/// sandbox routes do.
fn record_sandbox(s: &Server, id: &str, owner: &str) {
    let caller = Caller::token(owner.into(), ceiling());
    s.audit
        .sandbox_created(&caller, id, "low", json!({"preset": "low"}));
    s.audit.record(
        &caller,
        "exec",
        Some(id),
        json!({"pid": 1, "argv": ["echo", "<img src=x onerror=alert(1)>"]}),
    );
    s.audit.egress(
        id,
        cordon_audit::Egress {
            method: "CONNECT".into(),
            host: "example.com".into(),
            port: 443,
            path: None,
            bytes_sent: 0,
            bytes_received: 0,
            duration_ms: 0,
            decision: cordon_audit::Decision::Deny,
            rule: None,
            reason: Some("not in the allow list".into()),
        },
    );
    s.audit.record(
        &caller,
        "exec_ended",
        Some(id),
        json!({"pid": 1, "exit_code": 0, "reason": "exited", "timed_out": false, "wall_ms": 3}),
    );
}

#[test]
fn a_timeline_shows_a_sandboxs_records_to_its_owner_only_also_after_it_ended() {
    let s = start();
    record_sandbox(&s, "sb-alpha", "alpha");
    let alpha = format!("Authorization: Bearer {}", s.alpha);
    let beta = format!("Authorization: Bearer {}", s.beta);
    let check = |r: &Reply| {
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let entries = v["entries"].as_array().unwrap();
        let cats: Vec<&str> = entries
            .iter()
            .map(|e| e["category"].as_str().unwrap())
            .collect();
        assert_eq!(cats, ["run", "run", "exec", "egress", "exec"], "{v}");
        assert_eq!(
            entries[2]["summary"],
            "exec echo <img src=x onerror=alert(1)> (pid 1)"
        );
        assert!(entries[3]["summary"]
            .as_str()
            .unwrap()
            .contains("deny CONNECT example.com:443"));
        assert!(entries[4]["summary"]
            .as_str()
            .unwrap()
            .starts_with("exec pid 1 ended: exit 0"));
        let seqs: Vec<u64> = entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order");
        v
    };
    let v = check(&s.get(
        Via::Tcp,
        "/v1/sandboxes/sb-alpha/timeline",
        &[alpha.clone()],
    ));
    // Polling: only what came after a seq.
    let last = v["entries"][2]["seq"].as_u64().unwrap();
    let r = s.get(
        Via::Tcp,
        &format!("/v1/sandboxes/sb-alpha/timeline?after={last}"),
        &[alpha.clone()],
    );
    assert_eq!(r.json()["entries"].as_array().unwrap().len(), 2);
    let r = s.get(Via::Tcp, "/v1/sandboxes/sb-alpha/timeline", &[beta.clone()]);
    assert_eq!(
        r.status, 404,
        "another token's sandbox is not there: {}",
        r.body
    );
    check(&s.get(Via::Unix, "/v1/sandboxes/sb-alpha/timeline", &[]));
    // Ended: no longer live in the server, found in the store.
    s.audit.sandbox_ended("alpha", "sb-alpha", "deleted", true);
    let r = s.get(
        Via::Tcp,
        "/v1/sandboxes/sb-alpha/timeline",
        &[alpha.clone()],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let entries = r.json()["entries"].as_array().unwrap().clone();
    assert_eq!(entries.last().unwrap()["kind"], "run_ended");
    let r = s.get(Via::Tcp, "/v1/sandboxes/sb-alpha/timeline", &[beta]);
    assert_eq!(r.status, 404);
    let r = s.get(Via::Tcp, "/v1/sandboxes/nothing/timeline", &[alpha.clone()]);
    assert_eq!(r.status, 404);
    // Through the console's cookie too.
    let (cookie, _) = login(&s, Via::Tcp, &s.alpha);
    let r = s.get(Via::Tcp, "/v1/sandboxes/sb-alpha/timeline", &[cookie]);
    assert_eq!(r.status, 200);
}

#[test]
fn audit_verify_reports_the_chain_and_a_broken_head() {
    let s = start();
    record_sandbox(&s, "sb-v", "alpha");
    let alpha = format!("Authorization: Bearer {}", s.alpha);
    let r = s.get(Via::Tcp, "/v1/audit/verify", &[alpha.clone()]);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["enabled"], true);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["records"].as_u64().unwrap() >= 5, "{v}");
    assert_eq!(v["head_seq"], v["records"]);
    // The head file claims records the store no longer has (cut off the
    // end): the check says so, once the remembered answer is stale.
    let head = PathBuf::from(format!("{}.head", s.audit_path.display()));
    let forged = json!({"version": 1, "head": {"seq": 999_999, "hash": "ab".repeat(32)}});
    let mut text = forged.to_string().into_bytes();
    text.resize(512, b' ');
    std::fs::write(&head, text).unwrap();
    std::thread::sleep(Duration::from_millis(5200));
    let r = s.get(Via::Unix, "/v1/audit/verify", &[]);
    let v = r.json();
    assert_eq!(v["ok"], false, "{v}");
    assert!(!v["problems"].as_array().unwrap().is_empty(), "{v}");
    let r = s.get(Via::Tcp, "/v1/audit/verify", &[alpha]);
    assert_eq!(r.json()["ok"], false);
    let r = s.get(Via::Tcp, "/v1/audit/verify", &[]);
    assert_eq!(r.status, 401, "verify needs a caller");
}
