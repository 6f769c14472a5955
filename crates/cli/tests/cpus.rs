//! A one-shot run is set up on one CPU (the supervisor, the init and the
//! janitor stay there), but the command and the supervisor's proxy threads
//! may use every CPU the caller may. Every test drives the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

/// The CPUs this test process may use, as `Cpus_allowed_list` writes them.
fn allowed_list(status: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_owned())
}

fn host_cpus() -> (String, usize) {
    let status = std::fs::read_to_string("/proc/self/status").expect("own status");
    let list = allowed_list(&status).expect("Cpus_allowed_list");
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (list, n)
}

/// Two CPUs at least, or there is nothing to hold and give back.
fn ready() -> bool {
    let (_, n) = host_cpus();
    skip_unless(
        n >= 2,
        &format!("this host lets the tests use {n} CPU; holding a run's setup on one needs two"),
    ) || skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

#[test]
fn the_command_may_use_every_cpu_the_caller_may() {
    if ready() {
        return;
    }
    let (list, n) = host_cpus();
    let w = Workdir::new();
    let count = "nproc; python3 -c 'import os; print(len(os.sched_getaffinity(0)))'";
    // (The process level's Landlock rules keep /proc/self/status from it.)
    for (level, script) in [
        (
            "namespaces",
            format!("grep Cpus_allowed_list /proc/self/status; {count}"),
        ),
        ("process", count.to_owned()),
    ] {
        let o = w.sh(&["--isolation", level], &script);
        assert_eq!(o.code, 0, "{level}: {}", o.stderr);
        let mut lines: Vec<&str> = o.stdout.lines().collect();
        if level == "namespaces" {
            assert_eq!(
                allowed_list(lines[0]).as_deref(),
                Some(list.as_str()),
                "{level}"
            );
            lines.remove(0);
        }
        assert_eq!(
            lines,
            [n.to_string(), n.to_string()],
            "{level}: nproc, Python's affinity"
        );
    }
}

#[test]
fn a_caller_held_to_one_cpu_stays_there() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = Command::new("taskset")
        .current_dir(w.path())
        .args(["-c", "1"])
        .arg(cordon_bin())
        .args(["run", "--no-audit", "--", "sh", "-c"])
        .arg("grep Cpus_allowed_list /proc/self/status; nproc")
        .output()
        .expect("taskset (util-linux)");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout, "Cpus_allowed_list:\t1\n1\n");
}

#[test]
fn the_egress_proxy_may_use_every_cpu() {
    if ready() {
        return;
    }
    let (list, _) = host_cpus();
    let w = Workdir::new();
    let mut run = w.start(
        &["--allow-net", "example.com"],
        &["sh", "-c", "echo started; sleep 30"],
    );
    assert!(
        run.wait_for_stdout("started", Duration::from_secs(20)),
        "{}",
        run.stderr_so_far()
    );
    let pid = run.pid();
    let mut threads = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let task = task.expect("task");
        let tid: u32 = task.file_name().to_string_lossy().parse().expect("tid");
        if tid == pid {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).expect("status");
        let name = status.lines().next().unwrap_or_default().to_owned();
        assert_eq!(
            allowed_list(&status).as_deref(),
            Some(list.as_str()),
            "thread {tid} ({name}) of the supervisor is held"
        );
        threads += 1;
    }
    assert!(threads > 0, "the proxy runs no thread of its own");
    run.signal(rustix::process::Signal::TERM);
    let o = run.finish();
    assert_ne!(o.code, 0, "the command was stopped: {}", o.stderr);
}

/// A session's init and the leaders it forks stay on one CPU as well; each
/// exec's command gets every CPU back.
#[test]
fn a_session_exec_may_use_every_cpu() {
    if ready() {
        return;
    }
    let (list, n) = host_cpus();
    let dir = tempfile::tempdir().unwrap();
    let _server = Stopped(Some(start_serve(dir.path(), &["--warm", "1"]).0));
    let socket = dir.path().join("cordon.sock");
    let cli = |args: &[&str]| {
        let o = Command::new(cordon_bin())
            .arg("sandbox")
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // One from the warm pool, one built for the request.
    for create in [&["create"][..], &["create", "--memory", "300M"][..]] {
        let (code, out, err) = cli(create);
        assert_eq!(code, 0, "{err}");
        let sb = out.trim().to_owned();
        for _ in 0..2 {
            let (code, out, err) = cli(&[
                "exec",
                &sb,
                "--",
                "sh",
                "-c",
                "grep Cpus_allowed_list /proc/self/status; nproc; \
                 python3 -c 'import os; print(len(os.sched_getaffinity(0)))'",
            ]);
            assert_eq!(code, 0, "{err}");
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 3, "{out}");
            assert_eq!(allowed_list(lines[0]).as_deref(), Some(list.as_str()));
            assert_eq!(
                lines[1..],
                [n.to_string(), n.to_string()],
                "nproc, Python's affinity"
            );
        }
        let (code, _, err) = cli(&["delete", &sb]);
        assert_eq!(code, 0, "{err}");
    }
}

/// A server stopped when the test ends, failed or not.
struct Stopped(Option<std::process::Child>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            stop_serve(c);
        }
    }
}
