//! The filter's layout: which calls get which answer, in BPF.
//!
//! ```text
//!   arch != native                      -> KILL_PROCESS
//!   nr == -1                            -> ENOSYS   (x86_64: what the kernel answers)
//!   nr has the x32 bit                  -> KILL_PROCESS
//!   nr > highest number in the table    -> ENOSYS   (a newer kernel fails closed)
//!   ioctl / clone / socket / socketpair -> argument rules below
//!   clone3                              -> ENOSYS   (flags in memory; libc falls back to clone)
//!   a denied call                       -> refuse   (USER_NOTIF, or ERRNO(EPERM))
//!   an observed call (learn mode only)  -> USER_NOTIF (the supervisor lets it continue)
//!   anything else                       -> ALLOW
//! ```
//!
//! Only the number and the architecture decide until a call with argument
//! rules is reached, so the kernel's per-number cache of always-allowed
//! calls (Linux 5.11+) skips the filter for everything else.

use libc::sock_filter;

use super::bpf::{arg_low, Asm, Cmp, ARCH, NR};
use super::syscalls::{Arch, Syscall};
use super::{FilterOptions, DENIED_SYSCALLS, OBSERVED_SYSCALLS};

pub const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
pub const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
pub const NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;

pub const fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// The `clone` flags that create namespaces (all in the low 32 bits, the
/// only ones the kernel reads for clone(2)).
pub const CLONE_NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u32;

/// Terminal ioctls that inject input or reach the console (the request is
/// an `unsigned int`: the kernel ignores the high 32 bits, and so do we).
/// The generic ioctl numbers, the same on x86_64 and aarch64.
pub const DENIED_IOCTLS: [u32; 2] = [libc::TIOCSTI as u32, libc::TIOCLINUX as u32];

/// What `refuse` answers for the options.
pub fn refusal(options: FilterOptions) -> u32 {
    if options.notify {
        NOTIFY
    } else {
        errno(libc::EPERM)
    }
}

fn nr(arch: &Arch, call: Syscall) -> Result<u32, String> {
    arch.nr(call)
        .ok_or_else(|| format!("{} has no {} in the table", arch.name, call.name()))
}

/// The filter for `arch`.
pub fn program(options: FilterOptions, arch: &Arch) -> Result<Vec<sock_filter>, String> {
    if options.observe && !options.notify {
        return Err("observing calls needs user notification".into());
    }
    let mut a = Asm::default();
    let [kill, enosys, eperm, refuse, allow, observe] = [(); 6].map(|_| a.label());
    let [ioctl, clone, socket, socketpair] = [(); 4].map(|_| a.label());

    a.load(ARCH);
    a.jump_unless(Cmp::Eq, arch.audit, kill);
    a.load(NR);
    if let Some(bit) = arch.foreign_abi_bit {
        a.jump_if(Cmp::Eq, u32::MAX, enosys);
        a.jump_if(Cmp::Set, bit, kill);
    }
    a.jump_if(Cmp::Gt, arch.max_known(), enosys);
    a.jump_if(Cmp::Eq, nr(arch, Syscall::Ioctl)?, ioctl);
    a.jump_if(Cmp::Eq, nr(arch, Syscall::Clone)?, clone);
    a.jump_if(Cmp::Eq, nr(arch, Syscall::Socket)?, socket);
    a.jump_if(Cmp::Eq, nr(arch, Syscall::Socketpair)?, socketpair);
    a.jump_if(Cmp::Eq, nr(arch, Syscall::Clone3)?, enosys);
    // A denied call this architecture lacks is marked `absent` in the
    // table; nothing else is ever left out.
    for &call in DENIED_SYSCALLS {
        if let Some(n) = arch.nr(call) {
            a.jump_if(Cmp::Eq, n, refuse);
        }
    }
    if options.observe {
        for &call in OBSERVED_SYSCALLS {
            if let Some(n) = arch.nr(call) {
                a.jump_if(Cmp::Eq, n, observe);
            }
        }
    }
    a.ret(ALLOW);

    a.bind(ioctl);
    a.load(arg_low(1));
    for request in DENIED_IOCTLS {
        a.jump_if(Cmp::Eq, request, refuse);
    }
    a.ret(ALLOW);

    a.bind(clone);
    a.load(arg_low(0));
    a.jump_if(Cmp::Set, CLONE_NAMESPACE_FLAGS, refuse);
    if options.observe {
        // Learn mode counts threads where they are made.
        a.goto(observe);
    } else {
        a.ret(ALLOW);
    }

    // Socket families: everything not explicitly allowed is refused.
    a.bind(socket);
    a.load(arg_low(0));
    if options.unix_sockets {
        a.jump_if(Cmp::Eq, libc::AF_UNIX as u32, allow);
    }
    if options.inet_sockets {
        a.jump_if(Cmp::Eq, libc::AF_INET as u32, allow);
        a.jump_if(Cmp::Eq, libc::AF_INET6 as u32, allow);
    }
    a.goto(eperm);

    // socketpair only ever makes local pairs; allow AF_UNIX pairs only.
    a.bind(socketpair);
    a.load(arg_low(0));
    a.jump_unless(Cmp::Eq, libc::AF_UNIX as u32, eperm);
    a.ret(ALLOW);

    a.bind(allow);
    a.ret(ALLOW);
    a.bind(refuse);
    a.ret(refusal(options));
    a.bind(observe);
    a.ret(NOTIFY);
    a.bind(eperm);
    a.ret(errno(libc::EPERM));
    a.bind(enosys);
    a.ret(errno(libc::ENOSYS));
    a.bind(kill);
    a.ret(KILL);
    a.finish()
}
