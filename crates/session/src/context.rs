//! Code contexts: a persistent interpreter inside a session.
//!
//! The interpreter is a background exec of the session (same Landlock,
//! seccomp, limits as any exec) running `context/driver.py`. Cells go in
//! on its stdin, one JSON line each; the cell's output comes back on the
//! exec's stdout and stderr as written, and each cell ends with a frame
//! (`context/frame.rs`) opened by a mark with a random per-interpreter
//! boundary: the JSON result on stdout, an empty frame on stderr, so both
//! streams are complete when the result is read. Anything a cell writes
//! (print, `os.write(1, ...)`, subprocesses) is its output; only the
//! driver knows the boundary.
//!
//! One cell runs at a time (a mutex). An interpreter that died (a crash,
//! `os._exit`, killed by a cell timeout) is replaced at the next run, whose
//! result says `restarted: true`.

mod frame;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::time::Instant;

use cordon_jail::session::ExecLimits;

use crate::engine::{Process, Session};
use crate::error::{Result, SessionError};
use crate::process::{EventKind, ExecRequest, ExitInfo, StreamName};
use frame::{Piece, Splitter};

/// The Python side of the protocol, sent on stdin first.
const PYTHON_DRIVER: &str = include_str!("context/driver.py");
/// The command line's program: reads the driver from stdin and runs it
/// (the process list shows this, not the whole driver).
const PYTHON_BOOT: &str = include_str!("context/boot.py");

/// How long an interpreter may take to start and say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Output kept per stream per cell; the rest is counted and dropped.
const CELL_OUTPUT_LIMIT: usize = 1 << 20;

/// The timeout of a cell when the caller gives none.
pub const DEFAULT_CELL_TIMEOUT: Duration = Duration::from_secs(300);

/// A language a code context can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
}

impl Language {
    pub const ALL: &'static [Language] = &[Language::Python];

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
        }
    }
}

impl FromStr for Language {
    type Err = SessionError;

    fn from_str(s: &str) -> Result<Language> {
        match s.to_ascii_lowercase().as_str() {
            "python" | "python3" => Ok(Language::Python),
            _ => Err(SessionError::Invalid(format!(
                "no code context for language {s:?}; supported: {}",
                Language::ALL
                    .iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

/// An exception a cell raised (or why it could not finish).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellError {
    /// The exception's type (`ZeroDivisionError`), or `TimeoutError` /
    /// `InterpreterDied` when the interpreter did not finish the cell.
    pub name: String,
    pub message: String,
    pub traceback: String,
}

/// What one cell did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellResult {
    pub stdout: String,
    pub stderr: String,
    /// `repr` of the last expression, when the cell ends with one that is
    /// not `None`.
    pub value: Option<String>,
    pub error: Option<CellError>,
    /// The interpreter had died and was started again for this cell: the
    /// earlier state is gone.
    pub restarted: bool,
}

/// A persistent interpreter in a session.
#[derive(Debug)]
pub struct CodeContext {
    session: Arc<Session>,
    language: Language,
    /// The interpreter's own limits (a policy's), for a restart too.
    limits: ExecLimits,
    /// The longest any cell may run (a policy's), whatever a run asks.
    max_cell: Option<Duration>,
    /// `None` after the interpreter died: the next run starts another.
    interpreter: Mutex<Option<Interpreter>>,
}

impl CodeContext {
    /// Start an interpreter in `session` and wait until it is ready.
    pub async fn start(session: Arc<Session>, language: Language) -> Result<CodeContext> {
        CodeContext::start_limited(session, language, ExecLimits::default(), None).await
    }

    /// Start one whose interpreter (and every restart of it) runs with
    /// these limits of its own, as an exec would, and whose cells run
    /// `max_cell` at most.
    pub async fn start_limited(
        session: Arc<Session>,
        language: Language,
        limits: ExecLimits,
        max_cell: Option<Duration>,
    ) -> Result<CodeContext> {
        let interpreter = Interpreter::start(&session, language, limits).await?;
        Ok(CodeContext {
            session,
            language,
            limits,
            max_cell,
            interpreter: Mutex::new(Some(interpreter)),
        })
    }

    pub fn language(&self) -> Language {
        self.language
    }

    /// The interpreter's own limits.
    pub fn limits(&self) -> ExecLimits {
        self.limits
    }

    /// Run one cell. A cell still running after `timeout` has its
    /// interpreter killed (the error says so; the state is lost). Errors
    /// only when no interpreter can be started (the session ended, ...).
    pub async fn run(&self, code: &str, timeout: Duration) -> Result<CellResult> {
        let timeout = self.max_cell.map_or(timeout, |m| timeout.min(m));
        let mut slot = self.interpreter.lock().await;
        self.session.touch();
        let mut restarted = false;
        // Dead, or still busy with a cell whose run was cancelled (its
        // caller went away mid-cell): its next frame would answer the
        // wrong cell, so it is replaced.
        if let Some(stale) = slot.take_if(|i| i.process.exit().is_some() || i.in_flight) {
            stale.process.kill().await;
        }
        let request = cell_request(code)?;
        for attempt in 0..2 {
            let interpreter = match slot.as_mut() {
                Some(i) => i,
                None => {
                    restarted = true;
                    slot.insert(
                        Interpreter::start(&self.session, self.language, self.limits).await?,
                    )
                }
            };
            interpreter.in_flight = true;
            if interpreter.process.write_stdin(&request).await.is_ok() {
                break;
            }
            // It died between cells: the cell never reached it.
            interpreter.process.kill().await;
            *slot = None;
            if attempt == 1 {
                return Err(SessionError::Context(
                    "a new interpreter would not take the cell on its stdin".into(),
                ));
            }
        }
        let Some(interpreter) = slot.as_mut() else {
            return Err(SessionError::Context("no interpreter".into()));
        };
        let exchange = interpreter.exchange(Instant::now() + timeout).await;
        interpreter.in_flight = false;
        let (value, error, alive) = match exchange.end {
            End::Frame(payload) => match serde_json::from_slice::<Answer>(&payload) {
                Ok(a) => (a.value, a.error, true),
                Err(e) => (
                    None,
                    Some(lost("ContextError", &format!("an unreadable result ({e})"))),
                    false,
                ),
            },
            End::TimedOut => (
                None,
                Some(lost(
                    "TimeoutError",
                    &format!("the cell ran longer than {timeout:?}; the interpreter was killed"),
                )),
                false,
            ),
            End::Exited(info) => (
                None,
                Some(lost(
                    "InterpreterDied",
                    &format!("the interpreter {}", ended(info.as_ref())),
                )),
                false,
            ),
            End::Broken(why) => (
                None,
                Some(lost(
                    "ContextError",
                    &format!("the interpreter broke the protocol: {why}"),
                )),
                false,
            ),
        };
        if !alive {
            interpreter.process.kill().await;
            *slot = None;
        }
        Ok(CellResult {
            stdout: exchange.stdout.into_string(),
            stderr: exchange.stderr.into_string(),
            value,
            error,
            restarted,
        })
    }

    /// Stop the interpreter (also done when the context is dropped).
    pub async fn close(&self) {
        if let Some(i) = self.interpreter.lock().await.take() {
            i.process.close_stdin().await;
            i.process.kill().await;
        }
    }
}

impl Drop for CodeContext {
    fn drop(&mut self) {
        if let Some(i) = self.interpreter.get_mut().take() {
            // Killing is an order to the sandbox's init: send it from a task.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let process = i.process.clone();
                runtime.spawn(async move { process.kill().await });
            }
        }
    }
}

/// An error for a cell that did not finish; the state is gone with the
/// interpreter.
fn lost(name: &str, what: &str) -> CellError {
    CellError {
        name: name.into(),
        message: format!(
            "{what}; its state (variables, imports) is lost and the next run starts a new interpreter"
        ),
        traceback: String::new(),
    }
}

fn ended(info: Option<&ExitInfo>) -> String {
    match info {
        Some(i) => match (i.signal, &i.message) {
            (Some(sig), _) => format!("was killed by signal {sig}"),
            (None, Some(m)) => format!("exited with code {} ({m})", i.exit_code),
            (None, None) => format!("exited with code {}", i.exit_code),
        },
        None => "ended".into(),
    }
}

fn cell_request(code: &str) -> Result<Vec<u8>> {
    let mut line = serde_json::to_vec(&serde_json::json!({ "code": code }))
        .map_err(|e| SessionError::Invalid(format!("the cell cannot be encoded: {e}")))?;
    line.push(b'\n');
    Ok(line)
}

/// A cell's result as the driver frames it.
#[derive(Debug, Deserialize)]
struct Answer {
    value: Option<String>,
    error: Option<CellError>,
}

/// One running interpreter and where its output has been read to.
#[derive(Debug)]
struct Interpreter {
    process: Arc<Process>,
    /// A cell was sent and its answer not read yet.
    in_flight: bool,
    after_seq: u64,
    stdout: Splitter,
    stderr: Splitter,
}

/// Output of one stream during one exchange, bounded.
#[derive(Debug, Default)]
struct Capture {
    kept: Vec<u8>,
    dropped: u64,
}

impl Capture {
    fn add(&mut self, bytes: &[u8]) {
        let room = CELL_OUTPUT_LIMIT.saturating_sub(self.kept.len());
        let take = room.min(bytes.len());
        self.kept.extend_from_slice(&bytes[..take]);
        self.dropped += (bytes.len() - take) as u64;
    }

    fn into_string(self) -> String {
        let mut s = String::from_utf8_lossy(&self.kept).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!(
                "\n[{} more bytes of output not kept]\n",
                self.dropped
            ));
        }
        s
    }
}

#[derive(Debug)]
enum End {
    Frame(Vec<u8>),
    TimedOut,
    Exited(Option<ExitInfo>),
    Broken(String),
}

#[derive(Debug)]
struct Exchange {
    stdout: Capture,
    stderr: Capture,
    end: End,
}

impl Interpreter {
    async fn start(
        session: &Session,
        language: Language,
        limits: ExecLimits,
    ) -> Result<Interpreter> {
        let Language::Python = language;
        let boundary = random_boundary()?;
        let process = session
            .exec(ExecRequest {
                argv: vec![
                    "python3".into(),
                    "-u".into(),
                    "-c".into(),
                    PYTHON_BOOT.into(),
                ],
                stdin: Some(boot_input(&boundary)),
                keep_stdin_open: true,
                // Long-lived: the output is read cell by cell and bounded per cell.
                output_limit: None,
                limits,
                ..ExecRequest::default()
            })
            .await?;
        let mark = frame::mark(&boundary);
        let mut interpreter = Interpreter {
            process,
            in_flight: false,
            after_seq: 0,
            stdout: Splitter::new(mark.clone()),
            stderr: Splitter::new(mark),
        };
        let ready = interpreter.exchange(Instant::now() + START_TIMEOUT).await;
        let why = match ready.end {
            End::Frame(_) => return Ok(interpreter),
            End::TimedOut => format!("it did not say it was ready within {START_TIMEOUT:?}"),
            End::Broken(why) => format!("it broke the protocol: {why}"),
            End::Exited(Some(info)) if info.exit_code == 127 => {
                "python3 is not on the sandbox's PATH (exit 127); code contexts need python3 in \
                 the sandbox (the host's /usr is bound read-only: install python3 on the host)"
                    .into()
            }
            End::Exited(info) => {
                let stderr = ready.stderr.into_string();
                format!(
                    "it {} before it was ready: {}",
                    ended(info.as_ref()),
                    stderr.trim()
                )
            }
        };
        interpreter.process.kill().await;
        Err(SessionError::Context(format!(
            "the {} interpreter could not be started: {why}",
            language.as_str()
        )))
    }

    /// Read output until both streams carry their end-of-cell frame, the
    /// interpreter ends, or `deadline` passes.
    async fn exchange(&mut self, deadline: Instant) -> Exchange {
        let mut stdout = Capture::default();
        let mut stderr = Capture::default();
        let mut frame = None;
        let mut stderr_done = false;
        let end = loop {
            if stderr_done {
                if let Some(f) = frame.take() {
                    break End::Frame(f);
                }
            }
            let read = tokio::time::timeout_at(deadline, self.process.events_after(self.after_seq));
            let Ok((events, done)) = read.await else {
                break End::TimedOut;
            };
            let mut exited = None;
            for event in events {
                self.after_seq = event.seq;
                match event.kind {
                    EventKind::Output { stream, data } => {
                        let (splitter, capture) = match stream {
                            StreamName::Stdout => (&mut self.stdout, &mut stdout),
                            StreamName::Stderr => (&mut self.stderr, &mut stderr),
                        };
                        match splitter.push(&data) {
                            Ok(pieces) => {
                                for piece in pieces {
                                    match (piece, stream) {
                                        (Piece::Output(b), _) => capture.add(&b),
                                        (Piece::Frame(f), StreamName::Stdout) => frame = Some(f),
                                        (Piece::Frame(_), StreamName::Stderr) => stderr_done = true,
                                    }
                                }
                            }
                            Err(why) => exited = Some(End::Broken(why)),
                        }
                    }
                    EventKind::Gap { dropped_events } => stdout.add(
                        format!("\n[{dropped_events} output events were dropped]\n").as_bytes(),
                    ),
                    EventKind::Exited(info) => exited = Some(End::Exited(Some(info))),
                    EventKind::Started { .. } => {}
                }
            }
            if stderr_done && frame.is_some() {
                continue;
            }
            if let Some(end) = exited {
                break end;
            }
            if done {
                break End::Exited(self.process.exit());
            }
        };
        if matches!(end, End::Exited(_)) {
            stdout.add(&self.stdout.take_rest());
            stderr.add(&self.stderr.take_rest());
        }
        Exchange {
            stdout,
            stderr,
            end,
        }
    }
}

/// What an interpreter reads first: the driver (framed for `boot.py`),
/// then the boundary line the driver reads.
fn boot_input(boundary: &str) -> Vec<u8> {
    format!("{}\n{PYTHON_DRIVER}{boundary}\n", PYTHON_DRIVER.len()).into_bytes()
}

/// 128 random bits, hex: the frame boundary of one interpreter.
fn random_boundary() -> Result<String> {
    crate::random::random_hex(16)
        .map_err(|e| SessionError::io("cannot read random bytes for a context", e))
}

#[cfg(test)]
mod tests;
