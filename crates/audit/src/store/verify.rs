//! Verification of a store, in phases: a walk along the hash chain (it
//! stops at the first broken record: nothing after it can be trusted),
//! then the head file, an anchor kept elsewhere, and the blobs. Each phase
//! adds what it finds to one list of problems.

use std::collections::BTreeSet;
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::{lenient_text, query_head, AuditStore, Problem, VerifyReport, COLS};
use crate::chain::{self, blob_hash, parse_hash, record_hash, Head, HeadFile};
use crate::error::{sql, AuditError};
use crate::event::{KIND_HEAD_MISMATCH, KIND_RUN_STARTED};
use crate::spool;

impl AuditStore {
    /// Checks the whole chain, the head file, and every blob.
    pub fn verify(&self) -> Result<VerifyReport, AuditError> {
        self.verify_with_anchor(None)
    }

    /// Like [`AuditStore::verify`], and also checks that the record at
    /// `anchor.seq` still has `anchor.hash` (an anchor kept elsewhere
    /// catches what the head file cannot: someone rewriting both files).
    pub fn verify_with_anchor(&self, anchor: Option<&Head>) -> Result<VerifyReport, AuditError> {
        // Take a snapshot while no writer is between COMMIT and the head
        // file update, so the head file and the snapshot agree; with the
        // spool folded in first.
        let lock = self.lock_and_fold()?;
        let unfolded = spool::len(&self.path);
        let head_file = chain::read_head_file(&self.path);
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        let _ = query_head(&tx).map_err(self.sql())?;
        drop(lock);

        let mut check = Check {
            conn: &tx,
            path: &self.path,
            problems: Vec::new(),
        };
        if unfolded > 0 {
            check.problems.push(Problem::general(format!(
                "{unfolded} bytes of records wait in the spool {} and were not checked: verify with write access to the store, which folds them in",
                spool::path(&self.path).display()
            )));
        }
        let walk = check.chain()?;
        // The real end of the store, even when the walk stopped early.
        let store_head = query_head(&tx).map_err(self.sql())?;
        let head_file = check.head_file(head_file, &store_head)?;
        if let Some(a) = anchor {
            check.anchor(a, &store_head)?;
        }
        let blobs = check.blobs(&walk.referenced)?;
        let problems = check.problems;
        drop(tx);
        Ok(VerifyReport {
            ok: problems.is_empty(),
            records: walk.records,
            blobs,
            head: if problems.is_empty() {
                walk.head
            } else {
                store_head
            },
            head_file,
            anchor: anchor.cloned(),
            problems,
        })
    }
}

impl Problem {
    /// A problem with the store as a whole, not one record.
    fn general(what: String) -> Problem {
        Problem {
            seq: None,
            run_id: None,
            kind: None,
            what,
        }
    }
}

/// The phases' view of the snapshot, and what they found.
struct Check<'a> {
    conn: &'a Connection,
    path: &'a Path,
    problems: Vec<Problem>,
}

/// What the walk along the chain found.
struct Walk {
    /// Records that checked out.
    records: u64,
    /// The last of them.
    head: Head,
    /// The blobs they name.
    referenced: Vec<Reference>,
}

/// A record's reference to a blob (`code_hash`, `profile_hash`).
struct Reference {
    seq: u64,
    run_id: String,
    kind: String,
    blob: String,
}

/// Where the chain stands after the records checked so far.
struct Link {
    /// The seq the next record must have.
    expected: u64,
    prev_hash: String,
    prev_raw: [u8; 32],
}

/// A record whose place in the chain and hash checked out.
struct Linked {
    seq: u64,
    run_id: String,
    kind: String,
    body: String,
    hash: String,
}

impl Check<'_> {
    fn sql(&self) -> impl Fn(rusqlite::Error) -> AuditError + '_ {
        sql(self.path)
    }

    /// Walk the records in order, each linked to the one before by its
    /// `prev_hash` and sealed by its own hash; stop at the first that is
    /// not.
    fn chain(&mut self) -> Result<Walk, AuditError> {
        let mut walk = Walk {
            records: 0,
            head: Head::empty(),
            referenced: Vec::new(),
        };
        let mut link = Link {
            expected: 1,
            prev_hash: chain::GENESIS_HASH.to_string(),
            prev_raw: [0u8; 32],
        };
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {COLS} FROM records ORDER BY seq"))
            .map_err(self.sql())?;
        let mut rows = stmt.query([]).map_err(self.sql())?;
        while let Some(row) = rows.next().map_err(self.sql())? {
            let record = match link_row(row, &link).map_err(self.sql())? {
                Ok(record) => record,
                Err(problem) => {
                    self.problems.push(problem);
                    break;
                }
            };
            self.read_contents(&record, &mut walk.referenced);
            link = Link {
                expected: record.seq + 1,
                prev_raw: parse_hash(&record.hash).unwrap_or([0; 32]),
                prev_hash: record.hash.clone(),
            };
            walk.records += 1;
            walk.head = Head {
                seq: record.seq,
                hash: record.hash,
            };
        }
        Ok(walk)
    }

    /// What a sound record says that matters to the check: a mismatch
    /// the writer found and recorded, and the blobs a run names.
    fn read_contents(&mut self, record: &Linked, referenced: &mut Vec<Reference>) {
        if record.kind == KIND_HEAD_MISMATCH {
            self.problems.push(Problem {
                seq: Some(record.seq),
                run_id: Some(record.run_id.clone()),
                kind: Some(record.kind.clone()),
                what: format!(
                    "when this record was written, the store's last record did not match the head file (records cut off the end, or the head file replaced): {}",
                    record.body
                ),
            });
        }
        if record.kind == KIND_RUN_STARTED {
            if let Ok(v) = serde_json::from_str::<Value>(&record.body) {
                for field in ["code_hash", "profile_hash"] {
                    if let Some(h) = v.get(field).and_then(Value::as_str) {
                        referenced.push(Reference {
                            seq: record.seq,
                            run_id: record.run_id.clone(),
                            kind: record.kind.clone(),
                            blob: h.to_string(),
                        });
                    }
                }
            }
        }
    }

    /// The head file (written by every commit) against the store's real
    /// end: records cut off the end, added outside the writer, or an end
    /// replaced. Returns the head file as read.
    fn head_file(
        &mut self,
        read: Result<Option<HeadFile>, String>,
        store_head: &Head,
    ) -> Result<Option<HeadFile>, AuditError> {
        let head_file = match read {
            Ok(hf) => hf,
            Err(text) => {
                self.problems.push(Problem::general(text));
                return Ok(None);
            }
        };
        match &head_file {
            None if store_head.seq > 0 => {
                self.problems.push(Problem::general(format!(
                    "the head file {} is missing: records cut off the end cannot be detected",
                    chain::head_file_path(self.path).display()
                )));
            }
            Some(hf) if !hf.accepts(store_head) => {
                let problem = self.head_file_mismatch(hf, store_head)?;
                self.problems.push(problem);
            }
            _ => {}
        }
        Ok(head_file)
    }

    /// How the store's end differs from the one the head file names.
    fn head_file_mismatch(&self, hf: &HeadFile, store_head: &Head) -> Result<Problem, AuditError> {
        let expected_seq = hf
            .pending
            .as_ref()
            .map_or(hf.head.seq, |p| p.seq.max(hf.head.seq));
        if store_head.seq == 0 && hf.head.seq > 0 {
            return Ok(Problem::general(format!(
                "the store is empty, but the head file says it ends at seq {}: all records were removed",
                hf.head.seq
            )));
        }
        if store_head.seq < hf.head.seq {
            return self.at(
                store_head.seq,
                format!(
                    "the store ends here, but the head file says it ends at seq {}: records {}..={} were cut off the end",
                    hf.head.seq,
                    store_head.seq + 1,
                    hf.head.seq
                ),
            );
        }
        if store_head.seq > expected_seq {
            return self.at(
                expected_seq + 1,
                format!(
                    "the head file says the store ends at seq {expected_seq}: this record and the ones after it (up to seq {}) were added outside cordon's writer",
                    store_head.seq
                ),
            );
        }
        self.at(
            store_head.seq,
            format!(
                "the last record's hash {} is not the one in the head file ({}): the end of the store was replaced",
                store_head.hash, hf.head.hash
            ),
        )
    }

    /// An anchor kept elsewhere: its record is still there, with its hash.
    fn anchor(&mut self, anchor: &Head, store_head: &Head) -> Result<(), AuditError> {
        let stored: Option<String> = self
            .conn
            .query_row(
                "SELECT hash FROM records WHERE seq = ?1",
                params![i64::try_from(anchor.seq).unwrap_or(i64::MAX)],
                |r| Ok(lenient_text(r.get_ref(0)?)),
            )
            .optional()
            .map_err(self.sql())?;
        match stored {
            None if anchor.seq > 0 => self.problems.push(Problem {
                seq: Some(anchor.seq),
                run_id: None,
                kind: None,
                what: format!(
                    "the anchored record is missing (the store ends at seq {}): records were cut off the end",
                    store_head.seq
                ),
            }),
            Some(h) if h != anchor.hash => {
                let problem = self.at(
                    anchor.seq,
                    format!(
                        "its hash {h} is not the anchored hash {}: the store was rewritten up to here",
                        anchor.hash
                    ),
                )?;
                self.problems.push(problem);
            }
            _ => {}
        }
        Ok(())
    }

    /// Every blob's content matches its key, and every blob a record
    /// names exists. Returns the number of blobs.
    fn blobs(&mut self, referenced: &[Reference]) -> Result<u64, AuditError> {
        let mut present = BTreeSet::new();
        let mut blobs = 0u64;
        {
            let mut stmt = self
                .conn
                .prepare("SELECT hash, data FROM blobs ORDER BY hash")
                .map_err(self.sql())?;
            let mut rows = stmt.query([]).map_err(self.sql())?;
            while let Some(row) = rows.next().map_err(self.sql())? {
                let key = lenient_text(row.get_ref(0).map_err(self.sql())?);
                let sound = match row.get_ref(1).map_err(self.sql())? {
                    ValueRef::Blob(b) | ValueRef::Text(b) => blob_hash(b) == key,
                    _ => false,
                };
                if !sound {
                    self.problems.push(Problem::general(format!(
                        "blob {key}: its content does not match its hash: it was edited"
                    )));
                }
                present.insert(key);
                blobs += 1;
            }
        }
        for r in referenced {
            if !present.contains(&r.blob) {
                self.problems.push(Problem {
                    seq: Some(r.seq),
                    run_id: Some(r.run_id.clone()),
                    kind: Some(r.kind.clone()),
                    what: format!("references blob {}, which is missing (deleted)", r.blob),
                });
            }
        }
        Ok(blobs)
    }

    /// A problem at record `seq`, with its run and kind as stored.
    fn at(&self, seq: u64, what: String) -> Result<Problem, AuditError> {
        let (run_id, kind) = self
            .conn
            .query_row(
                "SELECT run_id, kind FROM records WHERE seq = ?1",
                params![i64::try_from(seq).unwrap_or(i64::MAX)],
                |r| Ok((lenient_text(r.get_ref(0)?), lenient_text(r.get_ref(1)?))),
            )
            .optional()
            .map_err(self.sql())?
            .unzip();
        Ok(Problem {
            seq: Some(seq),
            run_id,
            kind,
            what,
        })
    }
}

/// Check one row against the chain so far: its seq is the next, its
/// columns have their types, its `prev_hash` is the hash before it and
/// its own hash is its content's. The problem found otherwise.
fn link_row(row: &rusqlite::Row<'_>, link: &Link) -> rusqlite::Result<Result<Linked, Problem>> {
    let seq_raw: i64 = match row.get_ref(0)? {
        ValueRef::Integer(i) => i,
        _ => -1,
    };
    let run_id = lenient_text(row.get_ref(2)?);
    let kind = lenient_text(row.get_ref(3)?);
    let at = |what: String| Problem {
        seq: u64::try_from(seq_raw).ok(),
        run_id: Some(run_id.clone()),
        kind: Some(kind.clone()),
        what,
    };
    let seq = match u64::try_from(seq_raw) {
        Ok(s) if s >= 1 => s,
        _ => return Ok(Err(at(format!("invalid seq {seq_raw}")))),
    };
    if seq != link.expected {
        return Ok(Err(at(missing_before(link.expected, seq))));
    }
    let time_ns = match row.get_ref(1)? {
        ValueRef::Integer(i) => Some(i),
        _ => None,
    };
    let texts = [
        (2, "run_id"),
        (3, "kind"),
        (4, "body"),
        (5, "prev_hash"),
        (6, "hash"),
    ]
    .map(|(i, name)| {
        match row.get_ref(i) {
            Ok(ValueRef::Text(t)) => std::str::from_utf8(t).ok().map(str::to_owned),
            _ => None,
        }
        .ok_or(name)
    });
    let bad_col = texts.iter().find_map(|t| t.as_ref().err().copied());
    let (Some(time_ns), None) = (time_ns, bad_col) else {
        let col = bad_col.unwrap_or("time_ns");
        return Ok(Err(at(format!(
            "column {col} has the wrong type: the record was edited"
        ))));
    };
    let [_, _, body, stored_prev, stored_hash] = texts.map(|t| t.unwrap_or_default());
    if stored_prev != link.prev_hash {
        let what = if link.expected == 1 {
            "its prev_hash is not the genesis hash: records before it were removed or it was inserted".to_string()
        } else {
            format!(
                "its prev_hash does not match the hash of seq {}: a record was changed, moved, removed or inserted here",
                link.expected - 1
            )
        };
        return Ok(Err(at(what)));
    }
    let computed = hex::encode(record_hash(
        seq,
        time_ns,
        &run_id,
        &kind,
        &body,
        &link.prev_raw,
    ));
    if computed != stored_hash {
        return Ok(Err(at(
            "its content does not match its hash: the record was edited or forged".to_string(),
        )));
    }
    Ok(Ok(Linked {
        seq,
        run_id,
        kind,
        body,
        hash: stored_hash,
    }))
}

/// Why record `seq` cannot come where `expected` should: the records
/// between are gone.
fn missing_before(expected: u64, seq: u64) -> String {
    if expected == 1 {
        format!(
            "the store starts at seq {seq}: records 1..={} are missing (deleted)",
            seq - 1
        )
    } else if seq == expected + 1 {
        format!(
            "follows seq {}: record {expected} is missing (deleted)",
            expected - 1
        )
    } else {
        format!(
            "follows seq {}: records {expected}..={} are missing (deleted)",
            expected - 1,
            seq - 1
        )
    }
}
