//! The change set: what a staged run did to its tree, entry by entry, with
//! what the host had at each path when the run ended.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What happened at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Nothing was there; now something is.
    Added,
    /// The content (or a symlink's target) changed.
    Modified,
    /// Only the permission bits changed.
    Mode,
    /// It is gone.
    Deleted,
}

impl Op {
    /// One letter for listings: A, M, C (mode), D.
    pub fn letter(self) -> char {
        match self {
            Op::Added => 'A',
            Op::Modified => 'M',
            Op::Mode => 'C',
            Op::Deleted => 'D',
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Added => "added",
            Op::Modified => "modified",
            Op::Mode => "mode",
            Op::Deleted => "deleted",
        }
    }
}

/// What kind of file an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A character or block device.
    Device,
    Fifo,
    Socket,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::Device => "device",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
        }
    }

    pub(crate) fn of(mode: u32) -> Kind {
        match mode & 0o170000 {
            0o040000 => Kind::Dir,
            0o120000 => Kind::Symlink,
            0o020000 | 0o060000 => Kind::Device,
            0o010000 => Kind::Fifo,
            0o140000 => Kind::Socket,
            _ => Kind::File,
        }
    }
}

/// The host's entry at a path when the change set was captured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    pub kind: Kind,
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// SHA-256 of the content (of the target for a symlink); none for directories.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The host entry changed after the run started (its ctime is later):
    /// the run may not have seen it, so promoting over it is a conflict.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changed_during_run: bool,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Relative to the staged directory, `/`-separated.
    pub path: String,
    pub op: Op,
    /// The new entry's kind (the old one's for a deletion).
    pub kind: Kind,
    /// New size in bytes (none for a deletion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// New permission bits (none for a deletion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// SHA-256 of the new content (of the target for a symlink).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// A new symlink's target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// What the host had (none: nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<Base>,
    /// Why this entry can never be promoted (a device, a setuid/setgid bit,
    /// a symlink out of the tree, a name that is not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsafe_reason: Option<String>,
}

impl Change {
    /// True when the entry's new content is executable and the base was not
    /// (or there was no base).
    pub fn newly_executable(&self) -> bool {
        let exec = |m: u32| m & 0o111 != 0;
        self.kind == Kind::File
            && self.op != Op::Deleted
            && self.mode.is_some_and(exec)
            && !self
                .base
                .as_ref()
                .is_some_and(|b| b.kind == Kind::File && exec(b.mode))
    }
}

/// Every change of one staged run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSet {
    pub run_id: String,
    /// The staged host directory.
    pub target: std::path::PathBuf,
    /// How the run was staged (`overlay`).
    pub mode: String,
    /// Sorted by path.
    pub entries: Vec<Change>,
    /// SHA-256 over the entries (as canonical JSON): names exactly this
    /// change set in the audit store.
    pub hash: String,
}

impl ChangeSet {
    pub(crate) fn new(
        run_id: String,
        target: std::path::PathBuf,
        mode: &str,
        mut entries: Vec<Change>,
    ) -> ChangeSet {
        entries.sort_by(|a, b| a.path.cmp(&b.path).then(a.op.cmp(&b.op)));
        let hash = entries_hash(&entries);
        ChangeSet {
            run_id,
            target,
            mode: mode.to_owned(),
            entries,
            hash,
        }
    }

    /// The same change set without the entries at `paths`.
    pub(crate) fn without(&self, done: &std::collections::BTreeSet<(String, Op)>) -> ChangeSet {
        let entries = self
            .entries
            .iter()
            .filter(|e| !done.contains(&(e.path.clone(), e.op)))
            .cloned()
            .collect();
        ChangeSet::new(
            self.run_id.clone(),
            self.target.clone(),
            &self.mode,
            entries,
        )
    }
}

/// SHA-256 of the entries' JSON (serde_json writes struct fields in
/// declaration order, so the encoding is canonical for these types).
pub fn entries_hash(entries: &[Change]) -> String {
    let mut h = Sha256::new();
    for e in entries {
        if let Ok(text) = serde_json::to_vec(e) {
            h.update(&text);
        }
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}
