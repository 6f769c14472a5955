//! The static build (`cargo build --release --target
//! x86_64-unknown-linux-musl`): the binary named by `CORDON_STATIC_BIN`
//! (.ci/test.sh builds it and sets the variable) has no ELF interpreter, so
//! it loads no shared library, and it runs a sandbox with every layer, the
//! audit store and the egress proxy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn static_bin() -> Option<PathBuf> {
    let bin = std::env::var_os("CORDON_STATIC_BIN").map(PathBuf::from);
    let present = bin.as_ref().is_some_and(|b| b.is_file());
    if skip_unless(
        present,
        "CORDON_STATIC_BIN does not name a binary (cargo build --release --target x86_64-unknown-linux-musl, then set it to target/x86_64-unknown-linux-musl/release/cordon; .ci/test.sh does both)",
    ) {
        return None;
    }
    bin
}

/// The ELF program header types of `path`.
fn program_headers(path: &Path) -> Vec<u32> {
    let elf = std::fs::read(path).expect("read binary");
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not a 64-bit ELF file");
    assert_eq!(elf[5], 1, "not little-endian");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum)
        .map(|i| {
            let o = phoff + i * phentsize;
            u32::from_le_bytes(elf[o..o + 4].try_into().unwrap())
        })
        .collect()
}

fn cordon(bin: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the static cordon")
}

/// An HTTP origin on the host's loopback that answers one fixed body.
fn origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = "hello from the static origin\n";
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn static_binary_loads_no_library() {
    let Some(bin) = static_bin() else { return };
    const PT_INTERP: u32 = 3;
    let headers = program_headers(&bin);
    assert!(!headers.is_empty());
    assert!(
        !headers.contains(&PT_INTERP),
        "{} has an ELF interpreter: it is dynamically linked",
        bin.display()
    );
}

#[test]
fn static_binary_runs_the_sandbox_doctor_and_audit() {
    let Some(bin) = static_bin() else { return };
    if skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    ) {
        return;
    }
    let w = Workdir::new();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().join("audit.db");
    let store = store.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut full = args.to_vec();
        if args[0] == "run" {
            full.splice(1..1, ["--audit", store]);
        }
        cordon(&bin, w.path(), &full)
    };

    let o = run(&["run", "--", "/bin/true"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // The seccomp filter (notify path) and the report work: a refused call
    // reaches the supervisor and is named.
    let o = run(&[
        "run",
        "--report",
        "report.json",
        "--",
        "/bin/sh",
        "-c",
        "echo inside; unshare -U true; echo unshare=$?",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("inside") && out.contains("unshare=1"), "{out}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["denied_calls"][0]["syscall"], "unshare", "{report}");

    let o = run(&["doctor", "--json"]);
    let doctor: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor JSON");
    for check in ["user_namespaces", "seccomp", "landlock", "mount_setattr"] {
        assert_eq!(doctor[check]["ok"], true, "{check}: {doctor}");
    }

    // The audit store (bundled SQLite) recorded the runs.
    assert!(Path::new(store).is_file(), "no audit store at {store}");
    let o = run(&["audit", "--store", store, "verify"]);
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn static_binary_proxies_allowed_hosts_and_refuses_others() {
    let Some(bin) = static_bin() else { return };
    if skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    ) || skip_unless(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is not installed",
    ) {
        return;
    }
    let port = origin();
    let w = Workdir::new();
    let script = format!(
        "curl -sS http://good.test:{port}/; echo ===; \
         curl -sS -o /dev/null -w '%{{http_code}}' http://other.test:{port}/"
    );
    let resolve_good = "good.test=127.0.0.1".to_string();
    let resolve_other = "other.test=127.0.0.1".to_string();
    let o = cordon(
        &bin,
        w.path(),
        &[
            "run",
            "--no-audit",
            "--allow-net",
            "good.test",
            "--resolve",
            &resolve_good,
            "--resolve",
            &resolve_other,
            "--",
            "/bin/sh",
            "-c",
            &script,
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let parts: Vec<&str> = out.split("===").collect();
    assert_eq!(
        parts.len(),
        2,
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(parts[0].trim(), "hello from the static origin", "{out}");
    assert_eq!(parts[1].trim(), "403", "{out}");
}
