//! Hostile suite, system calls: each payload is a C program that calls the
//! dangerous interface directly (no libc wrapper can paper over it) and
//! prints the errno it got. The filter must answer EPERM (clone3: ENOSYS),
//! never crash the caller, and nothing may change on the host.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

const PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/sched.h>

static void report(const char *name, long ret) {
    printf("%s ret=%ld errno=%d\n", name, ret, ret == -1 ? errno : 0);
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    char buf[64] = {0};
    if (!strcmp(what, "mount")) {
        report("mount", mount("tmpfs", "/tmp", "tmpfs", 0, NULL));
        report("remount", mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL));
        report("umount", umount2("/proc", MNT_DETACH));
        report("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
        report("chroot", chroot("/tmp"));
    } else if (!strcmp(what, "newmount")) {
        report("fsopen", syscall(430 /* fsopen */, "tmpfs", 0));
        report("open_tree", syscall(428 /* open_tree */, AT_FDCWD, "/tmp", 1 /* OPEN_TREE_CLONE */));
        report("move_mount", syscall(429, -1, "", AT_FDCWD, "/tmp", 4));
        report("fspick", syscall(433, AT_FDCWD, "/", 0));
        report("mount_setattr", syscall(442, AT_FDCWD, "/", 0, NULL, 0));
    } else if (!strcmp(what, "userns")) {
        report("unshare_user", unshare(CLONE_NEWUSER));
        report("unshare_net", unshare(CLONE_NEWNET));
        report("unshare_mnt", unshare(CLONE_NEWNS));
        report("clone_newuser", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
        report("clone_newpid", syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0));
        report("setns", setns(0, 0));
    } else if (!strcmp(what, "clone3")) {
        struct clone_args args; memset(&args, 0, sizeof args);
        args.flags = CLONE_NEWUSER; args.exit_signal = SIGCHLD;
        report("clone3", syscall(435, &args, sizeof args));
    } else if (!strcmp(what, "kernel")) {
        report("io_uring_setup", syscall(425, 8, buf));
        report("bpf", syscall(SYS_bpf, 0, buf, 48));
        report("perf_event_open", syscall(SYS_perf_event_open, buf, 0, -1, -1, 0));
        report("userfaultfd", syscall(SYS_userfaultfd, 0));
    } else if (!strcmp(what, "ptrace")) {
        pid_t child = fork();
        if (child == 0) { pause(); _exit(0); }
        report("ptrace_attach", syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, child, 0, 0));
        report("ptrace_traceme", syscall(SYS_ptrace, 0, 0, 0, 0));
        struct iovec local = { buf, 8 }, remote = { buf, 8 };
        report("process_vm_readv", syscall(SYS_process_vm_readv, child, &local, 1, &remote, 1, 0));
        report("process_vm_writev", syscall(SYS_process_vm_writev, child, &local, 1, &remote, 1, 0));
        report("pidfd_getfd", syscall(438, 0, 0, 0));
        kill(child, SIGKILL);
    } else if (!strcmp(what, "keys")) {
        report("add_key", syscall(SYS_add_key, "user", "cordon", "x", 1, -2 /* session */));
        report("keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3, 1));
        report("request_key", syscall(SYS_request_key, "user", "cordon", NULL, 0));
    } else if (!strcmp(what, "machine")) {
        report("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
        report("init_module", syscall(SYS_init_module, buf, 1, ""));
        report("finit_module", syscall(SYS_finit_module, 0, "", 0));
        report("delete_module", syscall(SYS_delete_module, "ext4", 0));
        report("reboot", syscall(SYS_reboot, 0xfee1dead, 672274793, 0x4321fedc, NULL));
        report("swapon", syscall(SYS_swapon, "/tmp/x", 0));
        report("acct", syscall(SYS_acct, "/tmp/x"));
        report("settimeofday", syscall(SYS_settimeofday, NULL, NULL));
        report("syslog", syscall(SYS_syslog, 3, buf, sizeof buf));
    } else if (!strcmp(what, "handles")) {
        report("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, buf, 0));
        report("name_to_handle_at", syscall(SYS_name_to_handle_at, AT_FDCWD, "/", buf, buf, 0));
    } else if (!strcmp(what, "tty")) {
        char c = 'x';
        report("tiocsti", ioctl(0, TIOCSTI, &c));
        report("tiocsti_highbits", syscall(SYS_ioctl, 0, 0x100000000UL | TIOCSTI, &c));
        report("tioclinux", ioctl(0, TIOCLINUX, &c));
    } else if (!strcmp(what, "x32")) {
        fflush(stdout);
        long r = syscall(0x40000000 | SYS_getpid);
        report("x32_getpid", r);
    } else if (!strcmp(what, "hostname")) {
        report("sethostname", sethostname("pwned", 5));
        gethostname(buf, sizeof buf);
        printf("hostname=%s\n", buf);
    }
    return 0;
}
"#;

/// Compile the probe and run one of its sections in the sandbox.
fn probe(section: &str) -> Outcome {
    let w = Workdir::new();
    let bin = w.compile_c("probe", PROBE);
    w.run(
        &["--stdin", "inherit"],
        &[bin.to_str().expect("utf8"), section],
    )
}

fn assert_errno(out: &Outcome, names: &[&str], errno: i32) {
    for name in names {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not reported: {}{}", out.stdout, out.stderr));
        assert_eq!(
            line,
            format!("{name} ret=-1 errno={errno}"),
            "{name}: {}",
            out.stdout
        );
    }
}

#[test]
fn mount_remount_unmount_pivot_and_chroot_are_refused() {
    if ready() {
        return;
    }
    let o = probe("mount");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_errno(
        &o,
        &["mount", "remount", "umount", "pivot_root", "chroot"],
        libc::EPERM,
    );
}

#[test]
fn the_new_mount_api_is_refused() {
    if ready() {
        return;
    }
    let o = probe("newmount");
    assert_errno(
        &o,
        &[
            "fsopen",
            "open_tree",
            "move_mount",
            "fspick",
            "mount_setattr",
        ],
        libc::EPERM,
    );
}

#[test]
fn nested_namespaces_are_refused() {
    if ready() {
        return;
    }
    let o = probe("userns");
    assert_errno(
        &o,
        &[
            "unshare_user",
            "unshare_net",
            "unshare_mnt",
            "clone_newuser",
            "clone_newpid",
            "setns",
        ],
        libc::EPERM,
    );
}

#[test]
fn clone3_answers_enosys_so_libc_falls_back_and_threads_still_work() {
    if ready() {
        return;
    }
    let o = probe("clone3");
    assert_errno(&o, &["clone3"], libc::ENOSYS);
    let w = Workdir::new();
    let o = w.py(&[], "import threading\nr=[]\nts=[threading.Thread(target=r.append,args=(i,)) for i in range(8)]\n[t.start() for t in ts]\n[t.join() for t in ts]\nprint(sorted(r))");
    assert_eq!(o.stdout.trim(), "[0, 1, 2, 3, 4, 5, 6, 7]", "{}", o.stderr);
}

#[test]
fn io_uring_bpf_perf_and_userfaultfd_are_refused() {
    if ready() {
        return;
    }
    let o = probe("kernel");
    assert_errno(
        &o,
        &["io_uring_setup", "bpf", "perf_event_open", "userfaultfd"],
        libc::EPERM,
    );
}

#[test]
fn ptrace_and_cross_process_memory_access_are_refused() {
    if ready() {
        return;
    }
    let o = probe("ptrace");
    assert_errno(
        &o,
        &[
            "ptrace_attach",
            "ptrace_traceme",
            "process_vm_readv",
            "process_vm_writev",
            "pidfd_getfd",
        ],
        libc::EPERM,
    );
}

#[test]
fn kernel_keyrings_are_refused() {
    if ready() {
        return;
    }
    let o = probe("keys");
    assert_errno(&o, &["add_key", "keyctl", "request_key"], libc::EPERM);
}

#[test]
fn kexec_modules_reboot_swap_acct_clock_and_syslog_are_refused() {
    if ready() {
        return;
    }
    let o = probe("machine");
    assert_errno(
        &o,
        &[
            "kexec_load",
            "init_module",
            "finit_module",
            "delete_module",
            "reboot",
            "swapon",
            "acct",
            "settimeofday",
            "syslog",
        ],
        libc::EPERM,
    );
}

#[test]
fn file_handles_that_bypass_the_mount_tree_are_refused() {
    if ready() {
        return;
    }
    let o = probe("handles");
    assert_errno(&o, &["open_by_handle_at", "name_to_handle_at"], libc::EPERM);
}

#[test]
fn terminal_injection_ioctls_are_refused_even_with_high_bits_set() {
    if ready() {
        return;
    }
    let o = probe("tty");
    assert_errno(
        &o,
        &["tiocsti", "tiocsti_highbits", "tioclinux"],
        libc::EPERM,
    );
}

#[test]
fn x32_system_calls_kill_the_process() {
    if ready() {
        return;
    }
    let o = probe("x32");
    assert_eq!(
        o.code,
        128 + libc::SIGSYS,
        "x32 call must be killed: {}{}",
        o.stdout,
        o.stderr
    );
    assert!(
        !o.stdout.contains("x32_getpid ret="),
        "x32 call returned: {}",
        o.stdout
    );
    assert_eq!(o.report["status"]["signal"], libc::SIGSYS);
}

#[test]
fn hostname_changes_stay_inside_and_are_refused() {
    if ready() {
        return;
    }
    let before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let o = probe("hostname");
    assert_errno(&o, &["sethostname"], libc::EPERM);
    assert!(o.stdout.contains("hostname=cordon"), "{}", o.stdout);
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default(),
        before
    );
}

#[test]
fn refused_calls_reach_the_supervisor_as_evidence() {
    if ready() {
        return;
    }
    let o = probe("keys");
    assert_errno(&o, &["add_key"], libc::EPERM);
    let calls = o.report["denied_calls"]
        .as_array()
        .expect("denied_calls in the report");
    let names: Vec<&str> = calls.iter().filter_map(|c| c["syscall"].as_str()).collect();
    for n in ["add_key", "keyctl", "request_key"] {
        assert!(names.contains(&n), "{n} not recorded: {names:?}");
    }
    assert_eq!(o.report["denied_calls_total"], 3);
    assert!(
        calls.iter().all(|c| c["pid"].as_u64().unwrap_or(0) > 1),
        "pids recorded: {calls:?}"
    );
    assert!(
        o.stderr
            .contains("3 syscall (add_key, keyctl, request_key)"),
        "{}",
        o.stderr
    );
}

/// The probe with `layers` turned off (the test switch of debug builds).
fn probe_without(layers: &str, section: &str) -> Outcome {
    let w = Workdir::new();
    let bin = w.compile_c("probe", PROBE);
    w.run_without(
        layers,
        &["--stdin", "inherit"],
        &[bin.to_str().expect("utf8"), section],
    )
}

/// Layer: the capabilities the workload lacks, alone. It is uid 1000
/// inside, not root, so it holds none after exec: with the filter off,
/// mount, umount, pivot_root, chroot, the new mount API and sethostname
/// still fail with EPERM. (The filter alone is proven by
/// `hostile_seccomp_table`, which requires every call in `denied_calls`.)
#[test]
fn mounts_and_hostname_are_refused_for_lack_of_capabilities_alone() {
    if ready() {
        return;
    }
    let o = probe_without("seccomp", "mount");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_errno(
        &o,
        &["mount", "remount", "umount", "pivot_root", "chroot"],
        libc::EPERM,
    );
    let o = probe_without("seccomp", "newmount");
    assert_errno(
        &o,
        &["fsopen", "open_tree", "move_mount", "fspick"],
        libc::EPERM,
    );
    let o = probe_without("seccomp", "hostname");
    assert_errno(&o, &["sethostname"], libc::EPERM);
    assert!(o.stdout.contains("hostname=cordon\n"), "{}", o.stdout);
}

/// Layer: `user.max_user_namespaces = 0` in the sandbox's own user
/// namespace, alone: with the filter off, a nested user namespace is
/// refused with ENOSPC (by unshare and by clone); the other namespaces
/// with EPERM for lack of CAP_SYS_ADMIN.
#[test]
fn nested_user_namespaces_are_refused_by_the_namespace_limit_alone() {
    if ready() {
        return;
    }
    let o = probe_without("seccomp", "userns");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_errno(&o, &["unshare_user", "clone_newuser"], libc::ENOSPC);
    assert_errno(
        &o,
        &["unshare_net", "unshare_mnt", "clone_newpid"],
        libc::EPERM,
    );
}

/// Pushes "id\n" into its stdin's input queue with TIOCSTI, as if typed at
/// the terminal: after cordon exits, the user's shell would run it.
const TIOCSTI_PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
int main(void) {
    const char *p;
    for (p = "id\n"; *p; p++)
        if (ioctl(0, TIOCSTI, p) != 0) { printf("tiocsti %s\n", strerrorname_np(errno)); return 0; }
    printf("tiocsti ALLOWED\n");
    return 0;
}
"#;

/// Runs `cordon run --stdin inherit -- PROBE` with a fresh pseudo-terminal
/// as its controlling terminal and stdin, then prints what is left in that
/// terminal's input queue (`queued b'...'`), cordon's stdout and stderr.
const ON_A_TERMINAL: &str = r#"
import fcntl, os, sys, termios, tty
master, slave = os.openpty()
tty.setraw(slave)
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
pid = os.fork()
if pid == 0:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    os.dup2(slave, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.execv(sys.argv[2], sys.argv[2:])
os.waitpid(pid, 0)
os.set_blocking(slave, False)
try:
    queued = os.read(slave, 100)
except BlockingIOError:
    queued = b""
print("queued", queued)
print(open(sys.argv[1]).read())
"#;

fn inject_on_a_terminal(w: &Workdir, probe: &std::path::Path, layers: &str) -> String {
    let log = w.path().join("terminal.log");
    let out = std::process::Command::new("python3")
        .args(["-c", ON_A_TERMINAL])
        .arg(&log)
        .arg(cordon_bin())
        .args(["run", "--no-audit", "--stdin", "inherit", "--"])
        .arg(probe)
        .env(DISABLE_LAYERS, layers)
        .current_dir(w.path())
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !layers.is_empty() {
        assert!(text.contains("layers turned off by"), "{text}");
    }
    text
}

/// Layers: seccomp (TIOCSTI refused by the filter) and a new session for
/// the workload (the kernel allows TIOCSTI only on the caller's
/// controlling terminal, and the workload has none), each alone. cordon
/// runs on a real terminal that is its controlling terminal; with both
/// layers off the workload's "id" lands in that terminal's input queue,
/// where the user's shell would read it after cordon exits.
#[test]
fn terminal_injection_is_stopped_by_seccomp_and_by_the_new_session_each_alone() {
    if ready() {
        return;
    }
    // Where the kernel refuses TIOCSTI to everyone, neither layer can be
    // seen alone (and there is nothing to inject).
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|v| v.trim() != "0")
        .unwrap_or(true);
    if skip_unless(
        legacy,
        "the kernel refuses TIOCSTI to everyone (dev.tty.legacy_tiocsti = 0)",
    ) {
        return;
    }
    let w = Workdir::new();
    let probe = w.compile_c("tiocsti", TIOCSTI_PROBE);
    for (alone, off) in [
        ("seccomp", "session"),
        ("new session", "seccomp"),
        ("both", ""),
    ] {
        let text = inject_on_a_terminal(&w, &probe, off);
        assert!(text.contains("tiocsti EPERM\n"), "{alone}: {text}");
        assert!(text.starts_with("queued b''\n"), "{alone}: {text}");
    }
    let text = inject_on_a_terminal(&w, &probe, "seccomp,session");
    assert!(
        text.contains("tiocsti ALLOWED\n") && text.starts_with("queued b'id\\n'\n"),
        "control: without both layers the injection must land: {text}"
    );
}
