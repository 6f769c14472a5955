//! Landlock as a second layer over the mounts: the same paths, the same
//! read/write split, plus TCP and scope restrictions where the kernel has
//! them. Applied by the workload process just before `execve`.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
    Scope, ABI,
};

/// The Landlock ABI version of the running kernel (0 when unavailable).
pub fn kernel_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag,
    // landlock_create_ruleset only returns the ABI version.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 0 {
        0
    } else {
        ret as u32
    }
}

/// One path rule.
#[derive(Debug, Clone)]
pub(crate) struct PathRule {
    pub path: PathBuf,
    pub access: PathAccess,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathAccess {
    /// Read and execute.
    ReadExec,
    /// Everything.
    Full,
    /// Read and write existing files, no creation (device nodes, /proc).
    ReadWriteFiles,
    /// List directories only.
    ListDir,
}

/// What was applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Applied {
    pub abi: u32,
    pub fully: bool,
}

/// A ruleset built and ready to be enforced, kept by a session's init and
/// enforced by each exec's workload on a duplicate of its descriptor: the
/// rules (one open and one `landlock_add_rule` per path) are made once,
/// not per exec.
pub(crate) struct Prepared {
    /// `None`: the kernel has no Landlock.
    created: Option<RulesetCreated>,
    /// The ruleset's descriptor number (the crate does not show it), which
    /// a process that enforces it later must keep open.
    fd: Option<std::os::fd::RawFd>,
}

impl Prepared {
    /// The ruleset's descriptor, which a process that enforces it later
    /// must keep open.
    pub(crate) fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.fd
    }

    /// Whether it can be kept for later: no ruleset at all (no Landlock on
    /// this kernel), or one whose descriptor is known.
    pub(crate) fn keepable(&self) -> bool {
        self.created.is_none() || self.fd.is_some()
    }

    /// Enforce the rules on the calling thread (it also sets
    /// no_new_privs). The prepared ruleset stays usable.
    pub(crate) fn restrict_self(&self) -> Result<Applied, String> {
        let Some(created) = &self.created else {
            return Ok(Applied {
                abi: 0,
                fully: false,
            });
        };
        let copy = created.try_clone().map_err(|e| e.to_string())?;
        enforce(copy)
    }
}

/// `restrict_tcp` handles TCP bind and connect; `connect_port` is then the
/// only port TCP may connect to (the proxy's).
pub(crate) fn apply(
    rules: &[PathRule],
    restrict_tcp: bool,
    connect_port: Option<u16>,
    log_denials: bool,
) -> Result<Applied, String> {
    match prepare(rules, restrict_tcp, connect_port, log_denials)?.created {
        Some(created) => enforce(created),
        None => Ok(Applied {
            abi: 0,
            fully: false,
        }),
    }
}

/// Build the ruleset of [`apply`] without enforcing it.
pub(crate) fn prepare(
    rules: &[PathRule],
    restrict_tcp: bool,
    connect_port: Option<u16>,
    log_denials: bool,
) -> Result<Prepared, String> {
    let kabi = kernel_abi();
    if kabi == 0 {
        return Ok(Prepared {
            created: None,
            fd: None,
        });
    }
    let abi = ABI::from(kabi as i32);
    let all = AccessFs::from_all(abi);
    let read_exec = AccessFs::from_read(abi);
    let rw_files: BitFlags<AccessFs> = (AccessFs::ReadFile
        | AccessFs::WriteFile
        | AccessFs::ReadDir
        | AccessFs::Truncate
        | AccessFs::IoctlDev)
        & all;

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| e.to_string())?;
    if restrict_tcp && kabi >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(|e| e.to_string())?;
    }
    if kabi >= 6 {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(|e| e.to_string())?;
    }
    // Denials by the workload (after its exec) reach the kernel's audit
    // log too, where the supervisor can read them (ABI 7+; best effort
    // below). They are only produced when the host has audit enabled.
    // The kernel gives a new descriptor the lowest free number and this
    // process is single-threaded (the sandbox's init, or a workload about
    // to exec), so the ruleset's number is the one free now.
    let fd = lowest_free_fd();
    let mut created = ruleset
        .create()
        .and_then(|c| c.log_new_exec(log_denials))
        .map_err(|e| e.to_string())?;
    for rule in rules {
        let access = match rule.access {
            PathAccess::ReadExec => read_exec,
            PathAccess::Full => all,
            PathAccess::ReadWriteFiles => rw_files,
            PathAccess::ListDir => BitFlags::from(AccessFs::ReadDir),
        };
        let fd = match PathFd::new(&rule.path) {
            Ok(fd) => fd,
            // A path that does not exist inside grants nothing.
            Err(_) if !Path::new(&rule.path).exists() => continue,
            Err(e) => return Err(format!("{}: {e}", rule.path.display())),
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("{}: {e}", rule.path.display()))?;
    }
    if let (true, true, Some(port)) = (restrict_tcp, kabi >= 4, connect_port) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(|e| format!("port {port}: {e}"))?;
    }
    // Checked: a number that is not the ruleset is never kept in its place.
    let fd = fd.filter(|fd| {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .is_ok_and(|l| l.as_os_str() == RULESET_LINK)
    });
    Ok(Prepared {
        created: Some(created),
        fd,
    })
}

/// What `/proc/self/fd/N` reads for a Landlock ruleset (the kernel names
/// the anonymous inode `[landlock-ruleset]`).
const RULESET_LINK: &str = "anon_inode:[landlock-ruleset]";

/// The lowest descriptor number not in use.
fn lowest_free_fd() -> Option<std::os::fd::RawFd> {
    use std::os::fd::AsRawFd;
    let probe = rustix::fs::open(
        "/",
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    Some(probe.as_raw_fd())
}

fn enforce(created: RulesetCreated) -> Result<Applied, String> {
    let status = created.restrict_self().map_err(|e| e.to_string())?;
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => effective_abi as u32,
        _ => 0,
    };
    match status.ruleset {
        RulesetStatus::NotEnforced => Ok(Applied {
            abi: 0,
            fully: false,
        }),
        RulesetStatus::PartiallyEnforced => Ok(Applied { abi, fully: false }),
        RulesetStatus::FullyEnforced => Ok(Applied { abi, fully: true }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's init prepares its workloads' ruleset once and keeps it
    /// by its descriptor number. When the number is not recognised as the
    /// ruleset (the name compared was once missing the kernel's brackets),
    /// nothing is kept and every exec builds its own ruleset again: about
    /// 60 system calls, path lookups among them.
    #[test]
    fn a_prepared_ruleset_is_kept_by_its_descriptor() {
        if kernel_abi() == 0 {
            assert!(
                std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_none(),
                "this kernel has no Landlock"
            );
            println!("SKIPPED: this kernel has no Landlock");
            return;
        }
        let rules = [PathRule {
            path: "/usr".into(),
            access: PathAccess::ReadExec,
        }];
        // Another test's thread may take the probed number first: the
        // number is then rightly not kept, so a few tries.
        let kept = (0..5).any(|_| {
            prepare(&rules, true, None, false).is_ok_and(|p| p.keepable() && p.raw_fd().is_some())
        });
        assert!(kept, "the prepared ruleset's descriptor is never kept");
    }
}
