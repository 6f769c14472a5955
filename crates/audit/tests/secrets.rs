//! Secrets planted in what a run prints, its argv, its code and its egress
//! never reach the store's files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use cordon_audit::{
    AuditStore, AuditWriter, Egress, Incident, IncidentKind, Severity, WriterOptions,
};
use cordon_scan::Redactor;

const PLANTED: &[&str] = &[
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "ghp_aaaabbbbccccddddeeeeffffgggghhhhiiii",
    "sk-ant-api03-plantedplantedplanted123",
    "xoxb-123456789012-plantedtoken",
    "hunter2-database-password",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    "s3cr3t-userinfo-pw",
    "bound-secret-value-42",
];

fn all_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            out.extend(std::fs::read(&p).unwrap());
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn planted_secrets_never_reach_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let opts = WriterOptions {
        redactor: Redactor::with_values(&["bound-secret-value-42"]),
        ..Default::default()
    };
    let w = AuditWriter::open_with(&path, opts).unwrap();
    let output = format!(
        "starting\nAWS_ACCESS_KEY_ID={}\naws_secret_access_key = {}\ntoken: {}\n{} and {}\n\
         DB_PASSWORD={}\n-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n\
         cloning https://bob:{}@git.example.com/x.git\nthe bound value is {}\n",
        PLANTED[0],
        PLANTED[1],
        PLANTED[2],
        PLANTED[3],
        PLANTED[4],
        PLANTED[5],
        PLANTED[6],
        PLANTED[7],
        PLANTED[8]
    );
    let mut st = started(0);
    st.argv = vec![
        "deploy".into(),
        format!("--password={}", PLANTED[5]),
        PLANTED[8].into(),
    ];
    let code = format!("key = '{}'\nprint('{}')\n", PLANTED[0], PLANTED[8]);
    w.start_run(
        "r1",
        st,
        Some(code.as_bytes()),
        Some("[secrets]\nx = 'bound-secret-value-42'\n"),
    )
    .unwrap();
    w.append(
        "r1",
        Egress {
            path: Some(format!("/api?token={}", PLANTED[2])),
            ..egress(0)
        },
    )
    .unwrap();
    w.append(
        "r1",
        Incident {
            kind: IncidentKind::Secret,
            severity: Severity::High,
            summary: format!("secret {} printed", PLANTED[8]),
            evidence: serde_json::json!({"line": output.lines().nth(1), "nested": [PLANTED[4]]}),
        },
    )
    .unwrap();
    let mut end = ended(&output);
    end.stderr.excerpt = output.clone();
    w.append("r1", end).unwrap();
    w.flush().unwrap();

    // While the writer is open (WAL present) and after it is closed.
    for phase in ["open", "closed"] {
        let bytes = all_bytes(path.parent().unwrap());
        for s in PLANTED {
            assert!(
                !contains(&bytes, s),
                "{phase}: {s} found in the store's files"
            );
        }
        if phase == "open" {
            drop(w);
            break;
        }
    }
    let bytes = all_bytes(path.parent().unwrap());
    for s in PLANTED {
        assert!(
            !contains(&bytes, s),
            "closed: {s} found in the store's files"
        );
    }
    let run = AuditStore::open(&path).unwrap().show("r1").unwrap();
    let excerpt = run.records[3].body["stdout"]["excerpt"].as_str().unwrap();
    assert!(
        excerpt.contains("[REDACTED:aws_access_key_id]"),
        "{excerpt}"
    );
    assert!(excerpt.contains("[REDACTED:value]"), "{excerpt}");
    assert!(excerpt.starts_with("starting\n"));
    let code = String::from_utf8(run.code.unwrap().data).unwrap();
    assert!(code.contains("[REDACTED:"), "{code}");
    assert_verifies(&path);
}
