//! A policy's "allow with limits" (`@limit_pids`, `@limit_memory`,
//! `@limit_timeout` on the permit that decides) is applied on every
//! surface, through the real binary: `cordon run --policy` tightens the
//! run's limits before its sandbox is built, and `cordon serve --policy`
//! puts them on the one exec it decided (its timeout, and rlimits of its
//! workload, whether the exec was started on order or started ahead); a
//! code context's cell takes the rule's timeout, and a cell whose rule
//! asks for memory or process limits the running interpreter lacks is
//! refused.
//!
//! Each payload is stopped under the rule's limit: a fork loop, an
//! allocation of 256 MiB, a long sleep; the same payload not matched by the
//! rule (the control) is not. The reply, the report and the audit record
//! name the limits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Each rule matches a command with the word "limited" among its
/// arguments; the same command with "free" is decided by the default
/// (allowed, without limits).
const POLICY: &str = include_str!("fixtures/policy_limits/policy.cedar");

/// Forks children that wait, until 32 or a refusal; prints how many.
const FORKS: &str = include_str!("fixtures/policy_limits/forks.py");

/// 256 MiB in 16 MiB chunks, every page written.
const MEMORY: &str = include_str!("fixtures/policy_limits/memory.py");

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

/// How many children the fork loop got, or `None` when it never was
/// refused.
fn forked(stdout: &str) -> Option<u32> {
    let line = stdout.trim_end();
    if line.ends_with("and never refused") {
        return None;
    }
    let n = line
        .strip_prefix("forked ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok());
    Some(n.unwrap_or_else(|| panic!("unexpected output: {line:?}")))
}

// ---------------------------------------------------------------- cordon run

struct Run {
    w: Workdir,
    policy: String,
}

impl Run {
    fn new() -> Run {
        let w = Workdir::new();
        let policy = w.write("policy.cedar", POLICY).display().to_string();
        Run { w, policy }
    }

    /// `cordon run --policy` of `python3 -c CODE ARGS` (or `cmd`).
    fn run(&self, cmd: &[&str]) -> (Outcome, Duration) {
        let audit = self.w.path().join(".audit.db");
        let started = Instant::now();
        let o = self.w.run(
            &[
                "--policy",
                &self.policy,
                "--audit",
                audit.to_str().unwrap(),
                "--timeout",
                "60s",
            ],
            cmd,
        );
        (o, started.elapsed())
    }

    /// The run records in the audit store: (kind, body) of each.
    fn records(&self) -> Vec<(String, Value)> {
        let out = Command::new(cordon_bin())
            .args(["audit", "--store"])
            .arg(self.w.path().join(".audit.db"))
            .arg("export")
            .output()
            .expect("cordon audit export");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a JSON record"))
            .map(|r| {
                (
                    r["kind"].as_str().unwrap_or("").to_owned(),
                    r["body"].clone(),
                )
            })
            .collect()
    }
}

#[test]
fn run_policy_pids_limit_stops_a_fork_loop() {
    if ready() {
        return;
    }
    let r = Run::new();
    let (o, _) = r.run(&["python3", "-c", FORKS, "forks", "limited"]);
    let n = forked(&o.stdout);
    assert!(
        n.is_some_and(|n| n < 8),
        "the fork loop got {n:?} children under @limit_pids(\"8\"): {}\n{}",
        o.stdout,
        o.stderr
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(o.report["limits"]["pids"], 8, "{}", o.report);
    assert!(
        o.stderr.contains("policy rule forks-limited")
            && o.stderr.contains("allows this with limits")
            && o.stderr.contains("processes 8"),
        "{}",
        o.stderr
    );
    // The decision and the run's start name the limits.
    let records = r.records();
    assert!(
        records
            .iter()
            .any(|(k, b)| k == "api_action" && b["detail"]["limits"]["pids"] == 8),
        "{records:?}"
    );
    assert!(
        records.iter().any(|(k, b)| k == "run_started"
            && b["enforcement"]["policy_limits"]["rule"]
                .as_str()
                .is_some_and(|r| r.starts_with("forks-limited ("))
            && b["enforcement"]["policy_limits"]["in_force"]["pids"] == 8),
        "{records:?}"
    );

    // The control: the same loop, not matched by the rule, forks all 32.
    let (o, _) = r.run(&["python3", "-c", FORKS, "forks", "free"]);
    assert_eq!(forked(&o.stdout), None, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !o.stderr.contains("allows this with limits"),
        "{}",
        o.stderr
    );
}

#[test]
fn run_policy_memory_limit_stops_an_allocation() {
    if ready() {
        return;
    }
    let r = Run::new();
    let (o, _) = r.run(&["python3", "-c", MEMORY, "memory", "limited"]);
    assert!(
        !o.stdout.contains("allocated 256MiB") && o.code != 0,
        "256 MiB allocated under @limit_memory(\"64MiB\"): {}\n{}",
        o.stdout,
        o.stderr
    );
    // The cgroup kills it (137), or RLIMIT_AS refuses the allocation.
    assert!(o.code == 137 || o.code == 3, "{}\n{}", o.code, o.stderr);
    assert_eq!(o.report["limits"]["memory"], 64u64 << 20, "{}", o.report);
    assert!(o.stderr.contains("memory 64MiB"), "{}", o.stderr);

    let (o, _) = r.run(&["python3", "-c", MEMORY, "memory", "free"]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("allocated 256MiB"), "{}", o.stdout);
}

#[test]
fn run_policy_timeout_limit_stops_a_sleep() {
    if ready() {
        return;
    }
    let r = Run::new();
    let (o, took) = r.run(&["sh", "-c", "sleep 10", "time", "limited"]);
    assert_eq!(o.code, 124, "{}", o.stderr);
    assert_eq!(o.reason(), "timeout");
    assert!(took < Duration::from_secs(8), "took {took:?}");
    assert_eq!(o.report["limits"]["wall_seconds"], 1.0, "{}", o.report);
    assert!(o.stderr.contains("timeout 1s"), "{}", o.stderr);

    // The run's own --timeout 60s is what holds the control.
    let (o, took) = r.run(&["sh", "-c", "sleep 3", "time", "free"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(took >= Duration::from_secs(3), "took {took:?}");
    assert_eq!(o.report["limits"]["wall_seconds"], 60.0, "{}", o.report);
}

#[test]
fn run_policy_limit_never_loosens_the_runs_own() {
    if ready() {
        return;
    }
    let r = Run::new();
    // --pids 4 given: the rule's 8 does not raise it.
    let audit = r.w.path().join(".audit.db");
    let o = r.w.run(
        &[
            "--policy",
            &r.policy,
            "--audit",
            audit.to_str().unwrap(),
            "--pids",
            "4",
        ],
        &["python3", "-c", FORKS, "forks", "limited"],
    );
    assert_eq!(o.report["limits"]["pids"], 4, "{}", o.report);
    let n = forked(&o.stdout);
    assert!(n.is_some_and(|n| n < 4), "{n:?}: {}", o.stderr);
}

// ------------------------------------------------------------- cordon serve

struct Server {
    child: Option<Child>,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        Server::start_with(POLICY)
    }

    fn start_with(text: &str) -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let policy = dir.join("policy.cedar");
        std::fs::write(&policy, text).unwrap();
        let (child, _) = start_serve(&dir, &["--policy", policy.to_str().unwrap()]);
        Server {
            child: Some(child),
            dir,
            _tmp: tmp,
        }
    }

    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Reply {
        let s = UnixStream::connect(self.dir.join("cordon.sock")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        exchange(s, method, path, None, body, None)
    }

    fn create(&self) -> String {
        let r = self.request("POST", "/v1/sandboxes", Some(&json!({})));
        assert_eq!(r.status, 201, "{}", r.body);
        r.json()["id"].as_str().unwrap().to_owned()
    }

    /// A python context in `sb`: its id.
    fn context(&self, sb: &str) -> String {
        let r = self.request(
            "POST",
            &format!("/v1/sandboxes/{sb}/contexts"),
            Some(&json!({"language": "python"})),
        );
        assert_eq!(r.status, 201, "{}", r.body);
        r.json()["id"].as_str().unwrap().to_owned()
    }

    /// Run `code` in the context `ctx` of `sb` (timeout 60s).
    fn cell(&self, sb: &str, ctx: &str, code: &str) -> Reply {
        self.request(
            "POST",
            &format!("/v1/sandboxes/{sb}/contexts/{ctx}/run"),
            Some(&json!({"code": code, "timeout": "60s"})),
        )
    }

    /// A foreground exec: its reply, and how long it took.
    fn exec(&self, sb: &str, argv: &[&str], timeout: Option<&str>) -> (Value, Duration) {
        let mut body = json!({ "argv": argv });
        if let Some(t) = timeout {
            body["timeout"] = json!(t);
        }
        let started = Instant::now();
        let r = self.request("POST", &format!("/v1/sandboxes/{sb}/exec"), Some(&body));
        assert_eq!(r.status, 200, "{}", r.body);
        (r.json(), started.elapsed())
    }

    /// The server's `exec` records (their details), oldest first.
    fn exec_records(&self) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = Command::new(cordon_bin())
                .args(["audit", "--store"])
                .arg(self.dir.join("audit.db"))
                .arg("export")
                .output()
                .expect("cordon audit export");
            let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|r| r["kind"] == "api_action" && r["body"]["action"] == "exec")
                .map(|r| r["body"]["detail"].clone())
                .collect();
            if !records.is_empty() || Instant::now() > deadline {
                return records;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            stop_serve(c);
        }
    }
}

fn stdout(reply: &Value) -> String {
    reply["stdout"].as_str().unwrap_or("").to_owned()
}

#[test]
fn serve_exec_pids_limit_stops_a_fork_loop_started_on_order_or_ahead() {
    if ready() {
        return;
    }
    let srv = Server::start();
    let sb = srv.create();
    let free = ["python3", "-c", FORKS, "forks", "free"];
    let limited = ["python3", "-c", FORKS, "forks", "limited"];
    // The first exec is started on order; the session then keeps its
    // next one started ahead after each order, from the second on.
    let (r, _) = srv.exec(&sb, &free, None);
    assert_eq!(forked(&stdout(&r)), None, "{r}");
    assert!(r.get("limits").is_none(), "{r}");
    for round in ["on order", "started ahead"] {
        let (r, _) = srv.exec(&sb, &limited, None);
        let n = forked(&stdout(&r));
        assert!(
            n.is_some_and(|n| n < 8),
            "{round}: the fork loop got {n:?} children under @limit_pids(\"8\"): {r}"
        );
        assert_eq!(r["exit_code"], 1, "{r}");
        assert_eq!(r["limits"], json!({"pids": 8}), "{r}");
    }
    // The next exec (started ahead with the session's settings) is not
    // limited by the last one's rule.
    let (r, _) = srv.exec(&sb, &free, None);
    assert_eq!(forked(&stdout(&r)), None, "{r}");
    assert_eq!(r["exit_code"], 0, "{r}");

    let records = srv.exec_records();
    assert!(
        records
            .iter()
            .any(|d| d["rule"]["id"] == "forks-limited" && d["limits"]["pids"] == 8),
        "{records:?}"
    );
}

#[test]
fn serve_exec_memory_limit_stops_an_allocation() {
    if ready() {
        return;
    }
    let srv = Server::start();
    let sb = srv.create();
    let free = ["python3", "-c", MEMORY, "memory", "free"];
    let limited = ["python3", "-c", MEMORY, "memory", "limited"];
    let (r, _) = srv.exec(&sb, &free, None);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(stdout(&r).contains("allocated 256MiB"), "{r}");
    for round in ["on order", "started ahead"] {
        let (r, _) = srv.exec(&sb, &limited, None);
        // RLIMIT_AS refuses the allocation: Python reports it.
        assert_eq!(r["exit_code"], 3, "{round}: {r}");
        assert!(stdout(&r).starts_with("MemoryError after "), "{round}: {r}");
        assert_eq!(r["limits"], json!({"memory": 64u64 << 20}), "{r}");
    }
    let (r, _) = srv.exec(&sb, &free, None);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(stdout(&r).contains("allocated 256MiB"), "{r}");
}

#[test]
fn serve_exec_timeout_limit_stops_a_sleep() {
    if ready() {
        return;
    }
    let srv = Server::start();
    let sb = srv.create();
    let (r, took) = srv.exec(
        &sb,
        &["sh", "-c", "sleep 10", "time", "limited"],
        Some("60s"),
    );
    assert_eq!(r["exit_code"], 124, "{r}");
    assert_eq!(r["timed_out"], true, "{r}");
    assert!(took < Duration::from_secs(8), "took {took:?}");
    assert_eq!(r["limits"], json!({"timeout_ms": 1000}), "{r}");
    let (r, took) = srv.exec(&sb, &["sh", "-c", "sleep 3", "time", "free"], Some("60s"));
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["timed_out"], false, "{r}");
    assert!(took >= Duration::from_secs(3), "took {took:?}");
}

#[test]
fn serve_context_cells_take_the_timeout_and_refuse_limits_the_interpreter_lacks() {
    if ready() {
        return;
    }
    let srv = Server::start();
    let sb = srv.create();
    let ctx = srv.context(&sb);
    let run = |code: &str| srv.cell(&sb, &ctx, code);
    // The rule's 1s, not the request's 60s.
    let started = Instant::now();
    let r = run("import time\ntime.sleep(10)  # slow cell");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["error"]["name"], "TimeoutError", "{}", r.body);
    assert!(started.elapsed() < Duration::from_secs(8));
    // The interpreter runs without a memory limit of its own: a cell the
    // rule limits is refused, and it did not run.
    let r = run("x = b'a' * (256 << 20)  # small cell");
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("cells-small"), "{}", r.body);
    let r = run("'x' in globals()");
    assert_eq!(r.json()["value"], "False", "{}", r.body);
    // The same cell without the rule runs.
    let r = run("x = b'a' * (256 << 20)\nlen(x) >> 20");
    assert_eq!(r.json()["value"], "256", "{}", r.body);
}

#[test]
fn serve_context_started_under_limits_keeps_them_for_every_cell() {
    if ready() {
        return;
    }
    // Starting the interpreter (`["python3"]`) is allowed with 64 MiB and
    // a cap of 1s on every cell.
    let srv = Server::start_with(&format!(
        "{POLICY}\n@id(\"interpreter-small\")\n@limit_memory(\"64MiB\")\n@limit_timeout(\"1s\")\npermit(principal, action == Action::\"exec\", resource)\nwhen {{ context.command == \"python3\" }};\n"
    ));
    let sb = srv.create();
    let ctx = srv.context(&sb);
    let r = srv.cell(&sb, &ctx, "x = b'a' * (256 << 20)\nlen(x) >> 20");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["error"]["name"], "MemoryError", "{}", r.body);
    let started = Instant::now();
    let r = srv.cell(&sb, &ctx, "import time\ntime.sleep(10)");
    assert_eq!(r.json()["error"]["name"], "TimeoutError", "{}", r.body);
    assert!(started.elapsed() < Duration::from_secs(8));
    // The interpreter was restarted with its limits: a cell whose rule
    // asks for 64 MiB runs (the interpreter is under them), and still
    // cannot allocate 256 MiB.
    let r = srv.cell(&sb, &ctx, "y = b'a' * (256 << 20)  # small cell");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["error"]["name"], "MemoryError", "{}", r.body);
    assert_eq!(r.json()["restarted"], true, "{}", r.body);
}
