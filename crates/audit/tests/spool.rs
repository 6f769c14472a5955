//! Spool mode: short-lived writers append chained batches to `<db>.spool`
//! without SQLite; readers and SQLite writers fold them in. The chain, the
//! head file and every tamper check hold across the two.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use cordon_audit::{AuditStore, AuditWriter, WriterOptions};

fn spooled() -> WriterOptions {
    WriterOptions {
        spool: true,
        ..Default::default()
    }
}

fn spool_of(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_os_string();
    s.push(".spool");
    PathBuf::from(s)
}

/// Bytes of content in the spool (what comes before a zero byte, if any:
/// JSON text holds none).
fn spool_content(db: &Path) -> usize {
    let data = std::fs::read(spool_of(db)).unwrap_or_default();
    data.iter().position(|b| *b == 0).unwrap_or(data.len())
}

fn spool_writer_runs(db: &Path, prefix: &str, writers: usize) {
    for i in 0..writers {
        let w = AuditWriter::open_with(db, spooled()).unwrap();
        write_runs(&w, &format!("{prefix}{i}"), 1);
        w.close().unwrap();
    }
}

fn verify(db: &Path) -> cordon_audit::VerifyReport {
    AuditStore::open(db).unwrap().verify().unwrap()
}

#[test]
fn spooled_runs_are_folded_in_by_a_reader_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_path(&dir);
    spool_writer_runs(&db, "s", 5);
    assert!(spool_content(&db) > 0);
    let report = verify(&db);
    assert!(report.ok, "{:?}", report.problems);
    assert_eq!(report.records, 5 * 4);
    assert_eq!(spool_content(&db), 0);
    let store = AuditStore::open(&db).unwrap();
    let view = store.show("s3-0000").unwrap();
    assert_eq!(view.records.len(), 4);
    assert!(view.code.is_some() && view.profile.is_some());
}

#[test]
fn after_the_first_a_spooled_commit_does_not_touch_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_path(&dir);
    spool_writer_runs(&db, "first", 1);
    let wal = db.with_extension("db-wal");
    let files = |p: &Path| std::fs::read(p).unwrap_or_default();
    let (db_before, wal_before) = (files(&db), files(&wal));
    let spool_before = spool_content(&db);
    spool_writer_runs(&db, "next", 3);
    assert_eq!(files(&db), db_before, "the database file changed");
    assert_eq!(files(&wal), wal_before, "the WAL changed");
    assert!(spool_content(&db) > spool_before);
    assert!(verify(&db).ok);
}

#[test]
fn spool_and_sqlite_writers_interleave_into_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_path(&dir);
    let sqlite = AuditWriter::open(&db).unwrap();
    for round in 0..4 {
        write_runs(&sqlite, &format!("q{round}-"), 2);
        sqlite.flush().unwrap();
        spool_writer_runs(&db, &format!("s{round}-"), 2);
    }
    sqlite.close().unwrap();
    let report = verify(&db);
    assert!(report.ok, "{:?}", report.problems);
    assert_eq!(report.records, 4 * (2 + 2) * 4);
}

#[test]
fn a_batch_cut_short_is_dropped_and_the_store_still_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_path(&dir);
    spool_writer_runs(&db, "s", 2);
    // A writer killed in the middle of its one write: records, no commit.
    let text = std::fs::read_to_string(spool_of(&db)).unwrap();
    let first_batch_end = text.find("{\"commit\"").unwrap();
    let mut torn = text[..first_batch_end].to_owned();
    torn.push_str("{\"record\":{\"seq\":99,\"ti");
    // Written where the next batch would go.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(spool_of(&db))
        .unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(torn.as_bytes(), spool_content(&db) as u64)
        .unwrap();
    drop(f);
    assert!(spool_content(&db) > text.len());
    let report = verify(&db);
    assert!(report.ok, "{:?}", report.problems);
    assert_eq!(report.records, 2 * 4);
    // Later writers carry on from the real head.
    spool_writer_runs(&db, "after", 1);
    let report = verify(&db);
    assert!(report.ok, "{:?}", report.problems);
    assert_eq!(report.records, 3 * 4);
}

#[test]
fn an_edited_spooled_record_is_named_once_folded() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_path(&dir);
    spool_writer_runs(&db, "s", 2);
    // The second run's start (seq 5): its argv, in the second batch.
    let text = std::fs::read_to_string(spool_of(&db)).unwrap();
    let first = text.find("job0.py").unwrap();
    let second = first + 1 + text[first + 1..].find("job0.py").unwrap();
    let edited = format!("{}evil.py{}", &text[..second], &text[second + 7..]);
    std::fs::write(spool_of(&db), edited).unwrap();
    let report = verify(&db);
    assert!(!report.ok);
    let first = &report.problems[0];
    assert_eq!(first.seq, Some(5), "{:?}", report.problems);
    assert!(first.what.contains("does not match its hash"), "{first:?}");
}

#[test]
fn a_deleted_spool_is_caught_by_the_head_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_path(&dir);
    spool_writer_runs(&db, "s", 1);
    let sqlite = AuditWriter::open(&db).unwrap();
    write_runs(&sqlite, "q", 1);
    sqlite.close().unwrap();
    spool_writer_runs(&db, "t", 2);
    std::fs::remove_file(spool_of(&db)).unwrap();
    let report = verify(&db);
    assert!(!report.ok);
    let all = format!("{:?}", report.problems);
    assert!(all.contains("cut off the end"), "{all}");
}

#[test]
fn a_spool_that_collides_with_the_store_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_path(&dir);
    spool_writer_runs(&db, "s", 2);
    let saved = std::fs::read(spool_of(&db)).unwrap();
    assert!(verify(&db).ok);
    // The same seqs again, one of them a different record (its own hash):
    // a spool written against a head that is not the store's.
    let text: String = String::from_utf8(saved)
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with("{\"record\":{\"seq\":1,") {
                let at = l.rfind("\"hash\":\"").unwrap() + 8;
                format!("{}{}{}", &l[..at], "ab".repeat(32), &l[at + 64..])
            } else {
                l.to_owned()
            }
        })
        .map(|l| l + "\n")
        .collect();
    std::fs::write(spool_of(&db), &text).unwrap();
    let err = AuditStore::open(&db).unwrap_err().to_string();
    assert!(err.contains("collides"), "{err}");
    assert!(err.contains("seq 1"), "{err}");
    assert_eq!(std::fs::read_to_string(spool_of(&db)).unwrap(), text);
}

#[test]
fn a_grown_spool_is_folded_by_the_next_spooled_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = store_path(&dir);
    let w = AuditWriter::open_with(&db, spooled()).unwrap();
    // Big bodies, so the spool passes its fold size quickly.
    let big = "x".repeat(200_000);
    for i in 0..8 {
        w.append(&format!("r{i}"), ended(&big)).unwrap();
        w.flush().unwrap();
    }
    w.close().unwrap();
    let size = spool_content(&db);
    assert!(size < 1 << 20, "spool grew to {size} bytes");
    let report = verify(&db);
    assert!(report.ok, "{:?}", report.problems);
    assert_eq!(report.records, 8);
}
