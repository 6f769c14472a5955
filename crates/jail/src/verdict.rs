//! What a finished run amounts to: why it ended, with which exit code, and
//! which layers were in force.

use std::io;
use std::time::Duration;

use crate::error::ChildReport;
use crate::outcome::{Breaches, EndReason, Enforcement, WaitStatus};
use crate::seccomp;
use crate::spec::{IsolationLevel, Layer, NetworkMode, Spec, SANDBOX_UID};
use crate::supervise::Supervision;

pub(crate) fn classify(
    spec: &Spec,
    sup: &Supervision,
    status: Option<WaitStatus>,
    breaches: &Breaches,
    init_status: i32,
    cpu_used: Duration,
    rlimit_memory: bool,
) -> (EndReason, i32, Option<String>) {
    if let Some(ending) = ended_by_cordon(spec, sup) {
        return ending;
    }
    let limits = &spec.limits;
    let memory_msg = || {
        Some(format!(
            "killed by the memory limit ({})",
            size_text(limits.memory.unwrap_or(0))
        ))
    };
    let file_size_msg = |what: &str| {
        Some(format!(
            "{what} the file size limit ({})",
            size_text(limits.file_size.unwrap_or(0))
        ))
    };
    match status {
        Some(WaitStatus::Exited { code }) => {
            if code != 0 && breaches.pids_refused() {
                (
                    EndReason::PidsLimit,
                    code,
                    Some(format!(
                        "the process limit ({} processes and threads) was reached",
                        limits.pids.unwrap_or(0)
                    )),
                )
            } else if code != 0 && breaches.oom_killed() {
                (EndReason::MemoryLimit, code, memory_msg())
            } else if code != 0 && breaches.file_at_size_limit {
                // A child got SIGXFSZ and the shell above it exited.
                (
                    EndReason::FileSizeLimit,
                    code,
                    file_size_msg("a write was cut at"),
                )
            } else {
                (EndReason::Exited, code, None)
            }
        }
        Some(WaitStatus::Signaled { signal, .. }) => {
            let code = 128 + signal;
            if signal == libc::SIGKILL && breaches.oom_killed() {
                (EndReason::MemoryLimit, code, memory_msg())
            } else if signal == libc::SIGXCPU
                || (signal == libc::SIGKILL
                    && spec.limits.cpu.is_some()
                    && sup.interrupted.is_none()
                    && !breaches.oom_killed()
                    && cpu_exhausted(spec, cpu_used))
            {
                (
                    EndReason::CpuLimit,
                    code,
                    Some(format!(
                        "the CPU time limit ({:?}) was reached",
                        limits.cpu.unwrap_or_default()
                    )),
                )
            } else if signal == libc::SIGXFSZ {
                (
                    EndReason::FileSizeLimit,
                    code,
                    file_size_msg("a write reached"),
                )
            } else if sup.interrupted.is_some() {
                (EndReason::Interrupted, code, Some("interrupted".into()))
            } else {
                (
                    EndReason::Signal,
                    code,
                    killed_by_signal(spec, signal, rlimit_memory),
                )
            }
        }
        None => {
            if breaches.oom_killed() {
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

/// How the run ends when cordon ended it, whatever the workload's status:
/// the sandbox could not be built, the command could not be executed, the
/// deadline passed, the output passed its limit.
fn ended_by_cordon(spec: &Spec, sup: &Supervision) -> Option<(EndReason, i32, Option<String>)> {
    if let Some(ChildReport::Setup { layer, message, .. }) = &sup.setup_error {
        return Some((
            EndReason::SetupFailed,
            125,
            Some(format!("{layer}: {message}")),
        ));
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
        return Some((EndReason::ExecFailed, code, Some(text)));
    }
    if sup.timed_out {
        let limit = spec
            .limits
            .wall
            .map(|d| format!("{:?}", d))
            .unwrap_or_default();
        return Some((
            EndReason::Timeout,
            124,
            Some(format!("killed at the wall-clock deadline ({limit})")),
        ));
    }
    if sup.output_killed {
        return Some((
            EndReason::OutputLimit,
            128 + libc::SIGKILL,
            Some(format!(
                "killed: output passed its limit ({} per stream)",
                size_text(spec.limits.output.unwrap_or(0))
            )),
        ));
    }
    None
}

/// A size as its limit was most likely written: `512 MiB`, `64 KiB`, or
/// bytes.
fn size_text(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    match bytes {
        b if b >= GIB && b % GIB == 0 => format!("{} GiB", b / GIB),
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= KIB && b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

/// What a death by `signal` says, as a shell would have said it had the
/// command been its own child (cordon's exit status 128+N tells a shell
/// nothing), with the address-space note when memory is RLIMIT_AS.
fn killed_by_signal(spec: &Spec, signal: i32, rlimit_memory: bool) -> Option<String> {
    let rlimit_as = rlimit_memory.then_some(AddressSpaceLimit {
        bytes: spec.limits.memory,
        remedy: "give a larger --memory, or run where a memory cgroup is delegated (see `cordon doctor`)",
    });
    death_by_signal(signal, rlimit_as)
}

/// Memory limited as address space (RLIMIT_AS, no memory cgroup): the
/// limit when known, and how the caller gives a command more room.
#[derive(Debug, Clone, Copy)]
pub struct AddressSpaceLimit<'a> {
    pub bytes: Option<u64>,
    pub remedy: &'a str,
}

/// "the command was killed by signal N (NAME)", and where memory is
/// RLIMIT_AS and the signal is a crash at start, why that may be and the
/// remedy. None for SIGPIPE, a reader that went away (`| head`), which a
/// shell does not mention either. One wording for `cordon run` and sessions.
pub fn death_by_signal(signal: i32, rlimit_as: Option<AddressSpaceLimit>) -> Option<String> {
    if signal == libc::SIGPIPE {
        return None;
    }
    let name = signal_name(signal).map_or(String::new(), |n| format!(" ({n})"));
    let mut msg = format!("the command was killed by signal {signal}{name}");
    if let Some(limit) = rlimit_as {
        if let Some(note) = address_space_note(signal, limit.bytes) {
            msg.push_str(&format!("; {note}: {}", limit.remedy));
        }
    }
    Some(msg)
}

/// A crash at start where memory is RLIMIT_AS is often a runtime that could
/// not reserve its address space (V8 traps, glibc and the JVM abort): the
/// note that says so, for those signals.
fn address_space_note(signal: i32, limit: Option<u64>) -> Option<String> {
    let crash = [libc::SIGTRAP, libc::SIGABRT, libc::SIGSEGV, libc::SIGBUS].contains(&signal);
    let size = limit.map_or(String::new(), |m| format!(", {} MiB", m >> 20));
    crash.then(|| {
        format!(
            "memory is limited here as address space (RLIMIT_AS{size} per process, no memory \
             cgroup), which runtimes that reserve address space at start exceed (Node needs about \
             1 GiB, the JVM its heap and more)"
        )
    })
}

/// The name of a standard signal (numbers differ between architectures,
/// so each comes from libc).
fn signal_name(signal: i32) -> Option<&'static str> {
    const NAMES: &[(i32, &str)] = &[
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGSYS, "SIGSYS"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGPWR, "SIGPWR"),
        (libc::SIGIO, "SIGIO"),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == signal)
        .map(|(_, name)| *name)
}

/// A SIGKILL is the CPU limit's when the sandbox used at least the limit's
/// worth of CPU: RLIMIT_CPU's soft limit sends SIGXCPU first, and a process
/// that catches or ignores it is killed at the hard limit one second later.
fn cpu_exhausted(spec: &Spec, cpu_used: Duration) -> bool {
    spec.limits.cpu.is_some_and(|limit| cpu_used >= limit)
}

pub(crate) fn record_layers(
    e: &mut Enforcement,
    spec: &Spec,
    program: &seccomp::SeccompProgram,
    sup: &Supervision,
    rlimit_pids: bool,
    rlimit_memory: bool,
) {
    record_isolation(e, spec);
    e.record(
        Layer::Seccomp,
        true,
        format!(
            "{} BPF instructions; denied syscalls return EPERM; foreign ABIs kill",
            program.len()
        ),
    );
    record_landlock(e, sup.landlock);
    e.record(
        Layer::Capabilities,
        true,
        "all dropped (bounding, ambient, inheritable); no_new_privs",
    );
    e.record(
        Layer::Rlimits,
        true,
        rlimits_in_force(spec, rlimit_pids, rlimit_memory),
    );
    if let Some(w) = spec.limits.wall {
        e.record(
            Layer::Deadline,
            true,
            format!("{:.3}s wall clock", w.as_secs_f64()),
        );
    }
    record_switched_off(e);
}

/// The namespaces, or at the process level their absence.
fn record_isolation(e: &mut Enforcement, spec: &Spec) {
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
}

/// Landlock's ABI, and whether the kernel has every access right asked.
fn record_landlock(e: &mut Enforcement, landlock: Option<(u32, bool)>) {
    match landlock {
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
}

/// The rlimits set, named (NPROC and AS stand in for missing cgroups).
fn rlimits_in_force(spec: &Spec, rlimit_pids: bool, rlimit_memory: bool) -> String {
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
        // As child.rs sets it: under the cgroup in a user namespace of the
        // sandbox's own; in its stead without the cgroup; on top of the
        // user's host processes without a user namespace.
        let nproc = match (rlimit_pids, spec.isolation.level) {
            (true, IsolationLevel::Namespaces) => Some("nproc (instead of cgroup pids)"),
            (true, IsolationLevel::Process) => Some(
                "nproc (instead of cgroup pids; on top of what the caller's user runs on the host, \
                 which the kernel counts with the sandbox's processes without a user namespace)",
            ),
            (false, IsolationLevel::Namespaces) => Some("nproc"),
            (false, IsolationLevel::Process) => None,
        };
        rl.extend(nproc.map(str::to_owned));
    }
    if spec.limits.memory.is_some() && rlimit_memory {
        rl.push("as (instead of cgroup memory)".into());
    }
    rl.join(", ")
}

/// Debug builds: what the test switch took away is not enforced. The
/// `overlay` switch only makes staging fall back to a copy, which keeps
/// every guarantee: no layer is weaker for it.
fn record_switched_off(e: &mut Enforcement) {
    let off: Vec<_> = crate::test_switch::check()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| *s != crate::test_switch::Switch::Overlay)
        .collect();
    for layer in off.iter().map(|s| s.layer()) {
        let names: Vec<&str> = off
            .iter()
            .filter(|s| s.layer() == layer)
            .map(|s| s.name())
            .collect();
        let detail = format!(
            "{} turned off by {}",
            names.join(", "),
            crate::test_switch::VAR
        );
        match e.layers.iter_mut().find(|l| l.layer == layer) {
            Some(l) => {
                l.enforced = false;
                l.detail = detail;
            }
            None => e.record(layer, false, detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_said_in_the_unit_it_was_most_likely_given_in() {
        let said: Vec<String> = [0, 1000, 1024, 64 << 10, 512 << 20, 3 << 30, (1 << 30) + 1]
            .into_iter()
            .map(size_text)
            .collect();
        assert_eq!(
            said,
            [
                "0 bytes",
                "1000 bytes",
                "1 KiB",
                "64 KiB",
                "512 MiB",
                "3 GiB",
                "1073741825 bytes"
            ]
        );
    }
}
