//! The seccomp-bpf filter: a deny list of the system calls that widen the
//! attack surface or reach outside the sandbox, plus an allow list of socket
//! families.
//!
//! The program is compiled once, on the supervisor side, with libseccomp
//! (which also emits the architecture check: any other ABI, x32 and i386
//! included, kills the process). The sandbox helper installs the prepared
//! BPF just before `execve`.

use std::io::Read;
use std::os::fd::AsFd;
use std::sync::Mutex;

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};

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
}

/// System calls refused with EPERM in every sandbox.
pub const DENIED_SYSCALLS: &[&str] = &[
    // Mounts, old and new API, and root changes.
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_tree_attr",
    // Namespaces.
    "unshare",
    "setns",
    // Inspecting or steering other processes.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    // Kernel attack surface.
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    // Kernel keyrings.
    "keyctl",
    "add_key",
    "request_key",
    // The machine itself.
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "iopl",
    "ioperm",
    "vhangup",
    "lookup_dcookie",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "nfsservctl",
    // Opening files by handle bypasses the mount tree.
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
];

/// The `clone` flags that create namespaces.
const CLONE_NAMESPACE_FLAGS: &[i32] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWCGROUP,
];

/// Terminal ioctls that inject input or reach the console.
const DENIED_IOCTLS: &[u64] = &[libc::TIOCSTI, libc::TIOCLINUX];

/// Highest address family number we enumerate (AF_MAX on current kernels is
/// 46; larger values are refused by the kernel itself).
const AF_LIMIT: i32 = 64;

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
}

fn seccomp_err(what: &str, e: impl std::fmt::Display) -> JailError {
    JailError::setup(
        Layer::Seccomp,
        format!("could not build the seccomp filter ({what}): {e}"),
        Some("install libseccomp 2.5 or newer and use a kernel built with CONFIG_SECCOMP_FILTER"),
    )
}

/// The filter for the given options, built once per process: a
/// long-lived supervisor (the server, a warm pool) reuses the program for
/// every sandbox with the same options instead of running libseccomp again
/// (about 0.3 ms each time here). Failures are not kept.
pub fn compile(options: FilterOptions) -> Result<SeccompProgram> {
    static BUILT: Mutex<Vec<(FilterOptions, SeccompProgram)>> = Mutex::new(Vec::new());
    if let Ok(built) = BUILT.lock() {
        if let Some((_, program)) = built.iter().find(|(o, _)| *o == options) {
            return Ok(program.clone());
        }
    }
    let program = build(options)?;
    if let Ok(mut built) = BUILT.lock() {
        if !built.iter().any(|(o, _)| *o == options) {
            built.push((options, program.clone()));
        }
    }
    Ok(program)
}

/// Build the filter for the given options.
fn build(options: FilterOptions) -> Result<SeccompProgram> {
    let eperm = ScmpAction::Errno(libc::EPERM);
    // The sensitive calls: reported to the supervisor when asked to.
    let refuse = if options.notify {
        ScmpAction::Notify
    } else {
        eperm
    };
    let mut ctx = ScmpFilterContext::new(ScmpAction::Allow).map_err(|e| seccomp_err("init", e))?;
    ctx.add_arch(ScmpArch::Native)
        .map_err(|e| seccomp_err("arch", e))?;
    ctx.set_act_badarch(ScmpAction::KillProcess)
        .map_err(|e| seccomp_err("bad arch action", e))?;
    // We set no_new_privs ourselves, before Landlock.
    ctx.set_ctl_nnp(false).map_err(|e| seccomp_err("nnp", e))?;

    for name in DENIED_SYSCALLS {
        // Names this libseccomp or architecture does not know cannot be
        // called here either.
        if let Ok(sc) = ScmpSyscall::from_name(name) {
            ctx.add_rule(refuse, sc).map_err(|e| seccomp_err(name, e))?;
        }
    }

    // clone3 passes its flags in memory the filter cannot read: answer
    // ENOSYS so libc falls back to clone(2), whose flags we can check.
    let clone3 = ScmpSyscall::from_name("clone3").map_err(|e| seccomp_err("clone3", e))?;
    ctx.add_rule(ScmpAction::Errno(libc::ENOSYS), clone3)
        .map_err(|e| seccomp_err("clone3", e))?;

    let clone = ScmpSyscall::from_name("clone").map_err(|e| seccomp_err("clone", e))?;
    for &flag in CLONE_NAMESPACE_FLAGS {
        let cmp = ScmpArgCompare::new(0, ScmpCompareOp::MaskedEqual(flag as u64), flag as u64);
        ctx.add_rule_conditional(refuse, clone, &[cmp])
            .map_err(|e| seccomp_err("clone flags", e))?;
    }

    // The ioctl request is an unsigned int: compare only the low 32 bits,
    // as the kernel does, so high garbage bits cannot slip past.
    let ioctl = ScmpSyscall::from_name("ioctl").map_err(|e| seccomp_err("ioctl", e))?;
    for &req in DENIED_IOCTLS {
        let cmp = ScmpArgCompare::new(1, ScmpCompareOp::MaskedEqual(0xffff_ffff), req);
        ctx.add_rule_conditional(refuse, ioctl, &[cmp])
            .map_err(|e| seccomp_err("ioctl", e))?;
    }

    // Socket families: everything not explicitly allowed is refused.
    let socket = ScmpSyscall::from_name("socket").map_err(|e| seccomp_err("socket", e))?;
    for family in 0..AF_LIMIT {
        let allowed = (family == libc::AF_UNIX && options.unix_sockets)
            || ((family == libc::AF_INET || family == libc::AF_INET6) && options.inet_sockets);
        if allowed {
            continue;
        }
        let cmp = ScmpArgCompare::new(0, ScmpCompareOp::MaskedEqual(0xffff_ffff), family as u64);
        ctx.add_rule_conditional(eperm, socket, &[cmp])
            .map_err(|e| seccomp_err("socket family", e))?;
    }
    // socketpair only ever makes local pairs; allow AF_UNIX pairs only.
    let socketpair =
        ScmpSyscall::from_name("socketpair").map_err(|e| seccomp_err("socketpair", e))?;
    let not_unix = ScmpArgCompare::new(0, ScmpCompareOp::NotEqual, libc::AF_UNIX as u64);
    ctx.add_rule_conditional(eperm, socketpair, &[not_unix])
        .map_err(|e| seccomp_err("socketpair", e))?;

    let mut program = export(&ctx)?;
    program.notify = options.notify;
    Ok(program)
}

/// Export the compiled BPF through a pipe (libseccomp 2.5 has no in-memory
/// export) and parse it into instructions.
fn export(ctx: &ScmpFilterContext) -> Result<SeccompProgram> {
    let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| seccomp_err("pipe", e))?;
    // A program is a few hundred instructions (8 bytes each), far below the
    // pipe's 64 KiB capacity, so writing before reading cannot block.
    ctx.export_bpf(wr.as_fd())
        .map_err(|e| seccomp_err("export", e))?;
    drop(wr);
    let mut bytes = Vec::new();
    std::fs::File::from(rd)
        .read_to_end(&mut bytes)
        .map_err(|e| seccomp_err("read back", e))?;
    let instructions = bytes
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect::<Vec<_>>();
    if instructions.is_empty() || bytes.len() % 8 != 0 {
        return Err(seccomp_err("export", "libseccomp produced no program"));
    }
    Ok(SeccompProgram {
        instructions,
        notify: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_every_variant() {
        for unix in [false, true] {
            for inet in [false, true] {
                let p = compile(FilterOptions {
                    unix_sockets: unix,
                    inet_sockets: inet,
                    notify: inet,
                })
                .expect("filter compiles");
                assert!(p.len() > 50, "suspiciously short program: {}", p.len());
            }
        }
    }

    #[test]
    fn reused_program_is_the_one_built_for_those_options() {
        let same = |a: &SeccompProgram, b: &SeccompProgram| {
            a.notify == b.notify
                && a.instructions.len() == b.instructions.len()
                && a.instructions
                    .iter()
                    .zip(&b.instructions)
                    .all(|(x, y)| (x.code, x.jt, x.jf, x.k) == (y.code, y.jt, y.jf, y.k))
        };
        for unix in [false, true] {
            for notify in [false, true] {
                let options = FilterOptions {
                    unix_sockets: unix,
                    inet_sockets: !unix,
                    notify,
                };
                let first = compile(options).expect("filter compiles");
                let again = compile(options).expect("filter compiles");
                let fresh = build(options).expect("filter compiles");
                assert!(same(&first, &again) && same(&first, &fresh));
            }
        }
        let a = compile(FilterOptions {
            unix_sockets: false,
            inet_sockets: false,
            notify: false,
        })
        .expect("filter compiles");
        let b = compile(FilterOptions {
            unix_sockets: true,
            inet_sockets: true,
            notify: true,
        })
        .expect("filter compiles");
        assert!(
            !same(&a, &b),
            "different options must give different programs"
        );
    }
}
