//! The jail as a library: `Spec` in, `Outcome` out, with real namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use cordon_jail::{run, Bind, CaptureSink, FileOverlay, RunOptions, Spec};

/// `run` clones without fork handlers, so no other thread of the process
/// may be inside the allocator (or hold any lock the child takes) at that
/// moment. The test harness runs tests on parallel threads: one sandbox
/// at a time here, while the harness's own threads only wait.
static ONE_SANDBOX_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    ONE_SANDBOX_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn userns() -> bool {
    let ok = cordon_jail::host::probe().user_namespaces.ok;
    if !ok {
        if std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_some() {
            panic!("user namespaces are required");
        }
        eprintln!("SKIPPED: user namespaces are unavailable on this host");
    }
    ok
}

fn spec(argv: &[&str]) -> Spec {
    let mut s = Spec::new(
        argv.iter().map(|a| a.to_string()).collect(),
        PathBuf::from("/tmp"),
    );
    s.limits.wall = Some(std::time::Duration::from_secs(20));
    s.limits.output = Some(1 << 20);
    s
}

#[test]
fn overlay_files_replace_bound_files_read_only() {
    let _one = exclusive();
    if !userns() {
        return;
    }
    let mut s = spec(&[
        "/bin/sh",
        "-c",
        "cat /etc/ssl/certs/ca-certificates.crt; cat /opt-new/file.txt; echo x > /etc/ssl/certs/ca-certificates.crt || echo ro; ls -a / | grep -c cordon-files",
    ]);
    s.files.push(FileOverlay {
        path: "/etc/ssl/certs/ca-certificates.crt".into(),
        contents: b"BUNDLE-PLUS-CA\n".to_vec(),
    });
    s.files.push(FileOverlay {
        path: "/opt-new/file.txt".into(),
        contents: b"NEW\n".to_vec(),
    });
    let mut out = CaptureSink::default();
    let o = run(
        &s,
        &mut out,
        RunOptions {
            forward_signals: false,
            ..Default::default()
        },
    )
    .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(o.exit_code, 1, "grep -c finds no staging dir: {stdout}");
    assert!(stdout.starts_with("BUNDLE-PLUS-CA\nNEW\n"), "{stdout}");
    assert!(stdout.contains("ro"), "overlay must be read-only: {stdout}");
    assert!(
        stdout.trim_end().ends_with('0'),
        "staging directory visible: {stdout}"
    );
    // The host's bundle is untouched.
    let host = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    assert!(!host.contains("BUNDLE-PLUS-CA"));
}

#[test]
fn capture_sink_and_binds_through_the_library() {
    let _one = exclusive();
    if !userns() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::write(dir.join("in.txt"), "library\n").expect("write");
    let mut s = spec(&["/bin/cat", "in.txt"]);
    s.cwd = dir.clone();
    s.binds.push(Bind {
        path: dir,
        writable: false,
    });
    let mut out = CaptureSink::default();
    let o = run(
        &s,
        &mut out,
        RunOptions {
            forward_signals: false,
            ..Default::default()
        },
    )
    .expect("run");
    assert_eq!(o.exit_code, 0);
    assert_eq!(out.stdout, b"library\n");
    assert_eq!(o.stdout.kept, 8);
}

#[test]
fn observe_notes_opened_written_created_and_executed_paths_and_lets_them_run() {
    let _one = exclusive();
    if !userns() {
        return;
    }
    use cordon_jail::Access;
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::write(dir.join("in.txt"), "observed\n").expect("write");
    let script = "cat in.txt; echo out > out.txt; mkdir newdir; cd newdir && cat ../in.txt > /dev/null; /bin/true";
    let mut s = spec(&["/bin/sh", "-c", script]);
    s.cwd = dir.clone();
    s.binds.push(Bind {
        path: dir.clone(),
        writable: true,
    });
    let options = || RunOptions {
        forward_signals: false,
        ..Default::default()
    };
    s.observe = true;
    let mut out = CaptureSink::default();
    let o = run(&s, &mut out, options()).expect("run");
    assert_eq!(o.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"observed\n", "observed calls must continue");
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "out\n"
    );
    let has = |path: PathBuf, access: Access| {
        o.observed
            .iter()
            .any(|p| p.path == path && p.access == access)
    };
    assert!(has(dir.join("in.txt"), Access::Read), "{:#?}", o.observed);
    assert!(has(dir.join("out.txt"), Access::Write), "{:#?}", o.observed);
    assert!(has(dir.join("newdir"), Access::Mkdir), "{:#?}", o.observed);
    // Relative to a cwd that changed inside.
    assert!(
        has(dir.join("newdir/../in.txt"), Access::Read),
        "{:#?}",
        o.observed
    );
    assert!(has("/bin/true".into(), Access::Exec), "{:#?}", o.observed);
    assert!(has("/bin/sh".into(), Access::Exec), "{:#?}", o.observed);
    assert!(o.observed_processes >= 2, "{}", o.observed_processes);

    // Without observe, nothing is noted.
    std::fs::remove_dir(dir.join("newdir")).expect("rmdir");
    s.observe = false;
    let o = run(&s, &mut CaptureSink::default(), options()).expect("run");
    assert_eq!(o.exit_code, 0);
    assert!(o.observed.is_empty(), "{:#?}", o.observed);
}

/// A server calls `run` many times in one process: each run must leave
/// no child behind (its sandbox, its janitor) and no descriptor open.
#[test]
fn repeated_runs_leave_no_child_and_no_descriptor() {
    let _one = exclusive();
    if !userns() {
        return;
    }
    // The children of this thread (the harness runs each test on its own).
    let children = || {
        std::fs::read_to_string("/proc/thread-self/children")
            .unwrap_or_default()
            .split_whitespace()
            .count()
    };
    let fds = || std::fs::read_dir("/proc/self/fd").expect("fd dir").count();
    let run_once = || {
        let o = run(
            &spec(&["/bin/true"]),
            &mut CaptureSink::default(),
            RunOptions {
                forward_signals: false,
                ..Default::default()
            },
        )
        .expect("run");
        assert_eq!(o.exit_code, 0);
    };
    run_once();
    let fds_before = fds();
    for i in 0..10 {
        run_once();
        assert_eq!(children(), 0, "children left after run {i}");
    }
    assert_eq!(fds(), fds_before, "descriptors left open");
}
