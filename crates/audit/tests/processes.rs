//! Writers killed with SIGKILL mid-run, and many threads and processes
//! writing one store at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use cordon_audit::{AuditStore, AuditWriter};

const CHILD_MODE: &str = "CORDON_AUDIT_TEST_CHILD";
const CHILD_STORE: &str = "CORDON_AUDIT_TEST_STORE";
const CHILD_PREFIX: &str = "CORDON_AUDIT_TEST_PREFIX";
const CHILD_SPOOL: &str = "CORDON_AUDIT_TEST_SPOOL";

/// Not a test of its own: the body of the child processes the other tests
/// start by re-running this test binary with the environment set.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let path = std::env::var(CHILD_STORE).unwrap();
    let prefix = std::env::var(CHILD_PREFIX).unwrap();
    let options = cordon_audit::WriterOptions {
        spool: std::env::var_os(CHILD_SPOOL).is_some(),
        ..Default::default()
    };
    let w = AuditWriter::open_with(&path, options).unwrap();
    if mode == "forever" {
        // Runs of four records, flushed at the end of each run, until killed.
        for i in 0.. {
            let id = format!("{prefix}-{i:06}");
            w.start_run(&id, started(i), Some(b"print(1)"), Some("p"))
                .unwrap();
            w.append(&id, egress(i)).unwrap();
            w.append(&id, incident(i)).unwrap();
            w.append(&id, ended("out")).unwrap();
            w.flush().unwrap();
        }
    } else if let Some(n) = mode.strip_prefix("count:") {
        let n: usize = n.parse().unwrap();
        for i in 0..n {
            w.append(&prefix, egress(i)).unwrap();
            if i % 50 == 0 {
                w.flush().unwrap();
            }
        }
        w.close().unwrap();
    }
}

/// A writer process; `spool`: appending to the spool, as `cordon run` does.
fn spawn_child(path: &Path, mode: &str, prefix: &str, spool: bool) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    if spool {
        c.env(CHILD_SPOOL, "1");
    }
    c.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_MODE, mode)
        .env(CHILD_STORE, path)
        .env(CHILD_PREFIX, prefix)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn head_seq(path: &Path) -> u64 {
    AuditStore::open(path)
        .ok()
        .and_then(|s| s.head().ok())
        .map_or(0, |h| h.seq)
}

fn counts_by_run(path: &Path) -> BTreeMap<String, usize> {
    let mut out = Vec::new();
    AuditStore::open(path)
        .unwrap()
        .export_jsonl(&mut out)
        .unwrap();
    let mut m = BTreeMap::new();
    for line in std::str::from_utf8(&out).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        *m.entry(v["run_id"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    m
}

#[test]
fn writer_killed_mid_run_leaves_a_store_that_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    for round in 0..6u64 {
        let before = head_seq(&path);
        // Odd rounds write to the spool, folded by the reads below.
        let mut child = spawn_child(&path, "forever", &format!("crash{round}"), round % 2 == 1);
        let deadline = Instant::now() + Duration::from_secs(60);
        while head_seq(&path) < before + 40 {
            assert!(Instant::now() < deadline, "child wrote nothing");
            std::thread::sleep(Duration::from_millis(2));
        }
        // Kill at a different point of the write cycle each round.
        std::thread::sleep(Duration::from_micros(round * 1700));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert_verifies(&path);
    }
    // A writer after the crashes continues the chain.
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "after", 3);
    w.close().unwrap();
    assert_verifies(&path);
    // Only the run in flight of each killed writer may be incomplete.
    let counts = counts_by_run(&path);
    for round in 0..6 {
        let prefix = format!("crash{round}-");
        let runs: Vec<_> = counts
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .collect();
        assert!(runs.len() >= 10, "round {round}: {} runs", runs.len());
        for (id, n) in &runs[..runs.len() - 1] {
            assert_eq!(**n, 4, "{id} lost records");
        }
    }
}

#[test]
fn threads_and_processes_writing_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    AuditWriter::open(&path).unwrap().close().unwrap();
    const PER: usize = 400;
    let children: Vec<Child> = (0..3)
        .map(|p| spawn_child(&path, &format!("count:{PER}"), &format!("proc{p}"), p > 0))
        .collect();
    // Four threads sharing one writer...
    let shared = Arc::new(AuditWriter::open(&path).unwrap());
    let mut handles = Vec::new();
    for t in 0..4 {
        let w = Arc::clone(&shared);
        handles.push(std::thread::spawn(move || {
            let id = format!("shared{t}");
            for i in 0..PER {
                w.append(&id, egress(i)).unwrap();
                if i % 100 == 0 {
                    w.flush().unwrap();
                }
            }
        }));
    }
    // ...and four threads with a writer (connection) each.
    for t in 0..4 {
        let path = path.clone();
        handles.push(std::thread::spawn(move || {
            let w = AuditWriter::open(&path).unwrap();
            let id = format!("own{t}");
            for i in 0..PER {
                w.append(&id, egress(i)).unwrap();
                if i % 70 == 0 {
                    w.flush().unwrap();
                }
            }
            w.close().unwrap();
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    match Arc::try_unwrap(shared) {
        Ok(w) => {
            w.close().unwrap();
        }
        Err(_) => panic!("writer still shared"),
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let report = assert_verifies(&path);
    assert_eq!(report.records as usize, PER * 11);
    let counts = counts_by_run(&path);
    assert_eq!(counts.len(), 11);
    for (id, n) in counts {
        assert_eq!(n, PER, "{id}");
    }
}

#[test]
fn processes_creating_one_store_at_once_all_succeed() {
    // Every writer finds no store and creates it; SQLite does not wait for
    // the lock that turning a new file to WAL mode needs, so the store
    // serializes creation itself.
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = store_path(&dir);
        let children: Vec<Child> = (0..8)
            .map(|p| spawn_child(&path, "count:10", &format!("r{round}p{p}"), p % 2 == 0))
            .collect();
        for mut c in children {
            assert!(
                c.wait().unwrap().success(),
                "round {round}: a writer failed"
            );
        }
        let report = assert_verifies(&path);
        assert_eq!(report.records, 80, "round {round}");
    }
}
