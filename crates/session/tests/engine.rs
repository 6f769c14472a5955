//! The session engine against the real kernel: a spawner forked before
//! any thread, sandboxes with real namespaces, execs forked by the
//! sandbox's init.
//!
//! The spawner must be forked while the process has one thread, which the
//! default test harness does not allow: this file has its own `main`
//! (`harness = false`) and runs its cases one after another.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cordon_session::{
    CreateSession, EndCause, Engine, EngineConfig, EventKind, ExecRequest, ExitReason, Session,
    Spawner, StreamName,
};

fn spec() -> cordon_jail::Spec {
    let mut spec = cordon_jail::Spec::new(Vec::new(), PathBuf::from("/workspace"));
    spec.workspace = Some(PathBuf::from("/workspace"));
    spec.limits.pids = Some(256);
    spec.limits.memory = Some(512 << 20);
    spec
}

/// Another profile's shape: unix sockets allowed (a seccomp program of
/// its own).
fn unix_spec() -> cordon_jail::Spec {
    let mut spec = spec();
    spec.allow_unix_sockets = true;
    spec
}

fn req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        ..ExecRequest::default()
    }
}

async fn run(session: &Session, argv: &[&str]) -> (cordon_session::ExitInfo, String, String) {
    run_req(session, req(argv)).await
}

async fn run_req(session: &Session, r: ExecRequest) -> (cordon_session::ExitInfo, String, String) {
    let p = session
        .exec(r)
        .await
        .unwrap_or_else(|e| panic!("exec: {e}"));
    let exit = p.wait().await;
    let (events, done) = p.events_now(0);
    assert!(done, "all events delivered once it exited");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for e in events {
        if let EventKind::Output { stream, data } = e.kind {
            match stream {
                StreamName::Stdout => out.extend(data),
                StreamName::Stderr => err.extend(data),
            }
        }
    }
    (
        exit,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// Delete the session; panics if the engine cannot.
async fn delete(engine: &Engine, sb: &Session) -> cordon_session::Teardown {
    engine
        .destroy(sb.id(), EndCause::Deleted)
        .await
        .unwrap_or_else(|e| panic!("delete {}: {e}", sb.id()))
}

async fn create(engine: &Engine) -> Arc<Session> {
    engine
        .create(CreateSession {
            spec: spec(),
            idle_timeout: None,
            ttl: None,
            owner: "test".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("create: {e}"))
}

fn processes_named(name: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(name) {
            found.push(pid);
        }
    }
    found
}

async fn output_exit_code_and_state_across_execs(engine: &Engine) {
    let sb = create(engine).await;
    let (exit, out, err) = run(&sb, &["sh", "-c", "echo hi; echo oops >&2; exit 3"]).await;
    assert_eq!((exit.exit_code, exit.reason), (3, ExitReason::Exited));
    assert_eq!((out.as_str(), err.as_str()), ("hi\n", "oops\n"));

    let (exit, ..) = run(
        &sb,
        &["sh", "-c", "echo kept > /tmp/state; echo also > notes"],
    )
    .await;
    assert_eq!(exit.exit_code, 0);
    let (_, out, _) = run(&sb, &["cat", "/tmp/state", "/workspace/notes"]).await;
    assert_eq!(
        out, "kept\nalso\n",
        "files written by one exec (in /tmp and in the workspace, its cwd) are there for the next"
    );

    let mut with_stdin = req(&["tr", "a-z", "A-Z"]);
    with_stdin.stdin = Some(b"shout".to_vec());
    let (_, out, _) = run_req(&sb, with_stdin).await;
    assert_eq!(out, "SHOUT");

    let (exit, _, _) = run(&sb, &["no-such-command"]).await;
    assert_eq!(
        (exit.exit_code, exit.reason),
        (127, ExitReason::SetupFailed)
    );

    // Each exec is PID 2 of a namespace of its own, under its leader.
    let (_, out, _) = run(&sb, &["sh", "-c", "echo $$"]).await;
    assert_eq!(out, "2\n");

    // A death by a signal is named (a shell above the client sees 133).
    let (exit, ..) = run(&sb, &["sh", "-c", "kill -TRAP $$"]).await;
    assert_eq!(
        (exit.exit_code, exit.reason, exit.signal),
        (133, ExitReason::Signaled, Some(libc::SIGTRAP))
    );
    let msg = exit.message.unwrap_or_default();
    assert!(msg.contains("killed by signal 5 (SIGTRAP)"), "{msg}");
    // A runtime that cannot reserve its address space (as V8 reserves its
    // code range) aborts. That happens only where memory is RLIMIT_AS (the
    // rootless pass: 512 MiB), and then the message says so and how to
    // give room; under a memory cgroup (as root) the reservation succeeds.
    let reserve = "import mmap, os\ntry:\n    mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0)\nexcept OSError:\n    os.abort()\n";
    let (exit, _, err) = run(&sb, &["python3", "-c", reserve]).await;
    let msg = exit.message.clone().unwrap_or_default();
    match exit.exit_code {
        0 => assert!(!msg.contains("RLIMIT_AS"), "{msg}"),
        134 => assert!(
            msg.contains("killed by signal 6 (SIGABRT)")
                && msg.contains("RLIMIT_AS per process, no memory cgroup")
                && msg.contains("create the sandbox with more memory"),
            "{msg}"
        ),
        other => panic!("the reservation ended with {other}: {msg} {err}"),
    }
    // The session's counters, read from the files found when it was built
    // (as root this host gives every sandbox its groups; v1 names them
    // differently from v2). Three processes run: the init, a leader and
    // the command (or, between commands, a leader and a workload started
    // ahead for the next one, beside the last command's leader until it
    // is reaped).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let usage = sb.info().usage;
        assert!(usage.memory_bytes.is_some_and(|m| m > 0), "{usage:?}");
        assert!(usage.cpu_usec.is_some_and(|c| c > 0), "{usage:?}");
        assert!(
            usage.pids.is_some_and(|n| (1..=4).contains(&n)),
            "{usage:?}"
        );
        let p = sb
            .exec(req(&["sleep", "5"]))
            .await
            .unwrap_or_else(|e| panic!("exec: {e}"));
        // The counter follows: the init, the leader, sleep.
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while sb.info().usage.pids != Some(3) {
            let usage = sb.info().usage;
            assert!(std::time::Instant::now() < deadline, "{usage:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        p.kill().await;
        p.wait().await;
    }
    delete(engine, &sb).await;
}

/// A timeout kills the exec's whole tree, a daemon that left its process
/// group included, and the session lives on.
async fn timeout_kills_the_tree_not_the_session(engine: &Engine) {
    let sb = create(engine).await;
    // The marker is assembled by the shell, so only the daemon's own
    // command line holds it.
    let marker = "cordon-daemon-marker-4242";
    let mut r = req(&[
        "sh",
        "-c",
        "m=cordon-daemon; setsid sh -c \"sleep 1000; : $m-marker-4242\" & sleep 1000",
    ]);
    r.timeout = Some(Duration::from_millis(500));
    let p = sb.exec(r).await.unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!processes_named(marker).is_empty(), "the daemon ran");
    let exit = p.wait().await;
    assert_eq!((exit.exit_code, exit.timed_out), (124, true));
    for _ in 0..50 {
        if processes_named(marker).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        processes_named(marker).is_empty(),
        "the daemon died with its exec"
    );
    let (exit, out, _) = run(&sb, &["echo", "alive"]).await;
    assert_eq!(
        (exit.exit_code, out.as_str()),
        (0, "alive\n"),
        "the session lives on"
    );
    delete(engine, &sb).await;
}

/// A reader polling an exec's events while it ends never sees it done
/// without its `exited` event (the exit and its event are recorded
/// together): 300 short execs, each read in a tight loop on another
/// thread until the events say done.
async fn a_finished_exec_is_never_seen_without_its_exited_event(engine: &Engine) {
    let sb = create(engine).await;
    for i in 0..300 {
        let p = sb
            .exec(req(&["true"]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || loop {
                let (events, done) = p.events_now(0);
                if done {
                    return events;
                }
                std::hint::spin_loop();
            })
        };
        p.wait().await;
        let events = reader
            .join()
            .unwrap_or_else(|_| panic!("the reader panicked"));
        assert!(
            matches!(events.last().map(|e| &e.kind), Some(EventKind::Exited(_))),
            "exec {i}: done without `exited`: {events:?}"
        );
    }
    delete(engine, &sb).await;
}

/// What each event of a finished exec is, in order: `S`tarted, `O`utput,
/// `G`ap, `E`xited; and the output bytes kept.
fn shape(p: &cordon_session::Process) -> (String, usize) {
    let (events, done) = p.events_now(0);
    assert!(done);
    let mut shape = String::new();
    let mut bytes = 0;
    for e in events {
        let c = match e.kind {
            EventKind::Started { .. } => 'S',
            EventKind::Output { data, .. } => {
                bytes += data.len();
                'O'
            }
            EventKind::Gap { .. } => 'G',
            EventKind::Exited(_) => 'E',
        };
        if !shape.ends_with(c) {
            shape.push(c);
        }
    }
    (shape, bytes)
}

/// An exec's output beyond its buffer is dropped oldest first and the
/// re-attach says where (a gap right after `started`); the finished
/// execs of a session keep output only within the session's budget and
/// count (here 100,000 bytes and 3 execs), the newest kept: a long session
/// cannot grow the server's memory with every command's output.
async fn finished_execs_keep_output_within_the_budget(engine: &Engine) {
    let sb = create(engine).await;
    let print = |bytes: usize| {
        req(&[
            "sh",
            "-c",
            &format!("head -c {bytes} /dev/zero | tr '\\0' a"),
        ])
    };
    let big = sb
        .exec(print(300_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    big.wait().await;
    let (shape_of_big, kept) = shape(&big);
    assert_eq!(
        shape_of_big, "SGOE",
        "the dropped output is a gap where it was"
    );
    assert!(kept <= 64 << 10, "{kept} bytes kept of a 64 KiB buffer");
    let mut small = Vec::new();
    for i in 0..4 {
        let p = sb
            .exec(req(&["echo", &format!("out{i}")]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        p.wait().await;
        small.push(p);
    }
    // Five finished with output, three kept: the oldest two dropped.
    assert_eq!(shape(&big).0, "SGE");
    assert_eq!(shape(&small[0]).0, "SGE");
    for p in &small[1..] {
        assert_eq!(shape(p), ("SOE".to_string(), 5), "kept");
    }
    // Two of 60,000 bytes: over the budget, so everything older goes
    // until they fit, and then the older of the two.
    let a = sb
        .exec(print(60_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    a.wait().await;
    let b = sb
        .exec(print(60_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    b.wait().await;
    assert_eq!(shape(&a).0, "SGE");
    assert_eq!(shape(&b), ("SOE".to_string(), 60_000));
    for p in &small {
        assert_eq!(shape(p).0, "SGE");
    }
    let usage = sb.info().usage;
    assert_eq!((usage.execs_total, usage.execs_running), (7, 0));
    delete(engine, &sb).await;
}

/// Output can be read again from any point after the process is gone.
async fn reattach_after_exit(engine: &Engine) {
    let sb = create(engine).await;
    let p = sb
        .exec(req(&["sh", "-c", "for i in 1 2 3; do echo line$i; done"]))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    p.wait().await;
    let (all, done) = p.events_after(0).await;
    assert!(done);
    assert!(matches!(
        all.first().map(|e| &e.kind),
        Some(EventKind::Started { .. })
    ));
    assert!(matches!(
        all.last().map(|e| &e.kind),
        Some(EventKind::Exited(_))
    ));
    let second = all[1].seq;
    let (rest, _) = p.events_after(second).await;
    assert!(rest.iter().all(|e| e.seq > second));
    assert_eq!(rest.len(), all.len() - 2);
    delete(engine, &sb).await;
}

/// An abstract unix socket is reachable in its own network namespace
/// only. Run with Landlock off (its scoping refuses abstract sockets made
/// outside an exec's own domain, even in the same session; the case below
/// shows that), so the network namespace alone is what keeps sessions
/// apart here.
async fn network_namespace_keeps_abstract_sockets_apart(engine: &Engine) {
    let mut unix = spec();
    unix.allow_unix_sockets = true;
    let make = |spec: cordon_jail::Spec| CreateSession {
        spec,
        idle_timeout: None,
        ttl: None,
        owner: "t".into(),
    };
    let a = engine
        .create(make(unix.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let b = engine
        .create(make(unix))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // An abstract unix socket a listens on (a background exec).
    let listener = a
        .exec(ExecRequest {
            argv: ["python3", "-c", "import socket,time; s=socket.socket(socket.AF_UNIX); s.bind('\\0cordon-abstract'); s.listen(); print('up', flush=True); time.sleep(60)"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..ExecRequest::default()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (events, _) = listener.events_after(1).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Output { data, .. } if data.starts_with(b"up"))),
        "{events:?}"
    );
    let connect = "import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect('\\0cordon-abstract'); print('connected')\nexcept OSError as e: print('refused', e.errno)";
    let (_, out, _) = run(&a, &["python3", "-c", connect]).await;
    assert_eq!(out.trim(), "connected", "a reaches its own abstract socket");
    let (_, out, _) = run(&b, &["python3", "-c", connect]).await;
    assert!(
        out.starts_with("refused"),
        "b cannot reach a's abstract socket: {out}"
    );
    engine.shutdown().await;
}

/// Landlock's scoping on its own: with it on, a sibling exec of the same
/// session cannot reach the abstract socket either.
async fn landlock_scopes_abstract_sockets_to_their_exec(engine: &Engine) {
    let mut unix = spec();
    unix.allow_unix_sockets = true;
    let a = engine
        .create(CreateSession {
            spec: unix,
            idle_timeout: None,
            ttl: None,
            owner: "t".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let b = a.clone();
    // An abstract unix socket a listens on (a background exec).
    let listener = a
        .exec(ExecRequest {
            argv: ["python3", "-c", "import socket,time; s=socket.socket(socket.AF_UNIX); s.bind('\\0cordon-abstract'); s.listen(); print('up', flush=True); time.sleep(60)"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..ExecRequest::default()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (events, _) = listener.events_after(1).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Output { data, .. } if data.starts_with(b"up"))),
        "{events:?}"
    );
    let connect = "import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect('\\0cordon-abstract'); print('connected')\nexcept OSError as e: print('refused', e.errno)";
    let (_, out, _) = run(&a, &["python3", "-c", connect]).await;
    assert!(
        out.starts_with("refused"),
        "a sibling exec is refused by Landlock: {out}"
    );
    let (_, out, _) = run(&b, &["python3", "-c", connect]).await;
    assert!(
        out.starts_with("refused"),
        "b cannot reach a's abstract socket: {out}"
    );
    engine.shutdown().await;
}

/// Deleting a session leaves no process, and no cgroup.
async fn destroy_leaves_nothing(engine: &Engine) {
    let sb = create(engine).await;
    let marker = "cordon-destroy-marker-777";
    let mut r = req(&[
        "sh",
        "-c",
        "m=cordon-destroy; sh -c \"sleep 1000; : $m-marker-777\"",
    ]);
    r.keep_stdin_open = false;
    let _p = sb.exec(r).await.unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!processes_named(marker).is_empty());
    let teardown = delete(engine, &sb).await;
    assert!(teardown.clean, "groups removed");
    assert!(processes_named(marker).is_empty(), "nothing left running");
    assert!(engine.session(sb.id()).is_none());
    assert!(
        sb.exec(req(&["true"])).await.is_err(),
        "an ended session runs nothing"
    );
}

/// What one session leaves in /tmp, /dev/shm, SysV IPC or an abstract
/// unix socket is invisible to another (mount, IPC and network
/// namespaces of their own).
async fn sessions_do_not_share_tmp(engine: &Engine) {
    // Unix sockets allowed (seccomp refuses them by default): the network
    // namespace alone must keep the abstract socket apart.
    let mut unix = spec();
    unix.allow_unix_sockets = true;
    let make = |spec: cordon_jail::Spec| CreateSession {
        spec,
        idle_timeout: None,
        ttl: None,
        owner: "t".into(),
    };
    let a = engine
        .create(make(unix.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let b = engine
        .create(make(unix))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    run(
        &a,
        &[
            "sh",
            "-c",
            "echo secret > /tmp/a-only; echo secret > /dev/shm/a-only",
        ],
    )
    .await;
    let (exit, ..) = run(&b, &["test", "-e", "/tmp/a-only"]).await;
    assert_eq!(exit.exit_code, 1, "b does not see a's /tmp");
    let (exit, ..) = run(&b, &["test", "-e", "/dev/shm/a-only"]).await;
    assert_eq!(exit.exit_code, 1, "b does not see a's /dev/shm");

    // A SysV shared memory segment made in a.
    let (exit, out, err) = run(
        &a,
        &[
            "python3",
            "-c",
            "import ctypes; l=ctypes.CDLL(None); print(l.shmget(0x4242, 4096, 0o1666))",
        ],
    )
    .await;
    assert_eq!(exit.exit_code, 0, "{err}");
    assert!(
        out.trim().parse::<i64>().is_ok_and(|id| id >= 0),
        "a made a segment: {out}"
    );
    let probe = "import ctypes; l=ctypes.CDLL(None); print(l.shmget(0x4242, 0, 0o666))";
    let (_, out, _) = run(&a, &["python3", "-c", probe]).await;
    assert!(
        out.trim().parse::<i64>().is_ok_and(|id| id >= 0),
        "a finds its own segment"
    );
    let (_, out, _) = run(&b, &["python3", "-c", probe]).await;
    assert_eq!(out.trim(), "-1", "b cannot find a's segment");

    engine.shutdown().await;
    assert!(engine.sessions().is_empty());
}

/// A pooled sandbox built without binds takes the request's declared
/// paths (writable and read-only, reachable through Landlock, which was
/// computed for the base) and limits at claim time.
async fn pool_claim_gives_binds_and_limits(engine: &Engine) {
    let host = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rw = host.path().join("rw");
    let ro = host.path().join("ro");
    std::fs::create_dir_all(&rw).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(&ro).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(ro.join("given"), "from the host").unwrap_or_else(|e| panic!("{e}"));
    let mut s = spec();
    s.binds.push(cordon_jail::Bind {
        path: rw.clone(),
        writable: true,
    });
    s.binds.push(cordon_jail::Bind {
        path: ro.clone(),
        writable: false,
    });
    s.limits.pids = Some(12);
    // An overlay file (as a secret's CA bundle is), placed at claim time.
    s.files.push(cordon_jail::FileOverlay {
        path: PathBuf::from("/etc/cordon-late-file"),
        contents: b"late contents".to_vec(),
    });
    let before = engine.pool_stats();
    let sb = engine
        .create(CreateSession {
            spec: s,
            idle_timeout: None,
            ttl: None,
            owner: "t".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert_eq!(
        engine.pool_stats().hits,
        before.hits + 1,
        "served from the pool: {before:?} {:?}",
        engine.pool_stats()
    );
    let (exit, _, err) = run(
        &sb,
        &["sh", "-c", &format!("echo out > {}/made", rw.display())],
    )
    .await;
    assert_eq!(exit.exit_code, 0, "a late writable bind is writable: {err}");
    assert_eq!(
        std::fs::read_to_string(rw.join("made")).unwrap_or_default(),
        "out\n"
    );
    let (_, out, _) = run(&sb, &["cat", &format!("{}/given", ro.display())]).await;
    assert_eq!(out, "from the host");
    let (exit, ..) = run(
        &sb,
        &["sh", "-c", &format!("echo x > {}/given", ro.display())],
    )
    .await;
    assert_ne!(exit.exit_code, 0, "a late read-only bind is read-only");
    assert_eq!(
        std::fs::read_to_string(ro.join("given")).unwrap_or_default(),
        "from the host"
    );
    let (_, out, _) = run(&sb, &["cat", "/etc/cordon-late-file"]).await;
    assert_eq!(out, "late contents", "the overlay file is in place");
    let (exit, ..) = run(&sb, &["sh", "-c", "echo x > /etc/cordon-late-file"]).await;
    assert_ne!(exit.exit_code, 0, "an overlay file is read-only");
    let (_, out, _) = run(&sb, &["ls", "-a", "/"]).await;
    assert!(
        !out.contains(".cordon-stage"),
        "no staging directory is left: {out}"
    );
    let (_, out, _) = run(
        &sb,
        &[
            "cat",
            "/proc/sys/user/max_mnt_namespaces",
            "/proc/sys/user/max_user_namespaces",
        ],
    )
    .await;
    assert_eq!(
        out, "0\n0\n",
        "the claim's mount-namespace allowance is taken back"
    );
    let (_, _, err) = run(
        &sb,
        &["sh", "-c", "for i in $(seq 30); do sleep 3 & done; wait"],
    )
    .await;
    assert!(
        !err.is_empty(),
        "the claimed pids limit stops the 30 sleeps"
    );
    delete(engine, &sb).await;
}

/// A claim that changes only rlimits reaches the first and second execs
/// (started on order) and the third (started ahead, once the session has
/// run more than one command); a setup failure of an exec started ahead
/// is that exec's.
async fn pool_claim_rlimits_reach_every_exec(engine: &Engine) {
    for _ in 0..250 {
        if engine.pool_stats().ready >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut s = spec();
    s.limits.open_files = Some(77);
    let before = engine.pool_stats();
    let sb = engine
        .create(CreateSession {
            spec: s,
            idle_timeout: None,
            ttl: None,
            owner: "t".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("claim: {e}"));
    assert_eq!(
        engine.pool_stats().hits,
        before.hits + 1,
        "served from the pool"
    );
    for nth in ["first", "second", "third"] {
        let (exit, out, err) = run(&sb, &["sh", "-c", "ulimit -n"]).await;
        assert_eq!(exit.exit_code, 0, "{err}");
        assert_eq!(out.trim(), "77", "the {nth} exec has the claimed limit");
    }
    let (exit, ..) = run_req(
        &sb,
        ExecRequest {
            cwd: Some(PathBuf::from("/no/such/dir")),
            ..req(&["true"])
        },
    )
    .await;
    assert_eq!(exit.reason, ExitReason::SetupFailed, "{exit:?}");
    assert!(
        exit.message
            .as_deref()
            .is_some_and(|m| m.contains("working directory")),
        "{exit:?}"
    );
    let (exit, out, _) = run(&sb, &["sh", "-c", "ulimit -n"]).await;
    assert_eq!(
        (exit.exit_code, out.trim()),
        (0, "77"),
        "and the next one runs"
    );
    delete(engine, &sb).await;
}

/// Seconds since boot in clock ticks, as `/proc/PID/stat` gives a
/// process's start (USER_HZ is 100 on every Linux ABI).
fn uptime_ticks() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap_or_else(|e| panic!("{e}"));
    let secs: f64 = text
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("/proc/uptime: {text}"));
    (secs * 100.0) as u64
}

/// A sandbox built for the pool waits with its first exec forked and
/// confined ahead of any create; that exec takes the order's argv,
/// environment and working directory and is confined as one started on
/// order (its own PID namespace, seccomp, no_new_privs, no capabilities,
/// Landlock: its signal scope refuses even `kill -0` to its leader, which
/// is outside its domain; `pooled_first_exec_without_landlock_signals_its_leader`
/// is the control).
async fn pooled_first_exec_was_started_ahead_and_confined(engine: &Engine) {
    // Older than the request by more than a clock tick once the pool is
    // full.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let requested = uptime_ticks();
    let session = create(engine).await;
    // /proc is the session's (its PID namespace, not the exec's): the
    // shell reads its own files through /proc/self.
    let (exit, out, err) = run_req(&session, first_exec_probe()).await;
    assert_eq!(exit.exit_code, 0, "{out}{err}");
    let started: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("start="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no start time: {out}"));
    assert!(
        started < requested,
        "the first exec was forked before the create ({started} < {requested} ticks): {out}"
    );
    for line in [
        "pid=2 order=given cwd=/tmp",
        "Seccomp:\t2",
        "NoNewPrivs:\t1",
        "CapEff:\t0000000000000000",
        "signal=denied",
    ] {
        assert!(out.contains(line), "missing {line:?}: {out}");
    }
    // Only the first: the second starts on order.
    let (exit, out, _) = run(
        &session,
        &[
            "sh",
            "-c",
            "read -r stat < /proc/self/stat; set -- $stat; echo ${22}",
        ],
    )
    .await;
    assert_eq!(exit.exit_code, 0);
    let second: u64 = out.trim().parse().unwrap_or_else(|_| panic!("{out}"));
    assert!(
        second >= requested,
        "the second exec started on order: {out}"
    );
    engine
        .destroy(session.id(), EndCause::Deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// An exec that prints when it was forked, who and where it is, its
/// seccomp, no_new_privs and capability state, and whether it may signal
/// its leader (PID 1 of its namespace).
fn first_exec_probe() -> ExecRequest {
    // /proc is the session's (its PID namespace, not the exec's): the
    // shell reads its own files through /proc/self.
    let script = "read -r stat < /proc/self/stat; set -- $stat; echo \"start=${22}\"; \
                  echo \"pid=$$ order=$ORDER cwd=$(pwd)\"; \
                  while read -r l; do case $l in Seccomp:*|NoNewPrivs:*|CapEff:*) echo \"$l\";; esac; done < /proc/self/status; \
                  if kill -0 1 2>/dev/null; then echo signal=allowed; else echo signal=denied; fi";
    let mut order = req(&["sh", "-c", script]);
    order.env = vec![("ORDER".into(), "given".into())];
    order.cwd = Some(PathBuf::from("/tmp"));
    order
}

/// The control of the Landlock line above: in a pool whose sandboxes
/// leave Landlock out (the test switch), the same first exec, started
/// ahead all the same, may signal its leader.
async fn pooled_first_exec_without_landlock_signals_its_leader(engine: &Engine) {
    let session = create(engine).await;
    assert_eq!(engine.pool_stats().hits, 1, "{:?}", engine.pool_stats());
    let (exit, out, err) = run_req(&session, first_exec_probe()).await;
    assert_eq!(exit.exit_code, 0, "{out}{err}");
    for line in [
        "pid=2 order=given cwd=/tmp",
        "Seccomp:\t2",
        "signal=allowed",
    ] {
        assert!(out.contains(line), "missing {line:?}: {out}");
    }
    engine
        .destroy(session.id(), EndCause::Deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Each pooled sandbox serves one session: what one left in /tmp is not
/// in the next, and a different shape is built fresh.
async fn pool_items_are_single_use(engine: &Engine) {
    let a = create(engine).await;
    run(
        &a,
        &[
            "sh",
            "-c",
            "echo left > /tmp/left; echo $(hostname) > /dev/null",
        ],
    )
    .await;
    engine
        .destroy(a.id(), EndCause::Deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let b = create(engine).await;
    assert_ne!(a.id(), b.id());
    let (exit, ..) = run(&b, &["test", "-e", "/tmp/left"]).await;
    assert_eq!(exit.exit_code, 1, "the next session starts clean");
    let misses = engine.pool_stats().misses;
    let mut other = spec();
    other.tmp_size *= 2;
    let c = engine
        .create(CreateSession {
            spec: other,
            idle_timeout: None,
            ttl: None,
            owner: "t".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        engine.pool_stats().misses,
        misses + 1,
        "another shape is a miss"
    );
    let (exit, ..) = run(&c, &["true"]).await;
    assert_eq!(exit.exit_code, 0);
    engine.shutdown().await;
}

/// The cases, for `--list` (the CI's rootless pass asks every test binary).
/// Lists every descriptor the command can read in `/proc/*/fd` that is a
/// Landlock ruleset, and counts the links it could read. A session's init
/// keeps the workloads' ruleset open (each exec enforces a duplicate): a
/// command that opened it could add rules to it and widen every later
/// exec of the session.
const RULESET_PROBE: &str = "n=0; for f in /proc/[0-9]*/fd/*; do \
    l=$(readlink \"$f\" 2>/dev/null) || continue; n=$((n+1)); \
    case $l in *landlock-ruleset*) echo \"found $f\";; esac; done; echo \"read $n\"";

/// Runs the probe in `session` and fails if it finds a ruleset; it must
/// have read the links of its own descriptors at least.
async fn probe_finds_no_ruleset(session: &Session, what: &str) {
    let (exit, out, err) = run(session, &["sh", "-c", RULESET_PROBE]).await;
    assert_eq!(exit.exit_code, 0, "{what}: {exit:?} {err}");
    let read: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("read "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: {out}"));
    assert!(read >= 3, "{what}: the probe read its own links: {out}");
    assert!(!out.contains("found"), "{what}: a ruleset in reach: {out}");
}

/// Rulesets held by the host's processes whose descriptors this process
/// may read.
fn rulesets_held() -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter_map(|p| std::fs::read_dir(p.path().join("fd")).ok())
        .flat_map(|fds| fds.flatten())
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|l| l.as_os_str() == "anon_inode:[landlock-ruleset]")
        })
        .count()
}

/// The command reaches no copy of the ruleset: its own descriptors are
/// close-on-exec, its leader closes its copy once the command runs (the
/// probe looks in two execs, while each one's leader lives), and the
/// init's are closed to it by the kernel's rules for ptrace access: the
/// init holds capabilities the command lacks, it is not dumpable, and
/// Landlock refuses a sandboxed process access to processes outside its
/// domain.
async fn a_command_cannot_reach_the_sessions_landlock_ruleset(engine: &Engine) {
    let sb = create(engine).await;
    for i in 0..2 {
        probe_finds_no_ruleset(&sb, &format!("exec {i}")).await;
    }
    delete(engine, &sb).await;
}

/// The same with Landlock and the undumpable init turned off: the init,
/// dumpable now, is seen from the host to hold the ruleset (the probe
/// looks for something that is there), and the capability rule alone
/// keeps it from the command. The two layers turned off here cannot be
/// shown alone: the init needs its capabilities, and the rule is the
/// kernel's.
async fn capabilities_alone_keep_the_ruleset_from_a_command(engine: &Engine) {
    let before = rulesets_held();
    let sb = create(engine).await;
    let held = rulesets_held();
    assert!(
        held > before,
        "the session's init holds the workloads' ruleset ({before} before, {held} after)"
    );
    for i in 0..2 {
        probe_finds_no_ruleset(&sb, &format!("exec {i}")).await;
    }
    delete(engine, &sb).await;
}

const CASES: &[&str] = &[
    "output_exit_code_and_state_across_execs",
    "timeout_kills_the_tree_not_the_session",
    "reattach_after_exit",
    "destroy_leaves_nothing",
    "sessions_do_not_share_tmp",
    "landlock_scopes_abstract_sockets_to_their_exec",
    "network_namespace_keeps_abstract_sockets_apart",
    "pooled_first_exec_was_started_ahead_and_confined",
    "pool_claim_gives_binds_and_limits",
    "pool_items_are_single_use",
    "pool_claim_rlimits_reach_every_exec",
    "finished_execs_keep_output_within_the_budget",
    "a_finished_exec_is_never_seen_without_its_exited_event",
    "quick_execs_outrun_the_kernels_namespace_count",
    "an_exec_past_the_process_limit_is_refused_as_busy",
    "pooled_first_exec_without_landlock_signals_its_leader",
    "a_claim_with_a_process_limit_has_all_of_it_for_its_first_command",
    "commands_back_to_back_have_the_whole_process_limit",
    "a_command_holds_no_descriptor_of_its_leader_or_init",
    "a_kill_is_carried_out_while_an_exec_waits_at_the_limit",
    "an_exec_whose_caller_went_away_is_still_listed_and_killable",
    "a_command_cannot_reach_the_sessions_landlock_ruleset",
    "capabilities_alone_keep_the_ruleset_from_a_command",
];

/// The kernel counts a PID namespace off some 30 ms after its last
/// process is gone (RCU): execs in quick succession must not run into
/// namespaces that are gone but still counted. The engine allows 2 execs
/// at once; without the init's room for them, the fifth or so fails with
/// ENOSPC.
async fn quick_execs_outrun_the_kernels_namespace_count(engine: &Engine) {
    let session = create(engine).await;
    for i in 0..400 {
        let p = session
            .exec(req(&["/bin/true"]))
            .await
            .unwrap_or_else(|e| panic!("exec {i}: {e}"));
        let exit = p.wait().await;
        assert_eq!(exit.exit_code, 0, "exec {i}: {exit:?}");
    }
    let _ = engine.destroy(session.id(), EndCause::Deleted).await;
}

/// A sandbox at its process limit: an exec whose leader cannot be forked
/// is refused as busy (the API's 503 with Retry-After), not as an invalid
/// request; one whose leader cannot fork the command fails its setup with
/// the limit named, not as "killed"; and the session runs commands again
/// once one of its commands has ended.
async fn an_exec_past_the_process_limit_is_refused_as_busy(engine: &Engine) {
    // The init, one exec's leader and its `sleep`: 3 processes.
    let (sb, sleeping) = sandbox_with_a_sleep(engine, 3).await;
    match sb.exec(req(&["echo", "one more"])).await {
        Err(cordon_session::SessionError::Busy(message)) => assert!(
            message.contains("process limit"),
            "the refusal says why: {message}"
        ),
        Err(e) => panic!("expected a busy refusal, got {e}"),
        Ok(p) => panic!(
            "expected a busy refusal, the exec ran: {:?}",
            p.wait().await
        ),
    }
    sleeping.kill().await;
    sleeping.wait().await;
    // The ended exec's processes leave the count a moment after it has
    // ended: until then an exec is refused or fails at the limit.
    let mut last = String::new();
    let mut ran = false;
    for _ in 0..100 {
        match sb.exec(req(&["echo", "again"])).await {
            Ok(p) => {
                let exit = p.wait().await;
                if exit.exit_code == 0 {
                    ran = true;
                    break;
                }
                last = format!("{exit:?}");
            }
            Err(cordon_session::SessionError::Busy(m)) => last = m,
            Err(e) => panic!("exec after the sleep ended: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ran, "the session lives on: {last}");
    delete(engine, &sb).await;

    // Room for one more leader, none for its command.
    let (sb, sleeping) = sandbox_with_a_sleep(engine, 4).await;
    let p = sb
        .exec(req(&["echo", "one more"]))
        .await
        .unwrap_or_else(|e| panic!("the leader fits: {e}"));
    let exit = p.wait().await;
    assert_eq!(
        (exit.exit_code, exit.reason),
        (125, cordon_session::ExitReason::SetupFailed),
        "{exit:?}"
    );
    let message = exit.message.unwrap_or_default();
    assert!(message.contains("process limit"), "{message}");
    sleeping.kill().await;
    delete(engine, &sb).await;
}

/// A pooled sandbox claimed with a process limit of its own drops the
/// exec it had started ahead (built with the pool's settings): that pair
/// is gone, not merely killed, before the claim is answered, so the
/// first command has the whole limit. With the pair still counted (its
/// leader a zombie the init had not reaped yet), the first command of a
/// sandbox limited to its init, a leader and a command failed at the
/// limit when the host was busy.
async fn a_claim_with_a_process_limit_has_all_of_it_for_its_first_command(engine: &Engine) {
    for i in 0..30 {
        pools_fill(engine, 3).await;
        // The init, the exec's leader and its command.
        let sb = limited(engine, 3).await;
        let exit = sb
            .exec(req(&["/bin/true"]))
            .await
            .unwrap_or_else(|e| panic!("claim {i}: the first exec is refused: {e}"))
            .wait()
            .await;
        assert_eq!(exit.exit_code, 0, "claim {i}: {exit:?}");
        delete(engine, &sb).await;
    }
}

/// The exec a session starts ahead of its next order holds two of its
/// processes: it is started only once no command runs, so a command never
/// finds the limit short. At 3 processes (the init, a leader, its
/// command), 86% of 300 commands run back to back failed at the limit
/// (exit 125) while the next exec was started beside the running one.
/// It is started as soon as the last command's leader lets go of it, and
/// only beside that leader (not yet reaped) when the limit has room for
/// both: at 3 it waits for the reaping, at 4 and 5 it does not.
async fn commands_back_to_back_have_the_whole_process_limit(engine: &Engine) {
    for limit in [3, 4, 5] {
        let sb = limited(engine, limit).await;
        for i in 0..100 {
            let exit = sb
                .exec(req(&["/bin/true"]))
                .await
                .unwrap_or_else(|e| panic!("limit {limit}, command {i} refused: {e}"))
                .wait()
                .await;
            assert_eq!(exit.exit_code, 0, "limit {limit}, command {i}: {exit:?}");
        }
        delete(engine, &sb).await;
    }
}

/// The shell's open descriptors among 0-255, on one line.
const OPEN_DESCRIPTORS: &str = "n=0; while [ $n -lt 256 ]; do \
    [ -e /proc/self/fd/$n ] && printf '%s ' $n; n=$((n + 1)); done; echo";

/// Each exec's leader holds a line to the init, which the init reads as
/// the exec's end when it hangs up (the next exec is then started ahead,
/// taking two of the session's processes): a command that held it could
/// keep it from hanging up or close it while it still runs. The command
/// has its stdio and nothing else, whether its leader was forked on its
/// order (the first two) or waited for it (the rest): the workload marks
/// every other descriptor close-on-exec before its exec (the line is so
/// from the start as well).
async fn a_command_holds_no_descriptor_of_its_leader_or_init(engine: &Engine) {
    let sb = create(engine).await;
    for i in 0..5 {
        // `[` and `echo` are the shell's own: nothing opens a descriptor
        // while it looks.
        let (exit, out, err) = run(&sb, &["sh", "-c", OPEN_DESCRIPTORS]).await;
        assert_eq!(exit.exit_code, 0, "exec {i}: {exit:?} {err}");
        assert_eq!(out.trim(), "0 1 2", "exec {i}: the command's descriptors");
    }
    delete(engine, &sb).await;
}

/// An exec at the process limit waits (up to `LIMIT_LAG`, 50 ms) for
/// commands that have ended to leave the count; meanwhile the init still
/// carries out other orders. A kill sent while the exec waits ends its
/// command at once, and the waiting exec runs in the room it leaves. An
/// init that waited inside the order refused the exec first (busy) and
/// only then read the kill: a timeout's kill waited behind it.
async fn a_kill_is_carried_out_while_an_exec_waits_at_the_limit(engine: &Engine) {
    // The init, one exec's leader and its `sleep`: 3 processes.
    let (sb, sleeping) = sandbox_with_a_sleep(engine, 3).await;
    let waiting = {
        let sb = sb.clone();
        tokio::spawn(async move { sb.exec(req(&["echo", "after"])).await })
    };
    // The order is at the init within a few milliseconds, well inside
    // the 50 ms it may wait.
    tokio::time::sleep(Duration::from_millis(5)).await;
    sleeping.kill().await;
    let killed = sleeping.wait().await;
    assert_ne!(killed.exit_code, 0, "the sleep was killed: {killed:?}");
    match waiting.await {
        Ok(Ok(p)) => {
            let exit = p.wait().await;
            assert_eq!(exit.exit_code, 0, "the exec that waited: {exit:?}");
        }
        Ok(Err(e)) => {
            panic!("the exec that waited at the limit was refused although the kill made room: {e}")
        }
        Err(e) => panic!("{e}"),
    }
    delete(engine, &sb).await;
}

/// A caller that goes away after its exec order was sent (an HTTP client
/// that disconnects) must not leave a command running that nobody can see
/// or stop. Here the order is held at the process limit while the caller
/// gives up; the sleep is then killed, the init starts the held command,
/// and it is listed and can be killed. When the start ran in the caller's
/// future, the command ran unlisted until the session ended.
async fn an_exec_whose_caller_went_away_is_still_listed_and_killable(engine: &Engine) {
    let (sb, sleeping) = sandbox_with_a_sleep(engine, 3).await;
    let gave_up =
        tokio::time::timeout(Duration::from_millis(2), sb.exec(req(&["sleep", "30"]))).await;
    assert!(
        gave_up.is_err(),
        "the exec was held at the limit: {gave_up:?}"
    );
    sleeping.kill().await;
    sleeping.wait().await;
    let mut orphan = None;
    for _ in 0..200 {
        orphan = sb
            .processes()
            .into_iter()
            .find(|p| p.id() != sleeping.id() && p.exit().is_none());
        if orphan.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let orphan = orphan.unwrap_or_else(|| {
        panic!(
            "the command whose caller went away is not listed: {:?}",
            sb.processes()
                .iter()
                .map(|p| (p.id(), p.exit()))
                .collect::<Vec<_>>()
        )
    });
    assert_eq!(orphan.argv(), ["sleep", "30"]);
    orphan.kill().await;
    let exit = orphan.wait().await;
    assert_ne!(exit.exit_code, 0, "killed: {exit:?}");
    delete(engine, &sb).await;
}

/// A session limited to `pids` processes.
async fn limited(engine: &Engine, pids: u64) -> Arc<Session> {
    let mut s = spec();
    s.limits.pids = Some(pids);
    engine
        .create(CreateSession {
            spec: s,
            idle_timeout: None,
            ttl: None,
            owner: "test".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("create: {e}"))
}

/// A session limited to `pids` processes, running `sleep 30`.
async fn sandbox_with_a_sleep(
    engine: &Engine,
    pids: u64,
) -> (Arc<Session>, Arc<cordon_session::Process>) {
    let sb = limited(engine, pids).await;
    let sleeping = sb
        .exec(req(&["sleep", "30"]))
        .await
        .unwrap_or_else(|e| panic!("the first exec fits: {e}"));
    // Its leader and command are both started once the sleep shows.
    for _ in 0..100 {
        if sleeping.exit().is_some() || !processes_named("sleep 30").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(sleeping.exit().is_none(), "{:?}", sleeping.exit());
    (sb, sleeping)
}

/// Wait until the engine's pools hold `ready` sandboxes (at most 4 s).
async fn pools_fill(engine: &Engine, ready: usize) {
    for _ in 0..200 {
        if engine.pool_stats().ready == ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(engine.pool_stats().ready, ready, "the pools fill");
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        for case in CASES {
            println!("{case}: test");
        }
        return;
    }
    let spawner = match Spawner::fork() {
        Ok(s) => s,
        Err(e) => panic!("fork the spawner: {e}"),
    };
    let pooled_spawner = match Spawner::fork() {
        Ok(s) => s,
        Err(e) => panic!("fork the spawner: {e}"),
    };
    // A spawner whose sandboxes leave Landlock out (debug builds honour
    // the switch), to test the layers under it on their own.
    std::env::set_var(cordon_jail::test_switch::VAR, "landlock");
    let no_landlock_spawner = match Spawner::fork() {
        Ok(s) => s,
        Err(e) => panic!("fork the spawner: {e}"),
    };
    let no_landlock_pooled_spawner = match Spawner::fork() {
        Ok(s) => s,
        Err(e) => panic!("fork the spawner: {e}"),
    };
    // A spawner whose sandboxes leave out two of the layers that keep the
    // init's descriptors from a command.
    std::env::set_var(cordon_jail::test_switch::VAR, "landlock,dumpable");
    let caps_alone_spawner = match Spawner::fork() {
        Ok(s) => s,
        Err(e) => panic!("fork the spawner: {e}"),
    };
    std::env::remove_var(cordon_jail::test_switch::VAR);
    let bounded_spawner = match Spawner::fork() {
        Ok(s) => s,
        Err(e) => panic!("fork the spawner: {e}"),
    };
    let few_execs_spawner = match Spawner::fork() {
        Ok(s) => s,
        Err(e) => panic!("fork the spawner: {e}"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        let engine =
            Engine::new(spawner, EngineConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .map(|s| s.trim() != "0")
            .unwrap_or(false);
        if !userns {
            if std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_some() {
                panic!("user namespaces are off on this host");
            }
            println!("SKIPPED: user namespaces are off on this host");
            return;
        }
        macro_rules! case {
            ($f:ident) => {
                case!($f, &engine)
            };
            ($f:ident, $engine:expr) => {{
                print!("test {} ... ", stringify!($f));
                $f($engine).await;
                println!("ok");
            }};
        }
        case!(output_exit_code_and_state_across_execs);
        case!(timeout_kills_the_tree_not_the_session);
        case!(an_exec_past_the_process_limit_is_refused_as_busy);
        case!(commands_back_to_back_have_the_whole_process_limit);
        case!(a_command_holds_no_descriptor_of_its_leader_or_init);
        case!(a_kill_is_carried_out_while_an_exec_waits_at_the_limit);
        case!(an_exec_whose_caller_went_away_is_still_listed_and_killable);
        case!(reattach_after_exit);
        case!(destroy_leaves_nothing);
        case!(sessions_do_not_share_tmp);
        case!(landlock_scopes_abstract_sockets_to_their_exec);
        let no_landlock = Engine::new(no_landlock_spawner, EngineConfig::default())
            .unwrap_or_else(|e| panic!("{e}"));
        case!(network_namespace_keeps_abstract_sockets_apart, &no_landlock);
        case!(a_command_cannot_reach_the_sessions_landlock_ruleset);
        let caps_alone = Engine::new(caps_alone_spawner, EngineConfig::default())
            .unwrap_or_else(|e| panic!("{e}"));
        case!(
            capabilities_alone_keep_the_ruleset_from_a_command,
            &caps_alone
        );

        let pooled = Engine::new(
            pooled_spawner,
            EngineConfig {
                pools: vec![
                    cordon_session::PoolConfig {
                        base: spec(),
                        size: 2,
                        auto: false,
                    },
                    cordon_session::PoolConfig {
                        base: unix_spec(),
                        size: 1,
                        auto: false,
                    },
                ],
                ..EngineConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        pools_fill(&pooled, 3).await;
        case!(pooled_first_exec_was_started_ahead_and_confined, &pooled);
        let no_landlock_pooled = Engine::new(
            no_landlock_pooled_spawner,
            EngineConfig {
                pools: vec![cordon_session::PoolConfig {
                    base: spec(),
                    size: 1,
                    auto: false,
                }],
                ..EngineConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        pools_fill(&no_landlock_pooled, 1).await;
        case!(
            pooled_first_exec_without_landlock_signals_its_leader,
            &no_landlock_pooled
        );
        no_landlock_pooled.shutdown().await;
        pools_fill(&pooled, 3).await;
        case!(pool_claim_gives_binds_and_limits, &pooled);
        case!(pool_items_are_single_use, &pooled);
        case!(pool_claim_rlimits_reach_every_exec, &pooled);
        case!(
            a_claim_with_a_process_limit_has_all_of_it_for_its_first_command,
            &pooled
        );
        let bounded = Engine::new(
            bounded_spawner,
            EngineConfig {
                event_buffer: 64 << 10,
                finished_output: 100_000,
                finished_kept: 3,
                ..EngineConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        case!(finished_execs_keep_output_within_the_budget, &bounded);
        case!(
            a_finished_exec_is_never_seen_without_its_exited_event,
            &bounded
        );
        let few_execs = Engine::new(
            few_execs_spawner,
            EngineConfig {
                max_execs_per_session: 2,
                ..EngineConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        case!(quick_execs_outrun_the_kernels_namespace_count, &few_execs);
        println!(
            "test result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out",
            CASES.len()
        );
    });
}
