//! Hostile payloads at the `process` isolation level (no namespaces: the
//! host's tree, processes and network stack are visible). Landlock, seccomp
//! and rlimits must hold the boundary on their own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

/// Attempts after `PY_ATTEMPT`.
const PROBE: &str = r#"
attempt("read-shadow", lambda: open("/etc/shadow").read())
attempt("list-root", lambda: os.listdir("/root"))
attempt("write-usr", lambda: open("/usr/cordon-proc-x", "w"))
attempt("write-host-tmp", lambda: open("/tmp/cordon-proc-escape", "w"))
attempt("write-tmpdir", lambda: open(os.path.join(os.environ["TMPDIR"], "ok"), "w").write("ok"))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
attempt("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
attempt("signal-init", lambda: os.kill(1, 0))
attempt("init-environ", lambda: open("/proc/1/environ", "rb").read())
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def unshare():
    if libc.unshare(0x10000000) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
attempt("unshare", unshare)
"#;

#[test]
fn landlock_seccomp_and_rlimits_hold_without_namespaces() {
    // Left by an earlier run only if Landlock failed then; this run must
    // not make them again.
    let _ = std::fs::remove_file("/tmp/cordon-proc-escape");
    let _ = std::fs::remove_file("/usr/cordon-proc-x");
    let w = Workdir::new();
    let code = format!("{PY_ATTEMPT}{PROBE}");
    let o = w.run(
        &["--no-audit", "--isolation", "process"],
        &["python3", "-c", &code],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let result = |name: &str| attempt_result(&o, name);
    for name in [
        "read-shadow",
        "list-root",
        "write-usr",
        "write-host-tmp",
        "init-environ",
    ] {
        assert_eq!(result(name), "EACCES", "{name}: {}", o.stdout);
    }
    assert_eq!(
        result("write-tmpdir"),
        "ALLOWED",
        "the private TMPDIR must be writable"
    );
    for name in ["tcp", "udp", "unix", "unshare"] {
        assert_eq!(result(name), "EPERM", "{name}: {}", o.stdout);
    }
    // Landlock's signal scoping (ABI 6+) refuses signals to processes
    // outside the sandbox.
    if landlock_abi() >= 6 {
        assert_eq!(result("signal-init"), "EPERM", "{}", o.stdout);
    }
    assert!(!std::path::Path::new("/tmp/cordon-proc-escape").exists());
    assert!(!std::path::Path::new("/usr/cordon-proc-x").exists());
    // The report says plainly that no namespaces were used.
    assert_eq!(o.report["enforcement"]["isolation"], "process");
    assert!(o.stderr.contains("not enforced"), "{}", o.stderr);
}

/// Forks up to `argv[1]` children (each waits), ends them, and says how
/// many it made and why it stopped.
const FORK_UP_TO: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int cap = argc > 1 ? atoi(argv[1]) : 0, n = 0, err = 0;
    pid_t kids[1024];
    if (cap > 1024) cap = 1024;
    for (; n < cap; n++) {
        pid_t p = fork();
        if (p == 0) { pause(); _exit(0); }
        if (p < 0) { err = errno; break; }
        kids[n] = p;
    }
    for (int i = 0; i < n; i++) kill(kids[i], SIGKILL);
    for (int i = 0; i < n; i++) waitpid(kids[i], NULL, 0);
    if (err) printf("forked %d then %s\n", n, strerrorname_np(err));
    else printf("forked %d and never refused\n", n);
    return 0;
}
"#;

/// Layer: rlimits (RLIMIT_NPROC), where the process limit has no pids
/// cgroup (the rootless pass; as root the pids cgroup counts the sandbox
/// alone and bounds the same loop). Without a user namespace the kernel
/// counts every process and thread of the caller's user against
/// RLIMIT_NPROC, so cordon sets it on top of what the user runs: a sandbox
/// whose user runs more than its limit elsewhere still forks (set to the
/// bare limit, its `sh` could not fork a pipeline), and a fork loop inside
/// still stops near the limit (without the limit it makes all 300).
#[test]
fn the_process_limit_counts_the_sandbox_not_the_users_other_processes() {
    let w = Workdir::new();
    let mut others: Vec<std::process::Child> = (0..40)
        .map(|_| {
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .expect("sleep")
        })
        .collect();
    let flags = ["--no-audit", "--isolation", "process", "--pids", "16"];
    let o = w.run(&flags, &["sh", "-c", "echo one | cat; echo two | cat"]);
    for p in &mut others {
        let _ = p.kill();
        let _ = p.wait();
    }
    assert_eq!(
        (o.code, o.stdout.as_str()),
        (0, "one\ntwo\n"),
        "with 40 other processes of its user: {}",
        o.stderr
    );

    let bin = w.compile_c("forkupto", FORK_UP_TO);
    let o = w.run(&flags, &[bin.to_str().expect("utf8"), "300"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let line = o.stdout.trim_end();
    let n: u32 = line
        .strip_prefix("forked ")
        .and_then(|r| r.strip_suffix(" then EAGAIN"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the loop was never refused: {line}"));
    // The user's processes that end during the run (other tests') leave
    // their room to the sandbox: near 16, never far past it.
    assert!(n <= 16 + 48, "forked {n} children under --pids 16");
    assert_eq!(o.report["limits"]["pids"], 16);
}
