//! Staged directories: an overlay filesystem over a host directory, mounted
//! in the sandbox's own user and mount namespaces with `userxattr`, so that
//! every write lands in a per-run upper directory and the host directory is
//! only ever read.
//!
//! The three directories are opened `O_PATH` without following symlinks
//! before the new root hides anything, and overlayfs is handed their
//! `/proc/self/fd/N` names, so nothing is looked up by name after it was
//! checked. `metacopy` and `redirect_dir` stay off (the kernel forces both
//! off with `userxattr`): every changed file is a complete file in the upper
//! layer and a renamed directory is a copy plus a whiteout, which is what
//! the change set reads.
//!
//! A directory staged as a copy ([`StageMode::Copy`], where overlayfs is
//! unavailable) is a plain writable bind of the copy (rootfs.rs).

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::OFlags;

use crate::error::{JailError, Result};
use crate::spec::{Layer, StageMode, StagedBind};
use crate::sys;

fn fs_err(message: String, fix: Option<&str>) -> JailError {
    JailError::setup(Layer::Filesystem, message, fix)
}

/// Check the staged directories on the supervisor side (before any fork).
pub(crate) fn check(staged: &[StagedBind]) -> Result<()> {
    for s in staged {
        for (what, path) in [("staged", &s.lower), ("upper", &s.upper), ("work", &s.work)] {
            let canonical = path.is_absolute()
                && !path
                    .components()
                    .any(|c| matches!(c, Component::ParentDir | Component::CurDir));
            if !canonical {
                return Err(JailError::InvalidSpec(format!(
                    "{}: {what} directory must be absolute and canonical",
                    path.display()
                )));
            }
            let meta = std::fs::symlink_metadata(path)
                .map_err(|e| fs_err(format!("{}: {e}", path.display()), None))?;
            if !meta.is_dir() {
                return Err(fs_err(
                    format!(
                        "{}: {what} directory must be a real directory (not a symlink or file)",
                        path.display()
                    ),
                    None,
                ));
            }
        }
        if s.lower == Path::new("/")
            || ["/proc", "/dev", "/sys"]
                .iter()
                .any(|r| s.lower.starts_with(r))
        {
            return Err(fs_err(
                format!("{}: this directory cannot be staged", s.lower.display()),
                Some("stage a project directory"),
            ));
        }
        if s.upper.starts_with(&s.lower) || s.work.starts_with(&s.lower) {
            return Err(fs_err(
                format!(
                    "{}: the staging area may not be inside the staged directory",
                    s.lower.display()
                ),
                Some("keep the state directory outside the staged tree"),
            ));
        }
    }
    Ok(())
}

/// The layers of one staged directory, opened before the root is built.
#[derive(Debug)]
pub(crate) struct Opened {
    lower: OwnedFd,
    upper: OwnedFd,
    work: OwnedFd,
}

fn open_dir(path: &Path) -> Result<OwnedFd> {
    crate::rootfs::open_host_path(path, OFlags::DIRECTORY)
}

/// Open every overlay-staged directory's layers (in the sandbox helper,
/// before the root tmpfs hides the host's /tmp).
pub(crate) fn open(staged: &[StagedBind]) -> Result<Vec<Opened>> {
    staged
        .iter()
        .filter(|s| s.mode == StageMode::Overlay)
        .map(|s| {
            Ok(Opened {
                lower: open_dir(&s.lower)?,
                upper: open_dir(&s.upper)?,
                work: open_dir(&s.work)?,
            })
        })
        .collect()
}

/// The mount options naming the layers by descriptor. `volatile`: no
/// sync of the upper filesystem when the sandbox's namespace goes (which
/// would flush every dirty page of the disk, tens of ms on a busy host);
/// the change set is read right after the run, and a stage left by a
/// crash is discarded like any other.
fn options(o: &Opened) -> CString {
    let p = |fd: BorrowedFd<'_>| sys::fd_path(fd).to_string_lossy().into_owned();
    // Decimal descriptor paths never contain NUL, ',' or ':'.
    CString::new(format!(
        "lowerdir={},upperdir={},workdir={},userxattr,volatile",
        p(o.lower.as_fd()),
        p(o.upper.as_fd()),
        p(o.work.as_fd())
    ))
    .unwrap_or_default()
}

/// Mount each staged directory at its own path under `root`: overlayfs,
/// nosuid, nodev. `target` creates and opens the mount point without
/// following symlinks.
pub(crate) fn mount(
    root: BorrowedFd<'_>,
    staged: &[StagedBind],
    opened: &[Opened],
    target: impl Fn(BorrowedFd<'_>, &Path) -> Result<OwnedFd>,
) -> Result<()> {
    let overlaid = staged.iter().filter(|s| s.mode == StageMode::Overlay);
    for (s, o) in overlaid.zip(opened) {
        let at = target(root, &s.lower)?;
        if crate::test_switch::off(crate::test_switch::Switch::Overlay) {
            return Err(fs_err(
                format!(
                    "{}: cannot mount the staging overlay: turned off by the test switch {}=overlay",
                    s.lower.display(),
                    crate::test_switch::VAR
                ),
                Some(STAGE_FIX),
            ));
        }
        sys::mount(
            Some(c"overlay"),
            &sys::fd_path(at.as_fd()),
            Some(c"overlay"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&options(o)),
        )
        .map_err(|e| {
            fs_err(
                format!(
                    "{}: cannot mount the staging overlay (overlayfs with userxattr in a user namespace): {e}",
                    s.lower.display()
                ),
                Some(STAGE_FIX),
            )
        })?;
    }
    Ok(())
}

/// What to do when overlayfs cannot be used.
pub const STAGE_FIX: &str = "staging needs overlayfs mountable in a user namespace (Linux 5.11+) and a state directory on a filesystem with user extended attributes (ext4, xfs, btrfs; tmpfs from 6.6); `cordon doctor` shows whether this host has both";

/// Whether the test switch makes overlayfs count as unavailable (always
/// false in release builds).
pub fn probe_switched_off() -> bool {
    crate::test_switch::off(crate::test_switch::Switch::Overlay)
}

/// Whether an overlay with `userxattr` can be mounted in a fresh user
/// namespace, with its upper layer under `dir` (which must exist and be
/// writable): `Ok(())`, or the reason it cannot.
pub fn probe(dir: &Path) -> std::result::Result<(), String> {
    probe_over(dir, None)
}

/// [`probe`] with `lower` (a canonical directory, only read) as the lower
/// layer, so that its filesystem is probed too; a path overlayfs's option
/// syntax cannot carry (`,`, `:`, `\`) probes with an empty lower layer.
pub fn probe_over(dir: &Path, lower: Option<&Path>) -> std::result::Result<(), String> {
    if probe_switched_off() {
        return Err(format!(
            "overlayfs is turned off by the test switch {}=overlay",
            crate::test_switch::VAR
        ));
    }
    let base = tempdir_in(dir)?;
    let lower = lower
        .filter(|l| !l.to_string_lossy().contains([',', ':', '\\']))
        .map_or_else(|| base.join("l"), Path::to_path_buf);
    let result = probe_in(&base, &lower);
    // overlayfs leaves a mode-0 `work/work` behind.
    let _ = std::fs::set_permissions(
        base.join("w").join("work"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    );
    let _ = std::fs::remove_dir_all(&base);
    result
}

fn tempdir_in(dir: &Path) -> std::result::Result<std::path::PathBuf, String> {
    let name = format!(".overlay-probe-{}", std::process::id());
    let base = dir.join(name);
    let _ = std::fs::remove_dir_all(&base);
    for sub in ["", "l", "u", "w", "m"] {
        std::fs::create_dir(base.join(sub))
            .map_err(|e| format!("{}: {e}", base.join(sub).display()))?;
    }
    Ok(base)
}

fn probe_in(base: &Path, lower: &Path) -> std::result::Result<(), String> {
    let data = CString::new(format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        lower.display(),
        base.join("u").display(),
        base.join("w").display()
    ))
    .map_err(|_| "path contains NUL".to_string())?;
    let target = CString::new(base.join("m").display().to_string())
        .map_err(|_| "path contains NUL".to_string())?;
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let code = sys::in_user_and_mount_ns(uid, gid, || {
        sys::mount(
            Some(c"overlay"),
            &target,
            Some(c"overlay"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&data),
        )
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
    })
    .map_err(|e| format!("cannot start the probe: {e}"))?;
    match code {
        0 => Ok(()),
        errno => Err(format!(
            "overlayfs with userxattr cannot be mounted in a user namespace here: {}",
            std::io::Error::from_raw_os_error(errno)
        )),
    }
}
