//! The hash chain, the head file next to the database, and the lock that
//! keeps both in step.
//!
//! Record hash: SHA-256 over
//!
//! ```text
//! "cordon-audit/v1\n"
//! seq      as 8 bytes big-endian
//! time_ns  as 8 bytes big-endian (two's complement)
//! run_id   as 4-byte big-endian length, then UTF-8 bytes
//! kind     as 4-byte big-endian length, then UTF-8 bytes
//! body     as 4-byte big-endian length, then the stored JSON text's bytes
//! prev_hash as its 32 raw bytes (32 zero bytes for seq 1)
//! ```
//!
//! The body is hashed exactly as stored, so no JSON canonicalization is
//! needed. Hashes are stored as 64 lowercase hex digits.
//!
//! The head file (`<db>.head`) holds the last committed record's seq and
//! hash, so that cutting records off the end of the store is detected. It is
//! rewritten in place (one single-sector write) under an exclusive `flock`
//! on `<db>.lock`, which every writer holds from `BEGIN IMMEDIATE` until the
//! head file is updated after `COMMIT`. Before committing, the writer
//! records the head it is about to commit as `pending`, so a crash of the
//! writer between commit and the final head update is told apart from
//! records added behind its back. Neither write is fsynced (the commit
//! is): after a power loss, not a crash, the head file can be one commit
//! behind, and verify then reports that commit's records as added outside
//! the writer; an external anchor (below) settles such a report. The head
//! file guards against the database being cut or
//! replaced on its own; against someone who can rewrite both files, copy
//! [`Head`] (`cordon audit head`) somewhere they cannot write, and check
//! against it later (`cordon audit verify --anchor SEQ:HASH`).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{io, AuditError};

/// Hash of "no previous record": 64 zeros.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

const DOMAIN: &[u8] = b"cordon-audit/v1\n";

/// The hash of one record (see the module docs for the encoding).
pub fn record_hash(
    seq: u64,
    time_ns: i64,
    run_id: &str,
    kind: &str,
    body: &str,
    prev_hash: &[u8; 32],
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(seq.to_be_bytes());
    h.update(time_ns.to_be_bytes());
    for part in [run_id.as_bytes(), kind.as_bytes(), body.as_bytes()] {
        h.update(u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        h.update(part);
    }
    h.update(prev_hash);
    h.finalize().into()
}

/// SHA-256 of blob content, as 64 lowercase hex digits.
pub fn blob_hash(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Parses 64 hex digits.
pub fn parse_hash(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// The last record of a store: its seq and hash. Seq 0 with
/// [`GENESIS_HASH`] is the head of an empty store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// Seq of the last record.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

impl Head {
    /// The head of an empty store.
    pub fn empty() -> Self {
        Head {
            seq: 0,
            hash: GENESIS_HASH.to_string(),
        }
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash)
    }
}

impl FromStr for Head {
    type Err = AuditError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AuditError::BadAnchor(s.to_string());
        let (seq, hash) = s.trim().split_once(':').ok_or_else(bad)?;
        let seq = seq.parse().map_err(|_| bad())?;
        let hash = hash.to_ascii_lowercase();
        parse_hash(&hash).ok_or_else(bad)?;
        Ok(Head { seq, hash })
    }
}

/// Contents of the head file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadFile {
    /// Format version (1).
    pub version: u32,
    /// Head as of the last completed commit.
    pub head: Head,
    /// Head being committed right now (set before COMMIT, cleared after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Head>,
}

impl HeadFile {
    /// Whether a store whose last record is `db` agrees with this file.
    pub fn accepts(&self, db: &Head) -> bool {
        &self.head == db || self.pending.as_ref() == Some(db)
    }
}

/// Path of the head file of the store at `db`.
pub fn head_file_path(db: &Path) -> PathBuf {
    sibling(db, ".head")
}

/// Path of the lock file of the store at `db`.
pub fn lock_file_path(db: &Path) -> PathBuf {
    sibling(db, ".lock")
}

fn sibling(db: &Path, suffix: &str) -> PathBuf {
    let mut s = db.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Reads the head file; `Ok(None)` if it does not exist, `Err(text)` if it
/// exists but cannot be understood.
pub fn read_head_file(db: &Path) -> Result<Option<HeadFile>, String> {
    let path = head_file_path(db);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("head file {} is unreadable: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("head file {}: {e}", path.display())),
    }
}

/// Size the head file is padded to, so every update is one write of one
/// sector over the same bytes.
const HEAD_FILE_LEN: usize = 512;

/// Rewrites the head file in place: one `pwrite` of [`HEAD_FILE_LEN`]
/// bytes at offset 0 (JSON padded with spaces), so it never changes size,
/// needs no rename and no directory update. A single write of a single
/// sector is never seen half-done after a process crash.
pub(crate) fn write_head_file(db: &Path, hf: &HeadFile) -> Result<(), AuditError> {
    use std::os::unix::fs::FileExt;
    let path = head_file_path(db);
    let mut text = serde_json::to_vec(hf)?;
    if text.len() >= HEAD_FILE_LEN {
        return Err(AuditError::Io {
            path,
            action: "write the head file",
            source: std::io::Error::other("head record longer than the head file"),
        });
    }
    text.resize(HEAD_FILE_LEN - 1, b' ');
    text.push(b'\n');
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(io(&path, "write the head file"))?;
    f.write_all_at(&text, 0)
        .map_err(io(&path, "write the head file"))?;
    // A longer file (an older format, or someone's edit) must not keep
    // bytes after ours.
    if f.metadata().map(|m| m.len()).unwrap_or(0) != HEAD_FILE_LEN as u64 {
        f.set_len(HEAD_FILE_LEN as u64)
            .map_err(io(&path, "write the head file"))?;
    }
    Ok(())
}

/// An advisory `flock` on `<db>.lock`, released on drop.
#[derive(Debug)]
pub(crate) struct StoreLock {
    _file: File,
}

impl StoreLock {
    /// Takes the lock, polling until `timeout`. `None` if the lock file
    /// cannot be opened for a shared lock (a read-only directory).
    pub(crate) fn acquire(
        db: &Path,
        exclusive: bool,
        timeout: Duration,
    ) -> Result<Option<StoreLock>, AuditError> {
        use rustix::fs::{flock, FlockOperation};
        let path = lock_file_path(db);
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
        {
            Ok(f) => f,
            Err(_) if !exclusive => match File::open(&path) {
                Ok(f) => f,
                Err(_) => return Ok(None),
            },
            Err(e) => return Err(io(&path, "open the lock file")(e)),
        };
        let op = if exclusive {
            FlockOperation::NonBlockingLockExclusive
        } else {
            FlockOperation::NonBlockingLockShared
        };
        let start = Instant::now();
        let mut pause = Duration::from_micros(50);
        loop {
            match flock(&file, op) {
                Ok(()) => return Ok(Some(StoreLock { _file: file })),
                Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => {
                    if start.elapsed() >= timeout {
                        return Err(AuditError::LockTimeout {
                            path,
                            waited: start.elapsed(),
                        });
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
                Err(e) => {
                    return Err(io(&path, "lock the store")(std::io::Error::from(e)));
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_every_field() {
        let base = record_hash(1, 2, "r", "k", "{}", &[0; 32]);
        assert_ne!(base, record_hash(2, 2, "r", "k", "{}", &[0; 32]));
        assert_ne!(base, record_hash(1, 3, "r", "k", "{}", &[0; 32]));
        assert_ne!(base, record_hash(1, 2, "s", "k", "{}", &[0; 32]));
        assert_ne!(base, record_hash(1, 2, "r", "j", "{}", &[0; 32]));
        assert_ne!(base, record_hash(1, 2, "r", "k", "{ }", &[0; 32]));
        assert_ne!(base, record_hash(1, 2, "r", "k", "{}", &[1; 32]));
        // length prefixes keep field boundaries apart
        assert_ne!(
            record_hash(1, 2, "ab", "c", "{}", &[0; 32]),
            record_hash(1, 2, "a", "bc", "{}", &[0; 32])
        );
    }

    #[test]
    fn head_parses() {
        let h: Head = format!("12:{}", "Ab".repeat(32)).parse().unwrap();
        assert_eq!(h.seq, 12);
        assert_eq!(h.hash, "ab".repeat(32));
        assert_eq!(h.to_string().parse::<Head>().unwrap(), h);
        assert!("12".parse::<Head>().is_err());
        assert!("x:00".parse::<Head>().is_err());
        assert!("1:zz".parse::<Head>().is_err());
    }
}
