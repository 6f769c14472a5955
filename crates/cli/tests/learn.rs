//! `cordon learn`, end to end: a Python tool that reads a data file,
//! writes an output and calls one host (a local origin reached through the
//! proxy with `--resolve`) is observed; the profile it writes runs the tool
//! again under `cordon run`, and what the tool did not do while learning
//! (read another file, write elsewhere, call another host) is refused by
//! the real layers (mounts and Landlock for files, the proxy for hosts).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    ) || skip_unless(
        Command::new("python3").arg("--version").output().is_ok(),
        "python3 is not installed",
    )
}

/// A host-side HTTP origin on 127.0.0.1 that answers every request with a
/// fixed body and counts them. Bounded: it stops when the test ends.
struct Origin {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Origin {
    fn start() -> Origin {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = Arc::clone(&hits);
        std::thread::spawn(move || {
            for conn in l.incoming().take(64).flatten() {
                let mut conn = conn;
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                h.fetch_add(1, Ordering::SeqCst);
                let body = "from-origin";
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Origin { port, hits }
    }
}

const TOOL: &str = r#"
import json, sys, urllib.request
rows = open("data/input.csv").read().split()
reply = urllib.request.urlopen("http://api.test:%s/v1" % sys.argv[1], timeout=10).read().decode()
with open("out/result.json", "w") as f:
    json.dump({"rows": len(rows), "reply": reply}, f)
print("TOOL DONE")
"#;

fn cordon(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(cordon_bin())
        .current_dir(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run cordon")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_learned_profile_runs_the_tool_and_refuses_what_it_did_not_do() {
    if ready() {
        return;
    }
    let origin = Origin::start();
    let port = origin.port.to_string();
    let root = tempfile::Builder::new()
        .prefix("cordon-learn-")
        .tempdir()
        .expect("tempdir");
    let root = std::fs::canonicalize(root.path()).unwrap();
    let proj = root.join("proj");
    std::fs::create_dir_all(proj.join("data")).unwrap();
    std::fs::create_dir_all(proj.join("out")).unwrap();
    std::fs::write(proj.join("data/input.csv"), "a\nb\nc\n").unwrap();
    std::fs::write(proj.join("tool.py"), TOOL).unwrap();
    // Beside the project: a file the tool never reads.
    std::fs::write(root.join("other.txt"), "not for the tool").unwrap();
    let resolve = format!("api.test={}", "127.0.0.1");

    // Learn.
    let o = cordon(
        &proj,
        &[
            "learn",
            "-o",
            "tool.toml",
            "--report",
            "observed.json",
            "--resolve",
            &resolve,
            "--",
            "python3",
            "tool.py",
            &port,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("TOOL DONE"));
    let learned = std::fs::read_to_string(proj.join("tool.toml")).unwrap();
    eprintln!("learned profile:\n{learned}");
    let host_line = format!("\"api.test:{port}\",  # 1 connection(s)");
    assert!(learned.contains(&host_line), "{learned}");
    let out_dir = proj.join("out").display().to_string();
    assert!(
        learned.contains(&format!("\"{out_dir}\",  # out/result.json written")),
        "{learned}"
    );
    assert!(learned.contains("data/input.csv"), "{learned}");
    assert!(learned.contains("mode = \"proxy\""), "{learned}");
    assert!(!learned.contains("other.txt"), "{learned}");
    // The same, for programs.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(proj.join("observed.json")).unwrap())
            .unwrap();
    let observed = report["outcome"]["observed"].as_array().expect("observed");
    let written = proj.join("out/result.json").display().to_string();
    assert!(
        observed
            .iter()
            .any(|p| p["path"] == written.as_str() && p["access"] == "write"),
        "{observed:?}"
    );
    assert!(
        report["egress"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["host"] == "api.test"),
        "{report}"
    );
    std::fs::remove_file(proj.join("out/result.json")).unwrap();
    std::fs::remove_file(proj.join("observed.json")).unwrap();

    // The learned profile runs the tool.
    let run = |cmd: &[&str]| {
        let mut args = vec![
            "run",
            "--profile",
            "tool.toml",
            "--resolve",
            &resolve,
            "--resolve",
            "other.test=127.0.0.1",
            "--",
        ];
        args.extend_from_slice(cmd);
        cordon(&proj, &args)
    };
    let before = origin.hits.load(Ordering::SeqCst);
    let o = run(&["python3", "tool.py", &port]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let result = std::fs::read_to_string(proj.join("out/result.json")).unwrap();
    assert!(result.contains("from-origin"), "{result}");
    assert_eq!(origin.hits.load(Ordering::SeqCst), before + 1);

    // Outside it: another file, another place to write, another host.
    let probe = format!(
        r#"
import urllib.request, urllib.error
for name, act in [
    ("read beside the project", lambda: open("{other}").read()),
    ("write outside out/", lambda: open("elsewhere.txt", "w").write("x")),
    ("another host", lambda: urllib.request.urlopen("http://other.test:{port}/", timeout=10).read()),
]:
    try:
        act()
        print("ALLOWED", name)
    except (OSError, urllib.error.URLError) as e:
        print("REFUSED", name, e)
"#,
        other = root.join("other.txt").display(),
    );
    let before = origin.hits.load(Ordering::SeqCst);
    let o = run(&["python3", "-c", &probe]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(out.matches("REFUSED").count(), 3, "{}", text(&o));
    assert!(!out.contains("ALLOWED"), "{}", text(&o));
    assert!(
        out.contains("403"),
        "the proxy refuses the host: {}",
        text(&o)
    );
    assert_eq!(
        origin.hits.load(Ordering::SeqCst),
        before,
        "other.test reached the origin"
    );
    assert!(!proj.join("elsewhere.txt").exists());
}

#[test]
fn learning_a_write_outside_the_writable_paths_says_it_was_not_granted() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let target = std::fs::canonicalize(elsewhere.path())
        .unwrap()
        .join("x.txt");
    let script = format!("open({:?}, 'w')", target.display().to_string());
    let o = cordon(
        w.path(),
        &["learn", "-o", "p.toml", "--", "python3", "-c", &script],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("not granted: {} was written", target.display())),
        "{}",
        text(&o)
    );
    let learned = std::fs::read_to_string(w.path().join("p.toml")).unwrap();
    assert!(learned.contains("# not granted:"), "{learned}");
    assert!(!target.exists());
}

/// The command's own executable is learned, as root and as a user: the
/// first `execve` is made by cordon's workload before it becomes the
/// command, and without root the supervisor can read that call's path only
/// if the workload is dumpable (learn mode makes it so; see
/// `child::exec_command`). A program outside the working directory is
/// named by no other call, so a profile that missed it could not run it.
#[test]
fn the_commands_own_program_is_learned() {
    if ready() {
        return;
    }
    let root = tempfile::Builder::new()
        .prefix("cordon-learn-")
        .tempdir()
        .expect("tempdir");
    let root = std::fs::canonicalize(root.path()).unwrap();
    // Outside /tmp, which the learning run does not bind (it builds its own).
    let tools = Workdir::new_in("/var/tmp");
    let tool = tools.compile_c(
        "tool",
        "#include <stdio.h>\nint main(void) { puts(\"TOOL RAN\"); return 0; }\n",
    );
    let tool = tool.to_str().unwrap();
    let o = cordon(
        &root,
        &["learn", "-o", "p.toml", "--report", "r.json", "--", tool],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("r.json")).unwrap()).unwrap();
    // Left out of the report when zero.
    assert!(
        report["outcome"]["observed_unreadable"]
            .as_u64()
            .unwrap_or(0)
            == 0
            && !String::from_utf8_lossy(&o.stderr).contains("could not be read"),
        "calls whose path was not read: {}",
        text(&o)
    );
    let learned = std::fs::read_to_string(root.join("p.toml")).unwrap();
    assert!(learned.contains(tool), "{learned}");
    let o = cordon(&root, &["run", "--profile", "p.toml", "--", tool]);
    assert_eq!(o.status.code(), Some(0), "{}\n{learned}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("TOOL RAN"));
}

/// `cordon learn -o p.toml -- PROGRAM` in a new directory: the
/// directory, the profile's text and the profile as loaded.
fn learn_a_program(program: &str) -> (tempfile::TempDir, String, cordon_policy::Profile) {
    let root = tempfile::Builder::new()
        .prefix("cordon-learn-")
        .tempdir()
        .expect("tempdir");
    let o = cordon(root.path(), &["learn", "-o", "p.toml", "--", program]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let learned = std::fs::read_to_string(root.path().join("p.toml")).unwrap();
    let profile = cordon_policy::Profile::load(&root.path().join("p.toml")).expect("loads");
    (root, learned, profile)
}

/// A program that reserves much address space at start (as V8 reserves
/// its code range) and little resident memory: the learned memory limit
/// covers its address space, which RLIMIT_AS counts where no memory cgroup
/// is delegated, so the profile runs it there too (the rootless pass).
/// A limit made from resident memory alone (64 MiB here) aborted it.
#[test]
fn a_learned_memory_limit_covers_the_address_space_a_runtime_reserves() {
    if ready() {
        return;
    }
    let tools = Workdir::new_in("/var/tmp");
    let tool = tools.compile_c("reserver", RESERVES_ADDRESS_SPACE_C);
    let tool = tool.to_str().unwrap();
    let (root, learned, profile) = learn_a_program(tool);
    assert!(
        profile.limits.memory.0 >= (1 << 30) + (1 << 28),
        "the limit covers the 1 GiB reserved, with a quarter more:\n{learned}"
    );
    assert!(learned.contains("of address space"), "{learned}");
    let o = cordon(root.path(), &["run", "--profile", "p.toml", "--", tool]);
    assert_eq!(o.status.code(), Some(0), "{}\n{learned}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("RESERVED"));
}

/// A program that runs 40 threads at once: the learned process limit
/// counts them (the pids cgroup and RLIMIT_NPROC count threads), so the
/// profile runs it. Counting processes alone gave 32, where it could not
/// start its threads.
#[test]
fn a_learned_process_limit_counts_threads() {
    if ready() {
        return;
    }
    let tools = Workdir::new_in("/var/tmp");
    let tool = tools.compile_c(
        "threads",
        r#"#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *nap(void *arg) { (void)arg; usleep(100000); return 0; }
int main(void) {
    pthread_t t[40];
    for (int i = 0; i < 40; i++)
        if (pthread_create(&t[i], 0, nap, 0) != 0) { printf("started only %d threads\n", i); return 1; }
    for (int i = 0; i < 40; i++) pthread_join(t[i], 0);
    puts("40 THREADS");
    return 0;
}
"#,
    );
    let tool = tool.to_str().unwrap();
    let (root, learned, profile) = learn_a_program(tool);
    assert!(profile.limits.pids >= 41, "{learned}");
    let o = cordon(root.path(), &["run", "--profile", "p.toml", "--", tool]);
    assert_eq!(o.status.code(), Some(0), "{}\n{learned}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("40 THREADS"));
}

/// Eight processes that each run 24 threads at the same time (about 200
/// tasks at once). Learned from the processes and their busiest one alone
/// (9 + 24 tasks, x4 = 132) the process limit would stop them; with a
/// pids cgroup the learning run's peak count of tasks sets it, and the
/// profile runs the program. Without one (the rootless pass here) the
/// profile says the peak was not counted.
#[test]
fn a_learned_process_limit_counts_processes_that_run_threads_at_once() {
    if ready() {
        return;
    }
    let tools = Workdir::new_in("/var/tmp");
    let tool = tools.compile_c(
        "forks_threads",
        r#"#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
static void *nap(void *arg) { (void)arg; usleep(300000); return 0; }
static int child(void) {
    pthread_t t[24];
    for (int i = 0; i < 24; i++)
        if (pthread_create(&t[i], 0, nap, 0) != 0) return 1;
    for (int i = 0; i < 24; i++) pthread_join(t[i], 0);
    return 0;
}
int main(void) {
    for (int i = 0; i < 8; i++) {
        pid_t p = fork();
        if (p < 0) { puts("fork failed"); return 1; }
        if (p == 0) _exit(child());
    }
    int failed = 0, status;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    if (failed) { printf("%d children could not start their threads\n", failed); return 1; }
    puts("8 x 24 THREADS");
    return 0;
}
"#,
    );
    let tool = tool.to_str().unwrap();
    let probe = tools.run(&[], &["/bin/true"]);
    let (root, learned, profile) = learn_a_program(tool);
    if cgroup_controls(&probe, "pids") {
        assert!(
            learned.contains("at once (the pids cgroup's peak)"),
            "{learned}"
        );
        assert!(profile.limits.pids >= 4 * 190, "{learned}");
        let o = cordon(root.path(), &["run", "--profile", "p.toml", "--", tool]);
        assert_eq!(o.status.code(), Some(0), "{}\n{learned}", text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("8 x 24 THREADS"));
    } else {
        assert!(
            learned.contains("tasks at once not counted (no pids cgroup)"),
            "{learned}"
        );
    }
}
