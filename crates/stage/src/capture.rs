//! Reading a staged run's upper layer as a change set.
//!
//! overlayfs keeps in the upper layer every entry the run created or
//! changed (a whole copy of a changed file: metacopy is off with
//! `userxattr`), a whiteout for every deletion (a 0:0 character device, or
//! a zero-size file with the `user.overlay.whiteout` xattr), and marks a
//! directory that replaced a lower one whole as opaque
//! (`user.overlay.opaque` = `y`). Each upper entry is compared with the host
//! tree (the lower layer) to tell added, modified, mode-only and deleted
//! apart, and the host's entry is recorded as the change's base.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{OFlags, Stat};

use crate::change::{Change, ChangeSet, Kind, Op};
use crate::error::{Result, StageError};
use crate::fsutil::{self, base_at, join, list_dir, lstat_at};
use crate::store::{Stage, MODE_COPY};

const XATTR_OPAQUE: &str = "user.overlay.opaque";
const XATTR_WHITEOUT: &str = "user.overlay.whiteout";

pub(crate) struct Ctx<'a> {
    /// The run's writable side: the overlay's upper layer, or the copy.
    pub(crate) upper: BorrowedFd<'a>,
    /// The host tree.
    pub(crate) lower: BorrowedFd<'a>,
    pub(crate) started_ns: i128,
    pub(crate) out: Vec<Change>,
}

/// Read the change set of a staged run from its upper layer (or its copy)
/// and the host tree as it is now.
pub fn capture(stage: &Stage) -> Result<ChangeSet> {
    let upper = fsutil::open_root(&stage.upper()).map_err(|e| StageError::io(stage.upper(), e))?;
    let lower =
        fsutil::open_root(&stage.meta.target).map_err(|e| StageError::io(&stage.meta.target, e))?;
    let mut ctx = Ctx {
        upper: upper.as_fd(),
        lower: lower.as_fd(),
        started_ns: i128::from(stage.meta.started_ns),
        out: Vec::new(),
    };
    if stage.meta.mode == MODE_COPY {
        let manifest = crate::copy::Manifest::load(stage)?;
        crate::copy::changes(&mut ctx, &manifest).map_err(|e| StageError::io(stage.upper(), e))?;
    } else {
        walk(&mut ctx, "", true).map_err(|e| StageError::io(stage.upper(), e))?;
    }
    Ok(ChangeSet::new(
        stage.meta.run_id.clone(),
        stage.meta.target.clone(),
        &stage.meta.mode,
        ctx.out,
    ))
}

fn xattr_at(root: BorrowedFd<'_>, rel: &str, dir: bool, name: &str) -> Option<Vec<u8>> {
    let flags = if dir {
        OFlags::RDONLY | OFlags::DIRECTORY
    } else {
        OFlags::RDONLY | OFlags::NONBLOCK
    };
    let fd = fsutil::open_beneath(root, rel, flags).ok()?;
    let mut buf = vec![0u8; 256];
    match rustix::fs::fgetxattr(&fd, name, &mut buf) {
        Ok(n) => {
            buf.truncate(n);
            Some(buf)
        }
        Err(_) => None,
    }
}

fn is_whiteout(ctx: &Ctx<'_>, rel: &str, st: &Stat) -> bool {
    match Kind::of(st.st_mode) {
        Kind::Device => st.st_mode & 0o170000 == 0o020000 && st.st_rdev == 0,
        Kind::File => st.st_size == 0 && xattr_at(ctx.upper, rel, false, XATTR_WHITEOUT).is_some(),
        _ => false,
    }
}

/// The entries of `dir` on the writable side with their status; a name
/// that is not UTF-8 is noted as a change that is never promoted.
pub(crate) fn upper_entries(ctx: &mut Ctx<'_>, dir: &str) -> std::io::Result<Vec<(String, Stat)>> {
    let mut out = Vec::new();
    for name in list_dir(ctx.upper, dir)? {
        let Some(name) = name.to_str() else {
            let rel = join(dir, &name.to_string_lossy());
            ctx.out.push(refused_entry(rel, "the name is not UTF-8"));
            continue;
        };
        let rel = join(dir, name);
        if let Some(st) = lstat_at(ctx.upper, &rel)? {
            out.push((rel, st));
        }
    }
    Ok(out)
}

fn walk(ctx: &mut Ctx<'_>, dir: &str, lower_dir: bool) -> std::io::Result<()> {
    for (rel, st) in upper_entries(ctx, dir)? {
        let lower = if lower_dir {
            lstat_at(ctx.lower, &rel)?
        } else {
            None
        };
        if is_whiteout(ctx, &rel, &st) {
            if let Some(l) = lower {
                deleted(ctx, &rel, &l)?;
            }
            continue;
        }
        let kind = Kind::of(st.st_mode);
        let lower_kind = lower.as_ref().map(|l| Kind::of(l.st_mode));
        if kind == Kind::Dir {
            match (lower_kind, &lower) {
                (Some(Kind::Dir), Some(l)) => {
                    let opaque = xattr_at(ctx.upper, &rel, true, XATTR_OPAQUE)
                        .is_some_and(|v| v.as_slice() == b"y");
                    if opaque {
                        let kept: BTreeSet<_> = list_dir(ctx.upper, &rel)?.into_iter().collect();
                        for child in list_dir(ctx.lower, &rel)? {
                            if !kept.contains(&child) {
                                let child_rel = join(&rel, &child.to_string_lossy());
                                if let Some(cst) = lstat_at(ctx.lower, &child_rel)? {
                                    deleted(ctx, &child_rel, &cst)?;
                                }
                            }
                        }
                    }
                    dir_mode(ctx, &rel, &st, l)?;
                    walk(ctx, &rel, true)?;
                }
                (_, l) => {
                    new_dir(ctx, &rel, &st, l.as_ref())?;
                    walk(ctx, &rel, false)?;
                }
            }
            continue;
        }
        not_dir(ctx, rel, &st, lower.as_ref())?;
    }
    Ok(())
}

/// A directory on both sides: a mode-only change when its permission
/// bits differ.
pub(crate) fn dir_mode(
    ctx: &mut Ctx<'_>,
    rel: &str,
    st: &Stat,
    lower: &Stat,
) -> std::io::Result<()> {
    if lower.st_mode & 0o7777 != st.st_mode & 0o7777 {
        let e = entry(ctx, rel.to_owned(), Op::Mode, st)?;
        ctx.out.push(e);
    }
    Ok(())
}

/// A directory the host does not have there: added, after the deletion of
/// whatever the host has at that path.
pub(crate) fn new_dir(
    ctx: &mut Ctx<'_>,
    rel: &str,
    st: &Stat,
    lower: Option<&Stat>,
) -> std::io::Result<()> {
    if let Some(l) = lower {
        deleted(ctx, rel, l)?;
    }
    let e = entry(ctx, rel.to_owned(), Op::Added, st)?;
    ctx.out.push(e);
    Ok(())
}

/// The change at `rel`, which is not a directory on the writable side
/// (`st`), against the host's entry there (`lower`): added, modified or
/// mode-only; nothing when content and mode are the host's.
pub(crate) fn not_dir(
    ctx: &mut Ctx<'_>,
    rel: String,
    st: &Stat,
    lower: Option<&Stat>,
) -> std::io::Result<()> {
    let op = match lower {
        None => Op::Added,
        Some(l) if Kind::of(l.st_mode) == Kind::Dir => {
            deleted(ctx, &rel, l)?;
            Op::Added
        }
        Some(_) => Op::Modified,
    };
    let mut e = entry(ctx, rel, op, st)?;
    if op == Op::Modified {
        if let Some(b) = &e.base {
            if b.kind == e.kind && b.hash == e.hash {
                if b.mode == e.mode.unwrap_or(0) {
                    return Ok(()); // copied up, not changed
                }
                e.op = Op::Mode;
            }
        }
    }
    ctx.out.push(e);
    Ok(())
}

/// The deletion of the host entry at `rel`; a directory's contents first.
pub(crate) fn deleted(ctx: &mut Ctx<'_>, rel: &str, st: &Stat) -> std::io::Result<()> {
    let kind = Kind::of(st.st_mode);
    if kind == Kind::Dir {
        for child in list_dir(ctx.lower, rel)? {
            let child_rel = join(rel, &child.to_string_lossy());
            if let Some(cst) = lstat_at(ctx.lower, &child_rel)? {
                deleted(ctx, &child_rel, &cst)?;
            }
        }
    }
    let base = base_at(ctx.lower, rel, ctx.started_ns)?;
    ctx.out.push(Change {
        path: rel.to_owned(),
        op: Op::Deleted,
        kind,
        size: None,
        mode: None,
        hash: None,
        link: None,
        base,
        unsafe_reason: None,
    });
    Ok(())
}

/// An added or changed entry, described from the upper layer.
pub(crate) fn entry(ctx: &Ctx<'_>, rel: String, op: Op, st: &Stat) -> std::io::Result<Change> {
    let kind = Kind::of(st.st_mode);
    let mode = st.st_mode & 0o7777;
    let hash = fsutil::content_hash(ctx.upper, &rel, kind)?;
    let link = if kind == Kind::Symlink {
        Some(String::from_utf8_lossy(&fsutil::readlink_at(ctx.upper, &rel)?).into_owned())
    } else {
        None
    };
    let base = if op == Op::Added {
        None
    } else {
        base_at(ctx.lower, &rel, ctx.started_ns)?
    };
    let unsafe_reason = unsafe_reason(&rel, kind, mode, link.as_deref());
    Ok(Change {
        size: (kind != Kind::Dir).then(|| u64::try_from(st.st_size).unwrap_or(0)),
        mode: Some(mode),
        path: rel,
        op,
        kind,
        hash,
        link,
        base,
        unsafe_reason,
    })
}

fn refused_entry(rel: String, why: &str) -> Change {
    Change {
        path: rel,
        op: Op::Added,
        kind: Kind::File,
        size: None,
        mode: None,
        hash: None,
        link: None,
        base: None,
        unsafe_reason: Some(why.to_owned()),
    }
}

/// Why an entry may never reach the host tree, if it may not.
pub(crate) fn unsafe_reason(
    rel: &str,
    kind: Kind,
    mode: u32,
    link: Option<&str>,
) -> Option<String> {
    match kind {
        Kind::Device | Kind::Fifo | Kind::Socket => {
            return Some(format!("a {} is never promoted", kind.as_str()))
        }
        _ => {}
    }
    if mode & 0o6000 != 0 {
        return Some("setuid/setgid bits are never promoted".into());
    }
    if let Some(target) = link {
        if escapes(rel, target) {
            return Some(format!("the symlink points outside the tree ({target})"));
        }
    }
    None
}

/// Whether a symlink at `rel` with `target` names something outside the
/// tree, read lexically (absolute, or more `..` than it is deep).
pub(crate) fn escapes(rel: &str, target: &str) -> bool {
    if target.starts_with('/') || target.is_empty() {
        return true;
    }
    let mut depth: i64 = rel.matches('/').count() as i64;
    for comp in target.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::escapes;

    #[test]
    fn symlink_escape_is_read_lexically() {
        assert!(escapes("a", "/etc/passwd"));
        assert!(escapes("a", "../x"));
        assert!(escapes("d/a", "../../x"));
        assert!(escapes("d/a", "x/../../../y"));
        assert!(!escapes("d/a", "../x"));
        assert!(!escapes("a", "b/c"));
        assert!(!escapes("d/e/a", "../../x"));
    }
}
