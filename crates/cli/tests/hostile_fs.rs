//! Hostile suite, filesystem and privileges: payloads that try to read host
//! secrets, write outside declared paths, reach host processes through
//! /proc, or gain privileges. Each asserts the safe outcome inside and the
//! host state afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

#[test]
fn host_secret_files_do_not_exist_inside() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    // A secret next to the working directory, and the classics.
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("id_rsa"), "PRIVATE KEY").expect("write");
    let script = format!(
        "for f in /etc/shadow /etc/sudoers /root/.bashrc {}/id_rsa /home /var/log /sys/kernel; do \
           if [ -e \"$f\" ]; then echo \"VISIBLE $f\"; fi; done; cat /etc/passwd",
        outside.path().display()
    );
    let o = w.sh(&[], &script);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !o.stdout.contains("VISIBLE"),
        "host paths visible: {}",
        o.stdout
    );
    // The synthesized passwd names only the sandbox's users.
    assert!(o.stdout.contains("sandbox:x:1000"), "{}", o.stdout);
    let host_users = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for line in host_users.lines().filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or("");
        if !["root", "nobody", "sandbox"].contains(&name) {
            assert!(
                !o.stdout.contains(&format!("{name}:")),
                "host user {name} leaked"
            );
        }
    }
}

#[test]
fn only_the_working_directory_of_its_parent_is_visible() {
    if ready() {
        return;
    }
    let parent = tempfile::tempdir().expect("tempdir");
    let cwd = parent.path().join("project");
    std::fs::create_dir(&cwd).expect("mkdir");
    std::fs::write(parent.path().join("sibling-secret.txt"), "secret").expect("write");
    let out = std::process::Command::new(cordon_bin())
        .current_dir(&cwd)
        .args([
            "run",
            "--",
            "/bin/sh",
            "-c",
            "ls -a ..; cat ../sibling-secret.txt",
        ])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("sibling-secret"),
        "sibling visible: {stdout}"
    );
    assert!(stdout.contains("project"));
    assert_ne!(out.status.code(), Some(0), "reading the sibling must fail");
}

#[test]
fn writes_outside_declared_paths_fail_and_leave_the_host_untouched() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    w.write("existing.txt", "original\n");
    let o = w.sh(
        &[],
        "for p in /usr/cordon-x /etc/cordon-x /cordon-x ./new.txt /proc/cordon-x /dev/cordon-x; do \
           (echo x > $p) 2>/dev/null && echo \"WROTE $p\"; done; \
         (echo changed > existing.txt) 2>/dev/null && echo WROTE existing; \
         rm -f existing.txt 2>/dev/null; touch /tmp/ok && echo tmp-ok",
    );
    assert!(!o.stdout.contains("WROTE"), "{}", o.stdout);
    assert!(
        o.stdout.contains("tmp-ok"),
        "/tmp must stay writable: {}",
        o.stdout
    );
    assert_eq!(
        std::fs::read_to_string(w.path().join("existing.txt")).expect("still there"),
        "original\n"
    );
    assert!(!w.path().join("new.txt").exists());
    for p in ["/usr/cordon-x", "/etc/cordon-x", "/cordon-x"] {
        assert!(!std::path::Path::new(p).exists(), "{p} created on the host");
    }
}

#[test]
fn cordon_binary_cannot_be_overwritten_through_proc_exe() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let before = std::fs::read(cordon_bin()).expect("read cordon");
    let prog = w.compile_c(
        "overwrite_exe",
        r#"
#include <stdio.h>
#include <fcntl.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
int main(void) {
    int wrote = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/exe", e->d_name);
        int fd = open(path, O_WRONLY);
        if (fd >= 0) { if (write(fd, "XXXX", 4) == 4) wrote = 1; close(fd); printf("opened %s\n", path); }
        else printf("%s: %s\n", path, strerror(errno));
    }
    /* init's memory and descriptors must be out of reach too */
    int mem = open("/proc/1/mem", O_RDONLY);
    printf("mem=%d fd1=%d\n", mem, open("/proc/1/fd/0", O_RDONLY));
    return wrote;
}
"#,
    );
    let o = w.run(&[], &[prog.to_str().expect("utf8")]);
    assert_eq!(
        o.code, 0,
        "the payload managed to write: {}{}",
        o.stdout, o.stderr
    );
    assert!(o.stdout.contains("/proc/1/exe"), "{}", o.stdout);
    assert!(
        !o.stdout.contains("opened /proc/1/exe"),
        "init's exe opened for writing: {}",
        o.stdout
    );
    assert!(
        o.stdout.contains("mem=-1 fd1=-1"),
        "init's memory or fds reachable: {}",
        o.stdout
    );
    assert_eq!(
        std::fs::read(cordon_bin()).expect("read cordon"),
        before,
        "cordon binary changed"
    );
}

#[test]
fn host_processes_are_invisible_in_proc() {
    if ready() {
        return;
    }
    let mark = marker("hostproc");
    let mut sleeper = std::process::Command::new("python3")
        .args(["-c", "import time; time.sleep(60)", &mark])
        .spawn()
        .expect("sleeper");
    let w = Workdir::new();
    let o = w.sh(
        &[],
        "ls /proc | grep -c '^[0-9]'; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '",
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let count: u32 = o
        .stdout
        .lines()
        .next()
        .unwrap_or("99")
        .trim()
        .parse()
        .unwrap_or(99);
    assert!(
        count <= 4,
        "more processes visible than the sandbox's own: {}",
        o.stdout
    );
    assert!(
        !o.stdout.contains(&mark),
        "host process visible: {}",
        o.stdout
    );
}

/// Kernel knobs under /proc a payload would write (opened for writing
/// only: nothing is ever written, so a failing layer changes nothing).
/// /proc/sysrq-trigger exists only where the kernel has magic SysRq.
fn proc_knobs() -> Vec<&'static str> {
    let mut knobs = vec![
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/vm/drop_caches",
    ];
    if std::path::Path::new("/proc/sysrq-trigger").exists() {
        knobs.push("/proc/sysrq-trigger");
    } else {
        eprintln!("note: this kernel has no /proc/sysrq-trigger; checking it is absent inside");
    }
    knobs
}

fn proc_knob_probe(w: &Workdir, layers_off: &str, knobs: &[&str]) -> Outcome {
    let mut code = PY_ATTEMPT.to_owned();
    for k in knobs {
        code.push_str(&format!("attempt({k:?}, lambda: open_for_write({k:?}))\n"));
    }
    code.push_str(
        "print('sysrq', os.path.exists('/proc/sysrq-trigger'))\n\
         print('sys', os.path.exists('/sys/kernel'))\n\
         print('kcore', len(open('/proc/kcore', 'rb').read(1)) if os.path.exists('/proc/kcore') else 'absent')\n",
    );
    let cmd = ["python3", "-c", &code];
    let o = if layers_off.is_empty() {
        w.run(&[], &cmd)
    } else {
        w.run_without(layers_off, &[], &cmd)
    };
    assert_eq!(o.code, 0, "{}", o.stderr);
    o
}

/// Layers: the read-only /proc/sys (and sysrq-trigger) mounts, and for a
/// non-root caller the kernel's own check of the global uid. /sys is
/// absent, /proc/kcore masked.
#[test]
fn proc_sys_and_sysrq_are_read_only_and_sys_is_absent() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let before = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let knobs = proc_knobs();
    let o = proc_knob_probe(&w, "", &knobs);
    for k in &knobs {
        let got = attempt_result(&o, k);
        if is_root() {
            assert_eq!(got, "EROFS", "{k}: {}", o.stdout);
        } else {
            assert!(got == "EROFS" || got == "EACCES", "{k}: {}", o.stdout);
        }
    }
    let host_sysrq = std::path::Path::new("/proc/sysrq-trigger").exists();
    assert!(
        o.stdout.contains(&format!("sysrq {}", if host_sysrq { "True" } else { "False" })),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("sys False"), "/sys visible: {}", o.stdout);
    // kcore is masked by /dev/null where the kernel has one.
    let kcore = if std::path::Path::new("/proc/kcore").exists() {
        "kcore 0"
    } else {
        "kcore absent"
    };
    assert!(o.stdout.contains(kcore), "kcore: {}", o.stdout);
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default(),
        before
    );
}

/// Layer: the read-only mount of /proc/sys, alone. The sandbox's uid is
/// host root when cordon runs as root, and /proc/sys checks only the
/// global uid, not capabilities; Landlock allows /proc. So the mount is
/// the only layer: with it off, the knobs open for writing (nothing is
/// written). Root only: for any other caller the kernel's uid check
/// refuses first, so the mount cannot be seen alone.
#[test]
fn root_only_proc_sys_is_read_only_by_its_mount_alone() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let knobs = proc_knobs();
    let o = proc_knob_probe(&w, "landlock,seccomp", &knobs);
    for k in &knobs {
        assert_eq!(attempt_result(&o, k), "EROFS", "{k}: {}", o.stdout);
    }
    let o = proc_knob_probe(&w, "mount-ro", &knobs);
    for k in &knobs {
        assert_eq!(
            attempt_result(&o, k),
            "ALLOWED",
            "control: without the mount {k} must open: {}",
            o.stdout
        );
    }
}

#[test]
fn setuid_binaries_do_not_raise_privileges() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    std::fs::create_dir(w.path().join("out")).expect("mkdir");
    let prog = w.compile_c(
        "whoami_caps",
        r#"
#include <stdio.h>
#include <unistd.h>
#include <sys/prctl.h>
int main(void) {
    FILE *f = fopen("/proc/self/status", "r"); char line[256];
    while (f && fgets(line, sizeof line, f)) if (line[0]=='C' && line[1]=='a' && line[2]=='p' && line[3]=='E') fputs(line, stdout);
    printf("euid=%d nnp=%d setuid0=%d\n", (int)geteuid(), prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), setuid(0));
    return 0;
}
"#,
    );
    // A setuid copy owned by the caller (root in CI: a setuid-root binary).
    let suid = w.path().join("out/suid");
    std::fs::copy(&prog, &suid).expect("copy");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    let o = w.run(&["--rw", "out"], &["./out/suid"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("CapEff:\t0000000000000000"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("euid=1000 nnp=1 setuid0=-1"),
        "{}",
        o.stdout
    );
    // Inside, the payload tries to make its own setuid file.
    let o = w.sh(
        &["--rw", "out"],
        "cp ./whoami_caps out/mine && chmod 4755 out/mine && ./out/mine",
    );
    assert!(o.stdout.contains("euid=1000"), "{}{}", o.stdout, o.stderr);
}

#[test]
fn device_nodes_are_minimal_and_cannot_be_created() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.py(
        &[],
        "import os\nprint(sorted(os.listdir('/dev')))\n\
         for path, dev in [('/tmp/sda', os.makedev(8,0)), ('/tmp/mem', os.makedev(1,1))]:\n\
         \ttry:\n\t\tos.mknod(path, 0o600 | 0o020000, dev); print('MADE', path)\n\
         \texcept OSError as e: print('mknod', e.errno)\n\
         print(open('/dev/null','w').write('x'), len(open('/dev/urandom','rb').read(8)))",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("['fd', 'full', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']"), "{}", o.stdout);
    assert!(!o.stdout.contains("MADE"), "{}", o.stdout);
    assert!(
        o.stdout.contains("mknod 1"),
        "mknod must fail with EPERM: {}",
        o.stdout
    );
    assert!(o.stdout.contains("1 8"), "{}", o.stdout);
}

#[test]
fn inherited_descriptors_and_cwd_do_not_leak() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let secret = tempfile::NamedTempFile::new().expect("secret");
    std::fs::write(secret.path(), "TOP-SECRET").expect("write");
    let file = std::fs::File::open(secret.path()).expect("open");
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // Clear CLOEXEC so cordon itself inherits it, as a careless parent would.
    rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty()).expect("fcntl");
    let o = w.sh(
        &[],
        &format!("ls /proc/self/fd; cat /proc/self/fd/{fd} 2>&1; cat <&{fd} 2>&1; echo done"),
    );
    drop(file);
    assert!(
        !o.stdout.contains("TOP-SECRET"),
        "inherited descriptor readable: {}",
        o.stdout
    );
    let fds: Vec<&str> = o
        .stdout
        .lines()
        .take_while(|l| l.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert!(
        fds.iter().all(|f| ["0", "1", "2", "3"].contains(f)),
        "unexpected fds: {fds:?}"
    );
}

#[test]
fn symlink_planted_in_a_writable_dir_cannot_redirect_a_later_mount() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    std::fs::create_dir(w.path().join("shared")).expect("mkdir");
    // A previous run left shared/data -> /etc.
    let o = w.sh(
        &["--rw", "shared"],
        "ln -s /etc shared/data && echo planted",
    );
    assert!(o.stdout.contains("planted"), "{}", o.stderr);
    // A later run asks for shared/data: cordon refuses to follow the link
    // and names the real location instead of silently exposing host /etc.
    let o = w.sh(&["--ro", "shared/data"], "cat /etc/shadow && echo SHADOW");
    assert_eq!(o.code, 125, "{}{}", o.stdout, o.stderr);
    assert!(!o.stdout.contains("SHADOW"));
    assert!(
        o.stderr.contains("symlink") && o.stderr.contains("/etc"),
        "{}",
        o.stderr
    );
    assert!(!std::path::Path::new("/etc/cordon-planted").exists());
}

/// Writes into the read-only working directory and the synthesized root
/// (no host path is written even if a layer fails: the cwd is the test's
/// own directory, the root a tmpfs of the sandbox).
const WRITES: &str = r#"
attempt("cwd-create", lambda: create("new.txt"))
attempt("cwd-write", lambda: open_for_write("existing.txt"))
attempt("cwd-unlink", lambda: os.unlink("existing.txt"))
attempt("cwd-mkdir", lambda: os.mkdir("newdir"))
attempt("root-create", lambda: create("/cordon-x"))
attempt("etc-create", lambda: create("/etc/cordon-x"))
"#;

const WRITE_LABELS: [&str; 6] = [
    "cwd-create",
    "cwd-write",
    "cwd-unlink",
    "cwd-mkdir",
    "root-create",
    "etc-create",
];

fn write_probe(w: &Workdir, layers_off: &str) -> Outcome {
    w.write("existing.txt", "original\n");
    let code = format!("{PY_ATTEMPT}{WRITES}");
    let o = w.run_without(layers_off, &[], &["python3", "-c", &code]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    o
}

/// Layer: read-only mounts. With Landlock off, the mount alone refuses
/// every write with EROFS; with the mount off too the same writes succeed
/// (so the probe can see a missing layer).
#[test]
fn read_only_mounts_alone_refuse_writes_with_erofs() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = write_probe(&w, "landlock");
    for label in WRITE_LABELS {
        assert_eq!(attempt_result(&o, label), "EROFS", "{label}: {}", o.stdout);
    }
    assert_eq!(
        std::fs::read_to_string(w.path().join("existing.txt")).expect("still there"),
        "original\n"
    );
    assert!(!w.path().join("new.txt").exists());

    let o = write_probe(&w, "landlock,mount-ro");
    for label in ["cwd-create", "cwd-write", "cwd-mkdir"] {
        assert_eq!(
            attempt_result(&o, label),
            "ALLOWED",
            "control: {label} with both layers off: {}",
            o.stdout
        );
    }
}

/// Layer: Landlock. With the read-only mounts off, Landlock alone refuses
/// the same writes with EACCES (for a working directory outside /tmp: see
/// the next test).
#[test]
fn landlock_alone_refuses_writes_with_eacces() {
    if ready() {
        return;
    }
    let w = Workdir::new_in("/var/tmp");
    landlock_alone_refuses_writes(&w);
}

/// Landlock grants the sandbox's /tmp in full, and a Landlock rule covers
/// everything beneath its path, mount points included: a read-only bind
/// that lies under /tmp (a project in /tmp) is read-only by its mount
/// alone. The same holds for a read-only path under a writable one.
#[test]
#[ignore = "BUG: a read-only bind under /tmp or under a writable bind is protected by its read-only mount alone (Landlock's /tmp rule covers it)"]
fn landlock_alone_refuses_writes_to_a_read_only_bind_under_tmp() {
    if ready() {
        return;
    }
    let w = Workdir::new_in(&std::env::temp_dir().to_string_lossy());
    landlock_alone_refuses_writes(&w);
}

fn landlock_alone_refuses_writes(w: &Workdir) {
    let o = write_probe(w, "mount-ro");
    for label in WRITE_LABELS {
        assert_eq!(attempt_result(&o, label), "EACCES", "{label}: {}", o.stdout);
    }
    assert_eq!(
        std::fs::read_to_string(w.path().join("existing.txt")).expect("still there"),
        "original\n"
    );
    assert!(!w.path().join("new.txt").exists());
    assert!(!w.path().join("newdir").exists());
}
