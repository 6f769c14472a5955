//! Sandboxes a previous server left open in the audit store. When a
//! server is killed (SIGKILL, a crash), its sandboxes die with it (each
//! init dies with the spawner, the spawner with the server, and the
//! spawner's group sweeper removes their cgroups), but their runs in the
//! store stay open. The next server ends them as `lost`: every open
//! sandbox run whose server is no longer running, and that server's own
//! run.

use std::path::Path;

use cordon_audit::AuditStore;
use serde_json::{json, Value};

use crate::audit::AuditLog;

/// Open runs looked at, newest first.
const RUNS_EXAMINED: usize = 5000;

/// Is the server with this pid still running?
fn server_alive(pid: Option<u64>) -> bool {
    let Some(pid) = pid else { return false };
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let c = String::from_utf8_lossy(&c);
            c.contains("cordon") && c.contains("serve")
        })
        .unwrap_or(false)
}

/// The start record's `enforcement` of a run, if its first record is one.
fn started_detail(store: &AuditStore, run_id: &str) -> Option<(Option<String>, Value)> {
    let view = store.show(run_id).ok()?;
    let first = view.records.first()?;
    if first.kind != "run_started" {
        return None;
    }
    let profile = first.body["profile_name"].as_str().map(str::to_owned);
    Some((profile, first.body["enforcement"].clone()))
}

/// End the runs of sandboxes whose server is gone; returns how many.
pub fn record_lost(path: &Path, audit: &AuditLog) -> usize {
    let Ok(store) = AuditStore::open(path) else {
        return 0;
    };
    let Ok(runs) = store.runs(RUNS_EXAMINED) else {
        return 0;
    };
    let mut servers: Vec<(String, bool)> = Vec::new();
    let mut sandboxes: Vec<(String, String, Option<String>)> = Vec::new();
    for run in runs.iter().filter(|r| r.ended_ns.is_none()) {
        if run.run_id == audit.server_run() {
            continue;
        }
        let Some((profile, detail)) = started_detail(&store, &run.run_id) else {
            continue;
        };
        if profile.as_deref() == Some("server") && detail.get("pid").is_some() {
            servers.push((run.run_id.clone(), server_alive(detail["pid"].as_u64())));
        } else if let Some(id) = detail["sandbox"].as_str() {
            let server = detail["server_run"].as_str().map(str::to_owned);
            sandboxes.push((run.run_id.clone(), id.to_owned(), server));
        }
    }
    let alive = |server: &Option<String>| {
        server
            .as_ref()
            .is_some_and(|s| servers.iter().any(|(id, alive)| id == s && *alive))
    };
    let mut lost = 0;
    for (run, sandbox, server) in &sandboxes {
        if !alive(server) {
            audit.lost(run, Some(sandbox), json!({"server_run": server}));
            lost += 1;
        }
    }
    for (run, alive) in &servers {
        if !alive {
            audit.lost(run, None, json!({"sandboxes_lost": sandboxes.iter().filter(|(_, _, s)| s.as_deref() == Some(run.as_str())).count()}));
        }
    }
    lost
}
