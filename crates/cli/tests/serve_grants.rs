//! Live escalation through `cordon serve`: a running sandbox is widened
//! (an egress host, a host path bound in, higher limits) with `POST
//! /v1/sandboxes/{id}/grants` and narrowed with `DELETE`, and each change
//! is checked from INSIDE the sandbox by an exec: what the grant allows
//! works while it lasts and fails again once it ends (by DELETE or by its
//! expiry). Tokens cannot widen, and a widening never passes the sandbox
//! owner's ceiling.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

struct Serve {
    child: Child,
    dir: tempfile::TempDir,
    tcp: Option<String>,
}

impl Serve {
    fn start(flags: &[&str]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let (child, ready) = start_serve(dir.path(), flags);
        Serve {
            child,
            tcp: ready["listen"].as_str().map(str::to_owned),
            dir,
        }
    }

    /// A request as the owner (the unix socket).
    fn owner(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let s = UnixStream::connect(self.dir.path().join("cordon.sock")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, text) = http_request(s, method, path, None, &body);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A request with a token over TCP.
    fn with_token(&self, token: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
        let s = TcpStream::connect(self.tcp.as_ref().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let (status, text) = http_request(s, method, path, Some(token), &body.to_string());
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn create(&self, body: Value) -> String {
        let (status, v) = self.owner("POST", "/v1/sandboxes", Some(body));
        assert_eq!(status, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    /// Run `script` with sh inside the sandbox: (exit code, stdout, stderr).
    fn sh(&self, sb: &str, script: &str) -> (i64, String, String) {
        let (status, v) = self.owner(
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["sh", "-c", script], "timeout": "60s"})),
        );
        assert_eq!(status, 200, "{v}");
        (
            v["exit_code"].as_i64().unwrap_or(-1),
            v["stdout"].as_str().unwrap_or("").to_owned(),
            v["stderr"].as_str().unwrap_or("").to_owned(),
        )
    }

    fn grant(&self, sb: &str, body: Value) -> String {
        let (status, v) = self.owner("POST", &format!("/v1/sandboxes/{sb}/grants"), Some(body));
        assert_eq!(status, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    fn narrow(&self, sb: &str, gid: &str) {
        let (status, v) = self.owner("DELETE", &format!("/v1/sandboxes/{sb}/grants/{gid}"), None);
        assert_eq!(status, 204, "{v}");
    }

    fn grants(&self, sb: &str) -> Vec<Value> {
        let (status, v) = self.owner("GET", &format!("/v1/sandboxes/{sb}/grants"), None);
        assert_eq!(status, 200, "{v}");
        v["grants"].as_array().unwrap().clone()
    }

    fn token(&self, args: &[&str]) -> String {
        create_token(&self.dir.path().join("state"), args)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        );
        let _ = self.child.wait();
    }
}

/// A test origin on the host's loopback: `/hello` answers at once; `/hold`
/// sends a head promising a large body, a first part, and then holds the
/// connection open for a minute.
fn origin() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(conn.try_clone().unwrap()).read_line(&mut line);
                if line.contains("/hold") {
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nfirst-part\n",
                    );
                    std::thread::sleep(Duration::from_secs(60));
                } else {
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello-origin\n",
                    );
                }
            });
        }
    });
    port
}

/// A sandbox whose network goes through its proxy, allowed to reach
/// private addresses once a host is granted (the origin is on loopback)
/// but granted nothing yet.
fn proxied_sandbox(s: &Serve) -> String {
    s.create(json!({"profile": {"extends": "untrusted",
        "network": {"mode": "proxy", "allow_private": true}}}))
}

/// Layer: the egress proxy's live grants. The origin is unreachable from
/// inside until its host:port is granted, reachable while granted, and
/// refused again once the grant is narrowed; a connection the grant
/// opened, still open when it is narrowed, is cut by the proxy.
#[test]
fn a_granted_host_is_reachable_inside_and_narrowing_refuses_it_and_cuts_open_connections() {
    if ready() || skip_unless(have_program("curl"), "curl is not installed") {
        return;
    }
    let port = origin();
    let s = Serve::start(&[]);
    let sb = proxied_sandbox(&s);
    let url = format!("http://127.0.0.1:{port}");
    let (_, out, _) = s.sh(&sb, &format!("curl -sS -m 10 {url}/hello"));
    assert!(
        out.contains("denied") && !out.contains("hello-origin"),
        "not granted yet: {out}"
    );
    let gid = s.grant(
        &sb,
        json!({"kind": "egress", "host": "127.0.0.1", "port": port}),
    );
    let (code, out, err) = s.sh(&sb, &format!("curl -sS -m 10 {url}/hello"));
    assert_eq!((code, out.as_str()), (0, "hello-origin\n"), "{err}");
    let (code, out, err) = s.sh(
        &sb,
        &format!("python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}/hello').read().decode().strip())\""),
    );
    assert_eq!((code, out.as_str()), (0, "hello-origin\n"), "{err}");
    // A long-lived connection through the grant, in the background.
    let (status, v) = s.owner(
        "POST",
        &format!("/v1/sandboxes/{sb}/exec"),
        Some(
            json!({"argv": ["sh", "-c", format!("curl -sS -N {url}/hold; echo \"curl-exit=$?\"")],
                    "background": true}),
        ),
    );
    assert_eq!(status, 202, "{v}");
    let pid = v["pid"].as_u64().unwrap();
    let output = |s: &Serve| {
        let (_, v) = s.owner(
            "GET",
            &format!("/v1/sandboxes/{sb}/processes/{pid}/output"),
            None,
        );
        let text: String = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["data"].as_str())
            .collect();
        (text, v["done"].as_bool().unwrap_or(false))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !output(&s).0.contains("first-part") {
        assert!(
            Instant::now() < deadline,
            "the held connection never opened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s.narrow(&sb, &gid);
    // The origin holds it for 60 s: it ends well before only if cut.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (text, done) = output(&s);
        if done {
            assert!(text.contains("curl-exit=18"), "cut mid-body: {text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the connection the grant opened outlived it: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, out, _) = s.sh(&sb, &format!("curl -sS -m 10 {url}/hello"));
    assert!(
        out.contains("denied") && !out.contains("hello-origin"),
        "refused again: {out}"
    );
    assert!(s.grants(&sb).is_empty());
}

/// Layer: the live bind (mount namespace) and the init's Landlock rules
/// for later execs. A host directory is absent inside, bound read-only
/// (readable, a write fails), narrowed (gone), bound writable (a write
/// reaches the host; Landlock lets later execs write there), narrowed
/// again (gone). A mount point the sandbox could move is refused.
#[test]
fn a_granted_path_is_bound_read_only_or_writable_and_gone_after_narrowing() {
    if ready() {
        return;
    }
    let s = Serve::start(&[]);
    let sb = s.create(json!({}));
    let host = tempfile::tempdir().unwrap();
    let dir: PathBuf = host.path().canonicalize().unwrap();
    std::fs::write(dir.join("data.txt"), "from-the-host\n").unwrap();
    let (code, _, _) = s.sh(&sb, "cat /mnt/grant/data.txt");
    assert_ne!(code, 0, "absent before the grant");

    let gid = s.grant(
        &sb,
        json!({"kind": "bind", "host_path": dir, "path": "/mnt/grant"}),
    );
    let (code, out, err) = s.sh(&sb, "cat /mnt/grant/data.txt");
    assert_eq!((code, out.as_str()), (0, "from-the-host\n"), "{err}");
    let (code, _, err) = s.sh(&sb, "echo x > /mnt/grant/new.txt");
    assert_ne!(code, 0, "read-only");
    assert!(
        err.contains("Read-only file system") || err.contains("Permission denied"),
        "{err}"
    );
    assert!(!dir.join("new.txt").exists());
    s.narrow(&sb, &gid);
    let (code, out, _) = s.sh(&sb, "cat /mnt/grant/data.txt");
    assert_ne!(code, 0, "gone after narrowing: {out}");
    let (_, out, _) = s.sh(&sb, "ls -A /mnt/grant");
    assert!(!out.contains("data.txt"), "{out}");

    let gid = s.grant(
        &sb,
        json!({"kind": "bind", "host_path": dir, "path": "/mnt/grant", "writable": true}),
    );
    let (code, _, err) = s.sh(&sb, "echo from-inside > /mnt/grant/new.txt");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("new.txt")).unwrap(),
        "from-inside\n"
    );
    s.narrow(&sb, &gid);
    let (code, _, _) = s.sh(&sb, "echo again > /mnt/grant/again.txt");
    assert_ne!(code, 0, "no write after narrowing");
    assert!(!dir.join("again.txt").exists());
    let (code, out, _) = s.sh(&sb, "cat /mnt/grant/new.txt");
    assert_ne!(code, 0, "{out}");

    // Under a tree the sandbox writes, it could rename the mount point away
    // before the grant ends.
    let (status, v) = s.owner(
        "POST",
        &format!("/v1/sandboxes/{sb}/grants"),
        Some(json!({"kind": "bind", "host_path": dir, "path": "/tmp/grant"})),
    );
    assert_eq!(status, 422, "{v}");
    assert!(v.to_string().contains("writable inside the sandbox"), "{v}");
    assert!(s.grants(&sb).is_empty());
}

/// Layer: the session's cgroup (memory) and the init's rlimits for later
/// execs (processes). A 400 MiB allocation fails under the sandbox's 256M,
/// succeeds once memory is raised to 1G, and fails again once narrowed;
/// the process limit an exec sees follows the same way.
#[test]
fn raised_limits_hold_inside_and_narrowing_restores_them() {
    if ready() {
        return;
    }
    let s = Serve::start(&[]);
    let sb = s.create(json!({"memory": "256M", "pids": 64}));
    let alloc = "python3 -c \"x = b'a' * (400 << 20); print('allocated', len(x) >> 20)\"";
    // The soft "Max processes" an exec gets (RLIMIT_NPROC).
    let nproc = |s: &Serve| {
        let (_, out, _) = s.sh(&sb, "grep 'Max processes' /proc/self/limits");
        out.split_whitespace()
            .nth(2)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let (code, out, _) = s.sh(&sb, alloc);
    assert_ne!(code, 0, "400 MiB is over 256M: {out}");
    let before = nproc(&s);
    assert!(before <= 65, "{before}");

    let gid = s.grant(&sb, json!({"kind": "limits", "memory": "1G", "pids": 200}));
    let shown =
        |s: &Serve| s.owner("GET", &format!("/v1/sandboxes/{sb}"), None).1["limits"].clone();
    assert_eq!(shown(&s)["memory_bytes"], 1u64 << 30);
    let (code, out, err) = s.sh(&sb, alloc);
    assert_eq!((code, out.as_str()), (0, "allocated 400\n"), "{err}");
    let raised = nproc(&s);
    assert!(raised >= 200, "{raised}");

    s.narrow(&sb, &gid);
    assert_eq!(shown(&s)["memory_bytes"], 256u64 << 20);
    let (code, out, _) = s.sh(&sb, alloc);
    assert_ne!(code, 0, "restored to 256M: {out}");
    assert_eq!(nproc(&s), before);

    // A widening only raises.
    let (status, v) = s.owner(
        "POST",
        &format!("/v1/sandboxes/{sb}/grants"),
        Some(json!({"kind": "limits", "memory": "64M"})),
    );
    assert_eq!(status, 422, "{v}");
}

/// A grant with `expires_in` is narrowed by itself: the path is gone from
/// inside and the grant from the list, with no DELETE.
#[test]
fn a_grant_expires_by_itself() {
    if ready() {
        return;
    }
    let s = Serve::start(&[]);
    let sb = s.create(json!({}));
    let host = tempfile::tempdir().unwrap();
    let dir = host.path().canonicalize().unwrap();
    std::fs::write(dir.join("data.txt"), "short-lived\n").unwrap();
    s.grant(
        &sb,
        json!({"kind": "bind", "host_path": dir, "path": "/mnt/brief", "expires_in": "2s"}),
    );
    let (code, out, err) = s.sh(&sb, "cat /mnt/brief/data.txt");
    assert_eq!((code, out.as_str()), (0, "short-lived\n"), "{err}");
    assert_eq!(s.grants(&sb).len(), 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.grants(&sb).is_empty() {
        assert!(Instant::now() < deadline, "the grant did not expire");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, out, _) = s.sh(&sb, "cat /mnt/brief/data.txt");
    assert_ne!(code, 0, "gone after expiry: {out}");
    // The audit store says when it began and that it ended by expiry.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = std::process::Command::new(cordon_bin())
            .args(["audit", "tail", "-n", "200", "--json", "--store"])
            .arg(s.dir.path().join("audit.db"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("grant_started") && text.contains("\"why\":\"expired\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no grant_ended (expired) record: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Layer: the Gate in front of the grants route (crates/approvals), the
/// approval grant's end narrowing the widening (server `escalation.rs`),
/// and the owner's ceiling. A token's widening asks an approver:
/// unanswered it is refused; approved for a duration it is in effect and
/// narrowed again when the approval's grant ends. The owner may widen a
/// token's sandbox only within that token's ceiling.
#[test]
fn a_token_asks_to_widen_and_no_widening_passes_the_ceiling() {
    if ready() {
        return;
    }
    let s = Serve::start(&["--listen", "127.0.0.1:0", "--approval-timeout", "2s"]);
    let t = s.token(&["--name", "agent", "--preset", "low", "--memory", "512M"]);
    let (status, v) = s.with_token(&t, "POST", "/v1/sandboxes", json!({}));
    assert_eq!(status, 201, "{v}");
    let sb = v["id"].as_str().unwrap().to_owned();
    let grants_path = format!("/v1/sandboxes/{sb}/grants");
    let raise = json!({"kind": "limits", "memory": "384M"});
    let (status, v) = s.with_token(&t, "POST", &grants_path, raise.clone());
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["code"], "approval_expired", "{v}");
    assert!(s.grants(&sb).is_empty());
    // More processes, asked again and approved for 3 s: in effect, then
    // narrowed.
    let raise = json!({"kind": "limits", "pids": 4096});
    let asking = {
        let (addr, t, path, raise) = (
            s.tcp.clone().unwrap(),
            t.clone(),
            grants_path.clone(),
            raise.clone(),
        );
        std::thread::spawn(move || {
            let c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            http_request(c, "POST", &path, Some(&t), &raise.to_string())
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let id = loop {
        let (_, v) = s.owner("GET", "/v1/approvals?state=pending", None);
        if let Some(a) = v["approvals"].as_array().and_then(|a| a.first()) {
            assert_eq!(a["subject"]["kind"], "limits", "{a}");
            break a["id"].as_str().unwrap().to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no approval asked");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (status, v) = s.owner(
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(json!({"decision": "approve", "scope": "duration", "duration": "3s"})),
    );
    assert_eq!(status, 200, "{v}");
    let (status, text) = asking.join().unwrap();
    assert_eq!(status, 201, "{text}");
    assert_eq!(
        s.grants(&sb).len(),
        1,
        "in effect while the approval's grant lasts"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !s.grants(&sb).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "narrowed when the grant ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _) = s.with_token(&t, "GET", &format!("/v1/sandboxes/{sb}/grants"), json!({}));
    assert_eq!(status, 200);
    // The owner, widening the token's sandbox: within the ceiling, yes.
    let (status, v) = s.owner(
        "POST",
        &format!("/v1/sandboxes/{sb}/grants"),
        Some(json!({"kind": "limits", "memory": "1G"})),
    );
    assert_eq!(status, 403, "beyond the token's 512M ceiling: {v}");
    let (status, v) = s.owner(
        "POST",
        &format!("/v1/sandboxes/{sb}/grants"),
        Some(json!({"kind": "bind", "host_path": "/usr", "path": "/mnt/usr"})),
    );
    assert_eq!(status, 403, "a token's sandbox gets no host path: {v}");
    let (status, v) = s.owner(
        "POST",
        &format!("/v1/sandboxes/{sb}/grants"),
        Some(json!({"kind": "egress", "host": "example.com", "port": 443})),
    );
    assert_eq!(status, 403, "a host outside the token's allow_net: {v}");
    assert!(s.grants(&sb).is_empty());
}

fn have_program(name: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success())
}
