//! The `cordon run` contract: exit statuses, the report, environment,
//! paths, errors. Every test drives the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

#[test]
fn default_run_prints_and_reports() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.py(&[], "print(1+1)");
    assert_eq!(o.code, 0, "stderr: {}", o.stderr);
    assert_eq!(o.stdout, "2\n");
    let r = &o.report;
    assert_eq!(r["reason"], "exited");
    assert_eq!(r["exit_code"], 0);
    assert!(r["wall_time"].as_f64().unwrap_or(-1.0) > 0.0);
    assert!(r["peak_memory"].as_u64().unwrap_or(0) > 0);
    assert_eq!(r["stdout"]["kept"], 2);
    assert_eq!(r["enforcement"]["isolation"], "namespaces");
    assert!(r["enforcement"]["landlock_abi"].as_u64().unwrap_or(0) >= 1);
    for key in [
        "memory",
        "pids",
        "output",
        "open_files",
        "file_size",
        "wall_seconds",
        "cpu_seconds",
    ] {
        assert!(
            !r["limits"][key].is_null(),
            "limit {key} missing from report: {}",
            r["limits"]
        );
    }
    let layers: Vec<&str> = r["enforcement"]["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .filter(|l| l["enforced"] == true)
        .filter_map(|l| l["layer"].as_str())
        .collect();
    for l in [
        "user_namespace",
        "mount_namespace",
        "pid_namespace",
        "network_namespace",
        "seccomp",
        "landlock",
        "capabilities",
        "rlimits",
        "deadline",
    ] {
        assert!(layers.contains(&l), "layer {l} not enforced: {layers:?}");
    }
}

#[test]
fn exit_status_is_the_workloads_own() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    assert_eq!(w.sh(&[], "exit 7").code, 7);
    let o = w.sh(&[], "kill -TERM $$");
    assert_eq!(o.code, 128 + 15);
    assert_eq!(o.reason(), "signal");
    assert_eq!(o.report["status"]["signal"], 15);
    // The shell above cordon sees only 128+15: cordon names the signal.
    assert!(
        o.stderr
            .contains("the command was killed by signal 15 (SIGTERM)"),
        "{}",
        o.stderr
    );
    // Not a reader gone away: `yes | head` ends its writer with SIGPIPE.
    let o = w.sh(&[], "kill -PIPE $$");
    assert_eq!(o.code, 128 + libc::SIGPIPE);
    assert!(!o.stderr.contains("killed by signal"), "{}", o.stderr);
}

/// A write refused as read-only (the working directory and every path not
/// declared writable are mounted read-only) is explained at the end: which
/// paths are writable, and the flag that makes another so. Said only when
/// the command said "read-only file system", in any runtime's wording.
#[test]
fn a_write_refused_as_read_only_names_the_writable_paths_and_the_flag() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let hint = "cordon: hint: a write was refused as \"read-only file system\"";
    let o = w.sh(&[], "echo hi > out.txt");
    assert_ne!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("Read-only file system"), "{}", o.stderr);
    assert!(
        o.stderr
            .contains(&format!("{hint}: only /tmp, /dev/shm are writable"))
            && o.stderr.contains("--rw . for the working directory"),
        "{}",
        o.stderr
    );
    // Python's wording; a declared writable path is named with the rest.
    let out = w.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let out = out.to_str().unwrap();
    let o = w.py(&["--rw", out], "open('out.txt', 'w')");
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains(&format!("only /tmp, /dev/shm, {out} are writable")),
        "{}",
        o.stderr
    );
    // Where the write is allowed, or the command said something else, no hint.
    let o = w.sh(&["--rw", "."], "echo hi > out.txt");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o2 = w.sh(&[], "echo 'Permission denied' >&2; exit 1");
    for o in [o, o2] {
        assert!(!o.stderr.contains("cordon: hint"), "{}", o.stderr);
    }
}

/// A host name looked up in a sandbox without network fails with the
/// resolver's words ("Name or service not known"); cordon ends with how to
/// give the command a host. With egress on, the proxy's own refusals say
/// it instead, and this hint is not given.
#[test]
fn a_lookup_without_network_says_how_to_allow_a_host() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let lookup = "import socket; socket.getaddrinfo('pkg.example', 443)";
    let hint = "this sandbox has no network; give --allow-net HOST";
    let o = w.py(&[], lookup);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("socket.gaierror"), "{}", o.stderr);
    assert!(o.stderr.contains(hint), "{}", o.stderr);
    let o = w.py(&["--allow-net", "pkg.example"], lookup);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(!o.stderr.contains(hint), "{}", o.stderr);
    let o = w.py(&[], "print('no lookup')");
    assert!(!o.stderr.contains("cordon: hint"), "{}", o.stderr);
}

/// A fork refused at the process limit: with a pids cgroup the run's end
/// names the limit from the kernel's count; under RLIMIT_NPROC (the
/// rootless pass here), which counts nothing, the shell's "Cannot fork"
/// is the sign, and the hint names the limit and the flag.
#[test]
fn a_fork_refused_at_the_process_limit_is_explained() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.sh(
        &["--pids", "8"],
        "for i in $(seq 20); do sleep 2 & done; wait",
    );
    assert_ne!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("Cannot fork"), "{}", o.stderr);
    let hint = "the command could not start a process or thread: this sandbox allows 8 processes and threads";
    if cgroup_controls(&o, "pids") {
        assert_eq!(o.reason(), "pids_limit", "{}", o.stderr);
        assert!(
            o.stderr.contains(
                "the process limit (8 processes and threads) was reached; give a larger --pids"
            ),
            "{}",
            o.stderr
        );
        assert!(!o.stderr.contains(hint), "said once: {}", o.stderr);
    } else {
        assert!(o.report["breaches"]["pids_limit_hits"].is_null());
        assert!(
            o.stderr.contains(hint) && o.stderr.contains("--pids"),
            "{}",
            o.stderr
        );
    }
}

/// A run that ends at a limit says which limit, its value, and the flag
/// that raises it. A shell whose child was cut at the file-size limit (it
/// exits 153 itself, not by the signal) ends at that limit too.
#[test]
fn a_run_ended_at_a_limit_names_the_limit_and_its_flag() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let cases: [(&[&str], &str, &str, &str); 4] = [
        (
            &["--timeout", "1s"],
            "sleep 5",
            "timeout",
            "cordon: killed at the wall-clock deadline (1s); give a longer --timeout",
        ),
        (
            &["--file-size", "1KiB"],
            "head -c 5000 /dev/zero > /tmp/x",
            "file_size_limit",
            "cordon: a write was cut at the file size limit (1 KiB); give a larger --file-size",
        ),
        (
            &["--output", "10", "--on-output-limit", "kill"],
            "seq 100000",
            "output_limit",
            "cordon: killed: output passed its limit (10 bytes per stream); give a larger --output",
        ),
        (
            &["--cpu-time", "1s"],
            "while :; do :; done",
            "cpu_limit",
            "cordon: the CPU time limit (1s) was reached; give a larger --cpu-time",
        ),
    ];
    for (flags, script, reason, said) in cases {
        let o = w.sh(flags, script);
        assert_eq!(o.reason(), reason, "{script}: {}", o.stderr);
        assert!(o.stderr.contains(said), "{script}: {}", o.stderr);
        assert_eq!(
            o.stderr.matches("give a").count(),
            1,
            "the flag once: {}",
            o.stderr
        );
    }
    // Memory: a memory cgroup kills and the end says so; under RLIMIT_AS
    // the allocation fails, which only the command's words show.
    let o = w.py(
        &["--memory", "64MiB"],
        "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096])",
    );
    if cgroup_controls(&o, "memory") {
        assert_eq!(o.reason(), "memory_limit", "{}", o.stderr);
        assert!(
            o.stderr
                .contains("cordon: killed by the memory limit (64 MiB); give a larger --memory"),
            "{}",
            o.stderr
        );
    } else {
        assert!(o.stderr.contains("MemoryError"), "{}", o.stderr);
        assert!(
            o.stderr.contains("the command ran out of memory: this sandbox allows 64 MiB of address space per process")
                && o.stderr.contains("give a larger --memory"),
            "{}",
            o.stderr
        );
        // So small that the loader cannot map python3's libraries: the
        // loader's words, and the same hint.
        let o = w.py(&["--memory", "10MiB"], "pass");
        assert_eq!(o.code, 127, "{}", o.stderr);
        assert!(
            o.stderr.contains("error while loading shared libraries"),
            "{}",
            o.stderr
        );
        assert!(
            o.stderr.contains(
                "the command ran out of memory: this sandbox allows 10 MiB of address space"
            ),
            "{}",
            o.stderr
        );
    }
}

/// `cordon run -- python3 /elsewhere/job.py` fails inside with "No such
/// file or directory", true in the sandbox and false on the host. An
/// argument naming a host path the sandbox will not show is named before
/// the run with the flag that shows it; declared, it runs and nothing is said.
#[test]
fn an_argument_naming_a_host_path_the_sandbox_does_not_show_is_noted() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let job = elsewhere.path().canonicalize().unwrap().join("job.py");
    std::fs::write(&job, "print('ran')\n").unwrap();
    let job = job.to_str().unwrap();
    let o = w.py(&[], "pass");
    assert!(
        !o.stderr.contains("cordon: note: the argument"),
        "{}",
        o.stderr
    );
    let o = w.run(&[], &["python3", job, "/no/such/path"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "cordon: note: the argument {job} is a host path, which the sandbox does not show"
        )) && o
            .stderr
            .contains(&format!("give --ro {job} (or its directory)")),
        "{}",
        o.stderr
    );
    assert!(
        !o.stderr.contains("/no/such/path,"),
        "only paths that exist: {}",
        o.stderr
    );
    let o = w.run(&["--ro", job], &["python3", job]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "ran\n"), "{}", o.stderr);
    assert!(
        !o.stderr.contains("cordon: note: the argument"),
        "{}",
        o.stderr
    );
}

/// A runtime that cannot reserve its address space at start crashes (V8
/// traps, the JVM and glibc abort). Where memory is RLIMIT_AS (no memory
/// cgroup: the rootless pass on this host), cordon says so and how to fix
/// it; under a memory cgroup (as root) the reservation succeeds.
#[test]
fn a_runtime_that_cannot_reserve_its_address_space_is_explained() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let bin = w.compile_c("reserve", RESERVES_ADDRESS_SPACE_C);
    let o = w.run(&["--memory", "256MiB"], &[bin.to_str().unwrap()]);
    let rlimits = o.report["enforcement"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "rlimits")
        .map(|l| l["detail"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default();
    if rlimits.contains("as (instead of cgroup memory)") {
        assert_eq!(o.code, 128 + libc::SIGABRT, "{}", o.stderr);
        assert!(
            o.stderr.contains("killed by signal 6 (SIGABRT)")
                && o.stderr.contains("RLIMIT_AS, 256 MiB per process")
                && o.stderr.contains("give a larger --memory"),
            "{}",
            o.stderr
        );
        let o = w.run(&["--memory", "2GiB"], &[bin.to_str().unwrap()]);
        assert_eq!(o.code, 0, "with room for the reservation: {}", o.stderr);
    } else {
        assert_eq!(
            o.code, 0,
            "a memory cgroup counts pages, not address space: {}",
            o.stderr
        );
        assert!(!o.stderr.contains("RLIMIT_AS"), "{}", o.stderr);
    }
}

#[test]
fn deadline_kills_with_124() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let start = std::time::Instant::now();
    let o = w.run(&["--timeout", "500ms"], &["sleep", "30"]);
    assert_eq!(o.code, 124);
    assert_eq!(o.reason(), "timeout");
    assert!(start.elapsed().as_secs() < 10);
    assert!(o.stderr.contains("deadline"), "{}", o.stderr);
}

#[test]
fn missing_and_unexecutable_commands() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.run(&[], &["no-such-command-anywhere"]);
    assert_eq!(o.code, 127);
    assert_eq!(o.reason(), "exec_failed");
    assert!(o.stderr.contains("not found"), "{}", o.stderr);
    w.write("not-exec.sh", "echo hi\n");
    let o = w.run(&[], &["./not-exec.sh"]);
    assert_eq!(o.code, 126, "{}", o.stderr);
}

#[test]
fn setup_errors_exit_125_and_say_what_to_fix() {
    let w = Workdir::new();
    let o = w.run(&["--rw", "/definitely/not/here"], &["true"]);
    assert_eq!(o.code, 125);
    assert!(
        o.stderr.contains("/definitely/not/here") && o.stderr.contains("create it"),
        "{}",
        o.stderr
    );
    w.write("bad.toml", "[limits]\nmemory = \"12XB\"\n");
    let o = w.run(&["--profile", "bad.toml"], &["true"]);
    assert_eq!(o.code, 125);
    assert!(
        o.stderr.contains("bad.toml:2"),
        "error must name file:line: {}",
        o.stderr
    );
    assert!(o.stderr.contains("limits.memory"), "{}", o.stderr);

    // A report that could not be written at the end is refused before the
    // command runs (a long run's report would otherwise be lost), for
    // `run --report` and for `learn -o` / `--report` alike.
    let marker = w.path().join("ran");
    let script = format!("echo ran > {}", marker.display());
    let missing = w.path().join("no/such/dir/out");
    for args in [
        vec!["run", "--rw", ".", "--report"],
        vec!["learn", "-o"],
        vec!["learn", "-o", "p.toml", "--report"],
    ] {
        let o = std::process::Command::new(cordon_bin())
            .current_dir(w.path())
            .args(&args)
            .arg(&missing)
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains("cannot be created in"), "{args:?}: {err}");
        assert!(!marker.exists(), "{args:?}: the command ran");
    }
}

#[test]
fn environment_is_built_from_an_allowlist() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.run_with(
        &["--env", "CORDON_PASSED", "--setenv", "FOO=bar"],
        &["/usr/bin/env"],
        |c| {
            c.env("CORDON_HOST_SECRET", "s3cr3t-value")
                .env("CORDON_PASSED", "yes");
        },
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        !o.stdout.contains("s3cr3t-value"),
        "host env leaked: {}",
        o.stdout
    );
    assert!(o.stdout.contains("CORDON_PASSED=yes"));
    assert!(o.stdout.contains("FOO=bar"));
    assert!(o.stdout.contains("HOME=/tmp"));
}

#[test]
fn cwd_is_readable_at_its_own_path_and_rw_writes_reach_the_host() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    w.write("input.txt", "data\n");
    std::fs::create_dir(w.path().join("out")).expect("mkdir");
    let cwd = std::fs::canonicalize(w.path()).expect("canonical");
    let o = w.sh(
        &["--rw", "out"],
        "pwd; cat input.txt; echo result > out/r.txt; echo nope > x.txt; echo $?",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], cwd.to_str().expect("utf8"));
    assert_eq!(lines[1], "data");
    assert_eq!(lines[2], "2", "writing into the read-only cwd must fail");
    assert_eq!(
        std::fs::read_to_string(w.path().join("out/r.txt")).expect("written"),
        "result\n"
    );
    assert!(!w.path().join("x.txt").exists());
}

#[test]
fn output_is_capped_per_stream_and_counted() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.py(
        &["--output", "1000"],
        "import sys\nsys.stdout.write('x'*5000)\nsys.stderr.write('e'*10)",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout.len(), 1000);
    assert_eq!(o.report["stdout"]["kept"], 1000);
    assert_eq!(o.report["stdout"]["dropped"], 4000);
    assert_eq!(o.report["stderr"]["kept"], 10);
    assert_eq!(o.report["breaches"]["output_truncated"], true);
}

#[test]
fn doctor_reports_json() {
    let out = std::process::Command::new(cordon_bin())
        .args(["doctor", "--json"])
        .output()
        .expect("doctor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    for key in [
        "user_namespaces",
        "seccomp",
        "landlock",
        "cgroup",
        "isolation_level",
        "limits",
        "landlock_abi",
        "cgroup_version",
    ] {
        assert!(!v[key].is_null(), "doctor --json lacks {key}");
    }
}

/// A layer the host cannot give is warned of on every run, so the warning
/// is one line: which limits rlimits hold instead and where to read why.
/// The report keeps the whole detail (every hierarchy tried). As root
/// here the cgroup layer holds and nothing is warned; the rootless pass,
/// without delegation, gets the one line.
#[test]
fn a_missing_cgroup_controller_is_warned_of_in_one_line() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let o = w.sh(&[], "true");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let layer = o.report["enforcement"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "cgroup")
        .cloned()
        .unwrap_or_else(|| panic!("no cgroup layer: {}", o.report));
    let warnings: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("cordon: warning: cgroup not enforced"))
        .collect();
    if layer["enforced"] == true {
        assert!(warnings.is_empty(), "{}", o.stderr);
        return;
    }
    assert_eq!(warnings.len(), 1, "{}", o.stderr);
    let warning = warnings[0];
    assert!(warning.contains("so rlimits hold memory"), "{warning}");
    assert!(warning.contains("`cordon doctor` says why"), "{warning}");
    assert!(warning.len() < 240, "one line: {warning}");
    let detail = layer["detail"].as_str().unwrap();
    assert!(
        detail.contains("rlimits ("),
        "the report has the whole: {detail}"
    );
    assert!(!warning.contains(detail), "{warning}");
}
