use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong in the audit store.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// SQLite reported an error.
    #[error("audit store {path}: {source}")]
    Sqlite {
        /// The store's path.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// A file operation failed.
    #[error("audit store {path}: cannot {action}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// There is no store at this path (readers never create one).
    #[error("no audit store at {0}: nothing has been audited there yet; pass the right path with --store or CORDON_AUDIT")]
    NotFound(PathBuf),
    /// Neither `XDG_STATE_HOME` nor `HOME` is set.
    #[error("cannot find a default audit store: neither XDG_STATE_HOME nor HOME is set; pass a path explicitly")]
    NoDefaultPath,
    /// The store was written by a newer, incompatible cordon.
    #[error("audit store {path} has schema version {found}; this cordon understands version {supported}: upgrade cordon")]
    Schema {
        /// The store's path.
        path: PathBuf,
        /// Version found in the store.
        found: i64,
        /// Version this code writes.
        supported: i64,
    },
    /// A record could not be encoded.
    #[error("cannot encode an audit record: {0}")]
    Encode(#[from] serde_json::Error),
    /// The background writer stopped (after an error, or after `close`).
    #[error("the audit writer has stopped: {0}")]
    WriterStopped(String),
    /// A commit failed; the records stay queued and are retried.
    #[error("audit commit failed (records are kept and retried): {0}")]
    CommitFailed(String),
    /// Another process held the store's lock for too long.
    #[error("waited {waited:?} for the lock on {path}; another cordon process holds it (a stopped process?)")]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// No run with this id (or id prefix).
    #[error("no run {0} in the audit store")]
    RunNotFound(String),
    /// A run id prefix matches several runs.
    #[error("run id prefix {prefix} matches several runs: {candidates}; give more characters")]
    AmbiguousRun {
        /// What was asked for.
        prefix: String,
        /// Some of the runs it matches.
        candidates: String,
    },
    /// A spooled record collides with a different record already in the
    /// database: the spool was written against a head that is not the
    /// store's (tampering, or a store restored from a copy). The spool is
    /// left as it is.
    #[error("audit spool {path}: its record seq {seq} (hash {spooled}) collides with a different record in the store (hash {stored}); the spool was left in place. Keep a copy of it as evidence, move it aside to read and write the store again, and check the store against a head anchor kept elsewhere (cordon audit verify --anchor SEQ:HASH)")]
    SpoolConflict {
        /// The spool file.
        path: std::path::PathBuf,
        /// The colliding seq.
        seq: u64,
        /// Hash of the record in the database.
        stored: String,
        /// Hash of the spooled record.
        spooled: String,
    },
    /// An anchor string could not be parsed.
    #[error("invalid head anchor {0:?}: expected SEQ:HASH, e.g. 1042:3f5a…(64 hex digits)")]
    BadAnchor(String),
}

pub(crate) fn sql(path: &std::path::Path) -> impl Fn(rusqlite::Error) -> AuditError + '_ {
    move |source| AuditError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn io<'a>(
    path: &'a std::path::Path,
    action: &'static str,
) -> impl Fn(std::io::Error) -> AuditError + 'a {
    move |source| AuditError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}
