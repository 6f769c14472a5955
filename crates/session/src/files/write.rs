//! Atomic writes: a new file next to the target, renamed over it when
//! complete; removed, and its bytes given back to the quota, when not.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::resolve::errno;
use super::{FilesError, FilesErrorKind, Quota, SandboxPath, SandboxRoot};

/// Mode of a new file (an existing file keeps its own, without setuid,
/// setgid and sticky bits).
const NEW_FILE_MODE: u32 = 0o644;

/// A write in progress. Dropped before [`PendingWrite::commit`], it leaves
/// nothing behind.
#[derive(Debug)]
pub struct PendingWrite {
    path: SandboxPath,
    dir: OwnedFd,
    name: String,
    tmp: String,
    file: std::fs::File,
    written: u64,
    max_file: u64,
    quota: Arc<Quota>,
    committed: bool,
}

impl PendingWrite {
    /// Start writing `path` (its missing parent directories are made).
    /// At most `max_file` bytes; every byte is taken from `quota`.
    pub fn begin(
        root: &SandboxRoot,
        path: &SandboxPath,
        max_file: u64,
        quota: Arc<Quota>,
    ) -> Result<PendingWrite, FilesError> {
        let (Some(name), Some(parent)) = (path.file_name(), path.parent()) else {
            return Err(FilesError::bad_path(
                "the root directory cannot be written as a file",
            ));
        };
        let dir = root.dir(&parent, true)?;
        let existing = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    return Err(FilesError::new(
                        FilesErrorKind::Conflict,
                        format!("{path} is a directory"),
                    ))
                }
                FileType::RegularFile => Some(st),
                _ => None,
            },
            Err(Errno::NOENT) => None,
            Err(e) => return Err(errno(e, path, "stat")),
        };
        let mode = existing.map_or(NEW_FILE_MODE, |st| st.st_mode & 0o777);
        let tmp = format!(
            ".cordon-write-{}",
            crate::random::random_hex(8).map_err(|e| io_error(e, path))?
        );
        // One name in the directory's descriptor, O_CREAT|O_EXCL: nothing
        // to resolve, and never an existing file or a symlink.
        let fd = rustix::fs::openat(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| errno(e, path, "create a file next to"))?;
        let pending = PendingWrite {
            path: path.clone(),
            name: name.to_owned(),
            tmp,
            file: std::fs::File::from(fd),
            dir,
            written: 0,
            max_file,
            quota,
            committed: false,
        };
        rustix::fs::fchmod(&pending.file, Mode::from_raw_mode(mode))
            .map_err(|e| errno(e, path, "set the mode of"))?;
        Ok(pending)
    }

    pub fn path(&self) -> &SandboxPath {
        &self.path
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Append `chunk`: refused over the per-file limit (413) or the
    /// session's quota (507).
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), FilesError> {
        let n = chunk.len() as u64;
        if self.written.saturating_add(n) > self.max_file {
            return Err(too_large(&self.path, self.max_file));
        }
        self.quota.reserve(n)?;
        self.written += n;
        self.file
            .write_all(chunk)
            .map_err(|e| io_error(e, &self.path))
    }

    /// Put the file in place: flushed, then renamed over the name in one
    /// step (readers see the old file or the new one, never a part).
    pub fn commit(mut self) -> Result<u64, FilesError> {
        rustix::fs::fdatasync(&self.file).map_err(|e| errno(e, &self.path, "flush"))?;
        rustix::fs::renameat(&self.dir, self.tmp.as_str(), &self.dir, self.name.as_str())
            .map_err(|e| errno(e, &self.path, "rename onto"))?;
        self.committed = true;
        Ok(self.written)
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if !self.committed {
            let _ = rustix::fs::unlinkat(&self.dir, self.tmp.as_str(), AtFlags::empty());
            self.quota.release(self.written);
        }
    }
}

/// The per-file limit, said before or while the body arrives.
pub fn too_large(path: &SandboxPath, limit: u64) -> FilesError {
    FilesError::new(
        FilesErrorKind::TooLarge,
        format!("{path}: the body is larger than the per-file limit of {limit} bytes"),
    )
    .with_fix("write a smaller file, or start the server with a larger --max-file-size")
}

fn io_error(e: std::io::Error, path: &SandboxPath) -> FilesError {
    match e.raw_os_error() {
        Some(code) => errno(Errno::from_raw_os_error(code), path, "write"),
        None => FilesError::new(FilesErrorKind::Io, format!("cannot write {path}: {e}")),
    }
}
