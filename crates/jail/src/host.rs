//! What this host can enforce, for `cordon doctor` and for error messages.

use serde::Serialize;

use crate::cgroup;
use crate::sys::{self, Forked};

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub ok: bool,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(detail: impl Into<String>) -> Check {
        Check {
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }
    fn missing(detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    pub kernel: String,
    pub uid: u32,
    pub user_namespaces: Check,
    pub seccomp: Check,
    pub landlock: Check,
    pub landlock_abi: u32,
    /// Whether this process can read Landlock's denials from the kernel's
    /// audit log (for incidents); optional, nothing is enforced by it.
    pub landlock_log: crate::LandlockLogState,
    pub cgroup: Check,
    pub cgroup_version: String,
    pub cgroup_support: cgroup::Support,
    pub mount_setattr: Check,
    pub overlayfs: Check,
    /// The isolation level `cordon run` gets with the default profile.
    pub isolation_level: String,
    /// Each limit and the mechanism that enforces it here.
    pub limits: Vec<(String, String)>,
    /// Who a sandbox started by this user is on the host (the uid and gid
    /// mapping) and what becomes of the caller's supplementary groups.
    pub identity: crate::identity::IdentityReport,
}

fn userns_check() -> Check {
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWNET;
    match sys::clone_sandbox(flags) {
        Ok(Forked::Child) => sys::exit_now(0),
        Ok(Forked::Parent { pid, .. }) => {
            let _ = sys::wait4(pid, 0);
            Check::ok("user, mount, PID and network namespaces can be created by this user")
        }
        Err(e) => Check::missing(
            format!("cannot create a user namespace: {e}"),
            crate::run::userns_fix(),
        ),
    }
}

fn seccomp_check() -> Check {
    // SAFETY: prctl(PR_GET_SECCOMP) only reads the calling thread's mode.
    let ret = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if ret < 0 {
        return Check::missing(
            "seccomp is not available",
            "use a kernel built with CONFIG_SECCOMP_FILTER=y",
        );
    }
    match crate::seccomp::compile(crate::seccomp::FilterOptions {
        unix_sockets: false,
        inet_sockets: false,
        notify: true,
        observe: false,
    }) {
        Ok(p) => Check::ok(format!(
            "seccomp-bpf, filter generated in-process; default filter {} instructions",
            p.len()
        )),
        Err(e) => Check::missing(e.to_string(), "report this as a bug in cordon"),
    }
}

fn mount_setattr_check() -> Check {
    // SAFETY: an invalid descriptor and NULL attributes: the call fails with
    // EBADF/EINVAL where it exists and ENOSYS where it does not.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1,
            std::ptr::null::<libc::c_char>(),
            0,
            0,
            0,
        )
    };
    let err = std::io::Error::last_os_error();
    if ret == -1 && err.raw_os_error() == Some(libc::ENOSYS) {
        Check::missing("mount_setattr(2) is missing", "use Linux 5.12 or newer")
    } else {
        Check::ok("mount_setattr(2) available (recursive read-only binds)")
    }
}

pub fn probe() -> HostReport {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let user_namespaces = userns_check();
    let abi = crate::landlock_rules::kernel_abi();
    let landlock = if abi > 0 {
        let mut what = vec!["filesystem"];
        if abi >= 4 {
            what.push("TCP bind/connect");
        }
        if abi >= 6 {
            what.push("abstract unix socket and signal scoping");
        }
        Check::ok(format!("ABI {abi}: {}", what.join(", ")))
    } else {
        Check::missing(
            "Landlock is not enabled in this kernel",
            "boot with CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= list",
        )
    };
    let support = cgroup::probe();
    let cgroup_check = if support.complete() {
        Check::ok(format!(
            "memory, pids{} via cgroup {}",
            if support.cpu.is_some() {
                ", cpu accounting"
            } else {
                ""
            },
            support.label()
        ))
    } else {
        Check::missing(
            format!(
                "cgroup limits unavailable: {}; rlimits are used instead",
                support.problems.join("; ")
            ),
            "run as root, or under `systemd-run --user --scope -p Delegate=yes` on cgroup v2",
        )
    };
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let overlayfs = if filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"))
    {
        Check::ok("overlay filesystem available")
    } else {
        Check::missing("overlayfs not loaded", "modprobe overlay")
    };
    let isolation_level = if user_namespaces.ok {
        "namespaces"
    } else if abi > 0 {
        "process (only if the profile sets isolation.allow_weaker = true)"
    } else {
        "none: cordon will refuse to run"
    }
    .to_owned();
    let mem = if support.memory.is_some() {
        "cgroup memory (swap included)"
    } else {
        "RLIMIT_AS"
    };
    let pids = if support.pids.is_some() {
        "cgroup pids.max"
    } else {
        "RLIMIT_NPROC"
    };
    let limits = vec![
        (
            "wall clock".into(),
            "supervisor deadline, SIGKILL to the PID namespace".into(),
        ),
        ("cpu time".into(), "RLIMIT_CPU".into()),
        ("memory".into(), mem.into()),
        ("processes".into(), pids.into()),
        ("open files".into(), "RLIMIT_NOFILE".into()),
        ("file size".into(), "RLIMIT_FSIZE".into()),
        ("/tmp".into(), "tmpfs size= and nr_inodes=".into()),
        (
            "output".into(),
            "supervisor counts and drops past the limit".into(),
        ),
    ];
    HostReport {
        kernel,
        uid: rustix::process::getuid().as_raw(),
        user_namespaces,
        seccomp: seccomp_check(),
        landlock,
        landlock_abi: abi,
        landlock_log: crate::kaudit::probe(),
        cgroup: cgroup_check,
        cgroup_version: support.label().to_owned(),
        cgroup_support: support,
        mount_setattr: mount_setattr_check(),
        overlayfs,
        isolation_level,
        limits,
        identity: crate::identity::probe(),
    }
}
