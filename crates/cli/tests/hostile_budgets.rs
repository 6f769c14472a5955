//! Hostile workloads against the per-user kernel counters that Linux
//! charges up the user-namespace chain to the caller: while a run holds
//! all it can, the caller's other processes on the host must still get
//! their share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::{skip_unless, userns_available, Workdir};

fn ready() -> bool {
    skip_unless(userns_available(), "user namespaces are not available")
}

/// Takes every inotify instance, queued signal and message-queue byte it
/// can get, says how many, and holds them until killed.
const HOG: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

int main(void) {
    int inotify = 0;
    while (inotify_init1(IN_CLOEXEC) >= 0) inotify++;
    int inotify_errno = errno;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN);
    sigprocmask(SIG_BLOCK, &set, NULL);
    union sigval v = {0};
    int queued = 0;
    while (sigqueue(getpid(), SIGRTMIN, v) == 0) queued++;
    int queued_errno = errno;

    struct mq_attr a = {0};
    a.mq_maxmsg = 10;
    a.mq_msgsize = 8192;
    int queues = 0;
    int mq_errno = 0;
    // Landlock refuses to open a queue (EACCES) only after the kernel made
    // it and charged its bytes: such a queue counts too.
    while (queues < 1000) {
        char name[32];
        snprintf(name, sizeof name, "/hog%d", queues);
        if (mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, &a) < 0 && errno != EACCES) {
            mq_errno = errno;
            break;
        }
        queues++;
    }
    printf("inotify %d %d\nsignals %d %d\nmqueues %d %d\nready\n",
           inotify, inotify_errno, queued, queued_errno, queues, mq_errno);
    fflush(stdout);
    sleep(120);
    return 0;
}
"#;

/// On the host: one inotify instance, one queued signal, one message
/// queue of the default size. Prints "ok" or the errno for each.
const HOST_PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

static void say(const char *what, int ok) {
    if (ok) printf("%s ok\n", what); else printf("%s %s\n", what, strerror(errno));
}

int main(void) {
    say("inotify", inotify_init1(IN_CLOEXEC) >= 0);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN);
    sigprocmask(SIG_BLOCK, &set, NULL);
    union sigval v = {0};
    say("sigqueue", sigqueue(getpid(), SIGRTMIN, v) == 0);
    char name[64];
    snprintf(name, sizeof name, "/cordon-host-probe-%d", (int)getpid());
    struct mq_attr a = {0};
    a.mq_maxmsg = 10;
    a.mq_msgsize = 8192;
    mqd_t q = mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, &a);
    say("mq_open", q != (mqd_t)-1);
    if (q != (mqd_t)-1) mq_unlink(name);
    return 0;
}
"#;

fn field(text: &str, key: &str) -> (i64, i64) {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{key} ")))
        .unwrap_or_else(|| panic!("no '{key}' line in {text:?}"));
    let nums: Vec<i64> = line
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect();
    (nums[0], nums[1])
}

/// Layers: `user.max_inotify_instances` written in the sandbox's own user
/// namespace (inotify), RLIMIT_SIGPENDING (queued signals) and
/// RLIMIT_MSGQUEUE (message-queue bytes). Each counter has one layer; each
/// assertion fails when its layer is removed (the hog then takes the
/// caller's whole allowance and the host probe gets EMFILE / EAGAIN).
#[test]
fn a_run_holding_every_kernel_budget_leaves_the_caller_its_share() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let hog = w.compile_c("hog", HOG);
    let probe = w.compile_c("probe", HOST_PROBE);
    let mut run = w.start(&[], &[hog.to_str().unwrap()]);
    assert!(
        run.wait_for_stdout("ready", Duration::from_secs(60)),
        "the hog never got ready: {} {}",
        run.stdout_so_far(),
        run.stderr_so_far()
    );
    let inside = run.stdout_so_far();
    // The host side runs while the sandbox still holds everything.
    let host = Command::new(&probe).output().expect("run host probe");
    let host = String::from_utf8_lossy(&host.stdout).into_owned();
    run.signal(rustix::process::Signal::TERM);
    let o = run.finish();

    let (inotify, inotify_errno) = field(&inside, "inotify");
    let (signals, signals_errno) = field(&inside, "signals");
    let (queues, mq_errno) = field(&inside, "mqueues");
    let limits = &o.report["limits"]["kernel"];
    assert_eq!(
        inotify,
        limits["inotify_instances"].as_i64().unwrap(),
        "{inside}"
    );
    assert_eq!(inotify_errno, i64::from(libc::EMFILE), "{inside}");
    assert_eq!(
        signals,
        limits["queued_signals"].as_i64().unwrap(),
        "{inside}"
    );
    assert_eq!(signals_errno, i64::from(libc::EAGAIN), "{inside}");
    // A default-sized queue costs about 80 KiB: the budget holds one.
    assert!(queues >= 1, "{inside}");
    assert!(
        queues as u64 * 80 * 1024 <= limits["mqueue_bytes"].as_u64().unwrap(),
        "{inside}"
    );
    assert_eq!(mq_errno, i64::from(libc::EMFILE), "{inside}");

    for what in ["inotify", "sigqueue", "mq_open"] {
        assert!(
            host.contains(&format!("{what} ok")),
            "a host process of the caller lost {what} to the sandbox: {host}\ninside: {inside}"
        );
    }
}

/// Layer: the limits cordon writes in the sandbox's own user namespace
/// (nested namespaces of every kind, inotify, fanotify). Read from inside,
/// each must hold its value: removing a write leaves the kernel's INT_MAX.
#[test]
fn the_sandboxs_user_namespace_limits_are_in_force() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.sh(
        &[],
        "cd /proc/sys/user && for f in *; do echo \"$f $(cat $f)\"; done",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let limits = &o.report["limits"]["kernel"];
    let host: Vec<String> = std::fs::read_dir("/proc/sys/user")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(host.len() >= 12, "{host:?}");
    for name in &host {
        let want = match name.as_str() {
            "max_inotify_instances" => limits["inotify_instances"].as_u64().unwrap(),
            "max_inotify_watches" => limits["inotify_watches"].as_u64().unwrap(),
            n if n.ends_with("_namespaces") || n.starts_with("max_fanotify_") => 0,
            other => panic!("a per-user counter cordon does not know: {other}"),
        };
        assert!(
            o.stdout.lines().any(|l| l == format!("{name} {want}")),
            "user.{name} is not {want} inside:\n{}",
            o.stdout
        );
    }
}
