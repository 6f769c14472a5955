//! SARIF 2.1.0 output (OASIS Static Analysis Results Interchange Format),
//! the format code-scanning dashboards read.

use serde_json::{json, Value};

use crate::finding::{Finding, Severity};
use crate::rules::RuleInfo;

/// The schema a document names.
pub const SCHEMA_URI: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// SARIF's level for a severity.
pub fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Block => "error",
        Severity::Warn => "warning",
        Severity::Info => "note",
    }
}

/// A SARIF log with one run of `tool` `version`: every rule of the pack in
/// the driver, every finding as a result.
pub fn document(tool: &str, version: &str, rules: &[RuleInfo], findings: &[Finding]) -> Value {
    let descriptors: Vec<Value> = rules
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "shortDescription": { "text": r.message },
                "fullDescription": { "text": if r.explanation.is_empty() { &r.message } else { &r.explanation } },
                "defaultConfiguration": { "level": level(r.severity) },
                "properties": { "origin": r.origin, "severity": r.severity.as_str() },
            })
        })
        .collect();
    let results: Vec<Value> = findings
        .iter()
        .map(|f| {
            let mut result = json!({
                "ruleId": f.rule,
                "level": level(f.severity),
                "message": { "text": format!("{} — {}", f.message, f.explanation) },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": { "uri": uri(&f.file) },
                        "region": {
                            "startLine": f.line,
                            "startColumn": f.column,
                            "snippet": { "text": f.snippet },
                        },
                    },
                }],
            });
            if let Some(i) = rules.iter().position(|r| r.id == f.rule) {
                result["ruleIndex"] = json!(i);
            }
            result
        })
        .collect();
    json!({
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": tool,
                "version": version,
                "rules": descriptors,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    })
}

/// A file name as a URI reference: unreserved characters and `/` as they
/// are, everything else percent-encoded (so `<command line>` is valid too).
/// Written here because it is this one rule; no URL crate needed.
fn uri(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::uri;

    #[test]
    fn names_become_uri_references() {
        assert_eq!(uri("src/a b.py"), "src/a%20b.py");
        assert_eq!(uri("<command line>"), "%3Ccommand%20line%3E");
    }
}
