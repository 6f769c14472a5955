//! cordon-jail: Linux isolation for one command.
//!
//! `Spec` (plain data) goes in, `run` builds the sandbox (user, mount, PID,
//! network, IPC, UTS and cgroup namespaces; a fresh tmpfs root; seccomp;
//! Landlock; cgroups; rlimits; a deadline), supervises it, and returns an
//! `Outcome`. No TOML, no HTTP, no async: this crate only talks to the
//! kernel.
//!
//! Process model: the supervisor clones a child into new namespaces (it must
//! be single-threaded at that moment). The child becomes PID 1 of the new
//! PID namespace, builds the root filesystem, starts the workload, reaps
//! zombies and forwards signals. The workload applies rlimits, Landlock,
//! drops capabilities, sets no_new_privs, installs the seccomp filter and
//! execs. When PID 1 exits the kernel kills everything left in the
//! namespace; PR_SET_PDEATHSIG ties PID 1 to the supervisor, and a janitor
//! process removes the cgroups even if the supervisor is SIGKILLed.

mod budgets;
pub mod cgroup;
mod child;
mod error;
mod etc;
mod fdpass;
pub mod host;
pub mod identity;
mod kaudit;
mod landlock_rules;
mod observe;
mod outcome;
mod overlay;
mod rootfs;
mod run;
pub mod seccomp;
pub mod session;
mod session_init;
mod session_ready;
mod setup_cpu;
mod spec;
mod supervise;
mod sys;
pub mod test_switch;
mod verdict;

pub use budgets::KernelBudgets;
pub use error::{ChildReport, JailError, Result};
pub use etc::provided_names as sandbox_etc_names;
pub use identity::IdentityReport;
pub use kaudit::{probe as landlock_log_probe, LandlockDenial, LandlockLogState};
pub use landlock_rules::kernel_abi as landlock_abi;
pub use observe::{Access, ObservedPath};
pub use outcome::{
    Breaches, DeniedCall, EndReason, Enforcement, LayerState, Outcome, StreamStats, WaitStatus,
};
pub use overlay::{
    probe as overlay_probe, probe_over as overlay_probe_over,
    probe_switched_off as overlay_probe_switched_off, STAGE_FIX,
};
pub use rootfs::SYSTEM_DIRS;
pub use run::{
    run, run_with, userns_fix, CaptureSink, Hooks, NoHooks, OutputSink, RunOptions, Started,
    StdioSink, Stream,
};
pub use setup_cpu::with_every_cpu;
pub use spec::{
    Bind, FileOverlay, Isolation, IsolationLevel, Layer, Limits, NetworkMode, OutputLimitAction,
    Spec, StageMode, StagedBind, StdinMode, DEFAULT_PATH, SANDBOX_GID, SANDBOX_UID,
};
pub use verdict::{death_by_signal, AddressSpaceLimit};
