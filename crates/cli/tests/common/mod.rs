//! Shared helpers for the tests that drive the real `cordon` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub fn cordon_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cordon"))
}

/// Skip (or, with CORDON_TESTS_REQUIRE_ALL=1 as in CI, fail) when the host
/// lacks something a test needs. Returns true when the test must stop.
pub fn skip_unless(available: bool, reason: &str) -> bool {
    if available {
        return false;
    }
    if std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_some() {
        panic!("required host feature missing: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    true
}

/// User namespaces can be created here (the full sandbox works).
pub fn userns_available() -> bool {
    let out = Command::new(cordon_bin())
        .args(["doctor", "--json"])
        .output();
    match out {
        Ok(o) => serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .map(|v| v["user_namespaces"]["ok"] == true)
            .unwrap_or(false),
        Err(_) => false,
    }
}

pub fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

/// A fresh working directory for one test (the sandbox's cwd).
pub struct Workdir {
    pub dir: tempfile::TempDir,
}

pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub report: serde_json::Value,
    pub supervisor_pid: u32,
}

impl Outcome {
    pub fn reason(&self) -> &str {
        self.report["reason"].as_str().unwrap_or("")
    }
}

impl Workdir {
    pub fn new() -> Workdir {
        let dir = tempfile::Builder::new()
            .prefix("cordon-test-")
            .tempdir()
            .expect("tempdir");
        Workdir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write file");
        p
    }

    /// Compile a C program with the host's cc into this directory.
    pub fn compile_c(&self, name: &str, source: &str) -> PathBuf {
        let src = self.write(&format!("{name}.c"), source);
        let bin = self.dir.path().join(name);
        let out = Command::new("cc")
            .args(["-O1", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "cc failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    }

    /// `cordon run [flags] -- cmd...` in this directory, with a report.
    pub fn run(&self, flags: &[&str], cmd: &[&str]) -> Outcome {
        self.run_with(flags, cmd, |_| {})
    }

    pub fn run_with(
        &self,
        flags: &[&str],
        cmd: &[&str],
        tweak: impl FnOnce(&mut Command),
    ) -> Outcome {
        let report = self.dir.path().join(".report.json");
        let _ = std::fs::remove_file(&report);
        let mut c = Command::new(cordon_bin());
        c.current_dir(self.dir.path())
            .arg("run")
            .arg("--report")
            .arg(&report)
            .args(flags)
            .arg("--")
            .args(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        tweak(&mut c);
        let child = c.spawn().expect("spawn cordon");
        let pid = child.id();
        let out = child.wait_with_output().expect("wait cordon");
        let report = std::fs::read_to_string(&report)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(serde_json::Value::Null);
        let o = Outcome {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            report,
            supervisor_pid: pid,
        };
        assert_nothing_left(pid);
        o
    }

    /// Run `sh -c script`.
    pub fn sh(&self, flags: &[&str], script: &str) -> Outcome {
        self.run(flags, &["/bin/sh", "-c", script])
    }

    /// Run `python3 -c code`.
    pub fn py(&self, flags: &[&str], code: &str) -> Outcome {
        self.run(flags, &["python3", "-c", code])
    }
}

/// Every cgroup directory a cordon supervisor with this pid created is
/// gone, and no process it started survives.
pub fn assert_nothing_left(supervisor_pid: u32) {
    let prefix = format!("cordon-{supervisor_pid}-");
    // The janitor may still be finishing its rmdir when cordon was killed.
    for attempt in 0..300 {
        let left = cgroup_dirs_with_prefix(&prefix);
        if left.is_empty() {
            break;
        }
        if attempt == 299 {
            panic!("cgroups left behind: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn cgroup_dirs_with_prefix(prefix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut roots: Vec<PathBuf> = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or("/"),
        );
        let path = path.trim_start_matches('/');
        if ctrls.is_empty() {
            roots.push(Path::new("/sys/fs/cgroup").join(path));
            roots.push(Path::new("/sys/fs/cgroup/unified").join(path));
            roots.push(Path::new("/sys/fs/cgroup/cordon").to_path_buf());
        } else {
            for c in ctrls.split(',') {
                let c = c.trim_start_matches("name=");
                roots.push(Path::new("/sys/fs/cgroup").join(c).join(path));
            }
        }
    }
    for root in roots {
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(prefix) {
                    found.push(e.path());
                }
            }
        }
    }
    found
}

/// Processes on the host whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut pids = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if pid == me {
                continue;
            }
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Wait until no host process mentions `marker` (the sandbox's teardown
/// is asynchronous by a few milliseconds at most).
pub fn assert_no_process_with(marker: &str) {
    for _ in 0..200 {
        if processes_with(marker).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "processes survived the sandbox: {:?}",
        processes_with(marker)
    );
}

/// A unique marker for one test's processes.
pub fn marker(name: &str) -> String {
    format!("cordonmark{}x{}", name, std::process::id())
}
