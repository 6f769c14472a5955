//! The init of a session: instead of running one command, PID 1 of the
//! sandbox waits for exec orders on its control socket and starts each
//! one under a leader of its own.
//!
//! ```text
//! init (PID 1 of the sandbox) ── order ──> leader (PID 1 of a new PID namespace)
//!                                              └─ workload (the command: rlimits,
//!                                                 Landlock, caps, seccomp, exec)
//! ```
//!
//! The leader reaps, forwards signals to the workload's process group, and
//! when the workload ends writes its status and usage as the last line of
//! the exec's report pipe and exits: the kernel then kills whatever the
//! command left in its PID namespace. Killing the leader (a timeout) kills
//! the exec's whole tree, daemons included, and nothing else.
//!
//! Both run between `clone` and `execve` on a copy of the single-threaded
//! spawner, like the rest of crate::child.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};

use crate::child::{report, workload_main, ChildContext, ChildFds, FORWARDED};
use crate::error::ChildReport;
use crate::session::{recv_message, send_message, ExecLimits, InitOrder, InitReply};
use crate::session_ready::Ready;
use crate::setup_cpu::SetupCpu;
use crate::spec::StdinMode;
use crate::sys::{self, Forked};
use rustix::thread::CpuSet;

/// The descriptors an exec order carries, in this order.
const EXEC_FDS: usize = 4;

/// Serve exec orders until the control socket closes (the engine is gone
/// or ended the session); leaving then kills everything in the sandbox.
///
/// The loop never waits on one order: an exec whose leader cannot be
/// forked yet (the process limit, or namespaces the kernel has not yet
/// counted off) is held and tried again every millisecond, with the
/// orders that came after it, while signals (a timeout's kill) are sent
/// at once.
pub(crate) fn serve(ctx: &ChildContext<'_>) -> ! {
    let Some(control) = ctx.fds.control else {
        sys::exit_now(125)
    };
    let Ok(set) = sys::block_signals(&[libc::SIGCHLD]) else {
        sys::exit_now(125)
    };
    let Ok(sigfd) = sys::signalfd(&set) else {
        sys::exit_now(125)
    };
    // The root is built: closing the report pipe tells the spawner so.
    // SAFETY: closing our own descriptors, not used again.
    unsafe {
        libc::close(ctx.fds.report);
        libc::close(ctx.fds.status);
    }
    // SAFETY: the control socket stays open for this process's life.
    let control = unsafe { BorrowedFd::borrow_raw(control) };
    // This process and the leaders it forks stay on the CPU it runs on,
    // so that an exec's hand-overs do not wake an idle one; each command
    // gets every CPU back before its execve (crate::setup_cpu). Held for
    // the init's life: this function does not return.
    let held = SetupCpu::hold();
    let mut init = Init::new(ctx, control, held.as_ref().map(|h| *h.original()));
    let retry = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: RETRY_EVERY.as_nanos() as _,
    };
    loop {
        let timeout = (!init.held.is_empty()).then_some(&retry);
        let Some(Woken {
            order_ready,
            child_ready,
            let_go,
        }) = wait(control, sigfd.as_fd(), &init.leaders, timeout)
        else {
            sys::exit_now(125)
        };
        init.let_go(&let_go);
        if child_ready {
            while sys::read_signalfd(sigfd.as_raw_fd()).is_some() {}
            init.reap();
        }
        if order_ready {
            match recv_message::<InitOrder>(control) {
                Ok(Some((order, fds))) => init.receive(order, fds),
                Ok(None) => sys::exit_now(0),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                // A malformed order (too large, not JSON) is refused
                // without an id to answer to; the engine never sends one.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
                Err(_) => sys::exit_now(0),
            }
        }
        init.carry_out_held();
        if child_ready || !let_go.is_empty() {
            init.start_next_ahead();
        }
    }
}

/// What woke the init.
struct Woken {
    order_ready: bool,
    child_ready: bool,
    /// The execs whose leaders hung up their line.
    let_go: Vec<u64>,
}

/// Wait for an order, a child's end, or a running exec's line to hang up
/// (`None`: poll itself failed).
fn wait(
    control: BorrowedFd<'_>,
    sigfd: BorrowedFd<'_>,
    leaders: &HashMap<u64, Leader>,
    timeout: Option<&rustix::fs::Timespec>,
) -> Option<Woken> {
    use rustix::event::{PollFd, PollFlags};
    let (ids, lines): (Vec<u64>, Vec<&OwnedFd>) = leaders
        .iter()
        .filter_map(|(&id, leader)| Some((id, leader.line.as_ref()?)))
        .unzip();
    let mut fds = vec![
        PollFd::new(&control, PollFlags::IN),
        PollFd::new(&sigfd, PollFlags::IN),
    ];
    // Only a hangup counts (poll reports it unasked): nobody writes on a
    // line, and whatever might would neither wake the init nor pass for
    // the end of an exec.
    fds.extend(
        lines
            .into_iter()
            .map(|line| PollFd::new(line, PollFlags::empty())),
    );
    match rustix::event::poll(&mut fds, timeout) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(_) => return None,
    }
    let woke = |i: usize| fds.get(i).is_some_and(|f| !f.revents().is_empty());
    let hung_up = |i: usize| {
        fds.get(i)
            .is_some_and(|f| f.revents().intersects(PollFlags::HUP | PollFlags::ERR))
    };
    Some(Woken {
        order_ready: woke(0),
        child_ready: woke(1),
        let_go: ids
            .iter()
            .enumerate()
            .filter(|&(i, _)| hung_up(i + 2))
            .map(|(_, id)| *id)
            .collect(),
    })
}

/// How often a held exec's leader is tried again.
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// How long an exec waits for the kernel to count off the PID namespaces
/// of commands that have ended (`session::LINGERING_PID_NAMESPACES`).
const NAMESPACE_LAG: std::time::Duration = std::time::Duration::from_secs(1);

/// An exec order, checked: its command and its descriptors (stdin,
/// stdout, stderr, report).
struct ExecOrder {
    id: u64,
    command: ExecCommand,
    fds: [OwnedFd; EXEC_FDS],
}

/// How an exec's start went.
enum Attempt {
    /// Its leader runs, with this pid, and holds the other end of this
    /// line until the exec is over.
    Started(libc::pid_t, OwnedFd),
    /// Its leader could not be forked: the order back, and why.
    NotForked(ExecOrder, std::io::Error),
}

/// An order that waits: an exec whose leader could not be forked yet
/// (since its first try), or an order that came after one.
enum Held {
    Exec(ExecOrder, std::time::Instant),
    Order(InitOrder, Vec<OwnedFd>),
}

/// An exec's leader, until it is reaped.
struct Leader {
    pid: libc::pid_t,
    /// The exec's line to it while the exec runs. The leader hangs up
    /// once the exec's command and everything it started are gone, a
    /// moment before its exit is over: the next exec is started ahead from
    /// then on. A leader that exits with processes left (killed, or a
    /// command that left daemons) hangs up as it exits, while the kernel
    /// still kills those; a pair that does not fit beside them then fails
    /// to start, and the next order starts its exec itself, as at the
    /// limit.
    line: Option<OwnedFd>,
}

/// The init's state between orders.
struct Init<'c, 'a> {
    ctx: &'c ChildContext<'a>,
    control: BorrowedFd<'c>,
    /// What execs get; a claim from the pool changes the binds and limits.
    spec: crate::spec::Spec,
    plan: Option<crate::rootfs::Plan>,
    /// Every exec's Landlock ruleset, built once here (and again when a
    /// claim changes the binds) instead of once per exec.
    landlock: Option<crate::landlock_rules::Prepared>,
    /// The execs' leaders not yet reaped, by exec id.
    leaders: HashMap<u64, Leader>,
    /// The next exec, started ahead once the session has run more than
    /// one command, and the first of a pooled sandbox (crate::session_ready).
    ready: Option<Ready>,
    execs: u64,
    /// A waiting exec that ended without an order (it could not be set
    /// up, e.g. at the process limit) is not started again before the
    /// next order: no loop of forks.
    ahead_failed: bool,
    /// Orders in the order they came, the first an exec that waits.
    held: VecDeque<Held>,
    /// The CPUs each command gets back, with this process held on one.
    cpus: Option<CpuSet>,
}

impl<'c, 'a> Init<'c, 'a> {
    fn new(ctx: &'c ChildContext<'a>, control: BorrowedFd<'c>, cpus: Option<CpuSet>) -> Self {
        let spec = ctx.spec.clone();
        let plan = ctx.plan.cloned();
        hold_process_limit(ctx, &spec);
        let landlock = prepare_landlock(ctx, &spec, plan.as_ref());
        Init {
            ctx,
            control,
            spec,
            plan,
            landlock,
            leaders: HashMap::new(),
            ready: None,
            execs: 0,
            ahead_failed: false,
            held: VecDeque::new(),
            cpus,
        }
    }

    /// The context an exec gets now.
    fn current(&self) -> ChildContext<'_> {
        current(
            self.ctx,
            &self.spec,
            self.plan.as_ref(),
            self.landlock.as_ref(),
            self.cpus.as_ref(),
        )
    }

    fn reply(&self, reply: &InitReply) {
        let _ = send_message(self.control, reply, &[]);
    }

    /// Reap the leaders that have ended.
    fn reap(&mut self) {
        self.ahead_failed |= reap_leaders(&mut self.leaders, &mut self.ready);
    }

    /// The execs whose leaders hung up are over.
    fn let_go(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(leader) = self.leaders.get_mut(id) {
                leader.line = None;
            }
        }
    }

    /// Whether no exec runs: every leader not yet reaped has let go.
    fn none_running(&self) -> bool {
        self.leaders.values().all(|leader| leader.line.is_none())
    }

    /// A session that has run more than one command gets its next one
    /// started ahead, once none of its commands runs or waits: a waiting
    /// exec holds two processes of the session's limit, which must never
    /// be taken from a command. Leaders that let go of their exec but have
    /// not been reaped yet still count against the limit: the pair waits
    /// for their reaping when it would not fit beside them.
    fn start_next_ahead(&mut self) {
        if self.execs >= 2
            && self.ready.is_none()
            && self.none_running()
            && self.held.is_empty()
            && !self.ahead_failed
            && self.room_for_a_pair()
        {
            self.ready = Ready::start(&self.current());
        }
    }

    /// Whether the session's process limit leaves room for a waiting pair
    /// beside this init and the leaders not yet reaped.
    fn room_for_a_pair(&self) -> bool {
        let taken = 1 + self.leaders.len() as u64;
        self.spec.limits.pids.is_none_or(|limit| taken + 2 <= limit)
    }

    /// An order from the engine: signals and the root go at once, the
    /// rest in the order they came.
    fn receive(&mut self, order: InitOrder, fds: Vec<OwnedFd>) {
        match order {
            InitOrder::Signal { id, signal } => {
                if let Some(&Leader { pid, .. }) = self.leaders.get(&id) {
                    // SAFETY: kill(2) on our own unreaped child (its pid
                    // cannot have been reused); SIGKILL ends its PID
                    // namespace.
                    unsafe { libc::kill(pid, signal) };
                }
            }
            InitOrder::OpenRoot { id } => send_root(self.control, id),
            order if !self.held.is_empty() => self.held.push_back(Held::Order(order, fds)),
            order => {
                self.carry_out(order, fds);
            }
        }
    }

    /// Try the held orders again, in order, until one must still wait.
    fn carry_out_held(&mut self) {
        while let Some(next) = self.held.pop_front() {
            let done = match next {
                Held::Exec(exec, since) => self.try_exec(exec, since),
                Held::Order(order, fds) => self.carry_out(order, fds),
            };
            if !done {
                break;
            }
        }
    }

    /// Carry out an order; false when it is an exec that must wait (it
    /// is then first in `held`).
    fn carry_out(&mut self, order: InitOrder, fds: Vec<OwnedFd>) -> bool {
        match order {
            InitOrder::Exec {
                id,
                argv,
                env,
                cwd,
                limits,
            } => {
                let command = ExecCommand {
                    argv,
                    env,
                    cwd,
                    limits,
                };
                match checked(id, command, fds) {
                    Ok(exec) => return self.try_exec(exec, std::time::Instant::now()),
                    Err(Refusal { message, busy }) => {
                        self.execs += 1;
                        self.reply(&InitReply::Refused { id, message, busy });
                    }
                }
            }
            InitOrder::Configure { id, config } => self.configure(id, config),
            InitOrder::StartAhead { id } => {
                if self.ready.is_none() {
                    self.ready = Ready::start(&self.current());
                }
                self.reply(&InitReply::Configured { id });
            }
            InitOrder::Signal { .. } | InitOrder::OpenRoot { .. } => self.receive(order, fds),
        }
        true
    }

    /// Later execs follow `config`'s binds and limits.
    fn configure(&mut self, id: u64, config: crate::session::LateConfig) {
        self.spec.limits = config.limits;
        hold_process_limit(self.ctx, &self.spec);
        if let Some(p) = self.plan.as_mut() {
            p.set_user_binds(config.binds);
            p.set_file_paths(config.files);
        }
        // The old ruleset goes first, so that the new one can take a free
        // descriptor number.
        drop(self.landlock.take());
        self.landlock = prepare_landlock(self.ctx, &self.spec, self.plan.as_ref());
        self.reply(&InitReply::Configured { id });
        // A waiting exec was set up with the old settings: a session of
        // several commands gets one with the new; a claimed pooled sandbox
        // starts its first on order.
        if let Some(old) = self.ready.take() {
            old.discard();
            if self.execs >= 2 && self.none_running() && self.room_for_a_pair() {
                self.ready = Ready::start(&self.current());
            }
        }
    }

    /// Start an exec, first tried at `since`; false when its leader
    /// cannot be forked yet and it is held to be tried again.
    fn try_exec(&mut self, exec: ExecOrder, since: std::time::Instant) -> bool {
        let id = exec.id;
        let reply = match self.start_exec(exec) {
            Attempt::Started(pid, line) => {
                self.leaders.insert(
                    id,
                    Leader {
                        pid,
                        line: Some(line),
                    },
                );
                InitReply::Started { id, pid }
            }
            Attempt::NotForked(exec, e) if may_wait(&e, since) => {
                self.held.push_front(Held::Exec(exec, since));
                return false;
            }
            Attempt::NotForked(_, e) => {
                let Refusal { message, busy } =
                    clone_refusal(&e, "the command's process namespace");
                InitReply::Refused { id, message, busy }
            }
        };
        // The next is started ahead once this one has ended; a session of
        // a single command (create, exec, delete) holds no waiting
        // processes after it (a pooled sandbox holds its first one,
        // `StartAhead`).
        self.execs += 1;
        self.ahead_failed = false;
        self.reply(&reply);
        true
    }

    /// Hand the order to the waiting exec, or fork the exec's leader into
    /// a new PID namespace.
    fn start_exec(&mut self, exec: ExecOrder) -> Attempt {
        if let Some((pid, line)) = self
            .ready
            .take()
            .and_then(|r| r.go(&exec.command, &exec.fds))
        {
            return Attempt::Started(pid, line);
        }
        let (line, leaders_end) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
            Ok(ends) => ends,
            Err(e) => return Attempt::NotForked(exec, e.into()),
        };
        let now = self.current();
        let mut spec = self.spec.clone();
        spec.argv = exec.command.argv.clone();
        spec.env = exec.command.env.clone();
        spec.cwd = exec.command.cwd.clone();
        spec.stdin = StdinMode::Inherit;
        match sys::clone_sandbox(libc::CLONE_NEWPID) {
            Ok(Forked::Child) => {
                leader_main(&now, &spec, exec.command.limits, exec.fds, leaders_end)
            }
            Ok(Forked::Parent { pid, pidfd }) => {
                drop(pidfd);
                Attempt::Started(pid, line)
            }
            Err(e) => Attempt::NotForked(exec, e),
        }
    }
}

/// Whether an exec first tried at `since` may wait after its leader's
/// fork failed with `e`. At the process limit (EAGAIN) it waits up to
/// [`LIMIT_LAG`] for commands that have ended to be reaped. The engine
/// caps the running execs below the namespace allowance, so ENOSPC means
/// the kernel has not yet counted off namespaces whose processes are gone
/// (it does so after RCU grace periods): that waits up to
/// [`NAMESPACE_LAG`].
fn may_wait(e: &std::io::Error, since: std::time::Instant) -> bool {
    let lag = match e.raw_os_error() {
        Some(libc::EAGAIN) => LIMIT_LAG,
        Some(libc::ENOSPC) => NAMESPACE_LAG,
        _ => return false,
    };
    since.elapsed() < lag
}

/// An exec order with the descriptors it must carry and a command.
fn checked(id: u64, command: ExecCommand, fds: Vec<OwnedFd>) -> Result<ExecOrder, Refusal> {
    let Ok(fds): Result<[OwnedFd; EXEC_FDS], _> = fds.try_into() else {
        return Err(Refusal::invalid(format!(
            "exec {id}: expected {EXEC_FDS} descriptors"
        )));
    };
    if command.argv.is_empty() {
        return Err(Refusal::invalid("no command given".into()));
    }
    Ok(ExecOrder { id, command, fds })
}

/// Without a pids cgroup the sandbox's process limit is RLIMIT_NPROC,
/// which counts every process of the sandbox's user in its user
/// namespace: the init takes it as its soft limit, so that its own forks
/// (each exec's leader, the exec started ahead) stop at the limit as a
/// cgroup would stop them. The hard limit stays, so that a claim may set
/// another; each workload sets both to the limit itself.
fn hold_process_limit(ctx: &ChildContext<'_>, spec: &crate::spec::Spec) {
    if ctx.rlimit_pids {
        // Should it fail, the limit still holds: every workload sets it as
        // its own before it runs anything; only the refusal of a leader
        // at the limit would come later, from the leader's fork. No limit
        // (a claim without one) is the hard limit.
        let n = spec.limits.pids.unwrap_or(u64::MAX);
        let _ = crate::child::set_soft_rlimit(libc::RLIMIT_NPROC, n);
    }
}

/// The init's context with the settings execs get now.
fn current<'a>(
    ctx: &ChildContext<'a>,
    spec: &'a crate::spec::Spec,
    plan: Option<&'a crate::rootfs::Plan>,
    landlock: Option<&'a crate::landlock_rules::Prepared>,
    cpus: Option<&'a CpuSet>,
) -> ChildContext<'a> {
    ChildContext {
        spec,
        plan,
        seccomp: ctx.seccomp,
        cgroup: None,
        fds: ctx.fds,
        rlimit_pids: ctx.rlimit_pids,
        rlimit_memory: ctx.rlimit_memory,
        landlock_optional: ctx.landlock_optional,
        drop_groups: ctx.drop_groups,
        session: true,
        landlock,
        exec_limits: ExecLimits::default(),
        cpus,
    }
}

fn prepare_landlock(
    ctx: &ChildContext<'_>,
    spec: &crate::spec::Spec,
    plan: Option<&crate::rootfs::Plan>,
) -> Option<crate::landlock_rules::Prepared> {
    crate::child::prepare_landlock(&current(ctx, spec, plan, None, None))
}

/// Reap the leaders that have ended; true when the waiting exec's was one
/// of them (it ended without an order).
fn reap_leaders(leaders: &mut HashMap<u64, Leader>, ready: &mut Option<Ready>) -> bool {
    let mut ready_died = false;
    loop {
        match sys::wait4(-1, libc::WNOHANG) {
            Ok((pid, _, _)) if pid > 0 => {
                leaders.retain(|_, leader| leader.pid != pid);
                // A waiting pair that died (killed from outside, or unable
                // to set itself up) is never handed an order: its pid may
                // be reused.
                if ready.as_ref().is_some_and(|r| r.leader() == pid) {
                    *ready = None;
                    ready_died = true;
                }
            }
            _ => break,
        }
    }
    ready_died
}

/// Answer an [`InitOrder::OpenRoot`]: this process's `/`, O_PATH.
fn send_root(control: BorrowedFd<'_>, id: u64) {
    use rustix::fs::{Mode, OFlags};
    let opened = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    );
    let _ = match opened {
        Ok(root) => send_message(control, &InitReply::Root { id }, &[root.as_fd()]),
        Err(e) => send_message(
            control,
            &InitReply::Refused {
                id,
                message: format!("cannot open the sandbox's root: {e}"),
                busy: false,
            },
            &[],
        ),
    };
}

/// What an exec order asks the workload to run, and its own limits.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct ExecCommand {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: std::path::PathBuf,
    /// Set after the session's rlimits, by the waiting workload too (it
    /// lowers its rlimits only once it has the order).
    pub limits: ExecLimits,
}

/// Why an exec order was refused.
struct Refusal {
    message: String,
    /// Whether the same order may succeed later ([`InitReply::Refused`]).
    busy: bool,
}

impl Refusal {
    fn invalid(message: String) -> Refusal {
        Refusal {
            message,
            busy: false,
        }
    }
}

/// What a failed clone of an exec's leader tells the caller. A process
/// limit reached (the sandbox's own: EAGAIN), namespaces the kernel has
/// not yet counted off (ENOSPC) and memory short (ENOMEM) pass: they are
/// the sandbox's or the host's state now, not a fault of the order.
fn clone_refusal(e: &std::io::Error, what: &str) -> Refusal {
    let why = match e.raw_os_error() {
        Some(libc::EAGAIN) => {
            Some("the sandbox is at its process limit; run it again once a command in it has ended")
        }
        Some(libc::ENOSPC) => Some(
            "the kernel still counts the namespaces of commands that ended; \
             run it again in a moment",
        ),
        Some(libc::ENOMEM) => Some("the host is short of memory; run it again in a moment"),
        _ => None,
    };
    let message = format!("cannot start {what}: {e}");
    match why {
        Some(why) => Refusal {
            message: format!("{message} ({why})"),
            busy: true,
        },
        None => Refusal::invalid(message),
    }
}

/// How long a fork at the process limit waits for commands that have
/// ended to leave the count. The engine hears of an exec's end from its
/// leader's report, a moment before the leader has exited and been reaped,
/// and a process counts against the limit (cgroup or RLIMIT_NPROC) until
/// it is reaped: the next command may come in that moment. A limit that
/// stays full (a command still running) is reported after this wait.
pub(crate) const LIMIT_LAG: std::time::Duration = std::time::Duration::from_millis(50);

/// PID 1 of one exec: start the workload, reap, forward signals, report
/// how the workload ended, and leave (taking the rest of the tree along).
/// `line` is the init's line, hung up once the exec is over.
fn leader_main(
    ctx: &ChildContext<'_>,
    spec: &crate::spec::Spec,
    limits: ExecLimits,
    fds: [OwnedFd; EXEC_FDS],
    line: OwnedFd,
) -> ! {
    // SAFETY: prctl with integer arguments: die with the session's init.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let [stdin, stdout, stderr, report_fd] = fds;
    for (fd, target) in [(stdin.as_fd(), 0), (stdout.as_fd(), 1), (stderr.as_fd(), 2)] {
        // SAFETY: dup2 of a descriptor we own onto stdio.
        if unsafe { libc::dup2(fd.as_raw_fd(), target) } == -1 {
            sys::exit_now(125);
        }
    }
    let rfd = report_fd.as_raw_fd();
    let line = line.into_raw_fd();
    // The control socket, the init's signalfd and the order's originals go;
    // the prepared Landlock ruleset stays for the workload. The line is
    // close-on-exec: the command never holds it.
    let mut keep = vec![rfd, line];
    keep.extend(ctx.landlock.and_then(|l| l.raw_fd()));
    sys::close_all_from_except(3, &keep);
    std::mem::forget((stdin, stdout, stderr, report_fd));

    let Ok(set) = block_leader_signals() else {
        sys::exit_now(125)
    };
    let mut exec_ctx = exec_context(ctx, spec, rfd);
    exec_ctx.exec_limits = limits;
    let workload = match start_at_the_limit(|| {
        crate::child::start_workload_process(spec, || workload_main(&exec_ctx))
    }) {
        Ok(pid) => pid,
        Err(e) => {
            report(rfd, &workload_not_forked(&e, ctx.rlimit_pids));
            sys::exit_now(125)
        }
    };
    let_go_of_the_ruleset(ctx);
    lead(workload, rfd, line, &set)
}

/// Close this leader's copy of the workloads' Landlock ruleset once its
/// workload has enforced it (the workload runs its command by now): while
/// the command runs, only the init holds the ruleset, to which rules
/// could be added. The leader never drops the `Prepared` that named the
/// descriptor: it leaves by `_exit`.
pub(crate) fn let_go_of_the_ruleset(ctx: &ChildContext<'_>) {
    if let Some(fd) = ctx.landlock.and_then(|l| l.raw_fd()) {
        // SAFETY: closing this process's own copy, which nothing in it
        // uses again.
        unsafe { libc::close(fd) };
    }
}

/// Start the command's process with `start`; at the process limit, give
/// the commands that have ended [`LIMIT_LAG`] to leave the count (the init
/// reaps them).
fn start_at_the_limit(
    start: impl Fn() -> std::io::Result<libc::pid_t>,
) -> std::io::Result<libc::pid_t> {
    let since = std::time::Instant::now();
    loop {
        match start() {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && since.elapsed() < LIMIT_LAG => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            other => return other,
        }
    }
}

/// What the exec reports when its leader could not fork the command's
/// process (a sandbox at its process limit, most often: its pids cgroup's,
/// or RLIMIT_NPROC without one, `rlimit_pids`).
fn workload_not_forked(e: &std::io::Error, rlimit_pids: bool) -> ChildReport {
    let limit_layer = if rlimit_pids {
        crate::spec::Layer::Rlimits
    } else {
        crate::spec::Layer::Cgroup
    };
    let (layer, fix) = match e.raw_os_error() {
        Some(libc::EAGAIN) => (
            limit_layer,
            "the sandbox is at its process limit: end a command running in it, \
             or give it a higher limit",
        ),
        _ => (crate::spec::Layer::PidNamespace, "run it again in a moment"),
    };
    ChildReport::Setup {
        layer,
        message: format!("cannot start the command's process: {e}"),
        fix: Some(fix.into()),
    }
}

/// The signals a leader waits for (blocked, taken with `sigwaitinfo`).
pub(crate) fn block_leader_signals() -> std::io::Result<libc::sigset_t> {
    let mut wanted: Vec<libc::c_int> = FORWARDED.to_vec();
    wanted.push(libc::SIGCHLD);
    sys::block_signals(&wanted)
}

/// What an exec's workload works with: `spec` (its command), its report
/// descriptor, stdio on 0-2, no control socket.
pub(crate) fn exec_context<'a>(
    ctx: &ChildContext<'a>,
    spec: &'a crate::spec::Spec,
    rfd: std::os::fd::RawFd,
) -> ChildContext<'a> {
    ChildContext {
        spec,
        plan: ctx.plan,
        seccomp: ctx.seccomp,
        cgroup: None,
        fds: ChildFds {
            sync: -1,
            report: rfd,
            status: -1,
            stdout: 1,
            stderr: 2,
            control: None,
        },
        rlimit_pids: ctx.rlimit_pids,
        rlimit_memory: ctx.rlimit_memory,
        landlock_optional: ctx.landlock_optional,
        drop_groups: ctx.drop_groups,
        session: true,
        landlock: ctx.landlock,
        exec_limits: ctx.exec_limits,
        cpus: ctx.cpus,
    }
}

/// The leader's life once its workload runs: forward signals to the
/// workload's process group, reap, report how the workload ended, leave.
/// `line` is the init's: closed, as the exec's descriptors are, once
/// nothing of the exec is left.
pub(crate) fn lead(
    workload: libc::pid_t,
    rfd: std::os::fd::RawFd,
    line: std::os::fd::RawFd,
    set: &libc::sigset_t,
) -> ! {
    loop {
        // SAFETY: `set` is a valid, initialised sigset_t.
        let sig = unsafe { libc::sigwaitinfo(set, std::ptr::null_mut()) };
        if sig == -1 {
            continue;
        }
        if sig != libc::SIGCHLD {
            // SAFETY: kill(2) on the workload's process group (it called
            // setsid, so it leads one).
            unsafe { libc::kill(-workload, sig) };
            continue;
        }
        loop {
            match sys::wait4(-1, libc::WNOHANG) {
                Ok((pid, status, usage)) if pid == workload => {
                    report(rfd, &ended(status, &usage));
                    if alone_in_the_namespace() {
                        let_go_of_the_exec(rfd, line);
                    }
                    sys::exit_now(0);
                }
                Ok((pid, _, _)) if pid > 0 => {}
                _ => break,
            }
        }
    }
}

/// Whether the leader is the last process of its PID namespace, once
/// the zombies are reaped: every process of the namespace descends from
/// it (orphans are given to it), so none is left when it has no child,
/// and none can be started.
fn alone_in_the_namespace() -> bool {
    loop {
        match sys::wait4(-1, libc::WNOHANG) {
            Ok((pid, _, _)) if pid > 0 => {}
            Ok(_) => return false,
            Err(e) => return e.raw_os_error() == Some(libc::ECHILD),
        }
    }
}

/// The leader's copies of the exec's stdout, stderr and report pipe
/// (the engine reads the exec as ended at their end-of-file), and then
/// its line to the init (which may then start the next exec ahead),
/// closed before the exit rather than by it once the command's whole tree
/// is gone: an exiting process frees its memory before its descriptors,
/// and its namespace's teardown takes longer still, so the engine and the
/// init hear of the end without waiting for that. (While other processes
/// remain, the leader's exit, which has the kernel kill them and waits
/// for them, is what ends the exec, as before.)
fn let_go_of_the_exec(rfd: std::os::fd::RawFd, line: std::os::fd::RawFd) {
    for fd in [rfd, 1, 2, line] {
        // SAFETY: closing this process's own descriptors; it only exits
        // after this.
        unsafe { libc::close(fd) };
    }
}

fn ended(status: i32, usage: &libc::rusage) -> ChildReport {
    let us = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000 + t.tv_usec as u64;
    ChildReport::Ended {
        status,
        user_us: us(usage.ru_utime),
        system_us: us(usage.ru_stime),
        max_rss_kib: usage.ru_maxrss.max(0) as u64,
    }
}
