//! Files inside a session, as its processes see them.
//!
//! Every lookup starts at the sandbox's root (`Session::open_root`: the
//! init's `/`, handed over on its control socket) and goes through
//! `openat2` with
//! `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`: `..` stops at that root and
//! an absolute symlink planted by the workload resolves inside it, so a
//! link to `/etc/shadow` names the sandbox's `/etc/shadow`, never the
//! host's, and `/proc/N/root`-style links are refused. Paths are checked
//! before that (`SandboxPath`: no NUL, no `..`). Kernel filesystems
//! (proc, sysfs, cgroup, ...) are refused: the API reads and writes files,
//! not kernel knobs.
//!
//! Writes are atomic: a new file in the same directory (through the
//! directory's descriptor), renamed over the name when complete. The name
//! itself is replaced, so a symlink there is replaced too, never followed.
//! Synchronous (plain system calls); async callers run them through
//! [`as_sandbox_user`], which also gives them the sandbox's credentials
//! (a server running as root works as the sandbox's user).

mod identity;
mod path;
mod resolve;
mod tree;
mod write;

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

pub use identity::as_sandbox_user;
pub use path::SandboxPath;
pub use resolve::{Node, SandboxRoot};
pub use tree::{write_tar, Listing};
pub use write::{too_large, PendingWrite};

/// What kind of failure, for the API's status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesErrorKind {
    /// The path cannot name a file in the sandbox (400).
    BadPath,
    NotFound,
    /// The path exists but is the wrong kind of thing (409).
    Conflict,
    /// Read-only, not permitted, or leaving the sandbox's root (403).
    Forbidden,
    /// Over the per-file limit (413).
    TooLarge,
    /// Over the session's quota, or the sandbox's filesystem is full (507).
    Quota,
    Io,
}

/// A files operation that failed: what, and how to fix it.
#[derive(Debug)]
pub struct FilesError {
    pub kind: FilesErrorKind,
    pub message: String,
    pub fix: Option<String>,
}

impl FilesError {
    pub(crate) fn new(kind: FilesErrorKind, message: impl Into<String>) -> FilesError {
        FilesError {
            kind,
            message: message.into(),
            fix: None,
        }
    }

    pub(crate) fn bad_path(message: impl Into<String>) -> FilesError {
        FilesError::new(FilesErrorKind::BadPath, message)
    }

    pub(crate) fn with_fix(mut self, fix: impl Into<String>) -> FilesError {
        self.fix = Some(fix.into());
        self
    }
}

impl std::fmt::Display for FilesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, " ({fix})")?;
        }
        Ok(())
    }
}

impl std::error::Error for FilesError {}

/// One name in a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: EntryType,
    pub size: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    Other,
}

/// Bytes a session may write through the files API, all files together.
/// Counted as they arrive; a write that does not complete gives its bytes
/// back.
#[derive(Debug)]
pub struct Quota {
    limit: u64,
    used: AtomicU64,
}

impl Quota {
    pub fn new(limit: u64) -> Quota {
        Quota {
            limit,
            used: AtomicU64::new(0),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Take `n` bytes, or say how far over the quota that would go.
    pub fn reserve(&self, n: u64) -> Result<(), FilesError> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= self.limit)
            })
            .map(|_| ())
            .map_err(|used| self.over(used, n))
    }

    /// Whether `n` more bytes would fit now (taking nothing): lets a body
    /// with a declared length be refused before it is read.
    pub fn check(&self, n: u64) -> Result<(), FilesError> {
        let used = self.used();
        match used.checked_add(n) {
            Some(total) if total <= self.limit => Ok(()),
            _ => Err(self.over(used, n)),
        }
    }

    fn over(&self, used: u64, n: u64) -> FilesError {
        FilesError::new(
            FilesErrorKind::Quota,
            format!(
                "this write would bring the bytes written to the sandbox through the files API to {} (quota {}, used {used})",
                used.saturating_add(n),
                self.limit
            ),
        )
        .with_fix("write less, or start the server with a larger --files-quota")
    }

    /// Give back `n` bytes reserved for a write that did not complete.
    pub fn release(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
    }
}

#[cfg(test)]
mod tests;
