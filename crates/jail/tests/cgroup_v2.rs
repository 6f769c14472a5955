//! The cgroup v2 code paths on a real v2 hierarchy. Hosts with only v1
//! controllers (like the one this project is developed on) usually still
//! mount an empty cgroup2 tree (`/sys/fs/cgroup/unified`): membership,
//! `cpu.stat`, `cgroup.kill` and removal work there without controllers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use cordon_jail::cgroup::{Cgroup, Support};

fn v2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mp = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        right
            .starts_with("cgroup2 ")
            .then(|| left.split(' ').nth(4).map(PathBuf::from))?
    })?;
    let writable = rustix::fs::access(&mp, rustix::fs::Access::WRITE_OK).is_ok();
    writable.then_some(mp)
}

#[test]
fn v2_group_joins_counts_kills_and_removes() {
    let Some(root) = v2_root() else {
        if std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_some()
            && rustix::process::getuid().is_root()
        {
            panic!("a writable cgroup2 mount is required as root");
        }
        eprintln!("SKIPPED: no writable cgroup2 mount (needs root or a delegated v2 group)");
        return;
    };
    let parent = root.join(format!("cordon-v2-test-{}", std::process::id()));
    std::fs::create_dir(&parent).expect("parent group");
    let mut cleanup = Cleanup {
        parent: parent.clone(),
        child: None,
    };
    let support = Support::v2_accounting_only(parent.clone());
    let mut group = Cgroup::create(&support, "cordon-1-abc", None, None).expect("create");
    let dir = parent.join("cordon-1-abc");
    assert!(dir.is_dir());

    // A CPU burner joins the group; cpu.stat counts it. On a loaded host
    // the burner may get little CPU: wait (bounded) until 50 ms are counted.
    let child = std::process::Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .expect("spawn");
    let pid = child.id();
    cleanup.child = Some(child);
    group.add(pid as i32).expect("join");
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    assert!(
        procs.lines().any(|l| l.trim() == pid.to_string()),
        "{procs}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut user_usec = 0;
    while user_usec <= 50_000 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        user_usec = group.stats().user_usec.unwrap_or(0);
    }
    assert!(user_usec > 50_000, "cpu.stat user_usec: {user_usec}");

    // Removal kills what is left (cgroup.kill) and removes the directory.
    group.remove();
    let status = cleanup
        .child
        .as_mut()
        .expect("the burner")
        .wait()
        .expect("wait");
    assert!(!status.success(), "the member must have been killed");
    assert!(!dir.exists(), "group left behind");
    std::fs::remove_dir(&parent).expect("remove parent");
    assert!(!Path::new(&parent).exists());
}

/// Whatever happens to the test, the burner dies and the groups go.
struct Cleanup {
    parent: PathBuf,
    child: Option<std::process::Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir(self.parent.join("cordon-1-abc"));
        let _ = std::fs::remove_dir(&self.parent);
    }
}
