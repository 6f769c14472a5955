//! Hostile suite, teardown: payloads that try to outlive the sandbox or
//! reach processes outside it. When a run ends (normally, by signal, or
//! because the supervisor itself was SIGKILLed) no process of the sandbox
//! survives and no cgroup, mount or temporary directory is left; signals
//! from inside never reach host processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::path::Path;
use std::time::{Duration, Instant};

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

/// Host processes mentioning `mark` other than cordon's own (the
/// supervisor, its janitor and the sandbox's init carry cordon's command
/// line, which names the marker too).
fn workload_processes(mark: &str) -> Vec<u32> {
    let cordon = cordon_bin();
    processes_with(mark)
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.split(|b| *b == 0).next() != Some(cordon.as_os_str().as_encoded_bytes())
        })
        .collect()
}

/// Detaches the classic way: fork, setsid, fork again, ignore the
/// terminating signals, tell the test it is up, then wait forever.
const DAEMON: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (fork() != 0) return 0;
    setsid();
    if (fork() != 0) _exit(0);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    int fd = open(argv[2], O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) { write(fd, "up\n", 3); close(fd); }
    for (;;) pause();
}
"#;

#[test]
fn daemonized_orphans() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    std::fs::create_dir(w.path().join("out")).expect("mkdir");
    let daemon = w.compile_c("daemon", DAEMON);
    let mark = marker("orphans");
    let script = format!(
        r#"
{daemon} "$0" out/c-daemon
nohup sh -c 'echo up > out/nohup; sleep 300; :' "$0" >/dev/null 2>&1 &
python3 -c '
import os, sys, time
if os.fork(): sys.exit(0)
os.setsid()
if os.fork(): os._exit(0)
open("out/py-daemon", "w").write("up")
while True: time.sleep(60)
' "$0" &
for i in $(seq 100); do
    [ -e out/c-daemon ] && [ -e out/nohup ] && [ -e out/py-daemon ] && break
    sleep 0.05
done
echo daemons up
"#,
        daemon = daemon.display()
    );
    let o = w.run(&["--rw", "out"], &["sh", "-c", &script, &mark]);
    // Right after cordon returned, not after a grace period.
    let left = workload_processes(&mark);
    assert!(left.is_empty(), "daemons outlived the run: {left:?}");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "daemons up\n");
    for f in ["c-daemon", "nohup", "py-daemon"] {
        assert!(
            w.path().join("out").join(f).exists(),
            "daemon {f} never started, the test proves nothing"
        );
    }
    assert_no_process_with(&mark);
}

#[test]
fn supervisor_sigkilled_mid_run() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("supkill");
    let mut run = w.start(
        &[],
        &[
            "sh",
            "-c",
            "setsid sh -c 'sleep 300; :' \"$0\" & sh -c 'sleep 300; :' \"$0\" & sleep 300; :",
            &mark,
        ],
    );
    let pid = run.pid();
    let end = Instant::now() + Duration::from_secs(10);
    while workload_processes(&mark).len() < 3 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    // (A fork that has not exec'd yet may briefly make it four.)
    assert!(
        workload_processes(&mark).len() >= 3,
        "the workload never started: {}",
        run.stderr_so_far()
    );
    run.child.kill().expect("SIGKILL cordon");
    let killed = Instant::now();
    let _ = run.child.wait();
    let prefix = format!("cordon-{pid}-");
    loop {
        let procs = processes_with(&mark);
        let groups = cgroup_dirs_with_prefix(&prefix);
        if procs.is_empty() && groups.is_empty() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "2 s after cordon was SIGKILLed: processes {procs:?}, cgroups {groups:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(run);
    assert_nothing_left(pid);
}

/// The workload traps a signal, reports it and exits 3.
fn trapping(signal: &str) -> String {
    format!("trap 'echo got {signal}; exit 3' {signal}; echo ready; while :; do sleep 0.05; done")
}

fn forwarded(signal: rustix::process::Signal, name: &str) {
    let w = Workdir::new();
    let mark = marker(&format!("fwd{name}"));
    let mut run = w.start(&[], &["sh", "-c", &trapping(name), &mark]);
    assert!(
        run.wait_for_stdout("ready\n", Duration::from_secs(10)),
        "{}",
        run.stderr_so_far()
    );
    run.signal(signal);
    let o = run.finish();
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(o.stdout, format!("ready\ngot {name}\n"));
    assert_eq!(o.report["exit_code"], 3);
    assert_no_process_with(&mark);

    // A workload that does not trap it dies of it. (exec: a shell that is
    // waiting for a child it forked a moment ago can lose the signal in
    // the child before exec, a race of the shell's, not of cordon's.)
    let mut run = w.start(&[], &["sh", "-c", "echo ready; exec sleep 300", &mark]);
    assert!(run.wait_for_stdout("ready\n", Duration::from_secs(10)));
    run.signal(signal);
    let o = run.finish();
    assert_eq!(o.code, 128 + signal.as_raw(), "{}", o.stderr);
    assert_eq!(o.reason(), "interrupted");
    assert_no_process_with(&mark);
}

#[test]
fn sigterm_to_cordon_is_forwarded() {
    if ready() {
        return;
    }
    forwarded(rustix::process::Signal::TERM, "TERM");
}

#[test]
fn sigint_to_cordon_is_forwarded() {
    if ready() {
        return;
    }
    forwarded(rustix::process::Signal::INT, "INT");
}

#[test]
fn signals_from_inside_to_host_processes() {
    if ready() {
        return;
    }
    let mut sleeper = HostSleeper::start();
    let host_pid = sleeper.pid().to_string();
    let w = Workdir::new();
    let mark = marker("killall");
    // kill -9 -1 kills what it can see (its own child) and nothing else;
    // the host's pid does not exist inside.
    let script = r#"
sleep 300 &
child=$!
kill -9 -1; echo "kill -1: $?"
wait $child; echo "child: $?"
kill -9 "$1" 2>/dev/null; echo "kill host pid: $?"
python3 -c '
import errno, os, signal, sys
pid = int(sys.argv[1])
for what, f in [("kill", lambda: os.kill(pid, signal.SIGKILL)),
                ("kill pgrp", lambda: os.killpg(pid, signal.SIGKILL)),
                ("pidfd_open", lambda: os.pidfd_open(pid))]:
    try:
        f(); print(what, "ok")
    except OSError as e:
        print(what, errno.errorcode[e.errno])
' "$1"
"#;
    let o = w.run(&[], &["sh", "-c", script, &mark, &host_pid]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "kill -1: 0\nchild: 137\nkill host pid: 1\n\
         kill ESRCH\nkill pgrp ESRCH\npidfd_open ESRCH\n"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert!(sleeper.alive(), "the host sleeper was killed from inside");
    assert_no_process_with(&mark);
    assert_host_healthy();
}

fn mount_table() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The unique id of the mount namespace `path` names (`NS_GET_MNTNS_ID`,
/// Linux 6.8+). Unlike the inode number in `mnt:[N]`, which the kernel
/// hands to the next namespace as soon as one dies, it is never reused.
/// None where the kernel lacks it.
fn mount_namespace_id(path: &Path) -> Option<u64> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import fcntl, os, struct, sys\n\
             fd = os.open(sys.argv[1], os.O_RDONLY)\n\
             print(struct.unpack('Q', fcntl.ioctl(fd, 0x8008b705, bytes(8)))[0])",
        ])
        .arg(path)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Host processes in the mount namespace `ns` (`mnt:[N]`, with the unique
/// id `id` where the kernel has one), and host processes holding a
/// descriptor to it: either keeps its mounts alive. Processes the test
/// may not inspect are not counted (a sandbox's are always inspectable by
/// the user who started it).
fn holders_of_mount_namespace(ns: &str, id: Option<u64>) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let same = |p: std::path::PathBuf| {
            std::fs::read_link(&p).is_ok_and(|l| l.to_string_lossy() == ns)
                && (id.is_none() || mount_namespace_id(&p) == id)
        };
        if same(e.path().join("ns/mnt")) {
            found.push(format!("pid {pid} is in it"));
        }
        for fd in std::fs::read_dir(e.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if same(fd.path()) {
                found.push(format!("pid {pid} holds it as fd {:?}", fd.file_name()));
            }
        }
    }
    found
}

/// Layer: the sandbox's mounts live only in its mount namespace, which
/// dies with its last process. While the run lasts, the test sees that
/// namespace (with the sandbox's binds in it) from the host; afterwards
/// no process is in it or holds it, and the host's table gained nothing.
#[test]
fn no_mounts_left() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    std::fs::create_dir(w.path().join("out")).expect("mkdir");
    std::fs::create_dir(w.path().join("data")).expect("mkdir");
    let mark = marker("mounts");
    let before = mount_table();
    let mut run = w.start(
        &["--rw", "out", "--ro", "data", "--tmp-size", "4MiB"],
        &[
            "sh",
            "-c",
            "echo x > /tmp/$1; echo x > out/f; echo \"ns $(readlink /proc/self/ns/mnt)\"; \
             while [ ! -e out/go ]; do sleep 0.02; done",
            "sh",
            &mark,
        ],
    );
    assert!(
        run.wait_for_stdout("]\n", Duration::from_secs(20)),
        "{}",
        run.stderr_so_far()
    );
    let ns = run
        .stdout_so_far()
        .lines()
        .find_map(|l| l.strip_prefix("ns ").map(str::to_owned))
        .expect("namespace");
    // The witness: while the sandbox runs, its namespace and binds are
    // there to be seen.
    let holders = holders_of_mount_namespace(&ns, None);
    assert!(
        !holders.is_empty(),
        "the sandbox's namespace {ns} not found"
    );
    let pid: String = holders[0].split(' ').nth(1).expect("pid").to_owned();
    let id = mount_namespace_id(&Path::new("/proc").join(&pid).join("ns/mnt"));
    let inside = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let data = w.path().join("data").to_string_lossy().into_owned();
    assert!(
        inside.lines().any(|l| l.contains(&data)),
        "the read-only bind is not in the sandbox's table: {inside}"
    );
    std::fs::write(w.path().join("out/go"), "").expect("go");
    let o = run.finish();
    assert_eq!(o.code, 0, "{}", o.stderr);
    let holders = holders_of_mount_namespace(&ns, id);
    assert!(
        holders.is_empty(),
        "the sandbox's mount namespace {ns} outlived it: {holders:?}"
    );
    let after = mount_table();
    let dir = w.path().to_string_lossy().into_owned();
    let new: Vec<&String> = after
        .iter()
        .filter(|l| !before.contains(l))
        .filter(|l| l.contains(&dir) || l.contains("cordon"))
        .collect();
    assert!(new.is_empty(), "mounts left on the host: {new:?}");
    assert!(!Path::new("/tmp").join(&mark).exists());
    assert_no_process_with(&mark);
}

#[test]
fn process_level_private_tmp_is_removed() {
    let w = Workdir::new();
    let mark = marker("privtmp");
    let o = w.sh(
        &["--isolation", "process"],
        &format!("echo $TMPDIR; echo x > $TMPDIR/{mark} && echo written"),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut lines = o.stdout.lines();
    let tmp = lines.next().unwrap_or("").to_owned();
    assert_eq!(lines.next(), Some("written"), "{}", o.stdout);
    assert!(
        tmp.starts_with("/tmp/cordon-tmp-") || tmp.contains("/cordon-tmp-"),
        "TMPDIR at the process level: {tmp}"
    );
    assert!(!Path::new(&tmp).exists(), "{tmp} was left behind");
    assert_no_process_with(&mark);
}

/// The process level is the fallback for hosts without user namespaces,
/// where callers are rarely root: it must start without CAP_SETPCAP.
#[test]
fn process_level_without_root() {
    let w = Workdir::new();
    let mark = marker("procnonroot");
    let o = if is_root() {
        // Run cordon as nobody to reproduce what a non-root user gets.
        w.run_as_nobody(
            &["--isolation", "process", "--", "sh", "-c", "echo ok", &mark],
            &[],
        )
    } else {
        let o = w.sh(&["--isolation", "process"], "echo ok");
        (o.code, o.stdout, o.stderr)
    };
    assert_eq!(o.0, 0, "{}", o.2);
    assert_eq!(o.1, "ok\n");
    assert_no_process_with(&mark);
}
