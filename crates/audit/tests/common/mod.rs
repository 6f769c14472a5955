#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use cordon_audit::{
    AuditStore, AuditWriter, Decision, Egress, EndReason, Incident, IncidentKind, RunEnded,
    RunStarted, Severity, StreamSummary,
};

pub fn store_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("state").join("audit.db")
}

pub fn started(i: usize) -> RunStarted {
    RunStarted {
        argv: vec!["python3".into(), format!("job{i}.py")],
        cwd: Some("/work".into()),
        enforcement: serde_json::json!({"level": "full"}),
        cordon_version: "0.1.0".into(),
        ..Default::default()
    }
}

pub fn egress(i: usize) -> Egress {
    Egress {
        method: "CONNECT".into(),
        host: format!("host{i}.example.com"),
        port: 443,
        path: None,
        bytes_sent: 10,
        bytes_received: 20,
        duration_ms: 3,
        decision: if i.is_multiple_of(2) {
            Decision::Allow
        } else {
            Decision::Deny
        },
        rule: Some("allow *.example.com".into()),
        reason: None,
    }
}

pub fn incident(i: usize) -> Incident {
    Incident {
        kind: IncidentKind::Syscall,
        severity: Severity::Critical,
        summary: format!("mount denied #{i}"),
        evidence: serde_json::json!({"syscall": "mount", "nr": 165, "pid": i}),
    }
}

pub fn ended(excerpt: &str) -> RunEnded {
    RunEnded {
        reason: EndReason::Exited,
        exit_code: Some(0),
        signal: None,
        wall_ms: 12,
        user_ms: 3,
        sys_ms: 1,
        peak_memory_bytes: Some(1 << 20),
        stdout: StreamSummary {
            kept_bytes: excerpt.len() as u64,
            dropped_bytes: 0,
            excerpt: excerpt.to_string(),
        },
        stderr: StreamSummary::default(),
        enforcement: serde_json::Value::Null,
    }
}

/// Writes `runs` runs of 4 records each (started, egress, incident, ended).
pub fn write_runs(w: &AuditWriter, prefix: &str, runs: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..runs {
        let id = format!("{prefix}-{i:04}");
        w.start_run(
            &id,
            started(i),
            Some(format!("print({i})").as_bytes()),
            Some("[profile]\nname = \"x\"\n"),
        )
        .unwrap();
        w.append(&id, egress(i)).unwrap();
        w.append(&id, incident(i)).unwrap();
        w.append(&id, ended("ok\n")).unwrap();
        ids.push(id);
    }
    ids
}

/// A raw connection with the append-only triggers dropped, as a tamperer
/// would have.
pub fn tamper(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(
        "DROP TRIGGER records_append_only_update; DROP TRIGGER records_append_only_delete;
         DROP TRIGGER blobs_append_only_update; DROP TRIGGER blobs_append_only_delete;",
    )
    .unwrap();
    c
}

pub fn verify_problem(path: &Path) -> String {
    let report = AuditStore::open(path).unwrap().verify().unwrap();
    assert!(!report.ok, "verify passed but should not: {report:?}");
    report.problems[0].to_string()
}

pub fn assert_verifies(path: &Path) -> cordon_audit::VerifyReport {
    let report = AuditStore::open(path).unwrap().verify().unwrap();
    assert!(report.ok, "verify failed: {:?}", report.problems);
    report
}
