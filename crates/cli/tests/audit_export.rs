//! `cordon audit export --format otlp-json`: a run and its incidents as an
//! OpenTelemetry trace, through the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

#[test]
fn a_run_with_a_refused_syscall_exports_as_a_span_with_an_incident_event() {
    if skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    ) {
        return;
    }
    let w = Workdir::new();
    let db = w.path().join("audit.db");
    let db_s = db.to_str().expect("utf8");
    let o = w.run(
        &["--audit", db_s],
        &[
            "python3",
            "-c",
            "import ctypes; print(ctypes.CDLL(None).unshare(0x10000000))",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout.trim(), "-1");
    let out = std::process::Command::new(cordon_bin())
        .args(["audit", "--store", db_s, "export", "--format", "otlp-json"])
        .output()
        .expect("export");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("OTLP JSON");
    let spans = v["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .expect("spans");
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(span["name"], "cordon.run");
    assert_eq!(span["status"]["code"], 1, "exit 0 is OK");
    let run_id = o.report["run_id"].as_str().expect("run id");
    let id_attr = span["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "cordon.run.id")
        .unwrap();
    assert_eq!(id_attr["value"]["stringValue"], run_id);
    let start: u128 = span["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
    let end: u128 = span["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
    assert!(end > start);
    let incident = span["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "cordon.incident")
        .expect("incident event");
    let summary = incident["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "cordon.incident.summary")
        .unwrap();
    assert!(
        summary["value"]["stringValue"]
            .as_str()
            .unwrap()
            .contains("unshare"),
        "{incident}"
    );
}
