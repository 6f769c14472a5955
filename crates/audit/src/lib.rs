//! cordon-audit: a tamper-evident record of every execution and every
//! attempt to cross a boundary.
//!
//! * [`AuditWriter`] appends [`Event`]s ([`RunStarted`], [`RunEnded`],
//!   [`Egress`], [`Incident`]) to a SQLite store with group commit; every
//!   string is redacted with a [`cordon_scan::Redactor`] first.
//! * [`AuditStore`] reads it back: [`AuditStore::tail`],
//!   [`AuditStore::follow`], [`AuditStore::show`],
//!   [`AuditStore::incidents`], [`AuditStore::export_jsonl`] and
//!   [`AuditStore::verify`], which checks the hash chain and names the
//!   first bad record.
//!
//! # Store
//!
//! One SQLite file (default [`default_path`]) in WAL mode with
//! `synchronous=FULL` (the group-committing writer syncs the WAL itself, see
//! Durability), created 0600 in a 0700 directory, beside it
//! `<db>.head` (the last committed record's seq and hash), `<db>.lock` and
//! `<db>.spool` (batches appended by short-lived writers in spool mode,
//! [`WriterOptions::spool`], without opening SQLite; every reader and
//! SQLite writer folds them into the database first, see `spool.rs`).
//! Tables: `records` (append-only: `seq, time_ns, run_id, kind, body,
//! prev_hash, hash`; triggers refuse UPDATE and DELETE), `blobs` (content by
//! SHA-256: the code a run executed, the resolved profile text), `meta`
//! (schema version), and the view `runs` (one row per run).
//!
//! Every record's hash covers its seq, time, run, kind, body and the
//! previous record's hash (see [`chain`]), so editing, deleting,
//! reordering or inserting records breaks the chain at that record. The
//! head file catches records cut off the end. Someone able to rewrite both
//! the database and the head file can forge a consistent store: against
//! that, copy [`AuditStore::head`] (`cordon audit head`) to a place they
//! cannot write and check it later with [`AuditStore::verify_with_anchor`].
//!
//! # Durability
//!
//! Each group commit is one transaction, fsynced before the head file
//! moves: the group-committing writer's connection runs WAL with
//! `synchronous=NORMAL` and syncs the WAL itself right after each commit
//! (what `FULL` does), so that a caller who needs only the commit
//! ([`AuditWriter::committed_then`]: the record survives the death of the
//! process, not a power loss) hears of it before the disk is done. In
//! spool mode, one append to the spool, fdatasynced before the head file
//! moves. A crash loses only what was appended and not
//! yet flushed — at most the records of the runs in flight — and never
//! breaks the chain: a transaction is either in the store or not.
//!
//! Export: [`AuditStore::export_jsonl`] (one record per line, for a SIEM)
//! and [`AuditStore::export_otlp_json`] (OpenTelemetry traces: a span per
//! run, span events for egress and incidents; see [`otlp`]).

#![forbid(unsafe_code)]

pub mod chain;
mod error;
pub mod event;
pub mod otlp;
mod spool;
mod store;
pub mod time;
mod writer;

pub use chain::{Head, HeadFile};
pub use error::AuditError;
pub use event::{
    ApiAction, Decision, Egress, EndReason, Event, Incident, IncidentKind, McpCall, Promotion,
    Record, RunEnded, RunStarted, Severity, StreamSummary,
};
pub use store::{
    default_path, AuditStore, Blob, Problem, RunSummary, RunView, VerifyReport, SCHEMA_VERSION,
};
pub use writer::{AuditWriter, InlineWriter, WriterOptions};

/// A new run id: 12 hex digits of milliseconds since the epoch (so ids sort
/// by start time) then 16 random hex digits.
pub fn new_run_id() -> String {
    use std::io::Read;
    let ms = u64::try_from(time::now_nanos() / 1_000_000).unwrap_or(0);
    let mut rnd = [0u8; 8];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut rnd))
        .is_ok();
    if !ok {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(ms);
        h.write_u32(std::process::id());
        rnd = h.finish().to_be_bytes();
    }
    format!("{:012x}{}", ms & 0xffff_ffff_ffff, hex::encode(rnd))
}
