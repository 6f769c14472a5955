//! Shared helpers for the tests that drive the real `cordon` binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
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

    /// A working directory under `parent` instead of the temporary
    /// directory (Landlock grants the sandbox's /tmp in full, so only a
    /// directory elsewhere shows what Landlock alone does to a bind).
    pub fn new_in(parent: &str) -> Workdir {
        let dir = tempfile::Builder::new()
            .prefix("cordon-test-")
            .tempdir_in(parent)
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
        self.run_program(Command::new(cordon_bin()), flags, cmd, tweak)
    }

    /// `cordon run` started through `wrapper`, a command that execs its
    /// arguments in place (so that its pid is cordon's), e.g. `unshare`.
    pub fn run_under(&self, wrapper: &[&OsStr], flags: &[&str], cmd: &[&str]) -> Outcome {
        let mut c = Command::new(wrapper[0]);
        c.args(&wrapper[1..]).arg(cordon_bin());
        self.run_program(c, flags, cmd, |_| {})
    }

    /// `c` (cordon, or a wrapper of it) given `run`, a report and `flags`.
    fn run_program(
        &self,
        mut c: Command,
        flags: &[&str],
        cmd: &[&str],
        tweak: impl FnOnce(&mut Command),
    ) -> Outcome {
        let report = self.dir.path().join(".report.json");
        let _ = std::fs::remove_file(&report);
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

// ---- Running cordon in the background, host witnesses, enforcement ----

/// A `cordon run` started in the background, for tests that act on it while
/// it runs (signals, sampling its memory, killing it). Its stdout and stderr
/// are drained by threads from the start, so a flood never blocks it.
pub struct Started {
    pub child: std::process::Child,
    report: PathBuf,
    out: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    err: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn drain(
    mut from: impl std::io::Read + Send + 'static,
    into: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => into
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&buf[..n]),
            }
        }
    })
}

impl Workdir {
    /// Start `cordon run [flags] -- cmd...` in this directory without
    /// waiting for it.
    pub fn start(&self, flags: &[&str], cmd: &[&str]) -> Started {
        let report = self.dir.path().join(".report.json");
        let _ = std::fs::remove_file(&report);
        let mut child = Command::new(cordon_bin())
            .current_dir(self.dir.path())
            .arg("run")
            .arg("--report")
            .arg(&report)
            .args(flags)
            .arg("--")
            .args(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cordon");
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let err = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let readers = vec![
            drain(child.stdout.take().expect("stdout"), out.clone()),
            drain(child.stderr.take().expect("stderr"), err.clone()),
        ];
        Started {
            child,
            report,
            out,
            err,
            readers,
        }
    }
}

impl Started {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Wait until the workload has printed `needle` on stdout.
    pub fn wait_for_stdout(&mut self, needle: &str, timeout: Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < end {
            if self.stdout_so_far().contains(needle) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.stdout_so_far().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Send a signal to the cordon supervisor itself.
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).expect("pid");
        rustix::process::kill_process(pid, signal).expect("kill cordon");
    }

    /// Wait for cordon to end and collect what it left (report, output),
    /// checking that none of its cgroups is left behind.
    pub fn finish(mut self) -> Outcome {
        let pid = self.child.id();
        let status = self.child.wait().expect("wait cordon");
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let report = std::fs::read_to_string(&self.report)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(serde_json::Value::Null);
        let o = Outcome {
            code: status.code().unwrap_or(-1),
            stdout: self.stdout_so_far(),
            stderr: self.stderr_so_far(),
            report,
            supervisor_pid: pid,
        };
        assert_nothing_left(pid);
        o
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A process the test starts on the host, outside any sandbox, to check
/// that nothing inside can reach it. Killed when dropped.
pub struct HostSleeper {
    pub child: std::process::Child,
}

impl HostSleeper {
    pub fn start() -> HostSleeper {
        let child = Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn host sleeper");
        HostSleeper { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Still running (not exited, not killed).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for HostSleeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until some host process mentions `marker`.
pub fn wait_for_process_with(marker: &str, timeout: Duration) -> bool {
    let end = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < end {
        if !processes_with(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Whether the run's report says a cgroup controller (`memory`, `pids`,
/// `cpu`) enforced its limit; false means cordon fell back to rlimits.
pub fn cgroup_controls(o: &Outcome, controller: &str) -> bool {
    let e = &o.report["enforcement"];
    assert!(
        e["cgroup"].is_string(),
        "report has no enforcement.cgroup: {}",
        o.report
    );
    if e["cgroup"] == "none" {
        return false;
    }
    e["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["layer"] == "cgroup")
        .filter_map(|l| l["detail"].as_str())
        .any(|d| {
            d.split_whitespace()
                .any(|w| w.starts_with(&format!("{controller}:")))
        })
}

/// The host can still start a process and get its output (fork works,
/// nothing exhausted the host's process table or memory).
pub fn assert_host_healthy() {
    let out = Command::new("/bin/sh")
        .args(["-c", "echo healthy"])
        .output()
        .expect("the host cannot start a process");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "healthy\n");
}

/// A bare git repository `repo.git` with one commit (a README holding
/// `readme`), made under `dir/repos` with the host's git; returns
/// `dir/repos` (the root to serve).
pub fn bare_git_repo(dir: &Path, readme: &str) -> PathBuf {
    let git = |args: &[&str], cwd: &Path| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(cwd)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("mkdir src");
    git(&["init", "-q"], &src);
    std::fs::write(src.join("README"), readme).expect("write README");
    git(&["add", "README"], &src);
    git(&["commit", "-q", "-m", "init"], &src);
    let repos = dir.join("repos");
    std::fs::create_dir_all(&repos).expect("mkdir repos");
    git(
        &[
            "clone",
            "-q",
            "--bare",
            src.to_str().expect("utf8"),
            "repo.git",
        ],
        &repos,
    );
    repos
}

// ---- Taking layers away (debug builds only; see docs/architecture.md) ----

/// The test switch of debug builds: a comma-separated list of layers the
/// sandbox leaves out (`landlock`, `seccomp`, `mount-ro`, `nosuid`,
/// `dumpable`, `no-new-privs`, `cap-drop`, `bounding-set`, `session`, `identity`).
pub const DISABLE_LAYERS: &str = "CORDON_TEST_DISABLE_LAYERS";

impl Workdir {
    /// `cordon run` with `layers` turned off, so the test sees what the
    /// layers left do on their own. Checks that cordon said it took them
    /// away (a build that ignored the switch would prove nothing).
    pub fn run_without(&self, layers: &str, flags: &[&str], cmd: &[&str]) -> Outcome {
        let o = self.run_with(flags, cmd, |c| {
            c.env(DISABLE_LAYERS, layers);
        });
        assert!(
            o.stderr
                .contains(&format!("layers turned off by {DISABLE_LAYERS}: ")),
            "cordon did not take {layers} away: {}",
            o.stderr
        );
        // The report does not claim what was taken away.
        if o.report.is_object() {
            let states = o.report["enforcement"]["layers"].as_array().cloned();
            for name in layers.split(',') {
                let said = |d: &str| {
                    d.ends_with(&format!(" turned off by {DISABLE_LAYERS}"))
                        && d.split(" turned off")
                            .next()
                            .is_some_and(|names| names.split(", ").any(|n| n == name))
                };
                assert!(
                    states
                        .iter()
                        .flatten()
                        .any(|l| l["enforced"] == false && l["detail"].as_str().is_some_and(said)),
                    "the report does not say {name} was off: {}",
                    o.report["enforcement"]
                );
            }
        }
        o
    }
}

/// The Landlock ABI cordon finds on this kernel (0: none).
pub fn landlock_abi() -> u64 {
    let out = Command::new(cordon_bin())
        .args(["doctor", "--json"])
        .output()
        .expect("doctor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["landlock_abi"].as_u64().unwrap_or(0)
}

/// Python that runs `attempt(label, fn)` for each attempt and prints
/// `label ALLOWED` or `label ERRNO-NAME`; append the attempts.
pub const PY_ATTEMPT: &str = r#"
import errno, os, socket, sys
def attempt(label, f):
    try:
        f()
        print(label, "ALLOWED")
    except OSError as e:
        print(label, errno.errorcode.get(e.errno, e.errno))
def create(path):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
def open_for_write(path):
    os.close(os.open(path, os.O_WRONLY))
"#;

/// The result `PY_ATTEMPT` printed for `label`.
pub fn attempt_result(o: &Outcome, label: &str) -> String {
    o.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{label} ")).map(str::to_owned))
        .unwrap_or_else(|| panic!("{label} not reported: {}{}", o.stdout, o.stderr))
}

impl Workdir {
    /// As root: `cordon run --no-audit ARGS` in this directory as user
    /// nobody (uid 65534), with `env` added, to see what a caller who is
    /// not root gets. Returns the exit code, stdout and stderr.
    pub fn run_as_nobody(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        std::fs::set_permissions(
            self.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(cordon_bin())
            .args(["run", "--no-audit"])
            .args(args)
            .envs(env.iter().copied())
            .current_dir(self.path())
            .output()
            .expect("setpriv");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// `cordon serve` started in `dir` (its socket `dir/cordon.sock`, its
/// audit store `dir/audit.db`, its state `dir/state`) with `flags`; returns
/// the child and the JSON line it prints once it listens.
pub fn start_serve(dir: &Path, flags: &[&str]) -> (std::process::Child, serde_json::Value) {
    use std::io::BufRead;
    let mut child = Command::new(cordon_bin())
        .arg("serve")
        .arg("--socket")
        .arg(dir.join("cordon.sock"))
        .arg("--audit")
        .arg(dir.join("audit.db"))
        .args(flags)
        .env("CORDON_STATE_DIR", dir.join("state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start cordon serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the server's first line");
    let ready = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!("the server's first line is not its JSON address ({e}): {line:?}")
    });
    (child, ready)
}

/// Stop a server of [`start_serve`] (SIGTERM) and reap it.
pub fn stop_serve(mut child: std::process::Child) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).expect("a pid"),
        rustix::process::Signal::TERM,
    );
    let _ = child.wait();
}

/// One HTTP/1.0 request on `s` (the server answers unchunked and closes):
/// the status and the body. `token` is sent as a bearer token.
pub fn http_request(
    mut s: impl std::io::Read + std::io::Write,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// `cordon token create ARGS` against the state directory `state` of a
/// server; the token's secret.
pub fn create_token(state: &Path, args: &[&str]) -> String {
    let out = Command::new(cordon_bin())
        .args(["token", "create"])
        .args(args)
        .env("CORDON_STATE_DIR", state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// An HTTP answer of `cordon serve`.
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// NDJSON lines.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.body
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// One request over HTTP/1.0 (the server answers without chunking and
/// closes).
pub fn exchange(
    mut s: impl std::io::Read + std::io::Write,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
    accept: Option<&str>,
) -> Reply {
    let data = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Length: {}\r\n",
        data.len()
    );
    if body.is_some() {
        req.push_str("Content-Type: application/json\r\n");
    }
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(a) = accept {
        req.push_str(&format!("Accept: {a}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&data);
    let _ = s.write_all(req.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// A C program that reserves 1 GiB of address space and touches none of it
/// (as V8 reserves its code range at start), prints RESERVED and exits 0;
/// it aborts when the reservation is refused (RLIMIT_AS).
pub const RESERVES_ADDRESS_SPACE_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
int main(void) {
    void *p = mmap(0, 1UL << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) abort();
    puts("RESERVED");
    return 0;
}
"#;
