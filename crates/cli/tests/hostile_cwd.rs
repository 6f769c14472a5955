//! Hostile suite, working directory: every cwd works, wherever it is. The
//! sandbox's root is built where no declared path can meet it (a tmpfs
//! stacked on the old root, with every source cloned before anything is
//! mounted), so a cwd or bind at /tmp, below /tmp, or at a name cordon used
//! for staging shows the host's files there and nothing of cordon's own.
//! Layer: mount namespace (rootfs.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::path::{Path, PathBuf};

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

/// A directory on the host removed again when the test ends.
struct HostDir(PathBuf);

impl HostDir {
    /// A fresh directory under the host's /tmp holding `marker` with
    /// `text`.
    fn under_tmp(name: &str, text: &str) -> HostDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("cordon-cwd-{name}-"))
            .tempdir_in("/tmp")
            .expect("tempdir in /tmp")
            .keep();
        std::fs::write(dir.join("marker"), text).expect("write marker");
        HostDir(dir)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `cordon run [flags] -- sh -c script` with `cwd` as the working directory.
fn sh_in(cwd: &Path, flags: &[&str], script: &str) -> Outcome {
    let w = Workdir::new();
    let cwd = cwd.to_path_buf();
    w.run_with(flags, &["/bin/sh", "-c", script], move |c| {
        c.current_dir(cwd);
    })
}

fn dump(o: &Outcome) -> String {
    format!(
        "code {}\nstdout:\n{}\nstderr:\n{}",
        o.code, o.stdout, o.stderr
    )
}

#[test]
fn cwd_at_tmp_is_the_hosts_tmp() {
    if ready() {
        return;
    }
    let d = HostDir::under_tmp("at-tmp", "host-file-in-tmp");
    let rel = d.0.strip_prefix("/tmp").unwrap().display().to_string();
    let o = sh_in(
        Path::new("/tmp"),
        &["--cwd", "rw"],
        &format!(
            "pwd; cat {rel}/marker; echo; echo from-inside > {rel}/written; \
             for e in usr etc proc dev bin; do [ -e /tmp/$e ] && echo CORDON-ROOT-ENTRY-$e; done; true"
        ),
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert!(
        o.stdout.starts_with("/tmp\nhost-file-in-tmp\n"),
        "{}",
        dump(&o)
    );
    for e in ["usr", "etc", "proc", "dev", "bin"] {
        if !Path::new("/tmp").join(e).exists() {
            assert!(
                !o.stdout.contains(&format!("CORDON-ROOT-ENTRY-{e}")),
                "the sandbox's /tmp shows cordon's root, not the host's /tmp: {}",
                dump(&o)
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(d.0.join("written")).unwrap_or_default(),
        "from-inside\n",
        "a write through the rw cwd must land in the host's /tmp"
    );
    assert!(
        o.stderr
            .contains("cordon: note: /tmp is a declared path (or the working directory)")
            && o.stderr
                .contains("writable: the workload writes the host's /tmp"),
        "the run says that /tmp is the host's: {}",
        dump(&o)
    );
}

#[test]
fn cwd_below_tmp_shows_its_files() {
    if ready() {
        return;
    }
    let d = HostDir::under_tmp("below", "below-tmp");
    let sub = d.0.join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("f"), "deep").unwrap();
    let o = sh_in(
        &sub,
        &[],
        "pwd; cat f; cat ../../marker 2>/dev/null || echo parent-hidden",
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(
        o.stdout,
        format!("{}\ndeepparent-hidden\n", sub.display()),
        "{}",
        dump(&o)
    );
    assert!(
        !o.stderr.contains("cordon: note: /tmp"),
        "a cwd below /tmp keeps a private /tmp: {}",
        dump(&o)
    );
}

#[test]
fn ro_tmp_with_the_cwd_below_it() {
    if ready() {
        return;
    }
    let d = HostDir::under_tmp("ro-tmp", "under-ro-tmp");
    let sub = d.0.join("work");
    std::fs::create_dir(&sub).unwrap();
    let o = sh_in(
        &sub,
        &["--ro", "/tmp", "--cwd", "rw"],
        "pwd; cat ../marker; echo; echo cwd-write > out && echo cwd-ok; \
         echo x > ../not-allowed 2>/dev/null && echo TMP-WRITABLE; \
         touch ../not-allowed 2>&1 | grep -q 'Read-only file system' && echo tmp-erofs",
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(
        o.stdout,
        format!("{}\nunder-ro-tmp\ncwd-ok\ntmp-erofs\n", sub.display()),
        "{}",
        dump(&o)
    );
    assert_eq!(
        std::fs::read_to_string(sub.join("out")).unwrap_or_default(),
        "cwd-write\n"
    );
    assert!(!d.0.join("not-allowed").exists());
    assert!(
        o.stderr
            .contains("read-only: the workload has no writable /tmp; run from another directory"),
        "the run says why /tmp is not writable: {}",
        dump(&o)
    );
}

#[test]
fn rw_bind_below_tmp() {
    if ready() {
        return;
    }
    let d = HostDir::under_tmp("rw-x", "rw-x");
    let x = d.0.join("x");
    std::fs::create_dir(&x).unwrap();
    let xs = x.display().to_string();
    // From the host's /tmp too (cwd none), so the bind is the only way in.
    let o = sh_in(
        Path::new("/tmp"),
        &["--cwd", "none", "--rw", &xs],
        &format!("echo inside > {xs}/out && cat {xs}/out; ls {xs}/..; cat {}/marker 2>/dev/null || echo marker-hidden", d.0.display()),
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(o.stdout, "inside\nx\nmarker-hidden\n", "{}", dump(&o));
    assert_eq!(
        std::fs::read_to_string(x.join("out")).unwrap_or_default(),
        "inside\n"
    );
}

/// cordon staged the overlay files (the CA bundle of `--secret`) in a
/// directory `/.cordon-files` of the new root; a cwd of that name met it
/// and the run failed with 125. Creating it on the host needs root.
#[test]
fn root_only_cwd_named_like_a_staging_area() {
    if ready() {
        return;
    }
    if skip_unless(is_root(), "creating /.cordon-files on the host needs root") {
        return;
    }
    let dir = PathBuf::from("/.cordon-files");
    if skip_unless(
        !dir.exists(),
        "/.cordon-files already exists on this host; not touching it",
    ) {
        return;
    }
    std::fs::create_dir(&dir).unwrap();
    let guard = HostDir(dir.clone());
    std::fs::write(dir.join("marker"), "user-data").unwrap();
    let w = Workdir::new();
    let o = w.run_with(
        &["--cwd", "rw", "--secret", "TOKEN@api.test"],
        &[
            "/bin/sh",
            "-c",
            "pwd; cat marker; echo; echo kept > out; grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\" >/dev/null && echo ca-overlay",
        ],
        |c| {
            c.current_dir("/.cordon-files").env("TOKEN", "a-long-enough-value");
        },
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(
        o.stdout,
        "/.cordon-files\nuser-data\nca-overlay\n",
        "{}",
        dump(&o)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("out")).unwrap_or_default(),
        "kept\n"
    );
    drop(guard);
}
