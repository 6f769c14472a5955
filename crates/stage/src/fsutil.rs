//! Descriptor-relative file access that never follows a symlink: every
//! lookup is `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from a tree's
//! root, or an `*at` call on the final name with `AT_SYMLINK_NOFOLLOW`.

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::change::{Base, Kind};

pub(crate) const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Open a tree's root directory without following symlinks anywhere in
/// `path`.
pub(crate) fn open_root(path: &Path) -> std::io::Result<OwnedFd> {
    rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(Into::into)
}

/// Open `rel` under `root` (never above it, never through a symlink).
pub(crate) fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    let rel = if rel.is_empty() { "." } else { rel };
    rustix::fs::openat2(
        root,
        rel,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        RESOLVE,
    )
}

/// The parent directory of `rel` (opened beneath `root`) and the last name.
pub(crate) fn parent_of<'a>(
    root: BorrowedFd<'_>,
    rel: &'a str,
) -> Result<(OwnedFd, &'a str), Errno> {
    let (dir, name) = match rel.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", rel),
    };
    let fd = open_beneath(root, dir, OFlags::RDONLY | OFlags::DIRECTORY)?;
    Ok((fd, name))
}

/// `lstat` of `rel` under `root`; `None` when nothing is there.
pub(crate) fn lstat_at(root: BorrowedFd<'_>, rel: &str) -> Result<Option<Stat>, Errno> {
    if rel.is_empty() {
        return rustix::fs::fstat(root).map(Some);
    }
    let (dir, name) = match parent_of(root, rel) {
        Ok(p) => p,
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(e),
    };
    match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// SHA-256 of everything readable from `fd`, and its length.
pub(crate) fn hash_reader(mut r: impl Read) -> std::io::Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex::encode(h.finalize()), total))
}

pub(crate) fn hash_bytes(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// A symlink's target under `root`.
pub(crate) fn readlink_at(root: BorrowedFd<'_>, rel: &str) -> Result<Vec<u8>, Errno> {
    let (dir, name) = parent_of(root, rel)?;
    rustix::fs::readlinkat(&dir, name, Vec::new()).map(|s| s.into_bytes())
}

/// The content hash of `rel` under `root`, by kind: a regular file's
/// bytes, a symlink's target; none for anything else.
pub(crate) fn content_hash(
    root: BorrowedFd<'_>,
    rel: &str,
    kind: Kind,
) -> std::io::Result<Option<String>> {
    match kind {
        Kind::File => {
            let fd = open_beneath(root, rel, OFlags::RDONLY)?;
            let (hash, _) = hash_reader(std::fs::File::from(fd))?;
            Ok(Some(hash))
        }
        Kind::Symlink => Ok(Some(hash_bytes(&readlink_at(root, rel)?))),
        _ => Ok(None),
    }
}

pub(crate) fn ctime_ns(st: &Stat) -> i128 {
    i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec)
}

/// What the host has at `rel`, with its hash; `changed_during_run` when
/// its ctime is not before `started_ns`.
pub(crate) fn base_at(
    root: BorrowedFd<'_>,
    rel: &str,
    started_ns: i128,
) -> std::io::Result<Option<Base>> {
    let Some(st) = lstat_at(root, rel)? else {
        return Ok(None);
    };
    let kind = Kind::of(st.st_mode);
    Ok(Some(Base {
        kind,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode: st.st_mode & 0o7777,
        hash: content_hash(root, rel, kind)?,
        changed_during_run: ctime_ns(&st) >= started_ns,
    }))
}

/// Names in the directory `rel` under `root` (without `.` and `..`).
pub(crate) fn list_dir(
    root: BorrowedFd<'_>,
    rel: &str,
) -> std::io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStringExt;
    let fd = open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut dir = rustix::fs::Dir::read_from(fd.as_fd())?;
    let mut out = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(std::ffi::OsString::from_vec(name.to_vec()));
        }
    }
    out.sort();
    Ok(out)
}

/// `a/b` joined, with `""` as the root.
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}
