//! Long-lived sandboxes: the supervisor side of a session.
//!
//! [`start_session`] builds a sandbox like [`crate::run()`] does (namespaces,
//! root, cgroup, seccomp program, proxy listener) but its init does not run
//! a command: it serves [`InitOrder`]s on a control socket
//! (crate::session_init). Whoever holds the control socket starts commands
//! in the sandbox; when it closes the socket, the init leaves and the
//! kernel kills everything in the sandbox.
//!
//! Call [`start_session`] from a single-threaded process (a spawner
//! forked before any thread): see [`crate::run_with`] for why.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::child::{self, ChildContext};
use crate::error::{ChildReport, JailError, Result};
use crate::outcome::Enforcement;
use crate::rootfs::Plan;
use crate::run::{clone_sandbox, open_channels, record_identity, release_child, Groups};
use crate::seccomp::{self, FilterOptions};
use crate::spec::{IsolationLevel, Layer, NetworkMode, Spec};
use crate::sys::{self, Forked};

/// Largest order or reply on the control socket (argv and environment
/// of one exec, as JSON).
pub const MAX_MESSAGE_BYTES: usize = 60 * 1024;

/// Most descriptors one message carries.
const MAX_MESSAGE_FDS: usize = 8;

/// How long the root may take to build before the start is given up.
const BUILD_TIMEOUT: Duration = Duration::from_secs(30);

/// What the engine asks a session's init to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum InitOrder {
    /// Start a command. The message carries four descriptors: its stdin,
    /// stdout and stderr, and the write end of its report pipe (JSON
    /// lines: setup failures, the Landlock ABI, and finally
    /// [`ChildReport::Ended`]; end-of-file without `Ended` means the exec
    /// was killed).
    Exec {
        id: u64,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: PathBuf,
        /// Limits of this exec alone, on top of the session's.
        #[serde(default)]
        limits: ExecLimits,
    },
    /// Send `signal` to the exec's leader: SIGKILL ends its whole PID
    /// namespace; other signals go on to the command's process group.
    Signal { id: u64, signal: i32 },
    /// A pooled sandbox was claimed: later execs follow these binds (for
    /// Landlock) and limits (rlimits). Sent before any exec.
    Configure { id: u64, config: LateConfig },
    /// Answer with the init's root directory (O_PATH) attached: the
    /// sandbox's root as its processes see it, for the files API. (Its
    /// `/proc/<pid>/root` is closed to an unprivileged caller: the init is
    /// not dumpable.)
    OpenRoot { id: u64 },
    /// A pooled sandbox, just built: start its first exec ahead
    /// (`session_ready`), so that the session that claims it runs its
    /// first command without forking or confining anything. Answered with
    /// `Configured`. A claim that changes the binds or limits discards it.
    StartAhead { id: u64 },
}

/// Limits of one exec (a policy's `allow with limits`), set as rlimits
/// in its workload after the session's own and only ever lower than them:
/// each inherited by everything the command starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecLimits {
    /// Address space of each of the exec's processes, bytes
    /// (RLIMIT_AS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Processes and threads of the sandbox's user (RLIMIT_NPROC, counted
    /// by the kernel per user in the session's user namespace: every exec
    /// of the session, its init and the waiting exec included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
}

impl ExecLimits {
    /// Tighten with `memory` and `pids`: each limit becomes the lower of
    /// the two (a limit only one side has is kept), never higher.
    pub fn tighten(&mut self, memory: Option<u64>, pids: Option<u64>) {
        let lower = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.memory = lower(self.memory, memory);
        self.pids = lower(self.pids, pids);
    }
}

/// The init's answer to an [`InitOrder::Exec`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum InitReply {
    /// `pid` is the leader's, in the sandbox's PID namespace.
    Started {
        id: u64,
        pid: i32,
    },
    Refused {
        id: u64,
        message: String,
        /// The sandbox could not start another process now (its process
        /// limit, or the kernel's count of namespaces not yet freed):
        /// the same order may succeed later.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        busy: bool,
    },
    Configured {
        id: u64,
    },
    /// The root's descriptor is attached.
    Root {
        id: u64,
    },
}

/// Send one message (JSON) with `fds` attached on a SEQPACKET socket.
/// On a non-blocking socket this returns `WouldBlock` when the socket is
/// full; nothing was sent then.
pub fn send_message(
    socket: BorrowedFd<'_>,
    message: &impl Serialize,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the command's arguments and environment take {} bytes as JSON; at most {MAX_MESSAGE_BYTES} are accepted",
                bytes.len()
            ),
        ));
    }
    if fds.len() > MAX_MESSAGE_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_MESSAGE_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("control buffer too small"));
    }
    let sent = sendmsg(
        socket,
        &[IoSlice::new(&bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent != bytes.len() {
        return Err(io::Error::other("message cut short"));
    }
    Ok(())
}

/// Receive one message and its descriptors; `None` when the peer closed.
/// A message that is too large or not the expected JSON is
/// `InvalidData` (its descriptors are closed).
pub fn recv_message<T: DeserializeOwned>(
    socket: BorrowedFd<'_>,
) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    RECEIVE_BUFFER.with_borrow_mut(|buf| receive_into(socket, buf))
}

thread_local! {
    /// One receive buffer per thread, zeroed once. A fresh one per message
    /// cost a 60 KiB `memset`, and in a process just forked (a session's
    /// init, its leaders and waiting workloads) up to 15 copy-on-write
    /// page faults besides: the received bytes touch one or two pages.
    /// A workload sharing its leader's memory and thread block receives
    /// only while the leader is stopped (`sys::spawn_sharing_memory`).
    static RECEIVE_BUFFER: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(vec![0u8; MAX_MESSAGE_BYTES + 1]);
}

fn receive_into<T: DeserializeOwned>(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_MESSAGE_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = recvmsg(
        socket,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = m {
            fds.extend(received);
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if msg.flags.contains(rustix::net::ReturnFlags::TRUNC) || msg.bytes > MAX_MESSAGE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message too large",
        ));
    }
    let message = serde_json::from_slice(&buf[..msg.bytes])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((message, fds)))
}

/// A session's sandbox as its spawner holds it.
#[derive(Debug)]
pub struct LiveSandbox {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    control: Option<OwnedFd>,
    proxy_listener: Option<std::net::TcpListener>,
    groups: Groups,
    enforcement: Enforcement,
    pipe_owner: Option<(u32, u32)>,
    reaped: bool,
    /// The sandbox's user and mount namespaces, opened before the init
    /// made itself undumpable (after that only a host-privileged process
    /// could open them), for attaching binds at claim time.
    namespaces: Option<(OwnedFd, OwnedFd)>,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("dirs", &self.group.as_ref().map(|g| g.dirs().to_vec()))
            .finish()
    }
}

/// How a session's sandbox ended.
#[derive(Debug, Clone, Copy)]
pub struct SessionEnd {
    /// Every cgroup of the sandbox is gone.
    pub groups_removed: bool,
    pub stats: crate::cgroup::Stats,
}

impl LiveSandbox {
    /// The init's pid on the host.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// The socket the init reads [`InitOrder`]s from (once).
    pub fn take_control(&mut self) -> Option<OwnedFd> {
        self.control.take()
    }

    /// The egress proxy's listener inside the sandbox's network namespace
    /// (network mode proxy; once).
    pub fn take_proxy_listener(&mut self) -> Option<std::net::TcpListener> {
        self.proxy_listener.take()
    }

    pub fn enforcement(&self) -> &Enforcement {
        &self.enforcement
    }

    /// Whether memory is bounded by RLIMIT_AS (no memory cgroup).
    pub fn memory_by_rlimit(&self) -> bool {
        self.groups.rlimit_memory
    }

    /// The sandbox's cgroup directories (read its usage there).
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        self.groups
            .group
            .as_ref()
            .map(|g| g.dirs().to_vec())
            .unwrap_or_default()
    }

    /// The host owner to give an exec's pipes (when the sandbox's user is
    /// not the caller, e.g. a root caller), so that `/dev/stdout` can be
    /// reopened inside.
    pub fn pipe_owner(&self) -> Option<(u32, u32)> {
        self.pipe_owner
    }

    /// Whether the init has exited (reaps it when it has).
    pub fn exited(&mut self) -> bool {
        if self.reaped {
            return true;
        }
        if matches!(sys::wait4(self.pid, libc::WNOHANG), Ok((p, _, _)) if p == self.pid) {
            self.reaped = true;
        }
        self.reaped
    }

    /// Kill the sandbox, reap its init and remove its groups.
    pub fn end(&mut self) -> SessionEnd {
        self.control = None;
        self.proxy_listener = None;
        self.namespaces = None;
        if !self.reaped {
            let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
            let _ = sys::wait4(self.pid, 0);
            self.reaped = true;
        }
        let mut group = self.groups.group.take();
        let stats = group.as_ref().map(|g| g.stats()).unwrap_or_default();
        let groups_removed = group.as_mut().is_none_or(|g| g.remove());
        SessionEnd {
            groups_removed,
            stats,
        }
    }
}

impl Drop for LiveSandbox {
    fn drop(&mut self) {
        self.end();
    }
}

/// PID namespaces whose last process is gone but which still count
/// against `user.max_pid_namespaces`: the kernel counts a namespace off in
/// an RCU callback after its last `struct pid` is freed (itself after a
/// grace period), about 32 ms later on an idle 6.18 kernel at HZ=250 and
/// longer under load. A session running an exec a millisecond leaves some
/// 30 of them behind at any moment; this leaves room for eight times that.
/// A workload cannot use the room: seccomp refuses it every namespace.
const LINGERING_PID_NAMESPACES: u64 = 256;

/// Build a session's sandbox: everything `run` builds, with an init that
/// serves exec orders (at most `max_execs` at once get a PID namespace).
/// Returns once the root is built and the init waits for orders.
pub fn start_session(spec: &Spec, max_execs: u64) -> Result<LiveSandbox> {
    if spec.isolation.level != IsolationLevel::Namespaces {
        return Err(JailError::setup(
            Layer::UserNamespace,
            "a session needs the namespaces isolation level (each exec gets a PID namespace of its own)",
            Some(&crate::run::userns_fix()),
        ));
    }
    crate::run::refuse_unsupported(spec)?;
    crate::test_switch::check().map_err(JailError::InvalidSpec)?;
    let level = spec.isolation.level;
    let mut enforcement = Enforcement {
        isolation: level,
        ..Enforcement::default()
    };
    let mut plan = Plan::new(spec)?;
    // One more for an exec being torn down, one for the next one waiting
    // (crate::session_ready), and those the kernel has not counted off
    // yet (see LINGERING_PID_NAMESPACES).
    plan.allow_pid_namespaces(
        max_execs
            .saturating_add(2)
            .saturating_add(LINGERING_PID_NAMESPACES),
    );
    let identity =
        crate::identity::Identity::prepare(level, &plan.user_bind_paths(), !spec.staged.is_empty());
    plan.use_idmapped(identity.raw_fds());
    record_identity(&mut enforcement, &identity);
    let pipe_owner = (identity.report.source != "caller")
        .then_some((identity.report.host_uid, identity.report.host_gid));
    let program = seccomp::compile(FilterOptions {
        unix_sockets: spec.allow_unix_sockets,
        inet_sockets: spec.network != NetworkMode::None,
        notify: false,
        observe: false,
    })?;
    let mut groups = Groups::create(spec, &mut enforcement)?;
    let (parent, child_ends) = open_channels()?;
    let (pid, pidfd, in_v2_group) = match clone_sandbox(level, groups.group.as_ref()) {
        Ok((Forked::Child, _)) => child::enter(ChildContext {
            spec,
            plan: Some(&plan),
            seccomp: &program,
            cgroup: groups.group.as_ref(),
            fds: child_ends.child_fds(),
            rlimit_pids: groups.rlimit_pids,
            rlimit_memory: groups.rlimit_memory,
            landlock_optional: spec.accept_missing.contains(&Layer::Landlock),
            drop_groups: identity.drop_groups,
            session: true,
            landlock: None,
            exec_limits: Default::default(),
            cpus: None,
        }),
        Ok((Forked::Parent { pid, pidfd }, in_v2_group)) => (pid, pidfd, in_v2_group),
        Err(e) => {
            groups.release();
            return Err(e);
        }
    };
    drop(child_ends);
    // The child waits for the go byte: it is still dumpable now.
    let namespaces = open_namespaces(pid);
    let released = release_child(
        pid,
        level,
        &identity,
        groups.group.as_ref(),
        in_v2_group,
        parent.sync,
    );
    drop(identity);
    let mut live = LiveSandbox {
        namespaces,
        pid,
        pidfd,
        control: Some(parent.control),
        proxy_listener: None,
        groups,
        enforcement,
        pipe_owner,
        reaped: false,
    };
    released?;
    if spec.network == NetworkMode::Proxy {
        if let Some(control) = live.control.as_ref() {
            if let Ok(Some(fd)) = crate::fdpass::recv_fd(control) {
                live.proxy_listener = Some(std::net::TcpListener::from(fd));
            }
        }
    }
    wait_until_built(&parent.report)?;
    if spec.network == NetworkMode::Proxy && live.proxy_listener.is_none() {
        return Err(JailError::setup(
            Layer::NetworkNamespace,
            "the sandbox did not hand over its proxy listener",
            None,
        ));
    }
    Ok(live)
}

fn open_namespaces(pid: libc::pid_t) -> Option<(OwnedFd, OwnedFd)> {
    let open = |name: &str| {
        rustix::fs::open(
            format!("/proc/{pid}/ns/{name}").as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()
    };
    Some((open("user")?, open("mnt")?))
}

/// Read the init's report pipe to its end: end-of-file alone means the
/// root is built; a line is the reason it could not be.
fn wait_until_built(report: &OwnedFd) -> Result<()> {
    let deadline = std::time::Instant::now() + BUILD_TIMEOUT;
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut fds = [rustix::event::PollFd::new(
            report,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec::try_from(left).ok();
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => {
                return Err(JailError::setup(
                    Layer::Filesystem,
                    format!("the sandbox's root was not built within {BUILD_TIMEOUT:?}"),
                    None,
                ))
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(JailError::io("wait for the sandbox", e.into())),
        }
        match rustix::io::read(report, &mut buf) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(JailError::io("read the sandbox's report", e.into())),
        }
    }
    let first = text.split(|b| *b == b'\n').find(|l| !l.is_empty());
    match first.map(serde_json::from_slice::<ChildReport>) {
        None => Ok(()),
        Some(Ok(ChildReport::Setup {
            layer,
            message,
            fix,
        })) => Err(JailError::Setup {
            layer,
            message,
            fix,
        }),
        Some(other) => Err(JailError::Hook(format!(
            "unexpected report from the sandbox: {other:?}"
        ))),
    }
}

/// The sandbox's usage now, read from its cgroup directories.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct CurrentUsage {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_usec: Option<u64>,
}

/// Which files of a sandbox's groups hold its counters, found once: a v2
/// group holds them all, v1 spreads them over a group per controller under
/// other names. Reading them again then costs three reads, not a lookup
/// of every name in every group.
#[derive(Debug, Clone, Default)]
pub struct UsageFiles {
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<CpuFile>,
}

#[derive(Debug, Clone)]
enum CpuFile {
    /// v2 `cpu.stat`, its `usage_usec` line.
    Stat(PathBuf),
    /// v1 `cpuacct.usage`, in nanoseconds.
    AcctNanos(PathBuf),
}

impl UsageFiles {
    /// Looks in `dirs` for each counter's file (the first group that has
    /// it). Groups made for the sandbox have their files from the start.
    pub fn find(dirs: &[PathBuf]) -> UsageFiles {
        let first = |names: &[&str]| {
            dirs.iter()
                .flat_map(|d| names.iter().map(move |n| d.join(n)))
                .find(|p| p.is_file())
        };
        // A v1 `cpu.stat` holds throttling counts, not usage.
        let cpu = dirs
            .iter()
            .map(|d| d.join("cpu.stat"))
            .find(|p| read_cpu_stat_usage(p).is_some())
            .map(CpuFile::Stat)
            .or_else(|| first(&["cpuacct.usage"]).map(CpuFile::AcctNanos));
        UsageFiles {
            memory: first(&["memory.current", "memory.usage_in_bytes"]),
            pids: first(&["pids.current"]),
            cpu,
        }
    }

    /// The counters now (`None` for one whose file is missing or cannot
    /// be read: the group is gone).
    pub fn read(&self) -> CurrentUsage {
        let number =
            |p: &PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
        let cpu_usec = match &self.cpu {
            Some(CpuFile::Stat(p)) => read_cpu_stat_usage(p),
            Some(CpuFile::AcctNanos(p)) => number(p).map(|ns| ns / 1000),
            None => None,
        };
        CurrentUsage {
            memory_bytes: self.memory.as_ref().and_then(number),
            pids: self.pids.as_ref().and_then(number),
            cpu_usec,
        }
    }
}

/// The `usage_usec` line of a v2 `cpu.stat`.
fn read_cpu_stat_usage(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
}

/// Removes the groups of every sandbox this process made once it is
/// gone, even after SIGKILL: a small process that waits for end-of-file on
/// a pipe only this process holds, then sweeps `cordon-<pid>-*` groups.
/// Fork it while single-threaded.
#[derive(Debug)]
pub struct GroupSweeper {
    _wake: OwnedFd,
}

impl GroupSweeper {
    pub fn start() -> Result<GroupSweeper> {
        let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| JailError::io("pipe", e.into()))?;
        let owner = std::process::id();
        match sys::fork().map_err(|e| JailError::io("fork group sweeper", e))? {
            None => {
                let keep = rd.as_raw_fd();
                sys::close_all_from_except(0, &[keep]);
                let _ = rustix::process::setsid();
                let mut b = [0u8; 1];
                // SAFETY: blocking read of one byte into a local buffer;
                // returns at end-of-file when the owner is gone.
                while unsafe { libc::read(keep, b.as_mut_ptr() as *mut libc::c_void, 1) } > 0 {}
                crate::cgroup::remove_owned_by(owner);
                sys::exit_now(0)
            }
            Some(_) => Ok(GroupSweeper { _wake: wr }),
        }
    }
}

/// The number of threads of this process.
fn thread_count() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Fork a helper process that runs `main` and exits with its return
/// value; returns the helper's pid. In the helper every descriptor above
/// stderr is closed except `keep`. Refused unless this process has a
/// single thread (the helper then may allocate and take locks freely, and
/// may itself create user namespaces).
pub fn fork_helper(keep: &[BorrowedFd<'_>], main: impl FnOnce() -> i32) -> Result<i32> {
    match thread_count() {
        Some(1) => {}
        n => {
            return Err(JailError::InvalidSpec(format!(
                "a sandbox helper must be forked while the process has one thread (it has {}); fork it before starting threads or an async runtime",
                n.map_or_else(|| "an unknown number".to_string(), |n| n.to_string())
            )))
        }
    }
    match sys::fork().map_err(|e| JailError::io("fork", e))? {
        None => {
            let keep: Vec<i32> = keep.iter().map(|fd| fd.as_raw_fd()).collect();
            sys::close_all_from_except(3, &keep);
            let code = main();
            sys::exit_now(code)
        }
        Some(pid) => Ok(pid),
    }
}

/// Tie this process to its parent: SIGKILL when the parent dies. Returns
/// false when the parent is already gone (the caller should exit).
pub fn die_with_parent(parent: i32) -> bool {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) == Some(parent)
}

pub use crate::rootfs::PlannedBind as LateBind;

/// What a claimed pooled sandbox was given, for its init to know (its
/// Landlock rules and rlimits follow them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LateConfig {
    pub binds: Vec<LateBind>,
    pub limits: crate::spec::Limits,
    /// Where overlay files (a secret's CA bundle) were placed.
    #[serde(default)]
    pub files: Vec<PathBuf>,
}

impl LiveSandbox {
    /// Give a pooled sandbox (built from a base spec without binds) what
    /// `spec` asks for: its declared paths are attached into the built
    /// root, the cgroup gets its limits. Only the fields that can change
    /// after the build are taken from `spec`; the caller checks that the
    /// rest matches the base (see the session engine's pool key). Must be
    /// called from a single-threaded process (it forks a helper).
    pub fn claim(&mut self, spec: &Spec) -> Result<LateConfig> {
        if !spec.staged.is_empty() {
            return Err(JailError::InvalidSpec(
                "a pooled sandbox cannot take staged paths".into(),
            ));
        }
        let plan = Plan::new(spec)?;
        let binds = plan.user_binds().to_vec();
        if let Some(group) = self.groups.group.as_ref() {
            group
                .set_limits(spec.limits.memory, spec.limits.pids)
                .map_err(|e| {
                    JailError::setup(Layer::Cgroup, format!("cannot set the limits: {e}"), None)
                })?;
        }
        if !binds.is_empty() || !spec.files.is_empty() {
            let sources: Vec<&std::path::Path> = binds.iter().map(|b| b.path.as_path()).collect();
            self.attach_binds(&binds, &sources, &spec.files, false)?;
        }
        Ok(LateConfig {
            binds,
            limits: spec.limits.clone(),
            files: spec.files.iter().map(|f| f.path.clone()).collect(),
        })
    }

    /// Attach `binds` into the sandbox's root from a helper that joins
    /// its namespaces.
    ///
    /// The copies must come from a mount namespace where the caller may
    /// mount: root's are made (idmapped) here in the host's, as for a
    /// run; any other caller's in a fresh mount namespace the helper makes
    /// inside the sandbox's user namespace (allowing itself that one
    /// namespace and taking the allowance back), as the init does when it
    /// builds a root.
    /// `sources[i]` is the host path of `binds[i]` (its `path` is where it
    /// goes in the sandbox). `live`: the sandbox is running, so the mount
    /// point must be one it cannot move (crate::rootfs::check_live_target).
    fn attach_binds(
        &mut self,
        binds: &[LateBind],
        sources: &[&std::path::Path],
        files: &[crate::spec::FileOverlay],
        live: bool,
    ) -> Result<()> {
        let identity =
            crate::identity::Identity::prepare(IsolationLevel::Namespaces, sources, false);
        let idmapped = identity.idmapped;
        let (userns, mntns) = self.namespace_fds()?;
        let what = if live {
            "cannot bind the path into the running sandbox"
        } else {
            "cannot attach the declared paths to a pooled sandbox"
        };
        run_helper(what, || {
            let attach = Attach {
                binds,
                sources,
                idmapped,
                files,
                live,
            };
            attach_in_sandbox(userns, mntns, attach)
        })
    }

    /// The sandbox's user and mount namespaces (opened when it was made).
    fn namespace_fds(&self) -> Result<(BorrowedFd<'_>, BorrowedFd<'_>)> {
        match self.namespaces.as_ref() {
            Some((userns, mntns)) => Ok((userns.as_fd(), mntns.as_fd())),
            None => Err(JailError::setup(
                Layer::UserNamespace,
                "the sandbox's namespaces could not be opened when it was made",
                None,
            )),
        }
    }
}

/// Fork a helper that runs `main` and wait for it: `Ok` when it
/// succeeded, else its error's text under `what`. Single-threaded callers
/// only.
fn run_helper(what: &str, main: impl FnOnce() -> Result<()>) -> Result<()> {
    let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| JailError::io("pipe", e.into()))?;
    let helper = sys::fork().map_err(|e| JailError::io("fork", e))?;
    let Some(helper) = helper else {
        let code = match main() {
            Ok(()) => 0,
            Err(e) => {
                let report = match e {
                    JailError::Setup {
                        layer,
                        message,
                        fix,
                    } => ChildReport::Setup {
                        layer,
                        message,
                        fix,
                    },
                    other => ChildReport::Setup {
                        layer: Layer::Filesystem,
                        message: other.to_string(),
                        fix: None,
                    },
                };
                let text = serde_json::to_vec(&report).unwrap_or_default();
                let _ = sys::write_all_fd(wr.as_raw_fd(), &text);
                1
            }
        };
        sys::exit_now(code)
    };
    drop(wr);
    helper_result(helper, &rd, what)
}

/// Wait for a helper forked by [`LiveSandbox`]: `Ok` when it exited 0,
/// else its message (written to `rd`) under `what`.
fn helper_result(helper: libc::pid_t, rd: &OwnedFd, what: &str) -> Result<()> {
    let mut message = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n) = rustix::io::read(rd, &mut buf) {
        if n == 0 {
            break;
        }
        message.extend_from_slice(&buf[..n]);
    }
    let (_, status, _) =
        sys::wait4(helper, 0).map_err(|e| JailError::io("wait for the bind helper", e))?;
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        return Ok(());
    }
    match serde_json::from_slice::<ChildReport>(&message) {
        Ok(ChildReport::Setup {
            layer,
            message,
            fix,
        }) => Err(JailError::Setup {
            layer,
            message: format!("{what}: {message}"),
            fix,
        }),
        _ => Err(JailError::setup(
            Layer::Filesystem,
            format!("{what}: {}", String::from_utf8_lossy(&message)),
            None,
        )),
    }
}

/// What the bind helper attaches.
struct Attach<'a> {
    binds: &'a [LateBind],
    sources: &'a [&'a std::path::Path],
    idmapped: Vec<OwnedFd>,
    files: &'a [crate::spec::FileOverlay],
    live: bool,
}

/// The declared binds of `spec` as its init knows them (Landlock), for a
/// sandbox built from it (not claimed): the starting point of
/// [`LateConfig::binds`] when the session widens later.
pub fn planned_binds(spec: &Spec) -> Result<Vec<LateBind>> {
    Ok(Plan::new(spec)?.user_binds().to_vec())
}

/// A host path bound into a running sandbox (a live widening): the tree
/// at `host_path` appears at `path` inside, read-only unless `writable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveBind {
    pub host_path: PathBuf,
    pub path: PathBuf,
    pub writable: bool,
}

impl LiveSandbox {
    /// Bind `bind` into the running sandbox (from a helper that joins its
    /// namespaces, as for a claim). Returns the bind as later execs'
    /// Landlock rules must know it (tell the init with
    /// [`InitOrder::Configure`]). The mount point must be one the sandbox
    /// cannot move (every directory above it read-only inside), so that
    /// [`LiveSandbox::detach_live`] finds it. Single-threaded callers only.
    pub fn attach_live(&mut self, bind: &LiveBind) -> Result<LateBind> {
        let meta = std::fs::symlink_metadata(&bind.host_path).map_err(|e| {
            JailError::setup(
                Layer::Filesystem,
                format!("{}: {e}", bind.host_path.display()),
                Some("name an existing host path"),
            )
        })?;
        let planned = LateBind {
            path: bind.path.clone(),
            writable: bind.writable,
            dir: meta.is_dir(),
        };
        let sources = [bind.host_path.as_path()];
        self.attach_binds(std::slice::from_ref(&planned), &sources, &[], true)?;
        Ok(planned)
    }

    /// Detach the live bind at `path` inside the sandbox (lazily: the
    /// mount leaves the sandbox's tree at once). Single-threaded callers
    /// only.
    pub fn detach_live(&mut self, path: &std::path::Path) -> Result<()> {
        let (userns, mntns) = self.namespace_fds()?;
        run_helper("cannot unbind the path from the running sandbox", || {
            detach_in_sandbox(userns, mntns, path)
        })
    }

    /// Set the sandbox's cgroup memory and process limits (`None`:
    /// unlimited), v1 or v2, for everything running in it now and later.
    pub fn set_limits(&mut self, memory: Option<u64>, pids: Option<u64>) -> Result<()> {
        let Some(group) = self.groups.group.as_ref() else {
            return Err(JailError::setup(
                Layer::Cgroup,
                "this sandbox has no cgroup, so its limits cannot change while it runs",
                Some("run cordon serve where cgroups can be delegated (see `cordon doctor`)"),
            ));
        };
        group.set_limits(memory, pids).map_err(|e| {
            JailError::setup(Layer::Cgroup, format!("cannot set the limits: {e}"), None)
        })
    }
}

/// In the unbind helper: join the sandbox's namespaces and detach.
fn detach_in_sandbox(
    userns: BorrowedFd<'_>,
    mntns: BorrowedFd<'_>,
    path: &std::path::Path,
) -> Result<()> {
    let io = |what: &'static str| move |e: std::io::Error| JailError::io(what, e);
    sys::setns(userns, libc::CLONE_NEWUSER).map_err(io("join the sandbox's user namespace"))?;
    crate::identity::become_sandbox_user(false).map_err(io("take the sandbox's identity"))?;
    sys::setns(mntns, libc::CLONE_NEWNS).map_err(io("join the sandbox's mount namespace"))?;
    crate::rootfs::detach_late(path)
}

/// In the bind helper: copy the binds' sources, join the sandbox's mount
/// namespace and attach them there.
fn attach_in_sandbox(userns: BorrowedFd<'_>, mntns: BorrowedFd<'_>, a: Attach<'_>) -> Result<()> {
    let Attach {
        binds,
        sources,
        idmapped,
        files,
        live,
    } = a;
    let io = |what: &str| {
        let what = what.to_owned();
        move |e: std::io::Error| JailError::io(what, e)
    };
    sys::setns(userns, libc::CLONE_NEWUSER).map_err(io("join the sandbox's user namespace"))?;
    crate::identity::become_sandbox_user(false).map_err(io("take the sandbox's identity"))?;
    // Mount namespaces this helper makes in the sandbox's user namespace,
    // beyond the init's own: its own (to copy host paths), one anonymous
    // namespace per copy, and for overlay files a staging tmpfs and a copy
    // of each (fsmount and open_tree each make one); a margin for those
    // the kernel frees late. Allowed for this moment only.
    let copies = if idmapped.is_empty() { binds.len() } else { 0 };
    let staged = if files.is_empty() { 0 } else { files.len() + 1 };
    let own = usize::from(copies > 0);
    let allowance = 1 + own + copies + staged;
    // Opened here, in the sandbox's user namespace and the host's mount
    // namespace: the sandbox's own /proc/sys is read-only.
    let limit = if allowance > 1 {
        let limit = own_mnt_namespaces_limit()?;
        set_limit(&limit, allowance as u64 + 2)?;
        Some(limit)
    } else {
        None
    };
    let attached = (|| {
        let trees = if copies > 0 {
            sys::unshare(libc::CLONE_NEWNS).map_err(io("unshare the mount namespace"))?;
            crate::rootfs::clone_all_from(sources, binds)?
        } else {
            idmapped
        };
        sys::setns(mntns, libc::CLONE_NEWNS).map_err(io("join the sandbox's mount namespace"))?;
        if live {
            for b in binds {
                crate::rootfs::check_live_target(&b.path)?;
            }
        }
        crate::rootfs::attach_late(binds, trees, files)
    })();
    if let Some(limit) = &limit {
        set_limit(limit, 0)?;
    }
    attached
}

/// `user.max_mnt_namespaces` of the current user namespace, open for
/// writing.
fn own_mnt_namespaces_limit() -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/user/max_mnt_namespaces")
        .map_err(|e| limit_error("open", &e))
}

fn set_limit(file: &std::fs::File, n: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_at(n.to_string().as_bytes(), 0)
        .map(drop)
        .map_err(|e| limit_error(&format!("set it to {n}"), &e))
}

fn limit_error(what: &str, e: &std::io::Error) -> JailError {
    JailError::setup(
        Layer::UserNamespace,
        format!("user.max_mnt_namespaces in the sandbox's user namespace: cannot {what}: {e}"),
        None,
    )
}
