//! Code contexts and the files layer in real sessions (real namespaces,
//! the interpreter a background exec inside the sandbox, files resolved
//! from the init's root).
//!
//! Like tests/engine.rs this has its own `main`: the spawner must be
//! forked while the process has one thread.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Read;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cordon_session::files::{
    as_sandbox_user, FilesError, FilesErrorKind, Listing, Node, PendingWrite, Quota, SandboxPath,
    SandboxRoot,
};
use cordon_session::{
    CodeContext, CreateSession, EndCause, Engine, EngineConfig, EventKind, ExecRequest, Language,
    Session, Spawner, StreamName,
};

fn spec() -> cordon_jail::Spec {
    let mut spec = cordon_jail::Spec::new(Vec::new(), PathBuf::from("/tmp"));
    spec.limits.pids = Some(256);
    spec.limits.memory = Some(512 << 20);
    spec
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

/// Run `sh -c script` in the session: (exit code, stdout).
async fn sh(session: &Session, script: &str) -> (i32, String) {
    let p = session
        .exec(ExecRequest {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            ..ExecRequest::default()
        })
        .await
        .unwrap_or_else(|e| panic!("exec: {e}"));
    let exit = p.wait().await;
    let mut out = Vec::new();
    for e in p.events_now(0).0 {
        if let EventKind::Output {
            stream: StreamName::Stdout,
            data,
        } = e.kind
        {
            out.extend(data);
        }
    }
    (exit.exit_code, String::from_utf8_lossy(&out).into_owned())
}

fn path(s: &str) -> SandboxPath {
    SandboxPath::parse(s).unwrap_or_else(|e| panic!("{e}"))
}

async fn root(session: &Session) -> SandboxRoot {
    SandboxRoot::new(
        session
            .open_root()
            .await
            .unwrap_or_else(|e| panic!("open_root: {e}")),
    )
}

/// Write `p` the way the server does: as the sandbox's user.
async fn put(session: &Session, p: &str, data: &[u8]) -> Result<u64, FilesError> {
    let (root, p, data) = (root(session).await, path(p), data.to_vec());
    as_sandbox_user(session.host_ids(), move || {
        let mut w = PendingWrite::begin(&root, &p, 1 << 20, Arc::new(Quota::new(1 << 30)))?;
        w.write(&data)?;
        w.commit()
    })
    .await
}

async fn get(session: &Session, p: &str) -> Result<Vec<u8>, FilesError> {
    let (root, p) = (root(session).await, path(p));
    as_sandbox_user(session.host_ids(), move || match root.open(&p)? {
        Node::File { mut file, .. } => {
            let mut v = Vec::new();
            file.read_to_end(&mut v).unwrap_or_else(|e| panic!("{e}"));
            Ok(v)
        }
        Node::Dir(_) => panic!("{p} is a directory"),
    })
    .await
}

async fn context_state_output_errors(engine: &Engine) {
    let sb = create(engine).await;
    let ctx = CodeContext::start(sb.clone(), Language::Python)
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
    let t = Duration::from_secs(30);
    let a = ctx.run("x = 41", t).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (a.value.as_deref(), a.restarted, &a.error),
        (None, false, &None)
    );
    let b = ctx.run("x + 1", t).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(b.value.as_deref(), Some("42"), "state survives: {b:?}");
    let c = ctx
        .run(
            "import os, sys\nprint('out')\nos.write(1, b'raw\\n')\nprint('err', file=sys.stderr)",
            t,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (c.stdout.as_str(), c.stderr.as_str()),
        ("out\nraw\n", "err\n")
    );
    let d = ctx
        .run("def f():\n    return 1 / 0\nf()", t)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = d.error.clone().unwrap_or_else(|| panic!("no error: {d:?}"));
    assert_eq!(err.name, "ZeroDivisionError");
    assert!(err.traceback.contains("return 1 / 0"), "{}", err.traceback);
    // The interpreter is inside the sandbox: it sees the sandbox's files.
    sh(&sb, "echo from-exec > /tmp/seen").await;
    let e = ctx
        .run("open('/tmp/seen').read()", t)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(e.value.as_deref(), Some("'from-exec\\n'"));
    engine
        .destroy(sb.id(), EndCause::Deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn context_restarts_after_exit_and_timeout(engine: &Engine) {
    let sb = create(engine).await;
    let ctx = CodeContext::start(sb.clone(), Language::Python)
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
    let t = Duration::from_secs(30);
    ctx.run("x = 1", t).await.unwrap_or_else(|e| panic!("{e}"));
    let died = ctx
        .run("import os\nprint('bye')\nos._exit(1)", t)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = died
        .error
        .clone()
        .unwrap_or_else(|| panic!("no error: {died:?}"));
    assert_eq!(err.name, "InterpreterDied");
    assert!(
        err.message.contains("state") && err.message.contains("code 1"),
        "{}",
        err.message
    );
    assert_eq!(died.stdout, "bye\n");
    let next = ctx
        .run("'x' in dir()", t)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(next.restarted, "{next:?}");
    assert_eq!(
        next.value.as_deref(),
        Some("False"),
        "the old state is gone"
    );
    let again = ctx.run("1 + 1", t).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!again.restarted);

    let started = std::time::Instant::now();
    let slow = ctx
        .run(
            "import time\nprint('before', flush=True)\ntime.sleep(60)",
            Duration::from_secs(1),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(started.elapsed() < Duration::from_secs(20));
    let err = slow
        .error
        .clone()
        .unwrap_or_else(|| panic!("no error: {slow:?}"));
    assert_eq!(err.name, "TimeoutError");
    assert!(err.message.contains("lost"), "{}", err.message);
    assert_eq!(slow.stdout, "before\n");
    let after = ctx.run("2 + 2", t).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((after.restarted, after.value.as_deref()), (true, Some("4")));
    // A run dropped mid-cell (its caller went away): the next run does
    // not take the abandoned cell's answer for its own.
    ctx.run("y = 5", t).await.unwrap();
    let abandoned = tokio::time::timeout(
        Duration::from_millis(300),
        ctx.run("import time\ntime.sleep(2)\n'abandoned'", t),
    )
    .await;
    assert!(abandoned.is_err(), "the run was cut short");
    let fresh = ctx.run("'fresh'", t).await.unwrap();
    assert_eq!(fresh.value.as_deref(), Some("'fresh'"), "{fresh:?}");
    assert!(
        fresh.restarted,
        "the busy interpreter was replaced: {fresh:?}"
    );
    ctx.close().await;
    engine
        .destroy(sb.id(), EndCause::Deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn files_as_the_sandbox_sees_them(engine: &Engine) {
    let sb = create(engine).await;
    put(&sb, "/tmp/dir/hello.txt", b"hello\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, out) = sh(
        &sb,
        "cat /tmp/dir/hello.txt && echo more >> /tmp/dir/hello.txt",
    )
    .await;
    assert_eq!(
        (code, out.as_str()),
        (0, "hello\n"),
        "the exec reads it and may append to it"
    );
    sh(&sb, "echo made-inside > /tmp/dir/inside.txt").await;
    assert_eq!(
        get(&sb, "/tmp/dir/inside.txt")
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        b"made-inside\n"
    );
    let r = root(&sb).await;
    let l = as_sandbox_user(sb.host_ids(), move || match r.open(&path("/tmp/dir"))? {
        Node::Dir(d) => Listing::read(d.as_fd(), &path("/tmp/dir")),
        Node::File { .. } => panic!("not a directory"),
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = l.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["hello.txt", "inside.txt"]);
    let r = root(&sb).await;
    as_sandbox_user(sb.host_ids(), move || r.remove(&path("/tmp/dir"), true))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, _) = sh(&sb, "test -e /tmp/dir").await;
    assert_eq!(code, 1, "deleted as the sandbox sees it");
    engine
        .destroy(sb.id(), EndCause::Deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Layer: openat2 `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS` from the
/// init's root (crates/session/src/files/resolve.rs). The workload plants
/// symlinks to a host file and a host directory it cannot see (the
/// sandbox's /tmp is its own); reading and writing through them must not
/// touch the host. A lookup that follows the links from the host's root
/// (`tmp/x` opened plainly from the root's descriptor) reads and writes the host's.
async fn planted_symlinks_never_reach_the_host(engine: &Engine) {
    let host = tempfile::Builder::new()
        .prefix("cordon-host-")
        .tempdir_in("/tmp")
        .unwrap_or_else(|e| panic!("{e}"));
    let secret = host.path().join("secret");
    std::fs::write(&secret, "host secret\n").unwrap_or_else(|e| panic!("{e}"));
    // Readable and writable by anyone: only the resolution stands between
    // the sandbox's user and this file (not its mode, not the identity
    // the operations take).
    use std::os::unix::fs::PermissionsExt;
    for (p, mode) in [(host.path(), 0o777), (secret.as_path(), 0o666)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let sb = create(engine).await;
    let script = format!(
        "ln -s {s} /tmp/x && ln -s {d} /tmp/d && ln -s /proc/1/root/tmp /tmp/m && ln -s ../../../..{s} /tmp/up",
        s = secret.display(),
        d = host.path().display()
    );
    assert_eq!(sh(&sb, &script).await.0, 0);
    for p in ["/tmp/x", "/tmp/up", "/tmp/d/secret"] {
        let e = get(&sb, p).await.expect_err(p);
        assert_eq!(e.kind, FilesErrorKind::NotFound, "{p}: {e}");
    }
    let e = get(&sb, "/tmp/m/x").await.expect_err("magic link");
    assert_eq!(e.kind, FilesErrorKind::Forbidden, "{e}");
    let e = get(&sb, "/proc/1/root/tmp/x")
        .await
        .expect_err("magic link");
    assert_eq!(e.kind, FilesErrorKind::Forbidden, "{e}");
    // Writing: the link named last is replaced, never followed; a link
    // in the middle leads nowhere inside the sandbox.
    put(&sb, "/tmp/x", b"overwritten")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(put(&sb, "/tmp/d/new", b"planted").await.is_err());
    assert_eq!(std::fs::read(&secret).unwrap_or_default(), b"host secret\n");
    assert!(
        !host.path().join("new").exists(),
        "a file was written into the host directory"
    );
    let (_, out) = sh(&sb, "test -L /tmp/x || cat /tmp/x").await;
    assert_eq!(
        out, "overwritten",
        "the sandbox sees the new file in place of the link"
    );
    engine
        .destroy(sb.id(), EndCause::Deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

fn main() {
    let spawner = match Spawner::fork() {
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
        let python = std::path::Path::new("/usr/bin/python3").exists();
        for (ok, why) in [
            (userns, "user namespaces are off on this host"),
            (python, "no /usr/bin/python3 on this host"),
        ] {
            if !ok {
                if std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_some() {
                    panic!("{why}");
                }
                println!("SKIPPED: {why}");
                return;
            }
        }
        macro_rules! case {
            ($f:ident) => {{
                print!("test {} ... ", stringify!($f));
                $f(&engine).await;
                println!("ok");
            }};
        }
        case!(context_state_output_errors);
        case!(context_restarts_after_exit_and_timeout);
        case!(files_as_the_sandbox_sees_them);
        case!(planted_symlinks_never_reach_the_host);
        println!("test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
        engine.shutdown().await;
    });
}
