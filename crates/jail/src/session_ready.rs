//! The next exec of a session, started ahead of its order: its leader
//! (PID 1 of a new PID namespace) and its workload, already confined
//! (new session, Landlock, no_new_privs, no capabilities, seccomp) and
//! waiting for the command. An order then costs no fork and no setup:
//!
//! ```text
//! init ── go (stdout, stderr, report) ──> leader: holds them, reaps,
//!  │                                      forwards signals, reports the end
//!  └──── go (argv, env, cwd; stdin,   ──> workload: stdio onto 0-2,
//!        stdout, stderr, report)          rlimits, cwd, exec
//! ```
//!
//! The workload applies the layers in the same order as any exec (the
//! rlimits and the working directory, which need the order, come after
//! the filter: lowering a limit and chdir are allowed under it), and a
//! setup failure waits for the order to be reported on its report pipe,
//! so an exec sees exactly what it would have seen started on order. An
//! exec's own limits (a policy's, in the order) are rlimits too, set at
//! the same point, so a waiting workload takes them as one started on
//! order would. The pair is single-use; a claim's new limits and binds
//! discard it (and replace it in a session that has run several
//! commands).

use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};

use crate::child::{confine, exec_command, limit_and_enter_cwd, report, seccomp, ChildContext};
use crate::error::ChildReport;
use crate::session::{recv_message, send_message};
use crate::session_init::{block_leader_signals, exec_context, lead, ExecCommand};
use crate::sys::{self, Forked};
use crate::test_switch::{off, Switch};

/// A leader and workload waiting for an order (held by the init).
pub(crate) struct Ready {
    leader: libc::pid_t,
    /// Readable once the leader has exited.
    exited: OwnedFd,
    to_leader: OwnedFd,
    to_workload: OwnedFd,
}

impl Ready {
    pub(crate) fn leader(&self) -> libc::pid_t {
        self.leader
    }

    /// Start the pair with the init's current settings; `None` when it
    /// cannot be (a pids limit reached): orders are then started on
    /// arrival.
    pub(crate) fn start(ctx: &ChildContext<'_>) -> Option<Ready> {
        let pair = || {
            rustix::net::socketpair(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::SEQPACKET,
                rustix::net::SocketFlags::CLOEXEC,
                None,
            )
            .ok()
        };
        let (to_leader, leader_end) = pair()?;
        let (to_workload, workload_end) = pair()?;
        match sys::clone_sandbox(libc::CLONE_NEWPID) {
            Ok(Forked::Child) => {
                drop((to_leader, to_workload));
                leader_main(ctx, leader_end, workload_end)
            }
            Ok(Forked::Parent { pid, pidfd }) => Some(Ready {
                leader: pid,
                exited: pidfd,
                to_leader,
                to_workload,
            }),
            Err(_) => None,
        }
    }

    /// Hand the pair an order's command (with the exec's own limits,
    /// which its workload sets with the session's once it has them) and
    /// descriptors (stdin, stdout, stderr, report); returns the leader's
    /// pid and the init's line to it, which the leader hangs up once the
    /// exec is over (crate::session_init::lead). On failure the pair is
    /// killed before its workload got the command (it never runs), and
    /// the order can be started the ordinary way.
    pub(crate) fn go(
        self,
        command: &ExecCommand,
        fds: &[OwnedFd; 4],
    ) -> Option<(libc::pid_t, OwnedFd)> {
        let [stdin, stdout, stderr, report_fd] = fds;
        // The leader first: the workload runs the command as soon as it
        // has it, so nothing may fail after that.
        let sent = send_message(
            self.to_leader.as_fd(),
            &(),
            &[stdout.as_fd(), stderr.as_fd(), report_fd.as_fd()],
        )
        .and_then(|()| {
            send_message(
                self.to_workload.as_fd(),
                command,
                &[
                    stdin.as_fd(),
                    stdout.as_fd(),
                    stderr.as_fd(),
                    report_fd.as_fd(),
                ],
            )
        });
        if sent.is_err() {
            self.discard();
            return None;
        }
        Some((self.leader, self.to_leader))
    }

    /// Kill the pair (its PID namespace goes with its leader) and reap
    /// the leader before going on: until then both count against the
    /// sandbox's process limit, and the command the init starts next
    /// would find the limit short by two. The wait is bounded by
    /// [`DISCARD_WAIT`] (a process of the pair stuck in the kernel holds
    /// its leader back): the init then goes on, and reaps the leader with
    /// the others once it has exited.
    pub(crate) fn discard(self) {
        // SAFETY: kill(2) on the init's own unreaped child.
        unsafe { libc::kill(self.leader, libc::SIGKILL) };
        // The leader exits once its namespace's last process is gone (the
        // kernel kills and reaps the workload first).
        let wait = rustix::fs::Timespec {
            tv_sec: DISCARD_WAIT.as_secs() as _,
            tv_nsec: 0,
        };
        let mut exited = [rustix::event::PollFd::new(
            &self.exited,
            rustix::event::PollFlags::IN,
        )];
        let _ = rustix::event::poll(&mut exited, Some(&wait));
        let _ = sys::wait4(self.leader, libc::WNOHANG);
    }
}

/// How long discarding a waiting pair waits for its leader to exit.
const DISCARD_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The waiting leader: start the workload, wait for the order's
/// descriptors, then lead as any exec's leader does. Leaves (taking the
/// workload along) if the init closes its socket without an order.
fn leader_main(ctx: &ChildContext<'_>, from_init: OwnedFd, for_workload: OwnedFd) -> ! {
    // SAFETY: prctl with integer arguments: die with the session's init.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let mut keep = vec![from_init.as_raw_fd(), for_workload.as_raw_fd()];
    keep.extend(ctx.landlock.and_then(|l| l.raw_fd()));
    // The control socket, the init's signalfd and anything else go.
    sys::close_all_from_except(3, &keep);
    let Ok(set) = block_leader_signals() else {
        sys::exit_now(125)
    };
    // The workload shares this process's memory until its exec, this
    // process waiting (crate::child::start_workload_process): the order's
    // descriptors for the leader are read once the command runs.
    let (go, init_end) = (for_workload.as_raw_fd(), from_init.as_raw_fd());
    let workload = match crate::child::start_workload_process(ctx.spec, || {
        // SAFETY: closing this process's own copy of the init's socket
        // (the descriptor table is not shared); the leader keeps its own.
        unsafe { libc::close(init_end) };
        workload_main(ctx, go)
    }) {
        Ok(pid) => pid,
        Err(_) => sys::exit_now(125),
    };
    drop(for_workload);
    crate::session_init::let_go_of_the_ruleset(ctx);
    let fds = match recv_message::<()>(from_init.as_fd()) {
        Ok(Some(((), fds))) => fds,
        _ => sys::exit_now(0),
    };
    let Ok([stdout, stderr, report_fd]) = <[OwnedFd; 3]>::try_from(fds) else {
        sys::exit_now(125)
    };
    // Holding the exec's stdout and stderr until the whole tree is gone:
    // their end-of-file comes with the report's.
    for (fd, target) in [(stdout.as_fd(), 1), (stderr.as_fd(), 2)] {
        // SAFETY: dup2 of a descriptor we own onto stdio.
        if unsafe { libc::dup2(fd.as_raw_fd(), target) } == -1 {
            sys::exit_now(125);
        }
    }
    drop((stdout, stderr));
    // The socket from the init stays open as the init's line.
    lead(
        workload,
        report_fd.into_raw_fd(),
        from_init.into_raw_fd(),
        &set,
    )
}

/// The waiting workload: confined now, the command when it comes.
fn workload_main(ctx: &ChildContext<'_>, go: std::os::fd::RawFd) -> ! {
    // SAFETY: this process's copy of the descriptor the leader passed by
    // number; nothing else in this process uses it.
    let go = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(go) };
    sys::reset_signals();
    // A new session: no controlling terminal to push input into.
    if !off(Switch::Session) {
        let _ = rustix::process::setsid();
    }
    let spec = ctx.spec;
    let probe = exec_context(ctx, spec, -1);
    let confined = confine(&probe).and_then(|line| seccomp(&probe).map(|()| line));
    let (command, fds) = match recv_message::<ExecCommand>(go.as_fd()) {
        Ok(Some(got)) => got,
        _ => sys::exit_now(125),
    };
    drop(go);
    let Ok([stdin, stdout, stderr, report_fd]) = <[OwnedFd; 4]>::try_from(fds) else {
        sys::exit_now(125)
    };
    for (fd, target) in [(stdin.as_fd(), 0), (stdout.as_fd(), 1), (stderr.as_fd(), 2)] {
        // SAFETY: dup2 of a descriptor we own onto stdio.
        if unsafe { libc::dup2(fd.as_raw_fd(), target) } == -1 {
            sys::exit_now(125);
        }
    }
    drop((stdin, stdout, stderr));
    // Close-on-exec (received so): only this process reports on it.
    let rfd = report_fd.into_raw_fd();
    match confined {
        Ok(line) => line.iter().for_each(|r| report(rfd, r)),
        Err(r) => {
            report(rfd, &r);
            sys::exit_now(125)
        }
    }
    let mut spec = spec.clone();
    spec.argv = command.argv;
    spec.env = command.env;
    spec.cwd = command.cwd;
    let mut exec_ctx = exec_context(ctx, &spec, rfd);
    exec_ctx.exec_limits = command.limits;
    if let Err(r) = limit_and_enter_cwd(&exec_ctx) {
        report(rfd, &r);
        sys::exit_now(125)
    }
    exec_command(&exec_ctx, |_| None::<ChildReport>)
}
