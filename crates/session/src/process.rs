//! One exec in a session: its request, its events, how it ended.

use std::path::PathBuf;
use std::time::Duration;

use cordon_jail::session::ExecLimits;
use cordon_plan::said::{OutputWatch, Said};
use serde::{Deserialize, Serialize};

/// A command to run in a live session.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    /// Added to (and overriding) the session's environment.
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox; the session's when `None`.
    pub cwd: Option<PathBuf>,
    /// Bytes written to the command's stdin, which is then closed; with
    /// `keep_stdin_open` more can be written with [`Process::write_stdin`].
    pub stdin: Option<Vec<u8>>,
    pub keep_stdin_open: bool,
    /// Killed with its whole process tree after this long (exit 124,
    /// `timed_out`).
    pub timeout: Option<Duration>,
    /// Output kept per stream (bytes); the rest is counted and dropped.
    pub output_limit: Option<u64>,
    /// Limits of this exec alone (a policy's): rlimits of its workload,
    /// below the session's (see [`ExecLimits`]).
    pub limits: ExecLimits,
}

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamName {
    Stdout,
    Stderr,
}

/// Why an exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// The command exited on its own.
    Exited,
    /// A signal ended it (sent by someone, or a limit).
    Signaled,
    /// Its timeout passed; its process tree was killed.
    TimedOut,
    /// Killed on request (or because the session ended).
    Killed,
    /// It could not be started (command not found, bad cwd, ...).
    SetupFailed,
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// The command's code; 128+N for signal N; 124 on timeout; 126/127
    /// when it could not be run / was not found.
    pub exit_code: i32,
    pub reason: ExitReason,
    pub timed_out: bool,
    pub signal: Option<i32>,
    /// Why it could not be started, or what killed it.
    pub message: Option<String>,
    pub usage: ExecUsage,
    /// What its output said that calls for a hint (a read-only write, a
    /// failed name lookup, a refused fork or allocation), each once.
    #[serde(default)]
    pub said: Vec<Said>,
}

/// What an exec used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecUsage {
    pub wall_ms: u64,
    pub user_ms: u64,
    pub system_ms: u64,
    /// Largest resident set of one of its processes, KiB.
    pub max_rss_kib: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Output beyond the limit, counted but not kept.
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
}

/// One thing that happened to a process, numbered from 1 in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    Started {
        pid: u64,
    },
    Output {
        stream: StreamName,
        data: Vec<u8>,
    },
    /// Older events were dropped from the buffer (more than its cap).
    Gap {
        dropped_events: u64,
    },
    Exited(ExitInfo),
}

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cordon_jail::session::{InitOrder, InitReply};
use cordon_jail::ChildReport;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::watch;

use crate::control::Control;
use crate::error::{Result, SessionError};

/// Largest chunk read from an output pipe at once.
const CHUNK: usize = 64 * 1024;

/// A session's account of its execs: how many run, and which finished
/// ones still hold output for re-attaching.
///
/// Every exec keeps up to the engine's `event_buffer` of output while it
/// runs, and afterwards for re-attaching; without a bound on the finished
/// ones a long session (an agent's thousands of commands) would hold the
/// output of each of them in the server's memory. Once an exec has ended
/// its output counts against the session's `output_budget`; past that, or
/// past `keep_finished` execs, the oldest finished exec's output is dropped
/// (a re-attach then gets a `gap` event before `exited`). Counting here
/// also keeps an exec's start and the idle check from walking every exec
/// the session ever ran.
#[derive(Debug)]
pub(crate) struct ExecBook {
    running: AtomicUsize,
    finished: Mutex<Finished>,
    output_budget: usize,
    keep_finished: usize,
}

#[derive(Debug, Default)]
struct Finished {
    /// Oldest first: each finished exec that still holds output, and how much.
    holding: VecDeque<(std::sync::Weak<Process>, usize)>,
    bytes: usize,
}

impl ExecBook {
    pub(crate) fn new(output_budget: usize, keep_finished: usize) -> ExecBook {
        ExecBook {
            running: AtomicUsize::new(0),
            finished: Mutex::new(Finished::default()),
            output_budget,
            keep_finished,
        }
    }

    /// Execs started and not yet ended.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// `p` has ended: its output joins the finished ones', and the oldest
    /// are dropped until they fit again.
    fn ended(&self, p: &Arc<Process>) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        let held = p.held();
        let Ok(mut f) = self.finished.lock() else {
            return;
        };
        if held > 0 {
            f.holding.push_back((Arc::downgrade(p), held));
            f.bytes += held;
        }
        while f.bytes > self.output_budget || f.holding.len() > self.keep_finished {
            let Some((oldest, bytes)) = f.holding.pop_front() else {
                break;
            };
            f.bytes -= bytes;
            if let Some(oldest) = oldest.upgrade() {
                oldest.drop_output();
            }
        }
    }
}

/// One exec: a process tree in its own PID namespace inside the session.
#[derive(Debug)]
pub struct Process {
    id: u64,
    argv: Vec<String>,
    control: Arc<Control>,
    book: Arc<ExecBook>,
    state: Mutex<ProcState>,
    /// The last event's seq: waiters wake when it changes.
    changed: watch::Sender<u64>,
    /// When the order to start it was given.
    started_at: Instant,
    stdin: tokio::sync::Mutex<Option<pipe::Sender>>,
    memory_by_rlimit: bool,
}

#[derive(Debug, Default)]
struct ProcState {
    events: VecDeque<Event>,
    /// Bytes of output held in `events`.
    held: usize,
    /// Events dropped from the front (oldest first) to stay under the cap.
    dropped: u64,
    next_seq: u64,
    exit: Option<ExitInfo>,
    /// Why it was killed, if it was (timeout or request).
    killed: Option<ExitReason>,
    pid: Option<u64>,
    /// When its end was recorded.
    ended_at: Option<Instant>,
}

/// What the pump collected from the report pipe.
#[derive(Debug, Default)]
struct Report {
    setup: Option<String>,
    exec_errno: Option<(String, i32)>,
    ended: Option<(i32, u64, u64, u64)>,
}

fn pipe_pair() -> Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SessionError::io("pipe", e.into()))
}

/// What a session gives each of its execs besides the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartWith {
    /// Who the pipes belong to on the host (the sandbox's user).
    pub pipe_owner: Option<(u32, u32)>,
    /// Bytes of events kept for re-attaching.
    pub event_buffer: usize,
    /// The session's memory is RLIMIT_AS (no memory cgroup): a crash is
    /// explained with it (see `cordon_jail::death_by_signal`).
    pub memory_by_rlimit: bool,
}

impl Process {
    pub(crate) async fn start(
        control: Arc<Control>,
        book: Arc<ExecBook>,
        id: u64,
        req: &ExecRequest,
        env: Vec<(String, String)>,
        cwd: PathBuf,
        with: StartWith,
    ) -> Result<Arc<Process>> {
        let StartWith {
            pipe_owner,
            event_buffer,
            memory_by_rlimit,
        } = with;
        let (stdin_r, stdin_w) = pipe_pair()?;
        let (out_r, out_w) = pipe_pair()?;
        let (err_r, err_w) = pipe_pair()?;
        let (rep_r, rep_w) = pipe_pair()?;
        if let Some((uid, gid)) = pipe_owner {
            for fd in [&stdin_r, &out_w, &err_w] {
                let _ = rustix::fs::fchown(
                    fd,
                    Some(rustix::process::Uid::from_raw(uid)),
                    Some(rustix::process::Gid::from_raw(gid)),
                );
            }
        }
        let started_at = Instant::now();
        let order = InitOrder::Exec {
            id,
            argv: req.argv.clone(),
            env,
            cwd,
            limits: req.limits,
        };
        let reply = control
            .exec(
                order,
                &[stdin_r.as_fd(), out_w.as_fd(), err_w.as_fd(), rep_w.as_fd()],
            )
            .await?;
        drop((stdin_r, out_w, err_w, rep_w));
        let pid = match reply {
            InitReply::Started { pid, .. } => pid,
            InitReply::Refused { message, busy, .. } => {
                return Err(if busy {
                    SessionError::Busy(message)
                } else {
                    SessionError::Invalid(message)
                })
            }
            InitReply::Configured { .. } | InitReply::Root { .. } => {
                return Err(SessionError::Invalid("unexpected answer to an exec".into()))
            }
        };
        let stdin =
            pipe::Sender::from_owned_fd(stdin_w).map_err(|e| SessionError::io("stdin pipe", e))?;
        let (changed, _) = watch::channel(0);
        let process = Arc::new(Process {
            id,
            argv: req.argv.clone(),
            control,
            book,
            state: Mutex::new(ProcState {
                next_seq: 1,
                ..ProcState::default()
            }),
            changed,
            started_at,
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            memory_by_rlimit,
        });
        process.push(EventKind::Started { pid: pid as u64 }, event_buffer);
        if let Ok(mut s) = process.state.lock() {
            s.pid = Some(pid as u64);
        }
        if let Some(data) = &req.stdin {
            process.write_stdin(data).await.ok();
        }
        if !req.keep_stdin_open {
            process.close_stdin().await;
        }
        let pumps = Pumps {
            stdout: pipe::Receiver::from_owned_fd(out_r)
                .map_err(|e| SessionError::io("stdout pipe", e))?,
            stderr: pipe::Receiver::from_owned_fd(err_r)
                .map_err(|e| SessionError::io("stderr pipe", e))?,
            report: pipe::Receiver::from_owned_fd(rep_r)
                .map_err(|e| SessionError::io("report pipe", e))?,
        };
        // Counted once nothing can fail before `run`, which ends the count.
        process.book.running.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(
            process
                .clone()
                .run(pumps, req.timeout, req.output_limit, event_buffer),
        );
        Ok(process)
    }

    /// The process id the API shows (unique in the session).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// When it was started, and when its end was recorded (None while it
    /// runs): the span in which what happened in the sandbox (a refused
    /// connection) may have been its doing.
    pub fn span(&self) -> (Instant, Option<Instant>) {
        let ended = self.state.lock().ok().and_then(|s| s.ended_at);
        (self.started_at, ended)
    }

    fn push(&self, kind: EventKind, cap: usize) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let seq = s.next_seq;
        s.next_seq += 1;
        match &kind {
            EventKind::Output { data, .. } => s.held += data.len(),
            EventKind::Exited(info) => {
                s.exit = Some(info.clone());
                s.ended_at = Some(Instant::now());
            }
            _ => {}
        }
        s.events.push_back(Event { seq, kind });
        // Drop the oldest output first; `Started` and `Exited` stay.
        while s.held > cap {
            let Some(pos) = s
                .events
                .iter()
                .position(|e| matches!(e.kind, EventKind::Output { .. }))
            else {
                break;
            };
            if let Some(Event {
                kind: EventKind::Output { data, .. },
                ..
            }) = s.events.remove(pos)
            {
                s.held -= data.len();
                s.dropped += 1;
            }
        }
        drop(s);
        self.changed.send_replace(seq);
    }

    /// Read the pipes until the command and its tree are gone; enforce
    /// the timeout; record how it ended.
    async fn run(
        self: Arc<Self>,
        mut pumps: Pumps,
        timeout: Option<Duration>,
        output_limit: Option<u64>,
        cap: usize,
    ) {
        let started = Instant::now();
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut report = Report::default();
        let mut report_text = Vec::new();
        let limit = output_limit.unwrap_or(u64::MAX);
        let mut counts = [0u64; 2];
        let mut dropped = [0u64; 2];
        let (mut out_open, mut err_open, mut rep_open) = (true, true, true);
        let mut out_buf = vec![0u8; CHUNK];
        let mut err_buf = vec![0u8; CHUNK];
        let mut rep_buf = vec![0u8; 4096];
        // Every byte the command wrote, kept or not, is looked at.
        let mut watch = OutputWatch::default();
        while out_open || err_open || rep_open {
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                n = pumps.stdout.read(&mut out_buf), if out_open => match n {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => {
                        watch.look(cordon_jail::Stream::Stdout, &out_buf[..n]);
                        self.output(StreamName::Stdout, &out_buf[..n], limit, &mut counts[0], &mut dropped[0], cap)
                    }
                },
                n = pumps.stderr.read(&mut err_buf), if err_open => match n {
                    Ok(0) | Err(_) => err_open = false,
                    Ok(n) => {
                        watch.look(cordon_jail::Stream::Stderr, &err_buf[..n]);
                        self.output(StreamName::Stderr, &err_buf[..n], limit, &mut counts[1], &mut dropped[1], cap)
                    }
                },
                n = pumps.report.read(&mut rep_buf), if rep_open => match n {
                    Ok(0) | Err(_) => rep_open = false,
                    Ok(n) => report_text.extend_from_slice(&rep_buf[..n]),
                },
                _ = sleep, if self.killed().is_none() => {
                    self.kill_as(ExitReason::TimedOut).await;
                }
            }
        }
        parse_report(&report_text, &mut report);
        let usage = ExecUsage {
            wall_ms: started.elapsed().as_millis() as u64,
            user_ms: report.ended.map_or(0, |e| e.1 / 1000),
            system_ms: report.ended.map_or(0, |e| e.2 / 1000),
            max_rss_kib: report.ended.map_or(0, |e| e.3),
            stdout_bytes: counts[0],
            stderr_bytes: counts[1],
            stdout_dropped: dropped[0],
            stderr_dropped: dropped[1],
        };
        let mut info = exit_info(&report, self.killed(), usage, self.memory_by_rlimit);
        info.said = watch.all();
        // Counted as ended before anyone can see it ended (`wait`).
        self.book.ended(&self);
        // `push` records the exit with its event, under one lock: a
        // reader never sees the exit without the `exited` event.
        self.push(EventKind::Exited(info), cap);
    }

    /// Bytes of output held for re-attaching.
    fn held(&self) -> usize {
        self.state.lock().map_or(0, |s| s.held)
    }

    /// Drop every output event held (the session's budget for finished
    /// execs is spent); `started` and `exited` stay.
    fn drop_output(&self) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let before = s.events.len();
        s.events
            .retain(|e| !matches!(e.kind, EventKind::Output { .. }));
        let dropped = (before - s.events.len()) as u64;
        s.dropped += dropped;
        s.held = 0;
    }

    #[allow(clippy::too_many_arguments)]
    fn output(
        &self,
        stream: StreamName,
        data: &[u8],
        limit: u64,
        count: &mut u64,
        dropped: &mut u64,
        cap: usize,
    ) {
        let room = limit.saturating_sub(*count) as usize;
        let kept = &data[..data.len().min(room)];
        *count += kept.len() as u64;
        *dropped += (data.len() - kept.len()) as u64;
        if !kept.is_empty() {
            self.push(
                EventKind::Output {
                    stream,
                    data: kept.to_vec(),
                },
                cap,
            );
        }
    }

    fn killed(&self) -> Option<ExitReason> {
        self.state.lock().ok().and_then(|s| s.killed)
    }

    async fn kill_as(&self, reason: ExitReason) {
        if let Ok(mut s) = self.state.lock() {
            if s.exit.is_some() {
                return;
            }
            s.killed.get_or_insert(reason);
        }
        let _ = self
            .control
            .send(
                &InitOrder::Signal {
                    id: self.id,
                    signal: libc::SIGKILL,
                },
                &[],
            )
            .await;
    }

    /// The session ended under it.
    pub(crate) fn session_ended(&self) {
        if let Ok(mut s) = self.state.lock() {
            if s.exit.is_none() {
                s.killed.get_or_insert(ExitReason::Killed);
            }
        }
    }

    /// Events after `after_seq` (0: from the start), waiting until there is
    /// at least one or the process has ended. Returns the events and
    /// whether the process has ended and everything was delivered.
    pub async fn events_after(&self, after_seq: u64) -> (Vec<Event>, bool) {
        let mut rx = self.changed.subscribe();
        loop {
            let (events, done) = self.events_now(after_seq);
            if !events.is_empty() || done {
                return (events, done);
            }
            if rx.changed().await.is_err() {
                return self.events_now(after_seq);
            }
        }
    }

    /// What is there now after `after_seq`, without waiting.
    pub fn events_now(&self, after_seq: u64) -> (Vec<Event>, bool) {
        let Ok(s) = self.state.lock() else {
            return (Vec::new(), true);
        };
        let mut out = Vec::new();
        // Dropped events leave holes in the seqs (output is dropped
        // oldest first, but `started` stays before it): each hole after
        // `after_seq` is reported as a gap of its size where it is.
        let mut expected = after_seq + 1;
        for e in s.events.iter().filter(|e| e.seq > after_seq) {
            if e.seq > expected {
                out.push(Event {
                    seq: expected,
                    kind: EventKind::Gap {
                        dropped_events: e.seq - expected,
                    },
                });
            }
            out.push(e.clone());
            expected = e.seq + 1;
        }
        let last = out.last().map_or(after_seq, |e| e.seq);
        let done = s.exit.is_some() && last + 1 >= s.next_seq;
        (out, done)
    }

    /// Wait for the end.
    pub async fn wait(&self) -> ExitInfo {
        let mut rx = self.changed.subscribe();
        loop {
            if let Some(exit) = self.exit() {
                return exit;
            }
            if rx.changed().await.is_err() {
                return self.exit().unwrap_or_else(gone_exit);
            }
        }
    }

    /// How it ended, if it has.
    pub fn exit(&self) -> Option<ExitInfo> {
        self.state.lock().ok().and_then(|s| s.exit.clone())
    }

    /// Send a signal to the command's process group (SIGKILL: the whole
    /// tree).
    pub async fn signal(&self, signal: i32) -> Result<()> {
        if self.exit().is_some() {
            return Err(SessionError::Ended(format!(
                "process {} has exited",
                self.id
            )));
        }
        if signal == libc::SIGKILL {
            self.kill_as(ExitReason::Killed).await;
            return Ok(());
        }
        self.control
            .send(
                &InitOrder::Signal {
                    id: self.id,
                    signal,
                },
                &[],
            )
            .await
    }

    /// Kill the whole process tree.
    pub async fn kill(&self) {
        self.kill_as(ExitReason::Killed).await;
    }

    pub async fn write_stdin(&self, data: &[u8]) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut stdin = self.stdin.lock().await;
        let pipe = stdin
            .as_mut()
            .ok_or_else(|| SessionError::Invalid("stdin is closed".into()))?;
        pipe.write_all(data)
            .await
            .map_err(|e| SessionError::io("write to stdin", e))
    }

    pub async fn close_stdin(&self) {
        self.stdin.lock().await.take();
    }
}

struct Pumps {
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
    report: pipe::Receiver,
}

fn parse_report(text: &[u8], report: &mut Report) {
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<ChildReport>(line) {
            Ok(ChildReport::Setup {
                layer,
                message,
                fix,
            }) => {
                let fix = fix.map(|f| format!(" (fix: {f})")).unwrap_or_default();
                report.setup = Some(format!("{layer}: {message}{fix}"));
            }
            Ok(ChildReport::Exec { program, errno }) => report.exec_errno = Some((program, errno)),
            Ok(ChildReport::Ended {
                status,
                user_us,
                system_us,
                max_rss_kib,
            }) => report.ended = Some((status, user_us, system_us, max_rss_kib)),
            Ok(ChildReport::Landlock { .. }) | Err(_) => {}
        }
    }
}

fn exit_info(
    report: &Report,
    killed: Option<ExitReason>,
    usage: ExecUsage,
    memory_by_rlimit: bool,
) -> ExitInfo {
    let base = |exit_code, reason, signal, message| ExitInfo {
        exit_code,
        reason,
        timed_out: reason == ExitReason::TimedOut,
        signal,
        message,
        usage: usage.clone(),
        said: Vec::new(),
    };
    if let Some(setup) = &report.setup {
        return base(125, ExitReason::SetupFailed, None, Some(setup.clone()));
    }
    if let Some((program, errno)) = &report.exec_errno {
        let (code, what) = if *errno == libc::ENOENT {
            (127, "not found")
        } else {
            (126, "cannot be run")
        };
        let err = std::io::Error::from_raw_os_error(*errno);
        return base(
            code,
            ExitReason::SetupFailed,
            None,
            Some(format!("{program}: {what} in the sandbox ({err})")),
        );
    }
    match (report.ended, killed) {
        (Some((status, ..)), _) if libc::WIFEXITED(status) => {
            base(libc::WEXITSTATUS(status), ExitReason::Exited, None, None)
        }
        (Some((status, ..)), None) => {
            let sig = libc::WTERMSIG(status);
            base(
                128 + sig,
                ExitReason::Signaled,
                Some(sig),
                signal_message(sig, memory_by_rlimit),
            )
        }
        (_, Some(ExitReason::TimedOut)) => base(
            124,
            ExitReason::TimedOut,
            Some(libc::SIGKILL),
            Some("the timeout passed; the command's whole process tree was killed".into()),
        ),
        (Some((status, ..)), Some(reason)) => {
            let sig = libc::WTERMSIG(status);
            base(128 + sig, reason, Some(sig), None)
        }
        (None, reason) => base(
            128 + libc::SIGKILL,
            reason.unwrap_or(ExitReason::Killed),
            Some(libc::SIGKILL),
            Some("killed with its process tree".into()),
        ),
    }
}

/// What a command's death by `sig` says (the same words as `cordon run`),
/// with the address-space note where memory is RLIMIT_AS.
fn signal_message(sig: i32, memory_by_rlimit: bool) -> Option<String> {
    let rlimit_as = memory_by_rlimit.then_some(cordon_jail::AddressSpaceLimit {
        bytes: None,
        remedy: "create the sandbox with more memory, or run the server where a memory cgroup \
                 is delegated (see `cordon doctor`)",
    });
    cordon_jail::death_by_signal(sig, rlimit_as)
}

fn gone_exit() -> ExitInfo {
    ExitInfo {
        exit_code: 128 + libc::SIGKILL,
        reason: ExitReason::Killed,
        timed_out: false,
        signal: Some(libc::SIGKILL),
        message: Some("the session ended".into()),
        usage: ExecUsage::default(),
        said: Vec::new(),
    }
}
