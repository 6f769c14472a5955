//! The files layer against a directory standing in for a sandbox's root,
//! with "host" files beside it. Layer: `openat2` with `RESOLVE_IN_ROOT |
//! RESOLVE_NO_MAGICLINKS` (files/resolve.rs); each escape is also tried
//! with the same code and no resolve flags (`SandboxRoot::naive`), which
//! must reach the host file, so these tests fail when the layer is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use super::*;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    host: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let host = tmp.path().join("host");
        std::fs::create_dir_all(root.join("workspace")).unwrap();
        std::fs::create_dir_all(&host).unwrap();
        std::fs::write(host.join("secret"), "host secret\n").unwrap();
        Fixture {
            _tmp: tmp,
            root,
            host,
        }
    }

    fn fd(&self) -> OwnedFd {
        rustix::fs::open(
            &self.root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    fn sandbox(&self) -> SandboxRoot {
        SandboxRoot::new(self.fd())
    }

    fn naive(&self) -> SandboxRoot {
        SandboxRoot::naive(self.fd())
    }

    fn in_root(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }
}

fn p(s: &str) -> SandboxPath {
    SandboxPath::parse(s).unwrap()
}

fn quota(n: u64) -> Arc<Quota> {
    Arc::new(Quota::new(n))
}

fn put(root: &SandboxRoot, path: &str, data: &[u8]) -> Result<u64, FilesError> {
    let mut w = PendingWrite::begin(root, &p(path), 1 << 20, quota(1 << 30))?;
    w.write(data)?;
    w.commit()
}

fn read(root: &SandboxRoot, path: &str) -> Result<Vec<u8>, FilesError> {
    match root.open(&p(path))? {
        Node::File { mut file, .. } => {
            let mut v = Vec::new();
            file.read_to_end(&mut v).unwrap();
            Ok(v)
        }
        Node::Dir(_) => panic!("{path} is a directory"),
    }
}

fn listing(root: &SandboxRoot, path: &str) -> Listing {
    match root.open(&p(path)).unwrap() {
        Node::Dir(fd) => Listing::read(fd.as_fd(), &p(path)).unwrap(),
        Node::File { .. } => panic!("{path} is a file"),
    }
}

fn tar_names(root: &SandboxRoot, path: &str) -> Vec<(String, Vec<u8>, Option<String>)> {
    let Node::Dir(fd) = root.open(&p(path)).unwrap() else {
        panic!("not a dir")
    };
    let mut buf = Vec::new();
    write_tar(fd, &p(path), &mut buf).unwrap();
    let mut a = tar::Archive::new(buf.as_slice());
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let link = e
                .link_name()
                .unwrap()
                .map(|l| l.to_string_lossy().into_owned());
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (name, data, link)
        })
        .collect()
}

#[test]
fn write_read_list_tar_delete() {
    let f = Fixture::new();
    let r = f.sandbox();
    assert_eq!(put(&r, "/workspace/a.txt", b"hello").unwrap(), 5);
    assert_eq!(read(&r, "/workspace/a.txt").unwrap(), b"hello");
    // Parents are made; an existing file is replaced and keeps its mode.
    put(&r, "/workspace/sub/deep/b.txt", b"bee").unwrap();
    std::fs::set_permissions(
        f.in_root("workspace/a.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    put(&r, "/workspace/a.txt", b"again").unwrap();
    assert_eq!(
        std::fs::read(f.in_root("workspace/a.txt")).unwrap(),
        b"again"
    );
    let mode = std::fs::metadata(f.in_root("workspace/a.txt")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    symlink("a.txt", f.in_root("workspace/link")).unwrap();

    let l = listing(&r, "/workspace");
    let names: Vec<(&str, EntryType, u64)> = l
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind, e.size))
        .collect();
    assert_eq!(
        names,
        vec![
            ("a.txt", EntryType::File, 5),
            ("link", EntryType::Symlink, 5),
            ("sub", EntryType::Dir, names[2].2),
        ]
    );
    // No temporary file is left behind.
    assert!(!l
        .entries
        .iter()
        .any(|e| e.name.starts_with(".cordon-write-")));

    let t = tar_names(&r, "/workspace");
    let got: Vec<&str> = t.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        got,
        vec!["a.txt", "link", "sub/", "sub/deep/", "sub/deep/b.txt"]
    );
    assert_eq!(t[0].1, b"again");
    assert_eq!(t[1].2.as_deref(), Some("a.txt"));
    assert_eq!(t[4].1, b"bee");

    let e = r.remove(&p("/workspace/sub"), false).unwrap_err();
    assert_eq!(e.kind, FilesErrorKind::Conflict);
    assert!(e.fix.unwrap().contains("recursive"));
    r.remove(&p("/workspace/sub"), true).unwrap();
    r.remove(&p("/workspace/a.txt"), false).unwrap();
    assert!(!f.in_root("workspace/sub").exists() && !f.in_root("workspace/a.txt").exists());
    assert_eq!(
        r.remove(&p("/workspace/nope"), false).unwrap_err().kind,
        FilesErrorKind::NotFound
    );
    assert_eq!(
        r.remove(&p("/"), true).unwrap_err().kind,
        FilesErrorKind::BadPath
    );
}

#[test]
fn absolute_and_relative_symlinks_out_of_the_root_are_never_read() {
    let f = Fixture::new();
    let secret = f.host.join("secret");
    symlink(&secret, f.in_root("workspace/abs")).unwrap();
    let up = Path::new("../../host/secret");
    symlink(up, f.in_root("workspace/rel")).unwrap();
    symlink(&f.host, f.in_root("workspace/dir")).unwrap();
    for path in ["/workspace/abs", "/workspace/rel", "/workspace/dir/secret"] {
        let e = read(&f.sandbox(), path).unwrap_err();
        assert_eq!(e.kind, FilesErrorKind::NotFound, "{path}: {e}");
        // Control: the same lookup without the layer reads the host's file.
        assert_eq!(read(&f.naive(), path).unwrap(), b"host secret\n", "{path}");
    }
    // An absolute link resolves inside the root, as the sandbox sees it.
    std::fs::create_dir_all(f.in_root(&secret.to_string_lossy())).unwrap();
    std::fs::remove_dir(f.in_root(&secret.to_string_lossy())).unwrap();
    std::fs::write(f.in_root(&secret.to_string_lossy()), "sandbox's own\n").unwrap();
    assert_eq!(
        read(&f.sandbox(), "/workspace/abs").unwrap(),
        b"sandbox's own\n"
    );
}

#[test]
fn writes_through_planted_symlinks_never_touch_the_host() {
    let f = Fixture::new();
    let secret = f.host.join("secret");
    symlink(&secret, f.in_root("workspace/abs")).unwrap();
    symlink(&f.host, f.in_root("workspace/dir")).unwrap();
    symlink("../../host", f.in_root("workspace/up")).unwrap();
    let r = f.sandbox();
    // The last name is replaced (rename), never followed.
    put(&r, "/workspace/abs", b"mine").unwrap();
    assert!(std::fs::symlink_metadata(f.in_root("workspace/abs"))
        .unwrap()
        .is_file());
    // A directory link resolves inside the root, where it leads nowhere.
    for path in ["/workspace/dir/new", "/workspace/up/new"] {
        let e = put(&r, path, b"x").unwrap_err();
        assert_eq!(e.kind, FilesErrorKind::NotFound, "{path}: {e}");
    }
    assert_eq!(std::fs::read(&secret).unwrap(), b"host secret\n");
    assert!(
        !f.host.join("new").exists(),
        "written through the symlink into the host"
    );
    r.remove(&p("/workspace/dir"), true).unwrap();
    assert!(
        secret.exists(),
        "deleting the link must not delete what it points to"
    );
    // Control: without the layer the same write lands in the host directory.
    symlink(&f.host, f.in_root("workspace/dir")).unwrap();
    put(&f.naive(), "/workspace/dir/new", b"x").unwrap();
    assert!(f.host.join("new").exists());
}

#[test]
fn tar_archives_links_as_links_and_never_what_they_point_at() {
    let f = Fixture::new();
    symlink(&f.host, f.in_root("workspace/dir")).unwrap();
    symlink(f.host.join("secret"), f.in_root("workspace/file")).unwrap();
    std::fs::write(f.in_root("workspace/own"), "own").unwrap();
    let t = tar_names(&f.sandbox(), "/workspace");
    assert_eq!(t.len(), 3, "{t:?}");
    for (name, data, _) in &t {
        assert!(
            !String::from_utf8_lossy(data).contains("host secret"),
            "{name}"
        );
    }
}

#[test]
fn fifos_and_devices_are_refused_without_blocking() {
    let f = Fixture::new();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.in_root("workspace/fifo"),
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let e = read(&f.sandbox(), "/workspace/fifo").unwrap_err();
    assert_eq!(e.kind, FilesErrorKind::Conflict, "{e}");
    assert!(e.message.contains("Fifo"), "{e}");
}

#[test]
fn the_per_file_limit_and_the_quota_refuse_and_leave_nothing() {
    let f = Fixture::new();
    let r = f.sandbox();
    let q = quota(15);
    let mut w = PendingWrite::begin(&r, &p("/workspace/big"), 10, q.clone()).unwrap();
    w.write(b"12345").unwrap();
    let e = w.write(b"123456").unwrap_err();
    assert_eq!(e.kind, FilesErrorKind::TooLarge, "{e}");
    assert!(e.message.contains("10 bytes"), "{e}");
    drop(w);
    assert_eq!(q.used(), 0, "an aborted write gives its bytes back");
    assert!(!f.in_root("workspace/big").exists());
    assert_eq!(
        std::fs::read_dir(f.in_root("workspace")).unwrap().count(),
        0,
        "no temporary file left"
    );

    let mut w = PendingWrite::begin(&r, &p("/workspace/a"), 10, q.clone()).unwrap();
    w.write(b"0123456789").unwrap();
    w.commit().unwrap();
    let mut w = PendingWrite::begin(&r, &p("/workspace/b"), 10, q.clone()).unwrap();
    w.write(b"01234").unwrap();
    let e = w.write(b"5").unwrap_err();
    assert_eq!(e.kind, FilesErrorKind::Quota, "{e}");
    assert!(e.message.contains("quota 15"), "{e}");
    assert!(q.check(1).is_err());
    drop(w);
    assert_eq!(q.used(), 10);
    assert!(!f.in_root("workspace/b").exists());
}

#[test]
fn a_directory_is_not_overwritten_and_the_root_is_not_a_file() {
    let f = Fixture::new();
    let r = f.sandbox();
    let e = put(&r, "/workspace", b"x").unwrap_err();
    assert_eq!(e.kind, FilesErrorKind::Conflict, "{e}");
    assert_eq!(
        put(&r, "/", b"x").unwrap_err().kind,
        FilesErrorKind::BadPath
    );
    std::fs::write(f.in_root("workspace/file"), "f").unwrap();
    let e = put(&r, "/workspace/file/below", b"x").unwrap_err();
    assert_eq!(e.kind, FilesErrorKind::Conflict, "{e}");
}

#[test]
fn kernel_filesystems_are_refused() {
    // The host's /proc stands in for the sandbox's.
    let fd = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let r = SandboxRoot::new(fd);
    let e = r.open(&p("/proc/self/status")).unwrap_err();
    assert_eq!(e.kind, FilesErrorKind::Forbidden, "{e}");
    assert!(e.message.contains("proc"), "{e}");
    // /proc/self/root is a magic link: never followed (RESOLVE_IN_ROOT
    // refuses magic links too on current kernels; RESOLVE_NO_MAGICLINKS
    // keeps it so if that changes).
    let e = r.open(&p("/proc/self/root/etc")).unwrap_err();
    assert_eq!(e.kind, FilesErrorKind::Forbidden, "{e}");
}
