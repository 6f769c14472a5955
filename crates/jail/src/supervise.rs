//! The supervision loop: while the sandbox runs, relay its output within
//! the limit, answer seccomp notifications, collect the child's reports,
//! forward signals, follow the Landlock audit log, and enforce the
//! deadline. One `poll` per round; each ready descriptor has its handler.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::cgroup::Cgroup;
use crate::error::ChildReport;
use crate::kaudit::LandlockLog;
use crate::outcome::StreamStats;
use crate::run::{Hooks, OutputSink, Stream};
use crate::spec::{IsolationLevel, OutputLimitAction, Spec};
use crate::sys;

/// How long leftover output may keep the loop going once the sandbox is
/// gone (a grandchild may hold the pipes open).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// What the loop watches; every descriptor belongs to the caller.
pub(crate) struct Watched<'a> {
    pub pidfd: &'a OwnedFd,
    /// The workload's stdout and stderr.
    pub outputs: [&'a OwnedFd; 2],
    /// JSON lines from the sandbox's init and workload.
    pub report: &'a OwnedFd,
    /// Hands over the seccomp listener (after the proxy listener).
    pub control: &'a OwnedFd,
    /// Signals to forward (`RunOptions::forward_signals`).
    pub signals: Option<&'a OwnedFd>,
    pub landlock_log: Option<&'a mut LandlockLog>,
    pub started: Instant,
    pub deadline: Option<Instant>,
    pub level: IsolationLevel,
    pub group: Option<&'a Cgroup>,
}

impl Watched<'_> {
    /// Kill the sandbox; at the process level, also whatever escaped into
    /// the cgroup outside the workload's process group.
    fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(self.pidfd, rustix::process::Signal::KILL);
        if self.level == IsolationLevel::Process {
            if let Some(g) = self.group {
                for dir in g.dirs() {
                    let _ = fs::write(dir.join("cgroup.kill"), "1");
                }
            }
        }
    }
}

/// A descriptor in one round's poll set.
#[derive(Debug, Clone, Copy)]
enum Source {
    Exit,
    Output(usize),
    Report,
    Signals,
    Control,
    Notify,
    Audit,
}

/// Which watched descriptors still matter.
struct Open {
    outputs: [bool; 2],
    report: bool,
    control: bool,
    /// The seccomp listener, once the workload sent it.
    notify: Option<OwnedFd>,
    /// When the sandbox's init was seen to exit.
    exited_at: Option<Instant>,
}

impl Open {
    fn finished(&self) -> bool {
        let drained = !self.outputs[0] && !self.outputs[1] && !self.report;
        match self.exited_at {
            Some(at) => drained || at.elapsed() > DRAIN_AFTER_EXIT,
            None => false,
        }
    }

    fn poll_set(&self, w: &Watched<'_>) -> (Vec<libc::pollfd>, Vec<Source>) {
        let mut fds = Vec::with_capacity(8);
        let mut sources = Vec::with_capacity(8);
        let mut add = |fd: RawFd, source: Source| {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            sources.push(source);
        };
        if self.exited_at.is_none() {
            add(w.pidfd.as_raw_fd(), Source::Exit);
        }
        for (idx, fd) in w.outputs.iter().enumerate() {
            if self.outputs[idx] {
                add(fd.as_raw_fd(), Source::Output(idx));
            }
        }
        if self.report {
            add(w.report.as_raw_fd(), Source::Report);
        }
        if let Some(s) = w.signals {
            add(s.as_raw_fd(), Source::Signals);
        }
        if self.control {
            add(w.control.as_raw_fd(), Source::Control);
        }
        if let Some(n) = &self.notify {
            add(n.as_raw_fd(), Source::Notify);
        }
        if let Some(log) = &w.landlock_log {
            add(log.fd().as_raw_fd(), Source::Audit);
        }
        (fds, sources)
    }
}

/// State of the supervision loop.
pub(crate) struct Supervision {
    pub out: [StreamStats; 2],
    limit: Option<u64>,
    on_limit: OutputLimitAction,
    report: Vec<u8>,
    pub setup_error: Option<ChildReport>,
    pub exec_error: Option<(String, i32)>,
    pub landlock: Option<(u32, bool)>,
    pub timed_out: bool,
    pub output_killed: bool,
    pub interrupted: Option<i32>,
    pub denied: Vec<crate::outcome::DeniedCall>,
    pub denied_total: u64,
    /// An error from `Hooks::tick`; the sandbox was killed for it.
    pub hook_error: Option<String>,
    /// Learn mode: observed calls continue, their paths are noted here.
    observe: bool,
    pub observations: crate::observe::Observations,
}

impl Supervision {
    pub(crate) fn new(spec: &Spec) -> Supervision {
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
            observe: spec.observe,
            observations: Default::default(),
        }
    }

    /// Supervise until the sandbox is gone and its output drained.
    /// `tick` is called at its instant if the sandbox still runs, and
    /// again as its `tick_again` asks.
    pub(crate) fn pump(
        &mut self,
        w: &mut Watched<'_>,
        sink: &mut dyn OutputSink,
        mut tick: Option<(Instant, &mut dyn Hooks)>,
    ) {
        let mut open = Open {
            outputs: [true, true],
            report: true,
            control: true,
            notify: None,
            exited_at: None,
        };
        let mut buf = vec![0u8; 64 * 1024];
        while !open.finished() {
            let exited = open.exited_at.is_some();
            // Wait for a descriptor, the deadline or the tick.
            let (mut fds, sources) = open.poll_set(w);
            let timeout = self.poll_timeout(w.deadline, tick.as_ref().map(|(at, _)| *at), exited);
            match wait(&mut fds, timeout) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(_) => break,
            }
            // Time-driven work first, then whatever is ready.
            self.enforce_deadline(w, exited);
            tick = self.tick_if_due(w, tick, exited);
            for (pfd, source) in fds.iter().zip(&sources) {
                if pfd.revents != 0 {
                    self.handle(*source, pfd, w, &mut open, &mut buf, sink);
                }
            }
        }
        if open.report {
            self.parse_reports();
        }
    }

    /// Call the tick when its time has come; returns the next one, if the
    /// hooks want another while the sandbox runs.
    fn tick_if_due<'h>(
        &mut self,
        w: &Watched<'_>,
        tick: Option<(Instant, &'h mut dyn Hooks)>,
        exited: bool,
    ) -> Option<(Instant, &'h mut dyn Hooks)> {
        match tick {
            Some((at, hooks)) if Instant::now() >= at => {
                self.run_tick(w, &mut *hooks, exited);
                if exited || self.hook_error.is_some() {
                    return None;
                }
                hooks.tick_again().map(|d| (Instant::now() + d, hooks))
            }
            other => other,
        }
    }

    /// Milliseconds until the next deadline or tick, rounded up; short
    /// once the sandbox is gone, so the drain time limit is checked.
    fn poll_timeout(
        &self,
        deadline: Option<Instant>,
        tick_at: Option<Instant>,
        exited: bool,
    ) -> libc::c_int {
        if exited {
            return 100;
        }
        let wake = [deadline.filter(|_| !self.timed_out), tick_at]
            .into_iter()
            .flatten()
            .min();
        match wake {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                left.as_millis().min(i32::MAX as u128) as libc::c_int
                    + i32::from(left.subsec_micros() % 1000 != 0)
            }
            None => -1,
        }
    }

    fn enforce_deadline(&mut self, w: &Watched<'_>, exited: bool) {
        if let (Some(d), false) = (w.deadline, self.timed_out) {
            if !exited && Instant::now() >= d {
                self.timed_out = true;
                w.kill();
            }
        }
    }

    fn run_tick(&mut self, w: &Watched<'_>, hooks: &mut dyn Hooks, exited: bool) {
        if exited {
            return;
        }
        if let Err(e) = hooks.tick() {
            self.hook_error = Some(e);
            w.kill();
        }
    }

    fn handle(
        &mut self,
        source: Source,
        pfd: &libc::pollfd,
        w: &mut Watched<'_>,
        open: &mut Open,
        buf: &mut [u8],
        sink: &mut dyn OutputSink,
    ) {
        match source {
            Source::Exit => open.exited_at = Some(Instant::now()),
            Source::Output(idx) => {
                if !self.relay_output(idx, pfd.fd, buf, sink, w) {
                    open.outputs[idx] = false;
                }
            }
            Source::Report => {
                if !self.read_report(pfd.fd, buf) {
                    open.report = false;
                }
            }
            Source::Control => match crate::fdpass::recv_fd_from(w.control) {
                // Sent by the workload right after it restricted itself
                // with Landlock: the kernel's word for its host pid names
                // its Landlock domain's creator.
                Ok((Some(fd), sender)) => {
                    open.notify = Some(fd);
                    if let (Some(log), Some(pid)) = (w.landlock_log.as_deref_mut(), sender) {
                        log.set_workload(pid);
                    }
                }
                _ => open.control = false,
            },
            Source::Notify => {
                if pfd.revents & libc::POLLIN != 0 {
                    if let Some(fd) = &open.notify {
                        self.answer_notification(fd.as_raw_fd(), w.started);
                    }
                } else {
                    // Every task using the filter is gone.
                    open.notify = None;
                }
            }
            Source::Audit => {
                if let Some(log) = w.landlock_log.as_deref_mut() {
                    log.drain(w.started);
                }
            }
            Source::Signals => self.forward_signal(w),
        }
    }

    /// Pass one read of output to the sink within the limit; false once
    /// the stream is closed.
    fn relay_output(
        &mut self,
        idx: usize,
        fd: RawFd,
        buf: &mut [u8],
        sink: &mut dyn OutputSink,
        w: &Watched<'_>,
    ) -> bool {
        // SAFETY: reading into our buffer from our pipe.
        let r = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if r <= 0 {
            return r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
        }
        let data = &buf[..r as usize];
        let stats = &mut self.out[idx];
        let room = self
            .limit
            .map_or(data.len() as u64, |l| l.saturating_sub(stats.kept));
        let keep = (data.len() as u64).min(room) as usize;
        if keep > 0 {
            let stream = if idx == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            sink.write(stream, &data[..keep]);
            stats.kept += keep as u64;
        }
        stats.dropped += (data.len() - keep) as u64;
        if stats.dropped > 0 && self.on_limit == OutputLimitAction::Kill && !self.output_killed {
            self.output_killed = true;
            w.kill();
        }
        true
    }

    /// Collect report bytes; false (after parsing them) once the pipe is
    /// closed.
    fn read_report(&mut self, fd: RawFd, buf: &mut [u8]) -> bool {
        // SAFETY: reading into our buffer from our pipe.
        let r = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if r <= 0 {
            self.parse_reports();
            return false;
        }
        // The helper sends a few short lines; cap anyway.
        if self.report.len() < 64 * 1024 {
            self.report.extend_from_slice(&buf[..r as usize]);
        }
        true
    }

    /// Pass a signal this process received on to the sandbox; a second
    /// one kills it.
    fn forward_signal(&mut self, w: &Watched<'_>) {
        let Some(sig) = w.signals.and_then(|s| sys::read_signalfd(s.as_raw_fd())) else {
            return;
        };
        let repeated = self.interrupted.is_some();
        self.interrupted = Some(sig);
        let signal = if repeated {
            rustix::process::Signal::KILL
        } else {
            // SAFETY: `sig` is one of the signals we blocked, a valid number.
            unsafe { rustix::process::Signal::from_raw_unchecked(sig) }
        };
        let _ = rustix::process::pidfd_send_signal(w.pidfd, signal);
        if w.level == IsolationLevel::Process {
            // SAFETY: kill(2) on the workload's process group.
            unsafe { libc::kill(-pidfd_pid(w.pidfd), sig) };
        }
    }

    /// Refuse one notified system call with EPERM and keep it as evidence
    /// (in learn mode, note an observed call and let it continue).
    fn answer_notification(&mut self, fd: RawFd, started: Instant) {
        use crate::seccomp;
        let Some(req) = seccomp::notify::receive(fd) else {
            return; // the caller died meanwhile
        };
        if self.observe && self.observations.note(&req) {
            seccomp::notify::answer_continue(fd, req.id);
            return;
        }
        seccomp::notify::answer_error(fd, req.id, libc::EPERM);
        self.denied_total += 1;
        if self.denied.len() < 256 {
            self.denied.push(crate::outcome::DeniedCall {
                syscall: seccomp::syscall_name(req.nr),
                nr: req.nr,
                args: req.args,
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
                // Only a session's exec leader sends it.
                Ok(ChildReport::Ended { .. }) | Err(_) => {}
            }
        }
        self.report.clear();
    }
}

/// One `poll` over the round's descriptors.
fn wait(fds: &mut [libc::pollfd], timeout: libc::c_int) -> io::Result<()> {
    // SAFETY: `fds` is a valid array of pollfd of the given length.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn pidfd_pid(pidfd: &OwnedFd) -> libc::pid_t {
    // Read "Pid:" from /proc/self/fdinfo/N.
    let text =
        fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:").and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}
