//! The group-committing writer.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use cordon_scan::Redactor;
use rusqlite::{Connection, TransactionBehavior};
use serde_json::Value;

use crate::chain::{self, blob_hash, parse_hash, record_hash, Head, HeadFile, StoreLock};
use crate::error::{sql, AuditError};
use crate::event::{Event, RunStarted, KIND_HEAD_MISMATCH};
use crate::spool::{self, Chained};
use crate::store::{ensure_dir, open_for_group_commit, query_head, sync_wal, QUERY_HEAD};
use crate::time::{now_nanos, unix_nanos};

/// How the writer behaves.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Applied to every string in every body, and to blobs, before storage.
    pub redactor: Redactor,
    /// Most records committed in one transaction.
    pub max_batch: usize,
    /// How long to wait for another process's write to finish.
    pub lock_timeout: Duration,
    /// How long a record may wait for company before it is committed
    /// (unless a flush or close comes first). Zero commits at once. A short
    /// run whose start and end arrive within the delay costs one durable
    /// commit instead of two; a crash within the delay loses only those
    /// records, as with any record not yet flushed. Appends do not end
    /// the delay (they wake nobody): a burst waits in the queue for it,
    /// then goes in batches of `max_batch`.
    pub commit_delay: Duration,
    /// Append batches to the spool (`<db>.spool`) instead of committing
    /// them through SQLite, which is then opened only when the spool's
    /// head cannot be trusted or the spool has grown (see the `spool`
    /// module). For short-lived writers, such as one `cordon run`; readers
    /// and SQLite writers fold the spool into the database.
    pub spool: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            redactor: Redactor::new(),
            max_batch: 8192,
            lock_timeout: Duration::from_secs(30),
            commit_delay: Duration::ZERO,
            spool: false,
        }
    }
}

type Reply = SyncSender<Result<Head, String>>;

/// What a flush calls once its records are on disk (or could not be).
type Done = Box<dyn FnOnce(Result<Head, String>) + Send>;

/// How far a flush waits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// The records are committed to the store's files: they survive the
    /// death of this process, not yet a power loss.
    Committed,
    /// The records are on disk and the head file has moved.
    Durable,
}

enum Msg {
    Append {
        time_ns: i64,
        run_id: String,
        event: Box<Event>,
    },
    Blob {
        hash: String,
        data: Vec<u8>,
    },
    Flush(Reach, Done),
    Close(Reply),
}

enum Pending {
    Record {
        time_ns: i64,
        run_id: String,
        kind: &'static str,
        body: String,
    },
    Blob {
        hash: String,
        data: Vec<u8>,
    },
}

/// Appends records to a store from any number of threads. A background
/// thread commits whatever is queued in one transaction (group commit);
/// [`AuditWriter::flush`] waits until everything appended before it is on
/// disk. Several processes may write the same store at once: each commit
/// takes the store's lock, reads the current head inside the transaction
/// and continues the chain from there.
///
/// Dropping the writer flushes and stops the thread (errors are lost; call
/// [`AuditWriter::close`] to see them).
#[derive(Debug)]
pub struct AuditWriter {
    path: PathBuf,
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    redactor: Redactor,
    /// The error of the writer's last commit, until a commit succeeds.
    failing: Arc<Mutex<Option<String>>>,
}

impl AuditWriter {
    /// Opens (creating if needed) the store at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AuditError> {
        Self::open_with(path, WriterOptions::default())
    }

    /// Opens (creating if needed) the store at `path`.
    pub fn open_with(path: impl AsRef<Path>, opts: WriterOptions) -> Result<Self, AuditError> {
        let path = path.as_ref().to_path_buf();
        let redactor = opts.redactor.clone();
        let mut worker = Worker::open(&path, opts)?;
        let failing = Arc::new(Mutex::new(None));
        worker.failing = Some(Arc::clone(&failing));
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cordon-audit".into())
            .spawn(move || worker.run(rx))
            .map_err(|e| AuditError::Io {
                path: path.clone(),
                action: "start the audit writer thread",
                source: e,
            })?;
        Ok(AuditWriter {
            path,
            tx: Some(tx),
            thread: Some(thread),
            redactor,
            failing,
        })
    }

    /// Why the store cannot take records now: the error of the writer's
    /// last commit (its records stay queued and are tried again), or the
    /// writer thread's end. `None` once a commit succeeds. A caller that
    /// must not act unrecorded refuses while this is `Some`.
    pub fn failing(&self) -> Option<String> {
        if self.thread.as_ref().is_none_or(JoinHandle::is_finished) {
            return Some("the audit writer has stopped".into());
        }
        self.failing.lock().ok().and_then(|f| f.clone())
    }

    /// The store's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The redactor applied before storage.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    fn send(&self, msg: Msg) -> Result<(), AuditError> {
        match &self.tx {
            Some(tx) => tx
                .send(msg)
                .map_err(|_| AuditError::WriterStopped("the writer thread has exited".into())),
            None => Err(AuditError::WriterStopped("closed".into())),
        }
    }

    /// Queues one event for `run_id`, stamped now. Cheap: redaction,
    /// encoding and hashing happen on the writer thread.
    pub fn append(&self, run_id: &str, event: impl Into<Event>) -> Result<(), AuditError> {
        self.append_at(SystemTime::now(), run_id, event)
    }

    /// Queues one event for `run_id` with the time it happened.
    pub fn append_at(
        &self,
        time: SystemTime,
        run_id: &str,
        event: impl Into<Event>,
    ) -> Result<(), AuditError> {
        self.send(Msg::Append {
            time_ns: unix_nanos(time),
            run_id: run_id.to_string(),
            event: Box::new(event.into()),
        })
    }

    /// Stores content once, redacted, and returns the hash of what is
    /// stored (the key to put in a record).
    pub fn put_blob(&self, data: &[u8]) -> Result<String, AuditError> {
        let data = self.redactor.redact_bytes(data).into_owned();
        let hash = blob_hash(&data);
        self.send(Msg::Blob {
            hash: hash.clone(),
            data,
        })?;
        Ok(hash)
    }

    /// Records the start of a run, storing `code` (when the run was given a
    /// script or stdin) and the resolved `profile_text` as blobs and
    /// filling in `code_hash` / `profile_hash`.
    pub fn start_run(
        &self,
        run_id: &str,
        mut started: RunStarted,
        code: Option<&[u8]>,
        profile_text: Option<&str>,
    ) -> Result<(), AuditError> {
        if let Some(code) = code {
            started.code_hash = Some(self.put_blob(code)?);
        }
        if let Some(p) = profile_text {
            started.profile_hash = Some(self.put_blob(p.as_bytes())?);
        }
        self.append(run_id, started)
    }

    /// Waits until everything appended before this call is committed and
    /// on disk; returns the store's head after that commit.
    pub fn flush(&self) -> Result<Head, AuditError> {
        let (reply, wait) = mpsc::sync_channel(1);
        self.flush_then(move |r| {
            let _ = reply.send(r);
        })?;
        match wait.recv() {
            Ok(Ok(h)) => Ok(h),
            Ok(Err(e)) => Err(AuditError::CommitFailed(e)),
            Err(_) => Err(AuditError::WriterStopped(
                "the writer thread has exited".into(),
            )),
        }
    }

    /// Like [`AuditWriter::flush`] without waiting: `done` is called on
    /// the writer's thread once everything appended before this call is
    /// committed and on disk (or with the commit's error). For callers
    /// that must not block a thread, such as an async task.
    pub fn flush_then(
        &self,
        done: impl FnOnce(Result<Head, String>) + Send + 'static,
    ) -> Result<(), AuditError> {
        self.send(Msg::Flush(Reach::Durable, Box::new(done)))?;
        self.wake();
        Ok(())
    }

    /// Like [`AuditWriter::flush_then`], but `done` is called as soon as
    /// everything appended before this call is committed to the store's
    /// files, before the sync that makes it survive a power loss (which
    /// follows at once). For a caller that must not answer before its
    /// record would survive the death of this process, and need not wait
    /// for the disk.
    pub fn committed_then(
        &self,
        done: impl FnOnce(Result<Head, String>) + Send + 'static,
    ) -> Result<(), AuditError> {
        self.send(Msg::Flush(Reach::Committed, Box::new(done)))?;
        self.wake();
        Ok(())
    }

    /// Wake the writer from its commit delay: it sleeps through the delay
    /// without watching the channel (see `Worker::run`), and only a flush
    /// or a close may cut the delay short.
    fn wake(&self) {
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Flushes, stops the writer thread and returns the final head.
    pub fn close(mut self) -> Result<Head, AuditError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<Head, AuditError> {
        let Some(tx) = self.tx.take() else {
            return Err(AuditError::WriterStopped("closed".into()));
        };
        let (reply, wait) = mpsc::sync_channel(1);
        let sent = tx.send(Msg::Close(reply)).is_ok();
        drop(tx);
        self.wake();
        let res = if sent {
            match wait.recv() {
                Ok(Ok(h)) => Ok(h),
                Ok(Err(e)) => Err(AuditError::CommitFailed(e)),
                Err(_) => Err(AuditError::WriterStopped(
                    "the writer thread has exited".into(),
                )),
            }
        } else {
            Err(AuditError::WriterStopped(
                "the writer thread has exited".into(),
            ))
        };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        res
    }
}

/// A writer without a thread, for one short-lived process (one `cordon
/// run`): what is appended waits in memory until [`InlineWriter::commit`]
/// makes it durable on the calling thread. Same store, chain and options
/// as [`AuditWriter`] (`commit_delay` does not apply: the caller decides
/// when to commit). Records not committed when it is dropped are lost, as
/// with a crash.
pub struct InlineWriter {
    worker: Worker,
}

impl std::fmt::Debug for InlineWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineWriter")
            .field("path", &self.worker.path)
            .field("pending", &self.worker.pending.len())
            .finish()
    }
}

impl InlineWriter {
    /// Opens (creating if needed) the store at `path`.
    pub fn open_with(path: impl AsRef<Path>, opts: WriterOptions) -> Result<Self, AuditError> {
        Ok(InlineWriter {
            worker: Worker::open(path.as_ref(), opts)?,
        })
    }

    /// The redactor applied before storage.
    pub fn redactor(&self) -> &Redactor {
        &self.worker.opts.redactor
    }

    /// Adds one event for `run_id`, stamped now (redacted and encoded now).
    pub fn append(&mut self, run_id: &str, event: impl Into<Event>) -> Result<(), AuditError> {
        self.append_at(SystemTime::now(), run_id, event)
    }

    /// Adds one event for `run_id` with the time it happened.
    pub fn append_at(
        &mut self,
        time: SystemTime,
        run_id: &str,
        event: impl Into<Event>,
    ) -> Result<(), AuditError> {
        let msg = Msg::Append {
            time_ns: unix_nanos(time),
            run_id: run_id.to_string(),
            event: Box::new(event.into()),
        };
        self.worker.take(msg, &mut Vec::new(), &mut None);
        match self.worker.error.take() {
            Some(e) => Err(AuditError::CommitFailed(e)),
            None => Ok(()),
        }
    }

    /// Stores content once, redacted, and returns the hash of what is
    /// stored (the key to put in a record).
    pub fn put_blob(&mut self, data: &[u8]) -> Result<String, AuditError> {
        let data = self.worker.opts.redactor.redact_bytes(data).into_owned();
        let hash = blob_hash(&data);
        self.worker.pending.push(Pending::Blob {
            hash: hash.clone(),
            data,
        });
        Ok(hash)
    }

    /// Makes everything added so far durable and returns the new head.
    pub fn commit(&mut self) -> Result<Head, AuditError> {
        if self.worker.pending.is_empty() {
            if let Some(h) = &self.worker.head {
                return Ok(h.clone());
            }
        }
        let head = self.worker.try_commit(&mut |_| {})?;
        self.worker.pending.clear();
        self.worker.head = Some(head.clone());
        Ok(head)
    }
}

impl Drop for AuditWriter {
    fn drop(&mut self) {
        if self.tx.is_some() {
            let _ = self.shutdown();
        }
    }
}

struct Worker {
    conn: Option<Connection>,
    /// The connection leaves the WAL's sync to the writer (WAL mode,
    /// `synchronous=NORMAL`; see `store::open_for_group_commit`).
    syncs_wal: bool,
    path: PathBuf,
    opts: WriterOptions,
    pending: Vec<Pending>,
    head: Option<Head>,
    error: Option<String>,
    /// Shared with the [`AuditWriter`]: the last commit's error.
    failing: Option<Arc<Mutex<Option<String>>>>,
}

/// Redacts every string in a JSON value, in place.
pub(crate) fn redact_value(r: &Redactor, v: &mut Value) {
    match v {
        Value::String(s) if s.len() >= cordon_scan::redact::MIN_VALUE_LEN => {
            if let std::borrow::Cow::Owned(new) = r.redact(s) {
                *s = new;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact_value(r, x)),
        Value::Object(o) => o.values_mut().for_each(|x| redact_value(r, x)),
        _ => {}
    }
}

/// Head file before a commit: the old head, and the one being committed.
fn announce(path: &Path, old: &Head, new: &Head) -> Result<(), AuditError> {
    chain::write_head_file(
        path,
        &HeadFile {
            version: 1,
            head: old.clone(),
            pending: Some(new.clone()),
        },
    )
}

/// Head file after a commit.
fn settle(path: &Path, new: &Head) -> Result<(), AuditError> {
    chain::write_head_file(
        path,
        &HeadFile {
            version: 1,
            head: new.clone(),
            pending: None,
        },
    )
}

impl Worker {
    fn open(path: &Path, opts: WriterOptions) -> Result<Worker, AuditError> {
        // A spool-mode writer opens SQLite only when it must; a store that
        // does not exist yet is created now, so errors show at once.
        let established = path.is_file() && chain::head_file_path(path).is_file();
        let (conn, syncs_wal) = if opts.spool && established {
            (None, false)
        } else if established {
            let (conn, syncs_wal) = open_for_group_commit(path)?;
            (Some(conn), syncs_wal)
        } else {
            // Several processes may create the same store at once; turning
            // a new file to WAL mode needs SQLite's exclusive lock, which
            // SQLite does not wait for. One at a time, then.
            ensure_dir(path)?;
            let _lock = StoreLock::acquire(path, true, opts.lock_timeout)?;
            let (conn, syncs_wal) = open_for_group_commit(path)?;
            (Some(conn), syncs_wal)
        };
        Ok(Worker {
            conn,
            syncs_wal,
            path: path.to_path_buf(),
            opts,
            pending: Vec::new(),
            head: None,
            error: None,
            failing: None,
        })
    }

    fn run(mut self, rx: Receiver<Msg>) {
        // Compile the commit's statements now, while the caller has other
        // work, so the first commit (often the one someone waits for) does
        // not. A failure here shows up again, and is reported, at commit.
        if let Some(conn) = &self.conn {
            for stmt in [QUERY_HEAD, spool::INSERT_RECORD, spool::INSERT_BLOB] {
                let _ = conn.prepare_cached(stmt);
            }
        }
        loop {
            let first = if self.pending.is_empty() {
                match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => break,
                }
            } else {
                // Failed commit: retry after a pause even if nothing new arrives.
                match rx.recv_timeout(Duration::from_millis(200)) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            let mut waiters: Vec<(Reach, Done)> = Vec::new();
            let mut close: Option<Reply> = None;
            if let Some(m) = first {
                self.take(m, &mut waiters, &mut close);
            }
            if !self.opts.commit_delay.is_zero() {
                // Sleep through the delay rather than wait on the channel:
                // a sender wakes a thread blocked in `recv`, and a record
                // appended in the delay needs nobody awake (a server's exec
                // appends three, on the cores the command runs on). A flush
                // or a close sends its message, then wakes the writer
                // (`AuditWriter::wake`). The queue is looked at before every
                // sleep: a wake-up that came while the writer was still in
                // `recv` was taken by the channel's own wait, and its
                // message would otherwise sleep out the whole delay.
                let until = Instant::now() + self.opts.commit_delay;
                loop {
                    self.take_queued(&rx, &mut waiters, &mut close);
                    let left = until.saturating_duration_since(Instant::now());
                    if close.is_some()
                        || !waiters.is_empty()
                        || self.pending.len() >= self.opts.max_batch
                        || left.is_zero()
                    {
                        break;
                    }
                    std::thread::park_timeout(left);
                }
            }
            self.take_queued(&rx, &mut waiters, &mut close);
            // Those who wait only for the commit hear of it before the
            // WAL's sync; the rest once the head file has moved.
            let (mut early, late): (Vec<_>, Vec<_>) = waiters
                .into_iter()
                .partition(|(reach, _)| *reach == Reach::Committed);
            let result = {
                let mut tell_committed = |head: &Head| {
                    for (_, w) in early.drain(..) {
                        w(Ok(head.clone()));
                    }
                };
                let mut result = self.commit(&mut tell_committed);
                if close.is_some() {
                    // Last chance: a few retries before giving up.
                    for attempt in 0..5 {
                        if self.pending.is_empty() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50 << attempt));
                        result = self.commit(&mut tell_committed);
                    }
                }
                result
            };
            let answer = result.map(|()| self.head.clone().unwrap_or_else(Head::empty));
            for (_, w) in early.into_iter().chain(late) {
                w(answer.clone());
            }
            if let Some(c) = close {
                let _ = c.send(answer);
                return;
            }
        }
        // Every sender is gone without Close: commit what is left.
        let _ = self.commit(&mut |_| {});
    }

    /// Take what is queued, without waiting, until a close comes or the
    /// batch is full.
    fn take_queued(
        &mut self,
        rx: &Receiver<Msg>,
        waiters: &mut Vec<(Reach, Done)>,
        close: &mut Option<Reply>,
    ) {
        while close.is_none() && self.pending.len() < self.opts.max_batch {
            match rx.try_recv() {
                Ok(m) => self.take(m, waiters, close),
                Err(_) => break,
            }
        }
    }

    fn take(&mut self, m: Msg, waiters: &mut Vec<(Reach, Done)>, close: &mut Option<Reply>) {
        match m {
            Msg::Append {
                time_ns,
                run_id,
                event,
            } => match event.to_body() {
                Ok(mut body) => {
                    redact_value(&self.opts.redactor, &mut body);
                    match serde_json::to_string(&body) {
                        Ok(body) => self.pending.push(Pending::Record {
                            time_ns,
                            run_id,
                            kind: event.kind(),
                            body,
                        }),
                        Err(e) => self.error = Some(format!("cannot encode a record: {e}")),
                    }
                }
                Err(e) => self.error = Some(format!("cannot encode a record: {e}")),
            },
            Msg::Blob { hash, data } => self.pending.push(Pending::Blob { hash, data }),
            Msg::Flush(reach, r) => waiters.push((reach, r)),
            Msg::Close(r) => *close = Some(r),
        }
    }

    /// Commits what is pending; `on_committed` hears of the commit before
    /// it is made durable. The error is also kept for `error`.
    fn commit(&mut self, on_committed: &mut dyn FnMut(&Head)) -> Result<(), String> {
        if self.pending.is_empty() {
            return Ok(());
        }
        match self.try_commit(on_committed) {
            Ok(head) => {
                self.pending.clear();
                self.head = Some(head);
                self.error = None;
                self.tell_failing(None);
                Ok(())
            }
            Err(e) => {
                self.error = Some(e.to_string());
                self.tell_failing(Some(e.to_string()));
                Err(e.to_string())
            }
        }
    }

    fn tell_failing(&self, error: Option<String>) {
        if let Some(f) = &self.failing {
            if let Ok(mut f) = f.lock() {
                *f = error;
            }
        }
    }

    /// The pending records are in the store: never commit them again, even
    /// if what follows the commit (the sync, the head file) fails.
    fn committed(&mut self, head: &Head, on_committed: &mut dyn FnMut(&Head)) {
        self.pending.clear();
        self.head = Some(head.clone());
        on_committed(head);
    }

    fn connection(&mut self) -> Result<&Connection, AuditError> {
        if self.conn.is_none() {
            let (conn, syncs_wal) = open_for_group_commit(&self.path)?;
            self.conn = Some(conn);
            self.syncs_wal = syncs_wal;
        }
        self.conn
            .as_ref()
            .ok_or_else(|| AuditError::WriterStopped("no connection".into()))
    }

    /// Places the pending records in the chain after `old`, with a
    /// head-mismatch record first when the head file disagreed.
    fn chain(&self, old: &Head, mismatch: Option<Value>) -> (Vec<Chained>, Head) {
        let mut seq = old.seq;
        let mut prev = parse_hash(&old.hash).unwrap_or([0; 32]);
        let mut prev_hex = old.hash.clone();
        let mut out = Vec::with_capacity(self.pending.len() + 1);
        let mut place = |time_ns: i64, run_id: &str, kind: &str, body: String| {
            seq += 1;
            let h = record_hash(seq, time_ns, run_id, kind, &body, &prev);
            let hex_h = hex::encode(h);
            out.push(Chained {
                seq,
                time_ns,
                run_id: run_id.to_owned(),
                kind: kind.to_owned(),
                body,
                prev_hash: std::mem::replace(&mut prev_hex, hex_h.clone()),
                hash: hex_h,
            });
            prev = h;
        };
        if let Some(found) = mismatch {
            // Keep the evidence in the chain itself; verify reports it.
            let body = serde_json::json!({ "store_head": old, "head_file": found });
            place(now_nanos(), "", KIND_HEAD_MISMATCH, body.to_string());
        }
        for p in &self.pending {
            if let Pending::Record {
                time_ns,
                run_id,
                kind,
                body,
            } = p
            {
                place(*time_ns, run_id, kind, body.clone());
            }
        }
        let new = Head {
            seq,
            hash: prev_hex,
        };
        (out, new)
    }

    fn blobs(&self) -> Vec<(&str, &[u8])> {
        self.pending
            .iter()
            .filter_map(|p| match p {
                Pending::Blob { hash, data } => Some((hash.as_str(), data.as_slice())),
                Pending::Record { .. } => None,
            })
            .collect()
    }

    fn try_commit(&mut self, on_committed: &mut dyn FnMut(&Head)) -> Result<Head, AuditError> {
        let path = self.path.clone();
        let lock = StoreLock::acquire(&path, true, self.opts.lock_timeout)?;
        let hf = chain::read_head_file(&path);
        // Spool mode, fast path: the spool's last batch is the store's head
        // and the head file says the same, with nothing pending.
        if self.opts.spool && spool::len(&path) < spool::FOLD_BYTES {
            if let Ok(Some(f)) = &hf {
                if f.pending.is_none() && spool::tail(&path)?.as_ref() == Some(&f.head) {
                    let old = f.head.clone();
                    let (records, new) = self.chain(&old, None);
                    self.spool_commit(&old, &records, &new)?;
                    drop(lock);
                    self.committed(&new, on_committed);
                    return Ok(new);
                }
            }
        }
        let conn = self.connection()?;
        spool::fold(conn, &path)?;
        let old = query_head(conn).map_err(sql(&path))?;
        let agrees = match &hf {
            Ok(Some(f)) => f.accepts(&old),
            Ok(None) => old.seq == 0,
            Err(_) => false,
        };
        let mismatch = (!agrees).then(|| match &hf {
            Ok(Some(f)) => serde_json::to_value(f).unwrap_or(Value::Null),
            Ok(None) => Value::String("missing".into()),
            Err(e) => Value::String(e.clone()),
        });
        let (records, new) = self.chain(&old, mismatch);
        if self.opts.spool {
            // Chained from the database's head; later batches chain from
            // this one's without SQLite.
            self.spool_commit(&old, &records, &new)?;
            drop(lock);
            self.committed(&new, on_committed);
            return Ok(new);
        }
        let blobs = self.blobs();
        let conn = self
            .conn
            .as_ref()
            .ok_or_else(|| AuditError::WriterStopped("no connection".into()))?;
        let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
            .map_err(sql(&path))?;
        for r in &records {
            spool::insert_record(&tx, r).map_err(sql(&path))?;
        }
        for (hash, data) in blobs {
            spool::insert_blob(&tx, hash, data).map_err(sql(&path))?;
        }
        let moves = new != old;
        if moves {
            // Announce the head we are about to commit, so a crash after
            // COMMIT is not mistaken for records added behind the writer's
            // back.
            announce(&path, &old, &new)?;
        }
        tx.commit().map_err(sql(&path))?;
        self.committed(&new, on_committed);
        if self.syncs_wal {
            sync_wal(&path)?;
        }
        if moves {
            settle(&path, &new)?;
        }
        drop(lock);
        Ok(new)
    }

    /// Appends one batch to the spool under the head-file protocol.
    fn spool_commit(&self, old: &Head, records: &[Chained], new: &Head) -> Result<(), AuditError> {
        let blobs = self.blobs();
        if records.is_empty() && blobs.is_empty() {
            return Ok(());
        }
        announce(&self.path, old, new)?;
        spool::append(&self.path, &blobs, records, new)?;
        settle(&self.path, new)
    }
}
