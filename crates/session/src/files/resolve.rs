//! Lookups under the sandbox's root: `openat2` with `RESOLVE_IN_ROOT |
//! RESOLVE_NO_MAGICLINKS`, always from the root descriptor.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::{FilesError, FilesErrorKind, SandboxPath};

/// The resolution every lookup uses: `..` and absolute symlinks stay in
/// the sandbox's root; `/proc/N/root`, `/proc/N/fd/M` and the like are
/// refused.
const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// Tries of one lookup that the kernel asks to repeat (`EAGAIN`: a rename
/// raced with `RESOLVE_IN_ROOT`).
const RETRIES: usize = 16;

/// Filesystems the API never reads or writes: kernel interfaces, not
/// files (`statfs(2)` magic numbers).
const KERNEL_FILESYSTEMS: &[(u64, &str)] = &[
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
    (0x6265_6570, "configfs"),
    (0x1cd1, "devpts"),
    (0x1980_0202, "mqueue"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x4341_5d53, "smackfs"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x6573_5543, "fusectl"),
];

/// The sandbox's root directory, as a descriptor.
#[derive(Debug)]
pub struct SandboxRoot {
    fd: OwnedFd,
    resolve: ResolveFlags,
}

/// What a path names.
#[derive(Debug)]
pub enum Node {
    File {
        file: std::fs::File,
        size: u64,
    },
    /// A directory, opened for reading (listing, tar).
    Dir(OwnedFd),
}

impl SandboxRoot {
    /// `fd`: the sandbox's root (`Session::open_root`), or any directory
    /// that stands for one.
    pub fn new(fd: OwnedFd) -> SandboxRoot {
        SandboxRoot {
            fd,
            resolve: RESOLVE,
        }
    }

    /// The same root looked up without `RESOLVE_IN_ROOT |
    /// RESOLVE_NO_MAGICLINKS`: what the tests show escaping.
    #[cfg(test)]
    pub(crate) fn naive(fd: OwnedFd) -> SandboxRoot {
        SandboxRoot {
            fd,
            resolve: ResolveFlags::empty(),
        }
    }

    /// Open `rel` (relative to the root) with `flags`.
    pub(crate) fn lookup(&self, path: &SandboxPath, flags: OFlags) -> Result<OwnedFd, FilesError> {
        let rel = path.relative();
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(
                &self.fd,
                rel.as_str(),
                flags | OFlags::CLOEXEC | OFlags::NOCTTY,
                Mode::empty(),
                self.resolve,
            ) {
                Ok(fd) => return Ok(fd),
                Err(Errno::AGAIN) if tries < RETRIES => tries += 1,
                Err(e) => return Err(errno(e, path, "open")),
            }
        }
    }

    /// Open what `path` names: a regular file or a directory.
    pub fn open(&self, path: &SandboxPath) -> Result<Node, FilesError> {
        // O_NONBLOCK: a fifo the workload planted cannot hold the open.
        let fd = self.lookup(path, OFlags::RDONLY | OFlags::NONBLOCK)?;
        check_filesystem(fd.as_fd(), path)?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| errno(e, path, "stat"))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Ok(Node::File {
                file: std::fs::File::from(fd),
                size: stat.st_size.try_into().unwrap_or(0),
            }),
            FileType::Directory => Ok(Node::Dir(fd)),
            other => Err(FilesError::new(
                FilesErrorKind::Conflict,
                format!("{path} is a {other:?}, not a regular file or a directory"),
            )),
        }
    }

    /// The directory `path`, made (with its missing parents, like `mkdir
    /// -p`) when `create`.
    pub(crate) fn dir(&self, path: &SandboxPath, create: bool) -> Result<OwnedFd, FilesError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        match self.lookup(path, flags) {
            Ok(fd) => {
                check_filesystem(fd.as_fd(), path)?;
                return Ok(fd);
            }
            Err(e) if create && e.kind == FilesErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Walk down from the root; each missing directory is made in its
        // parent's descriptor (one name, nothing to resolve) and looked up
        // again from the root.
        let mut at = SandboxPath::parse("/")?;
        let mut parent = self.lookup(&at, flags)?;
        for name in path.names() {
            at = SandboxPath::parse(&format!("{at}/{name}"))?;
            parent = match self.lookup(&at, flags) {
                Ok(fd) => fd,
                Err(e) if e.kind == FilesErrorKind::NotFound => {
                    check_filesystem(parent.as_fd(), &at)?;
                    match rustix::fs::mkdirat(&parent, name.as_str(), Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(errno(e, &at, "make the directory")),
                    }
                    self.lookup(&at, flags)?
                }
                Err(e) => return Err(e),
            };
        }
        check_filesystem(parent.as_fd(), path)?;
        Ok(parent)
    }
}

/// Refuse descriptors on kernel filesystems.
pub(crate) fn check_filesystem(fd: BorrowedFd<'_>, path: &SandboxPath) -> Result<(), FilesError> {
    let fs = rustix::fs::fstatfs(fd).map_err(|e| errno(e, path, "statfs"))?;
    let magic = fs.f_type as u64;
    match KERNEL_FILESYSTEMS.iter().find(|(m, _)| *m == magic) {
        Some((_, name)) => Err(FilesError::new(
            FilesErrorKind::Forbidden,
            format!("{path} is on {name}, a kernel filesystem: the files API does not touch it"),
        )
        .with_fix("read or change it with an exec inside the sandbox")),
        None => Ok(()),
    }
}

/// An errno from an operation on `path`, as the API says it.
pub(crate) fn errno(e: Errno, path: &SandboxPath, doing: &str) -> FilesError {
    use FilesErrorKind as K;
    let (kind, message) = match e {
        Errno::NOENT => (
            K::NotFound,
            format!("{path}: no such file or directory in the sandbox"),
        ),
        Errno::NOTDIR => (
            K::Conflict,
            format!("{path}: a component of the path is not a directory"),
        ),
        Errno::ISDIR => (K::Conflict, format!("{path} is a directory")),
        Errno::NOTEMPTY => {
            return FilesError::new(
                K::Conflict,
                format!("{path} is a directory that is not empty"),
            )
            .with_fix("add ?recursive=true to delete it with everything in it")
        }
        Errno::EXIST => (K::Conflict, format!("{path} exists")),
        Errno::BUSY => (
            K::Conflict,
            format!("{path} is in use (a mount point of the sandbox)"),
        ),
        Errno::ROFS => (
            K::Forbidden,
            format!("{path} is on a read-only filesystem in the sandbox"),
        ),
        Errno::ACCESS | Errno::PERM => (K::Forbidden, format!("{doing} {path}: permission denied")),
        Errno::LOOP => (
            K::Forbidden,
            format!("{path}: too many symlinks, or a /proc magic link (never followed)"),
        ),
        Errno::XDEV => (
            K::Forbidden,
            format!("{path}: the lookup would leave the sandbox's root"),
        ),
        Errno::NAMETOOLONG => (
            K::BadPath,
            format!("{path}: a name or the path is too long"),
        ),
        Errno::NOSPC | Errno::DQUOT => (
            K::Quota,
            format!("{path}: the sandbox's filesystem is full"),
        ),
        Errno::FBIG => (
            K::TooLarge,
            format!("{path}: the file is too large for its filesystem"),
        ),
        _ => (K::Io, format!("cannot {doing} {path}: {e}")),
    };
    FilesError::new(kind, message)
}
