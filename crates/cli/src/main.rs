//! `cordon`: run commands that AI agents wrote inside a kernel-enforced
//! sandbox.

#![forbid(unsafe_code)]
// The subcommands' doc comments are their `--help` text, written for a
// terminal: `[scan]` is a profile's table and `HOST[:PORT]` an argument's
// form, not links.
#![allow(rustdoc::broken_intra_doc_links)]

mod api_client;
mod approval_notice;
mod approvals_cmd;
mod audit_bridge;
mod audit_cmd;
mod doctor_cmd;
mod learn;
mod learn_cmd;
mod mcp_cmd;
mod mcp_wrap_cmd;
mod out_path;
mod output_hints;
mod policy_cmd;
mod profile_cmd;
mod run_cmd;
mod run_policy;
mod sandbox_cmd;
mod scan_bridge;
mod scan_cmd;
mod scan_gate;
mod serve_cmd;
mod stage_cmd;
mod token_cmd;
mod tty_ask;
mod unseen_args;

use std::process::ExitCode;

/// mimalloc serves every allocation of the process: Rust's through this,
/// C's (tree-sitter and its grammars, SQLite) through the `malloc` family
/// its `override` feature defines. tree-sitter allocates and frees a node
/// per syntax node, and glibc's malloc/free were about 9% of the
/// instructions of a 1,000-line scan (musl's, in the static build, more).
/// Each sandboxed workload keeps its own allocator: this one is cordon's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Exit status when cordon itself could not do its job (bad flags, a
/// profile error, a sandbox that could not be built).
pub const EXIT_CORDON: u8 = 125;

#[derive(Debug, Parser)]
#[command(
    name = "cordon",
    version,
    about = "A sandbox for code and tools that AI agents run",
    long_about = "cordon runs a command in a fresh, kernel-enforced sandbox: only declared paths, \
                  no network, bounded CPU, memory, processes, disk, time and output, and nothing \
                  left running afterwards.",
    after_help = "Examples:\n  cordon run -- python3 -c 'print(1+1)'\n  cordon run --rw ./out --memory 512MiB --timeout 30s -- python3 job.py\n  cordon run --profile profiles/python.toml --report outcome.json -- pytest\n  cordon run --stage ./repo -- make fmt test && cordon changes RUN_ID\n  cordon learn -o tool.toml -- python3 tool.py\n  cordon scan --format sarif src/ > scan.sarif\n  cordon doctor --json\n  cordon policy explain policy.cedar --principal ci --egress api.github.com:443\n  cordon serve --listen 127.0.0.1:7700 & cordon token create --name ci --preset low\n  SB=$(cordon sandbox create --preset low) && cordon sandbox exec $SB -- python3 -c 'print(6*7)'\n  cordon mcp                     # sandboxes as MCP tools for an agent (stdio)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Each subcommand's arguments are built only when it is the one given
/// (`defer`): building the arguments of every subcommand cost each
/// `cordon run` about 0.12 ms of its start.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
enum Command {
    /// Run one command in a fresh sandbox.
    Run(Box<run_cmd::RunArgs>),
    /// Observe a command in a wide sandbox and write the smallest profile
    /// that allows what it did.
    Learn(Box<learn_cmd::LearnArgs>),
    /// Show what this host can enforce.
    Doctor(doctor_cmd::DoctorArgs),
    /// Scan code for dangerous patterns before running it (advisory; the sandbox is the control).
    Scan(scan_cmd::ScanArgs),
    /// Read, verify and export the audit store.
    Audit(audit_cmd::AuditArgs),
    /// Inspect, check and explain profiles.
    #[command(subcommand)]
    Profile(profile_cmd::ProfileCommand),
    /// Check, test and explain Cedar policy files (which actions are allowed, asked, denied).
    #[command(
        subcommand,
        after_help = "Examples:\n  cordon policy check examples/policy/agents.cedar\n  cordon policy test examples/policy/agents.cedar examples/policy/agents.cases.toml\n  cordon policy explain examples/policy/agents.cedar --principal ci --exec git push origin main\n  cordon policy schema\n\nThe language, the schema and the order of combination: docs/policy.md"
    )]
    Policy(policy_cmd::PolicyCommand),
    /// Show what a staged run (`run --stage`) changed.
    Changes(stage_cmd::ChangesArgs),
    /// Apply a staged run's changes (all, or the named paths) to the host, atomically.
    Promote(stage_cmd::PromoteArgs),
    /// Drop a staged run's changes without applying them.
    Discard(stage_cmd::DiscardArgs),
    /// Serve the HTTP API: long-lived sandboxes, exec, files (docs/api.md).
    Serve(Box<serve_cmd::ServeArgs>),
    /// Create, list and revoke the bearer tokens of `serve --listen`.
    #[command(subcommand)]
    Token(token_cmd::TokenCommand),
    /// Use the sandboxes of a running `cordon serve` (its API over the unix socket).
    Sandbox(sandbox_cmd::SandboxArgs),
    /// List and answer the approvals of a running `cordon serve` (its API over the unix socket).
    Approvals(approvals_cmd::ApprovalsArgs),
    /// Delete what promotions and discards set aside in the stage store
    /// (started by them in the background).
    #[command(name = "__reap-stages", hide = true)]
    ReapStages,
    /// Serve cordon sandboxes as MCP tools (stdio, or Streamable HTTP with --http).
    Mcp(Box<mcp_cmd::McpArgs>),
}

fn main() -> ExitCode {
    ensure_stdio_open();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run_cmd::run(*args),
        Command::Learn(args) => learn_cmd::run(*args),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Profile(cmd) => profile_cmd::run(cmd),
        Command::Policy(cmd) => policy_cmd::run(cmd),
        Command::Changes(args) => stage_cmd::changes(args),
        Command::Promote(args) => stage_cmd::promote(args),
        Command::Discard(args) => stage_cmd::discard(args),
        Command::ReapStages => stage_cmd::reap(),
        Command::Scan(args) => scan_cmd::run(args),
        Command::Serve(args) => serve_cmd::run(*args),
        Command::Token(cmd) => token_cmd::run(cmd),
        Command::Sandbox(args) => sandbox_cmd::run(args),
        Command::Approvals(args) => approvals_cmd::run(args),
        Command::Mcp(args) => mcp_cmd::run(*args),
        Command::Audit(args) => {
            audit_cmd::run(args).map(|code| u8::try_from(code.clamp(0, 255)).unwrap_or(1))
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("cordon: {e:#}");
            ExitCode::from(EXIT_CORDON)
        }
    }
}

/// Descriptors 0-2 must exist so that pipes cordon creates never take
/// their numbers: open /dev/null until it lands above 2 (each open takes
/// the lowest free number, so this fills exactly the missing ones).
fn ensure_stdio_open() {
    use std::os::fd::AsRawFd;
    loop {
        let Ok(null) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
        else {
            return;
        };
        if null.as_raw_fd() > 2 {
            return; // dropped: 0, 1 and 2 are all open
        }
        // Keep it open: it now stands in for a missing standard stream.
        std::mem::forget(null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own consistency checks over every subcommand, the deferred
    /// ones built too.
    #[test]
    fn every_subcommand_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// A subcommand's description is its own after its deferred arguments
    /// are built: a doc comment on the struct or enum of its arguments
    /// would replace it then (without `defer` the variant's came last).
    #[test]
    fn deferred_arguments_keep_each_subcommands_description() {
        let texts = |c: &clap::Command| {
            [c.get_about(), c.get_long_about(), c.get_after_help()]
                .map(|t| t.map(|t| t.to_string()))
        };
        let listed: Vec<(String, [Option<String>; 3])> = Cli::command()
            .get_subcommands()
            .map(|c| (c.get_name().to_owned(), texts(c)))
            .collect();
        let mut built = Cli::command();
        built.build();
        for (name, before) in listed {
            let sub = built
                .find_subcommand(&name)
                .unwrap_or_else(|| panic!("{name} is built"));
            let after = texts(sub);
            assert_eq!(after[..2], before[..2], "{name}: about, long about");
            if before[2].is_some() {
                assert_eq!(after[2], before[2], "{name}: after help");
            }
        }
    }

    /// A deferred subcommand still parses, and `help` still shows its
    /// arguments.
    #[test]
    fn deferred_subcommands_parse_and_show_their_arguments() {
        let cli = Cli::try_parse_from(["cordon", "run", "--no-audit", "--", "true"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(cli.command, Command::Run(_)));
        let help = Cli::try_parse_from(["cordon", "run", "--help"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(help.contains("--no-audit"), "{help}");
        let top = Cli::command().render_help().to_string();
        for name in ["run", "serve", "sandbox", "mcp", "audit"] {
            assert!(top.contains(name), "{name} is listed: {top}");
        }
    }
}
