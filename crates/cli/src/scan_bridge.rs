//! The scanner as `cordon run` and `cordon scan` use it: a rule pack from
//! cordon's rules plus the profile's and the flags' rule files, the hosts
//! check against the profile's network rules, and findings as text.

use std::path::PathBuf;

use anyhow::Context;
use cordon_codescan::{Finding, HostRef, RulePack, Scanner, Severity};
use cordon_policy::{HostDecision, NetworkMode, Profile};

/// Compile cordon's rules plus `extra` rule files, without the `ignore`d
/// rule ids.
pub fn scanner(extra: &[PathBuf], ignore: &[String]) -> anyhow::Result<Scanner> {
    Scanner::new(&pack(extra, ignore)?).context("compiling the scan rules")
}

fn pack(extra: &[PathBuf], ignore: &[String]) -> anyhow::Result<RulePack> {
    let mut pack = RulePack::builtin().context("cordon's own scan rules")?;
    for path in extra {
        pack.add_file(path)
            .with_context(|| format!("scan rules {}", path.display()))?;
    }
    pack.ignore(ignore);
    Ok(pack)
}

/// Findings for the hosts the code names that the profile would refuse.
pub fn host_findings(scanner: &Scanner, hosts: &[HostRef], profile: &Profile) -> Vec<Finding> {
    let network = &profile.network;
    scanner.host_findings(hosts, |host, port| {
        network.mode == NetworkMode::Proxy
            && matches!(
                network.decide(host, port.unwrap_or(443)),
                HostDecision::Allowed(_)
            )
    })
}

/// Counts by severity: (block, warn, info).
pub fn counts(findings: &[Finding]) -> (usize, usize, usize) {
    let n = |s| findings.iter().filter(|f| f.severity == s).count();
    (n(Severity::Block), n(Severity::Warn), n(Severity::Info))
}

/// One finding for people: location, severity, rule, message, then the
/// source line and, with `explain`, why it matters.
pub fn render(f: &Finding, explain: bool) -> String {
    let mut s = format!("{f}\n    {}", f.snippet);
    if explain && !f.explanation.is_empty() {
        s.push_str(&format!("\n    why: {}", f.explanation));
    }
    s
}

/// The profile's `[scan] rules`, resolved like every profile path (`~` is
/// the home directory, relative paths the current directory).
pub fn profile_rule_files(profile: &Profile) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    profile
        .scan
        .rules
        .iter()
        .map(|p| cordon_policy::resolve_path(p, &cwd, &home))
        .collect()
}

/// The rules of the pack the flags and profile describe, for listings and
/// SARIF's rule table.
pub fn rule_infos(
    extra: &[PathBuf],
    ignore: &[String],
) -> anyhow::Result<Vec<cordon_codescan::RuleInfo>> {
    Ok(pack(extra, ignore)?.rules())
}
