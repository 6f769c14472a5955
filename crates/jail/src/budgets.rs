//! Per-user kernel budgets that the kernel charges up the user-namespace
//! chain, to the caller who owns the sandbox's user namespace.
//!
//! Every object counted in a `struct ucounts` is charged at each level of
//! the chain: the sandbox's user in the sandbox's namespace, then the
//! namespace's owner (the caller) in the parent. Without a budget of its
//! own, one run can take all of its caller's allowance and every other
//! process of that user on the host gets `EMFILE`/`EAGAIN`. The counters of
//! Linux 6.18 and what cordon does with each:
//!
//! | counter | kind | budget |
//! |---|---|---|
//! | user, mnt, pid, net, ipc, uts, cgroup, time namespaces | `user.max_*_namespaces` | 0 in the sandbox's namespace |
//! | inotify instances, watches | `user.max_inotify_*` | [`KernelBudgets`] in the sandbox's namespace |
//! | fanotify groups, marks | `user.max_fanotify_*` | 0 in the sandbox's namespace (seccomp refuses `fanotify_init` too) |
//! | queued signals | `RLIMIT_SIGPENDING` | [`KernelBudgets::queued_signals`] |
//! | POSIX message-queue bytes | `RLIMIT_MSGQUEUE` | [`KernelBudgets::mqueue_bytes`] |
//! | processes | `RLIMIT_NPROC` | the pids limit (child.rs) |
//! | locked shared memory (`SHM_LOCK`, hugetlb) | `RLIMIT_MEMLOCK` | left at the caller's own limit: documented in the threat model |
//!
//! The namespace limits are written by the sandbox's init, which owns the
//! namespace, before `/proc/sys` is made read-only; a write that fails stops
//! the run (exit 125), so no limit is ever silently missing.

use std::os::fd::BorrowedFd;

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::error::{JailError, Result};
use crate::spec::Layer;

/// What one sandbox may charge to its caller's per-user kernel counters.
/// Concurrent runs of one caller add up: each has its own budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelBudgets {
    /// inotify instances (`user.max_inotify_instances` inside).
    pub inotify_instances: u64,
    /// inotify watches (`user.max_inotify_watches` inside).
    pub inotify_watches: u64,
    /// Signals queued to the sandbox's processes (`RLIMIT_SIGPENDING`).
    pub queued_signals: u64,
    /// Bytes of POSIX message queues (`RLIMIT_MSGQUEUE`).
    pub mqueue_bytes: u64,
}

impl Default for KernelBudgets {
    fn default() -> Self {
        KernelBudgets {
            inotify_instances: 16,
            inotify_watches: 8192,
            queued_signals: 256,
            mqueue_bytes: 128 << 10,
        }
    }
}

/// One limit of the sandbox's own user namespace (`/proc/sys/user/<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UserSysctl {
    pub name: &'static str,
    pub value: u64,
    /// The kernel always has this counter; kernels older than the counter
    /// (time namespaces 5.6, fanotify 5.13) have no file and nothing to
    /// charge.
    pub required: bool,
}

/// The limits written in the sandbox's user namespace.
pub(crate) fn user_sysctls(b: &KernelBudgets) -> Vec<UserSysctl> {
    let s = |name, value, required| UserSysctl {
        name,
        value,
        required,
    };
    vec![
        // No nested namespaces: seccomp refuses the calls as well.
        s("max_user_namespaces", 0, true),
        s("max_mnt_namespaces", 0, true),
        s("max_pid_namespaces", 0, true),
        s("max_net_namespaces", 0, true),
        s("max_ipc_namespaces", 0, true),
        s("max_uts_namespaces", 0, true),
        s("max_cgroup_namespaces", 0, true),
        s("max_time_namespaces", 0, false),
        s("max_inotify_instances", b.inotify_instances, false),
        s("max_inotify_watches", b.inotify_watches, false),
        s("max_fanotify_groups", 0, false),
        s("max_fanotify_marks", 0, false),
    ]
}

/// Write `limits` under `sys/user/` of the sandbox's /proc (`proc_root`),
/// as the owner of the sandbox's user namespace. Any failure is an error.
pub(crate) fn write_user_sysctls(proc_root: BorrowedFd<'_>, limits: &[UserSysctl]) -> Result<()> {
    for l in limits {
        let path = format!("sys/user/{}", l.name);
        let fd = match rustix::fs::openat(
            proc_root,
            path.as_str(),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) if !l.required => continue,
            Err(e) => return Err(sysctl_error(l, &e.into())),
        };
        let text = l.value.to_string();
        match rustix::io::write(&fd, text.as_bytes()) {
            Ok(n) if n == text.len() => {}
            Ok(n) => {
                return Err(sysctl_error(
                    l,
                    &std::io::Error::other(format!("short write ({n} of {} bytes)", text.len())),
                ))
            }
            Err(e) => return Err(sysctl_error(l, &e.into())),
        }
    }
    Ok(())
}

fn sysctl_error(l: &UserSysctl, e: &std::io::Error) -> JailError {
    JailError::setup(
        Layer::UserNamespace,
        format!(
            "cannot set user.{} = {} in the sandbox's user namespace: {e}",
            l.name, l.value
        ),
        Some("the sandbox's init must be able to write /proc/sys/user in its own user namespace (a kernel with CONFIG_USER_NS and CONFIG_SYSCTL; not /proc masked by a container runtime)"),
    )
}

/// The rlimit-counted budgets, lowered with `lower` (never raised).
pub(crate) fn apply_rlimits(
    b: &KernelBudgets,
    lower: impl Fn(crate::sys::RlimitResource, u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    lower(libc::RLIMIT_SIGPENDING, b.queued_signals)?;
    lower(libc::RLIMIT_MSGQUEUE, b.mqueue_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn dir_with(files: &[(&str, u32)]) -> (tempfile::TempDir, std::fs::File) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let user = dir.path().join("sys/user");
        std::fs::create_dir_all(&user).unwrap_or_else(|e| panic!("mkdir: {e}"));
        for (name, mode) in files {
            let p = user.join(name);
            std::fs::write(&p, "").unwrap_or_else(|e| panic!("write: {e}"));
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))
                .unwrap_or_else(|e| panic!("chmod: {e}"));
        }
        let fd = std::fs::File::open(dir.path()).unwrap_or_else(|e| panic!("open: {e}"));
        (dir, fd)
    }

    #[test]
    fn every_limit_is_written() {
        let limits = user_sysctls(&KernelBudgets::default());
        let files: Vec<(&str, u32)> = limits.iter().map(|l| (l.name, 0o644)).collect();
        let (dir, fd) = dir_with(&files);
        write_user_sysctls(fd.as_fd(), &limits).unwrap_or_else(|e| panic!("{e}"));
        for l in &limits {
            let text = std::fs::read_to_string(dir.path().join("sys/user").join(l.name))
                .unwrap_or_default();
            assert_eq!(text, l.value.to_string(), "{}", l.name);
        }
    }

    #[test]
    fn a_missing_required_limit_fails_closed() {
        // max_user_namespaces is missing: the run must not go on without it.
        let limits = user_sysctls(&KernelBudgets::default());
        let files: Vec<(&str, u32)> = limits
            .iter()
            .filter(|l| l.name != "max_user_namespaces")
            .map(|l| (l.name, 0o644))
            .collect();
        let (_dir, fd) = dir_with(&files);
        let err = write_user_sysctls(fd.as_fd(), &limits)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("user.max_user_namespaces = 0"), "{err}");
    }

    #[test]
    fn a_refused_write_fails_closed_and_only_an_absent_optional_counter_is_skipped() {
        let limits = [
            UserSysctl {
                name: "max_time_namespaces",
                value: 0,
                required: false,
            },
            UserSysctl {
                name: "max_inotify_instances",
                value: 16,
                required: false,
            },
        ];
        // The optional counter is absent (older kernel): skipped. The other
        // exists but cannot be written: refused, although it is optional.
        let (_dir, fd) = dir_with(&[("max_inotify_instances", 0o444)]);
        if rustix::process::geteuid().is_root() {
            // root writes through mode bits: make the write itself fail.
            let r = write_user_sysctls(
                fd.as_fd(),
                &[UserSysctl {
                    name: "max_inotify_instances/x",
                    value: 1,
                    required: false,
                }],
            );
            assert!(r.is_err(), "a path that cannot be opened was skipped");
            return;
        }
        let err = write_user_sysctls(fd.as_fd(), &limits)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("user.max_inotify_instances = 16"), "{err}");
    }
}
