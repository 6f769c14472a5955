//! The spool: where a short-lived writer (one `cordon run`) appends its
//! records without opening SQLite.
//!
//! Opening SQLite in a fresh process, and committing through it, cost a
//! one-shot run more than the run itself on a small machine. A writer in
//! spool mode ([`crate::WriterOptions::spool`]) instead appends each batch,
//! already placed in the hash chain, to `<db>.spool`: one `write`, one
//! `fdatasync`, under the store's lock, with the same head-file protocol
//! as a SQLite commit (pending head first, head after). Every reader and
//! every SQLite writer folds the spool into the database first (in one
//! transaction, records inserted exactly as chained), then empties it.
//!
//! Format: one JSON object per line; a batch is its blob and record lines
//! followed by a commit line naming the batch's last record:
//!
//! ```text
//! {"blob":{"hash":"…","text":"…"}}            (or "hex" when not UTF-8)
//! {"record":{"seq":42,"time_ns":…,"run_id":"…","kind":"run_started","body":"{…}","prev_hash":"…","hash":"…"}}
//! {"commit":{"seq":42,"hash":"…"}}
//! ```
//!
//! A batch without its commit line (a writer killed mid-append) is dropped
//! when the spool is folded: as with any crash, the records of the run in
//! flight are lost, never the chain. A batch whose records collide with
//! different records already in the database is refused (the spool is
//! left in place) and named in the error; editing a spooled record is
//! caught by `verify` once folded, and deleting the spool by the head file.
//!
//! When the spool is the freshest part of the store its last commit line is
//! the store's head; a spool-mode writer chains from it only when the head
//! file agrees and has no commit pending, and otherwise asks SQLite.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use crate::chain::Head;
use crate::error::{io, sql, AuditError};

/// A spool larger than this is folded by the next spool-mode commit.
pub(crate) const FOLD_BYTES: u64 = 1 << 20;

/// One record placed in the chain, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Chained {
    pub(crate) seq: u64,
    pub(crate) time_ns: i64,
    pub(crate) run_id: String,
    pub(crate) kind: String,
    pub(crate) body: String,
    pub(crate) prev_hash: String,
    pub(crate) hash: String,
}

/// A blob: its text when it is UTF-8 (code, profiles: readable, and
/// searchable by anyone checking the files for leaks), hex otherwise.
#[derive(Debug, Serialize, Deserialize)]
struct BlobLine {
    hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

impl BlobLine {
    fn new(hash: &str, data: &[u8]) -> BlobLine {
        match std::str::from_utf8(data) {
            Ok(t) => BlobLine {
                hash: hash.to_owned(),
                text: Some(t.to_owned()),
                hex: None,
            },
            Err(_) => BlobLine {
                hash: hash.to_owned(),
                text: None,
                hex: Some(hex::encode(data)),
            },
        }
    }

    fn data(&self) -> Vec<u8> {
        match (&self.text, &self.hex) {
            (Some(t), _) => t.as_bytes().to_vec(),
            (None, Some(h)) => hex::decode(h).unwrap_or_default(),
            (None, None) => Vec::new(),
        }
    }
}

/// Inserts one record exactly as chained (SQLite writers and folding).
pub(crate) const INSERT_RECORD: &str =
    "INSERT INTO records (seq, time_ns, run_id, kind, body, prev_hash, hash)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
/// Stores a blob once.
pub(crate) const INSERT_BLOB: &str =
    "INSERT OR IGNORE INTO blobs (hash, size, data) VALUES (?1, ?2, ?3)";

pub(crate) fn insert_record(conn: &Connection, r: &Chained) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT_RECORD)?.execute(params![
        i64::try_from(r.seq).unwrap_or(i64::MAX),
        r.time_ns,
        r.run_id,
        r.kind,
        r.body,
        r.prev_hash,
        r.hash
    ])?;
    Ok(())
}

pub(crate) fn insert_blob(conn: &Connection, hash: &str, data: &[u8]) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT_BLOB)?.execute(params![
        hash,
        i64::try_from(data.len()).unwrap_or(i64::MAX),
        data
    ])?;
    Ok(())
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Blob(BlobLine),
    Record(Chained),
    Commit(Head),
}

/// `<db>.spool`.
pub(crate) fn path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_os_string();
    s.push(".spool");
    PathBuf::from(s)
}

/// Size of the spool in bytes (0 when there is none).
pub(crate) fn len(db: &Path) -> u64 {
    std::fs::symlink_metadata(path(db)).map_or(0, |m| m.len())
}

/// Whether the spool holds nothing (or does not exist).
pub(crate) fn is_empty(db: &Path) -> bool {
    len(db) == 0
}

/// The head named by the spool's last commit line; `None` when the spool
/// is empty, missing or ends without one.
pub(crate) fn tail(db: &Path) -> Result<Option<Head>, AuditError> {
    let p = path(db);
    let mut f = match File::open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&p, "read the spool")(e)),
    };
    let size = f.metadata().map_err(io(&p, "read the spool"))?.len();
    // A commit line is short; the last 4 KiB hold the last one unless the
    // batch ended torn, in which case the caller asks SQLite anyway.
    let from = size.saturating_sub(4096);
    f.seek(SeekFrom::Start(from))
        .map_err(io(&p, "read the spool"))?;
    let mut text = Vec::new();
    f.read_to_end(&mut text).map_err(io(&p, "read the spool"))?;
    if !text.ends_with(b"\n") {
        return Ok(None);
    }
    let last = text[..text.len() - 1]
        .rsplit(|b| *b == b'\n')
        .next()
        .unwrap_or_default();
    Ok(match serde_json::from_slice::<Line>(last) {
        Ok(Line::Commit(h)) => Some(h),
        _ => None,
    })
}

/// Appends one batch and makes it durable. The caller holds the store's
/// exclusive lock and has chained `records` from the current head.
pub(crate) fn append(
    db: &Path,
    blobs: &[(&str, &[u8])],
    records: &[Chained],
    new_head: &Head,
) -> Result<(), AuditError> {
    let mut text = Vec::with_capacity(512 * (records.len() + blobs.len() + 1));
    let mut line = |l: &Line| -> Result<(), AuditError> {
        serde_json::to_writer(&mut text, l)?;
        text.push(b'\n');
        Ok(())
    };
    for (hash, data) in blobs {
        line(&Line::Blob(BlobLine::new(hash, data)))?;
    }
    for r in records {
        line(&Line::Record(r.clone()))?;
    }
    line(&Line::Commit(new_head.clone()))?;
    let p = path(db);
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&p)
        .map_err(io(&p, "open the spool"))?;
    // One write: a process killed during it leaves at most a batch without
    // its commit line, which folding drops.
    f.write_all(&text).map_err(io(&p, "append to the spool"))?;
    f.sync_data().map_err(io(&p, "sync the spool"))?;
    Ok(())
}

/// Moves every complete batch of the spool into the database in one
/// transaction, then empties the spool. The caller holds the store's
/// exclusive lock. Returns the number of records folded.
pub(crate) fn fold(conn: &Connection, db: &Path) -> Result<u64, AuditError> {
    if is_empty(db) {
        return Ok(0);
    }
    let p = path(db);
    let text = match std::fs::read(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(&p, "read the spool")(e)),
    };
    if text.is_empty() {
        return Ok(0);
    }
    // Complete batches only: everything up to the last commit line.
    let mut batches: Vec<(Vec<BlobLine>, Vec<Chained>)> = Vec::new();
    let (mut blobs, mut records) = (Vec::new(), Vec::new());
    for raw in text.split(|b| *b == b'\n') {
        if raw.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Line>(raw) {
            Ok(Line::Blob(b)) => blobs.push(b),
            Ok(Line::Record(r)) => records.push(r),
            Ok(Line::Commit(_)) => {
                batches.push((std::mem::take(&mut blobs), std::mem::take(&mut records)));
            }
            // A torn or foreign line: the batch it belongs to is not whole.
            Err(_) => {
                blobs.clear();
                records.clear();
            }
        }
    }
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
        .map_err(sql(db))?;
    let mut folded = 0u64;
    {
        let mut existing = tx
            .prepare_cached("SELECT hash FROM records WHERE seq = ?1")
            .map_err(sql(db))?;
        for (blobs, records) in &batches {
            for b in blobs {
                insert_blob(&tx, &b.hash, &b.data()).map_err(sql(db))?;
            }
            for r in records {
                let seq = i64::try_from(r.seq).unwrap_or(i64::MAX);
                let there: Option<String> = existing
                    .query_row(params![seq], |row| row.get(0))
                    .optional()
                    .map_err(sql(db))?;
                match there {
                    // Folded before, and the spool was not emptied (a crash
                    // between the two): nothing to do.
                    Some(h) if h == r.hash => continue,
                    Some(h) => {
                        return Err(AuditError::SpoolConflict {
                            path: p.clone(),
                            seq: r.seq,
                            stored: h,
                            spooled: r.hash.clone(),
                        })
                    }
                    None => {}
                }
                insert_record(&tx, r).map_err(sql(db))?;
                folded += 1;
            }
        }
    }
    tx.commit().map_err(sql(db))?;
    // Emptied only once the records are durable in the database (a
    // group-committing writer's connection leaves the WAL's sync to it).
    crate::store::sync_wal(db)?;
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&p)
        .map_err(io(&p, "empty the spool"))?;
    f.set_len(0).map_err(io(&p, "empty the spool"))?;
    f.sync_all().map_err(io(&p, "empty the spool"))?;
    Ok(folded)
}
