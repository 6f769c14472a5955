//! Hostile suite, layer: seccomp. Every denied system call, called by its
//! number from C with harmless arguments, must fail with EPERM *and* show up
//! in the run's `denied_calls` under its name: many of these calls would
//! fail anyway for lack of capabilities, so only the refusal the filter hands
//! to the supervisor proves the seccomp rule exists. Numbers above the
//! highest the filter knows must answer ENOSYS.
//!
//! The list below is written out here, apart from the filter's own table:
//! dropping a name from the filter makes this test fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

/// (name, x86_64 number, aarch64 number or None where the call is absent).
const DENIED: &[(&str, u32, Option<u32>)] = &[
    ("mount", 165, Some(40)),
    ("umount2", 166, Some(39)),
    ("pivot_root", 155, Some(41)),
    ("chroot", 161, Some(51)),
    ("move_mount", 429, Some(429)),
    ("open_tree", 428, Some(428)),
    ("fsopen", 430, Some(430)),
    ("fsconfig", 431, Some(431)),
    ("fsmount", 432, Some(432)),
    ("fspick", 433, Some(433)),
    ("mount_setattr", 442, Some(442)),
    ("open_tree_attr", 467, Some(467)),
    ("unshare", 272, Some(97)),
    ("setns", 308, Some(268)),
    ("ptrace", 101, Some(117)),
    ("process_vm_readv", 310, Some(270)),
    ("process_vm_writev", 311, Some(271)),
    ("kcmp", 312, Some(272)),
    ("pidfd_getfd", 438, Some(438)),
    ("bpf", 321, Some(280)),
    ("perf_event_open", 298, Some(241)),
    ("userfaultfd", 323, Some(282)),
    ("io_uring_setup", 425, Some(425)),
    ("io_uring_enter", 426, Some(426)),
    ("io_uring_register", 427, Some(427)),
    ("keyctl", 250, Some(219)),
    ("add_key", 248, Some(217)),
    ("request_key", 249, Some(218)),
    ("kexec_load", 246, Some(104)),
    ("kexec_file_load", 320, Some(294)),
    ("init_module", 175, Some(105)),
    ("finit_module", 313, Some(273)),
    ("delete_module", 176, Some(106)),
    ("reboot", 169, Some(142)),
    ("swapon", 167, Some(224)),
    ("swapoff", 168, Some(225)),
    ("acct", 163, Some(89)),
    ("syslog", 103, Some(116)),
    ("quotactl", 179, Some(60)),
    ("quotactl_fd", 443, Some(443)),
    ("settimeofday", 164, Some(170)),
    ("clock_settime", 227, Some(112)),
    ("clock_adjtime", 305, Some(266)),
    ("iopl", 172, None),
    ("ioperm", 173, None),
    ("vhangup", 153, Some(58)),
    ("lookup_dcookie", 212, Some(18)),
    ("uselib", 134, None),
    ("ustat", 136, None),
    ("sysfs", 139, None),
    ("_sysctl", 156, None),
    ("nfsservctl", 180, Some(42)),
    ("open_by_handle_at", 304, Some(265)),
    ("name_to_handle_at", 303, Some(264)),
    ("fanotify_init", 300, Some(262)),
];

/// Numbers above the highest the filter knows (469, file_setattr).
const UNKNOWN: &[u32] = &[470, 471, 500, 1000, 0x3fff_ffff];

/// Calls each `name:nr` argument with every argument -1 (an invalid fd,
/// pointer, flag set and length all at once, so nothing is created even
/// where a call got through), then the reproduction from the report that
/// found `open_tree_attr` allowed.
const PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *colon = strchr(argv[i], ':');
        if (!colon) return 2;
        *colon = 0;
        long nr = strtol(colon + 1, NULL, 0);
        errno = 0;
        long r = syscall(nr, -1L, -1L, -1L, -1L, -1L, -1L);
        printf("%s ret=%ld errno=%d\n", argv[i], r, r == -1 ? errno : 0);
        fflush(stdout);
    }
    long r = syscall(467, AT_FDCWD, "/", 0, NULL, 0);
    printf("open_tree_attr_root ret=%ld errno=%d\n", r, r == -1 ? errno : 0);
    return 0;
}
"#;

fn denied_here() -> Vec<(&'static str, u32)> {
    DENIED
        .iter()
        .filter_map(|&(name, x86_64, aarch64)| {
            if cfg!(target_arch = "aarch64") {
                aarch64.map(|n| (name, n))
            } else {
                Some((name, x86_64))
            }
        })
        .collect()
}

fn every_denied_call_is_refused_and_reported(flags: &[&str]) {
    let w = Workdir::new();
    let bin = w.compile_c("probe", PROBE);
    let mut args = vec![bin.to_str().expect("utf8").to_owned()];
    let denied = denied_here();
    args.extend(denied.iter().map(|(name, nr)| format!("{name}:{nr}")));
    args.extend(UNKNOWN.iter().map(|nr| format!("unknown_{nr}:{nr}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = w.run(flags, &args);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);

    let line = |name: &str| -> String {
        o.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_owned))
            .unwrap_or_else(|| panic!("{name} not reported: {}{}", o.stdout, o.stderr))
    };
    let errno = |e: i32| format!("ret=-1 errno={e}");
    let mut wrong = Vec::new();
    for (name, _) in &denied {
        if line(name) != errno(libc::EPERM) {
            wrong.push(format!("{name}: {}", line(name)));
        }
    }
    if line("open_tree_attr_root") != errno(libc::EPERM) {
        wrong.push(format!(
            "open_tree_attr_root: {}",
            line("open_tree_attr_root")
        ));
    }
    for nr in UNKNOWN {
        let name = format!("unknown_{nr}");
        if line(&name) != errno(libc::ENOSYS) {
            wrong.push(format!("{name}: {}", line(&name)));
        }
    }
    assert!(wrong.is_empty(), "wrong answers: {wrong:#?}");

    // The proof that the filter refused each one: the supervisor got it.
    let calls = o.report["denied_calls"]
        .as_array()
        .expect("denied_calls in the report");
    let reported: Vec<(String, u64)> = calls
        .iter()
        .map(|c| {
            (
                c["syscall"].as_str().unwrap_or("").to_owned(),
                c["nr"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    let missing: Vec<&str> = denied
        .iter()
        .filter(|(name, nr)| !reported.contains(&(name.to_string(), u64::from(*nr))))
        .map(|(name, _)| *name)
        .collect();
    assert!(
        missing.is_empty(),
        "not refused by the filter (no denied_calls entry): {missing:?}\nreported: {reported:?}"
    );
    // The reproduction is one more refused open_tree_attr; nothing else
    // (the unknown numbers answer ENOSYS inside the kernel) is reported.
    assert_eq!(o.report["denied_calls_total"], denied.len() as u64 + 1);
}

#[test]
fn every_denied_call_by_number_is_refused_and_reported() {
    if skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    ) {
        return;
    }
    every_denied_call_is_refused_and_reported(&["--no-audit"]);
}

/// At the `process` level no namespace and no mount stands behind the
/// filter, so it is the only layer for most of these calls.
#[test]
fn every_denied_call_by_number_is_refused_and_reported_at_the_process_level() {
    every_denied_call_is_refused_and_reported(&["--no-audit", "--isolation", "process"]);
}
