//! The audit trail of `cordon run`, end to end: real payloads (shell,
//! Python, C) through the real binary, then the records read back with
//! `cordon audit show/export/incidents/verify`. Every run writes to a store
//! of its own test (`--audit <tmp>/audit.db`), never the default one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One audit store in a directory of its own (outside the sandbox's cwd).
struct Store {
    dir: tempfile::TempDir,
    db: PathBuf,
}

/// What `cordon audit verify` said, as text and as JSON.
struct Verified {
    code: i32,
    stdout: String,
    stderr: String,
    report: Value,
}

impl Store {
    fn new() -> Store {
        let dir = tempfile::Builder::new()
            .prefix("cordon-audit-")
            .tempdir()
            .expect("tempdir");
        let db = dir.path().join("audit.db");
        Store { dir, db }
    }

    fn db_str(&self) -> &str {
        self.db.to_str().expect("utf8 path")
    }

    /// `cordon run --audit DB [flags] -- cmd...` in `w`.
    fn run(&self, w: &Workdir, flags: &[&str], cmd: &[&str]) -> Outcome {
        let mut all = vec!["--audit", self.db_str()];
        all.extend_from_slice(flags);
        w.run(&all, cmd)
    }

    /// `cordon audit --store DB args...`
    fn cli(&self, args: &[&str]) -> Output {
        Command::new(cordon_bin())
            .arg("audit")
            .arg("--store")
            .arg(&self.db)
            .args(args)
            .env_remove("CORDON_AUDIT")
            .stdin(Stdio::null())
            .output()
            .expect("run cordon audit")
    }

    fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "cordon audit {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf8 output")
    }

    fn json_lines(&self, args: &[&str]) -> Vec<Value> {
        self.cli_ok(args)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
            .collect()
    }

    fn show(&self, run_id: &str) -> Value {
        serde_json::from_str(&self.cli_ok(&["show", run_id, "--json"])).expect("show --json")
    }

    fn export(&self) -> Vec<Value> {
        self.json_lines(&["export", "--format", "jsonl"])
    }

    fn incidents(&self) -> Vec<Value> {
        self.json_lines(&["incidents", "--json"])
    }

    fn verify(&self, extra: &[&str]) -> Verified {
        let mut args = vec!["verify"];
        args.extend_from_slice(extra);
        let text = self.cli(&args);
        args.push("--json");
        let json = self.cli(&args);
        assert_eq!(
            text.status.code(),
            json.status.code(),
            "verify and verify --json disagree"
        );
        Verified {
            code: text.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&text.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&text.stderr).into_owned(),
            report: serde_json::from_slice(&json.stdout).unwrap_or(Value::Null),
        }
    }

    fn assert_verifies(&self) -> Verified {
        let v = self.verify(&[]);
        assert_eq!(
            v.code, 0,
            "verify failed: {}{}\n{}",
            v.stdout, v.stderr, v.report
        );
        assert!(v.stdout.starts_with("ok: "), "{}", v.stdout);
        assert_eq!(v.report["ok"], true, "{}", v.report);
        v
    }

    /// Verify must fail (exit 1) and its first problem must name `seq`
    /// and `run`; the text on stderr must say the same and contain `what`.
    fn assert_tamper_found(&self, seq: u64, run: &str, kind: &str, what: &str) -> Verified {
        let v = self.verify(&[]);
        assert_eq!(v.code, 1, "verify did not notice: {}{}", v.stdout, v.stderr);
        assert_eq!(v.report["ok"], false);
        let p = &v.report["problems"][0];
        assert_eq!(p["seq"], seq, "first problem: {p}");
        assert_eq!(p["run_id"], run, "first problem: {p}");
        assert_eq!(p["kind"], kind, "first problem: {p}");
        let named = format!("record seq {seq} (run {run}, kind {kind}): ");
        assert!(
            v.stderr.contains(&named),
            "message does not name {named}: {}",
            v.stderr
        );
        assert!(
            v.stderr.contains(what),
            "expected {what:?} in: {}",
            v.stderr
        );
        assert!(
            v.stderr.contains(self.db_str()),
            "message does not name the store: {}",
            v.stderr
        );
        v
    }

    /// Change the database the way someone with write access to the file
    /// would: drop the append-only triggers, run `script`, put them back.
    fn tamper(&self, script: &str) {
        let py = r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
triggers = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
assert len(triggers) == 4, triggers
for name, _ in triggers:
    db.execute("DROP TRIGGER " + name)
db.commit()
db.executescript(sys.argv[2])
for _, sql in triggers:
    db.execute(sql)
db.commit()
db.close()
"#;
        python_host(&[py, self.db_str(), script]);
    }

    /// Every file of the store (database, WAL, shared memory, head, lock).
    fn raw_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        for e in std::fs::read_dir(self.dir.path()).expect("read store dir") {
            let p = e.expect("entry").path();
            if p.is_file() {
                let data = std::fs::read(&p).expect("read store file");
                files.push((p, data));
            }
        }
        files
    }

    fn head_file(&self) -> PathBuf {
        let mut s = self.db.as_os_str().to_os_string();
        s.push(".head");
        PathBuf::from(s)
    }
}

/// Run a python3 program on the host (not in a sandbox).
fn python_host(args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .args(args)
        .output()
        .expect("run python3 on the host");
    assert!(
        out.status.success(),
        "host python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sha256_hex(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(data)
        .expect("write");
    let out = child.wait_with_output().expect("sha256sum output");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_owned()
}

fn run_id(o: &Outcome) -> String {
    let id = o.report["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run_id in the report: {}{}", o.report, o.stderr))
        .to_owned();
    assert!(!id.is_empty());
    id
}

fn records(show: &Value) -> &Vec<Value> {
    show["records"].as_array().expect("records")
}

fn kinds(show: &Value) -> Vec<String> {
    records(show)
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn one<'a>(show: &'a Value, kind: &str) -> &'a Value {
    let found: Vec<&Value> = records(show).iter().filter(|r| r["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "expected one {kind}: {:?}", kinds(show));
    found[0]
}

fn incidents_of(show: &Value) -> Vec<&Value> {
    records(show)
        .iter()
        .filter(|r| r["kind"] == "incident")
        .map(|r| &r["body"])
        .collect()
}

/// The run's records form a consistent slice: run_started first, run_ended
/// last, all with the run's id, each hash-linked to the store's previous one.
fn assert_run_shape(show: &Value, run: &str) {
    let recs = records(show);
    assert!(recs.len() >= 2, "{show}");
    assert_eq!(recs[0]["kind"], "run_started");
    assert_eq!(recs[recs.len() - 1]["kind"], "run_ended");
    assert_eq!(show["run_id"], run);
    for r in recs {
        assert_eq!(r["run_id"], run);
    }
    let t0 = recs[0]["time_ns"].as_i64().unwrap_or(0);
    let t1 = recs[recs.len() - 1]["time_ns"].as_i64().unwrap_or(0);
    assert!(t0 > 0 && t1 >= t0, "start {t0} end {t1}");
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

// ---------------------------------------------------------------------------
// A benign run
// ---------------------------------------------------------------------------

#[test]
fn benign_run_is_recorded_with_command_code_profile_outcome_and_output() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let code = "import sys\nprint('hello from the sandbox')\nsys.stderr.write('a warning\\n')\nsys.exit(3)";
    let o = s.run(&w, &[], &["python3", "-c", code]);
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(o.stdout, "hello from the sandbox\n");
    let run = run_id(&o);
    assert_eq!(o.report["incidents"], serde_json::json!([]));
    assert!(!o.stderr.contains("incident"), "{}", o.stderr);

    let show = s.show(&run);
    assert_run_shape(&show, &run);
    assert_eq!(kinds(&show), ["run_started", "run_ended"]);
    let recs = records(&show);
    // First two records of a fresh store, chained from genesis.
    assert_eq!(recs[0]["seq"], 1);
    assert_eq!(recs[1]["seq"], 2);
    assert_eq!(recs[0]["prev_hash"], GENESIS);
    assert_eq!(recs[1]["prev_hash"], recs[0]["hash"]);

    let start = &recs[0]["body"];
    assert_eq!(start["argv"], serde_json::json!(["python3", "-c", code]));
    let cwd = std::fs::canonicalize(w.path()).expect("canonical cwd");
    assert_eq!(start["cwd"], cwd.to_str().expect("utf8"));
    assert_eq!(start["cwd"], o.report["cwd"]);
    assert_eq!(start["profile_name"], "preset:untrusted");
    assert_eq!(start["cordon_version"], o.report["cordon_version"]);
    assert_eq!(start["enforcement"]["isolation"], "namespaces");
    assert_eq!(start["enforcement"]["network"], "none");
    assert_eq!(
        start["enforcement"]["landlock_abi"],
        o.report["enforcement"]["landlock_abi"]
    );
    // The code, stored once by content hash, exactly as given.
    assert_eq!(start["code_source"], "script");
    assert_eq!(show["code"]["text"], code);
    assert_eq!(show["code"]["hash"], sha256_hex(code.as_bytes()));
    assert_eq!(start["code_hash"], show["code"]["hash"]);
    // The resolved profile, as text and hash.
    let profile = show["profile"]["text"].as_str().expect("profile text");
    assert_eq!(show["profile"]["hash"], sha256_hex(profile.as_bytes()));
    assert_eq!(start["profile_hash"], show["profile"]["hash"]);
    assert!(profile.contains("memory = \"512MiB\""), "{profile}");
    assert!(profile.contains("[audit]\nenabled = true"), "{profile}");

    let end = &recs[1]["body"];
    assert_eq!(end["reason"], "exited");
    assert_eq!(end["exit_code"], 3);
    assert!(end.get("signal").is_none(), "{end}");
    assert_eq!(end["stdout"]["kept_bytes"], o.report["stdout"]["kept"]);
    assert_eq!(end["stdout"]["kept_bytes"], 23);
    assert_eq!(end["stdout"]["dropped_bytes"], 0);
    assert_eq!(end["stdout"]["excerpt"], "hello from the sandbox\n");
    assert_eq!(end["stderr"]["kept_bytes"], 10);
    assert_eq!(end["stderr"]["excerpt"], "a warning\n");
    assert_eq!(end["peak_memory_bytes"], o.report["peak_memory"]);
    let wall = o.report["wall_time"].as_f64().expect("wall_time");
    let wall_ms = u(&end["wall_ms"]) as f64;
    assert!(
        (wall_ms - wall * 1000.0).abs() <= 2.0,
        "wall_ms {wall_ms} vs report {wall}s"
    );

    // An id prefix is enough; tail and export agree with show.
    let by_prefix = s.show(&run[..12]);
    assert_eq!(by_prefix["records"], show["records"]);
    assert_eq!(&s.export(), recs);
    assert_eq!(&s.json_lines(&["tail", "--json"]), recs);
    assert_eq!(s.cli_ok(&["incidents"]).trim(), "no incidents");
    assert!(s.incidents().is_empty());

    let v = s.assert_verifies();
    let head = format!("2:{}", recs[1]["hash"].as_str().expect("hash"));
    assert_eq!(
        v.stdout.trim(),
        format!("ok: 2 records and 2 blobs verified; head {head}")
    );
    assert_eq!(s.cli_ok(&["head"]).trim(), head);
    let v = s.verify(&["--anchor", &head]);
    assert_eq!(v.code, 0, "{}", v.stderr);
    assert!(v.stdout.contains("anchor found"), "{}", v.stdout);
}

/// `cordon audit show last` is the newest run; before any run it says
/// there is none instead of looking for a run named "last".
#[test]
fn show_last_is_the_newest_run() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let empty = s.cli(&["show", "last"]);
    assert!(!empty.status.success());
    assert!(
        String::from_utf8_lossy(&empty.stderr).contains("nothing has been audited"),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    let first = run_id(&s.run(&w, &[], &["true"]));
    let second = run_id(&s.run(&w, &[], &["false"]));
    assert_ne!(first, second);
    let last = s.show("last");
    assert_eq!(last["run_id"], second.as_str());
    assert_eq!(last, s.show(&second));
}

#[test]
fn script_files_are_stored_as_code_and_binaries_are_not() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let script = "print(sum(range(10)))\n";
    w.write("job.py", script);
    let o = s.run(&w, &[], &["python3", "job.py"]);
    assert_eq!(o.stdout, "45\n", "{}", o.stderr);
    let show = s.show(&run_id(&o));
    assert_eq!(show["code"]["text"], script);
    assert_eq!(one(&show, "run_started")["body"]["code_source"], "script");

    let bin = w.compile_c(
        "hello",
        "#include <stdio.h>\nint main(void){puts(\"c\");return 0;}\n",
    );
    let o = s.run(&w, &[], &[bin.to_str().expect("utf8")]);
    assert_eq!(o.stdout, "c\n", "{}", o.stderr);
    let show = s.show(&run_id(&o));
    let start = &one(&show, "run_started")["body"];
    assert!(start.get("code_hash").is_none(), "{start}");
    assert!(show["code"].is_null());
    assert!(!show["profile"].is_null());
    // Both runs share the profile blob: 2 runs, 1 code blob + 1 profile blob.
    let v = s.assert_verifies();
    assert_eq!(v.report["records"], 4);
    assert_eq!(v.report["blobs"], 2);
}

// ---------------------------------------------------------------------------
// Sensitive system calls
// ---------------------------------------------------------------------------

const PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static void report(const char *name, long ret) {
    printf("%s ret=%ld errno=%d\n", name, ret, ret == -1 ? errno : 0);
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    char buf[64] = {0};
    if (!strcmp(what, "mount")) {
        report("mount", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, NULL));
        report("umount2", syscall(SYS_umount2, "/proc", 2));
        report("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
        report("chroot", syscall(SYS_chroot, "/tmp"));
    } else if (!strcmp(what, "newmount")) {
        report("fsopen", syscall(430, "tmpfs", 0));
        report("open_tree", syscall(428, AT_FDCWD, "/tmp", 1));
        report("move_mount", syscall(429, -1, "", AT_FDCWD, "/tmp", 4));
        report("fspick", syscall(433, AT_FDCWD, "/", 0));
        report("mount_setattr", syscall(442, AT_FDCWD, "/", 0, NULL, 0));
    } else if (!strcmp(what, "namespaces")) {
        report("unshare", syscall(SYS_unshare, CLONE_NEWUSER));
        report("setns", syscall(SYS_setns, 0, CLONE_NEWNET));
        report("clone", syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0));
    } else if (!strcmp(what, "ptrace")) {
        pid_t child = fork();
        if (child == 0) { pause(); _exit(0); }
        struct iovec local = { buf, 8 }, remote = { buf, 8 };
        report("ptrace", syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, child, 0, 0));
        report("process_vm_readv", syscall(SYS_process_vm_readv, child, &local, 1, &remote, 1, 0));
        report("process_vm_writev", syscall(SYS_process_vm_writev, child, &local, 1, &remote, 1, 0));
        kill(child, SIGKILL);
    } else if (!strcmp(what, "bpf")) {
        report("bpf", syscall(SYS_bpf, 0, buf, 48));
    } else if (!strcmp(what, "perf")) {
        report("perf_event_open", syscall(SYS_perf_event_open, buf, 0, -1, -1, 0));
    } else if (!strcmp(what, "userfaultfd")) {
        report("userfaultfd", syscall(SYS_userfaultfd, 0));
    } else if (!strcmp(what, "io_uring")) {
        report("io_uring_setup", syscall(425, 8, buf));
        report("io_uring_enter", syscall(426, 3, 1, 0, 0, NULL, 0));
        report("io_uring_register", syscall(427, 3, 0, NULL, 0));
    } else if (!strcmp(what, "keys")) {
        report("keyctl", syscall(SYS_keyctl, 0L /* GET_KEYRING_ID */, -3L, 1L));
        report("add_key", syscall(SYS_add_key, "user", "cordon", "x", 1, -2));
        report("request_key", syscall(SYS_request_key, "user", "cordon", NULL, 0));
    } else if (!strcmp(what, "machine")) {
        report("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
        report("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
        report("init_module", syscall(SYS_init_module, buf, 1, ""));
        report("finit_module", syscall(SYS_finit_module, 0, "", 0));
        report("delete_module", syscall(SYS_delete_module, "ext4", 0));
    } else if (!strcmp(what, "handles")) {
        report("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, buf, 0));
    } else if (!strcmp(what, "x32")) {
        printf("before x32\n");
        fflush(stdout);
        long r = syscall(0x40000000 | SYS_getpid);
        report("x32_getpid", r);
    }
    return 0;
}
"#;

/// A refused call: its name, number and the severity of its incident.
type Call = (&'static str, i64, &'static str);

/// (probe section, its calls) for every sensitive class.
fn syscall_classes() -> Vec<(&'static str, Vec<Call>)> {
    vec![
        (
            "mount",
            vec![
                ("mount", libc::SYS_mount, "critical"),
                ("umount2", libc::SYS_umount2, "critical"),
                ("pivot_root", libc::SYS_pivot_root, "critical"),
                ("chroot", libc::SYS_chroot, "high"),
            ],
        ),
        (
            "newmount",
            vec![
                ("fsopen", 430, "critical"),
                ("open_tree", 428, "critical"),
                ("move_mount", 429, "critical"),
                ("fspick", 433, "critical"),
                ("mount_setattr", 442, "critical"),
            ],
        ),
        (
            "namespaces",
            vec![
                ("unshare", libc::SYS_unshare, "critical"),
                ("setns", libc::SYS_setns, "critical"),
                ("clone", libc::SYS_clone, "critical"),
            ],
        ),
        (
            "ptrace",
            vec![
                ("ptrace", libc::SYS_ptrace, "critical"),
                ("process_vm_readv", libc::SYS_process_vm_readv, "high"),
                ("process_vm_writev", libc::SYS_process_vm_writev, "critical"),
            ],
        ),
        ("bpf", vec![("bpf", libc::SYS_bpf, "critical")]),
        (
            "perf",
            vec![("perf_event_open", libc::SYS_perf_event_open, "high")],
        ),
        (
            "userfaultfd",
            vec![("userfaultfd", libc::SYS_userfaultfd, "critical")],
        ),
        (
            "io_uring",
            vec![
                ("io_uring_setup", 425, "critical"),
                ("io_uring_enter", 426, "high"),
                ("io_uring_register", 427, "high"),
            ],
        ),
        (
            "keys",
            vec![
                ("keyctl", libc::SYS_keyctl, "high"),
                ("add_key", libc::SYS_add_key, "high"),
                ("request_key", libc::SYS_request_key, "high"),
            ],
        ),
        (
            "machine",
            vec![
                ("kexec_load", libc::SYS_kexec_load, "critical"),
                ("kexec_file_load", libc::SYS_kexec_file_load, "critical"),
                ("init_module", libc::SYS_init_module, "critical"),
                ("finit_module", libc::SYS_finit_module, "critical"),
                ("delete_module", libc::SYS_delete_module, "critical"),
            ],
        ),
        (
            "handles",
            vec![("open_by_handle_at", libc::SYS_open_by_handle_at, "critical")],
        ),
    ]
}

#[test]
fn each_sensitive_syscall_class_leaves_its_incident_with_caller_and_arguments() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let bin = w.compile_c("probe", PROBE);
    let bin = bin.to_str().expect("utf8");
    let mut all_runs = Vec::new();
    for (section, calls) in syscall_classes() {
        let o = s.run(&w, &["--stdin", "null"], &[bin, section]);
        assert_eq!(o.code, 0, "{section}: {}{}", o.stdout, o.stderr);
        let run = run_id(&o);
        all_runs.push(run.clone());
        let show = s.show(&run);
        assert_run_shape(&show, &run);
        let incidents = incidents_of(&show);
        assert_eq!(
            incidents.len(),
            calls.len(),
            "{section}: one incident per refused call: {incidents:#?}"
        );
        assert_eq!(
            o.report["incidents"].as_array().map(Vec::len),
            Some(calls.len())
        );
        for (name, nr, severity) in &calls {
            // The workload saw EPERM ...
            let line = format!("{name} ret=-1 errno={}", libc::EPERM);
            assert!(
                o.stdout.contains(&line),
                "{section}: {line} not in {}",
                o.stdout
            );
            // ... and the store has who called what.
            let inc = incidents
                .iter()
                .find(|i| i["evidence"]["syscall"] == *name)
                .unwrap_or_else(|| panic!("{section}: no incident for {name}: {incidents:#?}"));
            assert_eq!(inc["kind"], "syscall", "{inc}");
            assert_eq!(inc["severity"], *severity, "{name}: {inc}");
            assert_eq!(inc["evidence"]["nr"], *nr, "{name}: {inc}");
            let pid = u(&inc["evidence"]["pid"]);
            assert!(pid > 1 && pid != u64::from(o.supervisor_pid), "{inc}");
            assert_eq!(
                inc["summary"],
                format!("refused {name}(2) from pid {pid}"),
                "{inc}"
            );
            assert_eq!(inc["evidence"]["args"].as_array().map(Vec::len), Some(6));
        }
        // One line on stderr names them.
        assert!(
            o.stderr.contains(&format!(
                "cordon: {} incident(s): {} syscall (",
                calls.len(),
                calls.len()
            )),
            "{section}: {}",
            o.stderr
        );
        let end = &one(&show, "run_ended")["body"];
        assert_eq!(end["reason"], "exited");
        assert_eq!(end["exit_code"], 0);
    }

    // Arguments are kept as evidence, exactly as the caller passed them.
    let args_of = |name: &str| -> Vec<u64> {
        s.incidents()
            .iter()
            .find(|r| r["body"]["evidence"]["syscall"] == name)
            .unwrap_or_else(|| panic!("no {name}"))["body"]["evidence"]["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(u)
            .collect()
    };
    assert_eq!(args_of("unshare")[0], libc::CLONE_NEWUSER as u64);
    assert_eq!(
        args_of("clone")[0],
        (libc::CLONE_NEWPID | libc::SIGCHLD) as u64
    );
    assert_eq!(args_of("setns")[..2], [0, libc::CLONE_NEWNET as u64]);
    assert_eq!(args_of("keyctl")[..3], [0, (-3i64) as u64, 1]);
    assert_eq!(args_of("io_uring_setup")[0], 8);
    assert_eq!(args_of("bpf")[2], 48);
    assert_eq!(args_of("userfaultfd")[0], 0);

    // `incidents` lists every one of them, newest first, across runs.
    let listed = s.incidents();
    let expected: usize = syscall_classes().iter().map(|(_, c)| c.len()).sum();
    assert_eq!(listed.len(), expected);
    let seqs: Vec<u64> = listed.iter().map(|r| u(&r["seq"])).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] > w[1]),
        "not newest first: {seqs:?}"
    );
    let runs: BTreeSet<&str> = listed.iter().filter_map(|r| r["run_id"].as_str()).collect();
    assert_eq!(runs.len(), all_runs.len());
    let recent = s.json_lines(&["incidents", "--since", "1h", "--json"]);
    assert_eq!(recent.len(), expected);
    // -n: the newest N, the head of the same list.
    let newest = s.json_lines(&["incidents", "-n", "3", "--json"]);
    assert_eq!(newest, listed[..3].to_vec());
    s.assert_verifies();
}

#[test]
fn x32_call_is_a_critical_incident_and_the_run_ends_by_sigsys() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let bin = w.compile_c("probe", PROBE);
    let o = s.run(
        &w,
        &["--stdin", "null"],
        &[bin.to_str().expect("utf8"), "x32"],
    );
    assert_eq!(o.code, 128 + libc::SIGSYS, "{}{}", o.stdout, o.stderr);
    assert!(!o.stdout.contains("x32_getpid ret="), "{}", o.stdout);
    let run = run_id(&o);
    let show = s.show(&run);
    assert_run_shape(&show, &run);
    let end = &one(&show, "run_ended")["body"];
    assert_eq!(end["reason"], "signal");
    assert_eq!(end["signal"], libc::SIGSYS);
    assert!(end.get("exit_code").is_none(), "{end}");
    assert_eq!(end["stdout"]["excerpt"], "before x32\n");
    let incidents = incidents_of(&show);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    assert_eq!(incidents[0]["kind"], "syscall");
    assert_eq!(incidents[0]["severity"], "critical");
    assert_eq!(incidents[0]["evidence"]["signal"], libc::SIGSYS);
    assert_eq!(s.incidents().len(), 1);
    s.assert_verifies();
}

// ---------------------------------------------------------------------------
// Egress
// ---------------------------------------------------------------------------

/// A python http.server on 127.0.0.1, killed on drop.
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl HttpServer {
    fn start(dir: &Path) -> HttpServer {
        let mut child = Command::new("python3")
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start http.server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the server's first line");
        // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
        let port = line
            .split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn egress_decisions_are_recorded_and_the_denied_one_is_an_incident() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    w.write("index.html", "served to the sandbox\n");
    let server = HttpServer::start(w.path());
    let s = Store::new();
    let resolve = format!("a.test=127.0.0.1:{}", server.port);
    let code = r#"
import urllib.request
for url in ["http://a.test/index.html", "http://b.test/x"]:
    try:
        r = urllib.request.urlopen(url, timeout=10)
        print(url, r.status, r.read().decode().strip())
    except Exception as e:
        print(url, "ERR", getattr(e, "code", e))
"#;
    let o = s.run(
        &w,
        &["--allow-net", "a.test", "--resolve", &resolve],
        &["python3", "-c", code],
    );
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains("http://a.test/index.html 200 served to the sandbox"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("http://b.test/x ERR 403"), "{}", o.stdout);
    let run = run_id(&o);
    let show = s.show(&run);
    assert_run_shape(&show, &run);
    assert_eq!(
        kinds(&show),
        ["run_started", "egress", "egress", "incident", "run_ended"]
    );
    assert_eq!(
        one(&show, "run_started")["body"]["enforcement"]["network"],
        "proxy"
    );
    let egress: Vec<&Value> = records(&show)
        .iter()
        .filter(|r| r["kind"] == "egress")
        .map(|r| &r["body"])
        .collect();
    let allowed = egress[0];
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    assert_eq!(allowed["method"], "GET");
    assert_eq!(allowed["host"], "a.test");
    assert_eq!(allowed["port"], 80);
    assert_eq!(allowed["path"], "/index.html");
    assert_eq!(allowed["rule"], "allow:a.test");
    assert_eq!(allowed["reason"], "status 200");
    assert!(u(&allowed["bytes_received"]) > 22, "{allowed}");
    assert!(u(&allowed["bytes_sent"]) > 0, "{allowed}");
    let denied = egress[1];
    assert_eq!(denied["decision"], "deny", "{denied}");
    assert_eq!(denied["method"], "GET");
    assert_eq!(denied["host"], "b.test");
    assert_eq!(denied["port"], 80);
    assert_eq!(denied["path"], "/x");
    assert_eq!(denied["rule"], "unlisted");
    // The report and the store agree.
    assert_eq!(o.report["egress"].as_array().map(Vec::len), Some(2));

    let incidents = incidents_of(&show);
    assert_eq!(incidents.len(), 1);
    let inc = incidents[0];
    assert_eq!(inc["kind"], "egress");
    assert_eq!(inc["severity"], "medium");
    assert_eq!(
        inc["evidence"],
        serde_json::json!({"method": "GET", "host": "b.test", "port": 80, "rule": "unlisted"})
    );
    assert_eq!(inc["summary"], "egress to b.test:80 denied (unlisted)");
    assert!(o.stderr.contains("1 egress denied"), "{}", o.stderr);
    s.assert_verifies();
}

// ---------------------------------------------------------------------------
// Limit breaches
// ---------------------------------------------------------------------------

fn cgroup_of(o: &Outcome) -> String {
    o.report["enforcement"]["cgroup"]
        .as_str()
        .unwrap_or("none")
        .to_owned()
}

fn limit_incidents(show: &Value) -> Vec<&Value> {
    incidents_of(show)
        .into_iter()
        .filter(|i| i["kind"] == "limit")
        .collect()
}

#[test]
fn memory_breach_ends_with_memory_limit_and_a_limit_incident() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(
        &w,
        &["--memory", "64MiB"],
        &[
            "python3",
            "-c",
            "b = []\nwhile True:\n    b.append(bytearray(8 << 20))",
        ],
    );
    let run = run_id(&o);
    let show = s.show(&run);
    assert_run_shape(&show, &run);
    let end = &one(&show, "run_ended")["body"];
    if cgroup_of(&o) == "none" {
        eprintln!("NOTE: no cgroup here; checking the rlimit (address space) behaviour");
        assert_eq!(end["reason"], "exited", "{end}");
        assert_eq!(end["exit_code"], 1, "{end}");
        assert!(
            end["stderr"]["excerpt"]
                .as_str()
                .unwrap_or("")
                .contains("MemoryError"),
            "{end}"
        );
    } else {
        assert_eq!(o.code, 137, "{}", o.stderr);
        assert_eq!(end["reason"], "memory_limit", "{end}");
        assert_eq!(end["signal"], libc::SIGKILL, "{end}");
        let lim = limit_incidents(&show);
        assert_eq!(lim.len(), 1, "{lim:#?}");
        assert_eq!(lim[0]["severity"], "medium");
        assert_eq!(lim[0]["evidence"]["limit"], 64u64 << 20);
        assert!(u(&lim[0]["evidence"]["oom_kills"]) >= 1, "{}", lim[0]);
        assert!(
            lim[0]["summary"]
                .as_str()
                .unwrap_or("")
                .starts_with("memory limit: "),
            "{}",
            lim[0]
        );
        assert!(u(&end["peak_memory_bytes"]) > 32 << 20, "{end}");
    }
    s.assert_verifies();
}

#[test]
fn pids_breach_is_a_limit_incident() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(
        &w,
        &["--pids", "16"],
        &[
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 64 ]; do sleep 20 & i=$((i+1)); done; echo forked",
        ],
    );
    let run = run_id(&o);
    let show = s.show(&run);
    assert_run_shape(&show, &run);
    let end = &one(&show, "run_ended")["body"];
    if cgroup_of(&o) == "none" {
        eprintln!("NOTE: no cgroup here; checking the RLIMIT_NPROC behaviour");
        assert!(
            o.stderr.contains("fork") || end["exit_code"] != 0,
            "{end} {}",
            o.stderr
        );
    } else {
        assert_eq!(end["reason"], "pids_limit", "{end}");
        let lim = limit_incidents(&show);
        assert_eq!(lim.len(), 1, "{lim:#?}");
        assert_eq!(lim[0]["severity"], "medium");
        assert_eq!(lim[0]["evidence"]["limit"], 16);
        assert!(u(&lim[0]["evidence"]["hits"]) >= 1, "{}", lim[0]);
        assert!(
            lim[0]["summary"]
                .as_str()
                .unwrap_or("")
                .starts_with("process limit hit"),
            "{}",
            lim[0]
        );
    }
    s.assert_verifies();
}

#[test]
fn deadline_is_a_limit_incident_and_the_end_says_timeout() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(&w, &["--timeout", "1s"], &["sleep", "30"]);
    assert_eq!(o.code, 124, "{}", o.stderr);
    let run = run_id(&o);
    let show = s.show(&run);
    assert_run_shape(&show, &run);
    let end = &one(&show, "run_ended")["body"];
    assert_eq!(end["reason"], "timeout");
    assert_eq!(end["exit_code"], 124);
    let wall = u(&end["wall_ms"]);
    assert!((1000..10_000).contains(&wall), "{end}");
    let lim = limit_incidents(&show);
    assert_eq!(lim.len(), 1, "{lim:#?}");
    assert_eq!(lim[0]["severity"], "low");
    assert_eq!(lim[0]["summary"], "wall-clock deadline reached");
    assert_eq!(lim[0]["evidence"]["limit_seconds"], 1.0);
    s.assert_verifies();
}

#[test]
fn output_cut_is_a_limit_incident_and_the_end_counts_what_was_dropped() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(
        &w,
        &["--output", "100"],
        &["python3", "-c", "print('x' * 1000)"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout.len(), 100);
    let run = run_id(&o);
    let show = s.show(&run);
    assert_run_shape(&show, &run);
    let end = &one(&show, "run_ended")["body"];
    assert_eq!(end["reason"], "exited");
    assert_eq!(end["stdout"]["kept_bytes"], 100);
    assert_eq!(end["stdout"]["dropped_bytes"], 901);
    assert_eq!(end["stdout"]["excerpt"], "x".repeat(100));
    let lim = limit_incidents(&show);
    assert_eq!(lim.len(), 1, "{lim:#?}");
    assert_eq!(lim[0]["severity"], "low");
    assert_eq!(lim[0]["summary"], "output cut at its limit");
    assert_eq!(
        lim[0]["evidence"],
        serde_json::json!({"stdout_dropped": 901, "stderr_dropped": 0})
    );
    s.assert_verifies();
}

#[test]
fn file_size_breach_is_a_limit_incident() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(
        &w,
        &["--file-size", "1MiB"],
        &["/bin/sh", "-c", "exec head -c 2000000 /dev/zero > /tmp/big"],
    );
    assert_eq!(o.code, 128 + libc::SIGXFSZ, "{}", o.stderr);
    let run = run_id(&o);
    let show = s.show(&run);
    assert_run_shape(&show, &run);
    let end = &one(&show, "run_ended")["body"];
    assert_eq!(end["reason"], "file_size_limit", "{end}");
    assert_eq!(end["signal"], libc::SIGXFSZ, "{end}");
    let lim = limit_incidents(&show);
    assert_eq!(lim.len(), 1, "{lim:#?}");
    assert_eq!(lim[0]["severity"], "low");
    assert_eq!(lim[0]["summary"], "file size limit reached");
    assert_eq!(lim[0]["evidence"]["limit"], 1u64 << 20);
    s.assert_verifies();
}

/// `head` (a child of the shell) writes `bytes` to /tmp under a 1 MiB file
/// size limit; the run's outcome and its `audit show`.
fn head_under_a_file_size_limit(bytes: u64) -> (Outcome, Value) {
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(
        &w,
        &["--file-size", "1MiB"],
        &[
            "/bin/sh",
            "-c",
            &format!("head -c {bytes} /dev/zero > /tmp/out; echo head=$?"),
        ],
    );
    let show = s.show(&run_id(&o));
    (o, show)
}

#[test]
fn file_size_breach_by_a_child_process_is_a_limit_incident() {
    if ready() {
        return;
    }
    // The shell survives; its child `head` is killed by SIGXFSZ.
    let (o, show) = head_under_a_file_size_limit(2_000_000);
    assert_eq!(
        o.stdout,
        format!("head={}\n", 128 + libc::SIGXFSZ),
        "{}",
        o.stderr
    );
    let lim = limit_incidents(&show);
    assert_eq!(
        lim.len(),
        1,
        "no incident for the breach: {:?}",
        kinds(&show)
    );
}

#[test]
fn a_file_just_below_the_size_limit_is_no_incident() {
    if ready() {
        return;
    }
    // One byte short of the limit: nothing was cut.
    let (o, show) = head_under_a_file_size_limit((1 << 20) - 1);
    assert_eq!(o.stdout, "head=0\n", "{}", o.stderr);
    assert!(limit_incidents(&show).is_empty(), "{:?}", kinds(&show));
    assert_eq!(o.report["breaches"]["file_at_size_limit"], false);
}

/// A host directory under /tmp holding `sub/exact`, a file of 1 MiB.
fn a_file_of_1mib_in_a_directory_under_tmp() -> tempfile::TempDir {
    let host = tempfile::Builder::new()
        .prefix("cordon-bound-")
        .tempdir_in("/tmp")
        .expect("a directory under /tmp");
    std::fs::create_dir(host.path().join("sub")).expect("mkdir");
    std::fs::write(host.path().join("sub/exact"), vec![0u8; 1 << 20]).expect("write");
    host
}

/// The search for a file cut at the limit looks at the sandbox's own
/// scratch tmpfs, not into a directory bound under /tmp that happens to
/// hold a file of that size (a staged repository there was walked file by
/// file).
#[test]
fn a_file_of_the_limit_size_in_a_directory_bound_under_tmp_is_not_scratch() {
    if ready() {
        return;
    }
    let host = a_file_of_1mib_in_a_directory_under_tmp();
    let dir = host.path().to_string_lossy().into_owned();
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(&w, &["--file-size", "1MiB", "--ro", &dir], &["/bin/true"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.report["breaches"]["file_at_size_limit"], false,
        "{}",
        o.report
    );
}

/// The same for a declared path over /tmp itself (`--ro /tmp`, or a
/// working directory of /tmp): the sandbox then has no scratch /tmp of its
/// own, and the host's files there were walked (up to 40,000 entries, 25 ms
/// at the end of every such run) and one of the limit's size was reported
/// as a breach.
#[test]
fn a_file_of_the_limit_size_under_a_bind_over_tmp_itself_is_not_scratch() {
    if ready() {
        return;
    }
    let _host = a_file_of_1mib_in_a_directory_under_tmp();
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(&w, &["--file-size", "1MiB", "--ro", "/tmp"], &["/bin/true"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let breaches = &o.report["breaches"];
    assert_eq!(breaches["file_at_size_limit"], false, "{}", o.report);
    assert_eq!(breaches["tmp_full"], false, "{}", o.report);
}

#[test]
fn disk_full_in_tmp_is_a_limit_incident() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(
        &w,
        &["--tmp-size", "1MiB"],
        &[
            "/bin/sh",
            "-c",
            "head -c 4000000 /dev/zero > /tmp/fill; echo head=$?",
        ],
    );
    assert_eq!(o.stdout, "head=1\n", "{}", o.stderr);
    assert!(o.stderr.contains("No space left on device"), "{}", o.stderr);
    let show = s.show(&run_id(&o));
    let lim = limit_incidents(&show);
    assert_eq!(
        lim.len(),
        1,
        "no incident for the full disk: {:?}",
        kinds(&show)
    );
}

// ---------------------------------------------------------------------------
// Tampering
// ---------------------------------------------------------------------------

/// A store with three finished runs (two records each: seq 1..=6).
fn three_runs(w: &Workdir, s: &Store) -> Vec<String> {
    let mut runs = Vec::new();
    for i in 0..3 {
        let o = s.run(w, &[], &["/bin/sh", "-c", &format!("echo run {i}")]);
        assert_eq!(o.stdout, format!("run {i}\n"), "{}", o.stderr);
        runs.push(run_id(&o));
    }
    let all = s.export();
    let kinds: Vec<&str> = all.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "run_ended",
            "run_started",
            "run_ended",
            "run_started",
            "run_ended"
        ]
    );
    s.assert_verifies();
    runs
}

#[test]
fn editing_a_record_body_is_caught_and_named() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let runs = three_runs(&w, &s);
    // Make run 1 look as if it had failed.
    s.tamper(
        "UPDATE records SET body = replace(body, '\"exit_code\":0', '\"exit_code\":1') WHERE seq = 4;",
    );
    let show = s.show(&runs[1]);
    assert_eq!(
        one(&show, "run_ended")["body"]["exit_code"],
        1,
        "the edit took"
    );
    s.assert_tamper_found(
        4,
        &runs[1],
        "run_ended",
        "its content does not match its hash: the record was edited or forged",
    );
}

#[test]
fn editing_a_record_and_rehashing_it_breaks_the_next_link() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let runs = three_runs(&w, &s);
    // The attacker knows the hash format and fixes up the edited record
    // itself, but not its successors.
    let py = format!(
        r#"
import sqlite3, hashlib, struct
db = sqlite3.connect({db:?})
seq, t, run, kind, body, prev = db.execute("SELECT seq, time_ns, run_id, kind, body, prev_hash FROM records WHERE seq = 3").fetchone()
body = body.replace("echo run 1", "echo hello")
def lp(b): return struct.pack(">I", len(b)) + b
h = hashlib.sha256(b"cordon-audit/v1\n" + struct.pack(">Q", seq) + struct.pack(">q", t) + lp(run.encode()) + lp(kind.encode()) + lp(body.encode()) + bytes.fromhex(prev)).hexdigest()
print(body + "\n" + h)
"#,
        db = s.db_str()
    );
    let out = python_host(&[&py]);
    let (body, hash) = out.trim_end().rsplit_once('\n').expect("two lines");
    let body = body.replace('\'', "''");
    s.tamper(&format!(
        "UPDATE records SET body = '{body}', hash = '{hash}' WHERE seq = 3;"
    ));
    assert_eq!(
        one(&s.show(&runs[1]), "run_started")["body"]["argv"][2],
        "echo hello"
    );
    s.assert_tamper_found(
        4,
        &runs[1],
        "run_ended",
        "its prev_hash does not match the hash of seq 3",
    );
}

#[test]
fn deleting_a_record_is_caught_and_named() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let runs = three_runs(&w, &s);
    // Remove the end of run 1.
    s.tamper("DELETE FROM records WHERE seq = 4;");
    s.assert_tamper_found(
        5,
        &runs[2],
        "run_started",
        "follows seq 3: record 4 is missing (deleted)",
    );
}

#[test]
fn deleting_a_whole_run_and_renumbering_is_caught() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let runs = three_runs(&w, &s);
    // Remove run 1 entirely and close the gap in the numbering.
    s.tamper(
        "DELETE FROM records WHERE seq IN (3, 4);
         UPDATE records SET seq = seq - 2 WHERE seq > 4;",
    );
    s.assert_tamper_found(
        3,
        &runs[2],
        "run_started",
        "its prev_hash does not match the hash of seq 2",
    );
}

#[test]
fn reordering_records_is_caught_and_named() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let runs = three_runs(&w, &s);
    // Swap the end of run 0 with the start of run 1.
    s.tamper(
        "UPDATE records SET seq = -2 WHERE seq = 2;
         UPDATE records SET seq = 2 WHERE seq = 3;
         UPDATE records SET seq = 3 WHERE seq = -2;",
    );
    let all = s.export();
    assert_eq!(all[1]["run_id"], runs[1].as_str(), "the swap took");
    s.assert_tamper_found(
        2,
        &runs[1],
        "run_started",
        "its prev_hash does not match the hash of seq 1",
    );
}

#[test]
fn truncating_the_tail_is_caught_by_the_head_file() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let runs = three_runs(&w, &s);
    let head_before = std::fs::read(s.head_file()).expect("head file");
    // Cut run 2 off the end; the head file stays as it was.
    s.tamper("DELETE FROM records WHERE seq > 4;");
    assert_eq!(
        std::fs::read(s.head_file()).expect("head file"),
        head_before
    );
    s.assert_tamper_found(
        4,
        &runs[1],
        "run_ended",
        "the store ends here, but the head file says it ends at seq 6: records 5..=6 were cut off the end",
    );

    // A later run must not launder the cut: its write keeps the evidence.
    let o = s.run(&w, &[], &["/bin/true"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = s.verify(&[]);
    assert_eq!(v.code, 1, "the cut was forgotten: {}", v.stdout);
    assert!(
        v.stderr.contains("record seq 5 (kind head_mismatch)"),
        "{}",
        v.stderr
    );
    assert!(
        v.stderr.contains("did not match the head file"),
        "{}",
        v.stderr
    );
}

#[test]
fn truncating_and_deleting_the_head_file_is_caught() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    three_runs(&w, &s);
    s.tamper("DELETE FROM records WHERE seq > 4;");
    std::fs::remove_file(s.head_file()).expect("remove head file");
    let v = s.verify(&[]);
    assert_eq!(v.code, 1, "{}", v.stdout);
    assert!(v.stderr.contains("is missing"), "{}", v.stderr);
}

#[test]
fn a_consistent_rewrite_of_store_and_head_file_is_caught_by_an_anchor() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let runs = three_runs(&w, &s);
    let anchor = s.cli_ok(&["head"]).trim().to_owned();
    assert!(anchor.starts_with("6:"), "{anchor}");
    // Someone who can write both files edits run 0's exit and recomputes the
    // whole chain after it, then rewrites the head file to match.
    let py = format!(
        r#"
import sqlite3, hashlib, struct, json
path = {db:?}
db = sqlite3.connect(path)
triggers = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
for name, _ in triggers:
    db.execute("DROP TRIGGER " + name)
def lp(b): return struct.pack(">I", len(b)) + b
prev = "0" * 64
for seq, t, run, kind, body in db.execute("SELECT seq, time_ns, run_id, kind, body FROM records ORDER BY seq").fetchall():
    if seq == 2:
        body = body.replace('"exit_code":0', '"exit_code":42')
    h = hashlib.sha256(b"cordon-audit/v1\n" + struct.pack(">Q", seq) + struct.pack(">q", t) + lp(run.encode()) + lp(kind.encode()) + lp(body.encode()) + bytes.fromhex(prev)).hexdigest()
    db.execute("UPDATE records SET body = ?, prev_hash = ?, hash = ? WHERE seq = ?", (body, prev, h, seq))
    prev = h
    last = seq
for _, sql in triggers:
    db.execute(sql)
db.commit()
db.close()
open(path + ".head", "w").write(json.dumps({{"version": 1, "head": {{"seq": last, "hash": prev}}}}) + "\n")
"#,
        db = s.db_str()
    );
    python_host(&[&py]);
    assert_eq!(
        one(&s.show(&runs[0]), "run_ended")["body"]["exit_code"],
        42,
        "the forgery took"
    );
    // Without an anchor the forgery is self-consistent (documented); the
    // anchor kept elsewhere catches it and names the record.
    let v = s.verify(&["--anchor", &anchor]);
    assert_eq!(v.code, 1, "{}", v.stdout);
    assert_eq!(v.report["problems"][0]["seq"], 6, "{}", v.report);
    assert!(
        v.stderr
            .contains(&format!("record seq 6 (run {}, kind run_ended)", runs[2])),
        "{}",
        v.stderr
    );
    assert!(
        v.stderr.contains("is not the anchored hash"),
        "{}",
        v.stderr
    );
}

#[test]
fn editing_the_stored_code_blob_is_caught() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let o = s.run(&w, &[], &["/bin/sh", "-c", "echo original"]);
    let run = run_id(&o);
    let code_hash = one(&s.show(&run), "run_started")["body"]["code_hash"]
        .as_str()
        .expect("code hash")
        .to_owned();
    s.tamper(&format!(
        "UPDATE blobs SET data = CAST('echo innocent' AS BLOB) WHERE hash = '{code_hash}';"
    ));
    let v = s.verify(&[]);
    assert_eq!(v.code, 1, "{}", v.stdout);
    assert!(
        v.stderr.contains(&format!(
            "blob {code_hash}: its content does not match its hash"
        )),
        "{}",
        v.stderr
    );
    // Deleting it instead names the record that referenced it.
    s.tamper(&format!("DELETE FROM blobs WHERE hash = '{code_hash}';"));
    let v = s.verify(&[]);
    assert_eq!(v.code, 1, "{}", v.stdout);
    assert!(
        v.stderr.contains(&format!(
            "record seq 1 (run {run}, kind run_started): references blob {code_hash}, which is missing (deleted)"
        )),
        "{}",
        v.stderr
    );
}

// ---------------------------------------------------------------------------
// Crash safety
// ---------------------------------------------------------------------------

#[test]
fn kill_9_of_cordon_mid_run_leaves_a_store_that_verifies() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    // One finished run before, so the killed run continues a chain.
    let first = s.run(&w, &[], &["/bin/true"]);
    assert_eq!(first.code, 0, "{}", first.stderr);

    let mark = marker("auditkill");
    let script = format!("sleep 30; echo {mark}");
    let mut child = Command::new(cordon_bin())
        .current_dir(w.path())
        .args(["run", "--audit", s.db_str(), "--stdin", "null", "--"])
        .args(["/bin/sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cordon");
    let supervisor = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    let killed_run = loop {
        let tail = s.cli(&["tail", "--json", "-n", "5"]);
        let found = String::from_utf8_lossy(&tail.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r["kind"] == "run_started" && r["body"]["argv"][2] == script);
        if let Some(r) = found {
            break r["run_id"].as_str().expect("run id").to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "run_started never became visible"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The workload is running (its shell carries the marker).
    assert!(
        !processes_with(&mark).is_empty(),
        "the workload is not running"
    );
    child.kill().expect("SIGKILL cordon");
    let status = child.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert_no_process_with(&mark);
    assert_nothing_left(supervisor);

    let v = s.assert_verifies();
    assert_eq!(v.report["records"], 3);
    let show = s.show(&killed_run);
    assert_eq!(kinds(&show), ["run_started"], "{show}");
    assert_eq!(show["code"]["text"], script);

    // The next run continues the chain, without a head_mismatch record.
    let next = s.run(&w, &[], &["/bin/sh", "-c", "echo after"]);
    assert_eq!(next.stdout, "after\n", "{}", next.stderr);
    let all = s.export();
    let kinds_all: Vec<&str> = all.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(
        kinds_all,
        [
            "run_started",
            "run_ended",
            "run_started",
            "run_started",
            "run_ended"
        ]
    );
    assert_eq!(all[3]["run_id"], run_id(&next).as_str());
    assert_eq!(all[3]["prev_hash"], all[2]["hash"]);
    let v = s.assert_verifies();
    assert_eq!(v.report["records"], 5);
}

// ---------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------

struct Secrets {
    github: String,
    aws: String,
    pem_body: String,
    pem: String,
    password: String,
}

fn secrets() -> Secrets {
    let github = format!("ghp_{}", "Zq7Rt2Lm9Xw4".repeat(3));
    assert_eq!(github.len(), 40);
    let aws = "AKIAQ7XJ3W5K2M9R4T6Y".to_owned();
    let pem_body = "MIIEowIBAAKCAQEAs3cr3tK3yM4t3r14lD0n0tL34k".to_owned();
    let pem = format!("-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n-----END RSA PRIVATE KEY-----");
    Secrets {
        github,
        aws,
        pem_body,
        pem,
        password: "hunter2xyz".to_owned(),
    }
}

fn assert_no_secret_in(what: &str, data: &[u8], s: &Secrets) {
    for needle in [&s.github, &s.aws, &s.pem_body, &s.password] {
        let found = data.windows(needle.len()).any(|w| w == needle.as_bytes());
        assert!(!found, "secret {needle:?} found in {what}");
    }
}

#[test]
fn secrets_in_output_argv_and_environment_never_reach_the_store() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let st = Store::new();
    let sec = secrets();
    // The code assembles the secrets at run time (so the code text does not
    // hold them whole) and prints them with those given in argv.
    let code = r#"
import sys, os
gh = "ghp_" + "Zq7Rt2Lm9Xw4" * 3
aws = "AKIA" + "Q7XJ3W5K2M9R4T6Y"
body = "MIIEowIBAAKCAQEAs3cr3tK3" + "yM4t3r14lD0n0tL34k"
pem = "-----BEGIN RSA PRIVATE KEY-----\n" + body + "\n-----END RSA PRIVATE KEY-----"
print("token:", gh)
print("aws_access_key_id =", aws)
print(pem)
print("password=" + "hunter2" + "xyz")
print("argv:", " ".join(sys.argv[1:]))
print("env:", os.environ.get("GITHUB_TOKEN"))
sys.stderr.write("stderr " + gh + " " + aws + "\n" + pem + "\n")
"#;
    let setenv = format!("GITHUB_TOKEN={}", sec.github);
    let pw = format!("password={}", sec.password);
    let o = st.run(
        &w,
        &["--setenv", &setenv],
        &["python3", "-c", code, &sec.github, &sec.aws, &pw, &sec.pem],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    // The workload really printed them.
    for needle in [&sec.github, &sec.aws, &sec.pem_body, &sec.password] {
        assert!(
            o.stdout.contains(needle.as_str()),
            "{needle} not printed: {}",
            o.stdout
        );
    }
    assert!(o.stdout.contains(&format!("env: {}", sec.github)));
    let run = run_id(&o);

    // What was stored is the redacted output, not nothing.
    let show = st.show(&run);
    let end = &one(&show, "run_ended")["body"];
    let excerpt = end["stdout"]["excerpt"].as_str().expect("excerpt");
    for marker in [
        "token: [REDACTED:github_token]",
        "[REDACTED:aws_access_key_id]",
        "[REDACTED:private_key]",
        "password=[REDACTED:password]",
    ] {
        assert!(excerpt.contains(marker), "{marker} not in {excerpt}");
    }
    assert_eq!(u(&end["stdout"]["kept_bytes"]), o.stdout.len() as u64);
    let argv = &one(&show, "run_started")["body"]["argv"];
    assert_eq!(argv[3], "[REDACTED:github_token]");
    assert_eq!(argv[5], "password=[REDACTED:password]");

    // Nowhere in the files of the store, nor in any export.
    let files = st.raw_files();
    assert!(files.iter().any(|(p, _)| p == &st.db));
    for (path, data) in &files {
        assert_no_secret_in(&path.display().to_string(), data, &sec);
    }
    let export = st.cli_ok(&["export", "--format", "jsonl"]);
    assert_no_secret_in("export", export.as_bytes(), &sec);
    assert_no_secret_in(
        "show --json",
        st.cli_ok(&["show", &run, "--json"]).as_bytes(),
        &sec,
    );
    assert_no_secret_in("show", st.cli_ok(&["show", &run]).as_bytes(), &sec);
    assert_no_secret_in("tail", st.cli_ok(&["tail", "--json"]).as_bytes(), &sec);
    st.assert_verifies();
}

#[test]
fn secrets_in_the_wal_of_a_live_store_never_appear() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let st = Store::new();
    let sec = secrets();
    // Create the store, then hold a reader open so the WAL is not
    // checkpointed away while the secret-printing run writes.
    assert_eq!(st.run(&w, &[], &["/bin/true"]).code, 0);
    let mut reader = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.execute('SELECT count(*) FROM records').fetchone()\nsys.stdin.read()",
            st.db_str(),
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("reader");
    std::thread::sleep(Duration::from_millis(300));
    let o = st.run(
        &w,
        &[],
        &[
            "/bin/sh",
            "-c",
            &format!(
                "echo {} {}; echo password={}",
                sec.github, sec.aws, sec.password
            ),
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let files = st.raw_files();
    let wal = files
        .iter()
        .find(|(p, _)| p.to_string_lossy().ends_with("-wal"))
        .map(|(_, d)| d.len())
        .unwrap_or(0);
    eprintln!("WAL bytes while a reader was open: {wal}");
    for (path, data) in &files {
        assert_no_secret_in(&path.display().to_string(), data, &sec);
    }
    drop(reader.stdin.take());
    let _ = reader.wait();
    st.assert_verifies();
}

#[test]
fn a_secret_cut_at_the_excerpt_boundary_is_not_stored_in_part() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let st = Store::new();
    let sec = secrets();
    // 16 KiB - 20 bytes of filler, a newline, then the token: the excerpt
    // ends 20 bytes into it ("ghp_" and 16 secret characters).
    let code = format!(
        "import sys\nsys.stdout.write('a' * (16 * 1024 - 21) + '\\n' + {:?} + '\\n')",
        sec.github
    );
    let o = st.run(&w, &[], &["python3", "-c", &code]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let show = st.show(&run_id(&o));
    let excerpt = one(&show, "run_ended")["body"]["stdout"]["excerpt"]
        .as_str()
        .expect("excerpt")
        .to_owned();
    // The excerpt is cut at a whitespace boundary at or below 16 KiB.
    assert!(
        excerpt.len() <= 16 * 1024 && excerpt.len() >= 16 * 1024 - 64,
        "excerpt of {} bytes",
        excerpt.len()
    );
    let part = &sec.github[..20];
    assert!(
        !excerpt.contains(part),
        "a prefix of the token was stored: ...{}",
        &excerpt[excerpt.len() - 30..]
    );
}

// ---------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------

#[test]
fn eight_concurrent_runs_on_one_store_lose_nothing() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let s = Store::new();
    let mut children = Vec::new();
    for i in 0..8 {
        let report = w.path().join(format!("report-{i}.json"));
        let child = Command::new(cordon_bin())
            .current_dir(w.path())
            .args(["run", "--audit", s.db_str(), "--stdin", "null", "--report"])
            .arg(&report)
            .args(["--", "/bin/sh", "-c", &format!("echo concurrent {i}")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cordon");
        children.push((i, report, child));
    }
    let mut runs = BTreeSet::new();
    for (i, report, child) in children {
        let pid = child.id();
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "run {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("concurrent {i}\n")
        );
        let r: Value =
            serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("json");
        runs.insert(r["run_id"].as_str().expect("run id").to_owned());
        assert_nothing_left(pid);
    }
    assert_eq!(runs.len(), 8);

    let all = s.export();
    assert_eq!(all.len(), 16, "{all:#?}");
    for (i, r) in all.iter().enumerate() {
        assert_eq!(u(&r["seq"]), i as u64 + 1);
        if i > 0 {
            assert_eq!(r["prev_hash"], all[i - 1]["hash"]);
        }
    }
    for run in &runs {
        let mine: Vec<&Value> = all.iter().filter(|r| r["run_id"] == run.as_str()).collect();
        let k: Vec<&str> = mine.iter().filter_map(|r| r["kind"].as_str()).collect();
        assert_eq!(k, ["run_started", "run_ended"], "run {run}");
        let argv = &mine[0]["body"]["argv"][2];
        let excerpt = &mine[1]["body"]["stdout"]["excerpt"];
        assert_eq!(
            excerpt.as_str().map(str::trim),
            argv.as_str().map(|a| a.trim_start_matches("echo ")),
            "run {run} ended with another run's output"
        );
    }
    let v = s.assert_verifies();
    assert_eq!(v.report["records"], 16);
    assert_eq!(v.report["head"]["seq"], 16);
}

// ---------------------------------------------------------------------------
// Turning auditing off
// ---------------------------------------------------------------------------

/// Runs with HOME and XDG_STATE_HOME pointed into `home`, so the default
/// store would land there.
fn run_with_home(w: &Workdir, home: &Path, flags: &[&str], cmd: &[&str]) -> Outcome {
    let state = home.join("state");
    w.run_with(flags, cmd, |c| {
        c.env("HOME", home)
            .env("XDG_STATE_HOME", &state)
            .env_remove("CORDON_AUDIT");
    })
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn no_audit_flag_writes_nothing() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let home = tempfile::tempdir().expect("home");
    let o = run_with_home(
        &w,
        home.path(),
        &["--no-audit"],
        &["/bin/sh", "-c", "echo quiet"],
    );
    assert_eq!(o.stdout, "quiet\n", "{}", o.stderr);
    assert!(o.report["incidents"].is_array(), "{}", o.report);
    assert_eq!(files_under(home.path()), Vec::<PathBuf>::new());
    // `--no-audit` still reports incidents, it just does not store them.
    let o = run_with_home(
        &w,
        home.path(),
        &["--no-audit", "--timeout", "300ms"],
        &["sleep", "5"],
    );
    assert_eq!(o.code, 124);
    assert_eq!(o.report["incidents"][0]["kind"], "limit", "{}", o.report);
    assert_eq!(files_under(home.path()), Vec::<PathBuf>::new());

    // Control: without the flag the same environment gets the default store.
    let o = run_with_home(&w, home.path(), &[], &["/bin/sh", "-c", "echo loud"]);
    assert_eq!(o.stdout, "loud\n", "{}", o.stderr);
    let db = home.path().join("state/cordon/audit.db");
    assert!(
        db.is_file(),
        "default store not at {}: {:?}",
        db.display(),
        files_under(home.path())
    );
    let out = Command::new(cordon_bin())
        .args(["audit", "verify"])
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env_remove("CORDON_AUDIT")
        .output()
        .expect("verify");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("ok: 2 records"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn profile_audit_disabled_writes_nothing_and_its_path_is_honoured_when_enabled() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let home = tempfile::tempdir().expect("home");
    let off_db = home.path().join("off/audit.db");
    let on_db = home.path().join("on/audit.db");
    let off = w.write(
        "off.toml",
        &format!(
            "extends = \"untrusted\"\n\n[audit]\nenabled = false\npath = {:?}\n",
            off_db.to_str().expect("utf8")
        ),
    );
    let on = w.write(
        "on.toml",
        &format!(
            "extends = \"untrusted\"\n\n[audit]\nenabled = true\npath = {:?}\n",
            on_db.to_str().expect("utf8")
        ),
    );
    let o = run_with_home(
        &w,
        home.path(),
        &["--profile", off.to_str().expect("utf8")],
        &["/bin/sh", "-c", "echo off"],
    );
    assert_eq!(o.stdout, "off\n", "{}", o.stderr);
    assert_eq!(files_under(home.path()), Vec::<PathBuf>::new());

    let o = run_with_home(
        &w,
        home.path(),
        &["--profile", on.to_str().expect("utf8")],
        &["/bin/sh", "-c", "echo on"],
    );
    assert_eq!(o.stdout, "on\n", "{}", o.stderr);
    assert!(on_db.is_file(), "{:?}", files_under(home.path()));
    assert!(!off_db.exists());
    assert!(
        !home.path().join("state").exists(),
        "default store used instead of the profile's"
    );
    let s = Store {
        dir: tempfile::tempdir().expect("unused"),
        db: on_db,
    };
    let show = s.show(&run_id(&o));
    assert_eq!(kinds(&show), ["run_started", "run_ended"]);
    let profile_name = one(&show, "run_started")["body"]["profile_name"]
        .as_str()
        .expect("profile name")
        .to_owned();
    assert!(profile_name.contains("on.toml"), "{profile_name}");
    s.assert_verifies();
}
