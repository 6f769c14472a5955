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
