//! The hash chain verifies after many appends, and every kind of hand
//! tampering through a separate SQLite connection is caught and named.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use cordon_audit::{AuditStore, AuditWriter, Head};
use rusqlite::params;

fn fresh(runs: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "run", runs);
    w.close().unwrap();
    (dir, path)
}

/// The first problem verification names in a store of `runs` runs after
/// `sql` ran on it through a separate connection.
fn problem_after(runs: usize, sql: &str) -> String {
    let (_dir, path) = fresh(runs);
    tamper(&path).execute_batch(sql).unwrap();
    verify_problem(&path)
}

#[test]
fn many_appends_verify_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open(&path).unwrap();
    for round in 0..5 {
        write_runs(&w, &format!("r{round}"), 200);
        let head = w.flush().unwrap();
        assert_eq!(head.seq, (round + 1) * 800);
    }
    let head = w.close().unwrap();
    let report = assert_verifies(&path);
    assert_eq!(report.records, 4000);
    assert_eq!(report.head, head);
    assert_eq!(
        report.blobs,
        200 + 1,
        "code blobs per distinct text, one profile"
    );

    let store = AuditStore::open(&path).unwrap();
    assert_eq!(store.head().unwrap(), head);
    let tail = store.tail(3).unwrap();
    assert_eq!(
        tail.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![3998, 3999, 4000]
    );
    let run = store.show("r3-0007").unwrap();
    assert_eq!(run.records.len(), 4);
    assert_eq!(run.records[0].kind, "run_started");
    assert_eq!(run.records[3].kind, "run_ended");
    assert_eq!(run.code.unwrap().data, b"print(7)");
    assert!(String::from_utf8(run.profile.unwrap().data)
        .unwrap()
        .contains("[profile]"));
    assert!(store.show("nope").is_err());
    assert!(matches!(
        store.show("r3-000"),
        Err(cordon_audit::AuditError::AmbiguousRun { .. })
    ));
    let inc = store
        .incidents(Some(std::time::Duration::from_secs(3600)))
        .unwrap();
    assert_eq!(inc.len(), 1000);
    assert!(inc[0].seq > inc[1].seq, "newest first");
    let runs = store.runs(5).unwrap();
    assert_eq!(runs.len(), 5);
    assert_eq!(runs[0].incidents, 1);
    assert_eq!(runs[0].reason.as_deref(), Some("exited"));
    let mut out = Vec::new();
    assert_eq!(store.export_jsonl(&mut out).unwrap(), 4000);
    let first: serde_json::Value =
        serde_json::from_str(std::str::from_utf8(&out).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(first["seq"], 1);
    assert_eq!(first["kind"], "run_started");
    assert_eq!(first["prev_hash"], cordon_audit::chain::GENESIS_HASH);
}

#[test]
fn files_are_private() {
    let (_dir, path) = fresh(1);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(mode(&cordon_audit::chain::head_file_path(&path)), 0o600);
}

#[test]
fn append_only_triggers_refuse_plain_updates() {
    let (_dir, path) = fresh(2);
    let c = rusqlite::Connection::open(&path).unwrap();
    assert!(c
        .execute("UPDATE records SET body = '{}' WHERE seq = 1", [])
        .is_err());
    assert!(c.execute("DELETE FROM records WHERE seq = 1", []).is_err());
    assert_verifies(&path);
}

#[test]
fn edited_body_is_named() {
    let (_dir, path) = fresh(10);
    let c = tamper(&path);
    c.execute(
        "UPDATE records SET body = replace(body, 'mount', 'read') WHERE seq = 7",
        [],
    )
    .unwrap();
    drop(c);
    let msg = verify_problem(&path);
    assert!(
        msg.starts_with("record seq 7 (run run-0001, kind incident)"),
        "{msg}"
    );
    assert!(msg.contains("edited"), "{msg}");
}

#[test]
fn edited_time_is_named() {
    let (_dir, path) = fresh(10);
    tamper(&path)
        .execute(
            "UPDATE records SET time_ns = time_ns - 1000000 WHERE seq = 12",
            [],
        )
        .unwrap();
    let msg = verify_problem(&path);
    assert!(msg.starts_with("record seq 12 "), "{msg}");
}

#[test]
fn deleted_middle_record_is_named() {
    let msg = problem_after(10, "DELETE FROM records WHERE seq = 15");
    assert!(
        msg.starts_with("record seq 16 (run run-0003, kind run_ended)"),
        "{msg}"
    );
    assert!(msg.contains("record 15 is missing"), "{msg}");
}

#[test]
fn deleted_first_records_are_named() {
    let msg = problem_after(3, "DELETE FROM records WHERE seq <= 2");
    assert!(msg.starts_with("record seq 3 "), "{msg}");
    assert!(msg.contains("records 1..=2 are missing"), "{msg}");
}

#[test]
fn swapped_records_are_named() {
    let (_dir, path) = fresh(10);
    let c = tamper(&path);
    c.execute_batch(
        "UPDATE records SET seq = -1 WHERE seq = 9;
         UPDATE records SET seq = 9 WHERE seq = 13;
         UPDATE records SET seq = 13 WHERE seq = -1;",
    )
    .unwrap();
    drop(c);
    let msg = verify_problem(&path);
    assert!(
        msg.starts_with("record seq 9 (run run-0003, kind run_started)"),
        "{msg}"
    );
}

#[test]
fn truncated_tail_is_named() {
    let msg = problem_after(10, "DELETE FROM records WHERE seq > 33");
    assert!(
        msg.starts_with("record seq 33 (run run-0008, kind run_started)"),
        "{msg}"
    );
    assert!(
        msg.contains("records 34..=40 were cut off the end"),
        "{msg}"
    );
}

#[test]
fn everything_deleted_is_caught() {
    let (_dir, path) = fresh(2);
    tamper(&path).execute("DELETE FROM records", []).unwrap();
    let msg = verify_problem(&path);
    assert!(msg.contains("all records were removed"), "{msg}");
}

#[test]
fn forged_record_with_wrong_hash_is_named() {
    let (_dir, path) = fresh(3);
    let c = tamper(&path);
    let head = AuditStore::open(&path).unwrap().head().unwrap();
    c.execute(
        "INSERT INTO records (seq, time_ns, run_id, kind, body, prev_hash, hash)
         VALUES (?1, 0, 'forged', 'egress', '{}', ?2, ?3)",
        params![head.seq as i64 + 1, head.hash, "ab".repeat(32)],
    )
    .unwrap();
    drop(c);
    let msg = verify_problem(&path);
    assert!(
        msg.starts_with("record seq 13 (run forged, kind egress)"),
        "{msg}"
    );
}

#[test]
fn forged_record_with_correct_hash_is_caught_by_the_head_file() {
    let (_dir, path) = fresh(3);
    let c = tamper(&path);
    let head = AuditStore::open(&path).unwrap().head().unwrap();
    let seq = head.seq + 1;
    let prev = cordon_audit::chain::parse_hash(&head.hash).unwrap();
    let h = cordon_audit::chain::record_hash(seq, 5, "forged", "egress", "{}", &prev);
    c.execute(
        "INSERT INTO records (seq, time_ns, run_id, kind, body, prev_hash, hash)
         VALUES (?1, 5, 'forged', 'egress', '{}', ?2, ?3)",
        params![seq as i64, head.hash, hex::encode(h)],
    )
    .unwrap();
    drop(c);
    let msg = verify_problem(&path);
    assert!(
        msg.starts_with("record seq 13 (run forged, kind egress)"),
        "{msg}"
    );
    assert!(msg.contains("added outside"), "{msg}");
}

#[test]
fn forged_insert_in_the_middle_is_named() {
    let (_dir, path) = fresh(3);
    let c = tamper(&path);
    // Make room by shifting the tail up, then insert a record at seq 5.
    c.execute_batch("UPDATE records SET seq = seq + 1000 WHERE seq >= 5; UPDATE records SET seq = seq - 999 WHERE seq >= 1005;")
        .unwrap();
    let prev: String = c
        .query_row("SELECT hash FROM records WHERE seq = 4", [], |r| r.get(0))
        .unwrap();
    c.execute(
        "INSERT INTO records (seq, time_ns, run_id, kind, body, prev_hash, hash)
         VALUES (5, 0, 'forged', 'egress', '{}', ?1, ?2)",
        params![prev, "cd".repeat(32)],
    )
    .unwrap();
    drop(c);
    let msg = verify_problem(&path);
    assert!(
        msg.starts_with("record seq 5 (run forged, kind egress)"),
        "{msg}"
    );
}

#[test]
fn edited_blob_is_caught() {
    let msg = problem_after(2, "UPDATE blobs SET data = X'00' WHERE size = 8");
    assert!(msg.contains("does not match its hash"), "{msg}");
}

#[test]
fn deleted_blob_is_named() {
    let msg = problem_after(2, "DELETE FROM blobs WHERE data LIKE '%profile%'");
    assert!(
        msg.starts_with("record seq 1 (run run-0000, kind run_started)"),
        "{msg}"
    );
}

#[test]
fn missing_head_file_is_reported_and_next_write_keeps_the_evidence() {
    let (_dir, path) = fresh(2);
    let hf = cordon_audit::chain::head_file_path(&path);
    std::fs::remove_file(&hf).unwrap();
    let msg = verify_problem(&path);
    assert!(msg.contains("head file"), "{msg}");
    // Truncate and write again: the writer records the mismatch in the chain.
    tamper(&path)
        .execute("DELETE FROM records WHERE seq > 4", [])
        .unwrap();
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "later", 1);
    w.close().unwrap();
    let msg = verify_problem(&path);
    assert!(
        msg.starts_with("record seq 5 (kind head_mismatch)"),
        "{msg}"
    );
}

#[test]
fn external_anchor_catches_a_rewritten_store() {
    let (_dir, path) = fresh(3);
    let anchor: Head = AuditStore::open(&path).unwrap().head().unwrap();
    // Rebuild the whole store with different content, head file included.
    std::fs::remove_file(&path).unwrap();
    let _ = std::fs::remove_file(path.with_extension("db-wal"));
    let _ = std::fs::remove_file(path.with_extension("db-shm"));
    std::fs::remove_file(cordon_audit::chain::head_file_path(&path)).unwrap();
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "fake", 3);
    w.close().unwrap();
    assert_verifies(&path);
    let report = AuditStore::open(&path)
        .unwrap()
        .verify_with_anchor(Some(&anchor))
        .unwrap();
    assert!(!report.ok);
    let msg = report.problems[0].to_string();
    assert!(
        msg.starts_with("record seq 12 (run fake-0002, kind run_ended)"),
        "{msg}"
    );
    assert!(msg.contains("anchored hash"), "{msg}");
}

#[test]
fn a_column_of_the_wrong_type_is_named() {
    for (column, value) in [
        ("time_ns", "'noon'"),
        ("body", "X'7b7d'"),
        ("hash", "X'00'"),
    ] {
        let msg = problem_after(
            3,
            &format!("UPDATE records SET {column} = {value} WHERE seq = 6"),
        );
        assert!(msg.starts_with("record seq 6 "), "{column}: {msg}");
        assert!(
            msg.contains(&format!("column {column} has the wrong type")),
            "{column}: {msg}"
        );
    }
}

#[test]
fn an_invalid_seq_is_named() {
    let msg = problem_after(2, "UPDATE records SET seq = -7 WHERE seq = 1");
    assert!(msg.contains("invalid seq -7"), "{msg}");
}

#[test]
fn a_first_record_not_chained_to_the_genesis_hash_is_named() {
    let msg = problem_after(
        2,
        &format!(
            "UPDATE records SET prev_hash = '{}' WHERE seq = 1",
            "ef".repeat(32)
        ),
    );
    assert!(msg.starts_with("record seq 1 "), "{msg}");
    assert!(msg.contains("not the genesis hash"), "{msg}");
}

#[test]
fn a_last_record_replaced_with_a_sound_one_is_caught_by_the_head_file() {
    let (_dir, path) = fresh(3);
    let c = tamper(&path);
    let (seq, prev): (i64, String) = c
        .query_row(
            "SELECT seq, prev_hash FROM records ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let prev_raw = cordon_audit::chain::parse_hash(&prev).unwrap();
    let h = cordon_audit::chain::record_hash(seq as u64, 5, "forged", "egress", "{}", &prev_raw);
    c.execute_batch(&format!(
        "UPDATE records SET time_ns = 5, run_id = 'forged', kind = 'egress', body = '{{}}', hash = '{}' WHERE seq = {seq}",
        hex::encode(h)
    ))
    .unwrap();
    drop(c);
    let msg = verify_problem(&path);
    assert!(
        msg.starts_with(&format!("record seq {seq} (run forged, kind egress)")),
        "{msg}"
    );
    assert!(msg.contains("the end of the store was replaced"), "{msg}");
}

#[test]
fn an_anchor_past_the_end_is_named() {
    let (_dir, path) = fresh(2);
    let anchor = Head {
        seq: 99,
        hash: "00".repeat(32),
    };
    let report = AuditStore::open(&path)
        .unwrap()
        .verify_with_anchor(Some(&anchor))
        .unwrap();
    assert!(!report.ok);
    let msg = report.problems[0].to_string();
    assert!(
        msg.starts_with("record seq 99: the anchored record is missing (the store ends at seq 8)"),
        "{msg}"
    );
}

#[test]
fn reader_refuses_missing_store() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        AuditStore::open(dir.path().join("none.db")),
        Err(cordon_audit::AuditError::NotFound(_))
    ));
}
