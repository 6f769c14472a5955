//! The files API and code contexts of `cordon serve`, through the real
//! binary and raw HTTP over its unix socket: write, read, list, tar,
//! delete; hostile paths (`..`, NUL, a symlink planted by an exec towards
//! a host file or directory, `/proc/1/root`); the per-file limit and the
//! per-sandbox quota; a Python context's state, output, errors, restart
//! and timeout; the audit records of each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command};
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
    socket: PathBuf,
}

impl Serve {
    fn start(flags: &[&str]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let (child, ready) = start_serve(dir.path(), flags);
        assert!(ready["socket"].is_string(), "{ready}");
        let socket = dir.path().join("cordon.sock");
        Serve { child, dir, socket }
    }

    /// One HTTP/1.0 request (the reply is not chunked; the server closes).
    fn request(&self, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> Reply {
        let mut s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(ct) = content_type {
            req.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        // A server that refuses early (413) may close before all is sent.
        let _ = s.write_all(&bytes);
        read_reply(s)
    }

    fn json(&self, method: &str, path: &str, body: &Value) -> Reply {
        self.request(
            method,
            path,
            Some("application/json"),
            body.to_string().as_bytes(),
        )
    }

    fn create(&self) -> String {
        let r = self.json("POST", "/v1/sandboxes", &json!({}));
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["id"].as_str().unwrap().to_owned()
    }

    fn sh(&self, id: &str, script: &str) -> Value {
        let r = self.json(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            &json!({"argv": ["sh", "-c", script], "timeout": "60s"}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    fn put(&self, id: &str, path: &str, data: &[u8]) -> Reply {
        self.request(
            "PUT",
            &format!("/v1/sandboxes/{id}/files{path}"),
            Some("application/octet-stream"),
            data,
        )
    }

    fn get(&self, id: &str, path: &str) -> Reply {
        self.request("GET", &format!("/v1/sandboxes/{id}/files{path}"), None, b"")
    }

    fn delete(&self, id: &str, path: &str) -> Reply {
        self.request(
            "DELETE",
            &format!("/v1/sandboxes/{id}/files{path}"),
            None,
            b"",
        )
    }

    /// A PUT whose body comes chunked, with no length announced.
    fn put_chunked(&self, id: &str, path: &str, data: &[u8]) -> Reply {
        let mut s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let head = format!(
            "PUT /v1/sandboxes/{id}/files{path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let _ = s.write_all(head.as_bytes());
        for chunk in data.chunks(8192) {
            let _ = s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes());
            let _ = s.write_all(chunk);
            let _ = s.write_all(b"\r\n");
        }
        let _ = s.write_all(b"0\r\n\r\n");
        read_reply(s)
    }

    /// Wait (the writer commits in groups) until the audit store holds
    /// every one of `needles`.
    fn audit_has(&self, needles: &[&str]) {
        let mut text = String::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let out = Command::new(cordon_bin())
                .args(["audit", "tail", "-n", "500", "--json", "--store"])
                .arg(self.dir.path().join("audit.db"))
                .output()
                .unwrap();
            text = String::from_utf8_lossy(&out.stdout).into_owned();
            if needles.iter().all(|n| text.contains(n)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the audit store lacks one of {needles:?}: {text}");
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

struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
}

fn read_reply(mut s: UnixStream) -> Reply {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(out.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Reply {
        status,
        head,
        body: out[split..].to_vec(),
    }
}

/// The names and contents of a tar stream.
fn untar(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = tar::Archive::new(bytes);
    archive
        .entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (name, data)
        })
        .collect()
}

#[test]
fn files_write_read_list_tar_delete_as_the_sandbox_sees_them() {
    if ready() {
        return;
    }
    let s = Serve::start(&[]);
    let id = s.create();
    let blob: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    assert_eq!(s.put(&id, "/tmp/work/bin.dat", &blob).status, 204);
    assert_eq!(
        s.put(&id, "/tmp/work/sub/t.txt", "text ✓\n".as_bytes())
            .status,
        204
    );
    // The sandbox sees what the API wrote, and may change it.
    let out = s.sh(
        &id,
        "wc -c < /tmp/work/bin.dat && cat /tmp/work/sub/t.txt && echo more >> /tmp/work/sub/t.txt",
    );
    assert_eq!(out["exit_code"], 0, "{out}");
    assert_eq!(out["stdout"], "300000\ntext ✓\n");

    let r = s.get(&id, "/tmp/work/bin.dat");
    assert_eq!(r.status, 200);
    assert!(
        r.head
            .to_ascii_lowercase()
            .contains("application/octet-stream"),
        "{}",
        r.head
    );
    assert_eq!(r.body, blob);
    assert_eq!(s.get(&id, "/tmp/work/sub/t.txt").text(), "text ✓\nmore\n");

    let listing = s.get(&id, "/tmp/work").json();
    let entries: Vec<(String, String)> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("bin.dat".into(), "file".into()),
            ("sub".into(), "dir".into())
        ]
    );
    assert_eq!(listing["entries"][0]["size"], 300_000);

    let r = s.get(&id, "/tmp/work?format=tar");
    assert_eq!(r.status, 200, "{}", r.text());
    let tar = untar(&r.body);
    let names: Vec<&str> = tar.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["bin.dat", "sub/", "sub/t.txt"]);
    assert_eq!(tar[0].1, blob);

    assert_eq!(
        s.delete(&id, "/tmp/work/sub").status,
        409,
        "not empty without recursive"
    );
    assert_eq!(s.delete(&id, "/tmp/work/sub?recursive=true").status, 204);
    assert_eq!(s.delete(&id, "/tmp/work/bin.dat").status, 204);
    assert_eq!(s.get(&id, "/tmp/work/bin.dat").status, 404);
    let out = s.sh(&id, "ls -A /tmp/work");
    assert_eq!(
        out["stdout"], "",
        "deleted as the sandbox sees it, no temporary file left"
    );
    s.audit_has(&[
        "\"file_write\"",
        "\"file_read\"",
        "\"file_tar\"",
        "\"file_delete\"",
        "/tmp/work/bin.dat",
    ]);
}

/// Layer: `SandboxPath::parse` (crates/session/src/files/path.rs): `..`
/// and NUL are refused before anything is opened; an absolute form names
/// the sandbox's own file.
#[test]
fn dot_dot_nul_and_absolute_forms() {
    if ready() {
        return;
    }
    let s = Serve::start(&[]);
    let id = s.create();
    for path in [
        "/tmp/../etc/passwd",
        "/tmp/%2E%2E/etc/hostname",
        "/%2E%2E/%2E%2E/etc/passwd",
        "/tmp/a%00b",
    ] {
        let r = s.get(&id, path);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(!r.json()["error"]["message"].as_str().unwrap().is_empty());
        assert_eq!(s.put(&id, path, b"x").status, 400, "{path}");
    }
    // `//etc/passwd`: the sandbox's own /etc/passwd (made for the
    // sandbox), never the host's.
    let r = s.get(&id, "//etc/passwd");
    assert_eq!(r.status, 200, "{}", r.text());
    let host = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    assert!(
        r.text().contains(":cordon sandbox:") && r.text() != host,
        "{}",
        r.text()
    );
    let inside = s.sh(&id, "cat /etc/passwd");
    assert_eq!(
        inside["stdout"].as_str(),
        Some(r.text().as_str()),
        "what the sandbox sees"
    );
}

/// Layer: openat2 `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS` from the
/// sandbox's root (crates/session/src/files/resolve.rs). An exec plants
/// symlinks to a host file and a host directory (in the host's /tmp,
/// which the sandbox cannot see: its /tmp is its own), to /etc/shadow, and
/// through /proc/1/root. Reading and writing through them never touches
/// the host. The host file is world-writable, so nothing but the
/// resolution stands in the way: a lookup that follows the links from the
/// host's root (`tmp/x` opened plainly from the root's descriptor) reads and
/// overwrites it (the same control, in process, is in cordon-session's
/// `files::tests`).
#[test]
fn a_symlink_planted_by_an_exec_never_leads_the_files_api_to_the_host() {
    if ready() {
        return;
    }
    let host = tempfile::Builder::new()
        .prefix("cordon-host-")
        .tempdir_in("/tmp")
        .unwrap();
    let secret = host.path().join("secret");
    std::fs::write(&secret, "host secret\n").unwrap();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o666)).unwrap();
    let s = Serve::start(&[]);
    let id = s.create();
    let script = format!(
        "set -e; mkdir /tmp/p; cd /tmp/p; ln -s {f} x; ln -s {d} d; ln -s ../../../../..{f} up; \
         ln -s /etc/shadow shadow; ln -s /proc/1/root/tmp m; test ! -e {f}",
        f = secret.display(),
        d = host.path().display()
    );
    let out = s.sh(&id, &script);
    assert_eq!(
        out["exit_code"], 0,
        "the links are planted and the host file is not visible inside: {out}"
    );

    for path in ["/tmp/p/x", "/tmp/p/up", "/tmp/p/d/secret", "/tmp/p/shadow"] {
        let r = s.get(&id, path);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        assert!(
            !r.text().contains("host secret") && !r.text().contains("root:"),
            "{path}"
        );
    }
    for path in ["/tmp/p/m/p/x", "/proc/1/root/tmp/p/x"] {
        let r = s.get(&id, path);
        assert_eq!(r.status, 403, "{path}: {}", r.text());
    }
    let tar = s.get(&id, "/tmp/p?format=tar");
    assert_eq!(tar.status, 200);
    for (name, data) in untar(&tar.body) {
        assert!(
            data.is_empty(),
            "{name}: links are archived as links, never followed"
        );
    }

    // The last name is replaced, never followed; a link on the way leads
    // nowhere inside the sandbox.
    assert_eq!(s.put(&id, "/tmp/p/x", b"written").status, 204);
    assert_eq!(s.put(&id, "/tmp/p/d/new", b"planted").status, 404);
    assert_eq!(s.put(&id, "/tmp/p/up", b"written").status, 204);
    assert_eq!(s.delete(&id, "/tmp/p/d?recursive=true").status, 204);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host secret\n");
    assert!(
        !host.path().join("new").exists(),
        "a file was written into the host directory"
    );
    let out = s.sh(&id, "test -L /tmp/p/x || cat /tmp/p/x");
    assert_eq!(
        out["stdout"], "written",
        "the sandbox sees a file in place of the link: {out}"
    );
    s.audit_has(&["/proc/1/root/tmp/p/x", "\"forbidden\""]);
}

/// Layer: the per-file limit and the per-sandbox quota
/// (crates/session/src/files/write.rs, `Quota`; crates/server/src/files.rs).
#[test]
fn a_huge_body_is_413_and_the_quota_is_507() {
    if ready() {
        return;
    }
    let s = Serve::start(&["--max-file-size", "64K", "--files-quota", "160K"]);
    let id = s.create();
    let big = vec![7u8; 100 << 10];
    let r = s.put(&id, "/tmp/big", &big);
    assert_eq!(
        (r.status, r.error_code()),
        (413, "too_large".into()),
        "{}",
        r.text()
    );
    assert!(r.text().contains("65536 bytes"), "{}", r.text());
    // Without a length announced the body is cut off as it streams.
    let r = s.put_chunked(&id, "/tmp/big", &big);
    assert_eq!(r.status, 413, "{}", r.text());
    let out = s.sh(&id, "ls -A /tmp");
    assert!(
        !out["stdout"].as_str().unwrap().contains("big")
            && !out["stdout"].as_str().unwrap().contains(".cordon-write"),
        "{out}"
    );

    let part = vec![1u8; 60 << 10];
    assert_eq!(s.put(&id, "/tmp/a", &part).status, 204);
    assert_eq!(s.put(&id, "/tmp/b", &part).status, 204);
    let r = s.put(&id, "/tmp/c", &part);
    assert_eq!(
        (r.status, r.error_code()),
        (507, "quota".into()),
        "{}",
        r.text()
    );
    assert!(r.text().contains("quota 163840"), "{}", r.text());
    let r = s.put_chunked(&id, "/tmp/c", &part);
    assert_eq!(r.status, 507, "{}", r.text());
    assert_eq!(
        s.get(&id, "/tmp/c").status,
        404,
        "nothing of a refused write is left"
    );
    // Another sandbox has a quota of its own.
    let other = s.create();
    assert_eq!(s.put(&other, "/tmp/a", &part).status, 204);
}

#[test]
fn a_python_context_keeps_state_reports_errors_and_restarts() {
    if ready() {
        return;
    }
    let s = Serve::start(&[]);
    let id = s.create();
    let r = s.json(
        "POST",
        &format!("/v1/sandboxes/{id}/contexts"),
        &json!({"language": "python"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let ctx = r.json()["id"].as_str().unwrap().to_owned();
    let run = |code: &str, timeout: Option<&str>| -> Value {
        let mut body = json!({ "code": code });
        if let Some(t) = timeout {
            body["timeout"] = json!(t);
        }
        let r = s.json(
            "POST",
            &format!("/v1/sandboxes/{id}/contexts/{ctx}/run"),
            &body,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    assert_eq!(run("x = 41", None)["value"], Value::Null);
    let v = run("x + 1", None);
    assert_eq!(
        (v["value"].as_str(), v["restarted"].as_bool()),
        (Some("42"), Some(false)),
        "{v}"
    );
    let v = run(
        "import os\nprint('to stdout')\nos.write(2, b'to fd 2\\n')\n'done'",
        None,
    );
    assert_eq!(
        (v["stdout"].as_str(), v["stderr"].as_str()),
        (Some("to stdout\n"), Some("to fd 2\n")),
        "{v}"
    );
    assert_eq!(v["value"], "'done'");
    let v = run("def f():\n    raise ValueError('bad value')\nf()", None);
    assert_eq!(v["error"]["name"], "ValueError", "{v}");
    assert_eq!(v["error"]["message"], "bad value");
    assert!(
        v["error"]["traceback"]
            .as_str()
            .unwrap()
            .contains("raise ValueError('bad value')"),
        "{v}"
    );

    let v = run("import os\nos._exit(1)", None);
    assert_eq!(v["error"]["name"], "InterpreterDied", "{v}");
    let v = run("'x' in globals()", None);
    assert_eq!(
        (v["restarted"].as_bool(), v["value"].as_str()),
        (Some(true), Some("False")),
        "{v}"
    );

    let started = Instant::now();
    let v = run("import time\ntime.sleep(120)", Some("1s"));
    assert_eq!(v["error"]["name"], "TimeoutError", "{v}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let v = run("6 * 7", None);
    assert_eq!(
        (v["restarted"].as_bool(), v["value"].as_str()),
        (Some(true), Some("42")),
        "{v}"
    );

    let r = s.json(
        "POST",
        &format!("/v1/sandboxes/{id}/contexts"),
        &json!({"language": "cobol"}),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("supported: python"), "{}", r.text());
    let r = s.request(
        "DELETE",
        &format!("/v1/sandboxes/{id}/contexts/{ctx}"),
        None,
        b"",
    );
    assert_eq!(r.status, 204);
    let r = s.json(
        "POST",
        &format!("/v1/sandboxes/{id}/contexts/{ctx}/run"),
        &json!({"code": "1"}),
    );
    assert_eq!(r.status, 404);
    s.audit_has(&[
        "\"context_create\"",
        "\"context_run\"",
        "InterpreterDied",
        "\"context_delete\"",
    ]);
}
