//! `cordon policy check|test|explain` through the real binary, over the
//! example policy and its table of cases (examples/policy/).
//!
//! Layer: cordon-authz's combination order (ceiling > forbid > ask > permit >
//! default). The table fails when a forbid is removed from the policy
//! (`deny_wins_*`) and when the ceiling step is removed from the crate (the
//! ceiling cases expect deny for actions a rule allows).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::cordon_bin;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn policy() -> PathBuf {
    repo().join("examples/policy/agents.cedar")
}

fn cases() -> PathBuf {
    repo().join("examples/policy/agents.cases.toml")
}

fn cordon(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(cordon_bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cordon policy explain` of the example policy for the token "agent".
fn explain_agent(args: &[&str]) -> (i32, String, String) {
    let p = policy();
    let mut all = vec![
        "policy",
        "explain",
        p.to_str().unwrap(),
        "--principal",
        "agent",
    ];
    all.extend_from_slice(args);
    cordon(&all)
}

/// The 1-based line of the rule `@id("id")` in the example policy.
fn line_of(id: &str) -> u32 {
    let text = std::fs::read_to_string(policy()).unwrap();
    let needle = format!("@id(\"{id}\")");
    let idx = text.lines().position(|l| l.trim() == needle).unwrap();
    u32::try_from(idx + 1).unwrap()
}

#[test]
fn the_example_table_passes_with_every_action_kind_and_effect() {
    let p = policy();
    let c = cases();
    let (code, out, err) = cordon(&[
        "policy",
        "test",
        p.to_str().unwrap(),
        c.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["failed"], 0, "{out}");
    let outcomes = v["outcomes"].as_array().unwrap();
    assert!(outcomes.len() >= 100, "only {} cases", outcomes.len());
    assert_eq!(v["passed"].as_u64().unwrap() as usize, outcomes.len());
    let kinds: std::collections::BTreeSet<&str> = outcomes
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.len(), 10, "{kinds:?}");
    let effects: std::collections::BTreeSet<&str> = outcomes
        .iter()
        .map(|o| o["decision"]["effect"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        effects,
        ["allow", "allow_with_limits", "ask", "deny"]
            .into_iter()
            .collect()
    );
    let sources: std::collections::BTreeSet<&str> = outcomes
        .iter()
        .map(|o| o["decision"]["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources.len(), 5, "{sources:?}");
    // Every decision names its rule with a file and line.
    for o in outcomes {
        let rule = &o["decision"]["rule"];
        if o["decision"]["source"] == "ceiling" || o["decision"]["source"] == "default" {
            assert_eq!(rule["file"], "<profile>");
        } else {
            assert!(rule["file"].as_str().unwrap().ends_with("agents.cedar"));
            assert_eq!(
                rule["line"].as_u64().unwrap() as u32,
                line_of(rule["id"].as_str().unwrap())
            );
        }
    }
    // The plain output ends with the count line CI runners read.
    let (code, out, _) = cordon(&["policy", "test", p.to_str().unwrap(), c.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(out.trim(), format!("{} passed, 0 failed", outcomes.len()));
}

#[test]
fn a_wrong_expectation_fails_and_shows_the_rule_that_decided() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("cases.toml");
    std::fs::write(
        &c,
        "defaults = { principal = \"agent\" }\n\n[[case]]\nname = \"push is fine\"\nkind = \"exec\"\nargv = [\"git\", \"push\"]\nexpect = \"allow\"\n\n[[case]]\nname = \"ls\"\nkind = \"exec\"\nargv = [\"ls\"]\nexpect = \"allow\"\n",
    )
    .unwrap();
    let p = policy();
    let (code, out, err) = cordon(&["policy", "test", p.to_str().unwrap(), c.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "{}:3 push is fine: expected allow, got ask",
            c.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "git-push-asks ({}:{})",
            p.display(),
            line_of("git-push-asks")
        )),
        "{out}"
    );
    assert!(out.contains("1 passed, 1 failed"), "{out}");
}

#[test]
fn deny_wins_the_table_fails_when_a_forbid_is_removed() {
    let text = std::fs::read_to_string(policy()).unwrap();
    let start = text.find("@id(\"no-force-push\")").unwrap();
    let end = start + text[start..].find("};").unwrap() + 2;
    let weakened = format!("{}{}", &text[..start], &text[end..]);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("weakened.cedar");
    std::fs::write(&p, weakened).unwrap();
    let c = cases();
    let (code, out, _) = cordon(&["policy", "test", p.to_str().unwrap(), c.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("force push is forbidden: expected deny, got ask"),
        "{out}"
    );
    assert!(
        out.contains("deny overrides an allowing default: expected deny, got ask"),
        "{out}"
    );
}

#[test]
fn explain_names_the_rule_with_file_and_line() {
    let p = policy();
    let ps = p.to_str().unwrap();
    let (code, out, err) = explain_agent(&["--json", "--exec", "git", "push", "--force"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["decision"]["effect"]["kind"], "deny");
    assert_eq!(v["decision"]["rule"]["id"], "no-force-push");
    assert_eq!(
        v["decision"]["rule"]["line"].as_u64().unwrap() as u32,
        line_of("no-force-push")
    );
    assert_eq!(v["grantable"], false);

    let (code, out, _) = explain_agent(&["--egress", "api.github.com:443"]);
    assert_eq!(code, 0);
    assert!(out.contains("decision: ask"), "{out}");
    assert!(
        out.contains(&format!(
            "egress-github-asks at {ps}:{}",
            line_of("egress-github-asks")
        )),
        "{out}"
    );
    assert!(
        out.contains("offers:   once, session, duration, persistent"),
        "{out}"
    );

    let (_, out, _) = explain_agent(&["--bind", "/srv/cache", "--rw"]);
    assert!(out.contains("bind-writable-asks"), "{out}");
    let (_, out, _) = explain_agent(&["--read", "/work/a.rs", "--ceiling", "no file API"]);
    assert!(
        out.contains("decision: deny") && out.contains("ceiling:no file API at <profile>:0"),
        "{out}"
    );
    let (_, out, _) = explain_agent(&["--raise-memory", "2GiB"]);
    assert!(out.contains("raise-within-4g"), "{out}");
    let (_, out, _) = explain_agent(&["--tool", "github/delete_repository"]);
    assert!(out.contains("no-delete-tools"), "{out}");
    let (code, _, err) = cordon(&["policy", "explain", ps, "--principal", "agent"]);
    assert_ne!(code, 0);
    assert!(err.contains("name the action to explain"), "{err}");
}

#[test]
fn check_reports_file_line_and_the_fix() {
    let p = policy();
    let (code, out, err) = cordon(&["policy", "check", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(": ok, "), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.cedar");
    std::fs::write(
        &bad,
        "@id(\"ok\")\npermit(principal, action == Action::\"exec\", resource);\n\n@id(\"typo\")\nforbid(principal, action == Action::\"egress\", resource)\nwhen { context.hots == \"x\" };\n",
    )
    .unwrap();
    let (code, _, err) = cordon(&["policy", "check", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("{}:6:", bad.display())), "{err}");
    assert!(err.contains("hots"), "{err}");
    assert!(err.contains("help:"), "{err}");
    let (code, out, _) = cordon(&["policy", "check", bad.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"][0]["line"], 6);

    let (code, out, _) = cordon(&["policy", "schema"]);
    assert_eq!(code, 0);
    assert!(out.contains("action exec appliesTo"), "{out}");
    let (code, out, _) = cordon(&["policy", "schema", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let actions = v[""]["actions"].as_object().unwrap();
    assert_eq!(actions.len(), 10, "{out}");
}
