//! `cordon mcp wrap`: run an MCP server inside a sandbox, built exactly
//! like `cordon run`'s, and police it from outside: the client speaks MCP
//! to this process's stdio, the gateway (cordon-mcpgate) speaks MCP to the
//! server's stdio, and only what the tool policy allows passes.
//!
//! Plumbing: the server's stdin is a pipe whose read end becomes this
//! process's descriptor 0 before the sandbox is cloned (the jail hands the
//! workload its supervisor's stdin); the client's stdin and stdout move to
//! descriptors of their own, and descriptor 1 points at stderr so that
//! nothing but the gateway writes to the client. The server's stdout
//! reaches the gateway through the supervisor's output sink. When the
//! client closes its side, the server's stdin closes; a server still
//! running [`GRACE`] later is killed with its whole sandbox.

use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use cordon_jail::{Hooks, RunOptions};
use cordon_mcpgate::{pins, Gate, Gateway, Pins, Policy};

use crate::audit_bridge;
use crate::run_cmd::{self, SandboxArgs};

/// How long a server may linger after its client left.
const GRACE: Duration = Duration::from_secs(2);
/// How often the supervisor writes the gateway's records and looks for
/// the client's end.
const TICK: Duration = Duration::from_millis(100);

#[derive(Debug, Args)]
#[command(
    after_help = "The server runs in a sandbox built from the same flags as `cordon run` \
(profile, paths, limits, network, secrets); it lives as long as its client, without the \
profile's deadline or output cap unless --timeout / --output are given. Tools: with any \
--allow-tool, the tools not allowed are denied; a denied tool is absent from tools/list and its \
calls are refused with a tool error naming the rule. The first tools/list is pinned; a tool that \
changes later is blocked until `cordon mcp pins approve`. Descriptions with instructions aimed \
at the model are hidden (policy: poisoning = \"flag\" keeps them). Results are redacted \
(secrets, canaries). Every call is in the audit store (`cordon audit`). Node servers reserve \
gigabytes of address space: give --memory 2GiB where memory is limited by address space \
(rootless without a delegated cgroup; see `cordon doctor`).\n\n\
Examples:\n  cordon mcp wrap --ro /srv/docs --allow-tool read_text_file --allow-tool list_directory \\\n      \
-- npx -y @modelcontextprotocol/server-filesystem /srv/docs\n  \
cordon mcp wrap --policy tools.toml --allow-net api.example.com \\\n      \
--secret API_TOKEN@api.example.com -- python3 server.py\n  \
cordon mcp wrap --cedar tools.cedar -- python3 server.py   # each call decided by a Cedar policy\n  \
cordon mcp pins diff -- python3 server.py        # what changed since the tools were pinned\n  \
cordon mcp pins approve -- python3 server.py\n\n\
An MCP client's config:\n  {\"mcpServers\": {\"docs\": {\"command\": \"cordon\", \"args\": [\"mcp\", \"wrap\", \"--ro\", \"/srv/docs\", \
\"--allow-tool\", \"read_text_file\", \"--\", \"npx\", \"-y\", \"@modelcontextprotocol/server-filesystem\", \"/srv/docs\"]}}}"
)]
pub struct WrapArgs {
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Show this tool to the client and let it be called (repeatable); with any, the tools not
    /// allowed are denied.
    #[arg(long = "allow-tool", value_name = "NAME")]
    allow_tool: Vec<String>,
    /// Hide this tool and refuse its calls (repeatable; wins over --allow-tool).
    #[arg(long = "deny-tool", value_name = "NAME")]
    deny_tool: Vec<String>,
    /// Tool policy file (TOML): decisions, argument rules, canaries (see docs/architecture.md).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Also decide each tool call with this Cedar policy (an Action::ToolCall with the
    /// server, the tool and the sha256 of its arguments; see docs/policy.md). The tool
    /// policy's verdict is its default; its denials are a ceiling no rule lifts.
    #[arg(long, value_name = "FILE")]
    cedar: Option<PathBuf>,
    /// How long an "ask" waits for the client's answer (MCP elicitation) before the call
    /// is refused.
    #[arg(long = "ask-timeout", value_name = "DURATION", default_value = "2m")]
    ask_timeout: cordon_policy::DurationSpec,
    /// The pin file [default: the state directory's mcp-pins/, named by the server command].
    #[arg(long, value_name = "FILE")]
    pins: Option<PathBuf>,
    /// Accept and pin the tool definitions the server lists in this run (after a review).
    #[arg(long = "approve-tool-changes")]
    approve_tool_changes: bool,
    /// Print nothing of cordon's own unless it fails.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// The MCP server's command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `cordon mcp pins`: the tool definitions pinned for wrapped servers.
#[derive(Debug, Subcommand)]
pub enum PinsCommand {
    /// List the servers with pinned tools and the changes waiting for approval.
    List {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Show the changes waiting for approval as diffs (pinned → listed now).
    Diff(PinTarget),
    /// Approve the changes waiting (all, or --tool NAME): they become the pins.
    Approve {
        /// Approve only this tool (repeatable).
        #[arg(long = "tool", value_name = "NAME")]
        tools: Vec<String>,
        #[command(flatten)]
        target: PinTarget,
    },
}

/// Which server's pins: its command, or the pin file.
#[derive(Debug, Args)]
pub struct PinTarget {
    /// The pin file (instead of the server command).
    #[arg(long, value_name = "FILE")]
    pins: Option<PathBuf>,
    /// The server command, as given to `cordon mcp wrap`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "pins")]
    command: Vec<String>,
}

fn pins_dir() -> PathBuf {
    cordon_server::paths::state_dir().join("mcp-pins")
}

impl PinTarget {
    fn path(&self) -> PathBuf {
        self.pins
            .clone()
            .unwrap_or_else(|| pins::pin_path(&pins_dir(), &self.command))
    }
}

pub fn run(args: WrapArgs) -> anyhow::Result<u8> {
    let policy_file = args
        .policy
        .as_deref()
        .map(Policy::load)
        .transpose()
        .map_err(|e| anyhow::anyhow!(e))?;
    let policy = Policy::new(policy_file, &args.allow_tool, &args.deny_tool);
    let profile = args.sandbox.profile(cordon_policy::Overrides::default())?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let pin_file = args
        .pins
        .clone()
        .unwrap_or_else(|| pins::pin_path(&pins_dir(), &args.command));
    let pins = Pins::open(pin_file, &args.command, args.approve_tool_changes)
        .map_err(|e| anyhow::anyhow!(e))?;

    let (client_in, client_out, upstream_in) = rewire_stdio()?;
    let mut prepared = run_cmd::prepare(
        &args.sandbox,
        &profile,
        &args.command,
        &cwd,
        cordon_jail::StdinMode::Inherit,
        None,
    )?;
    // A server lives as long as its client: no deadline and no output cap
    // unless asked for.
    if args.sandbox.timeout.is_none() {
        prepared.spec.limits.wall = None;
    }
    if args.sandbox.output.is_none() {
        prepared.spec.limits.output = None;
    }
    let mut gate = Gate::new(
        &args.command,
        policy,
        pins,
        prepared.redactor.clone(),
        !args.quiet,
    )
    .with_ask_timeout(args.ask_timeout.as_duration());
    if let Some(path) = &args.cedar {
        let authz =
            cordon_authz::Authorizer::load(path).map_err(|e| anyhow::anyhow!("--cedar: {e}"))?;
        gate = gate.with_authz(std::sync::Arc::new(authz));
    }
    let mut gateway = Gateway::new(gate, client_in, client_out, upstream_in);
    let mut sink = gateway.sink();
    let mut hooks = WrapHooks {
        inner: prepared.hooks,
        gateway: &mut gateway,
        sandbox: None,
        ended_by_client: false,
    };
    let result =
        cordon_jail::run_with(&prepared.spec, &mut sink, RunOptions::default(), &mut hooks);
    drop(sink);
    let ended_by_client = hooks.ended_by_client;
    let mut inner = hooks.inner;
    let _summary = inner.proxy.take().map(|p| p.shutdown());
    let leftover = gateway.take_events();
    gateway.finish();
    let outcome = match result {
        Ok(o) => o,
        Err(e) => {
            if let Some(session) = inner.audit.take() {
                session.failed(&e.to_string())?;
            }
            anyhow::bail!("cannot run the MCP server in a sandbox: {e}");
        }
    };
    let egress = prepared.recorder.events();
    let incidents = match inner.audit.take() {
        Some(mut session) => {
            for (at, e) in leftover {
                session.record(at, e).map_err(|e| anyhow::anyhow!(e))?;
            }
            session.finish(&outcome, &egress, &audit_bridge::Excerpts::default())?
        }
        None => audit_bridge::incidents(&outcome, &egress),
    };
    if !args.quiet {
        let mcp = incidents
            .iter()
            .filter(|i| i.kind == cordon_audit::IncidentKind::Mcp)
            .count();
        if !incidents.is_empty() {
            eprintln!(
                "cordon: mcp wrap: {} incident(s), {mcp} from the gateway (details: `cordon audit incidents`)",
                incidents.len()
            );
        }
        if !ended_by_client {
            if let Some(msg) = &outcome.message {
                eprintln!("cordon: mcp wrap: the server ended: {msg}");
            }
        }
    }
    if ended_by_client {
        return Ok(0);
    }
    Ok(u8::try_from(outcome.exit_code.clamp(0, 255)).unwrap_or(crate::EXIT_CORDON))
}

/// Move the client's stdin and stdout to descriptors of their own, make a
/// pipe's read end this process's stdin (the sandbox inherits it as the
/// server's stdin) and point stdout at stderr. Runs while this process has
/// one thread.
fn rewire_stdio() -> anyhow::Result<(File, File, File)> {
    use rustix::io::fcntl_dupfd_cloexec;
    let client_in =
        fcntl_dupfd_cloexec(rustix::stdio::stdin(), 3).context("cannot keep the client's stdin")?;
    let client_out = fcntl_dupfd_cloexec(rustix::stdio::stdout(), 3)
        .context("cannot keep the client's stdout")?;
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .context("cannot make the server's stdin pipe")?;
    rustix::stdio::dup2_stdin(&read).context("cannot hand the server its stdin")?;
    drop(read);
    rustix::stdio::dup2_stdout(rustix::stdio::stderr()).context("cannot point stdout at stderr")?;
    Ok((
        File::from(client_in),
        File::from(client_out),
        File::from(write),
    ))
}

/// `cordon run`'s hooks (egress proxy, audit session), plus the gateway:
/// its threads start once the sandbox exists, its records go to the audit
/// store on each tick, and a server whose client left is ended.
struct WrapHooks<'a> {
    inner: run_cmd::RunHooks,
    gateway: &'a mut Gateway,
    sandbox: Option<i32>,
    ended_by_client: bool,
}

impl Hooks for WrapHooks<'_> {
    fn started(&mut self, started: &cordon_jail::Started) -> Result<(), String> {
        self.inner.started(started)?;
        self.sandbox = Some(started.pid);
        // The gateway's threads may use every CPU; the supervisor's is
        // held on one while the sandbox runs.
        cordon_jail::with_every_cpu(|| self.gateway.start())
            .map_err(|e| format!("cannot start the gateway's threads: {e}"))
    }

    fn proxy_listener(&mut self, listener: std::net::TcpListener) -> Result<(), String> {
        self.inner.proxy_listener(listener)
    }

    fn tick_after(&self) -> Option<Duration> {
        Some(self.inner.tick_after().map_or(TICK, |d| d.min(TICK)))
    }

    fn tick(&mut self) -> Result<(), String> {
        self.inner.tick()?;
        let events = self.gateway.take_events();
        if let Some(session) = self.inner.audit.as_mut() {
            if !events.is_empty() {
                for (at, e) in events {
                    session.record(at, e)?;
                }
                session.commit()?;
            }
        }
        if !self.ended_by_client && self.gateway.client_gone_for().is_some_and(|d| d >= GRACE) {
            self.ended_by_client = true;
            if let Some(pid) = self.sandbox.and_then(rustix::process::Pid::from_raw) {
                // The sandbox's init is this process's unreaped child while
                // the supervisor runs (ticks stop when it exits): the pid is
                // still its. Its death ends everything in the sandbox.
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        Ok(())
    }

    fn tick_again(&self) -> Option<Duration> {
        Some(TICK)
    }
}

/// `cordon mcp pins ...`.
pub fn pins_cmd(cmd: PinsCommand) -> anyhow::Result<u8> {
    match cmd {
        PinsCommand::List { json } => list_pins(json),
        PinsCommand::Diff(target) => {
            let path = target.path();
            let file = read_pins(&path)?;
            if file.pending.is_empty() {
                println!("no changes waiting for approval ({})", path.display());
                return Ok(0);
            }
            for (name, pin) in &file.pending {
                match file.tools.get(name) {
                    Some(old) => {
                        println!("tool {name}: changed since pinned");
                        print!("{}", pins::diff(&old.definition, &pin.definition));
                    }
                    None => {
                        println!("tool {name}: new since pinned");
                        println!("{}", serde_json::to_string_pretty(&pin.definition)?);
                    }
                }
            }
            Ok(1)
        }
        PinsCommand::Approve { tools, target } => {
            let path = target.path();
            let mut file = read_pins(&path)?;
            let approved = pins::approve(&mut file, &tools);
            if approved.is_empty() {
                println!("nothing to approve ({})", path.display());
                return Ok(0);
            }
            pins::save(&path, &file).map_err(|e| anyhow::anyhow!(e))?;
            println!("approved: {}", approved.join(", "));
            Ok(0)
        }
    }
}

fn read_pins(path: &std::path::Path) -> anyhow::Result<cordon_mcpgate::PinFile> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "no pin file {} (the server's tools are pinned on its first `cordon mcp wrap`; give the same command, or --pins FILE)",
            path.display()
        )
    })?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not a pin file", path.display()))
}

fn list_pins(json: bool) -> anyhow::Result<u8> {
    let dir = pins_dir();
    let mut rows = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json") {
                if let Ok(file) = read_pins(&path) {
                    rows.push(serde_json::json!({
                        "file": path.display().to_string(),
                        "server": file.server,
                        "tools": file.tools.len(),
                        "pending": file.pending.keys().collect::<Vec<_>>(),
                    }));
                }
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if rows.is_empty() {
        println!("no pinned servers in {}", dir.display());
    } else {
        for r in &rows {
            let server: Vec<&str> = r["server"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            println!(
                "{}  tools={} pending={}  {}",
                server.join(" "),
                r["tools"],
                r["pending"].as_array().map_or(0, Vec::len),
                r["file"].as_str().unwrap_or("")
            );
        }
    }
    Ok(0)
}
