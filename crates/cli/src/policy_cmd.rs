//! `cordon policy`: check a Cedar policy file, test it against a table of
//! cases, explain one decision with the rule (file:line) that made it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use cordon_authz::cases::{self, Outcome};
use cordon_authz::{
    Action, Authorizer, AuthzError, Decision, DefaultVerdict, Diagnostic, Principal, Request,
};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Parse a policy file and validate it against cordon's schema; exit 1 on errors.
    #[command(
        after_help = "Examples:\n  cordon policy check examples/policy/agents.cedar\n  cordon policy check policy.cedar --json"
    )]
    Check {
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a table of cases (actions and expected decisions) against a policy;
    /// exit 1 when any case gets another decision.
    #[command(
        after_help = "A case table (TOML):\n  [defaults]\n  principal = \"ci\"\n  default = \"deny\"        # what the profile alone says: allow | deny | ask\n\n  [[case]]\n  name = \"force push is forbidden\"\n  kind = \"exec\"\n  argv = [\"git\", \"push\", \"--force\"]\n  expect = \"deny\"         # allow | deny | ask | allow_with_limits\n  rule = \"no-force-push\"  # optional: the rule that must decide\n\nKinds and their keys: create_sandbox (profile), exec (argv), egress (host, port),\nfile_read / file_write (path), bind (host_path, writable), raise_limits (memory, pids),\nuse_secret (secret), tool_call (server, tool, args_digest), promote (run, paths).\nAny case may set preset, session, findings, hour, weekday, ceiling, offers, grantable, limits.\n\nExamples:\n  cordon policy test examples/policy/agents.cedar examples/policy/agents.cases.toml\n  cordon policy test policy.cedar cases.toml --json"
    )]
    Test {
        file: PathBuf,
        cases: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Decide one action and name the rule, with file and line, that decided.
    Explain(Box<ExplainArgs>),
    /// Print cordon's Cedar schema: the entities, actions and context a rule may use.
    #[command(
        after_help = "Examples:\n  cordon policy schema\n  cordon policy schema --json   # Cedar's JSON schema format"
    )]
    Schema {
        /// Print Cedar's JSON schema format instead of the Cedar schema text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exactly one action: --exec (last: it takes the rest of the line), --egress, --read, --write, --bind, --tool, --create, --secret, --raise-memory/--raise-pids, --promote.\n\nExamples:\n  cordon policy explain policy.cedar --principal ci --egress api.github.com:443\n  cordon policy explain policy.cedar --principal ci --bind /data --rw\n  cordon policy explain policy.cedar --principal ci --json --exec git push --force"
)]
pub struct ExplainArgs {
    /// The policy file.
    file: PathBuf,
    /// The token name asking ("owner" for the socket's owner).
    #[arg(long)]
    principal: String,
    /// The token's preset.
    #[arg(long)]
    preset: Option<String>,
    /// Run a command: every word after it is the argv.
    #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "ARGV")]
    exec: Option<Vec<String>>,
    /// Connect out to HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    egress: Option<String>,
    /// Read a file inside the sandbox.
    #[arg(long, value_name = "PATH")]
    read: Option<String>,
    /// Write a file inside the sandbox.
    #[arg(long, value_name = "PATH")]
    write: Option<String>,
    /// Bind a host path into a running sandbox (read-only unless --rw).
    #[arg(long, value_name = "PATH")]
    bind: Option<String>,
    /// With --bind: writable.
    #[arg(long, requires = "bind")]
    rw: bool,
    /// Call an MCP tool.
    #[arg(long, value_name = "SERVER/TOOL")]
    tool: Option<String>,
    /// With --tool: the digest of the call's arguments.
    #[arg(long, requires = "tool", default_value = "")]
    args_digest: String,
    /// Create a sandbox with this profile or preset.
    #[arg(long, value_name = "PROFILE")]
    create: Option<String>,
    /// Use a secret.
    #[arg(long, value_name = "NAME")]
    secret: Option<String>,
    /// Raise the memory limit to SIZE (e.g. 2GiB).
    #[arg(long, value_name = "SIZE")]
    raise_memory: Option<String>,
    /// Raise the process limit to N.
    #[arg(long, value_name = "N")]
    raise_pids: Option<u64>,
    /// Promote a staged run's outputs.
    #[arg(long, value_name = "RUN")]
    promote: Option<String>,
    /// With --promote: the paths promoted.
    #[arg(long = "path", requires = "promote")]
    paths: Vec<String>,
    /// The session (sandbox id) the action is for.
    #[arg(long)]
    session: Option<String>,
    /// A scanner finding (rule id) carried by the action; repeatable.
    #[arg(long = "finding")]
    findings: Vec<String>,
    /// The hour (UTC, 0-23) to decide at; now when omitted.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..24))]
    hour: Option<u64>,
    /// What the profile alone says when no rule matches.
    #[arg(long, default_value = "deny", value_parser = ["allow", "deny", "ask"])]
    default: String,
    /// A profile/token ceiling forbids the action (the reason); no rule lifts it.
    #[arg(long)]
    ceiling: Option<String>,
    /// Print JSON (the request, the decision, whether a grant may lift it).
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: PolicyCommand) -> anyhow::Result<u8> {
    match cmd {
        PolicyCommand::Check { file, json } => check(&file, json),
        PolicyCommand::Test { file, cases, json } => test(&file, &cases, json),
        PolicyCommand::Explain(args) => explain(*args),
        PolicyCommand::Schema { json: false } => {
            print!("{}", cordon_authz::SCHEMA);
            Ok(0)
        }
        PolicyCommand::Schema { json: true } => {
            let v = cordon_authz::schema_json().map_err(anyhow::Error::msg)?;
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(0)
        }
    }
}

/// Loads a policy; on a problem prints its diagnostics and gives `Err(1)`.
fn load(file: &Path, json: bool) -> anyhow::Result<Result<Authorizer, u8>> {
    match Authorizer::load(file) {
        Ok(a) => Ok(Ok(a)),
        Err(e @ AuthzError::Read { .. }) => Err(e.into()),
        Err(e) => {
            print_problems(file, e.diagnostics(), &[], json)?;
            Ok(Err(1))
        }
    }
}

fn print_problems(
    file: &Path,
    errors: &[Diagnostic],
    warnings: &[Diagnostic],
    json: bool,
) -> anyhow::Result<()> {
    if json {
        let v = serde_json::json!({
            "file": file.display().to_string(),
            "ok": errors.is_empty(),
            "errors": errors,
            "warnings": warnings,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for d in errors {
            eprintln!("error: {d}");
        }
        for d in warnings {
            eprintln!("warning: {d}");
        }
    }
    Ok(())
}

fn check(file: &Path, json: bool) -> anyhow::Result<u8> {
    let a = match load(file, json)? {
        Ok(a) => a,
        Err(code) => return Ok(code),
    };
    if json {
        let v = serde_json::json!({
            "file": file.display().to_string(),
            "ok": true,
            "rules": a.rule_count(),
            "errors": [],
            "warnings": a.warnings(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_problems(file, &[], a.warnings(), false)?;
        println!("{}: ok, {} rules", file.display(), a.rule_count());
    }
    Ok(0)
}

fn test(file: &Path, cases_file: &Path, json: bool) -> anyhow::Result<u8> {
    let a = match load(file, json)? {
        Ok(a) => a,
        Err(code) => return Ok(code),
    };
    let src = std::fs::read_to_string(cases_file)
        .with_context(|| format!("cannot read case table {}", cases_file.display()))?;
    let table = match cases::parse_cases(&src, &cases_file.display().to_string()) {
        Ok(c) => c,
        Err(e) => {
            print_problems(cases_file, e.diagnostics(), &[], json)?;
            return Ok(1);
        }
    };
    let outcomes: Vec<Outcome> = table.iter().map(|c| cases::run_case(&a, c)).collect();
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    let passed = outcomes.len() - failed;
    if json {
        let v = serde_json::json!({
            "policy": file.display().to_string(),
            "cases": cases_file.display().to_string(),
            "passed": passed,
            "failed": failed,
            "outcomes": outcomes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for o in outcomes.iter().filter(|o| !o.passed) {
            println!(
                "FAIL {}:{} {}: {}\n     decided {} by {} — {}",
                cases_file.display(),
                o.line,
                o.name,
                o.mismatches.join("; "),
                o.decision.effect.name(),
                o.decision.rule,
                o.decision.reason
            );
        }
        println!("{passed} passed, {failed} failed");
    }
    Ok(u8::from(failed > 0))
}

fn explain(args: ExplainArgs) -> anyhow::Result<u8> {
    let a = match load(&args.file, args.json)? {
        Ok(a) => a,
        Err(code) => return Ok(code),
    };
    let req = explain_request(&args)?;
    let d = a.decide(&req);
    if args.json {
        let v = serde_json::json!({
            "request": req,
            "decision": d,
            "grantable": d.grantable(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_decision(&d);
    }
    Ok(0)
}

fn print_decision(d: &Decision) {
    println!("decision: {}", d.effect.name());
    if let cordon_authz::Effect::AllowWithLimits {
        memory,
        pids,
        timeout_ms,
    } = &d.effect
    {
        let show = |v: &Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
        println!(
            "limits:   memory {} bytes, pids {}, timeout {} ms",
            show(memory),
            show(pids),
            show(timeout_ms)
        );
    }
    println!("rule:     {} at {}:{}", d.rule.id, d.rule.file, d.rule.line);
    println!("reason:   {}", d.reason);
    if !d.offers.is_empty() {
        let offers: Vec<&str> = d.offers.iter().map(|s| s.name()).collect();
        println!("offers:   {}", offers.join(", "));
    }
    println!(
        "grantable: {}",
        if d.grantable() {
            "yes (an approval may allow it)"
        } else {
            "no"
        }
    );
}

fn explain_request(args: &ExplainArgs) -> anyhow::Result<Request> {
    let mut actions: Vec<Action> = Vec::new();
    if let Some(argv) = &args.exec {
        actions.push(Action::Exec { argv: argv.clone() });
    }
    if let Some(hp) = &args.egress {
        let (host, port) = hp
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
            .with_context(|| {
                format!("--egress {hp}: expected HOST:PORT, e.g. api.github.com:443")
            })?;
        actions.push(Action::Egress {
            host: host.to_string(),
            port,
        });
    }
    if let Some(path) = &args.read {
        actions.push(Action::FileRead { path: path.clone() });
    }
    if let Some(path) = &args.write {
        actions.push(Action::FileWrite { path: path.clone() });
    }
    if let Some(path) = &args.bind {
        actions.push(Action::Bind {
            host_path: path.clone(),
            writable: args.rw,
        });
    }
    if let Some(st) = &args.tool {
        let (server, tool) = st.split_once('/').with_context(|| {
            format!("--tool {st}: expected SERVER/TOOL, e.g. github/create_issue")
        })?;
        actions.push(Action::ToolCall {
            server: server.to_string(),
            tool: tool.to_string(),
            args_digest: args.args_digest.clone(),
        });
    }
    if let Some(profile) = &args.create {
        actions.push(Action::CreateSandbox {
            profile: profile.clone(),
        });
    }
    if let Some(name) = &args.secret {
        actions.push(Action::UseSecret { name: name.clone() });
    }
    if args.raise_memory.is_some() || args.raise_pids.is_some() {
        let memory = args
            .raise_memory
            .as_deref()
            .map(cordon_policy::parse_size)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--raise-memory: {e}"))?
            .map(|s| s.as_u64());
        actions.push(Action::RaiseLimits {
            memory,
            pids: args.raise_pids,
        });
    }
    if let Some(run) = &args.promote {
        actions.push(Action::Promote {
            run: run.clone(),
            paths: args.paths.clone(),
        });
    }
    let action = match actions.len() {
        1 => actions.remove(0),
        0 => anyhow::bail!("name the action to explain: --exec ARGV.., --egress HOST:PORT, --read PATH, --write PATH, --bind PATH [--rw], --tool SERVER/TOOL, --create PROFILE, --secret NAME, --raise-memory SIZE / --raise-pids N, or --promote RUN"),
        n => anyhow::bail!("{n} actions given; explain decides one at a time"),
    };
    let rule = "explain:--default".to_string();
    let default = match args.default.as_str() {
        "allow" => DefaultVerdict::Allow { rule },
        "ask" => DefaultVerdict::Ask { rule },
        _ => DefaultVerdict::Deny { rule },
    };
    let mut req = Request::new(
        Principal {
            name: args.principal.clone(),
            preset: args.preset.clone(),
        },
        action,
        default,
    );
    req.session = args.session.clone();
    req.findings = args.findings.clone();
    req.ceiling = args.ceiling.clone();
    if let Some(hour) = args.hour {
        let now = req
            .time
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let midnight = now - now % 86_400;
        req.time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(midnight + hour * 3600);
    }
    Ok(req)
}
