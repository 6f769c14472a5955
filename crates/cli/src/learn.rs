//! From one observed run to the smallest profile that allows what it did:
//! the paths it read, wrote and executed outside what every sandbox already
//! has, the hosts it reached through the proxy, and its limits with
//! headroom. Every grant carries a comment that says what needed it.
//!
//! Pure: the caller gathers the observations (`cordon learn`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_jail::{Access, ObservedPath};

/// Everything one learning run saw.
pub struct Observed<'a> {
    pub command: &'a [String],
    /// The working directory (canonical).
    pub cwd: &'a Path,
    /// Host paths the learning run could write (the cwd and `--rw`).
    pub writable: &'a [PathBuf],
    pub paths: &'a [ObservedPath],
    /// Allowed proxy attempts: (host, port) -> how many.
    pub hosts: BTreeMap<(String, u16), u64>,
    /// Refused proxy attempts: (host, port) -> why (the proxy's rule).
    pub refused_hosts: BTreeMap<(String, u16), String>,
    pub wall: Duration,
    /// CPU time of all its processes, user and system.
    pub cpu: Duration,
    pub peak_memory: Option<u64>,
    /// The largest peak address space of one process (bytes; 0: unknown).
    pub peak_address_space: u64,
    /// Distinct processes seen opening or executing a path.
    pub processes: usize,
    /// The most threads one process had (0: unknown).
    pub most_threads: usize,
    /// The most tasks (processes and threads) the sandbox held at once.
    pub peak_tasks: PeakTasks,
    /// Does a path exist on the host (injected for tests).
    pub exists: &'a dyn Fn(&Path) -> bool,
}

/// The memory limit: twice the peak resident memory (at least 64 MiB),
/// or a quarter over the largest process's peak address space when that
/// is more. Where no memory cgroup is delegated the limit is RLIMIT_AS of
/// each process, which counts address space: a runtime that reserves much
/// of it (Node, the JVM, Go) would not start under a limit made from its
/// resident memory alone.
fn memory_line(peak: Option<u64>, address_space: u64) -> String {
    let mib = |b: u64| b as f64 / MIB as f64;
    let Some(peak) = peak else {
        return "# memory: not measured on this host; the preset's limit applies\n".into();
    };
    let resident = (peak * 2).div_ceil(MIB).max(64);
    let space = (address_space + address_space / 4).div_ceil(MIB);
    if space > resident {
        format!(
            "memory = \"{space}MiB\"  # peak {:.1} MiB resident, {:.1} MiB of address space; \
             the address space x1.25, which RLIMIT_AS counts where no memory cgroup is delegated\n",
            mib(peak),
            mib(address_space)
        )
    } else {
        format!(
            "memory = \"{resident}MiB\"  # peak {:.1} MiB; x2, at least 64 MiB\n",
            mib(peak)
        )
    }
}

/// The process limit, which counts threads (the pids cgroup and
/// RLIMIT_NPROC alike): four times the tasks the run held at once, at
/// least 32. That peak is the pids cgroup's own count where the learning
/// run had one; without it, the processes seen plus the threads the
/// busiest one had beside its main one, which misses processes that ran
/// their threads at the same time.
fn pids_line(processes: usize, most_threads: usize, peak_tasks: PeakTasks) -> String {
    let estimate = processes + most_threads.saturating_sub(1);
    let seen = format!(
        "{processes} process(es) seen opening or executing files, the busiest with {most_threads} thread(s)"
    );
    let not_counted = |why: &str| {
        (
            estimate,
            format!("{seen}; tasks at once not counted ({why})"),
        )
    };
    let (tasks, why) = match peak_tasks {
        PeakTasks::Counted(peak) => {
            let peak = usize::try_from(peak).unwrap_or(usize::MAX);
            (
                peak.max(estimate),
                format!("{peak} task(s) at once (the pids cgroup's peak); {seen}"),
            )
        }
        PeakTasks::NoPidsCgroup => not_counted("no pids cgroup"),
        PeakTasks::NoCounter => not_counted("this kernel's pids cgroup has no pids.peak"),
    };
    let pids = tasks.saturating_mul(4).max(32);
    format!("pids = {pids}  # {why}; x4, at least 32\n")
}

/// What the learning run knows of the tasks it held at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeakTasks {
    /// The pids cgroup's peak (`pids.peak`).
    Counted(u64),
    /// Processes were limited by RLIMIT_NPROC: nothing counted them.
    NoPidsCgroup,
    /// A pids cgroup, on a kernel that keeps no peak for it.
    NoCounter,
}

impl PeakTasks {
    /// From a run's outcome: `peak` is `pids.peak`, `pids_cgroup` whether
    /// a pids cgroup was in force.
    pub fn of(peak: Option<u64>, pids_cgroup: bool) -> PeakTasks {
        match (peak, pids_cgroup) {
            (Some(p), _) => PeakTasks::Counted(p),
            (None, true) => PeakTasks::NoCounter,
            (None, false) => PeakTasks::NoPidsCgroup,
        }
    }
}

/// One grant with the reason for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    path: PathBuf,
    why: String,
}

/// What the profile will say about the filesystem.
#[derive(Debug, Default)]
pub struct Files {
    cwd_rw: Option<String>,
    cwd_reads: Vec<PathBuf>,
    read_only: Vec<Grant>,
    read_write: Vec<Grant>,
    /// Writes outside every writable path of the learning run: refused then,
    /// not granted now.
    pub refused_writes: Vec<PathBuf>,
}

/// Places every sandbox has without a grant.
fn provided(path: &Path) -> bool {
    let under = |p: &str| path.starts_with(p);
    if ["/proc", "/dev", "/sys"].iter().any(|p| under(p))
        || cordon_jail::SYSTEM_DIRS.iter().any(|p| under(p))
    {
        return true;
    }
    match path.strip_prefix("/etc") {
        Ok(rest) => {
            let first = rest.components().next();
            first.is_none_or(|c| {
                cordon_jail::sandbox_etc_names()
                    .iter()
                    .any(|n| c.as_os_str() == *n)
            })
        }
        Err(_) => false,
    }
}

fn what(access: Access, syscall: &str, count: u64) -> String {
    let verb = match access {
        Access::Read => "read",
        Access::Write => "written",
        Access::Exec => "executed",
        Access::Mkdir => "directory created",
    };
    if count > 1 {
        format!("{verb} ({syscall}, {count} times)")
    } else {
        format!("{verb} ({syscall})")
    }
}

/// Sort the observed paths into grants.
pub fn files(o: &Observed<'_>) -> Files {
    let mut f = Files::default();
    let mut rw: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut ro: BTreeMap<PathBuf, String> = BTreeMap::new();
    for p in o.paths {
        let path = cordon_policy::normalize(&p.path);
        if provided(&path) {
            continue;
        }
        let why = what(p.access, &p.syscall, p.count);
        match p.access {
            Access::Read | Access::Exec => {
                if !(o.exists)(&path) {
                    continue; // a probe that found nothing
                }
                if path.starts_with(o.cwd) {
                    f.cwd_reads.push(path);
                } else {
                    ro.entry(path).or_insert(why);
                }
            }
            Access::Write | Access::Mkdir => {
                if !o.writable.iter().any(|w| path.starts_with(w)) {
                    // The sandbox's own /tmp is not the host's: a write
                    // there counts only where the host has the directory.
                    let parent = path.parent().unwrap_or(Path::new("/"));
                    let host_dir = parent != Path::new("/tmp") && (o.exists)(parent);
                    if !path.starts_with("/tmp") || host_dir {
                        f.refused_writes.push(path);
                    }
                    continue;
                }
                let parent = path.parent().unwrap_or(&path).to_path_buf();
                let file_in_place = p.access == Access::Write && (o.exists)(&path);
                let target = if parent == o.cwd && file_in_place {
                    path.clone()
                } else {
                    parent
                };
                let why = format!("{} {}", shown(&path, o.cwd), why);
                if target == o.cwd {
                    f.cwd_rw.get_or_insert(why);
                } else {
                    rw.entry(target).or_insert(why);
                }
            }
        }
    }
    // A writable directory covers what lies below it.
    let dirs: Vec<PathBuf> = rw.keys().cloned().collect();
    let covered = |p: &Path, own: bool| {
        dirs.iter().any(|d| p.starts_with(d) && (!own || p != d))
            || (f.cwd_rw.is_some() && p.starts_with(o.cwd))
    };
    f.read_write = rw
        .iter()
        .filter(|(p, _)| !covered(p, true))
        .map(|(p, why)| Grant {
            path: p.clone(),
            why: why.clone(),
        })
        .collect();
    f.read_only = ro
        .into_iter()
        .filter(|(p, _)| !covered(p, false))
        .map(|(path, why)| Grant { path, why })
        .collect();
    f.cwd_reads.sort();
    f.cwd_reads.dedup();
    f.refused_writes.sort();
    f.refused_writes.dedup();
    f
}

/// A path relative to the working directory when it is inside it.
fn shown(path: &Path, cwd: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// A TOML string (JSON's escapes are TOML's).
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

const MIB: u64 = 1 << 20;

/// The profile text.
pub fn profile(o: &Observed<'_>) -> (String, Files) {
    let f = files(o);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Written by `cordon learn` from one observed run of:\n#   {}\n\
         # It allows what that run used, with headroom on limits, and nothing else.\n\
         # Review it before use: a run that takes another path needs more.",
        o.command.join(" ")
    );
    t.push_str("extends = \"untrusted\"\n\n[filesystem]\n");
    let cwd_line = match &f.cwd_rw {
        Some(why) => format!("cwd = \"rw\"  # the working directory, written: {why}"),
        None => {
            let names: Vec<String> = f
                .cwd_reads
                .iter()
                .take(4)
                .map(|p| shown(p, o.cwd))
                .collect();
            let more = f.cwd_reads.len().saturating_sub(names.len());
            let also = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            if f.cwd_reads.is_empty() {
                "cwd = \"ro\"  # the working directory (nothing in it was opened)".to_owned()
            } else {
                format!(
                    "cwd = \"ro\"  # the working directory, read: {}{also}",
                    names.join(", ")
                )
            }
        }
    };
    t.push_str(&cwd_line);
    t.push('\n');
    for (key, list) in [("read_only", &f.read_only), ("read_write", &f.read_write)] {
        let _ = writeln!(t, "{key} = [");
        for g in list {
            let _ = writeln!(t, "    {},  # {}", q(&g.path.display().to_string()), g.why);
        }
        t.push_str("]\n");
    }
    for p in &f.refused_writes {
        let _ = writeln!(
            t,
            "# not granted: {} was written but was not writable while learning (learn again with --rw)",
            p.display()
        );
    }

    t.push_str("\n[limits]\n");
    let wall = o.wall.as_secs_f64();
    let timeout = (wall * 3.0).ceil().max(10.0) as u64;
    let _ = writeln!(
        t,
        "timeout = \"{timeout}s\"  # the run took {wall:.2} s; x3, at least 10 s"
    );
    // RLIMIT_CPU: a parallel tool uses more CPU than wall-clock time.
    let cpu = o.cpu.as_secs_f64();
    let cpu_time = ((cpu * 3.0).ceil() as u64).max(timeout);
    let _ = writeln!(
        t,
        "cpu_time = \"{cpu_time}s\"  # it used {cpu:.2} s of CPU; x3, at least the timeout"
    );
    t.push_str(&memory_line(o.peak_memory, o.peak_address_space));
    t.push_str(&pids_line(o.processes, o.most_threads, o.peak_tasks));

    t.push_str("\n[network]\n");
    if o.hosts.is_empty() {
        t.push_str("mode = \"none\"  # no connection was made\n");
    } else {
        t.push_str("mode = \"proxy\"\nallow = [\n");
        for ((host, port), n) in &o.hosts {
            let pattern = if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            let _ = writeln!(t, "    {},  # {n} connection(s)", q(&pattern));
        }
        t.push_str("]\n");
    }
    for ((host, port), why) in &o.refused_hosts {
        let _ = writeln!(
            t,
            "# not granted: {host}:{port} was refused while learning ({why})"
        );
    }
    (t, f)
}

/// Proxy attempts by (host, port): how many were allowed, and why the
/// others were refused.
pub type Hosts = (
    BTreeMap<(String, u16), u64>,
    BTreeMap<(String, u16), String>,
);

pub fn hosts(events: &[cordon_egress::EgressEvent]) -> Hosts {
    let mut allowed = BTreeMap::new();
    let mut refused = BTreeMap::new();
    for e in events.iter().filter(|e| !e.host.is_empty()) {
        let key = (e.host.clone(), e.port);
        match e.decision {
            cordon_egress::Decision::Allow => *allowed.entry(key).or_insert(0) += 1,
            cordon_egress::Decision::Deny => {
                refused.entry(key).or_insert_with(|| e.rule.clone());
            }
        }
    }
    refused.retain(|k, _| !allowed.contains_key(k));
    (allowed, refused)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn seen(path: &str, access: Access) -> ObservedPath {
        ObservedPath {
            path: path.into(),
            access,
            syscall: "openat".into(),
            count: 1,
        }
    }

    #[test]
    fn grants_only_what_the_sandbox_lacks_with_a_reason_each() {
        let paths = vec![
            seen("/usr/lib/python3/os.py", Access::Read),
            seen("/etc/ld.so.cache", Access::Read),
            seen("/etc/myapp.conf", Access::Read),
            seen("/proc/self/status", Access::Read),
            seen("/w/tool.py", Access::Read),
            seen("/w/data/in.csv", Access::Read),
            seen("/w/missing.py", Access::Read),
            seen("/w/out/result.json", Access::Write),
            seen("/w/out/more.json", Access::Write),
            seen("/opt/bin/helper", Access::Exec),
            seen("/tmp/scratch", Access::Write),
            seen("/srv/elsewhere/x", Access::Write),
        ];
        let exists = |p: &Path| !p.ends_with("missing.py") && !p.starts_with("/tmp");
        let mut hosts = BTreeMap::new();
        hosts.insert(("api.test".to_owned(), 443), 2);
        let o = Observed {
            command: &["python3".into(), "tool.py".into()],
            cwd: Path::new("/w"),
            writable: &[PathBuf::from("/w")],
            paths: &paths,
            hosts,
            refused_hosts: BTreeMap::from([(
                ("10.0.0.1".to_owned(), 80),
                "private-address 10.0.0.1".to_owned(),
            )]),
            wall: Duration::from_millis(1500),
            cpu: Duration::from_millis(9000),
            peak_memory: Some(20 * MIB),
            peak_address_space: 40 * MIB,
            processes: 1,
            most_threads: 1,
            peak_tasks: PeakTasks::NoPidsCgroup,
            exists: &exists,
        };
        let (text, f) = profile(&o);
        assert_eq!(
            f.read_only
                .iter()
                .map(|g| g.path.clone())
                .collect::<Vec<_>>(),
            vec![PathBuf::from("/etc/myapp.conf"), "/opt/bin/helper".into()]
        );
        assert_eq!(
            f.read_write
                .iter()
                .map(|g| g.path.clone())
                .collect::<Vec<_>>(),
            vec![PathBuf::from("/w/out")]
        );
        assert_eq!(f.refused_writes, vec![PathBuf::from("/srv/elsewhere/x")]);
        assert!(
            text.contains("\"/w/out\",  # out/result.json written (openat)"),
            "{text}"
        );
        assert!(
            text.contains("cwd = \"ro\"  # the working directory, read: data/in.csv, tool.py"),
            "{text}"
        );
        assert!(
            text.contains("\"api.test:443\",  # 2 connection(s)"),
            "{text}"
        );
        assert!(text.contains("timeout = \"10s\""), "{text}");
        assert!(
            text.contains("cpu_time = \"27s\"  # it used 9.00 s of CPU"),
            "a parallel run's CPU, not its wall-clock time: {text}"
        );
        assert!(
            text.contains(
                "# not granted: 10.0.0.1:80 was refused while learning (private-address 10.0.0.1)"
            ),
            "{text}"
        );
        assert!(text.contains("memory = \"64MiB\""), "{text}");
        assert!(
            memory_line(Some(40 * MIB), 1024 * MIB).starts_with("memory = \"1280MiB\""),
            "a runtime's reserved address space sets the limit when it is larger"
        );
        assert!(text.contains("pids = 32  # 1 process(es)"), "{text}");
        assert!(
            pids_line(2, 20, PeakTasks::NoPidsCgroup).starts_with("pids = 84"),
            "threads count: (2 processes + 19 more threads) x4"
        );
        assert!(
            pids_line(2, 20, PeakTasks::Counted(150)).starts_with("pids = 600"),
            "the cgroup's peak counts processes that ran threads at once"
        );
        assert!(
            pids_line(2, 20, PeakTasks::Counted(3)).starts_with("pids = 84"),
            "a peak below what was seen does not lower the limit"
        );
        for (peak, cgroup, reason) in [
            (None, false, "tasks at once not counted (no pids cgroup)"),
            (
                None,
                true,
                "tasks at once not counted (this kernel's pids cgroup has no pids.peak)",
            ),
            (Some(7), true, "7 task(s) at once (the pids cgroup's peak)"),
        ] {
            let line = pids_line(2, 20, PeakTasks::of(peak, cgroup));
            assert!(line.contains(reason), "{peak:?} {cgroup}: {line}");
        }
        let p = cordon_policy::Profile::from_toml_str(&text, "learned.toml").expect("loads");
        assert_eq!(p.filesystem.read_write, vec![PathBuf::from("/w/out")]);
        assert_eq!(p.network.allow.len(), 1);
    }
}
