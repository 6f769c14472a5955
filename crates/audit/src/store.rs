//! The SQLite store: schema, opening, and the reader API.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chain::{Head, HeadFile, StoreLock};
use crate::error::{io, sql, AuditError};
use crate::event::{Record, KIND_INCIDENT, KIND_RUN_STARTED};
use crate::spool;
use crate::time::{format_rfc3339, now_nanos};

mod verify;

/// Schema version this code writes and reads.
pub const SCHEMA_VERSION: i64 = 1;

/// `PRAGMA user_version` of a store whose schema is in place: "cor" and
/// the schema version. Reading it costs no schema parse, so a writer that
/// finds it skips creating and checking the schema (most of the cost of
/// opening a store in a fresh process).
const USER_VERSION: i64 = 0x636f_7200 + SCHEMA_VERSION;

/// How long a connection waits for SQLite's own locks.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- One row per event; append-only; each row carries the previous row's hash.
CREATE TABLE IF NOT EXISTS records (
    seq       INTEGER PRIMARY KEY,   -- 1, 2, 3, ... without gaps
    time_ns   INTEGER NOT NULL,      -- nanoseconds since the Unix epoch
    run_id    TEXT NOT NULL,         -- '' for store-level records
    kind      TEXT NOT NULL,         -- run_started, run_ended, egress, incident, head_mismatch
    body      TEXT NOT NULL,         -- JSON, hashed exactly as stored
    prev_hash TEXT NOT NULL,         -- hash of seq-1 (64 zeros for seq 1)
    hash      TEXT NOT NULL          -- SHA-256, see cordon_audit::chain
);
CREATE INDEX IF NOT EXISTS records_by_run ON records(run_id, seq);
CREATE INDEX IF NOT EXISTS records_by_kind ON records(kind, seq);
-- Content stored once by its SHA-256 (code a run executed, resolved profile text).
CREATE TABLE IF NOT EXISTS blobs (
    hash TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS records_append_only_update BEFORE UPDATE ON records
    BEGIN SELECT RAISE(ABORT, 'audit records are append-only'); END;
CREATE TRIGGER IF NOT EXISTS records_append_only_delete BEFORE DELETE ON records
    BEGIN SELECT RAISE(ABORT, 'audit records are append-only'); END;
CREATE TRIGGER IF NOT EXISTS blobs_append_only_update BEFORE UPDATE ON blobs
    BEGIN SELECT RAISE(ABORT, 'audit blobs are append-only'); END;
CREATE TRIGGER IF NOT EXISTS blobs_append_only_delete BEFORE DELETE ON blobs
    BEGIN SELECT RAISE(ABORT, 'audit blobs are append-only'); END;
-- One row per run, for fast lookup.
CREATE VIEW IF NOT EXISTS runs AS
SELECT run_id,
       MIN(seq) AS first_seq,
       MAX(seq) AS last_seq,
       MIN(CASE WHEN kind = 'run_started' THEN time_ns END) AS started_ns,
       MAX(CASE WHEN kind = 'run_ended' THEN time_ns END) AS ended_ns,
       MAX(CASE WHEN kind = 'run_ended' THEN json_extract(body, '$.reason') END) AS reason,
       MAX(CASE WHEN kind = 'run_ended' THEN json_extract(body, '$.exit_code') END) AS exit_code,
       SUM(kind = 'egress') AS egress,
       SUM(kind = 'incident') AS incidents
FROM records WHERE run_id <> '' GROUP BY run_id;
"#;

/// The default store: `$XDG_STATE_HOME/cordon/audit.db`, else
/// `$HOME/.local/state/cordon/audit.db`.
pub fn default_path() -> Result<PathBuf, AuditError> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return Ok(p.join("cordon").join("audit.db"));
        }
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home)
            .join(".local")
            .join("state")
            .join("cordon")
            .join("audit.db")),
        None => Err(AuditError::NoDefaultPath),
    }
}

fn configure(conn: &Connection, path: &Path) -> Result<(), AuditError> {
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql(path))?;
    Ok(())
}

/// Opens (creating if needed) a store for writing: directory 0700 when
/// created, file 0600, WAL, `synchronous=FULL`, schema in place.
pub(crate) fn open_for_write(path: &Path) -> Result<Connection, AuditError> {
    ensure_dir(path)?;
    let created = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io(path, "create the store")(e)),
    };
    let wal = wal_path(path);
    let wal_existed = std::fs::symlink_metadata(&wal).is_ok();
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql(path))?;
    configure(&conn, path)?;
    // WAL: readers never block the writer. FULL: every commit is on disk
    // before the head file moves, so a crash (even power loss) never leaves
    // the head file ahead of the store.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql(path))?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sql(path))?;
    // A one-shot writer (`cordon run`) must not pay for a checkpoint (two
    // fsyncs and a rewrite of the WAL) after its commit; checkpoints happen
    // at open instead, when the WAL has grown (below).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .map_err(sql(path))?;
    let user_version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql(path))?;
    if user_version != USER_VERSION {
        create_schema(&conn, path)?;
    }
    if created || !wal_existed {
        // The build turns off SQLite's own directory sync, which it would
        // otherwise do on every connection's first commit (see
        // .cargo/config.toml); new files' names are made durable here.
        sync_dir_of(path)?;
    }
    checkpoint_if_grown(&conn, path)?;
    Ok(conn)
}

/// Opens the store for a group-committing writer ([`open_for_write`]),
/// taking the WAL's sync over from SQLite when the store is in WAL mode:
/// `synchronous=NORMAL` writes a commit to the WAL without syncing it, and
/// the writer calls [`sync_wal`] right after, having told those who wait
/// only for the commit (a commit in the files survives this process's
/// death; the sync is for a power loss). Returns whether the writer must
/// sync: false when the store is not in WAL mode (it stays `FULL`).
pub(crate) fn open_for_group_commit(path: &Path) -> Result<(Connection, bool), AuditError> {
    let conn = open_for_write(path)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .map_err(sql(path))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Ok((conn, false));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql(path))?;
    Ok((conn, true))
}

/// Makes the store's WAL durable (`fdatasync`): what SQLite does at each
/// commit under `synchronous=FULL`. Cheap when nothing is unsynced.
pub(crate) fn sync_wal(db: &Path) -> Result<(), AuditError> {
    let wal = wal_path(db);
    match File::open(&wal) {
        Ok(f) => f.sync_data().map_err(io(&wal, "sync the write-ahead log")),
        // Not in WAL mode, or SQLite removed it with its last connection
        // (after checkpointing everything into the database).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(&wal, "open the write-ahead log")(e)),
    }
}

fn wal_path(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_os_string();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// Makes the directory entries of files just created in the store's
/// directory durable.
fn sync_dir_of(path: &Path) -> Result<(), AuditError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "sync the store's directory"))
}

/// Creates the store's directory (0700) when it is missing.
pub(crate) fn ensure_dir(path: &Path) -> Result<(), AuditError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir, "create the store's directory"))?;
        }
    }
    Ok(())
}

/// WAL size above which opening a writer checkpoints the store.
const WAL_CHECKPOINT_BYTES: u64 = 256 * 1024;

/// Moves the WAL into the database and empties it once it has grown past
/// [`WAL_CHECKPOINT_BYTES`]. Every process that opens the store first
/// rebuilds the WAL index by reading the whole WAL, so a small WAL keeps
/// opening cheap. Never waits: if another connection is mid-transaction,
/// a later open does it.
fn checkpoint_if_grown(conn: &Connection, path: &Path) -> Result<(), AuditError> {
    if std::fs::metadata(wal_path(path)).map_or(0, |m| m.len()) <= WAL_CHECKPOINT_BYTES {
        return Ok(());
    }
    conn.busy_timeout(Duration::ZERO).map_err(sql(path))?;
    // The pragma answers with a row (busy, log, checkpointed) rather than
    // an error when others are in the way.
    let done = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql(path))?;
    match done {
        Ok(()) => Ok(()),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(sql(path)(e)),
    }
}

/// Creates whatever part of the schema is missing, checks the version and
/// marks the store (`user_version`), all in one transaction.
fn create_schema(conn: &Connection, path: &Path) -> Result<(), AuditError> {
    let result = conn
        .execute_batch(&format!(
            "BEGIN IMMEDIATE;{SCHEMA}INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '{SCHEMA_VERSION}');"
        ))
        .map_err(sql(path))
        .and_then(|()| check_schema(conn, path))
        .and_then(|()| {
            conn.execute_batch(&format!("PRAGMA user_version = {USER_VERSION}; COMMIT;"))
                .map_err(sql(path))
        });
    if result.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}

fn check_schema(conn: &Connection, path: &Path) -> Result<(), AuditError> {
    let has_records: bool = conn
        .query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records')",
            [],
            |r| r.get(0),
        )
        .map_err(sql(path))?;
    if !has_records {
        return Err(AuditError::NotFound(path.to_path_buf()));
    }
    let version: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql(path))?;
    let found = version.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(AuditError::Schema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// The last record's seq and hash, or the empty head.
/// The store's last record (prepared once per connection).
pub(crate) const QUERY_HEAD: &str = "SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1";

pub(crate) fn query_head(conn: &Connection) -> rusqlite::Result<Head> {
    Ok(conn
        .prepare_cached(QUERY_HEAD)?
        .query_row([], |r| {
            Ok(Head {
                seq: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                hash: lenient_text(r.get_ref(1)?),
            })
        })
        .optional()?
        .unwrap_or_else(Head::empty))
}

fn lenient_text(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Null => String::new(),
    }
}

const COLS: &str = "seq, time_ns, run_id, kind, body, prev_hash, hash";

fn row_to_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<Record> {
    let seq = u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0);
    let time_ns = match r.get_ref(1)? {
        ValueRef::Integer(i) => i,
        _ => 0,
    };
    let body_text = lenient_text(r.get_ref(4)?);
    let body = serde_json::from_str(&body_text).unwrap_or(Value::String(body_text));
    Ok(Record {
        seq,
        time: format_rfc3339(time_ns),
        time_ns,
        run_id: lenient_text(r.get_ref(2)?),
        kind: lenient_text(r.get_ref(3)?),
        body,
        prev_hash: lenient_text(r.get_ref(5)?),
        hash: lenient_text(r.get_ref(6)?),
    })
}

/// Content stored once by hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// SHA-256 of `data`, hex.
    pub hash: String,
    /// The stored (redacted) content.
    pub data: Vec<u8>,
}

/// Everything about one run, in order.
#[derive(Debug, Clone)]
pub struct RunView {
    /// The run's full id.
    pub run_id: String,
    /// Its records, by seq.
    pub records: Vec<Record>,
    /// The code it executed, when it was given as a script or on stdin.
    pub code: Option<Blob>,
    /// The resolved profile text.
    pub profile: Option<Blob>,
}

/// One line per run (from the `runs` view).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Run id.
    pub run_id: String,
    /// First record's seq.
    pub first_seq: u64,
    /// Last record's seq.
    pub last_seq: u64,
    /// Start time (ns), if the start was recorded.
    pub started_ns: Option<i64>,
    /// End time (ns), if the end was recorded.
    pub ended_ns: Option<i64>,
    /// Why it ended.
    pub reason: Option<String>,
    /// Exit code.
    pub exit_code: Option<i64>,
    /// Number of egress records.
    pub egress: u64,
    /// Number of incidents.
    pub incidents: u64,
}

/// The first thing found wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The record concerned, if any.
    pub seq: Option<u64>,
    /// Its run.
    pub run_id: Option<String>,
    /// Its kind.
    pub kind: Option<String>,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.seq {
            Some(seq) => {
                write!(f, "record seq {seq}")?;
                let run = self.run_id.as_deref().filter(|r| !r.is_empty());
                match (run, self.kind.as_deref()) {
                    (Some(r), Some(k)) => write!(f, " (run {r}, kind {k})")?,
                    (None, Some(k)) => write!(f, " (kind {k})")?,
                    (Some(r), None) => write!(f, " (run {r})")?,
                    (None, None) => {}
                }
                write!(f, ": {}", self.what)
            }
            None => f.write_str(&self.what),
        }
    }
}

/// Result of [`AuditStore::verify`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifyReport {
    /// True when nothing is wrong.
    pub ok: bool,
    /// Records checked.
    pub records: u64,
    /// Blobs checked.
    pub blobs: u64,
    /// The store's last record.
    pub head: Head,
    /// The head file, if it could be read.
    pub head_file: Option<HeadFile>,
    /// The external anchor checked, if one was given.
    pub anchor: Option<Head>,
    /// What is wrong, the first broken record first. Empty when `ok`.
    pub problems: Vec<Problem>,
}

/// Read access to a store.
#[derive(Debug)]
pub struct AuditStore {
    path: PathBuf,
    conn: Connection,
    /// Opened read-write: it can fold the spool in.
    writable: bool,
}

impl AuditStore {
    /// Opens an existing store for reading. Never creates one.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AuditError> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(AuditError::NotFound(path));
        }
        // Read-write (without create) so the WAL index can be set up; fall
        // back to read-only for a store we may not write.
        let (conn, writable) = match Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ) {
            Ok(c) => (c, true),
            Err(_) => (
                Connection::open_with_flags(
                    &path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(sql(&path))?,
                false,
            ),
        };
        configure(&conn, &path)?;
        check_schema(&conn, &path)?;
        let store = AuditStore {
            path,
            conn,
            writable,
        };
        store.fold_spool()?;
        Ok(store)
    }

    /// Takes the store's lock (exclusive when the spool can be folded,
    /// shared otherwise) and folds the spool into the database, so that
    /// what is read next is the whole store.
    fn lock_and_fold(&self) -> Result<Option<StoreLock>, AuditError> {
        loop {
            let exclusive = self.writable && !spool::is_empty(&self.path);
            let lock = StoreLock::acquire(&self.path, exclusive, BUSY_TIMEOUT)?;
            if exclusive {
                spool::fold(&self.conn, &self.path)?;
            } else if self.writable && !spool::is_empty(&self.path) {
                // A writer appended between the look and the lock.
                continue;
            }
            return Ok(lock);
        }
    }

    /// Folds records appended to the spool since the last look (no-op,
    /// and no lock, when it is empty).
    fn fold_spool(&self) -> Result<(), AuditError> {
        if self.writable && !spool::is_empty(&self.path) {
            drop(self.lock_and_fold()?);
        }
        Ok(())
    }

    /// The store's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> AuditError + '_ {
        sql(&self.path)
    }

    fn query_records(
        &self,
        where_order: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<Record>, AuditError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {COLS} FROM records {where_order}"))
            .map_err(self.sql())?;
        let rows = stmt.query_map(params, row_to_record).map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// The store's last record (seq and hash) as stored now. Copy it
    /// somewhere the store's owner cannot write, and pass it to
    /// [`AuditStore::verify_with_anchor`] later.
    pub fn head(&self) -> Result<Head, AuditError> {
        query_head(&self.conn).map_err(self.sql())
    }

    /// The last `n` records, oldest first.
    pub fn tail(&self, n: usize) -> Result<Vec<Record>, AuditError> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let mut v = self.query_records("ORDER BY seq DESC LIMIT ?1", params![n])?;
        v.reverse();
        Ok(v)
    }

    /// Up to `limit` records with seq greater than `after`, oldest first.
    pub fn records_after(&self, after: u64, limit: usize) -> Result<Vec<Record>, AuditError> {
        self.fold_spool()?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.query_records(
            "WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            params![after, limit],
        )
    }

    /// Calls `f` with every record after seq `after`, then polls every
    /// `poll` for new ones, until `f` returns false. Returns the last seq
    /// seen.
    pub fn follow(
        &self,
        after: u64,
        poll: Duration,
        mut f: impl FnMut(&Record) -> bool,
    ) -> Result<u64, AuditError> {
        let mut last = after;
        loop {
            let batch = self.records_after(last, 1000)?;
            let full = batch.len() == 1000;
            for r in &batch {
                last = r.seq;
                if !f(r) {
                    return Ok(last);
                }
            }
            if !full {
                std::thread::sleep(poll);
            }
        }
    }

    /// Resolves a full run id or a unique prefix of one.
    pub fn resolve_run(&self, id: &str) -> Result<String, AuditError> {
        let exact: bool = self
            .conn
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM records WHERE run_id = ?1)",
                params![id],
                |r| r.get(0),
            )
            .map_err(self.sql())?;
        if exact && !id.is_empty() {
            return Ok(id.to_string());
        }
        if id.is_empty() {
            return Err(AuditError::RunNotFound(id.to_string()));
        }
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT run_id FROM records
                 WHERE run_id >= ?1 AND run_id < ?1 || char(1114111) LIMIT 6",
            )
            .map_err(self.sql())?;
        let found: Vec<String> = stmt
            .query_map(params![id], |r| r.get::<_, String>(0))
            .map_err(self.sql())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql())?
            .into_iter()
            .filter(|r| r.starts_with(id))
            .collect();
        match found.as_slice() {
            [] => Err(AuditError::RunNotFound(id.to_string())),
            [one] => Ok(one.clone()),
            many => Err(AuditError::AmbiguousRun {
                prefix: id.to_string(),
                candidates: many.join(", "),
            }),
        }
    }

    /// The newest run whose start record's `enforcement` has `field` equal
    /// to `value` (e.g. the server's sandbox runs carry
    /// `{"sandbox": id}`); `None` when there is none.
    pub fn run_started_with(&self, field: &str, value: &str) -> Result<Option<String>, AuditError> {
        self.conn
            .query_row(
                "SELECT run_id FROM records
                 WHERE kind = ?1 AND json_valid(body)
                   AND json_extract(body, '$.enforcement.' || ?2) = ?3
                 ORDER BY seq DESC LIMIT 1",
                params![KIND_RUN_STARTED, field, value],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(self.sql())
    }

    /// Everything about one run (full id or unique prefix), in order, with
    /// the code and profile it referenced.
    pub fn show(&self, run_id: &str) -> Result<RunView, AuditError> {
        let run_id = self.resolve_run(run_id)?;
        let records = self.query_records("WHERE run_id = ?1 ORDER BY seq", params![run_id])?;
        let mut code = None;
        let mut profile = None;
        for r in records.iter().filter(|r| r.kind == KIND_RUN_STARTED) {
            if let Some(h) = r.body.get("code_hash").and_then(Value::as_str) {
                code = self.blob(h)?;
            }
            if let Some(h) = r.body.get("profile_hash").and_then(Value::as_str) {
                profile = self.blob(h)?;
            }
        }
        Ok(RunView {
            run_id,
            records,
            code,
            profile,
        })
    }

    /// A blob by hash.
    pub fn blob(&self, hash: &str) -> Result<Option<Blob>, AuditError> {
        self.conn
            .query_row(
                "SELECT hash, data FROM blobs WHERE hash = ?1",
                params![hash],
                |r| {
                    Ok(Blob {
                        hash: r.get(0)?,
                        data: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(self.sql())
    }

    /// Incidents, newest first; only those younger than `since` if given.
    pub fn incidents(&self, since: Option<Duration>) -> Result<Vec<Record>, AuditError> {
        let from = match since {
            Some(d) => now_nanos().saturating_sub(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
            None => i64::MIN,
        };
        self.query_records(
            "WHERE kind = ?1 AND time_ns >= ?2 ORDER BY seq DESC",
            params![KIND_INCIDENT, from],
        )
    }

    /// The most recent `limit` runs, newest first.
    pub fn runs(&self, limit: usize) -> Result<Vec<RunSummary>, AuditError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT run_id, first_seq, last_seq, started_ns, ended_ns, reason, exit_code,
                        egress, incidents
                 FROM runs ORDER BY first_seq DESC LIMIT ?1",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(params![limit], |r| {
                Ok(RunSummary {
                    run_id: r.get(0)?,
                    first_seq: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    last_seq: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                    started_ns: r.get(3)?,
                    ended_ns: r.get(4)?,
                    reason: r.get(5).ok(),
                    exit_code: r.get(6).ok(),
                    egress: u64::try_from(r.get::<_, i64>(7)?).unwrap_or(0),
                    incidents: u64::try_from(r.get::<_, i64>(8)?).unwrap_or(0),
                })
            })
            .map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// Writes every record, oldest first, one JSON object per line (the
    /// [`Record`] fields). Returns the number written.
    pub fn export_jsonl(&self, mut out: impl Write) -> Result<u64, AuditError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {COLS} FROM records ORDER BY seq"))
            .map_err(self.sql())?;
        let mut rows = stmt.query([]).map_err(self.sql())?;
        let mut n = 0u64;
        let out_err = |e: std::io::Error| AuditError::Io {
            path: PathBuf::from("<export output>"),
            action: "write the export",
            source: e,
        };
        while let Some(row) = rows.next().map_err(self.sql())? {
            let rec = row_to_record(row).map_err(self.sql())?;
            serde_json::to_writer(&mut out, &rec)?;
            out.write_all(b"\n").map_err(out_err)?;
            n += 1;
        }
        out.flush().map_err(out_err)?;
        Ok(n)
    }

    /// Writes every run as an OpenTelemetry trace in OTLP/JSON (one
    /// document); returns the number of records read.
    pub fn export_otlp_json(&self, mut out: impl Write) -> Result<u64, AuditError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {COLS} FROM records ORDER BY seq"))
            .map_err(self.sql())?;
        let mut rows = stmt.query([]).map_err(self.sql())?;
        let mut records = Vec::new();
        while let Some(row) = rows.next().map_err(self.sql())? {
            records.push(row_to_record(row).map_err(self.sql())?);
        }
        let out_err = |e: std::io::Error| AuditError::Io {
            path: PathBuf::from("<export output>"),
            action: "write the export",
            source: e,
        };
        serde_json::to_writer(&mut out, &crate::otlp::traces(&records))?;
        out.write_all(b"\n").map_err(out_err)?;
        out.flush().map_err(out_err)?;
        Ok(records.len() as u64)
    }
}
