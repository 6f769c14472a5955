//! The copy fallback, for hosts where overlayfs cannot be mounted in a user
//! namespace: before the run the staged tree is copied into the stage
//! (`upper/`; each file cloned with `FICLONE` where the filesystem shares
//! extents, else copied), and the copy is what the sandbox sees, writable,
//! at the tree's path. The host tree is only read.
//!
//! A manifest records every copied entry's inode, ctime, mtime and size.
//! After the run, an entry whose record still matches was not touched
//! (whatever the host did meanwhile); every other entry is compared with
//! the host tree as it is now, exactly as an overlay's upper entry is, and
//! a recorded entry missing from the copy is a deletion. Base hashes and
//! the conflict flag come from the host, as in overlay mode.

use std::collections::{BTreeMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, Stat, Timestamps};
use serde::{Deserialize, Serialize};

use crate::capture::{deleted, dir_mode, new_dir, not_dir, upper_entries, Ctx};
use crate::change::Kind;
use crate::error::{Result, StageError};
use crate::fsutil::{self, join, list_dir, lstat_at, parent_of};
use crate::store::{coarse_now_ns, Stage};

/// One copied entry as it was when the copy was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    ino: u64,
    ctime_ns: i64,
    mtime_ns: i64,
    size: i64,
    /// A device, fifo or socket of the host tree: not copied, and its
    /// absence from the copy is not a deletion.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    special: bool,
}

fn ns(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

impl Record {
    fn of(st: &Stat) -> Record {
        Record {
            ino: st.st_ino,
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec as i64),
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec as i64),
            size: st.st_size,
            special: false,
        }
    }

    fn untouched(&self, st: &Stat) -> bool {
        !self.special && *self == Record::of(st)
    }
}

/// Every entry of the copy when the run started, by path.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Manifest {
    entries: BTreeMap<String, Record>,
}

impl Manifest {
    pub(crate) fn load(stage: &Stage) -> Result<Manifest> {
        let path = stage.manifest_path();
        let text = std::fs::read(&path).map_err(|e| StageError::io(&path, e))?;
        serde_json::from_slice(&text).map_err(|source| StageError::Json { path, source })
    }
}

/// What copying the tree took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    pub entries: usize,
    pub bytes: u64,
}

struct Copier<'a> {
    lower: BorrowedFd<'a>,
    upper: BorrowedFd<'a>,
    manifest: Manifest,
    bytes: u64,
    cap: u64,
    newest_ctime: i64,
    target: &'a std::path::Path,
}

/// Copy the staged tree into `stage`'s `upper/` and keep its manifest.
/// Refused when the copy would hold more than `cap` bytes, or when an entry
/// cannot be copied faithfully (a name that is not UTF-8, an unreadable
/// file): a partial copy would show the run a different tree.
pub fn make_copy(stage: &Stage, cap: u64) -> Result<Copied> {
    let target = &stage.meta.target;
    let lower = fsutil::open_root(target).map_err(|e| StageError::io(target, e))?;
    let upper = fsutil::open_root(&stage.upper()).map_err(|e| StageError::io(stage.upper(), e))?;
    let mut c = Copier {
        lower: lower.as_fd(),
        upper: upper.as_fd(),
        manifest: Manifest::default(),
        bytes: 0,
        cap,
        newest_ctime: 0,
        target,
    };
    c.dir("")?;
    // The copy's root has the host root's permission bits and times.
    let st = rustix::fs::fstat(&lower).map_err(|e| StageError::io(target, e))?;
    c.finish(upper.as_fd(), &st)
        .map_err(|e| StageError::io(stage.upper(), e))?;
    // A later change to a copied entry must give it a ctime its record
    // does not have: wait out the clock tick the last copy happened in.
    while coarse_now_ns() <= c.newest_ctime {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let copied = Copied {
        entries: c.manifest.entries.len(),
        bytes: c.bytes,
    };
    crate::store::write_json(&stage.manifest_path(), &c.manifest)?;
    Ok(copied)
}

impl Copier<'_> {
    fn err(&self, rel: &str, e: impl Into<std::io::Error>) -> StageError {
        let e: std::io::Error = e.into();
        StageError::Refused(format!(
            "cannot copy {}/{rel} for the copy fallback: {e}",
            self.target.display()
        ))
    }

    fn note(&mut self, rel: &str, st: &Stat) {
        let r = Record::of(st);
        self.newest_ctime = self.newest_ctime.max(r.ctime_ns);
        self.manifest.entries.insert(rel.to_owned(), r);
    }

    fn dir(&mut self, dir: &str) -> Result<()> {
        let names = list_dir(self.lower, dir).map_err(|e| self.err(dir, e))?;
        for name in names {
            let Some(name) = name.to_str() else {
                return Err(StageError::Refused(format!(
                    "{}/{}: the copy fallback cannot stage a name that is not UTF-8; rename it or stage a directory without it",
                    self.target.display(),
                    join(dir, &name.to_string_lossy())
                )));
            };
            let rel = join(dir, name);
            let Some(st) = lstat_at(self.lower, &rel).map_err(|e| self.err(&rel, e))? else {
                continue; // gone since it was listed
            };
            match Kind::of(st.st_mode) {
                Kind::Dir => self.subdir(&rel, &st)?,
                Kind::File => self.file(&rel, &st)?,
                Kind::Symlink => self.symlink(&rel, &st)?,
                _ => {
                    let mut r = Record::of(&st);
                    r.special = true;
                    self.manifest.entries.insert(rel, r);
                }
            }
        }
        Ok(())
    }

    fn subdir(&mut self, rel: &str, st: &Stat) -> Result<()> {
        rustix::fs::mkdirat(self.upper, rel, Mode::from_raw_mode(0o700))
            .map_err(|e| self.err(rel, e))?;
        self.dir(rel)?;
        let fd = fsutil::open_beneath(self.upper, rel, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|e| self.err(rel, e))?;
        let copied = self.finish(fd.as_fd(), st).map_err(|e| self.err(rel, e))?;
        self.note(rel, &copied);
        Ok(())
    }

    /// The host entry's permission bits and times on the copy `fd`; the
    /// copy's status after that.
    fn finish(&self, fd: BorrowedFd<'_>, st: &Stat) -> std::io::Result<Stat> {
        rustix::fs::fchmod(fd, Mode::from_raw_mode(st.st_mode & 0o7777))?;
        rustix::fs::futimens(fd, &times(st))?;
        Ok(rustix::fs::fstat(fd)?)
    }

    fn file(&mut self, rel: &str, st: &Stat) -> Result<()> {
        self.bytes = self
            .bytes
            .saturating_add(u64::try_from(st.st_size).unwrap_or(0));
        if self.bytes > self.cap {
            return Err(StageError::Refused(format!(
                "{}: the copy fallback would hold more than the [stage] max_size cap of {} bytes; raise max_size in the profile, stage a smaller directory, or make overlayfs available (see `cordon doctor`)",
                self.target.display(),
                self.cap
            )));
        }
        let src =
            fsutil::open_beneath(self.lower, rel, OFlags::RDONLY).map_err(|e| self.err(rel, e))?;
        let (dir, name) = parent_of(self.upper, rel).map_err(|e| self.err(rel, e))?;
        let dst = rustix::fs::openat(
            &dir,
            name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| self.err(rel, e))?;
        copy_content(src, &dst).map_err(|e| self.err(rel, e))?;
        let copied = self.finish(dst.as_fd(), st).map_err(|e| self.err(rel, e))?;
        self.note(rel, &copied);
        Ok(())
    }

    fn symlink(&mut self, rel: &str, st: &Stat) -> Result<()> {
        let target = fsutil::readlink_at(self.lower, rel).map_err(|e| self.err(rel, e))?;
        let (dir, name) = parent_of(self.upper, rel).map_err(|e| self.err(rel, e))?;
        rustix::fs::symlinkat(target.as_slice(), &dir, name).map_err(|e| self.err(rel, e))?;
        rustix::fs::utimensat(&dir, name, &times(st), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.err(rel, e))?;
        let copied = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.err(rel, e))?;
        self.note(rel, &copied);
        Ok(())
    }
}

fn times(st: &Stat) -> Timestamps {
    Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}

/// A clone of the extents where the filesystem can share them (btrfs, xfs,
/// bcachefs), else a copy (`copy_file_range` under `std::io::copy`).
fn copy_content(src: OwnedFd, dst: &OwnedFd) -> std::io::Result<()> {
    if rustix::fs::ioctl_ficlone(dst, &src).is_ok() {
        return Ok(());
    }
    let mut src = std::fs::File::from(src);
    let mut out = std::fs::File::from(dst.try_clone()?);
    std::io::copy(&mut src, &mut out)?;
    Ok(())
}

/// The change set of a copy-staged run: touched entries of the copy
/// against the host, then recorded entries the copy lost.
pub(crate) fn changes(ctx: &mut Ctx<'_>, manifest: &Manifest) -> std::io::Result<()> {
    walk(ctx, manifest, "", true)?;
    let mut gone: HashSet<String> = ctx
        .out
        .iter()
        .filter(|e| e.op == crate::Op::Deleted)
        .map(|e| e.path.clone())
        .collect();
    for (rel, rec) in &manifest.entries {
        if rec.special || covered(&gone, rel) || lstat_at(ctx.upper, rel)?.is_some() {
            continue;
        }
        if let Some(st) = lstat_at(ctx.lower, rel)? {
            let before = ctx.out.len();
            deleted(ctx, rel, &st)?;
            gone.extend(ctx.out[before..].iter().map(|e| e.path.clone()));
        }
    }
    Ok(())
}

/// Whether `rel` or a directory above it was already found deleted.
fn covered(gone: &HashSet<String>, rel: &str) -> bool {
    gone.contains(rel)
        || rel
            .match_indices('/')
            .any(|(i, _)| gone.contains(&rel[..i]))
}

/// `host_dir`: the host has a directory at `dir` (else nothing under it is
/// looked up on the host, where a symlink may be on the way).
fn walk(ctx: &mut Ctx<'_>, manifest: &Manifest, dir: &str, host_dir: bool) -> std::io::Result<()> {
    for (rel, st) in upper_entries(ctx, dir)? {
        let untouched = manifest.entries.get(&rel).is_some_and(|r| r.untouched(&st));
        let is_dir = Kind::of(st.st_mode) == Kind::Dir;
        if untouched && !is_dir {
            continue;
        }
        let lower = if host_dir {
            lstat_at(ctx.lower, &rel)?
        } else {
            None
        };
        let lower_is_dir = lower
            .as_ref()
            .is_some_and(|l| Kind::of(l.st_mode) == Kind::Dir);
        if !is_dir {
            not_dir(ctx, rel, &st, lower.as_ref())?;
            continue;
        }
        if !untouched {
            match &lower {
                Some(l) if lower_is_dir => dir_mode(ctx, &rel, &st, l)?,
                l => new_dir(ctx, &rel, &st, l.as_ref())?,
            }
        }
        walk(ctx, manifest, &rel, lower_is_dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::covered;
    use std::collections::HashSet;

    #[test]
    fn a_deleted_directory_covers_what_was_under_it() {
        let gone: HashSet<String> = ["a/b".to_owned()].into();
        assert!(covered(&gone, "a/b"));
        assert!(covered(&gone, "a/b/c"));
        assert!(covered(&gone, "a/b/c/d"));
        assert!(!covered(&gone, "a/bc"));
        assert!(!covered(&gone, "a"));
    }
}
