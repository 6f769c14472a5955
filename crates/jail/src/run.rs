//! The supervisor: builds the sandbox around one command, relays its
//! output within limits, enforces the deadline, and reports the outcome.

use std::fs;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cgroup::{self, Cgroup};
use crate::child::{self, ChildContext, ChildFds};
use crate::error::{ChildReport, JailError, Result};
use crate::outcome::{Breaches, EndReason, Enforcement, Outcome, WaitStatus};
use crate::rootfs::Plan;
use crate::seccomp::{self, FilterOptions};
use crate::setup_cpu::SetupCpu;
use crate::spec::{IsolationLevel, Layer, NetworkMode, Spec};
use crate::supervise::{Supervision, Watched};
use crate::sys::{self, Forked};
use crate::verdict::{classify, record_layers};

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

pub(crate) const NS_FLAGS: libc::c_int = libc::CLONE_NEWUSER
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
/// signals, and its CPU: start them inside [`crate::with_every_cpu`], as
/// the supervisor does around [`Hooks::proxy_listener`]); an error kills
/// the sandbox and fails the run.
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

    /// Called [`Hooks::tick_after`] into the run, on the supervisor's
    /// thread, and again as long as [`Hooks::tick_again`] asks. An error
    /// ends the run like one from `started`.
    fn tick(&mut self) -> std::result::Result<(), String> {
        Ok(())
    }

    /// After a tick: how long until the next one, if another is wanted
    /// while the sandbox runs.
    fn tick_again(&self) -> Option<Duration> {
        None
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
    crate::test_switch::check().map_err(JailError::InvalidSpec)?;
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

    /// Let the janitor go. With the groups already gone it has nothing
    /// left to do: end it and reap it now, so a long-lived supervisor
    /// collects no zombies. Otherwise wake it to retry the removal and
    /// reap it on a later run.
    fn finish(self, groups_gone: bool) {
        let pid = self.pid;
        if groups_gone {
            // SAFETY: kill(2) on our own unreaped child: its pid cannot
            // have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            drop(self);
            let _ = sys::wait4(pid, 0);
        } else {
            drop(self);
            if let Ok(mut waiting) = LINGERING_JANITORS.lock() {
                waiting.push(pid);
            }
        }
        if let Ok(mut waiting) = LINGERING_JANITORS.lock() {
            waiting.retain(|&p| !matches!(sys::wait4(p, libc::WNOHANG), Ok((r, _, _)) if r == p));
        }
    }
}

/// Janitors still retrying to remove groups, reaped by later runs.
static LINGERING_JANITORS: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

/// One attempt at the spec's isolation level, in named phases: refuse
/// what the level cannot do, prepare the limits and the channels, launch
/// the sandbox, supervise it until it is gone, and conclude (reap it, read
/// its groups, say what happened).
fn run_level(
    spec: &Spec,
    sink: &mut dyn OutputSink,
    options: RunOptions,
    hooks: &mut dyn Hooks,
) -> Result<Outcome> {
    refuse_unsupported(spec)?;
    let started = Instant::now();
    // The run's processes start on this CPU and stay there; only the
    // command and the threads started for the run get every CPU
    // (crate::setup_cpu). Given back when this returns, on every path.
    let held = SetupCpu::hold();
    let setup = Setup::prepare(spec, options)?;
    let mut running = setup.launch(spec, held.as_ref())?;
    let seen = running.supervise(spec, sink, options, hooks, started)?;
    running.conclude(spec, seen, started)
}

/// Everything made before the sandbox exists.
struct Setup {
    enforcement: Enforcement,
    plan: Option<Plan>,
    identity: crate::identity::Identity,
    program: seccomp::SeccompProgram,
    groups: Groups,
    /// The supervisor's ends of the channels.
    parent: Ends,
    /// The sandbox's ends, closed here once it is cloned.
    child: Ends,
    landlock: LandlockWatch,
}

/// A sandbox that was let go, and what its supervisor keeps for it.
struct Running {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    enforcement: Enforcement,
    program: seccomp::SeccompProgram,
    groups: Groups,
    report: OwnedFd,
    status: OwnedFd,
    outputs: [OwnedFd; 2],
    control: OwnedFd,
    landlock: LandlockWatch,
}

/// What supervision saw.
struct Seen {
    sup: Supervision,
    hook_error: Option<String>,
    landlock_state: crate::LandlockLogState,
    landlock_denials: Vec<crate::LandlockDenial>,
    landlock_denials_total: u64,
}

impl Setup {
    /// The root's plan, the identity, the seccomp program, the groups and
    /// the channels; the kernel's Landlock log is subscribed before the
    /// sandbox exists, so no denial goes unseen.
    fn prepare(spec: &Spec, options: RunOptions) -> Result<Setup> {
        // The kernel answers the audit status query from a thread of its
        // own: ask first, read the answer once the rest is prepared.
        let landlock = LandlockWatch::ask(options);
        let level = spec.isolation.level;
        let mut enforcement = Enforcement {
            isolation: level,
            ..Enforcement::default()
        };
        let mut plan = match level {
            IsolationLevel::Namespaces => Some(Plan::new(spec)?),
            IsolationLevel::Process => None,
        };
        let identity = crate::identity::Identity::prepare(
            level,
            &plan.as_ref().map(Plan::user_bind_paths).unwrap_or_default(),
            !spec.staged.is_empty(),
        );
        if let Some(p) = plan.as_mut() {
            p.use_idmapped(identity.raw_fds());
        }
        record_identity(&mut enforcement, &identity);
        let program = seccomp::compile(FilterOptions {
            unix_sockets: spec.allow_unix_sockets,
            inet_sockets: spec.network != NetworkMode::None,
            notify: true,
            observe: spec.observe,
        })?;
        let groups = Groups::create(spec, &mut enforcement)?;
        let (parent, child) = open_channels()?;
        identity.give_pipes(&[child.stdout.as_fd(), child.stderr.as_fd()])?;
        Ok(Setup {
            enforcement,
            plan,
            identity,
            program,
            groups,
            parent,
            child,
            landlock: landlock.open(),
        })
    }

    /// Clone the sandbox, map its identity, put it in its groups and let
    /// it go. A sandbox that cannot be let go is killed and reaped (the
    /// groups go with `Groups`' drop).
    fn launch(mut self, spec: &Spec, held: Option<&SetupCpu>) -> Result<Running> {
        let level = spec.isolation.level;
        let cpus = held.map(SetupCpu::original);
        let (pid, pidfd, in_v2_group) = match clone_sandbox(level, self.groups.group.as_ref()) {
            Ok((Forked::Child, _)) => child::enter(ChildContext {
                spec,
                plan: self.plan.as_ref(),
                seccomp: &self.program,
                cgroup: self.groups.group.as_ref(),
                fds: self.child.child_fds(),
                rlimit_pids: self.groups.rlimit_pids,
                rlimit_memory: self.groups.rlimit_memory,
                landlock_optional: spec.accept_missing.contains(&Layer::Landlock),
                drop_groups: self.identity.drop_groups,
                session: false,
                landlock: None,
                exec_limits: Default::default(),
                cpus,
            }),
            Ok((Forked::Parent { pid, pidfd }, in_v2_group)) => (pid, pidfd, in_v2_group),
            Err(e) => return Err(e),
        };
        drop(self.child);
        let Ends {
            sync,
            report,
            status,
            stdout,
            stderr,
            control,
        } = self.parent;
        let released = release_child(
            pid,
            level,
            &self.identity,
            self.groups.group.as_ref(),
            in_v2_group,
            sync,
        );
        // The init has its copies of the idmapped trees.
        drop(self.identity);
        // The janitor is forked while the sandbox builds its root.
        let released = released.and_then(|()| self.groups.start_janitor());
        if let Err(e) = released {
            let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
            let _ = sys::wait4(pid, 0);
            return Err(e);
        }
        Ok(Running {
            pid,
            pidfd,
            enforcement: self.enforcement,
            program: self.program,
            groups: self.groups,
            report,
            status,
            outputs: [stdout, stderr],
            control,
            landlock: self.landlock,
        })
    }
}

impl Running {
    /// Start the hooks, then relay output, answer notifications and
    /// enforce the deadline until the sandbox is gone and drained.
    fn supervise(
        &mut self,
        spec: &Spec,
        sink: &mut dyn OutputSink,
        options: RunOptions,
        hooks: &mut dyn Hooks,
        started: Instant,
    ) -> Result<Seen> {
        let signals = options
            .forward_signals
            .then(ForwardedSignals::block)
            .transpose()?;
        let mut hook_error = start_hooks(hooks, spec, self.pid, &self.control);
        if hook_error.is_some() {
            self.kill();
        }
        let mut sup = Supervision::new(spec);
        let tick_at = hooks.tick_after().map(|d| started + d);
        sup.pump(
            &mut Watched {
                pidfd: &self.pidfd,
                outputs: [&self.outputs[0], &self.outputs[1]],
                report: &self.report,
                control: &self.control,
                signals: signals.as_ref().map(|s| &s.fd),
                landlock_log: self.landlock.log.as_mut(),
                started,
                deadline: spec.limits.wall.map(|d| started + d),
                level: spec.isolation.level,
                group: self.groups.group.as_ref(),
            },
            sink,
            tick_at.map(|at| (at, &mut *hooks)),
        );
        hook_error = hook_error.or(sup.hook_error.take());
        let (landlock_state, landlock_denials, landlock_denials_total) =
            self.landlock.finish(started);
        Ok(Seen {
            sup,
            hook_error,
            landlock_state,
            landlock_denials,
            landlock_denials_total,
        })
    }

    fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
    }

    /// Reap the sandbox, read and remove its groups, and say what
    /// happened and which layers were in force.
    fn conclude(mut self, spec: &Spec, seen: Seen, started: Instant) -> Result<Outcome> {
        let Seen {
            mut sup,
            hook_error,
            landlock_state,
            landlock_denials,
            landlock_denials_total,
        } = seen;
        let level = spec.isolation.level;
        let reaped = reap(self.pid, level, &self.status, self.groups.group.as_ref())?;
        let stats = self.groups.release();
        let wall_time = started.elapsed();
        let usage = Usage::of(&stats, &reaped.usage);
        record_layers(
            &mut self.enforcement,
            spec,
            &self.program,
            &sup,
            self.groups.rlimit_pids,
            self.groups.rlimit_memory,
        );
        let breaches = Breaches {
            oom_kills: stats.oom_kills,
            pids_limit_hits: stats.pids_limit_hits,
            output_truncated: sup.out[0].dropped > 0 || sup.out[1].dropped > 0,
            tmp_full: reaped.scratch_full & crate::child::SCRATCH_TMP_FULL != 0,
            shm_full: reaped.scratch_full & crate::child::SCRATCH_SHM_FULL != 0,
            file_at_size_limit: reaped.scratch_full & crate::child::SCRATCH_FILE_AT_LIMIT != 0,
        };
        if let Some(e) = hook_error {
            return Err(JailError::Hook(e));
        }
        let (reason, exit_code, message) = classify(
            spec,
            &sup,
            reaped.workload,
            &breaches,
            reaped.raw_status,
            usage.user_time + usage.system_time,
            self.groups.rlimit_memory,
        );
        if let (
            EndReason::SetupFailed,
            Some(ChildReport::Setup {
                layer,
                message,
                fix,
            }),
        ) = (reason, sup.setup_error.clone())
        {
            return Err(JailError::Setup {
                layer,
                message,
                fix,
            });
        }
        Ok(Outcome {
            exit_code,
            reason,
            status: reaped.workload,
            message,
            wall_time,
            user_time: usage.user_time,
            system_time: usage.system_time,
            peak_memory: usage.peak_memory,
            peak_memory_source: usage.peak_memory_source,
            peak_tasks: stats.peak_tasks,
            stdout: sup.out[0],
            stderr: sup.out[1],
            breaches,
            limits: spec.limits.clone(),
            enforcement: self.enforcement,
            denied_calls: std::mem::take(&mut sup.denied),
            denied_calls_total: sup.denied_total,
            landlock_denials,
            landlock_denials_total,
            landlock_log: landlock_state,
            observed_unreadable: sup.observations.unreadable,
            observed_processes: sup.observations.pids.len() as u64,
            observed_peak_address_space: sup.observations.peak_address_space,
            observed_most_threads: sup.observations.most_threads,
            observed: std::mem::take(&mut sup.observations).into_paths(),
        })
    }
}

/// Refuse a spec the isolation level cannot honour.
pub(crate) fn refuse_unsupported(spec: &Spec) -> Result<()> {
    if spec.network == NetworkMode::Proxy && spec.isolation.level == IsolationLevel::Process {
        return Err(JailError::setup(
            Layer::NetworkNamespace,
            "egress through the proxy needs a network namespace, which the process isolation level does not have",
            Some("allow user namespaces on this host, or run without network access"),
        ));
    }
    Ok(())
}

/// The sandbox's control groups (if any could be made), the janitor that
/// removes them should this process die, and which limits fall back to
/// rlimits.
pub(crate) struct Groups {
    pub(crate) group: Option<Cgroup>,
    janitor: Option<Janitor>,
    pub(crate) rlimit_memory: bool,
    pub(crate) rlimit_pids: bool,
}

impl Groups {
    /// Create the groups and record the cgroup layer's state. Without a
    /// janitor yet: a one-shot run starts it ([`Groups::start_janitor`])
    /// once the sandbox builds its root, in parallel; a session spawner
    /// has one for all its sandboxes.
    pub(crate) fn create(spec: &Spec, enforcement: &mut Enforcement) -> Result<Groups> {
        let support = cgroup::probe();
        enforcement.cgroup = support.label().to_owned();
        let name = format!("cordon-{}-{:x}", std::process::id(), random_u64());
        let group = match Cgroup::create(&support, &name, spec.limits.memory, spec.limits.pids) {
            Ok(g) => {
                enforcement.record(Layer::Cgroup, support.complete(), cgroup_detail(&support));
                if let Some(brief) = cgroup_brief(&support) {
                    enforcement.brief_for_last(brief);
                }
                Some(g)
            }
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
        Ok(Groups {
            rlimit_memory: group.is_none() || support.memory.is_none(),
            rlimit_pids: group.is_none() || support.pids.is_none(),
            group,
            janitor: None,
        })
    }

    /// Start the process that removes the groups should this supervisor
    /// die. Until it runs, groups a dead supervisor left are removed by
    /// the next supervisor's sweep (`cgroup::sweep_stale`).
    fn start_janitor(&mut self) -> Result<()> {
        if let (Some(g), None) = (&self.group, &self.janitor) {
            self.janitor = Some(Janitor::start(g.dirs().to_vec())?);
        }
        Ok(())
    }

    /// Read the final counters, remove the groups and let the janitor go.
    /// Idempotent: later calls find nothing left.
    pub(crate) fn release(&mut self) -> cgroup::Stats {
        let mut group = self.group.take();
        let stats = group.as_ref().map(Cgroup::stats).unwrap_or_default();
        let gone = group.as_mut().is_none_or(Cgroup::remove);
        if let Some(j) = self.janitor.take() {
            j.finish(gone);
        }
        stats
    }
}

impl Drop for Groups {
    /// A run that fails after the groups were made still removes them.
    fn drop(&mut self) {
        self.release();
    }
}

/// The controllers in use and, when some are missing, why.
fn cgroup_detail(support: &cgroup::Support) -> String {
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
    let in_use = detail.join(" ");
    if support.complete() {
        return in_use;
    }
    let why = support.problems.join("; ");
    if in_use.is_empty() {
        format!("no usable controller, the limits fall back to rlimits ({why})")
    } else {
        format!("{in_use}; missing controllers fall back to rlimits ({why})")
    }
}

/// The cgroup layer's warning when a controller is missing, in one line:
/// which limits rlimits hold instead and where to read why (the
/// detail's list of every hierarchy tried is long, and a rootless user
/// on a host without delegation would read it on every run).
/// None when the layer is complete.
fn cgroup_brief(support: &cgroup::Support) -> Option<String> {
    let instead = match (support.memory.is_some(), support.pids.is_some()) {
        (false, false) => {
            "no cgroup controller is usable by this user, so rlimits hold memory (per \
             process, not for the whole sandbox) and processes"
        }
        (true, false) => "no pids controller is usable, so RLIMIT_NPROC holds processes",
        (false, true) => {
            "no memory controller is usable, so RLIMIT_AS holds memory (per process, not for \
             the whole sandbox)"
        }
        (true, true) => return None,
    };
    Some(format!(
        "{instead}; `cordon doctor` says why and how to delegate one"
    ))
}

/// One side's ends of the channels between the supervisor and the
/// sandbox (each pipe's end the side uses, one socket of the pair).
pub(crate) struct Ends {
    /// One byte on it lets the child go.
    pub(crate) sync: OwnedFd,
    /// JSON lines from the init and the workload.
    pub(crate) report: OwnedFd,
    /// The workload's wait status and scratch state, from the init.
    pub(crate) status: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// Carries the proxy listener and the seccomp listener from the
    /// sandbox; the kernel tells the supervisor's end who sent each
    /// (SO_PASSCRED).
    pub(crate) control: OwnedFd,
}

impl Ends {
    /// The sandbox's ends as the child sees them.
    pub(crate) fn child_fds(&self) -> ChildFds {
        ChildFds {
            sync: self.sync.as_raw_fd(),
            report: self.report.as_raw_fd(),
            status: self.status.as_raw_fd(),
            stdout: self.stdout.as_raw_fd(),
            stderr: self.stderr.as_raw_fd(),
            control: Some(self.control.as_raw_fd()),
        }
    }
}

/// The supervisor's ends and the sandbox's (closed in the supervisor once
/// it has cloned).
pub(crate) fn open_channels() -> Result<(Ends, Ends)> {
    let [sync, report, status, stdout, stderr] = [(); 5].map(|()| pipe());
    let (sync_rd, sync_wr) = sync?;
    let (report_rd, report_wr) = report?;
    let (status_rd, status_wr) = status?;
    let (out_rd, out_wr) = stdout?;
    let (err_rd, err_wr) = stderr?;
    let (control, control_child) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| JailError::io("socketpair", e.into()))?;
    rustix::net::sockopt::set_socket_passcred(&control, true)
        .map_err(|e| JailError::io("SO_PASSCRED", e.into()))?;
    let parent = Ends {
        sync: sync_wr,
        report: report_rd,
        status: status_rd,
        stdout: out_rd,
        stderr: err_rd,
        control,
    };
    let child = Ends {
        sync: sync_rd,
        report: report_wr,
        status: status_wr,
        stdout: out_wr,
        stderr: err_wr,
        control: control_child,
    };
    Ok((parent, child))
}

/// The kernel's Landlock audit log, when the run observes it.
struct LandlockWatch {
    log: Option<crate::kaudit::LandlockLog>,
    /// Why it is not observed.
    unobserved: Option<String>,
}

/// The Landlock log while its status query is under way.
enum LandlockAsked {
    NotRequested,
    Asked(std::result::Result<crate::kaudit::StatusAsked, String>),
}

impl LandlockWatch {
    fn ask(options: RunOptions) -> LandlockAsked {
        if !options.observe_landlock {
            return LandlockAsked::NotRequested;
        }
        LandlockAsked::Asked(crate::kaudit::LandlockLog::ask())
    }
}

impl LandlockAsked {
    fn open(self) -> LandlockWatch {
        let asked = match self {
            LandlockAsked::NotRequested => {
                return LandlockWatch {
                    log: None,
                    unobserved: Some("not requested".to_string()),
                }
            }
            LandlockAsked::Asked(asked) => asked,
        };
        match crate::kaudit::LandlockLog::open_asked(asked) {
            Ok(log) => LandlockWatch {
                log: Some(log),
                unobserved: None,
            },
            Err(why) => LandlockWatch {
                log: None,
                unobserved: Some(why),
            },
        }
    }
}

impl LandlockWatch {
    /// Read the last denials; the log is closed afterwards.
    fn finish(
        &mut self,
        started: Instant,
    ) -> (crate::LandlockLogState, Vec<crate::LandlockDenial>, u64) {
        match self.log.take() {
            Some(log) => log.finish(started, LANDLOCK_LOG_GRACE),
            None => (
                crate::LandlockLogState {
                    observed: false,
                    detail: self.unobserved.take().unwrap_or_default(),
                    kernel_count: None,
                },
                Vec::new(),
                0,
            ),
        }
    }
}

/// Clone the sandbox's first process into its namespaces (none at the
/// process level), in its cgroup v2 group from the start where it has one
/// and the kernel allows (the `bool`: it need not be moved there).
pub(crate) fn clone_sandbox(
    level: IsolationLevel,
    group: Option<&Cgroup>,
) -> Result<(Forked, bool)> {
    let flags = match level {
        IsolationLevel::Namespaces => NS_FLAGS,
        IsolationLevel::Process => 0,
    };
    if let Some(dir) = group.and_then(Cgroup::open_v2_dir) {
        // Any failure here is met again, and reported, by the plain clone
        // and the move into the group below.
        if let Ok(forked) = sys::clone_sandbox_into(flags, dir.as_fd()) {
            return Ok((forked, true));
        }
    }
    let forked = sys::clone_sandbox(flags).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::ENOSPC) | Some(libc::EINVAL) | Some(libc::EUSERS)
            if level == IsolationLevel::Namespaces =>
        {
            JailError::Setup {
                layer: Layer::UserNamespace,
                message: format!("cannot create user namespaces on this host: {e}"),
                fix: Some(userns_fix()),
            }
        }
        _ => JailError::io("clone", e),
    })?;
    Ok((forked, false))
}

/// Identity mapping and cgroup membership (the v2 group unless the child
/// was created in it: `in_v2_group`), then the go byte.
pub(crate) fn release_child(
    pid: libc::pid_t,
    level: IsolationLevel,
    identity: &crate::identity::Identity,
    group: Option<&Cgroup>,
    in_v2_group: bool,
    sync: OwnedFd,
) -> Result<()> {
    if level == IsolationLevel::Namespaces {
        identity.write_maps(pid)?;
    }
    if !in_v2_group {
        prepare_child(pid, group)?;
    }
    sys::write_all_fd(sync.as_raw_fd(), b"g").map_err(|e| JailError::io("start sandbox", e))
}

/// The signals `cordon run` forwards, blocked and read from a signalfd;
/// unblocked again when dropped.
struct ForwardedSignals {
    fd: OwnedFd,
    set: libc::sigset_t,
}

impl ForwardedSignals {
    /// Block them before any hook starts a thread, so that threads inherit
    /// the mask and the signalfd sees them all.
    fn block() -> Result<ForwardedSignals> {
        let set = sys::block_signals(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT])
            .map_err(|e| JailError::io("block signals", e))?;
        let fd = sys::signalfd(&set).map_err(|e| JailError::io("signalfd", e))?;
        Ok(ForwardedSignals { fd, set })
    }
}

impl Drop for ForwardedSignals {
    fn drop(&mut self) {
        // SAFETY: restoring the mask we changed, with a valid sigset_t.
        unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &self.set, std::ptr::null_mut()) };
    }
}

/// Tell the hooks the sandbox runs and hand them the proxy listener,
/// which comes before the workload starts; if the helper fails first, the
/// socket closes and its report explains why. Returns the first error.
fn start_hooks(
    hooks: &mut dyn Hooks,
    spec: &Spec,
    pid: libc::pid_t,
    control: &OwnedFd,
) -> Option<String> {
    if let Err(e) = hooks.started(&Started {
        pid,
        at: std::time::SystemTime::now(),
    }) {
        return Some(e);
    }
    if spec.network != NetworkMode::Proxy {
        return None;
    }
    match crate::fdpass::recv_fd(control) {
        // The proxy's threads may use every CPU (crate::setup_cpu).
        Ok(Some(fd)) => crate::setup_cpu::with_every_cpu(|| {
            hooks.proxy_listener(std::net::TcpListener::from(fd))
        })
        .err()
        .map(|e| format!("cannot start the egress proxy: {e}")),
        Ok(None) => None,
        Err(e) => Some(format!("cannot receive the proxy listener: {e}")),
    }
}

/// What is known once the sandbox's first process is reaped.
struct Reaped {
    /// The first process's own status (the init's at the namespaces level).
    raw_status: i32,
    usage: libc::rusage,
    /// The workload's status, as the init reported it.
    workload: Option<WaitStatus>,
    /// `SCRATCH_*` bits: which scratch space was full at the end.
    scratch_full: u32,
}

/// Reap the sandbox and learn the workload's status; at the process
/// level, kill whatever it left behind.
fn reap(
    pid: libc::pid_t,
    level: IsolationLevel,
    status: &OwnedFd,
    group: Option<&Cgroup>,
) -> Result<Reaped> {
    let (_, raw_status, usage) =
        sys::wait4(pid, 0).map_err(|e| JailError::io("wait for sandbox", e))?;
    let mut scratch_full = 0u32;
    let workload = match level {
        IsolationLevel::Namespaces => {
            let mut buf = [0u8; 8];
            match rustix::io::read(status, &mut buf) {
                Ok(8) => {
                    scratch_full = u32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
                    Some(decode_status(i32::from_ne_bytes([
                        buf[0], buf[1], buf[2], buf[3],
                    ])))
                }
                _ => None,
            }
        }
        IsolationLevel::Process => {
            // Without a PID namespace, stragglers are found through the cgroup.
            if let Some(g) = group {
                for dir in g.dirs() {
                    let _ = fs::write(dir.join("cgroup.kill"), "1");
                }
            }
            // SAFETY: kill(2) on the workload's process group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            Some(decode_status(raw_status))
        }
    };
    Ok(Reaped {
        raw_status,
        usage,
        workload,
        scratch_full,
    })
}

/// CPU time and peak memory: the cgroup's counters where it has them,
/// else the kernel's rusage of the reaped process tree.
struct Usage {
    user_time: Duration,
    system_time: Duration,
    peak_memory: Option<u64>,
    peak_memory_source: Option<String>,
}

impl Usage {
    fn of(stats: &cgroup::Stats, usage: &libc::rusage) -> Usage {
        let tv = |t: libc::timeval| {
            Duration::new(t.tv_sec as u64, (t.tv_usec as u32).saturating_mul(1000))
        };
        let (peak_memory, source) = match stats.peak_memory {
            Some(p) => (p, "cgroup"),
            None => (usage.ru_maxrss as u64 * 1024, "rusage_max_process"),
        };
        Usage {
            user_time: stats
                .user_usec
                .map_or_else(|| tv(usage.ru_utime), Duration::from_micros),
            system_time: stats
                .system_usec
                .map_or_else(|| tv(usage.ru_stime), Duration::from_micros),
            peak_memory: Some(peak_memory),
            peak_memory_source: Some(source.to_owned()),
        }
    }
}

pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::NONBLOCK);
    u64::from_ne_bytes(b)
}

/// The identity in force, in the report; a sandbox that is still host
/// root, or keeps the caller's groups, is a layer not fully enforced.
pub(crate) fn record_identity(enforcement: &mut Enforcement, identity: &crate::identity::Identity) {
    let r = &identity.report;
    enforcement.identity = r.clone();
    if !r.complete() {
        enforcement.record(Layer::UserNamespace, false, r.detail.clone());
    }
}

fn prepare_child(pid: libc::pid_t, group: Option<&Cgroup>) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::Support;
    use crate::seccomp::bpf::{Asm, Cmp, NR};

    /// The cgroup layer's detail names the controllers in use and why
    /// the others are missing, and reads as a sentence when none is
    /// usable (a rootless caller on a host without delegation).
    #[test]
    fn the_cgroup_detail_says_what_is_used_and_why_the_rest_is_not() {
        let problem = "cgroup v1 pids hierarchy /sys/fs/cgroup/pids is not writable by uid 1001";
        let none = Support {
            problems: vec![problem.into()],
            ..Support::default()
        };
        assert_eq!(
            cgroup_detail(&none),
            format!("no usable controller, the limits fall back to rlimits ({problem})")
        );
        let memory_only = Support {
            memory: Some(crate::cgroup::Place {
                version: crate::cgroup::Version::V2,
                parent: "/sys/fs/cgroup/user".into(),
            }),
            problems: vec![problem.into()],
            ..Support::default()
        };
        assert_eq!(
            cgroup_detail(&memory_only),
            format!("memory:v2; missing controllers fall back to rlimits ({problem})")
        );
        let mut both = memory_only.clone();
        both.pids = both.memory.clone();
        both.problems.clear();
        assert_eq!(cgroup_detail(&both), "memory:v2 pids:v2");
        assert_eq!(cgroup_brief(&both), None);
        assert_eq!(
            cgroup_brief(&none).as_deref().unwrap_or_default(),
            "no cgroup controller is usable by this user, so rlimits hold memory (per process, \
             not for the whole sandbox) and processes; `cordon doctor` says why and how to \
             delegate one"
        );
        assert!(
            cgroup_brief(&memory_only)
                .is_some_and(|b| b
                    .starts_with("no pids controller is usable, so RLIMIT_NPROC holds processes;")),
            "{:?}",
            cgroup_brief(&memory_only)
        );
    }

    /// Refuse clone3 with ENOSYS on this thread and its children, as a
    /// container runtime's seccomp filter does.
    fn refuse_clone3() -> std::io::Result<()> {
        let mut asm = Asm::default();
        let allow = asm.label();
        asm.load(NR);
        asm.jump_unless(Cmp::Eq, libc::SYS_clone3 as u32, allow);
        asm.ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        asm.bind(allow);
        asm.ret(libc::SECCOMP_RET_ALLOW);
        let program = asm.finish().map_err(std::io::Error::other)?;
        rustix::thread::set_no_new_privs(true)?;
        sys::seccomp_install(&program, false).map(drop)
    }

    /// In a helper process (with clone3 refused when `refused`), clone a
    /// process-level sandbox for `group` and release it the way a run
    /// does. The helper's exit code: bit 0, the sandbox was created in the
    /// group; bit 1, it is in the group once released; 100 and up, a
    /// step failed.
    fn clone_and_release(group: &Cgroup, group_line: &str, refused: bool) -> i32 {
        let Some(helper) = sys::fork().unwrap_or_else(|e| panic!("fork: {e}")) else {
            if refused && refuse_clone3().is_err() {
                sys::exit_now(100)
            }
            let (Ok((go_rd, go_wr)), Ok((hold_rd, hold_wr))) =
                (rustix::pipe::pipe(), rustix::pipe::pipe())
            else {
                sys::exit_now(101)
            };
            let (forked, in_v2_group) = match clone_sandbox(IsolationLevel::Process, Some(group)) {
                Ok(f) => f,
                Err(_) => sys::exit_now(102),
            };
            let pid = match forked {
                Forked::Child => {
                    // The sandbox: wait for the go byte, then until the
                    // helper has looked at it.
                    drop((go_wr, hold_wr));
                    let mut b = [0u8; 1];
                    let _ = rustix::io::read(&go_rd, &mut b);
                    let _ = rustix::io::read(&hold_rd, &mut b);
                    sys::exit_now(0)
                }
                Forked::Parent { pid, .. } => pid,
            };
            drop((go_rd, hold_rd));
            let identity = crate::identity::Identity::prepare(IsolationLevel::Process, &[], false);
            let released = release_child(
                pid,
                IsolationLevel::Process,
                &identity,
                Some(group),
                in_v2_group,
                go_wr,
            );
            let line = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            drop(hold_wr);
            let _ = sys::wait4(pid, 0);
            if released.is_err() {
                sys::exit_now(103)
            }
            let in_group = line.lines().any(|l| l == group_line);
            sys::exit_now(i32::from(in_v2_group) | i32::from(in_group) << 1)
        };
        let (_, status, _) = sys::wait4(helper, 0).unwrap_or_else(|e| panic!("wait: {e}"));
        assert!(libc::WIFEXITED(status), "helper status {status:#x}");
        libc::WEXITSTATUS(status)
    }

    /// Where clone3 is refused (a container runtime's seccomp filter), the
    /// sandbox is cloned and then moved into its cgroup v2 group: it is in
    /// the group before it is let go, as one created there is. The
    /// control, without the filter, shows the filter is what made the
    /// difference (the sandbox was created in the group).
    #[test]
    fn a_refused_clone3_falls_back_to_moving_the_sandbox_into_its_v2_group() {
        let Some(mount) = crate::cgroup::writable_cgroup2_or_skip() else {
            return;
        };
        let parent = mount.join(format!("cordon-clone3-fallback-{}", std::process::id()));
        fs::create_dir(&parent).unwrap_or_else(|e| panic!("{e}"));
        let support = Support::v2_accounting_only(parent.clone());
        let mut group =
            Cgroup::create(&support, "sandbox", None, None).unwrap_or_else(|e| panic!("{e}"));
        let line = format!(
            "0::/{}/sandbox",
            parent
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
        );
        let created_in = clone_and_release(&group, &line, false);
        let moved_in = clone_and_release(&group, &line, true);
        group.remove();
        let _ = fs::remove_dir(&parent);
        assert_eq!(created_in, 0b11, "control: created in the group, and in it");
        assert_eq!(moved_in, 0b10, "clone3 refused: moved into the group");
    }
}
