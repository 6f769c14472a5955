//! The supervisor's side of `SECCOMP_RET_USER_NOTIF`: receive one call
//! from the listener and answer it with an error (a refused call) or let it
//! continue (an observed one, in learn mode).

use std::os::fd::RawFd;

/// One call the filter handed to the supervisor.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    pub id: u64,
    /// The caller, as seen from the supervisor's PID namespace.
    pub pid: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

/// Receive the next notification; `None` when there is none (the caller
/// died meanwhile, or the filter is gone).
pub fn receive(listener: RawFd) -> Option<Notification> {
    // SAFETY: an all-zero seccomp_notif is valid (plain integers), and the
    // kernel requires the buffer zeroed.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: SECCOMP_IOCTL_NOTIF_RECV writes one seccomp_notif into `req`,
    // which lives across the call.
    let ret = unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) };
    (ret == 0).then_some(Notification {
        id: req.id,
        pid: req.pid,
        nr: req.data.nr,
        args: req.data.args,
    })
}

/// Fail the notified call with `errno`. An answer to a caller that died
/// meanwhile fails with ENOENT, which is fine to ignore.
pub fn answer_error(listener: RawFd, id: u64, errno: i32) {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: -errno,
        flags: 0,
    };
    // SAFETY: SECCOMP_IOCTL_NOTIF_SEND reads one seccomp_notif_resp from
    // `resp`, which lives across the call.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
}

/// Let the notified call run as if the filter had allowed it
/// (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`, Linux 5.5). Only for observed
/// calls: the kernel runs it with whatever the caller's memory holds then.
pub fn answer_continue(listener: RawFd, id: u64) {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    // SAFETY: SECCOMP_IOCTL_NOTIF_SEND reads one seccomp_notif_resp from
    // `resp`, which lives across the call.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
}
