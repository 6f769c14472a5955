//! `cordon run --policy FILE`: the command (an exec action) and each egress
//! connection (an egress action) are decided by a Cedar policy; an ask goes
//! to the person at cordon's terminal (`/dev/tty`), and without a terminal
//! it is a deny that names the grant that would allow it.
//!
//! Layers proven: the policy gate of `cordon run` (each refusal test checks
//! the command or the connection did not happen, and the same run allowed
//! shows it would have), and the sandbox's own session and seccomp filter,
//! which keep the sandboxed command from answering cordon's question (the
//! same attack with those two layers taken away does answer it).
//!
//! The terminal is real: a Python driver runs cordon on a pseudo-terminal
//! (`pty.fork`) and types the answers, like a person at a terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{cordon_bin, skip_unless, userns_available, Workdir, DISABLE_LAYERS};
use serde_json::{json, Value};

fn sandbox_ok() -> bool {
    !skip_unless(
        userns_available(),
        "user namespaces are not available on this host",
    )
}

const EXEC_ASKS: &str = r#"
// The shell needs a person's approval.
@id("sh-asks")
@ask
permit(principal, action == Action::"exec", resource == Program::"sh");
"#;

const FORBID: &str = r#"
@id("everything")
permit(principal, action, resource);

@id("no-sh")
forbid(principal, action == Action::"exec", resource)
when { context.program == "sh" };
"#;

const EGRESS_ASKS: &str = r#"
@id("ask-test-host")
@ask
permit(principal, action == Action::"egress", resource == Host::"ask.test");
"#;

/// Runs cordon on a pseudo-terminal and answers each policy question with
/// the next of `answers` ("" leaves it unanswered). With `serve`, an HTTP
/// server on the host's loopback counts the requests that reach it, and
/// `ask.test` resolves to it (for the proxy only). Prints JSON: exit code,
/// everything cordon's terminal showed, the questions, the server's hits.
const DRIVER: &str = r#"
import http.server, json, os, pty, sys, threading, time
spec = json.loads(sys.argv[1])
hits = []
args = list(spec["args"])
if spec.get("serve"):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers()
            self.wfile.write(b"ok\n")
        def log_message(self, *a): pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    args = ["--resolve", "ask.test=127.0.0.1:%d" % srv.server_address[1]] + args
pid, fd = pty.fork()
if pid == 0:
    for k, v in spec.get("env", {}).items():
        os.environ[k] = v
    os.execv(spec["cordon"], [spec["cordon"], "run"] + args)
out = b""
answers = list(spec["answers"])
asked = 0
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
    n = out.count(b"Allow it? [o]nce")
    while asked < n:
        asked += 1
        a = answers.pop(0) if answers else ""
        if a:
            time.sleep(0.2)
            os.write(fd, a.encode() + b"\n")
_, status = os.waitpid(pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "tty": out.decode(errors="replace"),
                  "asked": asked, "hits": hits}))
"#;

struct Tty {
    code: i32,
    tty: String,
    asked: u64,
    hits: usize,
}

fn on_a_terminal(w: &Workdir, args: &[&str], answers: &[&str], serve: bool, env: Value) -> Tty {
    let spec = json!({
        "cordon": cordon_bin(), "args": args, "answers": answers, "serve": serve, "env": env,
    });
    let out = Command::new("python3")
        .args(["-c", DRIVER])
        .arg(spec.to_string())
        .current_dir(w.path())
        .stdin(Stdio::null())
        .output()
        .expect("python3 pty driver");
    assert!(
        out.status.success(),
        "driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("driver json");
    Tty {
        code: v["code"].as_i64().unwrap() as i32,
        tty: v["tty"].as_str().unwrap().to_owned(),
        asked: v["asked"].as_u64().unwrap(),
        hits: v["hits"].as_array().unwrap().len(),
    }
}

fn db(w: &Workdir) -> String {
    w.path().join(".audit.db").display().to_string()
}

/// The policy `decision` records in the audit store, oldest first.
fn decisions(w: &Workdir) -> Vec<Value> {
    let out = Command::new(cordon_bin())
        .args(["audit", "--store", &db(w), "export"])
        .output()
        .expect("cordon audit export");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON record"))
        .filter(|r| r["kind"] == "api_action" && r["body"]["action"] == "decision")
        .map(|r| r["body"]["detail"].clone())
        .collect()
}

fn write_policy(w: &Workdir, text: &str) -> String {
    w.write("policy.cedar", text).display().to_string()
}

#[test]
fn exec_ask_on_a_terminal_runs_on_once_and_refuses_on_deny() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    let policy = write_policy(&w, EXEC_ASKS);
    let audit = db(&w);
    let args = [
        "--audit",
        &audit,
        "--cwd",
        "rw",
        "--policy",
        &policy,
        "--",
        "sh",
        "-c",
        "touch ran",
    ];
    let t = on_a_terminal(&w, &args, &["d"], false, json!({}));
    assert_eq!(t.code, 125, "{}", t.tty);
    assert_eq!(t.asked, 1, "{}", t.tty);
    assert!(
        t.tty.contains("exec `sh -c \"touch ran\"`")
            && t.tty.contains("sh-asks")
            && t.tty.contains("policy.cedar:3)")
            && t.tty.contains("was denied at cordon's terminal"),
        "{}",
        t.tty
    );
    assert!(!w.path().join("ran").exists(), "a denied command ran");
    let d = decisions(&w);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["rule"]["id"], "sh-asks");
    assert_eq!(d[0]["effect"], "ask");
    assert_eq!(d[0]["answer"], "denied");
    assert_eq!(d[0]["outcome"], "refused");

    let t = on_a_terminal(&w, &args, &["o"], false, json!({}));
    assert_eq!(t.code, 0, "{}", t.tty);
    assert_eq!(t.asked, 1, "{}", t.tty);
    assert!(w.path().join("ran").exists(), "{}", t.tty);
}

#[test]
fn exec_ask_unanswered_is_denied_when_the_time_is_up() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    let policy = write_policy(&w, EXEC_ASKS);
    let args = [
        "--no-audit",
        "--cwd",
        "rw",
        "--policy",
        &policy,
        "--ask-timeout",
        "2s",
        "--",
        "sh",
        "-c",
        "touch ran",
    ];
    let t = on_a_terminal(&w, &args, &[""], false, json!({}));
    assert_eq!(t.code, 125, "{}", t.tty);
    assert!(
        t.tty
            .contains("not answered at cordon's terminal within 2s")
            && t.tty.contains("a grant for exec of `sh -c \"touch ran\"`"),
        "{}",
        t.tty
    );
    assert!(!w.path().join("ran").exists());
}

#[test]
fn exec_ask_without_a_terminal_is_denied_naming_the_grant() {
    if !sandbox_ok() {
        return;
    }
    if skip_unless(
        Path::new("/usr/bin/setsid").exists(),
        "setsid (util-linux) is not installed",
    ) {
        return;
    }
    let w = Workdir::new();
    let policy = write_policy(&w, EXEC_ASKS);
    // setsid: no controlling terminal, as under CI or an agent's tool call.
    let out = Command::new("/usr/bin/setsid")
        .arg("-w")
        .arg(cordon_bin())
        .args(["run", "--no-audit", "--cwd", "rw", "--policy", &policy])
        .args(["--", "sh", "-c", "touch ran"])
        .current_dir(w.path())
        .stdin(Stdio::null())
        .output()
        .expect("setsid cordon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("no terminal to ask")
            && stderr.contains("sh-asks")
            && stderr.contains("would be allowed by a grant for exec of `sh -c \"touch ran\"`"),
        "{stderr}"
    );
    assert!(!w.path().join("ran").exists());
}

#[test]
fn forbid_refuses_and_names_the_rule_with_file_and_line() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    let policy = write_policy(&w, FORBID);
    let run = |cmd: &[&str]| {
        Command::new(cordon_bin())
            .args([
                "run",
                "--no-audit",
                "--cwd",
                "rw",
                "--policy",
                &policy,
                "--",
            ])
            .args(cmd)
            .current_dir(w.path())
            .stdin(Stdio::null())
            .output()
            .expect("cordon run")
    };
    let out = run(&["sh", "-c", "touch ran"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("denied by no-sh (") && stderr.contains("policy.cedar:5)"),
        "{stderr}"
    );
    assert!(stderr.contains("no approval lifts it"), "{stderr}");
    assert!(!w.path().join("ran").exists());
    // The same policy lets another program run (the forbid is what refused).
    let out = run(&["touch", "ran"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(w.path().join("ran").exists());
}

/// Two requests to ask.test from one run; prints what each got.
const TWO_REQUESTS: &str = r#"
import urllib.request
for i in range(2):
    try:
        r = urllib.request.urlopen("http://ask.test/%d" % i, timeout=30)
        print("GOT", r.status, flush=True)
    except Exception as e:
        print("ERR", e, flush=True)
"#;

#[test]
fn egress_ask_for_this_run_covers_the_next_connection_and_deny_refuses() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    let policy = write_policy(&w, EGRESS_ASKS);
    let audit = db(&w);
    let args = [
        "--audit",
        &audit,
        "--net",
        "proxy",
        "--policy",
        &policy,
        "--",
        "python3",
        "-c",
        TWO_REQUESTS,
    ];
    let t = on_a_terminal(&w, &args, &["r"], true, json!({}));
    assert_eq!(t.code, 0, "{}", t.tty);
    assert_eq!(t.asked, 1, "one question covers the run: {}", t.tty);
    assert!(
        t.tty.contains("egress to ask.test:80") && t.tty.contains("ask-test-host"),
        "{}",
        t.tty
    );
    assert_eq!(t.tty.matches("GOT 200").count(), 2, "{}", t.tty);
    assert_eq!(t.hits, 2);
    let d: Vec<Value> = decisions(&w)
        .into_iter()
        .filter(|d| d["action"]["kind"] == "egress")
        .collect();
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(d[0]["answer"], "allowed for this run");
    assert_eq!(d[1]["answer"], "granted for this run");
    assert!(d.iter().all(|d| d["rule"]["id"] == "ask-test-host"));

    // Denied: both connections refused (asked twice), nothing reaches the server.
    let w = Workdir::new();
    let policy = write_policy(&w, EGRESS_ASKS);
    let args = [
        "--no-audit",
        "--net",
        "proxy",
        "--policy",
        &policy,
        "--",
        "python3",
        "-c",
        TWO_REQUESTS,
    ];
    let t = on_a_terminal(&w, &args, &["d", "d"], true, json!({}));
    assert_eq!(t.asked, 2, "{}", t.tty);
    assert_eq!(t.tty.matches("ERR HTTP Error 403").count(), 2, "{}", t.tty);
    assert_eq!(t.hits, 0);
}

/// The sandboxed command tries to answer cordon's question itself: it
/// opens /dev/tty, and pushes "o\n" into its terminal's input with
/// TIOCSTI once the question is up, then waits for its own connection.
const ANSWER_ITSELF: &str = r#"
import fcntl, os, termios, threading, time, urllib.request
res = {}
try:
    os.open("/dev/tty", os.O_RDWR)
    res["dev_tty"] = "opened"
except OSError as e:
    res["dev_tty"] = "errno %d" % e.errno
def inject():
    time.sleep(1.5)
    try:
        for c in b"o\n":
            fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
        res["tiocsti"] = "pushed"
    except OSError as e:
        res["tiocsti"] = "errno %d" % e.errno
t = threading.Thread(target=inject)
t.start()
try:
    r = urllib.request.urlopen("http://ask.test/x", timeout=30)
    print("GOT", r.status, flush=True)
except Exception as e:
    print("ERR", e, flush=True)
t.join()
print("RESULT", res, flush=True)
"#;

#[test]
fn the_sandboxed_command_cannot_answer_the_question() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    let policy = write_policy(&w, EGRESS_ASKS);
    let args = [
        "--no-audit",
        "--net",
        "proxy",
        "--policy",
        &policy,
        "--ask-timeout",
        "5s",
        "--",
        "python3",
        "-c",
        ANSWER_ITSELF,
    ];
    // Nobody at the terminal answers: only the command could.
    let t = on_a_terminal(&w, &args, &[""], true, json!({}));
    assert_eq!(t.asked, 1, "{}", t.tty);
    assert!(t.tty.contains("ERR HTTP Error 403"), "{}", t.tty);
    assert!(t.tty.contains("no answer: denied"), "{}", t.tty);
    assert!(!t.tty.contains("'dev_tty': 'opened'"), "{}", t.tty);
    assert!(!t.tty.contains("'tiocsti': 'pushed'"), "{}", t.tty);
    assert_eq!(t.hits, 0);

    // The same attack with the sandbox's session and seccomp layers taken
    // away (debug builds) answers the question: those layers are what
    // stopped it, and this test sees the difference.
    if cfg!(debug_assertions) {
        let t = on_a_terminal(
            &w,
            &args,
            &[""],
            true,
            json!({DISABLE_LAYERS: "session,seccomp"}),
        );
        assert!(
            t.tty
                .contains(&format!("layers turned off by {DISABLE_LAYERS}")),
            "{}",
            t.tty
        );
        assert!(t.tty.contains("'tiocsti': 'pushed'"), "{}", t.tty);
        assert!(t.tty.contains("GOT 200"), "{}", t.tty);
        assert_eq!(t.hits, 1);
    }
}
