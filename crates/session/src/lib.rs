//! cordon-session: long-lived sandboxes for `cordon serve` and `cordon mcp`.
//!
//! A session is one sandbox (namespaces, root, cgroup, proxy listener)
//! that lives across many commands. The kernel lets only a
//! single-threaded process create user namespaces, so the sandboxes are
//! made by a [`Spawner`]: a process forked before the caller starts any
//! thread, asked for sandboxes over a socket. Each command (an exec) is a
//! new workload forked by the sandbox's own init, in a PID namespace of
//! its own (killing it kills the exec's whole process tree), with the
//! same Landlock, seccomp, capabilities and rlimits as `cordon run`.
//!
//! ```text
//! server (tokio) ── Engine ──socket──> Spawner (single-threaded)
//!                     │                    └─ clone ─> init (PID 1 of the sandbox)
//!                     └──── exec orders (SEQPACKET + fds) ───┘   └─ leader (PID 1 of the exec)
//!                                                                      └─ workload
//! ```
//!
//! The engine is async (tokio): output is read from pipes, events are
//! kept per process (re-attachable by sequence number), timeouts kill the
//! exec's tree.

mod error;

pub use error::{Result, SessionError};
mod context;
mod control;
mod engine;
pub mod files;
mod pool;
mod process;
mod random;
mod spawner;
mod widen;

pub use context::{CellError, CellResult, CodeContext, Language, DEFAULT_CELL_TIMEOUT};
pub use cordon_jail::session::ExecLimits;
pub use cordon_plan::said::Said;
pub use engine::{
    CreateSession, EndCause, Engine, EngineConfig, Process, Session, SessionInfo, SessionState,
    SessionUsage, Teardown,
};
pub use pool::{PoolConfig, PoolStats};
pub use process::{Event, EventKind, ExecRequest, ExecUsage, ExitInfo, ExitReason, StreamName};
pub use spawner::Spawner;
pub use widen::{ActiveWidening, ExpiryHook, Widening, WideningId};
