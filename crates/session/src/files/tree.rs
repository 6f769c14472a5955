//! Whole directories: listing, removal, tar. Below the directory the
//! path resolved to, every step is one name opened in its parent's
//! descriptor with `O_NOFOLLOW`: a symlink is listed, removed or archived
//! as a link, never entered.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::resolve::{check_filesystem, errno};
use super::{Entry, EntryType, FilesError, FilesErrorKind, SandboxPath, SandboxRoot};

/// Most entries one listing returns.
const MAX_LISTED: usize = 10_000;

/// Deepest directory removed or archived below the path.
const MAX_DEPTH: usize = 128;

/// A directory's entries, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listing {
    pub entries: Vec<Entry>,
    /// More than `MAX_LISTED` entries: the rest are not listed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl Listing {
    /// List the directory `dir` (opened by [`SandboxRoot::open`]).
    pub fn read(dir: BorrowedFd<'_>, path: &SandboxPath) -> Result<Listing, FilesError> {
        let names = names(dir).map_err(|e| errno(e, path, "list"))?;
        let truncated = names.len() > MAX_LISTED;
        let entries = names
            .into_iter()
            .take(MAX_LISTED)
            .filter_map(|name| {
                // Gone since the directory was read: not listed.
                let st = rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
                Some(Entry {
                    name,
                    kind: entry_type(&st),
                    size: st.st_size.try_into().unwrap_or(0),
                })
            })
            .collect();
        Ok(Listing { entries, truncated })
    }
}

fn entry_type(st: &Stat) -> EntryType {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryType::File,
        FileType::Directory => EntryType::Dir,
        FileType::Symlink => EntryType::Symlink,
        _ => EntryType::Other,
    }
}

/// The names in `dir` (without `.` and `..`), sorted; names that are not
/// UTF-8 are left out (the API names files by UTF-8 paths).
fn names(dir: BorrowedFd<'_>) -> Result<Vec<String>, Errno> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if let Ok(name) = std::str::from_utf8(name) {
            out.push(name.to_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// One name in `parent`, a directory, never through a symlink.
fn open_subdir(parent: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

impl SandboxRoot {
    /// Remove what `path` names. A directory must be empty unless
    /// `recursive`; a symlink is removed, not what it points to.
    pub fn remove(&self, path: &SandboxPath, recursive: bool) -> Result<(), FilesError> {
        let (Some(name), Some(parent)) = (path.file_name(), path.parent()) else {
            return Err(FilesError::bad_path("the root directory cannot be deleted"));
        };
        let dir = self.dir(&parent, false)?;
        match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
            Ok(()) => return Ok(()),
            Err(Errno::ISDIR) => {}
            Err(e) => return Err(errno(e, path, "delete")),
        }
        if recursive {
            let sub = open_subdir(dir.as_fd(), name).map_err(|e| errno(e, path, "open"))?;
            check_filesystem(sub.as_fd(), path)?;
            empty_tree(sub.as_fd(), 0).map_err(|e| errno(e, path, "delete what is in"))?;
        }
        rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR).map_err(|e| errno(e, path, "delete"))
    }
}

/// Remove everything in `dir`.
fn empty_tree(dir: BorrowedFd<'_>, depth: usize) -> Result<(), Errno> {
    if depth > MAX_DEPTH {
        return Err(Errno::LOOP);
    }
    for name in names(dir)? {
        match rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(Errno::ISDIR) => {
                let sub = open_subdir(dir, &name)?;
                empty_tree(sub.as_fd(), depth + 1)?;
                rustix::fs::unlinkat(dir, name.as_str(), AtFlags::REMOVEDIR)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write the directory `dir` (opened by [`SandboxRoot::open`]) as a tar
/// stream to `out`: directories, regular files and symlinks (as links),
/// names relative to `dir`. Files that vanish meanwhile are left out; a
/// file that changes size is cut or padded to the size it had when
/// opened. Kernel filesystems below are left out.
pub fn write_tar(dir: OwnedFd, path: &SandboxPath, out: impl Write) -> Result<(), FilesError> {
    let mut tar = tar::Builder::new(out);
    let write_err = |e: io::Error| {
        FilesError::new(
            FilesErrorKind::Io,
            format!("writing the tar stream of {path}: {e}"),
        )
    };
    // Depth first; each directory is held open while its entries are added.
    let mut stack: Vec<(OwnedFd, String, usize)> = vec![(dir, String::new(), 0)];
    while let Some((d, prefix, depth)) = stack.pop() {
        let names = names(d.as_fd()).map_err(|e| errno(e, path, "list"))?;
        let mut subdirs = Vec::new();
        for name in names {
            let rel = format!("{prefix}{name}");
            let Ok(st) = rustix::fs::statat(&d, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let mut header = header(&st);
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory if depth < MAX_DEPTH => {
                    let Ok(sub) = open_subdir(d.as_fd(), &name) else {
                        continue;
                    };
                    if check_filesystem(sub.as_fd(), path).is_err() {
                        continue;
                    }
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    tar.append_data(&mut header, format!("{rel}/"), io::empty())
                        .map_err(write_err)?;
                    subdirs.push((sub, format!("{rel}/"), depth + 1));
                }
                FileType::RegularFile => {
                    let Some((file, size)) = open_file(d.as_fd(), &name, &st) else {
                        continue;
                    };
                    header.set_size(size);
                    // Exactly `size` bytes, whatever happens to the file now.
                    let data = file.take(size).chain(io::repeat(0)).take(size);
                    tar.append_data(&mut header, &rel, data)
                        .map_err(write_err)?;
                }
                FileType::Symlink => {
                    let Ok(target) = rustix::fs::readlinkat(&d, name.as_str(), Vec::new()) else {
                        continue;
                    };
                    let target = String::from_utf8_lossy(target.to_bytes()).into_owned();
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_size(0);
                    tar.append_link(&mut header, &rel, target)
                        .map_err(write_err)?;
                }
                _ => {}
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    tar.into_inner()
        .map_err(write_err)?
        .flush()
        .map_err(write_err)
}

/// A header with `st`'s mode and time, owned by nobody in particular (the
/// host's ids mean nothing to whoever unpacks it).
fn header(st: &Stat) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_mode(st.st_mode & 0o7777);
    h.set_mtime(st.st_mtime.try_into().unwrap_or(0));
    h.set_uid(0);
    h.set_gid(0);
    h
}

/// The regular file `name` in `dir`, if it is still the one `st` saw.
fn open_file(dir: BorrowedFd<'_>, name: &str, st: &Stat) -> Option<(std::fs::File, u64)> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .ok()?;
    let now = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(now.st_mode) != FileType::RegularFile || now.st_ino != st.st_ino {
        return None;
    }
    Some((std::fs::File::from(fd), now.st_size.try_into().unwrap_or(0)))
}
