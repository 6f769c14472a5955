//! Export to OpenTelemetry: the store's runs as OTLP/JSON traces (one span
//! per run, span events for its egress decisions and incidents), the file
//! format the OpenTelemetry Collector's `otlpjsonfile` receiver reads.
//!
//! Attribute names follow the semantic conventions where one exists
//! (`process.command_args`, `process.exit.code`, `server.address`,
//! `server.port`, `http.request.method`, `url.path`); the rest are
//! namespaced `cordon.*`.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::event::Record;

fn attr(key: &str, value: Value) -> Option<Value> {
    let v = match value {
        Value::String(s) => json!({ "stringValue": s }),
        Value::Bool(b) => json!({ "boolValue": b }),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({ "intValue": n.to_string() }),
        Value::Number(n) => json!({ "doubleValue": n }),
        Value::Array(items) => {
            let values: Vec<Value> = items
                .into_iter()
                .map(|i| match i {
                    Value::String(s) => json!({ "stringValue": s }),
                    other => json!({ "stringValue": other.to_string() }),
                })
                .collect();
            json!({ "arrayValue": { "values": values } })
        }
        Value::Null => return None,
        other => json!({ "stringValue": other.to_string() }),
    };
    Some(json!({ "key": key, "value": v }))
}

fn attrs(pairs: Vec<(&str, Value)>) -> Vec<Value> {
    pairs.into_iter().filter_map(|(k, v)| attr(k, v)).collect()
}

fn ids(run_id: &str) -> (String, String) {
    let digest = Sha256::digest(run_id.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    (hex[..32].to_owned(), hex[32..48].to_owned())
}

/// The runs in `records` (in store order) as one OTLP/JSON `TracesData`.
pub fn traces(records: &[Record]) -> Value {
    let mut runs: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| !r.run_id.is_empty()) {
        runs.entry(r.run_id.as_str()).or_default().push(r);
    }
    let mut spans = Vec::new();
    for (run_id, recs) in runs {
        let (trace_id, span_id) = ids(run_id);
        let start = recs.iter().find(|r| r.kind == "run_started");
        let end = recs.iter().find(|r| r.kind == "run_ended");
        let start_ns = start.or(recs.first()).map_or(0, |r| r.time_ns);
        let end_ns = end.map_or(start_ns, |r| r.time_ns);
        let mut attributes = attrs(vec![
            ("cordon.run.id", json!(run_id)),
            (
                "process.command_args",
                start.map_or(Value::Null, |r| r.body["argv"].clone()),
            ),
            (
                "process.working_directory",
                start.map_or(Value::Null, |r| r.body["cwd"].clone()),
            ),
            (
                "cordon.profile",
                start.map_or(Value::Null, |r| r.body["profile_name"].clone()),
            ),
            (
                "cordon.version",
                start.map_or(Value::Null, |r| r.body["cordon_version"].clone()),
            ),
        ]);
        let status = match end {
            Some(e) => {
                let b = &e.body;
                attributes.extend(attrs(vec![
                    ("process.exit.code", b["exit_code"].clone()),
                    ("cordon.run.reason", b["reason"].clone()),
                    ("cordon.run.signal", b["signal"].clone()),
                    (
                        "cordon.run.peak_memory_bytes",
                        b["peak_memory_bytes"].clone(),
                    ),
                    ("cordon.run.user_ms", b["user_ms"].clone()),
                    ("cordon.run.sys_ms", b["sys_ms"].clone()),
                ]));
                let ok = b["reason"] == "exited" && b["exit_code"] == 0;
                if ok {
                    json!({ "code": 1 })
                } else {
                    json!({ "code": 2, "message": format!("{}", b["reason"].as_str().unwrap_or("unknown")) })
                }
            }
            None => {
                json!({ "code": 2, "message": "no run_ended record (the supervisor did not finish)" })
            }
        };
        let mut events = Vec::new();
        for r in &recs {
            let b = &r.body;
            let (name, ev_attrs) = match r.kind.as_str() {
                "egress" => (
                    "cordon.egress",
                    attrs(vec![
                        ("server.address", b["host"].clone()),
                        ("server.port", b["port"].clone()),
                        ("http.request.method", b["method"].clone()),
                        ("url.path", b["path"].clone()),
                        ("cordon.egress.decision", b["decision"].clone()),
                        ("cordon.egress.rule", b["rule"].clone()),
                        ("cordon.egress.bytes_sent", b["bytes_sent"].clone()),
                        ("cordon.egress.bytes_received", b["bytes_received"].clone()),
                    ]),
                ),
                "incident" => (
                    "cordon.incident",
                    attrs(vec![
                        ("cordon.incident.kind", b["kind"].clone()),
                        ("cordon.incident.severity", b["severity"].clone()),
                        ("cordon.incident.summary", b["summary"].clone()),
                        (
                            "cordon.incident.evidence",
                            Value::String(b["evidence"].to_string()),
                        ),
                    ]),
                ),
                _ => continue,
            };
            events.push(json!({
                "timeUnixNano": r.time_ns.to_string(),
                "name": name,
                "attributes": ev_attrs,
            }));
        }
        spans.push(json!({
            "traceId": trace_id,
            "spanId": span_id,
            "name": "cordon.run",
            "kind": 1,
            "startTimeUnixNano": start_ns.to_string(),
            "endTimeUnixNano": end_ns.to_string(),
            "attributes": attributes,
            "events": events,
            "status": status,
        }));
    }
    json!({
        "resourceSpans": [{
            "resource": { "attributes": attrs(vec![("service.name", json!("cordon"))]) },
            "scopeSpans": [{
                "scope": { "name": "cordon-audit", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }],
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn rec(seq: u64, run: &str, kind: &str, body: Value) -> Record {
        Record {
            seq,
            time: String::new(),
            time_ns: 1_000 + seq as i64,
            run_id: run.into(),
            kind: kind.into(),
            body,
            prev_hash: String::new(),
            hash: String::new(),
        }
    }

    #[test]
    fn one_span_per_run_with_events_and_status() {
        let records = vec![
            rec(
                1,
                "r1",
                "run_started",
                json!({"argv": ["sh", "-c", "x"], "cordon_version": "0.1.0"}),
            ),
            rec(
                2,
                "r1",
                "egress",
                json!({"host": "a.test", "port": 443, "method": "CONNECT", "decision": "deny", "rule": "unlisted"}),
            ),
            rec(
                3,
                "r1",
                "incident",
                json!({"kind": "syscall", "severity": "critical", "summary": "refused mount(2)", "evidence": {"nr": 165}}),
            ),
            rec(
                4,
                "r1",
                "run_ended",
                json!({"reason": "exited", "exit_code": 3}),
            ),
            rec(5, "r2", "run_started", json!({"argv": ["true"]})),
        ];
        let t = traces(&records);
        let spans = t["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap();
        assert_eq!(spans.len(), 2);
        let s = &spans[0];
        assert_eq!(s["name"], "cordon.run");
        assert_eq!(s["traceId"].as_str().unwrap().len(), 32);
        assert_eq!(s["spanId"].as_str().unwrap().len(), 16);
        assert_eq!(s["startTimeUnixNano"], "1001");
        assert_eq!(s["endTimeUnixNano"], "1004");
        assert_eq!(s["status"]["code"], 2, "exit 3 is an error");
        let events = s["events"].as_array().unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0]["name"], "cordon.egress");
        assert_eq!(events[1]["name"], "cordon.incident");
        let exit = s["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == "process.exit.code")
            .unwrap();
        assert_eq!(exit["value"]["intValue"], "3");
        let args = s["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == "process.command_args")
            .unwrap();
        assert_eq!(args["value"]["arrayValue"]["values"][2]["stringValue"], "x");
        // A run without its end is an error span of zero length.
        assert_eq!(spans[1]["status"]["code"], 2);
        assert_eq!(spans[1]["startTimeUnixNano"], spans[1]["endTimeUnixNano"]);
    }
}
