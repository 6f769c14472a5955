//! Promotion: apply chosen entries of a change set to the host tree, all or
//! nothing.
//!
//! Every entry is checked first (never promotable, policy, conflict with
//! the host). Then: deletions (deepest first; a file is renamed aside, a
//! directory removed only when empty), new directories (shallowest first),
//! then files and symlinks, each written to a temporary name in its target
//! directory and swapped in with `renameat2` (`RENAME_NOREPLACE` for a new
//! path, `RENAME_EXCHANGE` over an old one). What a swap or rename moved
//! aside is compared with the base once more, so a host change that raced
//! the check is still caught. Any failure undoes every step taken, in
//! reverse; only when all succeeded are the moved-aside files disposed of:
//! renamed into the stage's `graveyard/` when the stage store is on the
//! tree's filesystem (freeing their blocks is then left to
//! [`crate::Store::reap`], off the promotion's path), else deleted.
//! Every lookup in the host tree is `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`
//! from its root; files are created with permission bits only (`& 0o777`).

use std::collections::BTreeSet;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::change::{entries_hash, Base, Change, ChangeSet, Kind, Op};
use crate::error::{Result, StageError};
use crate::fsutil::{self, content_hash, lstat_at, parent_of};
use crate::policy::{Action, Decision};
use crate::store::Stage;

/// What to promote and which policy rules the caller overrides.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Paths relative to the staged directory; a directory selects what is
    /// under it. Empty: everything.
    pub paths: Vec<String>,
    /// Rule ids promoted despite `ask`/`refuse` (`--allow`).
    pub allow: Vec<String>,
    /// The hook for a code scanner (rule `scanner`, ask): called with each
    /// new or changed file's path and content (up to 1 MiB); a finding
    /// holds the file back like any `ask` rule. `None`: no scanner.
    pub scanner: Option<ScanFn>,
}

/// A code scanner: findings (one line each) in a file's content.
pub type ScanFn = fn(&str, &[u8]) -> Vec<String>;

/// The scanner's findings on a chosen file, read from the upper layer.
fn scan(stage: &Stage, scanner: ScanFn, e: &Change) -> Vec<String> {
    use std::io::Read;
    if e.kind != Kind::File || e.op == Op::Deleted {
        return Vec::new();
    }
    let Ok(upper) = fsutil::open_root(&stage.upper()) else {
        return vec!["the staged file cannot be read to scan it".into()];
    };
    let mut data = Vec::new();
    let read = fsutil::open_beneath(upper.as_fd(), &e.path, OFlags::RDONLY)
        .map_err(std::io::Error::from)
        .and_then(|fd| std::fs::File::from(fd).take(1 << 20).read_to_end(&mut data));
    match read {
        Ok(_) => scanner(&e.path, &data),
        Err(err) => vec![format!("the staged file cannot be read to scan it: {err}")],
    }
}

/// What a promotion applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    pub entries: Vec<Change>,
    /// SHA-256 of the applied entries.
    pub applied_hash: String,
    /// Rules overridden by `--allow` or answered yes to.
    pub allowed_rules: Vec<String>,
}

fn depth(path: &str) -> usize {
    path.matches('/').count()
}

fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|r| r.starts_with('/'))
}

/// The entries `sel` names (with the new directories above them), checked
/// against what may never be promoted and against the policy. `ask` is
/// called for an `ask` rule not overridden; it returns whether a person
/// said yes. A refusal names every entry that stops the promotion, both
/// kinds at once, so one fix is not followed by news of the next.
pub fn choose(
    stage: &Stage,
    set: &ChangeSet,
    sel: &Selection,
    ask: &mut dyn FnMut(&Change, &Decision) -> bool,
) -> Result<(Vec<Change>, Vec<String>)> {
    check_allow_rules(stage, sel)?;
    let mut chosen = select(set, sel)?;
    let never = never_promotable(&chosen);
    if !never.is_empty() {
        // Nothing will be promoted: nobody is asked, but what the policy
        // would hold back is said too.
        let promotable: Vec<Change> = chosen
            .iter()
            .filter(|e| e.unsafe_reason.is_none())
            .cloned()
            .collect();
        let (held, _) = judge(stage, sel, &promotable, &mut |_, _| false);
        let mut msg = format!(
            "nothing was promoted: {} entr{} can never be promoted ({}); name the other paths, or discard the run",
            never.len(),
            if never.len() == 1 { "y" } else { "ies" },
            never.join("; ")
        );
        if !held.is_empty() {
            msg.push_str(&format!(
                "; the promotion policy also holds back {}",
                held.join("; ")
            ));
        }
        return Err(StageError::Refused(msg));
    }
    let (held, allowed) = judge(stage, sel, &chosen, ask);
    if !held.is_empty() {
        return Err(StageError::Refused(format!(
            "nothing was promoted: the promotion policy holds back {}",
            held.join("; ")
        )));
    }
    chosen.sort_by(|a, b| a.path.cmp(&b.path).then(a.op.cmp(&b.op)));
    Ok((chosen, allowed.into_iter().collect()))
}

/// Every `--allow` names a rule of the stage's policy.
fn check_allow_rules(stage: &Stage, sel: &Selection) -> Result<()> {
    let known = stage.meta.policy.rule_ids();
    match sel.allow.iter().find(|a| !known.contains(&a.as_str())) {
        Some(bad) => Err(StageError::Invalid(format!(
            "--allow {bad}: no such rule (rules: {})",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The entries the selection names: everything, or what is at or under
/// each path, with the new directories above a chosen entry.
fn select(set: &ChangeSet, sel: &Selection) -> Result<Vec<Change>> {
    if sel.paths.is_empty() {
        return Ok(set.entries.clone());
    }
    let mut out = Vec::new();
    for p in &sel.paths {
        let p = p.trim_end_matches('/');
        let hits: Vec<&Change> = set.entries.iter().filter(|e| under(&e.path, p)).collect();
        if hits.is_empty() {
            return Err(StageError::Invalid(format!(
                "{p}: no staged change at or under this path (see `cordon changes {}`)",
                set.run_id
            )));
        }
        out.extend(hits.into_iter().cloned());
    }
    let needed: BTreeSet<String> = out
        .iter()
        .flat_map(|e| {
            let mut up = Vec::new();
            let mut p = e.path.as_str();
            while let Some((parent, _)) = p.rsplit_once('/') {
                up.push(parent.to_owned());
                p = parent;
            }
            up
        })
        .collect();
    out.extend(
        set.entries
            .iter()
            .filter(|e| e.op == Op::Added && e.kind == Kind::Dir && needed.contains(&e.path))
            .cloned(),
    );
    out.sort_by(|a, b| a.path.cmp(&b.path).then(a.op.cmp(&b.op)));
    out.dedup();
    Ok(out)
}

/// "path: why" for each entry that can never be promoted.
fn never_promotable(chosen: &[Change]) -> Vec<String> {
    chosen
        .iter()
        .filter_map(|e| {
            e.unsafe_reason
                .as_ref()
                .map(|why| format!("{}: {why}", e.path))
        })
        .collect()
}

/// The policy's (and the scanner's) word on each entry: what it holds
/// back (one line each, with the `--allow` that would pass it) and which
/// rules were overridden or answered yes to.
fn judge(
    stage: &Stage,
    sel: &Selection,
    chosen: &[Change],
    ask: &mut dyn FnMut(&Change, &Decision) -> bool,
) -> (Vec<String>, BTreeSet<String>) {
    let mut held = Vec::new();
    let mut allowed = BTreeSet::new();
    for e in chosen {
        let d = decide(stage, sel, e);
        let overridden = d.rules.iter().all(|r| sel.allow.contains(r));
        match d.action {
            Some(Action::Refuse) | Some(Action::Ask) if overridden => {
                allowed.extend(d.rules.iter().cloned());
            }
            Some(Action::Ask) if ask(e, &d) => {
                allowed.extend(d.rules.iter().cloned());
            }
            Some(a @ (Action::Ask | Action::Refuse)) => held.push(format!(
                "{} {} ({} by rule {}; to promote it: --allow {})",
                e.op.as_str(),
                e.path,
                if a == Action::Refuse {
                    "refused"
                } else {
                    "needs a yes"
                },
                d.rules.join(", "),
                d.rules.join(" --allow ")
            )),
            _ => {}
        }
    }
    (held, allowed)
}

/// The policy's decision on one entry, raised to `ask` (rule `scanner`)
/// when the scanner finds something in it.
fn decide(stage: &Stage, sel: &Selection, e: &Change) -> Decision {
    let mut d = stage.meta.policy.decide(e);
    if let Some(scanner) = sel.scanner {
        if !scan(stage, scanner, e).is_empty() {
            if d.action < Some(Action::Ask) {
                d = Decision {
                    action: Some(Action::Ask),
                    rules: Vec::new(),
                };
            }
            if d.action == Some(Action::Ask) {
                d.rules.push("scanner".into());
            }
        }
    }
    d
}

/// Whether the host entry now at `rel` is the change's base.
fn host_is(root: BorrowedFd<'_>, rel: &str, base: Option<&Base>) -> std::io::Result<bool> {
    let now = lstat_at(root, rel)?;
    Ok(match (base, now) {
        (None, None) => true,
        (Some(b), Some(st)) => {
            let kind = Kind::of(st.st_mode);
            kind == b.kind
                && st.st_mode & 0o7777 == b.mode
                && (kind == Kind::Dir || content_hash(root, rel, kind)? == b.hash)
        }
        _ => false,
    })
}

fn conflict(e: &Change, why: &str) -> StageError {
    StageError::Conflict(format!(
        "nothing was promoted: {} {}: {why}; the host's version was kept (look at it, then promote the other paths or discard the run)",
        e.op.as_str(),
        e.path
    ))
}

/// One step taken, and how to take it back.
#[derive(Debug)]
enum Undo {
    /// A new entry at `path`: remove it.
    Remove { path: String, dir: bool },
    /// A file swapped with `tmp`: swap back, then take `tmp` away.
    Exchange { path: String, tmp: String },
    /// A new file placed at `path` from the temporary `tmp`: take it away.
    Placed { path: String, tmp: String },
    /// `path` renamed to `tmp`: rename back.
    Aside { path: String, tmp: String },
    /// An empty directory removed: create it again.
    Rmdir { path: String, mode: u32 },
    /// A directory's mode changed.
    Chmod { path: String, mode: u32 },
}

struct Applier<'a> {
    root: BorrowedFd<'a>,
    upper: BorrowedFd<'a>,
    undo: Vec<Undo>,
    /// Moved-aside old entries, deleted when everything succeeded.
    garbage: Vec<String>,
    /// Temporary files not yet in place.
    pending: Vec<String>,
    /// Temporary files that are the upper layer's own file, moved out of
    /// it (the value: its path there); taken away means moved back.
    from_upper: std::collections::HashMap<String, String>,
    counter: usize,
    /// A private directory at the tree's root that deleted files are moved
    /// into (so that their directory can be removed) until the end.
    trash: Option<String>,
    /// The stage's graveyard (outside the tree), if it could be made.
    graveyard: Option<OwnedFd>,
}

fn io(path: &str, e: impl Into<std::io::Error>) -> StageError {
    StageError::io(path, e)
}

fn sibling(rel: &str, tmp_name: &str) -> String {
    match rel.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/{tmp_name}"),
        None => tmp_name.to_owned(),
    }
}

impl Applier<'_> {
    fn tmp_for(&mut self, rel: &str) -> String {
        self.counter += 1;
        sibling(
            rel,
            &format!(".cordon-promote-{}-{}", std::process::id(), self.counter),
        )
    }

    fn trash_name(&mut self) -> Result<String> {
        let dir = match &self.trash {
            Some(d) => d.clone(),
            None => {
                let d = format!(".cordon-promote-{}-trash", std::process::id());
                rustix::fs::mkdirat(self.root, d.as_str(), Mode::from_raw_mode(0o700))
                    .map_err(|err| io(&d, err))?;
                self.undo.push(Undo::Remove {
                    path: d.clone(),
                    dir: true,
                });
                self.trash = Some(d.clone());
                d
            }
        };
        self.counter += 1;
        Ok(format!("{dir}/{}", self.counter))
    }

    fn rename(&self, from: &str, to: &str, flags: RenameFlags) -> std::result::Result<(), Errno> {
        let (fdir, fname) = parent_of(self.root, from)?;
        let (tdir, tname) = parent_of(self.root, to)?;
        rustix::fs::renameat_with(&fdir, fname, &tdir, tname, flags)
    }

    fn unlink(&self, rel: &str, dir: bool) -> std::result::Result<(), Errno> {
        let (d, name) = parent_of(self.root, rel)?;
        let flags = if dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&d, name, flags)
    }

    fn delete(&mut self, e: &Change) -> Result<()> {
        let base = e
            .base
            .as_ref()
            .ok_or_else(|| conflict(e, "no base recorded"))?;
        if base.kind == Kind::Dir {
            match self.unlink(&e.path, true) {
                Ok(()) => {}
                Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => {
                    return Err(conflict(
                        e,
                        "the host directory holds entries the run did not see",
                    ))
                }
                Err(err) => return Err(io(&e.path, err)),
            }
            self.undo.push(Undo::Rmdir {
                path: e.path.clone(),
                mode: base.mode & 0o777,
            });
            return Ok(());
        }
        let tmp = self.trash_name()?;
        self.rename(&e.path, &tmp, RenameFlags::NOREPLACE)
            .map_err(|err| io(&e.path, err))?;
        self.undo.push(Undo::Aside {
            path: e.path.clone(),
            tmp: tmp.clone(),
        });
        self.check_moved_aside(e, base, tmp)
    }

    /// What a rename moved aside must still be the base (a host change
    /// racing the first check is caught here); it is deleted at the end.
    fn check_moved_aside(&mut self, e: &Change, base: &Base, tmp: String) -> Result<()> {
        if !host_is(self.root, &tmp, Some(base)).map_err(|err| io(&e.path, err))? {
            return Err(conflict(e, "the host file changed since the run ended"));
        }
        self.garbage.push(tmp);
        Ok(())
    }

    fn mkdir(&mut self, e: &Change) -> Result<()> {
        let mode = e.mode.unwrap_or(0o755) & 0o777;
        let (dir, name) = parent_of(self.root, &e.path).map_err(|err| io(&e.path, err))?;
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                return Err(conflict(e, "something now exists on the host at this path"))
            }
            Err(err) => return Err(io(&e.path, err)),
        }
        self.undo.push(Undo::Remove {
            path: e.path.clone(),
            dir: true,
        });
        self.chmod_dir(&e.path, mode)
    }

    fn chmod_dir(&self, rel: &str, mode: u32) -> Result<()> {
        let fd = fsutil::open_beneath(self.root, rel, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|err| io(rel, err))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o777)).map_err(|err| io(rel, err))
    }

    fn dir_mode(&mut self, e: &Change) -> Result<()> {
        let base = e
            .base
            .as_ref()
            .ok_or_else(|| conflict(e, "no base recorded"))?;
        if !host_is(self.root, &e.path, Some(base)).map_err(|err| io(&e.path, err))? {
            return Err(conflict(
                e,
                "the host directory changed since the run ended",
            ));
        }
        self.chmod_dir(&e.path, e.mode.unwrap_or(base.mode))?;
        self.undo.push(Undo::Chmod {
            path: e.path.clone(),
            mode: base.mode & 0o777,
        });
        Ok(())
    }

    /// Write the new file or symlink under a temporary name next to its
    /// target; its content must still hash to what the change set says.
    fn stage_new(&mut self, e: &Change) -> Result<String> {
        let tmp = self.tmp_for(&e.path);
        let (dir, tmp_name) = parent_of(self.root, &tmp).map_err(|err| io(&e.path, err))?;
        match e.kind {
            Kind::Symlink => {
                let target = e.link.as_deref().unwrap_or("");
                if crate::capture::escapes(&e.path, target) {
                    return Err(StageError::Refused(format!(
                        "{}: the symlink points outside the tree",
                        e.path
                    )));
                }
                rustix::fs::symlinkat(target, &dir, tmp_name).map_err(|err| io(&e.path, err))?;
                self.pending.push(tmp.clone());
            }
            Kind::File if self.move_from_upper(e, &dir, tmp_name, &tmp)? => {}
            Kind::File => {
                let out = rustix::fs::openat(
                    &dir,
                    tmp_name,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(|err| io(&e.path, err))?;
                self.pending.push(tmp.clone());
                let src = fsutil::open_beneath(self.upper, &e.path, OFlags::RDONLY)
                    .map_err(|err| io(&e.path, err))?;
                let hash = copy_hashing(src, &out).map_err(|err| io(&e.path, err))?;
                if Some(&hash) != e.hash.as_ref() {
                    return Err(StageError::Conflict(format!(
                        "nothing was promoted: {}: the staged file changed after the change set was captured",
                        e.path
                    )));
                }
                // Permission bits only: never setuid, setgid or sticky.
                rustix::fs::fchmod(&out, Mode::from_raw_mode(e.mode.unwrap_or(0o644) & 0o777))
                    .map_err(|err| io(&e.path, err))?;
            }
            k => {
                return Err(StageError::Refused(format!(
                    "{}: a {} is never promoted",
                    e.path,
                    k.as_str()
                )))
            }
        }
        Ok(tmp)
    }

    /// Move the upper layer's file itself to the temporary name `tmp`
    /// (`tmp_name` in `dir`) instead of copying it: one rename, no new
    /// inode and no data written, which is most of a large promotion's
    /// time on a busy disk. Only for a file of the caller with one link,
    /// on the tree's filesystem, whose content (read from the very inode
    /// that is moved) still hashes to the change set's; its extended
    /// attributes (ACLs included) are removed and its mode set to the
    /// permission bits. `Ok(false)`: not possible, copy it instead.
    fn move_from_upper(
        &mut self,
        e: &Change,
        dir: &OwnedFd,
        tmp_name: &str,
        tmp: &str,
    ) -> Result<bool> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK;
        let Ok(src) = fsutil::open_beneath(self.upper, &e.path, flags) else {
            return Ok(false);
        };
        let Ok(st) = rustix::fs::fstat(&src) else {
            return Ok(false);
        };
        if st.st_mode & 0o170000 != 0o100000
            || st.st_nlink != 1
            || st.st_uid != rustix::process::geteuid().as_raw()
        {
            return Ok(false);
        }
        if !strip_xattrs(&src) {
            return Ok(false);
        }
        let (hash, _) = fsutil::hash_reader(std::fs::File::from(
            src.try_clone().map_err(|err| io(&e.path, err))?,
        ))
        .map_err(|err| io(&e.path, err))?;
        if Some(&hash) != e.hash.as_ref() {
            return Err(StageError::Conflict(format!(
                "nothing was promoted: {}: the staged file changed after the change set was captured",
                e.path
            )));
        }
        let (udir, uname) = parent_of(self.upper, &e.path).map_err(|err| io(&e.path, err))?;
        match rustix::fs::renameat_with(&udir, uname, dir, tmp_name, RenameFlags::NOREPLACE) {
            Ok(()) => {}
            Err(_) => return Ok(false), // EXDEV: another filesystem
        }
        self.pending.push(tmp.to_owned());
        self.from_upper.insert(tmp.to_owned(), e.path.clone());
        // What was renamed must be the inode that was hashed.
        let moved = rustix::fs::statat(dir, tmp_name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|err| io(&e.path, err))?;
        if (moved.st_dev, moved.st_ino) != (st.st_dev, st.st_ino) {
            return Err(StageError::Conflict(format!(
                "nothing was promoted: {}: the staged file was replaced while it was promoted",
                e.path
            )));
        }
        // Permission bits only: never setuid, setgid or sticky.
        rustix::fs::fchmod(&src, Mode::from_raw_mode(e.mode.unwrap_or(0o644) & 0o777))
            .map_err(|err| io(&e.path, err))?;
        Ok(true)
    }

    /// Swap the staged temporary file in.
    fn place(&mut self, e: &Change, tmp: String) -> Result<()> {
        match &e.base {
            None => {
                match self.rename(&tmp, &e.path, RenameFlags::NOREPLACE) {
                    Ok(()) => {}
                    Err(Errno::EXIST) => {
                        return Err(conflict(e, "something now exists on the host at this path"))
                    }
                    Err(err) => return Err(io(&e.path, err)),
                }
                self.pending.retain(|p| *p != tmp);
                self.undo.push(Undo::Placed {
                    path: e.path.clone(),
                    tmp,
                });
            }
            Some(base) => {
                self.rename(&tmp, &e.path, RenameFlags::EXCHANGE)
                    .map_err(|err| io(&e.path, err))?;
                self.pending.retain(|p| *p != tmp);
                self.undo.push(Undo::Exchange {
                    path: e.path.clone(),
                    tmp: tmp.clone(),
                });
                self.check_moved_aside(e, base, tmp)?;
            }
        }
        Ok(())
    }

    /// Take a moved-aside old entry out of the tree: into the graveyard
    /// (one rename; the store on another filesystem: `EXDEV`), else
    /// deleted here.
    fn dispose(&mut self, rel: &str) {
        if let Some(g) = &self.graveyard {
            self.counter += 1;
            let moved = parent_of(self.root, rel).and_then(|(dir, name)| {
                rustix::fs::renameat_with(
                    &dir,
                    name,
                    g,
                    self.counter.to_string().as_str(),
                    RenameFlags::NOREPLACE,
                )
            });
            match moved {
                Ok(()) => return,
                Err(Errno::XDEV) => self.graveyard = None,
                Err(_) => {}
            }
        }
        let _ = self.unlink(rel, false);
    }

    /// Take a new file at `rel` (made as the temporary `tmp`) out of the
    /// tree again: back into the upper layer if it came from there, else
    /// deleted.
    fn take_away(&self, rel: &str, tmp: &str) -> std::result::Result<(), Errno> {
        match self.from_upper.get(tmp) {
            Some(upper_rel) => {
                let (from, name) = parent_of(self.root, rel)?;
                let (to, to_name) = parent_of(self.upper, upper_rel)?;
                rustix::fs::renameat_with(&from, name, &to, to_name, RenameFlags::NOREPLACE)
            }
            None => self.unlink(rel, false),
        }
    }

    fn rollback(&mut self) {
        for p in std::mem::take(&mut self.pending) {
            let _ = self.take_away(&p, &p);
        }
        while let Some(u) = self.undo.pop() {
            let _ = match u {
                Undo::Remove { path, dir } => self.unlink(&path, dir),
                Undo::Placed { path, tmp } => self.take_away(&path, &tmp),
                Undo::Exchange { path, tmp } => self
                    .rename(&tmp, &path, RenameFlags::EXCHANGE)
                    .and_then(|()| self.take_away(&tmp, &tmp)),
                Undo::Aside { path, tmp } => self.rename(&tmp, &path, RenameFlags::NOREPLACE),
                Undo::Rmdir { path, mode } => parent_of(self.root, &path)
                    .and_then(|(d, n)| rustix::fs::mkdirat(&d, n, Mode::from_raw_mode(mode))),
                Undo::Chmod { path, mode } => self.chmod_dir(&path, mode).map_err(|_| Errno::IO),
            };
        }
    }
}

/// Remove every extended attribute of `fd` (a file a run wrote can carry
/// an ACL or other attributes a copy would not); false when one cannot be
/// listed or removed.
fn strip_xattrs(fd: &OwnedFd) -> bool {
    let mut names = vec![0u8; 4096];
    let n = match rustix::fs::flistxattr(fd, &mut names) {
        Ok(n) => n,
        Err(Errno::NOTSUP) => return true, // a filesystem without them
        Err(_) => return false,
    };
    names[..n]
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .all(|name| {
            std::ffi::CString::new(name)
                .is_ok_and(|name| rustix::fs::fremovexattr(fd, name.as_c_str()).is_ok())
        })
}

fn copy_hashing(src: OwnedFd, out: &OwnedFd) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut src = std::fs::File::from(src);
    let mut dst = std::fs::File::from(out.try_clone()?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 128 * 1024];
    loop {
        let n = src.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        dst.write_all(&buf[..n])?;
    }
    Ok(hex::encode(h.finalize()))
}

/// Apply `chosen` (from [`choose`]) to the host tree, all or nothing, and
/// remember them as promoted.
pub fn promote(stage: &Stage, chosen: Vec<Change>, allowed_rules: Vec<String>) -> Result<Promoted> {
    let root =
        fsutil::open_root(&stage.meta.target).map_err(|e| StageError::io(&stage.meta.target, e))?;
    let upper = fsutil::open_root(&stage.upper()).map_err(|e| StageError::io(stage.upper(), e))?;
    // Conflicts first: nothing is touched when any entry's host side moved.
    for e in &chosen {
        if e.base.as_ref().is_some_and(|b| b.changed_during_run) {
            return Err(conflict(e, "the host file changed while the run was going"));
        }
        if e.op == Op::Added && e.kind == Kind::Dir {
            continue; // checked by mkdir
        }
        if !host_is(root.as_fd(), &e.path, e.base.as_ref()).map_err(|err| io(&e.path, err))? {
            return Err(conflict(
                e,
                "the host changed this path since the run ended",
            ));
        }
    }
    let mut deletions: Vec<&Change> = chosen.iter().filter(|e| e.op == Op::Deleted).collect();
    deletions.sort_by_key(|e| std::cmp::Reverse(depth(&e.path)));
    let mut dirs: Vec<&Change> = chosen
        .iter()
        .filter(|e| e.op != Op::Deleted && e.kind == Kind::Dir)
        .collect();
    dirs.sort_by_key(|e| depth(&e.path));
    let files: Vec<&Change> = chosen
        .iter()
        .filter(|e| e.op != Op::Deleted && e.kind != Kind::Dir)
        .collect();

    let mut a = Applier {
        root: root.as_fd(),
        upper: upper.as_fd(),
        undo: Vec::new(),
        garbage: Vec::new(),
        pending: Vec::new(),
        counter: 0,
        trash: None,
        graveyard: stage.graveyard().ok(),
        from_upper: std::collections::HashMap::new(),
    };
    let result = (|| -> Result<()> {
        for e in &deletions {
            a.delete(e)?;
        }
        for e in &dirs {
            if e.op == Op::Added {
                a.mkdir(e)?;
            } else {
                a.dir_mode(e)?;
            }
        }
        let staged: Vec<String> = files
            .iter()
            .map(|e| a.stage_new(e))
            .collect::<Result<_>>()?;
        // One flush of every new file before any of them is swapped in.
        rustix::fs::syncfs(a.root).map_err(|err| StageError::io(&stage.meta.target, err))?;
        for (e, tmp) in files.iter().zip(staged) {
            a.place(e, tmp)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        a.rollback();
        return Err(e);
    }
    for g in std::mem::take(&mut a.garbage) {
        a.dispose(&g);
    }
    if let Some(t) = a.trash.take() {
        let _ = a.unlink(&t, true);
    }
    let _ = rustix::fs::fsync(&root);
    stage.mark_promoted(chosen.iter().map(|e| (e.path.clone(), e.op)))?;
    Ok(Promoted {
        applied_hash: entries_hash(&chosen),
        entries: chosen,
        allowed_rules,
    })
}
