//! `cordon run --scan MODE` (profile `[scan] mode`): scan the command line
//! and the scripts it names before anything is built, print the findings,
//! and decide: run, ask on the terminal, or refuse.
//!
//! Only block-level findings stop a run (`block`) or raise the question
//! (`ask`); warn and info findings are shown and recorded. The scanner is
//! advisory: the sandbox is the control.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use cordon_audit::{Incident, IncidentKind, Severity as IncidentSeverity};
use cordon_codescan::{units_for_argv, Finding, Severity};
use cordon_policy::{Profile, ScanMode};
use serde::Serialize;
use serde_json::json;

use crate::scan_bridge;

/// What the scanner found and what was decided.
#[derive(Debug, Clone, Serialize)]
pub struct Gate {
    pub mode: ScanMode,
    pub decision: Decision,
    /// Every finding, warn and info included.
    pub findings: Vec<Finding>,
}

/// What the gate decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Nothing at block level, or mode `warn`: the run goes ahead.
    Run,
    /// Mode `ask`: someone at the terminal said yes.
    RunAfterYes,
    /// Mode `block`: refused.
    Refused,
    /// Mode `ask` and someone said no.
    RefusedAfterNo,
    /// Mode `ask` and there was no terminal to ask.
    RefusedNoTerminal,
}

impl Gate {
    pub fn refused(&self) -> bool {
        matches!(
            self.decision,
            Decision::Refused | Decision::RefusedAfterNo | Decision::RefusedNoTerminal
        )
    }

    fn blocking(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Block)
    }

    /// The record for the run's start in the audit store.
    pub fn record(&self) -> serde_json::Value {
        json!({ "mode": self.mode, "decision": self.decision, "findings": self.findings })
    }

    /// One incident per block-level finding (the run's record says what
    /// the code looked like it wanted, next to what it then tried).
    pub fn incidents(&self) -> Vec<Incident> {
        self.blocking()
            .map(|f| Incident {
                kind: IncidentKind::Scan,
                severity: IncidentSeverity::High,
                summary: format!(
                    "scan: {} at {}:{}:{}: {}",
                    f.rule, f.file, f.line, f.column, f.message
                ),
                evidence: json!({
                    "rule": f.rule, "file": f.file, "line": f.line, "column": f.column,
                    "snippet": f.snippet, "decision": self.decision,
                }),
            })
            .collect()
    }

    /// The one line that says why the run was refused and how to proceed.
    pub fn refusal_line(&self) -> String {
        let mut blocking = self.blocking();
        let first = blocking.next();
        let more = blocking.count();
        let what = first.map_or_else(String::new, |f| {
            format!(
                "block [{}] at {}:{}:{}: {}{}",
                f.rule,
                f.file,
                f.line,
                f.column,
                f.message,
                if more > 0 {
                    format!(" (and {more} more)")
                } else {
                    String::new()
                }
            )
        });
        let why = match self.decision {
            Decision::RefusedNoTerminal => {
                "--scan ask found no terminal to ask (approvals from elsewhere are not wired yet)"
            }
            Decision::RefusedAfterNo => "the answer was no",
            _ => "--scan block",
        };
        let rule = first.map_or("RULE", |f| f.rule.as_str());
        format!(
            "cordon: scan: refused to run: {what}; {why}. The scanner is advisory (the sandbox is the control): \
             to run anyway use --scan warn, or leave the rule out with [scan] ignore = [\"{rule}\"]"
        )
    }

    /// Write one incident for the refusal.
    pub fn refusal_incident(&self) -> Incident {
        Incident {
            kind: IncidentKind::Scan,
            severity: IncidentSeverity::High,
            summary: self.refusal_line(),
            evidence: self.record(),
        }
    }
}

/// Scan what `argv` runs (see [`units_for_argv`]) under the profile's
/// `[scan]` settings; print the findings at warn and above unless `quiet`;
/// decide. `None` when scanning is off.
pub fn check(
    profile: &Profile,
    argv: &[String],
    cwd: &Path,
    quiet: bool,
) -> anyhow::Result<Option<Gate>> {
    let mode = profile.scan.mode;
    if mode == ScanMode::Off {
        return Ok(None);
    }
    let scanner = scan_bridge::scanner(
        &scan_bridge::profile_rule_files(profile),
        &profile.scan.ignore,
    )?;
    let mut findings = Vec::new();
    let mut hosts = Vec::new();
    for unit in units_for_argv(argv, cwd) {
        let result = scanner.scan(&unit.name, unit.language, &unit.text)?;
        findings.extend(result.findings);
        hosts.extend(result.hosts);
    }
    findings.extend(scan_bridge::host_findings(&scanner, &hosts, profile));
    if !quiet {
        for f in findings.iter().filter(|f| f.severity >= Severity::Warn) {
            eprintln!("cordon: scan: {f}\n    {}", f.snippet);
        }
    }
    let blocking = findings.iter().any(|f| f.severity == Severity::Block);
    let decision = match (mode, blocking) {
        (_, false) | (ScanMode::Warn | ScanMode::Off, true) => Decision::Run,
        (ScanMode::Block, true) => Decision::Refused,
        (ScanMode::Ask, true) => ask(&findings),
    };
    Ok(Some(Gate {
        mode,
        decision,
        findings,
    }))
}

/// Ask on the controlling terminal (not standard input, which belongs to
/// the command). No terminal: refuse.
fn ask(findings: &[Finding]) -> Decision {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty");
    let Ok(mut tty) = tty else {
        return Decision::RefusedNoTerminal;
    };
    if !tty.is_terminal() {
        return Decision::RefusedNoTerminal;
    }
    let n = findings
        .iter()
        .filter(|f| f.severity == Severity::Block)
        .count();
    let prompt = format!(
        "cordon: scan: {n} block-level finding(s) above; the sandbox still applies. Run it anyway? [y/N] "
    );
    if tty.write_all(prompt.as_bytes()).is_err() {
        return Decision::RefusedNoTerminal;
    }
    let mut answer = String::new();
    let mut reader = std::io::BufReader::new(tty);
    if reader.read_line(&mut answer).is_err() {
        return Decision::RefusedNoTerminal;
    }
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Decision::RunAfterYes,
        _ => Decision::RefusedAfterNo,
    }
}
