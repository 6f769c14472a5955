//! Landlock as a second layer over the mounts: the same paths, the same
//! read/write split, plus TCP and scope restrictions where the kernel has
//! them. Applied by the workload process just before `execve`.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
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

/// `restrict_tcp` handles TCP bind and connect; `connect_port` is then the
/// only port TCP may connect to (the proxy's).
pub(crate) fn apply(
    rules: &[PathRule],
    restrict_tcp: bool,
    connect_port: Option<u16>,
    log_denials: bool,
) -> Result<Applied, String> {
    let kabi = kernel_abi();
    if kabi == 0 {
        return Ok(Applied {
            abi: 0,
            fully: false,
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
