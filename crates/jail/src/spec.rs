//! `Spec`: the concrete description of one sandbox, as plain data.
//!
//! Everything here is already resolved: absolute, canonical host paths, byte
//! counts, durations, the complete environment. The jail never reads profiles
//! or flags; whoever builds a `Spec` (the CLI, the server) does that.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One sandbox to build and one command to run in it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// Program and arguments. `argv[0]` is looked up in the sandbox's `PATH`
    /// unless it contains a `/`.
    pub argv: Vec<String>,
    /// The complete environment of the workload (already allowlisted).
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox.
    pub cwd: PathBuf,
    /// Host paths made visible inside, at the same path. Canonical, absolute.
    pub binds: Vec<Bind>,
    /// Size of the `/tmp` tmpfs in bytes and its inode cap.
    pub tmp_size: u64,
    pub tmp_inodes: u64,
    /// Resource limits.
    pub limits: Limits,
    /// Network access.
    pub network: NetworkMode,
    /// Port of the proxy listener inside the sandbox (`NetworkMode::Proxy`).
    pub proxy_port: u16,
    /// Allow `socket(AF_UNIX, ...)`. `socketpair` is always allowed.
    pub allow_unix_sockets: bool,
    /// Isolation level requested and whether a weaker one is acceptable.
    pub isolation: Isolation,
    /// Layers the caller accepts to be missing on this host. Anything not
    /// listed here that the host cannot enforce makes `spawn` refuse.
    pub accept_missing: Vec<Layer>,
    /// Where the workload's stdin comes from.
    pub stdin: StdinMode,
    /// Hostname inside the UTS namespace.
    pub hostname: String,
    /// Read-only files placed inside at the given paths, over whatever the
    /// binds put there (for example a CA bundle that adds cordon's per-run
    /// certificate authority to the system's).
    pub files: Vec<FileOverlay>,
    /// Staged directories: writable inside at their own path, with every
    /// write kept in a separate upper layer on the host (see [`StagedBind`]).
    #[serde(default)]
    pub staged: Vec<StagedBind>,
    /// Learn mode: note every path the workload opens, creates or
    /// executes (in `Outcome::observed`) and let the call continue.
    #[serde(default)]
    pub observe: bool,
    /// A writable, size-capped tmpfs at this path (scratch space that is
    /// not /tmp, e.g. `/workspace` for a session), unless a declared bind
    /// is already there. Same size and inode limits as /tmp.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
}

/// A bind kind whose writes never reach the host directory: an overlay
/// filesystem with the host directory as its (read-only) lower layer and
/// `upper`/`work` as its writable layer, mounted inside the sandbox's user
/// namespace with `userxattr`. All three are canonical absolute host paths;
/// `upper` and `work` must be empty directories on the same filesystem.
/// With [`StageMode::Copy`], `upper` holds a copy of the host directory
/// made by the caller and is bound writable at `lower`'s path instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedBind {
    /// The host directory, and where it appears inside.
    pub lower: PathBuf,
    /// Where the changes go.
    pub upper: PathBuf,
    /// Overlayfs's scratch directory.
    pub work: PathBuf,
    #[serde(default)]
    pub mode: StageMode,
}

/// How a staged directory is kept apart from the host's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageMode {
    /// overlayfs over the host directory.
    #[default]
    Overlay,
    /// A copy of the host directory (in `upper`), bound in its place:
    /// where overlayfs cannot be mounted in a user namespace.
    Copy,
}

/// A file that exists only inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOverlay {
    /// Absolute path inside.
    pub path: PathBuf,
    pub contents: Vec<u8>,
}

/// A host path bound into the sandbox at the same path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    pub path: PathBuf,
    pub writable: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock deadline: the whole tree is killed when it passes.
    #[serde(with = "opt_secs", rename = "wall_seconds")]
    pub wall: Option<Duration>,
    /// CPU seconds (RLIMIT_CPU).
    #[serde(with = "opt_secs", rename = "cpu_seconds")]
    pub cpu: Option<Duration>,
    /// Memory in bytes, swap included (cgroup; RLIMIT_AS when no cgroup).
    pub memory: Option<u64>,
    /// Processes and threads (cgroup pids; RLIMIT_NPROC when no cgroup).
    pub pids: Option<u64>,
    /// Open descriptors per process (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// Largest file a process may write (RLIMIT_FSIZE).
    pub file_size: Option<u64>,
    /// Bytes of output kept per stream; the rest is counted and dropped.
    pub output: Option<u64>,
    /// What happens when a stream passes `output`.
    pub on_output_limit: OutputLimitAction,
    /// What the run may charge to the caller's per-user kernel counters.
    #[serde(default)]
    pub kernel: crate::budgets::KernelBudgets,
}

impl Limits {
    /// Tighten the memory and pids limits with a policy's caps: each
    /// becomes the lower of the two (a limit only one side has is kept),
    /// never higher; the same rule as [`crate::session::ExecLimits::tighten`].
    pub fn tighten(&mut self, memory: Option<u64>, pids: Option<u64>) {
        let mut both = crate::session::ExecLimits {
            memory: self.memory,
            pids: self.pids,
        };
        both.tighten(memory, pids);
        self.memory = both.memory;
        self.pids = both.pids;
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputLimitAction {
    /// Keep draining and counting, drop the excess.
    #[default]
    Truncate,
    /// Kill the sandbox as soon as a stream passes its limit.
    Kill,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// A network namespace with loopback only, and no socket families but
    /// `AF_UNIX` (when allowed).
    #[default]
    None,
    /// A network namespace with loopback only; IPv4/IPv6 sockets allowed so
    /// the workload can talk to itself.
    Loopback,
    /// Loopback only, plus a listener on 127.0.0.1:`proxy_port` inside whose
    /// connections the supervisor's egress proxy serves. TCP connect is
    /// narrowed to that port by Landlock (ABI 4+).
    Proxy,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationLevel {
    /// User, mount, PID, network, IPC, UTS and cgroup namespaces, a fresh
    /// root, plus everything below.
    #[default]
    Namespaces,
    /// No namespaces: Landlock, seccomp, rlimits and cgroups only.
    Process,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Isolation {
    pub level: IsolationLevel,
    /// Run at `Process` level when user namespaces are unavailable.
    pub allow_weaker: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    #[default]
    Inherit,
    Null,
}

/// The enforcement layers cordon applies; used to report what was enforced
/// and to name what a host lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    UserNamespace,
    MountNamespace,
    PidNamespace,
    NetworkNamespace,
    Seccomp,
    Landlock,
    Cgroup,
    Rlimits,
    Capabilities,
    Filesystem,
    Deadline,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::UserNamespace => "user namespace",
            Layer::MountNamespace => "mount namespace",
            Layer::PidNamespace => "pid namespace",
            Layer::NetworkNamespace => "network namespace",
            Layer::Seccomp => "seccomp",
            Layer::Landlock => "landlock",
            Layer::Cgroup => "cgroup",
            Layer::Rlimits => "rlimits",
            Layer::Capabilities => "capabilities",
            Layer::Filesystem => "filesystem",
            Layer::Deadline => "deadline",
        }
    }
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Spec {
    /// A spec with the strict defaults and the given command; the caller
    /// fills in binds, limits and environment.
    pub fn new(argv: Vec<String>, cwd: PathBuf) -> Spec {
        Spec {
            argv,
            env: vec![("PATH".into(), DEFAULT_PATH.into())],
            cwd,
            binds: Vec::new(),
            tmp_size: 64 << 20,
            tmp_inodes: 16 << 10,
            limits: Limits::default(),
            network: NetworkMode::None,
            proxy_port: 3128,
            allow_unix_sockets: false,
            isolation: Isolation::default(),
            accept_missing: Vec::new(),
            stdin: StdinMode::Inherit,
            hostname: "cordon".into(),
            files: Vec::new(),
            staged: Vec::new(),
            observe: false,
            workspace: None,
        }
    }
}

/// `PATH` inside the sandbox when the caller does not set one.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// The user and group id the workload has inside the sandbox.
pub const SANDBOX_UID: u32 = 1000;
pub const SANDBOX_GID: u32 = 1000;

/// `Option<Duration>` as (fractional) seconds in JSON.
mod opt_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let v = Option::<f64>::deserialize(d)?;
        Ok(v.and_then(|s| Duration::try_from_secs_f64(s).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tightening_limits_keeps_the_lower_of_each_and_never_raises() {
        let mut limits = Limits {
            memory: Some(512 << 20),
            pids: None,
            ..Limits::default()
        };
        limits.tighten(Some(256 << 20), Some(64));
        assert_eq!((limits.memory, limits.pids), (Some(256 << 20), Some(64)));
        limits.tighten(Some(1 << 30), None);
        assert_eq!((limits.memory, limits.pids), (Some(256 << 20), Some(64)));
        limits.tighten(None, Some(32));
        assert_eq!((limits.memory, limits.pids), (Some(256 << 20), Some(32)));
    }
}
