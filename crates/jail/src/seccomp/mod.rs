//! The seccomp-bpf filter: a deny list of the system calls that widen the
//! attack surface or reach outside the sandbox, plus an allow list of socket
//! families.
//!
//! The program is generated here, in Rust, from per-architecture tables of
//! numbers (`syscalls.rs`), on the supervisor side; the sandbox helper
//! installs it just before `execve`. Written by hand rather than with a
//! crate: `seccompiler` 0.5 has no `SECCOMP_RET_USER_NOTIF` return (how
//! the supervisor learns who called what), no way to kill the x32 ABI that
//! shares x86_64's architecture value, and no "every number above the
//! table answers ENOSYS" rule; `libseccomp` is a C library to install, and
//! it skips a name it does not know instead of failing.
//!
//! - `syscalls.rs`: the calls by name, with their number on each
//!   architecture (an unknown name cannot be written);
//! - `rules.rs`: what each call gets, as a BPF program;
//! - `bpf.rs`: the assembler (labels, jump offsets);
//! - `notify.rs`: receiving and answering user notifications.

pub(crate) mod bpf;
pub mod notify;
mod rules;
pub mod syscalls;
#[cfg(test)]
mod tests;

pub use syscalls::Syscall;

use crate::error::{JailError, Result};
use crate::spec::Layer;

/// What the filter allows beyond the fixed deny list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterOptions {
    /// `socket(AF_UNIX, ...)`.
    pub unix_sockets: bool,
    /// `socket(AF_INET/AF_INET6, ...)`.
    pub inet_sockets: bool,
    /// Refuse the deny-listed calls through user notification, so the
    /// supervisor learns who called what (it answers EPERM), instead of
    /// refusing them inside the kernel.
    pub notify: bool,
    /// Also hand [`OBSERVED_SYSCALLS`] to the supervisor, which notes the
    /// path and lets the call continue (`cordon learn`). Needs `notify`.
    /// This observes, it does not enforce: the path is read from the
    /// caller's memory, which another thread may change before the kernel
    /// reads it.
    pub observe: bool,
}

/// The calls `observe` hands to the supervisor: what opens, creates or
/// executes a path, and `exit_group`, where the process's peak address
/// space is read while it still has one.
pub const OBSERVED_SYSCALLS: &[Syscall] = {
    use Syscall::*;
    &[
        Open, Openat, Openat2, Creat, Execve, Execveat, Mkdir, Mkdirat, ExitGroup,
    ]
};

/// System calls refused with EPERM in every sandbox (through the
/// supervisor when notifying).
pub const DENIED_SYSCALLS: &[Syscall] = {
    use Syscall::*;
    &[
        // Mounts, old and new API, and root changes.
        Mount,
        Umount2,
        PivotRoot,
        Chroot,
        MoveMount,
        OpenTree,
        Fsopen,
        Fsconfig,
        Fsmount,
        Fspick,
        MountSetattr,
        OpenTreeAttr,
        // Namespaces.
        Unshare,
        Setns,
        // Inspecting or steering other processes.
        Ptrace,
        ProcessVmReadv,
        ProcessVmWritev,
        Kcmp,
        PidfdGetfd,
        // Kernel attack surface.
        Bpf,
        PerfEventOpen,
        Userfaultfd,
        IoUringSetup,
        IoUringEnter,
        IoUringRegister,
        // Kernel keyrings.
        Keyctl,
        AddKey,
        RequestKey,
        // The machine itself.
        KexecLoad,
        KexecFileLoad,
        InitModule,
        FinitModule,
        DeleteModule,
        Reboot,
        Swapon,
        Swapoff,
        Acct,
        Syslog,
        Quotactl,
        QuotactlFd,
        Settimeofday,
        ClockSettime,
        ClockAdjtime,
        Iopl,
        Ioperm,
        Vhangup,
        LookupDcookie,
        Uselib,
        Ustat,
        Sysfs,
        Sysctl,
        Nfsservctl,
        // Opening files by handle bypasses the mount tree.
        OpenByHandleAt,
        NameToHandleAt,
        FanotifyInit,
    ]
};

/// A compiled filter, ready to install.
#[derive(Debug, Clone)]
pub struct SeccompProgram {
    pub(crate) instructions: Vec<libc::sock_filter>,
    /// Refused calls go to the supervisor (user notification).
    pub(crate) notify: bool,
}

impl SeccompProgram {
    pub fn len(&self) -> usize {
        self.instructions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instructions.is_empty()
    }

    /// The program as the kernel's `struct sock_filter` array in native
    /// byte order: the form `prctl(PR_SET_SECCOMP)` takes, and the file
    /// `bwrap --seccomp FD` reads (benches/startup/layers.sh runs bwrap
    /// with this program as its same-layers baseline).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.instructions.len() * 8);
        for i in &self.instructions {
            out.extend_from_slice(&i.code.to_ne_bytes());
            out.push(i.jt);
            out.push(i.jf);
            out.extend_from_slice(&i.k.to_ne_bytes());
        }
        out
    }
}

/// The filter for the given options on this machine's architecture. It
/// takes a few microseconds, so nothing is cached.
pub fn compile(options: FilterOptions) -> Result<SeccompProgram> {
    let instructions = rules::program(options, &syscalls::NATIVE).map_err(|e| {
        JailError::setup(
            Layer::Seccomp,
            format!("could not build the seccomp filter: {e}"),
            None,
        )
    })?;
    Ok(SeccompProgram {
        instructions,
        notify: options.notify,
    })
}

/// The name of a call by its number on this architecture, for reports.
pub fn syscall_name(nr: i32) -> String {
    u32::try_from(nr)
        .ok()
        .and_then(|n| syscalls::NATIVE.call(n))
        .map(|c| c.name().to_owned())
        .unwrap_or_else(|| format!("syscall_{nr}"))
}
