//! Learn mode's eyes: an observed call (see `seccomp::OBSERVED_SYSCALLS`)
//! decoded into the path it names and the access it asks for. The path is
//! read from the caller's memory through `/proc/PID/mem` and made absolute
//! with the caller's cwd or directory descriptor from `/proc/PID`.
//!
//! This is for writing a profile, never for a decision: the caller (or
//! another of its threads) may change the memory after it was read. The
//! profile it leads to is enforced later by the real layers.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::seccomp::{notify::Notification, syscalls::NATIVE, Syscall};

/// What a path was used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Opened for reading only.
    Read,
    /// Opened for writing (or created, or truncated).
    Write,
    /// Executed.
    Exec,
    /// Created as a directory.
    Mkdir,
}

/// One path the workload used, and how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedPath {
    /// Absolute, as the workload named it (not resolved through symlinks).
    pub path: PathBuf,
    pub access: Access,
    /// The first call that used it this way (`openat`, `execve`, ...).
    pub syscall: String,
    pub count: u64,
}

/// Paths seen during a run, deduplicated by (path, access).
#[derive(Debug, Default)]
pub(crate) struct Observations {
    seen: BTreeMap<(PathBuf, Access), (String, u64)>,
    /// Calls whose path could not be read (the caller died, a bad pointer).
    pub unreadable: u64,
    /// The processes that made an observed call.
    pub pids: std::collections::BTreeSet<u32>,
    /// The largest peak address space (`VmPeak`) of a process, read at its
    /// `exit_group`: what RLIMIT_AS, the memory limit where no memory
    /// cgroup is delegated, would have to allow.
    pub peak_address_space: u64,
    /// The most threads one process had, read at each `clone` and at its
    /// `exit_group`: RLIMIT_NPROC and the pids cgroup count threads, not
    /// processes.
    pub most_threads: u64,
}

/// At most this many distinct (path, access) pairs are kept.
const MAX_PATHS: usize = 100_000;

impl Observations {
    /// Note one observed call; `false` if it was not one this module knows.
    pub(crate) fn note(&mut self, req: &Notification) -> bool {
        let Some(call) = u32::try_from(req.nr).ok().and_then(|n| NATIVE.call(n)) else {
            return false;
        };
        match call {
            Syscall::ExitGroup => {
                let (peak, threads) = status_of(req.pid).unwrap_or_default();
                self.peak_address_space = self.peak_address_space.max(peak);
                self.most_threads = self.most_threads.max(threads);
                return true;
            }
            Syscall::Clone => {
                // A new thread joins the caller's group once the call
                // returns.
                let (_, threads) = status_of(req.pid).unwrap_or_default();
                let new_thread = req.args[0] & libc::CLONE_THREAD as u64 != 0;
                self.most_threads = self.most_threads.max(threads + u64::from(new_thread));
                return true;
            }
            _ => {}
        }
        let Some((dirfd, path_arg, flags)) = decode(call, req) else {
            return false;
        };
        if self.pids.len() < MAX_PATHS {
            self.pids.insert(req.pid);
        }
        match resolve(req.pid, dirfd, path_arg) {
            Some(path) => {
                let access = access_of(call, flags);
                if self.seen.len() < MAX_PATHS || self.seen.contains_key(&(path.clone(), access)) {
                    let e = self
                        .seen
                        .entry((path, access))
                        .or_insert_with(|| (call.name().to_owned(), 0));
                    e.1 += 1;
                }
            }
            None => self.unreadable += 1,
        }
        true
    }

    pub(crate) fn into_paths(self) -> Vec<ObservedPath> {
        self.seen
            .into_iter()
            .map(|((path, access), (syscall, count))| ObservedPath {
                path,
                access,
                syscall,
                count,
            })
            .collect()
    }
}

/// `AT_FDCWD` as the kernel sees it in a register.
const AT_FDCWD: i64 = libc::AT_FDCWD as i64;

/// The directory descriptor, the path pointer and the open flags of `call`.
fn decode(call: Syscall, req: &Notification) -> Option<(i64, u64, u64)> {
    let a = req.args;
    let creat = (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC) as u64;
    Some(match call {
        Syscall::Open => (AT_FDCWD, a[0], a[1]),
        Syscall::Openat => (a[0] as i32 as i64, a[1], a[2]),
        // The flags are the first field of `struct open_how`.
        Syscall::Openat2 => (a[0] as i32 as i64, a[1], read_u64(req.pid, a[2])?),
        Syscall::Creat => (AT_FDCWD, a[0], creat),
        Syscall::Execve | Syscall::Mkdir => (AT_FDCWD, a[0], 0),
        Syscall::Execveat | Syscall::Mkdirat => (a[0] as i32 as i64, a[1], 0),
        _ => return None,
    })
}

fn access_of(call: Syscall, flags: u64) -> Access {
    match call {
        Syscall::Execve | Syscall::Execveat => Access::Exec,
        Syscall::Mkdir | Syscall::Mkdirat => Access::Mkdir,
        _ => {
            let f = flags as i32;
            let writes =
                f & libc::O_ACCMODE != libc::O_RDONLY || f & (libc::O_CREAT | libc::O_TRUNC) != 0;
            if writes {
                Access::Write
            } else {
                Access::Read
            }
        }
    }
}

/// A live process's `VmPeak` in bytes and its number of threads
/// (`/proc/PID/status`, readable by anyone).
fn status_of(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().trim_end_matches("kB").trim())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmPeak:")? * 1024, field("Threads:")?))
}

fn mem(pid: u32) -> Option<File> {
    File::open(format!("/proc/{pid}/mem")).ok()
}

fn read_u64(pid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem(pid)?.read_exact_at(&mut b, addr).ok()?;
    Some(u64::from_ne_bytes(b))
}

/// A NUL-terminated string of at most PATH_MAX bytes from the caller's
/// memory, read in pieces that do not cross a page (the next page may be
/// unmapped).
fn read_c_string(pid: u32, addr: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mem = mem(pid)?;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < libc::PATH_MAX as usize {
        let len = (PAGE - at % PAGE) as usize;
        let mut buf = vec![0u8; len];
        let n = mem.read_at(&mut buf, at).ok()?;
        if n == 0 {
            return None;
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    None
}

/// The absolute path a call names (an empty path with a descriptor, as in
/// `execveat(fd, "", ..., AT_EMPTY_PATH)`, names the descriptor's file).
fn resolve(pid: u32, dirfd: i64, addr: u64) -> Option<PathBuf> {
    let raw = PathBuf::from(std::ffi::OsString::from_vec(read_c_string(pid, addr)?));
    if raw.is_absolute() {
        return Some(raw);
    }
    let base = if dirfd == AT_FDCWD {
        std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?
    } else {
        std::fs::read_link(format!("/proc/{pid}/fd/{dirfd}")).ok()?
    };
    Some(if raw.as_os_str().is_empty() {
        base
    } else {
        base.join(raw)
    })
}
