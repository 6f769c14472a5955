//! How the writer commits: the commit delay, the head file written in
//! place, the WAL kept small across many short-lived writers, and stores
//! from before the schema marker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use cordon_audit::{AuditStore, AuditWriter, WriterOptions};

fn delayed(delay: Duration) -> WriterOptions {
    WriterOptions {
        commit_delay: delay,
        ..Default::default()
    }
}

fn records(path: &std::path::Path) -> u64 {
    AuditStore::open(path).unwrap().head().unwrap().seq
}

#[test]
fn commit_delay_holds_records_until_it_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open_with(&path, delayed(Duration::from_millis(400))).unwrap();
    let appended = Instant::now();
    w.append("r1", started(1)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // Another process sees nothing yet, unless the delay already passed
    // (a very slow machine): then the record must be there.
    let early = records(&path);
    assert!(
        early == 0 || appended.elapsed() >= Duration::from_millis(400),
        "committed before the delay: {early} records after {:?}",
        appended.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while records(&path) == 0 {
        assert!(Instant::now() < deadline, "never committed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(appended.elapsed() >= Duration::from_millis(400));
    w.close().unwrap();
}

#[test]
fn flush_and_close_do_not_wait_for_the_delay() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open_with(&path, delayed(Duration::from_secs(30))).unwrap();
    let t = Instant::now();
    w.append("r1", started(1)).unwrap();
    assert_eq!(w.flush().unwrap().seq, 1);
    w.append("r1", ended("done")).unwrap();
    assert_eq!(w.close().unwrap().seq, 2);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(AuditStore::open(&path).unwrap().verify().unwrap().ok);
}

#[test]
fn start_and_end_within_the_delay_are_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "first", 1);
    w.close().unwrap();
    let wal = path.with_extension("db-wal");
    let before = wal_commit_frames(&std::fs::read(&wal).unwrap());
    let w = AuditWriter::open_with(&path, delayed(Duration::from_secs(30))).unwrap();
    w.append("r1", started(1)).unwrap();
    w.append("r1", ended("done")).unwrap();
    w.close().unwrap();
    // One transaction appends one batch of WAL frames ending in one commit
    // frame; two transactions would leave two more commit frames.
    let after = wal_commit_frames(&std::fs::read(&wal).unwrap());
    assert_eq!(after - before, 1, "{before} commits before, {after} after");
}

/// Number of commit frames in a WAL file (frames whose header carries a
/// non-zero database size after the commit).
fn wal_commit_frames(wal: &[u8]) -> usize {
    let page = u32::from_be_bytes(wal[8..12].try_into().unwrap()) as usize;
    let mut at = 32;
    let mut commits = 0;
    let salt = &wal[16..24];
    while at + 24 + page <= wal.len() {
        let header = &wal[at..at + 24];
        if &header[8..16] != salt {
            break;
        }
        if u32::from_be_bytes(header[4..8].try_into().unwrap()) != 0 {
            commits += 1;
        }
        at += 24 + page;
    }
    commits
}

#[test]
fn head_file_is_rewritten_in_place_at_a_fixed_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let hf = cordon_audit::chain::head_file_path(&path);
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "a", 1);
    w.flush().unwrap();
    let meta = std::fs::metadata(&hf).unwrap();
    use std::os::unix::fs::MetadataExt;
    let inode = meta.ino();
    assert_eq!(meta.len(), 512);
    write_runs(&w, "b", 3);
    let head = w.close().unwrap();
    let meta = std::fs::metadata(&hf).unwrap();
    assert_eq!(
        meta.ino(),
        inode,
        "the head file was replaced, not rewritten"
    );
    assert_eq!(meta.len(), 512);
    let parsed = cordon_audit::chain::read_head_file(&path).unwrap().unwrap();
    assert_eq!(parsed.head, head);
    assert_eq!(parsed.pending, None);
}

#[test]
fn a_longer_head_file_is_cut_to_size_and_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "a", 1);
    let head = w.close().unwrap();
    // An older format (or an editor) left a longer file that agrees.
    let hf = cordon_audit::chain::head_file_path(&path);
    let long = format!(
        "{}\n{}",
        serde_json::to_string(&cordon_audit::HeadFile {
            version: 1,
            head: head.clone(),
            pending: None
        })
        .unwrap(),
        " ".repeat(2000)
    );
    std::fs::write(&hf, long).unwrap();
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "b", 1);
    w.close().unwrap();
    assert_eq!(std::fs::metadata(&hf).unwrap().len(), 512);
    let report = AuditStore::open(&path).unwrap().verify().unwrap();
    assert!(report.ok, "{:?}", report.problems);
}

#[test]
fn many_short_lived_writers_keep_the_wal_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let wal = path.with_extension("db-wal");
    let mut largest = 0;
    for i in 0..150 {
        let w = AuditWriter::open(&path).unwrap();
        write_runs(&w, &format!("r{i}"), 1);
        w.close().unwrap();
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    // Each writer checkpoints at open once the WAL passes 256 KiB; one
    // writer's own records come on top of that.
    assert!(largest < 1024 * 1024, "WAL grew to {largest} bytes");
    let report = AuditStore::open(&path).unwrap().verify().unwrap();
    assert!(report.ok, "{:?}", report.problems);
    assert_eq!(report.records, 150 * 4, "{report:?}");
}

#[test]
fn a_store_without_the_schema_marker_is_checked_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "a", 2);
    w.close().unwrap();
    // As a store written before the marker existed.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.pragma_update(None, "user_version", 0).unwrap();
    drop(c);
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "b", 2);
    w.close().unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_ne!(v, 0);
    drop(c);
    assert!(AuditStore::open(&path).unwrap().verify().unwrap().ok);
}

#[test]
fn a_marked_file_without_the_tables_fails_at_the_first_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "a", 1);
    w.close().unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("DROP VIEW runs; DROP TABLE records;")
        .unwrap();
    drop(c);
    let w = AuditWriter::open(&path).unwrap();
    write_runs(&w, "b", 1);
    let err = w.close().unwrap_err().to_string();
    assert!(err.contains("records"), "{err}");
}

#[test]
fn inline_writer_commits_only_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    for spool in [false, true] {
        let options = WriterOptions {
            spool,
            ..Default::default()
        };
        let before = if path.exists() { records(&path) } else { 0 };
        let mut w = cordon_audit::InlineWriter::open_with(&path, options.clone()).unwrap();
        let blob = w.put_blob(b"print(1)").unwrap();
        let mut s = started(1);
        s.code_hash = Some(blob);
        w.append("inline", s).unwrap();
        assert_eq!(records(&path), before, "committed before commit()");
        let head = w.commit().unwrap();
        assert_eq!(head.seq, before + 1);
        assert_eq!(records(&path), before + 1);
        w.append("inline", ended("done")).unwrap();
        assert_eq!(w.commit().unwrap().seq, before + 2);
        // Nothing new: the same head, no empty batch.
        assert_eq!(w.commit().unwrap().seq, before + 2);
        // Appended and dropped without a commit: lost, as in a crash.
        w.append("inline", ended("lost")).unwrap();
        drop(w);
        let report = AuditStore::open(&path).unwrap().verify().unwrap();
        assert!(report.ok, "{:?}", report.problems);
        assert_eq!(report.records, before + 2, "spool={spool}");
        let view = AuditStore::open(&path).unwrap().show("inline").unwrap();
        assert_eq!(view.code.unwrap().data, b"print(1)");
    }
}

/// A flush that comes while the writer is still waking from its wait for
/// the first record: its wake-up may be taken by that wait, and the
/// writer must still see the flush before it sleeps out the delay.
#[test]
fn a_flush_right_after_the_first_record_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open_with(&path, delayed(Duration::from_secs(3))).unwrap();
    for i in 0..200usize {
        let t = Instant::now();
        w.append("r1", started(i)).unwrap();
        assert_eq!(w.flush().unwrap().seq, i as u64 + 1);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "flush {i} waited {:?}",
            t.elapsed()
        );
        // Let the writer go back to waiting for the next first record.
        std::thread::sleep(Duration::from_millis(2));
    }
    w.close().unwrap();
}

/// `committed_then` answers before the WAL's sync, once the records are in
/// the store's files: a writer killed right after still has them. The
/// commit delay is long, so only the commit the call asked for can have
/// put the record there. (The child is this test's own binary.)
#[test]
fn a_commit_waited_for_survives_a_sigkill_of_the_writer() {
    if let Some(path) = std::env::var_os("CORDON_AUDIT_TEST_CHILD_STORE") {
        let w = AuditWriter::open_with(&path, delayed(Duration::from_secs(30))).unwrap();
        w.append("r1", started(1)).unwrap();
        w.committed_then(|r| {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "committed {}", r.map(|h| h.seq).unwrap_or(0));
            let _ = out.flush();
        })
        .unwrap();
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_commit_waited_for_survives_a_sigkill_of_the_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CORDON_AUDIT_TEST_CHILD_STORE", &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let said = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest prints the test's name on the same line first.
        .find_map(|l| l.find("committed ").map(|at| l[at..].to_owned()));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(said.as_deref(), Some("committed 1"));
    assert_eq!(
        records(&path),
        1,
        "the commit was answered before it was made"
    );
    // The chain goes on from it without a head mismatch: the head file
    // said the commit was pending when the writer died.
    let w = AuditWriter::open(&path).unwrap();
    w.append("r1", ended("done")).unwrap();
    assert_eq!(w.close().unwrap().seq, 2);
    let report = AuditStore::open(&path).unwrap().verify().unwrap();
    assert!(report.ok, "{report:?}");
}

/// A store that cannot take a commit says so (`failing`, which the server
/// refuses actions on) until a commit succeeds again; the records wait
/// in memory meanwhile and are committed then, in order.
#[test]
fn a_store_that_cannot_commit_is_failing_until_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let w = AuditWriter::open_with(&path, delayed(Duration::from_millis(5))).unwrap();
    w.append("r1", started(1)).unwrap();
    w.flush().unwrap();
    assert_eq!(w.failing(), None);
    // A directory where the head file was: no commit can announce its
    // head (the open for writing fails with EISDIR, as root too).
    let head = cordon_audit::chain::head_file_path(&path);
    std::fs::remove_file(&head).unwrap();
    std::fs::create_dir(&head).unwrap();
    w.append("r1", ended("done")).unwrap();
    let err = w
        .flush()
        .expect_err("a commit without its head file went through");
    let failing = w.failing().expect("the failed commit is not reported");
    assert!(err.to_string().contains(&failing), "{err} / {failing}");
    assert_eq!(records(&path), 1, "the record was committed");
    // The store is writable again: the writer's retry commits what waited.
    std::fs::remove_dir(&head).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.failing().is_some() {
        assert!(
            Instant::now() < deadline,
            "still failing: {:?}",
            w.failing()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The end, and the note the chain keeps of its head file's removal.
    assert_eq!(records(&path), 3);
    w.close().unwrap();
}
