//! `Outcome`: what happened to one sandboxed run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spec::{IsolationLevel, Layer, Limits};

/// Everything a caller needs to know about a finished run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// The status `cordon run` exits with: the workload's own code, 128+N for
    /// signal N, 124 on deadline, 125 when the sandbox could not be built,
    /// 126/127 when the command could not be executed / was not found.
    pub exit_code: i32,
    /// Why the run ended.
    pub reason: EndReason,
    /// How the workload process itself ended, when it ran.
    pub status: Option<WaitStatus>,
    /// A human-readable explanation for setup and exec failures and limits.
    pub message: Option<String>,
    #[serde(with = "duration_secs")]
    pub wall_time: Duration,
    #[serde(with = "duration_secs")]
    pub user_time: Duration,
    #[serde(with = "duration_secs")]
    pub system_time: Duration,
    /// Peak memory of the whole sandbox in bytes (cgroup), or of the largest
    /// single process (rusage) when no cgroup was used.
    pub peak_memory: Option<u64>,
    pub peak_memory_source: Option<String>,
    /// The most tasks (processes and threads) the sandbox held at once,
    /// from its pids cgroup; None without one (rlimits keep no such count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_tasks: Option<u64>,
    pub stdout: StreamStats,
    pub stderr: StreamStats,
    /// Limit breaches observed by the kernel's counters.
    pub breaches: Breaches,
    /// The limits that were in force.
    pub limits: Limits,
    /// What this host enforced.
    pub enforcement: Enforcement,
    /// System calls from the sensitive set that the filter refused, as
    /// reported to the supervisor (first 256 kept; `denied_calls_total`
    /// counts all).
    pub denied_calls: Vec<DeniedCall>,
    pub denied_calls_total: u64,
    /// Accesses Landlock refused, from the kernel's audit log (first 256
    /// kept; `landlock_denials_total` counts all), when it could be read:
    /// see `landlock_log`.
    pub landlock_denials: Vec<crate::LandlockDenial>,
    pub landlock_denials_total: u64,
    /// Whether Landlock denials were observed for this run, or why not.
    pub landlock_log: crate::LandlockLogState,
    /// Learn mode (`Spec::observe`): every path the workload opened,
    /// created or executed, by access.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<crate::ObservedPath>,
    /// Observed calls whose path could not be read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_unreadable: u64,
    /// Distinct processes that made an observed call.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_processes: u64,
    /// Learn mode: the largest peak address space of one process (bytes),
    /// read when it called `exit_group`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_peak_address_space: u64,
    /// Learn mode: the most threads one process had (read at each `clone`
    /// and `exit_group`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_most_threads: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One refused system call. The arguments are the raw register values:
/// evidence only, never trusted for a decision (pointers are not followed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeniedCall {
    pub syscall: String,
    pub nr: i32,
    pub args: [u64; 6],
    /// The caller's pid as seen from the host.
    pub pid: u32,
    /// Milliseconds since the run started.
    pub at_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The workload exited on its own.
    Exited,
    /// The workload was killed by a signal.
    Signal,
    /// The wall-clock deadline passed.
    Timeout,
    /// The cgroup's OOM killer ended it.
    MemoryLimit,
    /// It failed after hitting the process/thread limit.
    PidsLimit,
    /// RLIMIT_CPU.
    CpuLimit,
    /// RLIMIT_FSIZE.
    FileSizeLimit,
    /// Output passed its limit with `on_output_limit = kill`.
    OutputLimit,
    /// cordon forwarded SIGINT/SIGTERM/SIGHUP it received.
    Interrupted,
    /// The sandbox could not be built.
    SetupFailed,
    /// The command could not be executed.
    ExecFailed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitStatus {
    Exited { code: i32 },
    Signaled { signal: i32, core_dumped: bool },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamStats {
    /// Bytes passed on to the caller.
    pub kept: u64,
    /// Bytes read from the workload and dropped because of the limit.
    pub dropped: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaches {
    /// Kills by the memory cgroup's OOM killer. None where memory is
    /// RLIMIT_AS: the kernel then fails the allocation and counts nothing.
    pub oom_kills: Option<u64>,
    /// Forks the pids cgroup refused. None where processes are bounded by
    /// RLIMIT_NPROC: the kernel then fails the fork and counts nothing.
    pub pids_limit_hits: Option<u64>,
    pub output_truncated: bool,
    /// /tmp had no space or inodes left when the workload ended.
    pub tmp_full: bool,
    /// /dev/shm had no space or inodes left when the workload ended.
    pub shm_full: bool,
    /// A file in /tmp or /dev/shm was exactly at the file-size limit when
    /// the workload ended: some process's write was cut there (and it got
    /// SIGXFSZ), even when that process was not the workload itself.
    #[serde(default)]
    pub file_at_size_limit: bool,
}

impl Breaches {
    /// The memory cgroup killed a process (never known under RLIMIT_AS).
    pub fn oom_killed(&self) -> bool {
        self.oom_kills.is_some_and(|n| n > 0)
    }

    /// The pids cgroup refused a fork (never known under RLIMIT_NPROC).
    pub fn pids_refused(&self) -> bool {
        self.pids_limit_hits.is_some_and(|n| n > 0)
    }
}

/// Which layers were applied, and how.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Enforcement {
    pub isolation: IsolationLevel,
    pub layers: Vec<LayerState>,
    /// Landlock ABI version applied (0 when none).
    pub landlock_abi: u32,
    /// "v1", "v2", "hybrid" or "none".
    pub cgroup: String,
    /// Who the sandbox is on the host and what became of the caller's
    /// supplementary groups.
    #[serde(default)]
    pub identity: crate::identity::IdentityReport,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerState {
    pub layer: Layer,
    pub enforced: bool,
    pub detail: String,
    /// The one line a warning repeated on every run shows where `detail`
    /// is long; the report and `cordon doctor` have the whole of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brief: Option<String>,
}

impl LayerState {
    /// What a warning about this layer says.
    pub fn warning_text(&self) -> &str {
        self.brief.as_deref().unwrap_or(&self.detail)
    }
}

impl Enforcement {
    pub(crate) fn record(&mut self, layer: Layer, enforced: bool, detail: impl Into<String>) {
        self.layers.push(LayerState {
            layer,
            enforced,
            detail: detail.into(),
            brief: None,
        });
    }

    /// Give the layer recorded last its one-line form for warnings.
    pub(crate) fn brief_for_last(&mut self, brief: String) {
        if let Some(last) = self.layers.last_mut() {
            last.brief = Some(brief);
        }
    }

    /// Layers that were not enforced, for warnings.
    pub fn degraded(&self) -> impl Iterator<Item = &LayerState> {
        self.layers.iter().filter(|l| !l.enforced)
    }
}

mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Ok(Duration::try_from_secs_f64(secs).unwrap_or_default())
    }
}
