//! The supervisor: builds the sandbox around one command, relays its
//! output within limits, enforces the deadline, and reports the outcome.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cgroup::{self, Cgroup};
use crate::child::{self, ChildContext, ChildFds};
use crate::error::{ChildReport, JailError, Result};
use crate::outcome::{Breaches, EndReason, Enforcement, Outcome, StreamStats, WaitStatus};
use crate::rootfs::Plan;
use crate::seccomp::{self, FilterOptions};
use crate::spec::{
    IsolationLevel, Layer, NetworkMode, OutputLimitAction, Spec, SANDBOX_GID, SANDBOX_UID,
};
use crate::sys::{self, Forked};

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Where the workload's kept output goes.
pub trait OutputSink {
    fn write(&mut self, stream: Stream, data: &[u8]);
}

/// Passes output on to this process's own stdout and stderr.
#[derive(Debug, Default)]
pub struct StdioSink;

impl OutputSink for StdioSink {
    fn write(&mut self, stream: Stream, data: &[u8]) {
        let fd = match stream {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        };
        // A closed or broken stdout must not stop supervision.
        let _ = sys::write_all_fd(fd, data);
    }
}

/// Collects output in memory (bounded by the spec's output limit).
#[derive(Debug, Default)]
pub struct CaptureSink {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl OutputSink for CaptureSink {
    fn write(&mut self, stream: Stream, data: &[u8]) {
        match stream {
            Stream::Stdout => self.stdout.extend_from_slice(data),
            Stream::Stderr => self.stderr.extend_from_slice(data),
        }
    }
}

/// How the caller wants the run supervised.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Forward SIGINT/SIGTERM/SIGHUP/SIGQUIT received by this process to
    /// the workload (for `cordon run`; a server leaves this off).
    pub forward_signals: bool,
    /// Read the workload's Landlock denials from the kernel's audit log
    /// when the host allows it (root, audit enabled); the outcome says
    /// whether it did.
    pub observe_landlock: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            forward_signals: true,
            observe_landlock: true,
        }
    }
}

/// How long the end of a run waits for the kernel to deliver the last
/// audit records (it stops as soon as the kernel's queue is empty).
const LANDLOCK_LOG_GRACE: Duration = Duration::from_millis(100);

const NS_FLAGS: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| JailError::io("pipe", e.into()))
}

/// The fix for hosts where unprivileged user namespaces are off.
pub fn userns_fix() -> String {
    let read = |p: &str| fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or give cordon an AppArmor profile with 'userns,')".into();
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return "sysctl -w kernel.unprivileged_userns_clone=1".into();
    }
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return "sysctl -w user.max_user_namespaces=15000".into();
    }
    "allow user namespaces on this host (inside a container: run it with a seccomp profile that permits clone/unshare of user namespaces), or accept the weaker 'process' isolation level in the profile".into()
}

/// What the supervisor tells its caller while a sandbox runs.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    /// The sandbox's first process (its init), as seen from the host.
    pub pid: i32,
    pub at: std::time::SystemTime,
}

/// Callbacks from the supervisor. They run after the sandbox was cloned,
/// so they may start threads (which inherit the supervisor's blocked
/// signals); an error kills the sandbox and fails the run.
pub trait Hooks {
    /// The sandbox is running.
    fn started(&mut self, _started: &Started) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Serve the proxy listener the sandbox made inside its network
    /// namespace (`NetworkMode::Proxy`).
    fn proxy_listener(
        &mut self,
        _listener: std::net::TcpListener,
    ) -> std::result::Result<(), String> {
        Err("no egress proxy is configured".into())
    }

    /// How long after the start [`Hooks::tick`] should be called (once),
    /// if the sandbox is still running then.
    fn tick_after(&self) -> Option<Duration> {
        None
    }

    /// Called once, [`Hooks::tick_after`] into the run, on the
    /// supervisor's thread. An error ends the run like one from `started`.
    fn tick(&mut self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// No callbacks.
#[derive(Debug, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {}

/// Run `spec` to completion.
pub fn run(spec: &Spec, sink: &mut dyn OutputSink, options: RunOptions) -> Result<Outcome> {
    run_with(spec, sink, options, &mut NoHooks)
}

/// Run `spec` to completion, calling `hooks` along the way.
///
/// The sandbox is made with a raw `clone`, which runs no fork handlers:
/// until it execs, the child runs Rust code (allocating) on a copy of this
/// process's memory. No other thread of the calling process may be inside
/// the allocator or hold a lock at that moment, or the child can wait on it
/// forever. Call it from a process whose other threads (if any) are idle,
/// and start threads from [`Hooks`], which run after the clone; a server
/// that runs many sandboxes should clone from a single-threaded helper
/// process.
pub fn run_with(
    spec: &Spec,
    sink: &mut dyn OutputSink,
    options: RunOptions,
    hooks: &mut dyn Hooks,
) -> Result<Outcome> {
    if spec.argv.is_empty() {
        return Err(JailError::InvalidSpec("no command given".into()));
    }
    match run_level(spec, sink, options, hooks) {
        Err(JailError::Setup {
            layer: Layer::UserNamespace,
            ..
        }) if spec.isolation.allow_weaker && spec.isolation.level == IsolationLevel::Namespaces => {
            let mut weaker = spec.clone();
            weaker.isolation.level = IsolationLevel::Process;
            run_level(&weaker, sink, options, hooks)
        }
        other => other,
    }
}

struct Janitor {
    pid: libc::pid_t,
    // Dropping it (or our death) wakes the janitor.
    _wake: OwnedFd,
}

impl Janitor {
    /// A small process outside the sandbox that removes the sandbox's
    /// cgroups once this supervisor is gone, even if it was SIGKILLed.
    fn start(dirs: Vec<PathBuf>) -> Result<Janitor> {
        let (rd, wr) = pipe()?;
        match sys::fork().map_err(|e| JailError::io("fork janitor", e))? {
            None => {
                let keep = rd.as_raw_fd();
                sys::close_all_from_except(0, &[keep]);
                let _ = rustix::process::setsid();
                let mut b = [0u8; 1];
                // SAFETY: blocking read of one byte into a local buffer;
                // returns at end-of-file when the supervisor is gone.
                while unsafe { libc::read(keep, b.as_mut_ptr() as *mut libc::c_void, 1) } > 0 {}
                cgroup::remove_dirs(&dirs);
                sys::exit_now(0)
            }
            Some(pid) => {
                drop(rd);
                Ok(Janitor { pid, _wake: wr })
            }
        }
    }

    fn finish(self) {
        let pid = self.pid;
        drop(self);
        // Reap it if it is already done; otherwise it is reaped when this
        // process exits (or by whoever adopts it).
        let _ = sys::wait4(pid, libc::WNOHANG);
    }
}

fn run_level(
    spec: &Spec,
    sink: &mut dyn OutputSink,
    options: RunOptions,
    hooks: &mut dyn Hooks,
) -> Result<Outcome> {
    if spec.network == NetworkMode::Proxy && spec.isolation.level == IsolationLevel::Process {
        return Err(JailError::setup(
            Layer::NetworkNamespace,
            "egress through the proxy needs a network namespace, which the process isolation level does not have",
            Some("allow user namespaces on this host, or run without network access"),
        ));
    }
    let started = Instant::now();
    let level = spec.isolation.level;
    let mut enforcement = Enforcement {
        isolation: level,
        ..Enforcement::default()
    };
    let plan = match level {
        IsolationLevel::Namespaces => Some(Plan::new(spec)?),
        IsolationLevel::Process => None,
    };
    let filter = FilterOptions {
        unix_sockets: spec.allow_unix_sockets,
        inet_sockets: spec.network != NetworkMode::None,
        notify: true,
    };
    let program = seccomp::compile(filter)?;

    // Control groups, or rlimits where none can be used.
    let support = cgroup::probe();
    enforcement.cgroup = support.label().to_owned();
    let name = format!("cordon-{}-{:x}", std::process::id(), random_u64());
    let mut group = match Cgroup::create(&support, &name, spec.limits.memory, spec.limits.pids) {
        Ok(g) => Some(g),
        Err(e) => {
            enforcement.cgroup = "none".into();
            enforcement.record(
                Layer::Cgroup,
                false,
                format!("cannot create cgroup: {e}; using rlimits"),
            );
            None
        }
    };
    let rlimit_memory = group.is_none() || support.memory.is_none();
    let rlimit_pids = group.is_none() || support.pids.is_none();
    if group.is_some() {
        let mut detail = Vec::new();
        for (what, place) in [
            ("memory", &support.memory),
            ("pids", &support.pids),
            ("cpu", &support.cpu),
        ] {
            if let Some(p) = place {
                detail.push(format!("{what}:{:?}", p.version).to_lowercase());
            }
        }
        let complete = support.complete();
        let mut text = detail.join(" ");
        if !complete {
            text.push_str(&format!(
                "; missing controllers fall back to rlimits ({})",
                support.problems.join("; ")
            ));
        }
        enforcement.record(Layer::Cgroup, complete, text);
    }
    if !enforcement.layers.iter().any(|l| l.layer == Layer::Cgroup) {
        enforcement.record(
            Layer::Cgroup,
            false,
            format!("no cgroup: {}", support.problems.join("; ")),
        );
    }
    let janitor = match &group {
        Some(g) => Some(Janitor::start(g.dirs().to_vec())?),
        None => None,
    };

    let cleanup_group = |group: &mut Option<Cgroup>| {
        if let Some(g) = group.as_mut() {
            g.remove();
        }
    };

    let (sync_rd, sync_wr) = pipe()?;
    let (report_rd, report_wr) = pipe()?;
    let (status_rd, status_wr) = pipe()?;
    let (out_rd, out_wr) = pipe()?;
    let (err_rd, err_wr) = pipe()?;
    // Carries the proxy listener and the seccomp listener from the sandbox;
    // the kernel tells the supervisor's end who sent each (SO_PASSCRED).
    let control = Some(
        rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| JailError::io("socketpair", e.into()))?,
    );
    if let Some((parent, _)) = &control {
        rustix::net::sockopt::set_socket_passcred(parent, true)
            .map_err(|e| JailError::io("SO_PASSCRED", e.into()))?;
    }
    // Subscribed before the sandbox exists, so no denial goes unseen.
    let (mut landlock_log, landlock_unobserved) = if options.observe_landlock {
        match crate::kaudit::LandlockLog::open() {
            Ok(log) => (Some(log), None),
            Err(why) => (None, Some(why)),
        }
    } else {
        (None, Some("not requested".to_string()))
    };

    let flags = match level {
        IsolationLevel::Namespaces => NS_FLAGS,
        IsolationLevel::Process => 0,
    };
    let forked = match sys::clone_sandbox(flags) {
        Ok(f) => f,
        Err(e) => {
            cleanup_group(&mut group);
            if let Some(j) = janitor {
                j.finish();
            }
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::ENOSPC) | Some(libc::EINVAL)
                | Some(libc::EUSERS)
                    if level == IsolationLevel::Namespaces =>
                {
                    JailError::Setup {
                        layer: Layer::UserNamespace,
                        message: format!("cannot create user namespaces on this host: {e}"),
                        fix: Some(userns_fix()),
                    }
                }
                _ => JailError::io("clone", e),
            });
        }
    };
    let (pid, pidfd) = match forked {
        Forked::Child => child::enter(ChildContext {
            spec,
            plan: plan.as_ref(),
            seccomp: &program,
            cgroup: group.as_ref(),
            fds: ChildFds {
                sync: sync_rd.as_raw_fd(),
                report: report_wr.as_raw_fd(),
                status: status_wr.as_raw_fd(),
                stdout: out_wr.as_raw_fd(),
                stderr: err_wr.as_raw_fd(),
                control: control.as_ref().map(|(_, child)| child.as_raw_fd()),
            },
            rlimit_pids,
            rlimit_memory,
            landlock_optional: spec.accept_missing.contains(&Layer::Landlock),
        }),
        Forked::Parent { pid, pidfd } => (pid, pidfd),
    };
    drop((sync_rd, report_wr, status_wr, out_wr, err_wr));
    let control = control.map(|(parent, _child)| parent);

    // Identity mapping and cgroup membership, then let the child go.
    let prepared = prepare_child(pid, level, group.as_ref());
    if let Err(e) = prepared {
        let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
        let _ = sys::wait4(pid, 0);
        cleanup_group(&mut group);
        if let Some(j) = janitor {
            j.finish();
        }
        return Err(e);
    }
    sys::write_all_fd(sync_wr.as_raw_fd(), b"g").map_err(|e| JailError::io("start sandbox", e))?;
    drop(sync_wr);

    let signals = if options.forward_signals {
        let set = sys::block_signals(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT])
            .map_err(|e| JailError::io("block signals", e))?;
        Some((
            sys::signalfd(&set).map_err(|e| JailError::io("signalfd", e))?,
            set,
        ))
    } else {
        None
    };

    // Hooks may start threads: block the forwarded signals first, so that
    // the threads inherit the mask and the signalfd below sees them all.
    let mut hook_error = hooks
        .started(&Started {
            pid,
            at: std::time::SystemTime::now(),
        })
        .err();
    // The proxy listener comes before the workload starts; if the helper
    // fails first, the socket closes and its report explains why.
    if let (None, Some(control), NetworkMode::Proxy) = (&hook_error, &control, spec.network) {
        match crate::fdpass::recv_fd(control) {
            Ok(Some(fd)) => {
                if let Err(e) = hooks.proxy_listener(std::net::TcpListener::from(fd)) {
                    hook_error = Some(format!("cannot start the egress proxy: {e}"));
                }
            }
            Ok(None) => {}
            Err(e) => hook_error = Some(format!("cannot receive the proxy listener: {e}")),
        }
    }
    if hook_error.is_some() {
        let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
    }

    let deadline = spec.limits.wall.map(|d| started + d);
    let tick_at = hooks.tick_after().map(|d| started + d);
    let mut sup = Supervision::new(spec);
    sup.pump(
        &pidfd,
        [&out_rd, &err_rd],
        &report_rd,
        control.as_ref(),
        started,
        signals.as_ref().map(|(fd, _)| fd),
        deadline,
        sink,
        level,
        group.as_ref(),
        landlock_log.as_mut(),
        tick_at.map(|at| (at, &mut *hooks)),
    );
    let hook_error = hook_error.or(sup.hook_error.take());
    let (landlock_state, landlock_denials, landlock_denials_total) = match landlock_log {
        Some(log) => log.finish(started, LANDLOCK_LOG_GRACE),
        None => (
            crate::LandlockLogState {
                observed: false,
                detail: landlock_unobserved.unwrap_or_default(),
                kernel_count: None,
            },
            Vec::new(),
            0,
        ),
    };

    if let Some((_, set)) = signals {
        // SAFETY: restoring the mask we changed, with a valid sigset_t.
        unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }

    let (_, raw_status, usage) =
        sys::wait4(pid, 0).map_err(|e| JailError::io("wait for sandbox", e))?;
    let mut scratch_full = 0u32;
    let workload_status = match level {
        IsolationLevel::Namespaces => {
            let mut buf = [0u8; 8];
            match rustix::io::read(&status_rd, &mut buf) {
                Ok(8) => {
                    scratch_full = u32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
                    Some(decode_status(i32::from_ne_bytes([
                        buf[0], buf[1], buf[2], buf[3],
                    ])))
                }
                _ => None,
            }
        }
        IsolationLevel::Process => Some(decode_status(raw_status)),
    };
    if level == IsolationLevel::Process {
        // Without a PID namespace, stragglers are found through the cgroup.
        if let Some(g) = &group {
            for dir in g.dirs() {
                let _ = fs::write(dir.join("cgroup.kill"), "1");
            }
        }
        // SAFETY: kill(2) on the workload's process group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }

    let stats = group.as_ref().map(Cgroup::stats).unwrap_or_default();
    cleanup_group(&mut group);
    if let Some(j) = janitor {
        j.finish();
    }

    let wall_time = started.elapsed();
    let tv =
        |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32).saturating_mul(1000));
    let user_time = stats
        .user_usec
        .map_or_else(|| tv(usage.ru_utime), Duration::from_micros);
    let system_time = stats
        .system_usec
        .map_or_else(|| tv(usage.ru_stime), Duration::from_micros);
    let (peak_memory, peak_memory_source) = match stats.peak_memory {
        Some(p) => (Some(p), Some("cgroup".to_owned())),
        None => (
            Some(usage.ru_maxrss as u64 * 1024),
            Some("rusage_max_process".to_owned()),
        ),
    };

    record_layers(
        &mut enforcement,
        spec,
        &program,
        &sup,
        rlimit_pids,
        rlimit_memory,
    );

    let breaches = Breaches {
        oom_kills: stats.oom_kills,
        pids_limit_hits: stats.pids_limit_hits,
        output_truncated: sup.out[0].dropped > 0 || sup.out[1].dropped > 0,
        tmp_full: scratch_full & crate::child::SCRATCH_TMP_FULL != 0,
        shm_full: scratch_full & crate::child::SCRATCH_SHM_FULL != 0,
        file_at_size_limit: scratch_full & crate::child::SCRATCH_FILE_AT_LIMIT != 0,
    };
    if let Some(e) = hook_error {
        return Err(JailError::Hook(e));
    }
    let (reason, exit_code, message) = classify(
        spec,
        &sup,
        workload_status,
        &breaches,
        raw_status,
        user_time + system_time,
    );
    if reason == EndReason::SetupFailed {
        if let Some(ChildReport::Setup {
            layer,
            message,
            fix,
        }) = sup.setup_error.clone()
        {
            return Err(JailError::Setup {
                layer,
                message,
                fix,
            });
        }
    }
    Ok(Outcome {
        exit_code,
        reason,
        status: workload_status,
        message,
        wall_time,
        user_time,
        system_time,
        peak_memory,
        peak_memory_source,
        stdout: sup.out[0],
        stderr: sup.out[1],
        breaches,
        limits: spec.limits.clone(),
        enforcement,
        denied_calls: std::mem::take(&mut sup.denied),
        denied_calls_total: sup.denied_total,
        landlock_denials,
        landlock_denials_total,
        landlock_log: landlock_state,
    })
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::NONBLOCK);
    u64::from_ne_bytes(b)
}

fn prepare_child(pid: libc::pid_t, level: IsolationLevel, group: Option<&Cgroup>) -> Result<()> {
    if level == IsolationLevel::Namespaces {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let write = |file: &str, text: String| {
            fs::write(format!("/proc/{pid}/{file}"), text).map_err(|e| JailError::Setup {
                layer: Layer::UserNamespace,
                message: format!("cannot write {file} for the sandbox: {e}"),
                fix: Some(userns_fix()),
            })
        };
        write("setgroups", "deny".into())?;
        write("uid_map", format!("{SANDBOX_UID} {uid} 1"))?;
        write("gid_map", format!("{SANDBOX_GID} {gid} 1"))?;
    }
    if let Some(g) = group {
        // The v1 groups are joined by the sandbox itself (child::enter).
        g.add_v2(pid).map_err(|e| JailError::Setup {
            layer: Layer::Cgroup,
            message: format!("cannot move the sandbox into its cgroup: {e}"),
            fix: None,
        })?;
    }
    Ok(())
}

fn decode_status(status: i32) -> WaitStatus {
    if libc::WIFSIGNALED(status) {
        WaitStatus::Signaled {
            signal: libc::WTERMSIG(status),
            core_dumped: libc::WCOREDUMP(status),
        }
    } else {
        WaitStatus::Exited {
            code: libc::WEXITSTATUS(status),
        }
    }
}

/// State of the supervision loop.
struct Supervision {
    out: [StreamStats; 2],
    limit: Option<u64>,
    on_limit: OutputLimitAction,
    report: Vec<u8>,
    setup_error: Option<ChildReport>,
    exec_error: Option<(String, i32)>,
    landlock: Option<(u32, bool)>,
    timed_out: bool,
    output_killed: bool,
    interrupted: Option<i32>,
    denied: Vec<crate::outcome::DeniedCall>,
    denied_total: u64,
    /// An error from `Hooks::tick`; the sandbox was killed for it.
    hook_error: Option<String>,
}

impl Supervision {
    fn new(spec: &Spec) -> Supervision {
        Supervision {
            out: [StreamStats::default(); 2],
            limit: spec.limits.output,
            on_limit: spec.limits.on_output_limit,
            report: Vec::new(),
            setup_error: None,
            exec_error: None,
            landlock: None,
            timed_out: false,
            output_killed: false,
            interrupted: None,
            denied: Vec::new(),
            denied_total: 0,
            hook_error: None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn pump(
        &mut self,
        pidfd: &OwnedFd,
        outputs: [&OwnedFd; 2],
        report: &OwnedFd,
        control: Option<&OwnedFd>,
        started: Instant,
        signals: Option<&OwnedFd>,
        deadline: Option<Instant>,
        sink: &mut dyn OutputSink,
        level: IsolationLevel,
        group: Option<&Cgroup>,
        mut landlock_log: Option<&mut crate::kaudit::LandlockLog>,
        mut tick: Option<(Instant, &mut dyn Hooks)>,
    ) {
        let kill = |sup: &Supervision| {
            let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL);
            if level == IsolationLevel::Process {
                let _ = sup;
                if let Some(g) = group {
                    for dir in g.dirs() {
                        let _ = fs::write(dir.join("cgroup.kill"), "1");
                    }
                }
            }
        };
        let mut open = [true, true];
        let mut report_open = true;
        let mut control_open = control.is_some();
        let mut notify: Option<OwnedFd> = None;
        let mut exited = false;
        let mut exited_at: Option<Instant> = None;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if exited && !open[0] && !open[1] && !report_open {
                break;
            }
            // After the sandbox is gone, give leftover pipe data a moment.
            if let Some(t) = exited_at {
                if t.elapsed() > Duration::from_secs(2) {
                    break;
                }
            }
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(5);
            let mut tags: Vec<u8> = Vec::with_capacity(5);
            let mut add = |fd: RawFd, tag: u8| {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                tags.push(tag);
            };
            if !exited {
                add(pidfd.as_raw_fd(), b'p');
            }
            if open[0] {
                add(outputs[0].as_raw_fd(), b'o');
            }
            if open[1] {
                add(outputs[1].as_raw_fd(), b'e');
            }
            if report_open {
                add(report.as_raw_fd(), b'r');
            }
            if let Some(s) = signals {
                add(s.as_raw_fd(), b's');
            }
            if let (true, Some(c)) = (control_open, control) {
                add(c.as_raw_fd(), b'c');
            }
            if let Some(n) = &notify {
                add(n.as_raw_fd(), b'n');
            }
            if let Some(log) = &landlock_log {
                add(log.fd().as_raw_fd(), b'a');
            }
            let wake = [
                deadline.filter(|_| !self.timed_out),
                tick.as_ref().map(|(at, _)| *at),
            ]
            .into_iter()
            .flatten()
            .min();
            let timeout_ms: libc::c_int = match (wake, exited) {
                (_, true) => 100,
                (Some(d), false) => {
                    let left = d.saturating_duration_since(Instant::now());
                    left.as_millis().min(i32::MAX as u128) as libc::c_int
                        + i32::from(left.subsec_micros() % 1000 != 0)
                }
                (None, false) => -1,
            };
            // SAFETY: `fds` is a valid array of pollfd of the given length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
            if n < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            if let (Some(d), false) = (deadline, self.timed_out) {
                if !exited && Instant::now() >= d {
                    self.timed_out = true;
                    kill(self);
                }
            }
            if tick.as_ref().is_some_and(|(at, _)| Instant::now() >= *at) {
                if let Some((_, hooks)) = tick.take() {
                    if !exited {
                        if let Err(e) = hooks.tick() {
                            self.hook_error = Some(e);
                            kill(self);
                        }
                    }
                }
            }
            for (pfd, tag) in fds.iter().zip(&tags) {
                if pfd.revents == 0 {
                    continue;
                }
                match tag {
                    b'p' => {
                        exited = true;
                        exited_at = Some(Instant::now());
                    }
                    b'o' | b'e' => {
                        let idx = usize::from(*tag == b'e');
                        // SAFETY: reading into our buffer from our pipe.
                        let r = unsafe {
                            libc::read(pfd.fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len())
                        };
                        if r <= 0 {
                            if r == 0
                                || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)
                            {
                                open[idx] = false;
                            }
                            continue;
                        }
                        let data = &buf[..r as usize];
                        let stats = &mut self.out[idx];
                        let room = self
                            .limit
                            .map_or(data.len() as u64, |l| l.saturating_sub(stats.kept));
                        let keep = (data.len() as u64).min(room) as usize;
                        if keep > 0 {
                            sink.write(
                                if idx == 0 {
                                    Stream::Stdout
                                } else {
                                    Stream::Stderr
                                },
                                &data[..keep],
                            );
                            stats.kept += keep as u64;
                        }
                        stats.dropped += (data.len() - keep) as u64;
                        if stats.dropped > 0
                            && self.on_limit == OutputLimitAction::Kill
                            && !self.output_killed
                        {
                            self.output_killed = true;
                            kill(self);
                        }
                    }
                    b'c' => match control.map(crate::fdpass::recv_fd_from) {
                        // Sent by the workload right after it restricted
                        // itself with Landlock: the kernel's word for its
                        // host pid names its Landlock domain's creator.
                        Some(Ok((Some(fd), sender))) => {
                            notify = Some(fd);
                            if let (Some(log), Some(pid)) = (landlock_log.as_deref_mut(), sender) {
                                log.set_workload(pid);
                            }
                        }
                        _ => control_open = false,
                    },
                    b'a' => {
                        if let Some(log) = landlock_log.as_deref_mut() {
                            log.drain(started);
                        }
                    }
                    b'n' => {
                        if pfd.revents & libc::POLLIN != 0 {
                            if let Some(fd) = &notify {
                                self.answer_notification(fd.as_raw_fd(), started);
                            }
                        } else {
                            // Every task using the filter is gone.
                            notify = None;
                        }
                    }
                    b'r' => {
                        // SAFETY: reading into our buffer from our pipe.
                        let r = unsafe {
                            libc::read(pfd.fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len())
                        };
                        if r <= 0 {
                            report_open = false;
                            self.parse_reports();
                            continue;
                        }
                        // The helper sends a few short lines; cap anyway.
                        if self.report.len() < 64 * 1024 {
                            self.report.extend_from_slice(&buf[..r as usize]);
                        }
                    }
                    b's' => {
                        if let Some(sig) = signals.and_then(|s| sys::read_signalfd(s.as_raw_fd())) {
                            let repeated = self.interrupted.is_some();
                            self.interrupted = Some(sig);
                            let signal = if repeated {
                                rustix::process::Signal::KILL
                            } else {
                                // SAFETY: `sig` is one of the signals we blocked, a valid number.
                                unsafe { rustix::process::Signal::from_raw_unchecked(sig) }
                            };
                            let _ = rustix::process::pidfd_send_signal(pidfd, signal);
                            if level == IsolationLevel::Process {
                                // SAFETY: kill(2) on the workload's process group.
                                unsafe { libc::kill(-pidfd_pid(pidfd), sig) };
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        if report_open {
            self.parse_reports();
        }
        let _ = pidfd.as_fd();
    }

    /// Refuse one notified system call with EPERM and keep it as evidence.
    fn answer_notification(&mut self, fd: RawFd, started: Instant) {
        use libseccomp::{ScmpNotifReq, ScmpNotifResp, ScmpNotifRespFlags};
        let Ok(req) = ScmpNotifReq::receive(fd) else {
            return; // the caller died meanwhile
        };
        let _ =
            ScmpNotifResp::new_error(req.id, -libc::EPERM, ScmpNotifRespFlags::empty()).respond(fd);
        self.denied_total += 1;
        if self.denied.len() < 256 {
            let nr = i32::from(req.data.syscall);
            self.denied.push(crate::outcome::DeniedCall {
                syscall: req
                    .data
                    .syscall
                    .get_name()
                    .unwrap_or_else(|_| format!("syscall_{nr}")),
                nr,
                args: req.data.args,
                pid: req.pid,
                at_ms: started.elapsed().as_millis() as u64,
            });
        }
    }

    fn parse_reports(&mut self) {
        for line in self.report.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<ChildReport>(line) {
                Ok(ChildReport::Landlock { abi, fully }) => self.landlock = Some((abi, fully)),
                Ok(ChildReport::Exec { program, errno }) => {
                    self.exec_error = Some((program, errno))
                }
                Ok(r @ ChildReport::Setup { .. }) => self.setup_error = Some(r),
                Err(_) => {}
            }
        }
        self.report.clear();
    }
}

fn pidfd_pid(pidfd: &OwnedFd) -> libc::pid_t {
    // Read "Pid:" from /proc/self/fdinfo/N.
    let text =
        fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:").and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}

fn classify(
    spec: &Spec,
    sup: &Supervision,
    status: Option<WaitStatus>,
    breaches: &Breaches,
    init_status: i32,
    cpu_used: Duration,
) -> (EndReason, i32, Option<String>) {
    if let Some(ChildReport::Setup { layer, message, .. }) = &sup.setup_error {
        return (
            EndReason::SetupFailed,
            125,
            Some(format!("{layer}: {message}")),
        );
    }
    if let Some((program, errno)) = &sup.exec_error {
        let (code, text) = if *errno == libc::ENOENT {
            (127, format!("{program}: command not found in the sandbox (PATH is searched inside; bind its directory with --ro if it lives elsewhere)"))
        } else {
            (
                126,
                format!(
                    "{program}: cannot execute: {}",
                    io::Error::from_raw_os_error(*errno)
                ),
            )
        };
        return (EndReason::ExecFailed, code, Some(text));
    }
    if sup.timed_out {
        let limit = spec
            .limits
            .wall
            .map(|d| format!("{:?}", d))
            .unwrap_or_default();
        return (
            EndReason::Timeout,
            124,
            Some(format!("killed at the wall-clock deadline ({limit})")),
        );
    }
    if sup.output_killed {
        return (
            EndReason::OutputLimit,
            128 + libc::SIGKILL,
            Some("killed: output passed its limit".into()),
        );
    }
    let memory_msg = || {
        Some(format!(
            "killed by the memory limit ({} bytes)",
            spec.limits.memory.unwrap_or(0)
        ))
    };
    match status {
        Some(WaitStatus::Exited { code }) => {
            if code != 0 && breaches.pids_limit_hits > 0 {
                (
                    EndReason::PidsLimit,
                    code,
                    Some("the process limit was reached".into()),
                )
            } else if code != 0 && breaches.oom_kills > 0 {
                (EndReason::MemoryLimit, code, memory_msg())
            } else {
                (EndReason::Exited, code, None)
            }
        }
        Some(WaitStatus::Signaled { signal, .. }) => {
            let code = 128 + signal;
            if signal == libc::SIGKILL && breaches.oom_kills > 0 {
                (EndReason::MemoryLimit, code, memory_msg())
            } else if signal == libc::SIGXCPU
                || (signal == libc::SIGKILL
                    && spec.limits.cpu.is_some()
                    && sup.interrupted.is_none()
                    && breaches.oom_kills == 0
                    && cpu_exhausted(spec, cpu_used))
            {
                (
                    EndReason::CpuLimit,
                    code,
                    Some("the CPU time limit was reached".into()),
                )
            } else if signal == libc::SIGXFSZ {
                (
                    EndReason::FileSizeLimit,
                    code,
                    Some("the file size limit was reached".into()),
                )
            } else if sup.interrupted.is_some() {
                (EndReason::Interrupted, code, Some("interrupted".into()))
            } else {
                (EndReason::Signal, code, None)
            }
        }
        None => {
            if breaches.oom_kills > 0 {
                (EndReason::MemoryLimit, 128 + libc::SIGKILL, memory_msg())
            } else if sup.interrupted.is_some() {
                (
                    EndReason::Interrupted,
                    128 + libc::SIGKILL,
                    Some("interrupted".into()),
                )
            } else {
                let code = if libc::WIFSIGNALED(init_status) {
                    128 + libc::WTERMSIG(init_status)
                } else {
                    libc::WEXITSTATUS(init_status)
                };
                (
                    EndReason::Signal,
                    code,
                    Some("the sandbox ended without a status from its init".into()),
                )
            }
        }
    }
}

/// A SIGKILL is the CPU limit's when the sandbox used at least the limit's
/// worth of CPU: RLIMIT_CPU's soft limit sends SIGXCPU first, and a process
/// that catches or ignores it is killed at the hard limit one second later.
fn cpu_exhausted(spec: &Spec, cpu_used: Duration) -> bool {
    spec.limits.cpu.is_some_and(|limit| cpu_used >= limit)
}

fn record_layers(
    e: &mut Enforcement,
    spec: &Spec,
    program: &seccomp::SeccompProgram,
    sup: &Supervision,
    rlimit_pids: bool,
    rlimit_memory: bool,
) {
    if spec.isolation.level == IsolationLevel::Namespaces {
        e.record(
            Layer::UserNamespace,
            true,
            format!(
                "uid {SANDBOX_UID} inside = uid {} outside",
                rustix::process::getuid().as_raw()
            ),
        );
        e.record(
            Layer::MountNamespace,
            true,
            "fresh tmpfs root via pivot_root; only declared paths bound",
        );
        e.record(
            Layer::PidNamespace,
            true,
            "own PID namespace with an init that reaps and forwards signals",
        );
        let net = match spec.network {
            NetworkMode::None => "loopback only, no socket families; IPC and UTS namespaces too".to_owned(),
            NetworkMode::Loopback => "loopback only; IPC and UTS namespaces too".to_owned(),
            NetworkMode::Proxy => format!(
                "loopback only; egress solely through cordon's proxy at 127.0.0.1:{} (TCP connect limited to it by Landlock where the ABI allows); IPC and UTS namespaces too",
                spec.proxy_port
            ),
        };
        e.record(Layer::NetworkNamespace, true, net);
    } else {
        e.record(
            Layer::UserNamespace,
            false,
            "process isolation level: no namespaces",
        );
        e.record(
            Layer::Filesystem,
            true,
            "Landlock is the filesystem boundary",
        );
    }
    e.record(
        Layer::Seccomp,
        true,
        format!(
            "{} BPF instructions; denied syscalls return EPERM; foreign ABIs kill",
            program.len()
        ),
    );
    match sup.landlock {
        Some((abi, fully)) if abi > 0 => {
            e.landlock_abi = abi;
            e.record(
                Layer::Landlock,
                true,
                format!(
                    "ABI {abi}{}",
                    if fully {
                        ""
                    } else {
                        " (partially: the kernel lacks some access rights)"
                    }
                ),
            );
        }
        _ => e.record(
            Layer::Landlock,
            false,
            "not available on this kernel (accepted by the profile)",
        ),
    }
    e.record(
        Layer::Capabilities,
        true,
        "all dropped (bounding, ambient, inheritable); no_new_privs",
    );
    let mut rl = vec!["core=1 (no dumps)".to_owned()];
    if spec.limits.cpu.is_some() {
        rl.push("cpu".into());
    }
    if spec.limits.open_files.is_some() {
        rl.push("nofile".into());
    }
    if spec.limits.file_size.is_some() {
        rl.push("fsize".into());
    }
    if spec.limits.pids.is_some() {
        rl.push(
            if rlimit_pids {
                "nproc (instead of cgroup pids)"
            } else {
                "nproc"
            }
            .into(),
        );
    }
    if spec.limits.memory.is_some() && rlimit_memory {
        rl.push("as (instead of cgroup memory)".into());
    }
    e.record(Layer::Rlimits, true, rl.join(", "));
    if let Some(w) = spec.limits.wall {
        e.record(
            Layer::Deadline,
            true,
            format!("{:.3}s wall clock", w.as_secs_f64()),
        );
    }
}
