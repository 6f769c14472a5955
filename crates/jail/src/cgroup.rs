//! Control groups for one sandbox: memory (swap included), pids and CPU
//! accounting, on cgroup v2, on cgroup v1, or on a hybrid host where each
//! controller lives wherever the host mounted it.
//!
//! Written against the cgroup filesystem directly: the interface is a
//! handful of files, and the crates that wrap it pull in far more than the
//! few operations needed here.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    V1,
    V2,
}

/// Where a controller can be used: the directory under which cordon creates
/// its per-sandbox groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub version: Version,
    pub parent: PathBuf,
}

/// What this host offers, as found by [`probe`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Support {
    pub memory: Option<Place>,
    pub pids: Option<Place>,
    pub cpu: Option<Place>,
    /// Why a controller is missing, for the report and `cordon doctor`.
    pub problems: Vec<String>,
}

impl Support {
    /// Groups under the cgroup v2 group `parent` with CPU accounting only
    /// (no controllers), as in the empty cgroup2 tree of a host whose
    /// controllers are all in v1.
    pub fn v2_accounting_only(parent: PathBuf) -> Support {
        Support {
            cpu: Some(Place {
                version: Version::V2,
                parent,
            }),
            ..Support::default()
        }
    }

    /// "v1", "v2", "hybrid" or "none".
    pub fn label(&self) -> &'static str {
        let versions: Vec<Version> = [&self.memory, &self.pids, &self.cpu]
            .iter()
            .filter_map(|p| p.as_ref().map(|p| p.version))
            .collect();
        if versions.is_empty() {
            "none"
        } else if versions.iter().all(|v| *v == Version::V1) {
            "v1"
        } else if versions.iter().all(|v| *v == Version::V2) {
            "v2"
        } else {
            "hybrid"
        }
    }

    /// Memory and pids limits can both be enforced.
    pub fn complete(&self) -> bool {
        self.memory.is_some() && self.pids.is_some()
    }
}

#[derive(Debug, Clone)]
struct CgroupMount {
    root: String,
    mount_point: PathBuf,
    fstype: String,
    options: Vec<String>,
}

fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let rfields: Vec<&str> = right.split(' ').collect();
        if fields.len() < 5 || rfields.len() < 3 {
            continue;
        }
        let fstype = rfields[0];
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        out.push(CgroupMount {
            root: unescape(fields[3]),
            mount_point: PathBuf::from(unescape(fields[4])),
            fstype: fstype.to_owned(),
            options: rfields[2].split(',').map(str::to_owned).collect(),
        });
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let oct = std::str::from_utf8(&bytes[i + 1..i + 4]).ok();
            if let Some(v) = oct.and_then(|o| u8::from_str_radix(o, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/proc/self/cgroup`: (controllers, path) per hierarchy; v2 has "".
fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let ctrls = parts.next()?;
            let path = parts.next()?;
            let ctrls = if ctrls.is_empty() {
                Vec::new()
            } else {
                ctrls.split(',').map(str::to_owned).collect()
            };
            Some((ctrls, path.to_owned()))
        })
        .collect()
}

fn join_cgroup(mount: &CgroupMount, path: &str) -> PathBuf {
    let rel = path.strip_prefix(mount.root.as_str()).unwrap_or(path);
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mount.mount_point.clone()
    } else {
        mount.mount_point.join(rel)
    }
}

fn writable_dir(dir: &Path) -> bool {
    rustix::fs::access(
        dir,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .is_ok()
}

/// Find where memory, pids and CPU accounting can be used by this process.
pub fn probe() -> Support {
    let mut support = Support::default();
    let (Ok(mountinfo), Ok(own)) = (
        fs::read_to_string("/proc/self/mountinfo"),
        fs::read_to_string("/proc/self/cgroup"),
    ) else {
        support
            .problems
            .push("cannot read /proc/self/mountinfo or /proc/self/cgroup".into());
        return support;
    };
    let mounts = parse_mountinfo(&mountinfo);
    let own = parse_proc_cgroup(&own);

    // cgroup v2 first: it is what current hosts run.
    if let (Some(m), Some((_, path))) = (
        mounts.iter().find(|m| m.fstype == "cgroup2"),
        own.iter().find(|(c, _)| c.is_empty()),
    ) {
        let own_dir = join_cgroup(m, path);
        match v2_parent(m, &own_dir) {
            Ok(parent) => {
                let available =
                    fs::read_to_string(parent.join("cgroup.controllers")).unwrap_or_default();
                let has = |c: &str| available.split_whitespace().any(|x| x == c);
                let place = Place {
                    version: Version::V2,
                    parent: parent.clone(),
                };
                if has("memory") {
                    support.memory = Some(place.clone());
                }
                if has("pids") {
                    support.pids = Some(place.clone());
                }
                // cpu.stat (usage) exists in every v2 group, controller or not.
                support.cpu = Some(place);
            }
            Err(why) => support.problems.push(why),
        }
    }

    // cgroup v1 hierarchies for whatever v2 does not provide.
    for (ctrl, slot) in [("memory", 0), ("pids", 1), ("cpuacct", 2)] {
        let taken = match slot {
            0 => support.memory.is_some(),
            1 => support.pids.is_some(),
            _ => support
                .cpu
                .as_ref()
                .is_some_and(|p| p.version == Version::V1),
        };
        if taken {
            continue;
        }
        let Some(m) = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == ctrl))
        else {
            continue;
        };
        let Some((_, path)) = own.iter().find(|(c, _)| c.iter().any(|x| x == ctrl)) else {
            continue;
        };
        let dir = join_cgroup(m, path);
        if !writable_dir(&dir) {
            support.problems.push(format!(
                "cgroup v1 {ctrl} hierarchy {} is not writable by uid {}",
                dir.display(),
                rustix::process::getuid().as_raw()
            ));
            continue;
        }
        let place = Place {
            version: Version::V1,
            parent: dir,
        };
        match slot {
            0 => support.memory = Some(place),
            1 => support.pids = Some(place),
            _ => support.cpu = Some(place),
        }
    }
    if support.memory.is_none() {
        support.problems.push("no usable memory controller".into());
    }
    if support.pids.is_none() {
        support.problems.push("no usable pids controller".into());
    }
    support
}

/// Choose the v2 group under which sandboxes are created, moving this
/// process into a leaf when it owns its group alone (the "no internal
/// processes" rule forbids controllers on a group that holds processes).
fn v2_parent(mount: &CgroupMount, own_dir: &Path) -> std::result::Result<PathBuf, String> {
    if let Ok(p) = std::env::var("CORDON_CGROUP_PARENT") {
        let p = PathBuf::from(p);
        return if writable_dir(&p) {
            Ok(p)
        } else {
            Err(format!(
                "CORDON_CGROUP_PARENT={} is not writable",
                p.display()
            ))
        };
    }
    if own_dir == mount.mount_point {
        // We sit in the root group (root on the host, or a cgroup
        // namespace): use a dedicated child of the root.
        let parent = own_dir.join("cordon");
        if !writable_dir(own_dir) {
            return Err(format!(
                "cgroup v2 root {} is not writable",
                own_dir.display()
            ));
        }
        match fs::create_dir(&parent) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", parent.display())),
        }
        enable_controllers(own_dir);
        enable_controllers(&parent);
        return Ok(parent);
    }
    if !writable_dir(own_dir) {
        return Err(format!(
            "cgroup v2 group {} is not delegated to uid {} (run cordon under `systemd-run --user --scope -p Delegate=yes`)",
            own_dir.display(),
            rustix::process::getuid().as_raw()
        ));
    }
    let procs = fs::read_to_string(own_dir.join("cgroup.procs")).unwrap_or_default();
    let me = std::process::id().to_string();
    let others = procs
        .lines()
        .any(|l| l.trim() != me && !l.trim().is_empty());
    let subtree = fs::read_to_string(own_dir.join("cgroup.subtree_control")).unwrap_or_default();
    if procs.lines().any(|l| l.trim() == me) {
        if others {
            if subtree.contains("memory") && subtree.contains("pids") {
                return Ok(own_dir.to_path_buf());
            }
            return Err(format!(
                "cgroup v2 group {} holds other processes, so cordon cannot enable controllers there (run cordon under `systemd-run --user --scope -p Delegate=yes`)",
                own_dir.display()
            ));
        }
        // Move ourselves into a leaf so the group can delegate controllers.
        let leaf = own_dir.join("cordon-supervisor");
        let _ = fs::create_dir(&leaf);
        fs::write(leaf.join("cgroup.procs"), &me)
            .map_err(|e| format!("cannot move into {}: {e}", leaf.display()))?;
    }
    enable_controllers(own_dir);
    Ok(own_dir.to_path_buf())
}

fn enable_controllers(dir: &Path) {
    let available = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let wanted: Vec<String> = ["memory", "pids", "cpu"]
        .iter()
        .filter(|c| available.split_whitespace().any(|x| x == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if !wanted.is_empty() {
        // Best effort: what could not be enabled shows up as a missing
        // controller in the child and is reported there.
        let _ = fs::write(dir.join("cgroup.subtree_control"), wanted.join(" "));
    }
}

/// The groups of one sandbox.
#[derive(Debug)]
pub struct Cgroup {
    memory: Option<(Version, PathBuf)>,
    pids: Option<(Version, PathBuf)>,
    cpu: Option<(Version, PathBuf)>,
    /// Every distinct directory created, in creation order.
    dirs: Vec<PathBuf>,
}

/// Counters read when the sandbox has ended.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Stats {
    pub peak_memory: Option<u64>,
    /// None without a memory controller: no counter to read.
    pub oom_kills: Option<u64>,
    /// None without a pids controller: no counter to read.
    pub pids_limit_hits: Option<u64>,
    /// The most tasks (processes and threads) the group held at once
    /// (`pids.peak`); None without a pids controller or on a kernel
    /// without the file.
    pub peak_tasks: Option<u64>,
    pub user_usec: Option<u64>,
    pub system_usec: Option<u64>,
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Value of `key` in a flat keyed file such as `memory.events`.
fn read_key(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

impl Cgroup {
    /// Create the groups named `name` under each usable parent and apply
    /// the limits. Controllers that are missing are simply absent.
    pub fn create(
        support: &Support,
        name: &str,
        memory: Option<u64>,
        pids: Option<u64>,
    ) -> io::Result<Cgroup> {
        let mut cg = Cgroup {
            memory: None,
            pids: None,
            cpu: None,
            dirs: Vec::new(),
        };
        let result = cg.create_inner(support, name, memory, pids);
        match result {
            Ok(()) => Ok(cg),
            Err(e) => {
                cg.remove();
                Err(e)
            }
        }
    }

    fn dir_for(&mut self, place: &Place, name: &str) -> io::Result<PathBuf> {
        let dir = place.parent.join(name);
        if !self.dirs.contains(&dir) {
            sweep_stale(&place.parent);
            fs::create_dir(&dir)?;
            self.dirs.push(dir.clone());
        }
        Ok(dir)
    }

    fn create_inner(
        &mut self,
        support: &Support,
        name: &str,
        memory: Option<u64>,
        pids: Option<u64>,
    ) -> io::Result<()> {
        if let Some(place) = &support.memory {
            let dir = self.dir_for(place, name)?;
            if let Some(limit) = memory {
                match place.version {
                    Version::V2 => {
                        write_file(&dir.join("memory.max"), &limit.to_string())?;
                        let swap = dir.join("memory.swap.max");
                        if swap.exists() {
                            write_file(&swap, "0")?;
                        }
                    }
                    Version::V1 => {
                        write_file(&dir.join("memory.limit_in_bytes"), &limit.to_string())?;
                        let memsw = dir.join("memory.memsw.limit_in_bytes");
                        if memsw.exists() {
                            write_file(&memsw, &limit.to_string())?;
                        }
                    }
                }
            }
            self.memory = Some((place.version, dir));
        }
        if let Some(place) = &support.pids {
            let dir = self.dir_for(place, name)?;
            if let Some(limit) = pids {
                write_file(&dir.join("pids.max"), &limit.to_string())?;
            }
            self.pids = Some((place.version, dir));
        }
        if let Some(place) = &support.cpu {
            let dir = self.dir_for(place, name)?;
            self.cpu = Some((place.version, dir));
        }
        Ok(())
    }

    /// Set the memory and process limits of existing groups (a pooled
    /// sandbox gets its request's limits when it is claimed); `None`
    /// leaves a limit unlimited.
    pub fn set_limits(&self, memory: Option<u64>, pids: Option<u64>) -> io::Result<()> {
        let text =
            |v: Option<u64>, unlimited: &str| v.map_or(unlimited.to_owned(), |v| v.to_string());
        if let Some((version, dir)) = &self.memory {
            match version {
                Version::V2 => write_file(&dir.join("memory.max"), &text(memory, "max"))?,
                Version::V1 => {
                    let value = text(memory, "-1");
                    // memsw must stay >= the memory limit: lower it last,
                    // raise it first.
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    let has_memsw = memsw.exists();
                    if has_memsw {
                        let _ = write_file(&memsw, &value);
                    }
                    write_file(&dir.join("memory.limit_in_bytes"), &value)?;
                    if has_memsw {
                        write_file(&memsw, &value)?;
                    }
                }
            }
        }
        if let Some((_, dir)) = &self.pids {
            write_file(&dir.join("pids.max"), &text(pids, "max"))?;
        }
        Ok(())
    }

    /// The directories created, for the janitor.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Put a process (and so its future children) into every group.
    pub fn add(&self, pid: i32) -> io::Result<()> {
        let pid = pid.to_string();
        for dir in &self.dirs {
            write_file(&dir.join("cgroup.procs"), &pid)?;
        }
        Ok(())
    }

    /// The group's one cgroup v2 directory, open, for a child to be
    /// created in (`sys::clone_sandbox_into`); `None` when it has none (v1
    /// only), several, or cannot be opened (the child is then moved in by
    /// [`Cgroup::add_v2`]).
    pub(crate) fn open_v2_dir(&self) -> Option<std::os::fd::OwnedFd> {
        let mut v2 = self.dirs.iter().filter(|d| !self.is_v1(d));
        let dir = v2.next()?;
        if v2.next().is_some() {
            return None;
        }
        fs::File::open(dir).ok().map(std::os::fd::OwnedFd::from)
    }

    fn is_v1(&self, dir: &Path) -> bool {
        [&self.memory, &self.pids, &self.cpu]
            .iter()
            .any(|c| matches!(c, Some((Version::V1, d)) if d == dir))
    }

    /// Put a process into the cgroup v2 groups only; it joins the v1 groups
    /// itself with [`Cgroup::join_v1_self`].
    pub fn add_v2(&self, pid: i32) -> io::Result<()> {
        let pid = pid.to_string();
        for dir in self.dirs.iter().filter(|d| !self.is_v1(d)) {
            write_file(&dir.join("cgroup.procs"), &pid)?;
        }
        Ok(())
    }

    /// Move the calling process into the cgroup v1 groups by writing "0"
    /// to each group's `tasks` file. Only for a single-threaded process
    /// (its one thread is the whole process), such as the sandbox's first
    /// process before it starts anything. Moving oneself by thread skips
    /// the kernel's global cgroup_threadgroup_rwsem, whose write side waits
    /// for an RCU grace period (10-20 ms here) when a pid is written to
    /// `cgroup.procs` from outside.
    pub fn join_v1_self(&self) -> io::Result<()> {
        for dir in self.dirs.iter().filter(|d| self.is_v1(d)) {
            write_file(&dir.join("tasks"), "0")?;
        }
        Ok(())
    }

    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        if let Some((v, dir)) = &self.memory {
            match v {
                Version::V2 => {
                    s.peak_memory = read_u64(&dir.join("memory.peak"));
                    s.oom_kills =
                        Some(read_key(&dir.join("memory.events"), "oom_kill").unwrap_or(0));
                }
                Version::V1 => {
                    s.peak_memory = read_u64(&dir.join("memory.max_usage_in_bytes"));
                    s.oom_kills =
                        Some(read_key(&dir.join("memory.oom_control"), "oom_kill").unwrap_or(0));
                }
            }
        }
        if let Some((_, dir)) = &self.pids {
            s.pids_limit_hits = Some(read_key(&dir.join("pids.events"), "max").unwrap_or(0));
            s.peak_tasks = read_u64(&dir.join("pids.peak"));
        }
        if let Some((v, dir)) = &self.cpu {
            match v {
                Version::V2 => {
                    s.user_usec = read_key(&dir.join("cpu.stat"), "user_usec");
                    s.system_usec = read_key(&dir.join("cpu.stat"), "system_usec");
                }
                Version::V1 => {
                    s.user_usec = read_u64(&dir.join("cpuacct.usage_user")).map(|ns| ns / 1000);
                    s.system_usec = read_u64(&dir.join("cpuacct.usage_sys")).map(|ns| ns / 1000);
                }
            }
        }
        s
    }

    /// Remove the groups (they must be empty). Idempotent. Returns
    /// whether every group is gone.
    pub fn remove(&mut self) -> bool {
        let gone = remove_dirs(&self.dirs);
        self.dirs.clear();
        gone
    }
}

/// One try of [`remove_dirs`], without waiting: true when every group is
/// gone (the usual case once the sandbox's last process has exited).
pub fn remove_dirs_now(dirs: &[PathBuf]) -> bool {
    dirs.iter().rev().all(|dir| match fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    })
}

/// Kill whatever is left in the groups and remove them, retrying briefly
/// while the kernel finishes tearing processes down. Returns whether every
/// one is gone.
pub fn remove_dirs(dirs: &[PathBuf]) -> bool {
    let mut all = true;
    for dir in dirs.iter().rev() {
        let mut gone = false;
        for attempt in 0..200 {
            match fs::remove_dir(dir) {
                Ok(()) => {
                    gone = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    gone = true;
                    break;
                }
                Err(_) => {
                    kill_members(dir);
                    std::thread::sleep(std::time::Duration::from_millis(if attempt < 10 {
                        1
                    } else {
                        10
                    }));
                }
            }
        }
        all &= gone;
    }
    all
}

fn kill_members(dir: &Path) {
    let kill = dir.join("cgroup.kill");
    if kill.exists() && write_file(&kill, "1").is_ok() {
        return;
    }
    if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill(2) with integer arguments.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Kill the members of, and remove, every group that the process `owner`
/// made (`cordon-<owner>-...`) under each place this host keeps groups.
pub fn remove_owned_by(owner: u32) {
    let support = probe();
    let prefix = format!("cordon-{owner}-");
    let mut parents: Vec<PathBuf> = [&support.memory, &support.pids, &support.cpu]
        .into_iter()
        .flatten()
        .map(|p| p.parent.clone())
        .collect();
    parents.sort();
    parents.dedup();
    for parent in parents {
        let Ok(entries) = fs::read_dir(&parent) else {
            continue;
        };
        let dirs: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .map(|e| e.path())
            .collect();
        remove_dirs(&dirs);
    }
}

/// Remove groups left behind by supervisors that died without cleaning up
/// (named `cordon-<pid>-...` with a dead pid and no members).
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = name
            .strip_prefix("cordon-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks for existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive {
            continue;
        }
        let procs = fs::read_to_string(entry.path().join("cgroup.procs")).unwrap_or_default();
        if procs.trim().is_empty() {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// A writable cgroup2 mount, for the unit tests that make groups in it
/// (hosts with v1 controllers usually still mount an empty one, as
/// `/sys/fs/cgroup/unified`). Without one it says SKIPPED and returns
/// `None`, or fails when run as root with `CORDON_TESTS_REQUIRE_ALL`.
#[cfg(test)]
pub(crate) fn writable_cgroup2_or_skip() -> Option<PathBuf> {
    let mount = fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|text| {
            parse_mountinfo(&text)
                .into_iter()
                .find(|m| m.fstype == "cgroup2")
        })
        .map(|m| m.mount_point)
        .filter(|p| rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_ok());
    if mount.is_none() {
        if std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_some()
            && rustix::process::getuid().is_root()
        {
            panic!("a writable cgroup2 mount is required as root");
        }
        eprintln!("SKIPPED: no writable cgroup2 mount (needs root or a delegated v2 group)");
    }
    mount
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hybrid_mountinfo() {
        let text = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    31 25 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                    32 25 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
                    40 25 8:1 / / rw - ext4 /dev/vda rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].mount_point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert!(m[0].options.contains(&"memory".to_string()));
        assert_eq!(m[1].fstype, "cgroup2");
    }

    #[test]
    fn parses_proc_cgroup_and_joins_paths() {
        let own = parse_proc_cgroup("4:memory:/a/b\n0::/user.slice\n");
        assert_eq!(own[0], (vec!["memory".to_string()], "/a/b".to_string()));
        assert_eq!(own[1], (vec![], "/user.slice".to_string()));
        let mount = CgroupMount {
            root: "/".into(),
            mount_point: "/sys/fs/cgroup/memory".into(),
            fstype: "cgroup".into(),
            options: vec![],
        };
        assert_eq!(
            join_cgroup(&mount, "/a/b"),
            PathBuf::from("/sys/fs/cgroup/memory/a/b")
        );
        assert_eq!(
            join_cgroup(&mount, "/"),
            PathBuf::from("/sys/fs/cgroup/memory")
        );
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
