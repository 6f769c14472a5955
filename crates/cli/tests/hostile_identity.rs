//! Who the sandbox is on the host. Started by root, the sandbox must be no
//! one (an unprivileged host uid and gid, without root's supplementary
//! groups), read nothing that only root may read, and still read and write
//! exactly what was declared. Tests named `root_only_*` need root to set
//! up (they run in the root pass of CI); the rest run as any user.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{cordon_bin, is_root, marker, processes_with, skip_unless, userns_available, Workdir};

fn ready() -> bool {
    skip_unless(userns_available(), "user namespaces are not available")
}

fn ready_as_root() -> bool {
    ready()
        || skip_unless(
            is_root(),
            "needs root (the caller whose identity is at stake)",
        )
}

/// uid, gid and supplementary groups of a host process.
fn host_ids(pid: u32) -> (u32, u32, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let first = |key: &str| -> String {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .map(|l| l[key.len()..].trim().to_owned())
            .unwrap_or_default()
    };
    let id = |key: &str| -> u32 {
        first(key)
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(u32::MAX)
    };
    (id("Uid:"), id("Gid:"), first("Groups:"))
}

/// Layer: the identity mapping (crates/jail/src/identity.rs). Every
/// process of the sandbox, its init included, is seen from the host as an
/// unprivileged uid and gid that no account has, with no supplementary
/// groups. Without the layer they are host uid 0.
#[test]
fn root_only_the_sandbox_is_no_one_on_the_host() {
    if ready_as_root() {
        return;
    }
    let w = Workdir::new();
    let mark = marker("noone");
    let mut run = w.start(
        &[],
        &[
            "python3",
            "-c",
            "import time; print('ready', flush=True); time.sleep(60)",
            &mark,
        ],
    );
    assert!(
        run.wait_for_stdout("ready", Duration::from_secs(30)),
        "{}",
        run.stderr_so_far()
    );
    // The sandbox's processes are those in another PID namespace (the
    // supervisor and its janitor share the marker but not the namespace).
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let host_ns = ns("self");
    let inside: Vec<u32> = processes_with(&mark)
        .into_iter()
        .filter(|p| ns(&p.to_string()).is_some_and(|n| Some(n) != host_ns))
        .collect();
    let seen: Vec<(u32, (u32, u32, String))> = inside.iter().map(|p| (*p, host_ids(*p))).collect();
    run.signal(rustix::process::Signal::TERM);
    let o = run.finish();

    // The init (a clone of cordon) and the workload.
    assert!(seen.len() >= 2, "sandbox processes not found: {seen:?}");
    for (pid, (uid, gid, _)) in &seen {
        assert!(
            *uid != 0 && *gid != 0,
            "pid {pid} of the sandbox is host uid {uid}, gid {gid}: {seen:?}"
        );
    }
    let id = &o.report["enforcement"]["identity"];
    let host_uid = id["host_uid"].as_u64().unwrap() as u32;
    let host_gid = id["host_gid"].as_u64().unwrap() as u32;
    assert_ne!(host_uid, 0, "{id}");
    assert_ne!(host_gid, 0, "{id}");
    for (pid, (uid, gid, groups)) in &seen {
        assert_eq!(*uid, host_uid, "pid {pid} is host uid {uid}: {seen:?}");
        assert_eq!(*gid, host_gid, "pid {pid} is host gid {gid}: {seen:?}");
        assert!(groups.is_empty(), "pid {pid} keeps groups {groups}");
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    assert!(
        !passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some(&host_uid.to_string())),
        "host uid {host_uid} belongs to an account"
    );
    assert_eq!(id["groups"], "dropped", "{id}");
}

/// Every global file under /proc that only root may read (owned by root,
/// no access for group or others), enumerated on this host. Process
/// directories are left out: the sandbox has its own PID namespace.
fn root_only_proc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if dir == Path::new("/proc")
                && (name.parse::<u32>().is_ok() || name == "self" || name == "thread-self")
            {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if meta.is_dir() && depth < 8 {
                walk(&e.path(), depth + 1, out);
            } else if meta.is_file()
                && meta.uid() == 0
                && meta.mode() & 0o077 == 0
                && meta.mode() & 0o400 != 0
            {
                out.push(e.path());
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new("/proc"), 0, &mut out);
    out.sort();
    out
}

/// Global /proc files whose reads are refused by a mode check alone: the
/// ones cordon masks behind /dev/null.
const MASKED: &[&str] = &[
    "/proc/kpageflags",
    "/proc/kpagecount",
    "/proc/kpagecgroup",
    "/proc/slabinfo",
    "/proc/vmallocinfo",
    "/proc/pagetypeinfo",
    "/proc/timer_list",
    "/proc/kmsg",
];

/// Layers: the identity mapping (the sandbox is not host uid 0, so the
/// mode check refuses it) and, for the global files at the top of /proc,
/// the /dev/null masks. The first assertion needs both gone to fail for a
/// masked file, and the identity alone for every other (e.g. /proc/sys
/// files at mode 0600); the mask assertion (each is the null device
/// inside) fails when a mask is removed, whoever the sandbox is.
#[test]
fn root_only_root_only_proc_files_cannot_be_read_inside() {
    if ready_as_root() {
        return;
    }
    let files = root_only_proc_files();
    assert!(
        files.iter().any(|f| f == Path::new("/proc/kpageflags")),
        "the enumeration missed /proc/kpageflags: {files:?}"
    );
    let w = Workdir::new();
    let list: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    w.write("files.txt", &list.join("\n"));
    let masked: Vec<String> = MASKED
        .iter()
        .filter(|m| Path::new(m).exists())
        .map(|m| m.to_string())
        .collect();
    w.write("masked.txt", &masked.join("\n"));
    let o = w.py(
        &[],
        r#"
import os, stat
for path in open("files.txt").read().split("\n"):
    try:
        with open(path, "rb", buffering=0) as f:
            data = f.read(4096)
        if data:
            print("READ", path, len(data))
    except OSError:
        pass
for path in open("masked.txt").read().split("\n"):
    st = os.stat(path)
    if not (stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)):
        print("UNMASKED", path)
print("done")
"#,
    );
    assert!(o.stdout.contains("done"), "{} {}", o.stdout, o.stderr);
    let read: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("READ")).collect();
    assert!(
        read.is_empty(),
        "root-only /proc files read inside ({} checked):\n{}",
        files.len(),
        read.join("\n")
    );
    let unmasked: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("UNMASKED"))
        .collect();
    assert!(unmasked.is_empty(), "{}", unmasked.join("\n"));
}

/// A directory and a file that only members of `gid` may read, owned by
/// someone else; removed when dropped.
struct GroupOnly {
    dir: PathBuf,
}

impl GroupOnly {
    fn new(dir: PathBuf, owner: u32, gid: u32) -> GroupOnly {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "group-secret\n").unwrap();
        for (p, mode) in [(&file, 0o040), (&dir, 0o050)] {
            std::os::unix::fs::chown(p, Some(owner), Some(gid)).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        GroupOnly { dir }
    }

    fn file(&self) -> String {
        self.dir.join("secret").display().to_string()
    }
}

impl Drop for GroupOnly {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const GROUP: u32 = 4242;
const OWNER: u32 = 4243;

/// `cordon run` started by root with `GROUP` as a supplementary group.
fn run_in_group(w: &Workdir, script: &str) -> (String, serde_json::Value) {
    let report = w.path().join(".report.json");
    let out = Command::new("setpriv")
        .arg(format!("--groups={GROUP}"))
        .arg("--")
        .arg(cordon_bin())
        .arg("run")
        .arg("--report")
        .arg(&report)
        .args(["--", "sh", "-c", script])
        .current_dir(w.path())
        .stdin(Stdio::null())
        .output()
        .expect("run setpriv cordon");
    let report = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    (
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        report,
    )
}

/// Layer: `setgroups(0, NULL)` in the sandbox's init (root callers). The
/// file under /etc/ssl reaches the sandbox through a plain read-only bind
/// (not idmapped, owned by another uid), so only the group grants access:
/// without the layer it is read (the control below shows the group alone
/// suffices on the host). The copy in the working directory is behind an
/// idmapped bind as well, which hides group 4242 a second time.
#[test]
fn root_only_supplementary_groups_do_not_grant_access_inside() {
    if ready_as_root()
        || skip_unless(
            Path::new("/etc/ssl").is_dir(),
            "/etc/ssl (bound into the sandbox from the host) is missing",
        )
    {
        return;
    }
    let w = Workdir::new();
    let bound = GroupOnly::new(
        PathBuf::from(format!(
            "/etc/ssl/cordon-test-groups-{}",
            std::process::id()
        )),
        OWNER,
        GROUP,
    );
    let cwd = GroupOnly::new(w.path().join("groups"), OWNER, GROUP);
    // Control: a nobody with the group reads it on the host.
    let control = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            &format!("--groups={GROUP}"),
            "--",
            "cat",
            &bound.file(),
        ])
        .output()
        .expect("run setpriv cat");
    assert_eq!(
        String::from_utf8_lossy(&control.stdout),
        "group-secret\n",
        "control: the group does not grant access on the host: {}",
        String::from_utf8_lossy(&control.stderr)
    );

    let script = format!(
        "for f in {} groups/secret; do if cat \"$f\" 2>/dev/null; then echo \"READ $f\"; else echo \"refused $f\"; fi; done",
        bound.file()
    );
    let (out, report) = run_in_group(&w, &script);
    assert!(out.contains("refused groups/secret"), "{out}");
    assert!(out.contains(&format!("refused {}", bound.file())), "{out}");
    assert!(!out.contains("group-secret"), "{out}");
    assert_eq!(
        report["enforcement"]["identity"]["groups"], "dropped",
        "{report}"
    );
    drop(cwd);
}

/// Root's declared paths through idmapped mounts: the workload reads a
/// 0600 root file in the (0700) working directory, writes in a --rw
/// directory, and what it creates is owned by root on the host; a --ro
/// path stays read-only.
#[test]
fn root_only_declared_paths_keep_working_and_new_files_belong_to_the_caller() {
    if ready_as_root() {
        return;
    }
    let w = Workdir::new();
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let secret = w.write("mine.txt", "root's own\n");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(w.path().join("out")).unwrap();
    std::fs::set_permissions(w.path().join("out"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = w.sh(
        &["--rw", "./out"],
        "cat mine.txt && echo made > out/new.txt && mkdir out/sub && echo ok-rw; \
         if echo x > mine.txt 2>/dev/null; then echo WROTE-RO; fi; id -u",
    );
    assert_eq!(o.code, 0, "{} {}", o.stdout, o.stderr);
    assert!(o.stdout.contains("root's own"), "{}", o.stdout);
    assert!(o.stdout.contains("ok-rw"), "{} {}", o.stdout, o.stderr);
    assert!(!o.stdout.contains("WROTE-RO"), "{}", o.stdout);
    assert_eq!(o.report["enforcement"]["identity"]["binds"], "idmapped");
    for made in ["out/new.txt", "out/sub"] {
        let m = std::fs::metadata(w.path().join(made)).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (0, 0),
            "{made} is not root's on the host"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "root's own\n",
        "the read-only file changed"
    );
}

/// The report and `cordon doctor --json` name the uid/gid mapping and
/// the group handling in force, for whoever runs this test: root gets an
/// unprivileged host identity with its groups dropped; another user is
/// itself, and its supplementary groups, if any, are said to be kept.
#[test]
fn identity_and_group_handling_are_reported_by_run_and_doctor() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.run(&[], &["true"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let id = &o.report["enforcement"]["identity"];
    let doctor = Command::new(cordon_bin())
        .args(["doctor", "--json"])
        .current_dir(w.path())
        .output()
        .expect("run doctor");
    let doctor: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let seen = &doctor["identity"];
    for key in [
        "uid", "gid", "host_uid", "host_gid", "groups", "binds", "source",
    ] {
        assert_eq!(id[key], seen[key], "{key}: run {id} vs doctor {seen}");
    }
    assert_eq!(id["uid"], 1000);
    let uid = rustix::process::getuid().as_raw();
    let primary = rustix::process::getgid().as_raw();
    if uid == 0 {
        assert_ne!(id["host_uid"], 0, "{id}");
        assert_eq!(id["groups"], "dropped", "{id}");
    } else {
        assert_eq!(id["host_uid"], uid, "{id}");
        let extra = rustix::process::getgroups()
            .unwrap()
            .into_iter()
            .any(|g| g.as_raw() != primary);
        if !extra {
            assert_eq!(id["groups"], "none", "{id}");
        } else if id["groups"] != "dropped (newgidmap)" {
            assert_eq!(id["groups"], "kept", "{id}");
            assert!(
                o.stderr.contains("supplementary groups"),
                "kept groups were not said: {}",
                o.stderr
            );
            let detail = id["detail"].as_str().unwrap_or_default();
            assert!(
                ["uidmap", "usermod --add-subgids", "primary group"]
                    .iter()
                    .any(|fix| detail.contains(fix)),
                "kept groups without the fix: {detail}"
            );
            skip_unless(
                false,
                &format!("newgidmap cannot drop this user's groups here: {detail}"),
            );
        }
    }
}

/// The file of .ci/rootless.sh that only its supplementary group may read.
const GROUP_FILE: &str = "CORDON_TEST_GROUP_FILE";

/// Layer: `newgidmap` (the group map, with `setgroups` left allowed) and
/// `setgroups(0, NULL)` in the sandbox's init, for an unprivileged caller
/// (root's path is `root_only_supplementary_groups_do_not_grant_access_inside`).
/// .ci/rootless.sh runs this as its user, a member of a group that alone
/// may read `$CORDON_TEST_GROUP_FILE` (another owner's file, mode 0040, in
/// a 0050 directory): the control reads it on the host, the workload may
/// not through a --ro bind, and with the layer taken away (the identity
/// test switch) the same run reads it.
#[test]
fn rootless_only_supplementary_groups_are_dropped_with_newgidmap() {
    if ready()
        || skip_unless(
            !is_root(),
            "root's groups are dropped without newgidmap (root_only_supplementary_groups_do_not_grant_access_inside); .ci/rootless.sh runs this as its user",
        )
    {
        return;
    }
    let Some(file) = std::env::var_os(GROUP_FILE).map(PathBuf::from) else {
        skip_unless(
            false,
            &format!("{GROUP_FILE} is unset (.ci/rootless.sh makes the file and the group)"),
        );
        return;
    };
    // Control: only the group grants it, and it does on the host.
    let meta = std::fs::metadata(&file).unwrap();
    let me = rustix::process::getuid().as_raw();
    assert_ne!(meta.uid(), me, "the fixture must be another user's");
    assert_eq!(meta.mode() & 0o777, 0o040, "the fixture must be group-only");
    let mine = rustix::process::getgroups().unwrap();
    assert!(
        mine.iter().any(|g| g.as_raw() == meta.gid())
            && rustix::process::getgid().as_raw() != meta.gid(),
        "the fixture's group {} is not a supplementary group of this user",
        meta.gid()
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "group-secret\n",
        "control: the group does not grant access on the host"
    );

    let w = Workdir::new();
    let dir = file.parent().unwrap().display().to_string();
    let script = format!(
        "grep '^Groups:' /proc/self/status; if cat {0} 2>/dev/null; then echo READ; else echo refused; fi",
        file.display()
    );
    let flags = ["--ro", dir.as_str()];
    let o = w.sh(&flags, &script);
    assert_eq!(o.code, 0, "{} {}", o.stdout, o.stderr);
    assert!(o.stdout.contains("refused"), "{}", o.stdout);
    assert!(!o.stdout.contains("group-secret"), "{}", o.stdout);
    let groups = o.stdout.lines().next().unwrap_or_default();
    assert_eq!(
        groups.trim_end(),
        "Groups:",
        "groups left inside: {}",
        o.stdout
    );
    let id = &o.report["enforcement"]["identity"];
    assert_eq!(id["groups"], "dropped (newgidmap)", "{id}");
    assert_eq!(id["host_gid"], rustix::process::getgid().as_raw(), "{id}");

    // Without the layer the group reads it inside too, and it is said.
    let o = w.run_without("identity", &flags, &["/bin/sh", "-c", &script]);
    assert!(
        o.stdout.contains("group-secret"),
        "{} {}",
        o.stdout,
        o.stderr
    );
    assert_eq!(o.report["enforcement"]["identity"]["groups"], "kept");
}
