//! Hostile suite, resources: payloads that try to exhaust processes,
//! memory, disk, inodes, descriptors, output and CPU. Each must hit the
//! kernel-enforced limit inside the sandbox (cgroup where the report says
//! one was used, rlimits otherwise), end the way the report says, and leave
//! the host healthy with nothing of the sandbox running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::time::{Duration, Instant};

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

fn secs(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(-1.0)
}

/// Every process forks forever; nobody ever exits.
const FORK_BOMB: &str = r#"
#include <unistd.h>
int main(void) {
    for (;;) fork();
}
"#;

/// Forks children that wait, until fork is refused; prints how many it
/// got and the errno, then exits 1 (its children die with the sandbox).
const FORK_COUNT: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void) {
    int n = 0;
    for (int i = 0; i < 100000; i++) {
        pid_t p = fork();
        if (p == 0) { pause(); _exit(0); }
        if (p < 0) { printf("forked %d then %s\n", n, strerrorname_np(errno)); return 1; }
        n++;
    }
    printf("forked %d and never refused\n", n);
    return 0;
}
"#;

/// Host processes running `program` with `mark` as an argument (not the
/// cordon supervisor, whose own command line names both).
fn processes_running(program: &std::path::Path, mark: &str) -> usize {
    processes_with(mark)
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.split(|b| *b == 0).next() == Some(program.as_os_str().as_encoded_bytes())
        })
        .count()
}

#[test]
fn fork_bomb() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let bin = w.compile_c("forkbomb", FORK_BOMB);
    let mark = marker("forkbomb");
    let mut sleeper = HostSleeper::start();
    let start = Instant::now();
    let mut run = w.start(
        &["--pids", "32", "--timeout", "3s"],
        &[bin.to_str().expect("utf8"), &mark],
    );
    // Watch from the host: the bomb never has more than its 32 processes
    // (minus the sandbox's init, which counts too).
    let mut most = 0;
    while let Ok(None) = run.child.try_wait() {
        most = most.max(processes_running(&bin, &mark));
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = run.finish();
    assert_eq!(o.code, 124, "{}", o.stderr);
    assert_eq!(o.reason(), "timeout");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert!(most > 1, "the bomb never forked (saw {most})");
    assert!(most <= 31, "the host saw {most} bomb processes, limit 32");
    if cgroup_controls(&o, "pids") {
        assert!(
            o.report["breaches"]["pids_limit_hits"]
                .as_u64()
                .unwrap_or(0)
                > 0,
            "the pids cgroup never refused a fork: {}",
            o.report["breaches"]
        );
    }
    assert_no_process_with(&mark);
    assert!(sleeper.alive(), "the host sleeper died");
    assert_host_healthy();
}

#[test]
fn fork_until_refused() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let bin = w.compile_c("forkcount", FORK_COUNT);
    let mark = marker("forkcount");
    let o = w.run(&["--pids", "32"], &[bin.to_str().expect("utf8"), &mark]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let line = o.stdout.trim_end();
    let n: u32 = line
        .strip_prefix("forked ")
        .and_then(|r| r.strip_suffix(" then EAGAIN"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {line}"));
    // Init and the counter itself count against the limit too.
    assert!(
        (20..=31).contains(&n),
        "forked {n} children under --pids 32"
    );
    if cgroup_controls(&o, "pids") {
        assert_eq!(o.reason(), "pids_limit");
        assert!(
            o.report["breaches"]["pids_limit_hits"]
                .as_u64()
                .unwrap_or(0)
                > 0
        );
    } else {
        // RLIMIT_NPROC refuses the fork; the kernel keeps no counter, and
        // the report says "unknown", never "no refusal".
        assert_eq!(o.reason(), "exited");
        assert!(
            o.report["breaches"]["pids_limit_hits"].is_null(),
            "{}",
            o.report["breaches"]
        );
    }
    assert_eq!(o.report["limits"]["pids"], 32);
    assert_no_process_with(&mark);
    assert_host_healthy();
}

#[test]
fn memory_bomb() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("membomb");
    let mut sleeper = HostSleeper::start();
    // Up to 1 GiB in 16 MiB chunks, every page written.
    let code = r#"
import sys
chunks = []
try:
    for _ in range(64):
        chunks.append(b"\x01" * (16 << 20))
    print("allocated 1GiB")
except MemoryError:
    print("MemoryError after", len(chunks), "chunks")
    sys.exit(3)
"#;
    let o = w.run(&["--memory", "64MiB"], &["python3", "-c", code, &mark]);
    let limit = 64u64 << 20;
    assert_eq!(o.report["limits"]["memory"], limit);
    if cgroup_controls(&o, "memory") {
        assert_eq!(o.code, 137, "{}\n{}", o.stdout, o.stderr);
        assert_eq!(o.reason(), "memory_limit");
        assert!(o.report["breaches"]["oom_kills"].as_u64().unwrap_or(0) >= 1);
        let peak = o.report["peak_memory"].as_u64().unwrap_or(u64::MAX);
        assert!(peak <= limit, "peak {peak} above the limit {limit}");
        assert!(o.stdout.is_empty(), "{}", o.stdout);
    } else {
        // RLIMIT_AS: the allocation fails and Python reports it.
        assert_eq!(o.code, 3, "{}\n{}", o.stdout, o.stderr);
        assert_eq!(o.reason(), "exited");
        let n: u64 = o
            .stdout
            .trim_end()
            .strip_prefix("MemoryError after ")
            .and_then(|r| r.strip_suffix(" chunks"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected output: {}", o.stdout));
        assert!(n * (16 << 20) < limit, "{n} chunks of 16 MiB under 64 MiB");
        // No memory cgroup, no OOM counter: unknown, never 0.
        assert!(
            o.report["breaches"]["oom_kills"].is_null(),
            "{}",
            o.report["breaches"]
        );
    }
    assert_no_process_with(&mark);
    assert!(sleeper.alive(), "the host sleeper died (host OOM?)");
    assert_host_healthy();
}

#[test]
fn tmpfs_fill() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("tmpfill");
    let code = r#"
import errno, sys
path = "/tmp/" + sys.argv[1]
n = 0
try:
    with open(path, "wb") as f:
        while n < 100 << 20:
            f.write(b"x" * (1 << 20))
            f.flush()
            n += 1 << 20
    print("wrote", n)
except OSError as e:
    print("wrote", n, "then", errno.errorcode[e.errno])
"#;
    let o = w.run(&["--tmp-size", "8MiB"], &["python3", "-c", code, &mark]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let rest = o
        .stdout
        .trim_end()
        .strip_prefix("wrote ")
        .unwrap_or_else(|| panic!("{}", o.stdout));
    let (n, err) = rest.split_once(" then ").unwrap_or((rest, ""));
    assert_eq!(err, "ENOSPC", "{}", o.stdout);
    let n: u64 = n.parse().expect("bytes");
    assert!(n <= 8 << 20, "wrote {n} bytes into an 8 MiB /tmp");
    assert!(
        n >= 6 << 20,
        "only {n} bytes fit: /tmp is not the 8 MiB tmpfs"
    );
    // The sandbox's /tmp is not the host's.
    assert!(!std::path::Path::new("/tmp").join(&mark).exists());
    assert!(!w.path().join(&mark).exists());
    assert_no_process_with(&mark);
}

/// The profile key for /tmp's inode cap, as `cordon profile show` names
/// it, with its default value.
fn tmp_inodes_default() -> u64 {
    let out = std::process::Command::new(cordon_bin())
        .args(["profile", "show"])
        .output()
        .expect("cordon profile show");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("tmp_inodes = "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("profile show has no filesystem.tmp_inodes:\n{text}"))
}

const MAKE_FILES: &str = r#"
import errno, os
n = 0
try:
    while n < 1000000:
        os.close(os.open(f"/tmp/f{n}", os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
    print("created", n)
except OSError as e:
    print("created", n, "then", errno.errorcode[e.errno])
"#;

fn files_created(o: &Outcome) -> u64 {
    assert_eq!(o.code, 0, "{}", o.stderr);
    let rest = o
        .stdout
        .trim_end()
        .strip_prefix("created ")
        .and_then(|r| r.strip_suffix(" then ENOSPC"))
        .unwrap_or_else(|| panic!("expected ENOSPC: {}", o.stdout));
    rest.parse().expect("count")
}

#[test]
fn inode_exhaustion() {
    if ready() {
        return;
    }
    let default = tmp_inodes_default();
    let w = Workdir::new();
    let mark = marker("inodes");
    w.write(
        "inodes.toml",
        "extends = \"untrusted\"\n[filesystem]\ntmp_inodes = 256\n",
    );
    let o = w.run(
        &["--profile", "inodes.toml"],
        &["python3", "-c", MAKE_FILES, &mark],
    );
    let n = files_created(&o);
    assert!(
        (200..256).contains(&n),
        "created {n} files with tmp_inodes = 256"
    );
    // The default cap holds too (tiny files, so it is inodes, not bytes).
    let o = w.run(&[], &["python3", "-c", MAKE_FILES, &mark]);
    let n = files_created(&o);
    assert!(
        n < default && n + 64 >= default,
        "created {n} files with the default tmp_inodes = {default}"
    );
    assert_no_process_with(&mark);
}

#[test]
fn fd_exhaustion() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("fds");
    let code = r#"
import errno, os
fds = []
try:
    while len(fds) < 100000:
        fds.append(os.open("/dev/null", os.O_RDONLY))
    print("opened", len(fds))
except OSError as e:
    print("opened", len(fds), "highest", max(fds), errno.errorcode[e.errno])
"#;
    let o = w.run(&["--open-files", "64"], &["python3", "-c", code, &mark]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let words: Vec<&str> = o.stdout.split_whitespace().collect();
    assert_eq!(words.len(), 5, "{}", o.stdout);
    assert_eq!(words[3], "63", "the highest descriptor: {}", o.stdout);
    assert_eq!(words[4], "EMFILE", "{}", o.stdout);
    let n: u32 = words[1].parse().expect("count");
    assert!((50..=61).contains(&n), "opened {n} under --open-files 64");
    assert_eq!(o.report["limits"]["open_files"], 64);
    assert_no_process_with(&mark);
}

/// Resident peak of a process, from /proc/PID/status, in bytes.
fn vm_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[test]
fn output_flood() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("flood");
    let mut run = w.start(
        &["--output", "64KiB", "--timeout", "2s"],
        &["sh", "-c", "exec yes \"$0\"", &mark],
    );
    let pid = run.pid();
    let mut hwm = 0;
    while let Ok(None) = run.child.try_wait() {
        if let Some(h) = vm_hwm(pid) {
            hwm = hwm.max(h);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = run.finish();
    assert_eq!(o.code, 124, "{}", o.stderr);
    assert_eq!(o.reason(), "timeout");
    assert_eq!(o.stdout.len(), 65536);
    assert!(o.stdout.starts_with(&format!("{mark}\n")));
    assert_eq!(o.report["stdout"]["kept"], 65536);
    let dropped = o.report["stdout"]["dropped"].as_u64().unwrap_or(0);
    assert!(dropped > 1 << 20, "dropped only {dropped} bytes in 2 s");
    assert_eq!(o.report["breaches"]["output_truncated"], true);
    assert!(hwm > 0, "could not sample cordon's memory");
    assert!(
        hwm < 64 << 20,
        "cordon's resident peak grew to {hwm} bytes while dropping output"
    );
    assert_no_process_with(&mark);
}

#[test]
fn output_flood_with_kill_action() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("floodkill");
    let start = Instant::now();
    let o = w.run(
        &[
            "--output",
            "64KiB",
            "--on-output-limit",
            "kill",
            "--timeout",
            "60s",
        ],
        &["sh", "-c", "exec yes \"$0\"", &mark],
    );
    assert_eq!(o.code, 137, "{}", o.stderr);
    assert_eq!(o.reason(), "output_limit");
    assert_eq!(o.stdout.len(), 65536);
    assert_eq!(o.report["stdout"]["kept"], 65536);
    assert_eq!(o.report["limits"]["on_output_limit"], "kill");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the kill waited for the deadline: {:?}",
        start.elapsed()
    );
    assert_no_process_with(&mark);
}

#[test]
fn cpu_burn_ignoring_sigterm() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("termburn");
    let start = Instant::now();
    let o = w.run(
        &["--timeout", "1s"],
        &[
            "sh",
            "-c",
            "trap '' TERM INT HUP; (trap '' TERM INT HUP; while :; do :; done) & while :; do :; done",
            &mark,
        ],
    );
    assert_eq!(o.code, 124, "{}", o.stderr);
    assert_eq!(o.reason(), "timeout");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    assert_no_process_with(&mark);
    assert_host_healthy();
}

const CPU_BURN: &str = "while :; do :; done";

#[test]
fn cpu_time_limit_stops_a_burn() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("cpuburn");
    let start = Instant::now();
    let o = w.run(&["--cpu-time", "1s"], &["sh", "-c", CPU_BURN, &mark]);
    // RLIMIT_CPU ends it: SIGXCPU at the soft limit (SIGKILL would only
    // come at the hard limit, for a workload that catches SIGXCPU).
    assert_eq!(o.code, 128 + 24, "{}", o.stderr);
    assert_eq!(o.report["status"]["signal"], 24);
    // The report's times are rusage's (tick-sampled, scaled), which can
    // read a little under what RLIMIT_CPU counted.
    let cpu = secs(&o.report["user_time"]) + secs(&o.report["system_time"]);
    assert!(
        (0.5..2.5).contains(&cpu),
        "used {cpu} s of CPU under a 1 s limit"
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(secs(&o.report["limits"]["cpu_seconds"]), 1.0);
    assert_no_process_with(&mark);
}

#[test]
fn cpu_time_limit_is_reported_as_cpu_limit() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("cpulimit");
    let o = w.run(&["--cpu-time", "1s"], &["sh", "-c", CPU_BURN, &mark]);
    assert_eq!(o.reason(), "cpu_limit", "exit {}: {}", o.code, o.report);
    assert_no_process_with(&mark);
}

#[test]
fn file_size_limit() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    std::fs::create_dir(w.path().join("out")).expect("mkdir");
    let mark = marker("fsize");
    let big = w.path().join("out/big");
    // head does not catch SIGXFSZ: the kernel kills it at the limit.
    let o = w.run(
        &["--file-size", "1MiB", "--rw", "out"],
        &["sh", "-c", "exec head -c 10485760 /dev/zero > out/big"],
    );
    assert_eq!(o.code, 128 + 25, "{}", o.stderr);
    assert_eq!(o.reason(), "file_size_limit");
    let len = std::fs::metadata(&big).expect("host file").len();
    assert_eq!(len, 1 << 20, "the host file is {len} bytes");
    // Python ignores SIGXFSZ: the write fails with EFBIG instead.
    let code = r#"
import errno, sys
n = 0
try:
    with open("out/big2", "wb", buffering=0) as f:
        while n < 10 << 20:
            n += f.write(b"y" * 65536)
except OSError as e:
    print("wrote", n, errno.errorcode[e.errno])
"#;
    let o = w.run(
        &["--file-size", "1MiB", "--rw", "out"],
        &["python3", "-c", code, &mark],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("wrote {} EFBIG\n", 1 << 20));
    let len = std::fs::metadata(w.path().join("out/big2"))
        .expect("host file")
        .len();
    assert_eq!(len, 1 << 20, "the host file is {len} bytes");
    assert_no_process_with(&mark);
}

/// A burn that ignores SIGXCPU still ends: SIGKILL at the hard limit.
const CPU_BURN_IGNORING_XCPU: &str = "trap '' XCPU; while :; do :; done";

#[test]
fn cpu_burn_ignoring_sigxcpu() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("xcpuburn");
    let start = Instant::now();
    let o = w.run(
        &["--cpu-time", "1s"],
        &["sh", "-c", CPU_BURN_IGNORING_XCPU, &mark],
    );
    assert_eq!(o.code, 137, "{}", o.stderr);
    let cpu = secs(&o.report["user_time"]) + secs(&o.report["system_time"]);
    assert!(
        (0.5..3.5).contains(&cpu),
        "used {cpu} s of CPU under a 1 s limit"
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_no_process_with(&mark);
}

#[test]
fn cpu_burn_ignoring_sigxcpu_is_reported_as_cpu_limit() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("xcpulimit");
    let o = w.run(
        &["--cpu-time", "1s"],
        &["sh", "-c", CPU_BURN_IGNORING_XCPU, &mark],
    );
    assert_eq!(o.reason(), "cpu_limit", "exit {}: {}", o.code, o.report);
    assert_no_process_with(&mark);
}
