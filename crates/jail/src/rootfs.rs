//! The sandbox's filesystem: a fresh tmpfs root holding only what was
//! declared, built inside the new mount namespace and then made the root
//! with `pivot_root`.
//!
//! `Plan::new` runs on the supervisor side and checks every declared path,
//! so mistakes are reported before anything is forked. `Plan::build` runs in
//! the sandbox helper. It never resolves a name through a symlink: sources
//! are opened with `RESOLVE_NO_SYMLINKS`, mount points are created and
//! opened component by component with `O_NOFOLLOW` under the new root, and
//! every mount goes through `/proc/self/fd/N` of those descriptors.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags};

use crate::error::{JailError, Result};
use crate::etc;
use crate::overlay;
use crate::spec::{Layer, Spec, StageMode};
use crate::sys::{self, MountAttrs};

/// Host directories that hold programs and libraries, bound read-only (or
/// recreated as symlinks where the host has merged /usr).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Device nodes bound from the host.
const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Parts of /proc that expose or steer the host: made read-only.
const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// Parts of /proc hidden behind /dev/null: the kernel's memory and keys,
/// and every global file readable by root alone with no capability check
/// (physical-page state, the kernel heap, timers), which the sandbox must
/// not read even where it is host root (crate::identity).
const PROC_MASKED: &[&str] = &[
    "kcore",
    "keys",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "kpageflags",
    "kpagecount",
    "kpagecgroup",
    "slabinfo",
    "vmallocinfo",
    "pagetypeinfo",
    "kmsg",
];

/// Paths a declared bind may not cover: the sandbox builds these itself.
const RESERVED: &[&str] = &["/proc", "/dev", "/sys"];

/// A declared path, checked on the host: where, writable, a directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlannedBind {
    pub path: PathBuf,
    pub writable: bool,
    pub dir: bool,
}

/// Everything the helper needs to build the root, checked in advance.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    system_links: Vec<(PathBuf, PathBuf)>,
    system_binds: Vec<PlannedBind>,
    etc_files: Vec<(&'static str, String)>,
    etc_links: Vec<(PathBuf, PathBuf)>,
    etc_binds: Vec<PlannedBind>,
    user_binds: Vec<PlannedBind>,
    /// `size` and `nr_inodes` of /tmp and /dev/shm.
    tmp_size: String,
    tmp_inodes: String,
    files: Vec<crate::spec::FileOverlay>,
    user_sysctls: Vec<crate::budgets::UserSysctl>,
    staged: Vec<crate::spec::StagedBind>,
    /// Detached idmapped mounts for `user_binds` (crate::identity), or
    /// empty: the supervisor's descriptors, inherited by the init.
    idmapped: Vec<std::os::fd::RawFd>,
    /// A scratch tmpfs at this path (`Spec::workspace`), when no declared
    /// bind is there.
    workspace: Option<PathBuf>,
}

/// A declared bind, checked: an absolute, canonical path (no symlink),
/// not the host's root, not a path cordon builds itself, an existing
/// directory or regular file.
fn checked_user_bind(bind: &crate::spec::Bind) -> Result<PlannedBind> {
    let path = &bind.path;
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(JailError::InvalidSpec(format!(
            "{}: bind paths must be absolute and canonical",
            path.display()
        )));
    }
    if path == Path::new("/") {
        return Err(fs_err(
            "refusing to bind the whole host root into the sandbox".into(),
            Some("name the directories the command needs with --ro/--rw"),
        ));
    }
    if let Some(r) = RESERVED.iter().find(|r| path.starts_with(r)) {
        return Err(fs_err(
            format!(
                "{}: {r} is built by cordon and cannot be bound from the host",
                path.display()
            ),
            Some("remove this path from the profile or flags"),
        ));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| {
        fs_err(
            format!("{}: {e}", path.display()),
            Some("create the path on the host first, or remove it from --ro/--rw"),
        )
    })?;
    if meta.file_type().is_symlink() {
        return Err(JailError::InvalidSpec(format!(
            "{}: bind paths must be canonical (this is a symlink)",
            path.display()
        )));
    }
    if !(meta.is_dir() || meta.is_file()) {
        return Err(fs_err(
            format!(
                "{}: only directories and regular files can be bound",
                path.display()
            ),
            None,
        ));
    }
    Ok(PlannedBind {
        path: path.clone(),
        writable: bind.writable,
        dir: meta.is_dir(),
    })
}

/// The scratch workspace, where no declared bind is at its path: an
/// absolute path outside /, /tmp, /proc, /dev and /sys.
fn workspace(workspace: Option<&PathBuf>, user: &[PlannedBind]) -> Result<Option<PathBuf>> {
    let Some(w) = workspace else {
        return Ok(None);
    };
    if !w.is_absolute()
        || w == Path::new("/")
        || RESERVED.iter().any(|r| w.starts_with(r))
        || w.starts_with("/tmp")
    {
        return Err(fs_err(
            format!(
                "{}: the workspace must be an absolute path outside /, /tmp, /proc, /dev and /sys",
                w.display()
            ),
            None,
        ));
    }
    Ok((!user.iter().any(|b| b.path == *w)).then(|| w.clone()))
}

fn fs_err(message: String, fix: Option<&str>) -> JailError {
    JailError::setup(Layer::Filesystem, message, fix)
}

impl Plan {
    pub(crate) fn new(spec: &Spec) -> Result<Plan> {
        let mut plan = Plan {
            system_links: Vec::new(),
            system_binds: Vec::new(),
            etc_files: etc::synthesized(&spec.hostname),
            etc_links: Vec::new(),
            etc_binds: Vec::new(),
            user_binds: Vec::new(),
            files: spec.files.clone(),
            user_sysctls: crate::budgets::user_sysctls(&spec.limits.kernel),
            staged: spec.staged.clone(),
            idmapped: Vec::new(),
            tmp_size: spec.tmp_size.max(4096).to_string(),
            tmp_inodes: spec.tmp_inodes.max(16).to_string(),
            workspace: None,
        };
        plan.read_host_system()?;
        let mut user: Vec<PlannedBind> = Vec::new();
        for bind in &spec.binds {
            let planned = checked_user_bind(bind)?;
            // A later declaration of the same path wins (flags override profiles).
            user.retain(|b| b.path != planned.path);
            user.push(planned);
        }
        // Parents before children, so nested binds land on top.
        user.sort_by_key(|b| b.path.components().count());
        plan.workspace = workspace(spec.workspace.as_ref(), &user)?;
        plan.user_binds = user;
        overlay::check(&plan.staged)?;
        Ok(plan)
    }

    /// The host's system directories (bound read-only, or their symlinks
    /// copied) and the files of its /etc the sandbox sees.
    fn read_host_system(&mut self) -> Result<()> {
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => {
                    let target = std::fs::read_link(path)
                        .map_err(|e| fs_err(format!("{dir}: cannot read link: {e}"), None))?;
                    self.system_links.push((path.to_path_buf(), target));
                }
                Ok(m) if m.is_dir() => self.system_binds.push(PlannedBind {
                    path: path.to_path_buf(),
                    writable: false,
                    dir: true,
                }),
                _ => {}
            }
        }
        for name in etc::HOST_ETC {
            let path = Path::new("/etc").join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(&path) {
                        self.etc_links.push((path, target));
                    }
                }
                Ok(m) => self.etc_binds.push(PlannedBind {
                    path,
                    writable: false,
                    dir: m.is_dir(),
                }),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Paths bound from the host, for Landlock: (path, writable, is_dir).
    /// The declared binds' host paths, in the order they are mounted.
    /// Let the init make up to `n` PID namespaces (a session's execs each
    /// get one); every other nested namespace stays at 0.
    pub(crate) fn allow_pid_namespaces(&mut self, n: u64) {
        for s in &mut self.user_sysctls {
            if s.name == "max_pid_namespaces" {
                s.value = n;
            }
        }
    }

    /// The declared binds, checked on the host, parents first.
    pub(crate) fn user_binds(&self) -> &[PlannedBind] {
        &self.user_binds
    }

    /// Replace the declared binds (a session claimed from the pool: they
    /// were attached after the root was built), for Landlock.
    pub(crate) fn set_user_binds(&mut self, binds: Vec<PlannedBind>) {
        self.user_binds = binds;
    }

    /// Where overlay files given at claim time were placed (for Landlock;
    /// their contents stay out of the init's memory).
    pub(crate) fn set_file_paths(&mut self, paths: Vec<PathBuf>) {
        self.files = paths
            .into_iter()
            .map(|path| crate::spec::FileOverlay {
                path,
                contents: Vec::new(),
            })
            .collect();
    }

    pub(crate) fn user_bind_paths(&self) -> Vec<&Path> {
        self.user_binds.iter().map(|b| b.path.as_path()).collect()
    }

    /// Mount the declared binds from these detached trees (one per
    /// [`Plan::user_bind_paths`] entry) instead of cloning the host paths.
    pub(crate) fn use_idmapped(&mut self, fds: Vec<std::os::fd::RawFd>) {
        self.idmapped = fds;
    }

    /// The idmapped trees' descriptors, which the init must keep open.
    pub(crate) fn idmapped_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.idmapped.clone()
    }

    /// The supervisor's idmapped trees for the declared binds, with each
    /// bind's flags.
    fn take_idmapped(&self) -> Result<Vec<OwnedFd>> {
        self.user_binds
            .iter()
            .zip(&self.idmapped)
            .map(|(b, fd)| {
                let tree = crate::identity::take(*fd);
                set_attrs(tree.as_fd(), &b.path, bind_attrs(b), true)?;
                Ok(tree)
            })
            .collect()
    }

    /// Directories staged as a copy: the copy (`upper`) bound writable at
    /// the host directory's path.
    fn copy_binds(&self) -> Vec<PlannedBind> {
        self.staged
            .iter()
            .filter(|s| s.mode == StageMode::Copy)
            .map(|s| PlannedBind {
                path: s.lower.clone(),
                writable: true,
                dir: true,
            })
            .collect()
    }

    pub(crate) fn landlock_paths(&self) -> Vec<(PathBuf, bool, bool)> {
        let mut out: Vec<(PathBuf, bool, bool)> = self
            .system_binds
            .iter()
            .chain(&self.user_binds)
            .map(|b| (b.path.clone(), b.writable, b.dir))
            .collect();
        out.extend(self.staged.iter().map(|s| (s.lower.clone(), true, true)));
        out.extend(self.workspace.iter().map(|w| (w.clone(), true, true)));
        out.push((PathBuf::from("/etc"), false, true));
        out.extend(self.files.iter().map(|f| (f.path.clone(), false, false)));
        out
    }

    /// Build the root (in the sandbox helper, with the new namespaces).
    ///
    /// Every host source is cloned into a detached mount tree first, before
    /// anything is mounted, so nothing cordon mounts can show up in what a
    /// bind brings in. The new root is a tmpfs stacked on top of the old
    /// root itself (`/`): it has no name a declared path could meet, and
    /// absolute paths (`/proc/self/fd/N`) keep resolving in the host's tree
    /// until `pivot_root`. Gives the device numbers of its scratch tmpfs
    /// mounts.
    pub(crate) fn build(&self) -> Result<ScratchDevices> {
        // No mount event may propagate back to the host.
        sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
            .map_err(|e| fs_err(format!("cannot make mounts private: {e}"), None))?;

        let system = clone_all(&self.system_binds)?;
        let etc = clone_all(&self.etc_binds)?;
        // Root's declared paths come idmapped from the supervisor.
        let user = if self.idmapped.is_empty() {
            clone_all(&self.user_binds)?
        } else {
            self.take_idmapped()?
        };
        let dev = clone_all(&dev_nodes())?;
        let staged = overlay::open(&self.staged)?;
        let copies = self
            .copy_binds()
            .iter()
            .zip(self.staged.iter().filter(|s| s.mode == StageMode::Copy))
            .map(|(b, s)| clone_tree(open_host_path(&s.upper, OFlags::DIRECTORY)?.as_fd(), "", b))
            .collect::<Result<Vec<_>>>()?;

        let root = tmpfs(
            &[("size", "4m"), ("nr_inodes", "4096"), ("mode", "0755")],
            MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
            "/",
        )?;
        rustix::mount::move_mount(
            &root,
            "",
            rustix::fs::CWD,
            "/",
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
        .map_err(|e| fs_err(format!("cannot mount the new root: {e}"), None))?;
        let root = root.as_fd();

        for (link, target) in &self.system_links {
            symlink(root, link, target)?;
        }
        for (b, tree) in self.system_binds.iter().zip(system) {
            attach(root, b, tree)?;
        }
        self.build_etc(root, etc)?;
        let tmp = self.scratch_tmpfs("/tmp")?;
        let mut scratch_devices = ScratchDevices {
            tmp: device_of(&tmp),
            shm: None,
        };
        attach_dir(root, "tmp", tmp)?;
        scratch_devices.shm = self.build_dev(root, dev)?;
        if let Some(w) = &self.workspace {
            let scratch = self.scratch_tmpfs("workspace")?;
            let b = PlannedBind {
                path: w.clone(),
                writable: true,
                dir: true,
            };
            attach(root, &b, scratch)?;
        }
        for (b, tree) in self.user_binds.iter().zip(user) {
            attach(root, b, tree)?;
        }
        overlay::mount(root, &self.staged, &staged, |r, p| make_target(r, p, true))?;
        drop(staged);
        for (b, tree) in self.copy_binds().iter().zip(copies) {
            attach(root, b, tree)?;
        }
        let proc_dir = mkdir(root, "proc")?;
        self.place_files(root, proc_dir.as_fd())?;
        drop(proc_dir);
        build_proc(root, &self.user_sysctls)?;
        enter(root)?;
        Ok(scratch_devices)
    }

    /// `/etc`: the synthesized files, the host's links, and read-only
    /// clones of the host files programs need.
    fn build_etc(&self, root: BorrowedFd<'_>, trees: Vec<OwnedFd>) -> Result<()> {
        let etc_dir = mkdir(root, "etc")?;
        for (name, text) in &self.etc_files {
            write_file(etc_dir.as_fd(), name, text.as_bytes())?;
        }
        for (link, target) in &self.etc_links {
            match etc_name(link) {
                Some(name) => rustix::fs::symlinkat(target, &etc_dir, name).map_err(|e| {
                    fs_err(
                        format!("{}: cannot create symlink: {e}", link.display()),
                        None,
                    )
                })?,
                None => symlink(root, link, target)?,
            }
        }
        for (b, tree) in self.etc_binds.iter().zip(trees) {
            match etc_name(&b.path) {
                // A new name in the /etc cordon just made: one create and
                // one move_mount, no walk from the root.
                Some(name) if new_mount_point(etc_dir.as_fd(), name, b.dir)? => {
                    move_mount_onto(tree, etc_dir.as_fd(), name, &b.path)?
                }
                _ => attach(root, b, tree)?,
            }
        }
        Ok(())
    }

    /// A tmpfs with the spec's size and inode limits, for /tmp and /dev/shm.
    fn scratch_tmpfs(&self, what: &str) -> Result<OwnedFd> {
        tmpfs(
            &[
                ("size", &self.tmp_size),
                ("nr_inodes", &self.tmp_inodes),
                ("mode", "1777"),
            ],
            MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
            what,
        )
    }

    /// The overlay files, staged on `/proc` before procfs is mounted
    /// there: no declared path or overlay file can be under `/proc`.
    fn place_files(&self, root: BorrowedFd<'_>, proc_dir: BorrowedFd<'_>) -> Result<()> {
        place_overlay_files(root, &self.files, proc_dir, None)
    }

    /// The sandbox's /dev; gives the device number of its /dev/shm.
    fn build_dev(&self, root: BorrowedFd<'_>, nodes: Vec<OwnedFd>) -> Result<Option<u64>> {
        let dev = tmpfs(
            &[("size", "64k"), ("nr_inodes", "64"), ("mode", "0755")],
            MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NOEXEC,
            "/dev",
        )?;
        move_into(&dev, root, "dev", "/dev")?;
        for (name, tree) in DEV_NODES.iter().zip(nodes) {
            create_file(dev.as_fd(), name)?;
            move_mount_onto(tree, dev.as_fd(), name, &Path::new("/dev").join(name))?;
        }
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            rustix::fs::symlinkat(target, &dev, name)
                .map_err(|e| fs_err(format!("/dev/{name}: cannot create symlink: {e}"), None))?;
        }
        let shm = self.scratch_tmpfs("/dev/shm")?;
        let shm_device = device_of(&shm);
        attach_dir(dev.as_fd(), "shm", shm)?;
        // The /dev tmpfs itself is read-only; the nodes and /dev/shm are
        // separate mounts and keep their own flags.
        set_attrs(dev.as_fd(), Path::new("/dev"), readonly(), false)?;
        Ok(shm_device)
    }
}

/// The host's device nodes the sandbox gets, as binds.
fn dev_nodes() -> Vec<PlannedBind> {
    DEV_NODES
        .iter()
        .map(|n| PlannedBind {
            path: Path::new("/dev").join(n),
            writable: true,
            dir: false,
        })
        .collect()
}

/// Make the tree at `root` the sandbox's root: `pivot_root`, detach the
/// host's root, and make the new root read-only.
fn enter(root: BorrowedFd<'_>) -> Result<()> {
    rustix::process::fchdir(root).map_err(|e| fs_err(format!("chdir to new root: {e}"), None))?;
    rustix::process::pivot_root(".", ".").map_err(|e| {
        fs_err(
            format!("pivot_root failed: {e}"),
            Some("cordon cannot run from an initramfs root; run it on a normal root filesystem"),
        )
    })?;
    rustix::mount::unmount(".", rustix::mount::UnmountFlags::DETACH)
        .map_err(|e| fs_err(format!("cannot detach the old root: {e}"), None))?;
    rustix::process::chdir("/").map_err(|e| fs_err(format!("chdir /: {e}"), None))?;
    set_attrs(root, Path::new("/"), readonly(), false)
}

/// A new, detached tmpfs with `options` (`fsconfig` key/value pairs).
fn tmpfs(options: &[(&str, &str)], attrs: MountAttrFlags, what: &str) -> Result<OwnedFd> {
    let err = |e: rustix::io::Errno| {
        if e == rustix::io::Errno::NOSYS {
            fs_err(
                format!("{what}: this kernel lacks the new mount API (fsopen)"),
                Some("use Linux 5.12 or newer"),
            )
        } else {
            fs_err(format!("cannot mount the {what} tmpfs: {e}"), None)
        }
    };
    let fs = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).map_err(err)?;
    for (key, value) in options {
        rustix::mount::fsconfig_set_string(&fs, *key, *value).map_err(err)?;
    }
    rustix::mount::fsconfig_create(&fs).map_err(err)?;
    rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs).map_err(err)
}

/// Write the overlay files into a private tmpfs, bind each over its
/// target (read-only), then detach the tmpfs: only the binds remain. The
/// tmpfs is staged on `stage_dir`, an empty directory nothing else uses,
/// unmounted by `stage_path` (by its `/proc/self/fd` path when `None`).
fn place_overlay_files(
    root: BorrowedFd<'_>,
    files: &[crate::spec::FileOverlay],
    stage_dir: BorrowedFd<'_>,
    stage_path: Option<&std::ffi::CStr>,
) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    for f in files {
        if !f.path.is_absolute() || f.path.starts_with("/proc") || f.path.starts_with("/dev") {
            return Err(fs_err(
                format!(
                    "{}: overlay files need an absolute path outside /proc and /dev",
                    f.path.display()
                ),
                None,
            ));
        }
    }
    let total: usize = files.iter().map(|f| f.contents.len() + 4096).sum();
    let size = (total + 65536).to_string();
    let staging = tmpfs(
        &[("size", &size), ("mode", "0755")],
        MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOEXEC,
        "the overlay files' staging area",
    )?;
    for (i, f) in files.iter().enumerate() {
        write_file(staging.as_fd(), &format!("f{i}"), &f.contents)?;
    }
    // Clones are taken from attached mounts only (before Linux 6.15).
    rustix::mount::move_mount(
        &staging,
        "",
        stage_dir,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| fs_err(format!("cannot mount the staging tmpfs: {e}"), None))?;
    for (i, f) in files.iter().enumerate() {
        let b = PlannedBind {
            path: f.path.clone(),
            writable: false,
            dir: false,
        };
        let tree = clone_tree(staging.as_fd(), &format!("f{i}"), &b)?;
        attach(root, &b, tree)?;
    }
    let by_fd = sys::fd_path(staging.as_fd());
    rustix::mount::unmount(
        stage_path.unwrap_or(by_fd.as_c_str()),
        rustix::mount::UnmountFlags::DETACH,
    )
    .map_err(|e| fs_err(format!("cannot detach the staging tmpfs: {e}"), None))
}

/// Attach `trees` (detached copies of `binds`, in order) into the root of
/// the current mount namespace, which is a built sandbox's: the root is
/// writable only while the mount points are made.
pub(crate) fn attach_late(
    binds: &[PlannedBind],
    trees: Vec<OwnedFd>,
    files: &[crate::spec::FileOverlay],
) -> Result<()> {
    let root = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fs_err(format!("cannot open the sandbox's root: {e}"), None))?;
    sys::mount_clear_rdonly(root.as_fd()).map_err(|e| {
        fs_err(
            format!("cannot make the sandbox's root writable: {e}"),
            None,
        )
    })?;
    // The bind's flags on every tree (idmapped ones come without them).
    let attached = binds
        .iter()
        .zip(trees)
        .try_for_each(|(b, tree)| {
            set_attrs(tree.as_fd(), &b.path, bind_attrs(b), true)?;
            attach(root.as_fd(), b, tree)
        })
        .and_then(|()| place_files_late(root.as_fd(), files));
    set_attrs(root.as_fd(), Path::new("/"), readonly(), false)?;
    attached
}

/// Overlay files given at claim time: staged in a directory with a random
/// name in the (briefly writable) root, which is gone again before the
/// claim ends (no command runs in the sandbox before that).
fn place_files_late(root: BorrowedFd<'_>, files: &[crate::spec::FileOverlay]) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let mut b = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    let name = format!(".cordon-stage-{:016x}", u64::from_le_bytes(b));
    let dir = mkdir(root, &name)?;
    let path = std::ffi::CString::new(format!("/{name}"))
        .map_err(|e| fs_err(format!("staging path: {e}"), None))?;
    let placed = place_overlay_files(root, files, dir.as_fd(), Some(&path));
    drop(dir);
    let removed = rustix::fs::unlinkat(root, name.as_str(), rustix::fs::AtFlags::REMOVEDIR)
        .map_err(|e| {
            fs_err(
                format!("/{name}: cannot remove the staging directory: {e}"),
                None,
            )
        });
    placed.and(removed)
}

/// Detached copies of each bind's source with the bind's flags already
/// set, opened without following any symlink.
pub(crate) fn clone_all(binds: &[PlannedBind]) -> Result<Vec<OwnedFd>> {
    let sources: Vec<&Path> = binds.iter().map(|b| b.path.as_path()).collect();
    clone_all_from(&sources, binds)
}

/// Like [`clone_all`] with each bind's tree taken from its own host path
/// (`sources[i]` for `binds[i]`).
pub(crate) fn clone_all_from(sources: &[&Path], binds: &[PlannedBind]) -> Result<Vec<OwnedFd>> {
    sources
        .iter()
        .zip(binds)
        .map(|(src, b)| clone_tree(open_host_path(src, OFlags::empty())?.as_fd(), "", b))
        .collect()
}

/// Refuse a live bind whose mount point the sandbox could move: every
/// directory above it that exists must be on a read-only mount inside the
/// sandbox (nothing there can be renamed or replaced by a symlink), so the
/// path still names the mount when it is detached. Run in the sandbox's
/// mount namespace.
pub(crate) fn check_live_target(path: &Path) -> Result<()> {
    let refuse = |why: String| {
        fs_err(
            format!("{}: {why}", path.display()),
            Some("give a sandbox path outside the trees the sandbox can write (/tmp, /workspace, writable binds), e.g. /mnt/NAME"),
        )
    };
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(refuse("not an absolute path without . or ..".into()));
    }
    let top = path.components().nth(1).map(|c| c.as_os_str().to_owned());
    if matches!(
        top.as_deref().and_then(|t| t.to_str()),
        Some("proc" | "dev" | "sys") | None
    ) {
        return Err(refuse("not a path a host directory may be bound at".into()));
    }
    let root = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fs_err(format!("cannot open the sandbox's root: {e}"), None))?;
    for dir in path.ancestors().skip(1).filter(|d| *d != Path::new("/")) {
        let opened = rustix::fs::openat2(
            &root,
            relative(dir),
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH,
        );
        let fd = match opened {
            Ok(fd) => fd,
            // Made by cordon, in the read-only directory above.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(refuse(format!("{}: {e}", dir.display()))),
        };
        let st = rustix::fs::fstatvfs(&fd)
            .map_err(|e| refuse(format!("cannot inspect {}: {e}", dir.display())))?;
        if !st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
            return Err(refuse(format!(
                "{} is writable inside the sandbox, so the sandbox could move the mount point away before the grant ends",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Detach the mount at `path` (a live bind; see [`check_live_target`] for
/// why the path still names it). Run in the sandbox's mount namespace.
pub(crate) fn detach_late(path: &Path) -> Result<()> {
    rustix::mount::unmount(
        path,
        rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
    )
    .map_err(|e| fs_err(format!("cannot unmount {}: {e}", path.display()), None))
}

/// Open a host path `O_PATH` (plus `extra`) without following any symlink
/// on the way.
pub(crate) fn open_host_path(path: &Path, extra: OFlags) -> Result<OwnedFd> {
    rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW | extra,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| {
        fs_err(
            format!(
                "{}: cannot open without following symlinks: {e}",
                path.display()
            ),
            Some("the path must not contain symlinks; name its real location"),
        )
    })
}

/// `open_tree(OPEN_TREE_CLONE)` of `name` under `at` (itself when empty),
/// with every mount below it, then the bind's flags on the copy.
fn clone_tree(at: BorrowedFd<'_>, name: &str, b: &PlannedBind) -> Result<OwnedFd> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_RECURSIVE
        | OpenTreeFlags::AT_SYMLINK_NOFOLLOW;
    if name.is_empty() {
        flags |= OpenTreeFlags::AT_EMPTY_PATH;
    }
    let tree = rustix::mount::open_tree(at, name, flags)
        .map_err(|e| fs_err(format!("cannot copy {}: {e}", b.path.display()), None))?;
    set_attrs(tree.as_fd(), &b.path, bind_attrs(b), true)?;
    Ok(tree)
}

/// The flags of a bind: read-only unless writable; never setuid; device
/// files only under /dev.
fn bind_attrs(b: &PlannedBind) -> MountAttrs {
    let dev = b.path.starts_with("/dev");
    if b.writable {
        MountAttrs {
            rdonly: false,
            nosuid: true,
            nodev: !dev,
            noexec: false,
        }
    } else {
        MountAttrs {
            nodev: !dev,
            ..readonly()
        }
    }
}

/// Attach a prepared tree at `b.path` under `root`, creating the mount
/// point component by component without following symlinks.
fn attach(root: BorrowedFd<'_>, b: &PlannedBind, tree: OwnedFd) -> Result<()> {
    let target = make_target(root, &b.path, b.dir)?;
    move_mount_onto(tree, target.as_fd(), "", &b.path)
}

/// Attach a tree on a new directory `name` in a directory cordon made.
/// The device numbers of the sandbox's own scratch tmpfs mounts. At the
/// end of a run only these are looked at for a full or limit-sized file:
/// a declared path over /tmp (a working directory of /tmp, `--ro /tmp`)
/// brings the host's files there, which are neither the sandbox's nor
/// for it to walk.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ScratchDevices {
    pub tmp: Option<u64>,
    pub shm: Option<u64>,
}

/// The device number of the filesystem a mount tree's root is on.
fn device_of(tree: &OwnedFd) -> Option<u64> {
    rustix::fs::fstat(tree).ok().map(|st| st.st_dev)
}

fn attach_dir(parent: BorrowedFd<'_>, name: &str, tree: OwnedFd) -> Result<()> {
    mkdir(parent, name)?;
    move_mount_onto(tree, parent, name, Path::new(name))
}

/// Like [`attach_dir`] for a tree the caller keeps using.
fn move_into(tree: &OwnedFd, parent: BorrowedFd<'_>, name: &str, what: &str) -> Result<()> {
    rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755))
        .map_err(|e| fs_err(format!("{what}: cannot create mount point: {e}"), None))?;
    rustix::mount::move_mount(
        tree,
        "",
        parent,
        name,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| fs_err(format!("cannot mount {what}: {e}"), None))
}

/// `move_mount` of a detached tree onto `name` under `at` (`at` itself
/// when empty). `name` is only ever a single component in a directory
/// cordon created, so no symlink can be on the way.
fn move_mount_onto(tree: OwnedFd, at: BorrowedFd<'_>, name: &str, what: &Path) -> Result<()> {
    let mut flags = MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH;
    if name.is_empty() {
        flags |= MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH;
    }
    rustix::mount::move_mount(&tree, "", at, name, flags)
        .map_err(|e| fs_err(format!("cannot bind {}: {e}", what.display()), None))
}

/// Create directory `name` in a directory cordon made and open it.
fn mkdir(parent: BorrowedFd<'_>, name: &str) -> Result<OwnedFd> {
    rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755))
        .map_err(|e| fs_err(format!("/{name}: cannot create: {e}"), None))?;
    rustix::fs::openat(
        parent,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| fs_err(format!("/{name}: cannot open: {e}"), None))
}

/// The name of a path directly in /etc.
fn etc_name(path: &Path) -> Option<&str> {
    (path.parent() == Some(Path::new("/etc")))
        .then(|| path.file_name().and_then(|n| n.to_str()))
        .flatten()
}

/// Create the mount point `name` (a directory when `dir`) in a directory
/// cordon made; false when the name is already taken.
fn new_mount_point(parent: BorrowedFd<'_>, name: &str, dir: bool) -> Result<bool> {
    let made = if dir {
        rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755))
    } else {
        rustix::fs::openat(
            parent,
            name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o644),
        )
        .map(drop)
    };
    match made {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(e) => Err(fs_err(
            format!("{name}: cannot create mount point: {e}"),
            None,
        )),
    }
}

/// Create an empty file `name` in a directory cordon made (a mount point).
fn create_file(parent: BorrowedFd<'_>, name: &str) -> Result<()> {
    match new_mount_point(parent, name, false)? {
        true => Ok(()),
        false => Err(fs_err(
            format!("{name}: cannot create mount point: it exists"),
            None,
        )),
    }
}

fn readonly() -> MountAttrs {
    MountAttrs {
        rdonly: true,
        nosuid: true,
        nodev: true,
        noexec: false,
    }
}

fn relative(path: &Path) -> &Path {
    path.strip_prefix("/").unwrap_or(path)
}

/// Open an existing path under `root` (crossing mount points, never
/// symlinks).
fn reopen(root: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        relative(path),
        OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH,
    )
    .map_err(|e| {
        fs_err(
            format!("{}: cannot reopen mount point: {e}", path.display()),
            None,
        )
    })
}

/// Create (if needed) and open the mount point for `path` under `root`,
/// one component at a time, refusing symlinks.
fn make_target(root: BorrowedFd<'_>, path: &Path, dir: bool) -> Result<OwnedFd> {
    let rel = relative(path);
    let comps: Vec<&std::ffi::OsStr> = rel.iter().collect();
    let mut cur: Option<OwnedFd> = None;
    for (i, comp) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        let parent = cur.as_ref().map_or(root, |f| f.as_fd());
        let want_dir = !last || dir;
        let flags = OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let open = |p: BorrowedFd<'_>| {
            rustix::fs::openat2(
                p,
                *comp,
                if want_dir {
                    flags | OFlags::DIRECTORY
                } else {
                    flags
                },
                Mode::empty(),
                ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
            )
        };
        let fd = match open(parent) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                let created = if want_dir {
                    rustix::fs::mkdirat(parent, *comp, Mode::from_raw_mode(0o755))
                } else {
                    rustix::fs::openat(
                        parent,
                        *comp,
                        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                        Mode::from_raw_mode(0o644),
                    )
                    .map(drop)
                };
                created.map_err(|e| {
                    fs_err(
                        format!("{}: cannot create mount point: {e}", path.display()),
                        Some("a path nested in a read-only bind must already exist on the host"),
                    )
                })?;
                open(parent).map_err(|e| fs_err(format!("{}: {e}", path.display()), None))?
            }
            Err(rustix::io::Errno::LOOP) | Err(rustix::io::Errno::NOTDIR) | Err(rustix::io::Errno::XDEV) => {
                return Err(fs_err(
                    format!(
                        "{}: a component of the mount point is a symlink or not a directory; refusing to follow it",
                        path.display()
                    ),
                    Some("remove the symlink from the bound directory, or bind the path it points to"),
                ))
            }
            Err(e) => return Err(fs_err(format!("{}: {e}", path.display()), None)),
        };
        cur = Some(fd);
    }
    cur.ok_or_else(|| fs_err(format!("{}: empty mount point", path.display()), None))
}

fn set_attrs(fd: BorrowedFd<'_>, path: &Path, attrs: MountAttrs, recursive: bool) -> Result<()> {
    use crate::test_switch::{off, Switch};
    let attrs = MountAttrs {
        rdonly: attrs.rdonly && !off(Switch::MountRo),
        nosuid: attrs.nosuid && !off(Switch::Nosuid),
        ..attrs
    };
    sys::mount_setattr(fd, attrs, recursive).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOSYS) {
            fs_err(
                format!(
                    "{}: this kernel lacks mount_setattr(2), needed for recursive read-only mounts",
                    path.display()
                ),
                Some("use Linux 5.12 or newer"),
            )
        } else {
            fs_err(
                format!("{}: cannot set mount flags: {e}", path.display()),
                None,
            )
        }
    })
}

fn symlink(root: BorrowedFd<'_>, link: &Path, target: &Path) -> Result<()> {
    let parent = link.parent().unwrap_or(Path::new("/"));
    let name = link
        .file_name()
        .ok_or_else(|| fs_err(format!("{}: bad link", link.display()), None))?;
    let dir = if parent == Path::new("/") {
        None
    } else {
        Some(make_target(root, parent, true)?)
    };
    let at = dir.as_ref().map_or(root, |d| d.as_fd());
    // An O_PATH directory descriptor is a valid base for *at() calls.
    rustix::fs::symlinkat(target, at, name).map_err(|e| {
        fs_err(
            format!("{}: cannot create symlink: {e}", link.display()),
            None,
        )
    })
}

fn write_file(dir: BorrowedFd<'_>, name: &str, data: &[u8]) -> Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| fs_err(format!("/etc/{name}: {e}"), None))?;
    let mut rest = data;
    while !rest.is_empty() {
        let n =
            rustix::io::write(&fd, rest).map_err(|e| fs_err(format!("/etc/{name}: {e}"), None))?;
        rest = &rest[n..];
    }
    Ok(())
}

/// A fresh /proc for the sandbox's PID namespace, with the parts that reach
/// the host made read-only or hidden.
fn build_proc(root: BorrowedFd<'_>, user_sysctls: &[crate::budgets::UserSysctl]) -> Result<()> {
    let proc_dir = make_target(root, Path::new("/proc"), true)?;
    sys::mount(
        Some(c"proc"),
        &sys::fd_path(proc_dir.as_fd()),
        Some(c"proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(|e| {
        fs_err(
            format!("cannot mount /proc: {e}"),
            Some("inside a container, /proc must not be partly masked for nested sandboxes (e.g. docker --security-opt systempaths=unconfined)"),
        )
    })?;
    drop(proc_dir);
    let proc_root = reopen(root, Path::new("/proc"))?;

    // The sandbox's own user namespace: no nested namespaces (seccomp
    // refuses them too) and small per-user budgets, before /proc/sys is
    // made read-only.
    crate::budgets::write_user_sysctls(proc_root.as_fd(), user_sysctls)?;

    for name in PROC_READ_ONLY {
        let path = Path::new("/proc").join(name);
        let Ok(fd) = rustix::fs::openat2(
            proc_root.as_fd(),
            *name,
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
        ) else {
            continue;
        };
        let p = sys::fd_path(fd.as_fd());
        sys::mount(Some(&p), &p, None, libc::MS_BIND | libc::MS_REC, None)
            .map_err(|e| fs_err(format!("cannot protect {}: {e}", path.display()), None))?;
        drop(fd);
        let mounted = reopen(root, &path)?;
        set_attrs(
            mounted.as_fd(),
            &path,
            MountAttrs {
                noexec: true,
                ..readonly()
            },
            true,
        )?;
    }
    let null = reopen(root, Path::new("/dev/null"))?;
    let null_path = sys::fd_path(null.as_fd());
    for name in PROC_MASKED {
        let Ok(fd) = rustix::fs::openat2(
            proc_root.as_fd(),
            *name,
            OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
        ) else {
            continue;
        };
        if rustix::fs::fstat(&fd)
            .map(|s| s.st_mode & libc::S_IFMT != libc::S_IFREG)
            .unwrap_or(true)
        {
            continue;
        }
        sys::mount(
            Some(&null_path),
            &sys::fd_path(fd.as_fd()),
            None,
            libc::MS_BIND,
            None,
        )
        .map_err(|e| fs_err(format!("cannot mask /proc/{name}: {e}"), None))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Bind;

    fn spec_with(binds: Vec<Bind>) -> Spec {
        let mut s = Spec::new(vec!["true".into()], PathBuf::from("/"));
        s.binds = binds;
        s
    }

    #[test]
    fn refuses_root_and_reserved_paths() {
        for p in ["/", "/proc", "/dev/sda", "/sys/kernel"] {
            let err = Plan::new(&spec_with(vec![Bind {
                path: p.into(),
                writable: false,
            }]))
            .expect_err(p);
            assert!(
                err.to_string().contains("filesystem") || err.to_string().contains("invalid"),
                "{err}"
            );
        }
    }

    #[test]
    fn refuses_relative_and_missing_paths() {
        assert!(Plan::new(&spec_with(vec![Bind {
            path: "relative/x".into(),
            writable: false
        }]))
        .is_err());
        let err = Plan::new(&spec_with(vec![Bind {
            path: "/definitely/not/here".into(),
            writable: false,
        }]))
        .expect_err("missing path");
        assert!(err.to_string().contains("create the path"), "{err}");
    }

    /// Each refusal of a declared path, and of a workspace, names its
    /// reason.
    #[test]
    fn each_refused_path_says_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).expect("symlink");
        let socket = dir.path().join("socket");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("socket");
        let dotdot = dir.path().join("..").join("x");
        for (path, why) in [
            (PathBuf::from("/"), "refusing to bind the whole host root"),
            (PathBuf::from("/proc/self"), "/proc is built by cordon"),
            (PathBuf::from("/dev/shm"), "/dev is built by cordon"),
            (dotdot, "bind paths must be absolute and canonical"),
            (link, "must be canonical (this is a symlink)"),
            (socket, "only directories and regular files can be bound"),
        ] {
            let err = Plan::new(&spec_with(vec![Bind {
                path: path.clone(),
                writable: false,
            }]))
            .expect_err(&path.display().to_string());
            assert!(err.to_string().contains(why), "{}: {err}", path.display());
        }
        for workspace in ["/tmp/work", "work", "/", "/sys/x"] {
            let mut spec = spec_with(Vec::new());
            spec.workspace = Some(PathBuf::from(workspace));
            let err = Plan::new(&spec).expect_err(workspace);
            assert!(
                err.to_string()
                    .contains("the workspace must be an absolute path outside"),
                "{workspace}: {err}"
            );
        }
    }

    #[test]
    fn nested_binds_mount_parents_first_and_last_flag_wins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inner = dir.path().join("a/b");
        std::fs::create_dir_all(&inner).expect("mkdir");
        let plan = Plan::new(&spec_with(vec![
            Bind {
                path: inner.clone(),
                writable: true,
            },
            Bind {
                path: dir.path().to_path_buf(),
                writable: false,
            },
            Bind {
                path: inner.clone(),
                writable: false,
            },
        ]))
        .expect("plan");
        assert_eq!(plan.user_binds.len(), 2);
        assert_eq!(plan.user_binds[0].path, dir.path());
        assert_eq!(plan.user_binds[1].path, inner);
        assert!(!plan.user_binds[1].writable);
    }
}
