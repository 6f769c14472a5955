//! Landlock's refusals become incidents when the kernel reports them (its
//! audit log, readable by root with audit enabled), and the run says
//! plainly when they could not be observed.
//!
//! As root these tests switch the host's kernel audit on for their
//! duration (and back to what it was); one at a time, since that is
//! host-wide state. Tests named `root_only_*` need root by the kernel's
//! design (CAP_AUDIT_READ); `.ci/rootless.sh` leaves them out, saying so,
//! and the non-root behaviour is checked by `not_observable_is_said_not_silent`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::sync::Mutex;

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

static HOST_AUDIT: Mutex<()> = Mutex::new(());

/// Sets the kernel's audit `enabled` flag and returns the previous value.
fn set_kernel_audit(enabled: u32) -> u32 {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(netlink::AUDIT),
    )
    .expect("audit netlink socket");
    rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0)).expect("bind");
    let request = |kind: u16, payload: &[u8]| -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&(1u16 | 4).to_ne_bytes()); // REQUEST | ACK
        m.extend_from_slice(&1u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m
    };
    let kernel = SocketAddrNetlink::new(0, 0);
    // AUDIT_GET: the reply's second word is `enabled`.
    rustix::net::sendto(&fd, &request(1000, &[]), SendFlags::empty(), &kernel).unwrap();
    let mut previous = None;
    let mut buf = [0u8; 1024];
    while previous.is_none() {
        let (n, _) = rustix::net::recv(&fd, &mut buf[..], RecvFlags::empty()).unwrap();
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if kind == 1000 && n >= 24 {
            previous = Some(u32::from_ne_bytes(buf[20..24].try_into().unwrap()));
        }
        if kind == 2 && n >= 20 {
            let errno = i32::from_ne_bytes(buf[16..20].try_into().unwrap());
            assert_eq!(
                errno,
                0,
                "cannot read the kernel's audit status: {}",
                std::io::Error::from_raw_os_error(-errno)
            );
        }
    }
    // AUDIT_SET with mask AUDIT_STATUS_ENABLED.
    let mut status = [0u8; 36];
    status[0..4].copy_from_slice(&1u32.to_ne_bytes());
    status[4..8].copy_from_slice(&enabled.to_ne_bytes());
    rustix::net::sendto(&fd, &request(1001, &status), SendFlags::empty(), &kernel).unwrap();
    previous.unwrap()
}

/// Kernel audit switched to `enabled` until dropped.
struct KernelAudit {
    restore: u32,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl KernelAudit {
    fn set(enabled: bool) -> KernelAudit {
        let guard = HOST_AUDIT.lock().unwrap_or_else(|e| e.into_inner());
        let restore = set_kernel_audit(u32::from(enabled));
        KernelAudit {
            restore,
            _one_at_a_time: guard,
        }
    }
}

impl Drop for KernelAudit {
    fn drop(&mut self) {
        set_kernel_audit(self.restore);
    }
}

fn landlock_incidents(o: &Outcome) -> Vec<serde_json::Value> {
    o.report["incidents"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|i| i["kind"] == "landlock")
        .collect()
}

fn blockers(o: &Outcome) -> Vec<String> {
    o.report["landlock_denials"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .flat_map(|d| d["blockers"].as_array().cloned().unwrap_or_default())
        .filter_map(|b| b.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn root_only_refusals_by_every_landlock_class_are_incidents() {
    if skip_unless(
        is_root(),
        "reading the kernel's audit log needs root (CAP_AUDIT_READ); the non-root behaviour is checked by not_observable_is_said_not_silent",
    ) {
        return;
    }
    if skip_unless(userns_available(), "user namespaces unavailable") {
        return;
    }
    let _audit = KernelAudit::set(true);
    let w = Workdir::new();
    let store = w.path().join("audit.db");
    let store_arg = store.to_str().unwrap();

    // A signal to the sandbox's init, which is outside the workload's
    // domain (scope.signal).
    let o = w.sh(&["--audit", store_arg], "kill -TERM 1; echo sent=$?");
    assert!(o.stdout.contains("sent=1"), "{}", o.stdout);
    assert_eq!(o.report["landlock_log"]["observed"], true, "{}", o.report);
    assert!(
        blockers(&o).contains(&"scope.signal".to_string()),
        "{}",
        o.report
    );
    let signal_incident = &landlock_incidents(&o)[0];
    assert_eq!(signal_incident["severity"], "high");
    assert!(o.stderr.contains("landlock"), "{}", o.stderr);

    // TCP to a port other than the proxy's (net.connect_tcp).
    let o = w.py(
        &["--audit", store_arg, "--allow-net", "example.com"],
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 22), timeout=2)\nexcept OSError as e:\n    print('errno', e.errno)",
    );
    assert!(o.stdout.contains("errno 13"), "{}", o.stdout);
    let denial = o.report["landlock_denials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["blockers"][0] == "net.connect_tcp")
        .cloned()
        .unwrap_or_else(|| panic!("no net.connect_tcp denial: {}", o.report));
    assert_eq!(denial["object"]["dest"], "22");
    assert!(denial["pid"].as_u64().is_some(), "{denial}");

    // A file outside the granted paths at the process level, where
    // Landlock is the filesystem boundary (fs.read_file, fs.make_reg).
    let o = w.sh(
        &["--audit", store_arg, "--isolation", "process"],
        "cat /etc/shadow; echo x > /root/cordon-landlock-probe",
    );
    assert!(!std::path::Path::new("/root/cordon-landlock-probe").exists());
    let denials = o.report["landlock_denials"].as_array().unwrap().clone();
    let shadow = denials
        .iter()
        .find(|d| d["object"]["path"] == "/etc/shadow")
        .unwrap_or_else(|| panic!("no /etc/shadow denial: {}", o.report));
    assert_eq!(shadow["blockers"][0], "fs.read_file");
    assert!(
        denials
            .iter()
            .any(|d| d["blockers"][0] == "fs.make_reg" && d["object"]["path"] == "/root"),
        "{}",
        o.report
    );

    // The store has all of them, as landlock incidents.
    let out = std::process::Command::new(cordon_bin())
        .args(["audit", "--store", store_arg, "incidents", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let stored: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|r: &serde_json::Value| r["body"]["kind"] == "landlock")
        .collect();
    for needle in [
        "scope.signal",
        "net.connect_tcp",
        "fs.read_file",
        "fs.make_reg",
    ] {
        assert!(
            stored
                .iter()
                .any(|r| r["body"]["evidence"]["blockers"][0] == needle),
            "{needle} not in the store: {text}"
        );
    }
    // And each run's end record says denials were being observed.
    let out = std::process::Command::new(cordon_bin())
        .args(["audit", "--store", store_arg, "tail", "--json"])
        .output()
        .unwrap();
    let ends: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["kind"] == "run_ended")
        .collect();
    assert_eq!(ends.len(), 3);
    for end in &ends {
        let log = find_key(end, "landlock_log").expect("a landlock_log in the end record");
        assert_eq!(log["observed"], true, "{end}");
    }
}

/// The first value named `key` anywhere in `v`.
fn find_key<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m
            .get(key)
            .or_else(|| m.values().find_map(|x| find_key(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

#[test]
fn root_only_another_sandboxs_refusals_are_not_counted() {
    if skip_unless(
        is_root(),
        "reading the kernel's audit log needs root (CAP_AUDIT_READ)",
    ) {
        return;
    }
    if skip_unless(userns_available(), "user namespaces unavailable") {
        return;
    }
    let _audit = KernelAudit::set(true);
    let noisy = Workdir::new();
    let quiet = Workdir::new();
    // The noisy sandbox keeps being refused while the quiet one runs.
    let other = noisy.start(
        &["--no-audit"],
        &[
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 200 ]; do kill -0 1 2>/dev/null; i=$((i+1)); done; echo done",
        ],
    );
    let o = quiet.sh(&["--no-audit"], "sleep 0.3; echo quiet");
    let other_out = other.finish();
    assert!(other_out.stdout.contains("done"), "{}", other_out.stderr);
    assert_eq!(o.report["landlock_log"]["observed"], true, "{}", o.report);
    assert_eq!(o.report["landlock_denials_total"], 0, "{}", o.report);
    assert!(landlock_incidents(&o).is_empty(), "{}", o.report);
}

#[test]
fn not_observable_is_said_not_silent() {
    let _audit = is_root().then(|| KernelAudit::set(false));
    if skip_unless(userns_available(), "user namespaces unavailable") {
        return;
    }
    let w = Workdir::new();
    let o = w.sh(&["--no-audit"], "kill -TERM 1; echo sent=$?");
    assert!(o.stdout.contains("sent=1"), "{}", o.stdout);
    assert_eq!(o.report["landlock_log"]["observed"], false, "{}", o.report);
    let detail = o.report["landlock_log"]["detail"].as_str().unwrap();
    if is_root() {
        assert!(detail.contains("audit is disabled"), "{detail}");
        assert!(detail.contains("auditctl -e 1"), "{detail}");
    } else {
        assert!(detail.contains("needs root"), "{detail}");
    }
    assert!(landlock_incidents(&o).is_empty(), "{}", o.report);
    // `cordon doctor` says the same.
    let out = std::process::Command::new(cordon_bin())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let doctor: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doctor["landlock_log"]["observed"], false);
}
