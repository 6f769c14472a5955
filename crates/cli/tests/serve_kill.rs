//! SIGKILL of `cordon serve`: every sandbox dies with it (the spawner dies
//! with the server, each sandbox's init with the spawner, the kernel kills
//! the rest of each PID namespace), the spawner's group sweeper removes
//! the cgroups, and the next server on the same socket starts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

fn request(socket: &std::path::Path, method: &str, path: &str, body: &str) -> (u16, String) {
    let s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    http_request(s, method, path, None, body)
}

/// The direct children of `pid` (its spawner, among them).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    out
}

fn wait_until(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigkill_of_the_server_leaves_no_process_and_no_cgroup() {
    if skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cordon.sock");
    let (mut server, _) = start_serve(dir.path(), &["--warm", "1"]);
    let spawners = children(server.id());
    assert!(!spawners.is_empty(), "the server has its spawner");
    let mark = marker("serve-kill");
    for _ in 0..2 {
        let (status, body) = request(&socket, "POST", "/v1/sandboxes", "{}");
        assert_eq!(status, 201, "{body}");
        let id: serde_json::Value = serde_json::from_str(&body).unwrap();
        let id = id["id"].as_str().unwrap().to_owned();
        // The marker is assembled by the shell: only the sleeper's command
        // line holds it.
        let script = format!("m={}; sh -c \"sleep 600; : $m-x\"", &mark);
        let exec =
            serde_json::json!({"argv": ["sh", "-c", script], "background": true}).to_string();
        let (status, body) = request(&socket, "POST", &format!("/v1/sandboxes/{id}/exec"), &exec);
        assert_eq!(status, 202, "{body}");
    }
    let needle = format!("{mark}-x");
    wait_until("both commands run", 20, || {
        processes_with(&needle).len() >= 2
    });
    let groups: Vec<_> = spawners
        .iter()
        .flat_map(|p| cgroup_dirs_with_prefix(&format!("cordon-{p}-")))
        .collect();
    assert!(
        !groups.is_empty() || !is_root(),
        "the sandboxes have cgroups"
    );

    server.kill().unwrap();
    server.wait().unwrap();
    wait_until("every sandbox process is gone", 10, || {
        processes_with(&needle).is_empty()
    });
    wait_until("every cgroup of the spawner is gone", 10, || {
        spawners
            .iter()
            .all(|p| cgroup_dirs_with_prefix(&format!("cordon-{p}-")).is_empty())
    });

    // The next server takes the same socket over.
    let (mut again, ready) = start_serve(dir.path(), &[]);
    assert_eq!(ready["socket"], socket.to_str().unwrap());
    let (status, body) = request(&socket, "GET", "/v1/health", "");
    assert_eq!(status, 200, "{body}");
    again.kill().unwrap();
    again.wait().unwrap();
}
