//! `cordon mcp`: cordon sandboxes as MCP tools, over stdio (default) or
//! Streamable HTTP. Like `cordon serve`, the sandbox spawner is forked
//! first, while this process has one thread; then the tokio runtime is
//! built. When the client goes away every sandbox is torn down.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use cordon_policy::TrustLevel;

#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Tools: sandbox_create, sandbox_exec, sandbox_run_code, sandbox_write_file,\n       sandbox_read_file, sandbox_list_files, sandbox_destroy\n\nExamples:\n  cordon mcp                                   # stdio: put this in an MCP client's config\n  cordon mcp --max-preset low                  # sandboxes without network only
  cordon mcp --max-memory 4GiB                 # a sandbox may ask for up to 4 GiB\n  cordon mcp --allow-net pypi.org --allow-net files.pythonhosted.org\n  cordon mcp --policy agent.cedar                # execs decided by a policy; asks go to the client\n  cordon token create --name agent --preset medium --allow-net pypi.org\n  cordon mcp --server /run/user/1000/cordon/cordon.sock   # the sandboxes of a running cordon serve\n  cordon mcp --http 127.0.0.1:7701             # Streamable HTTP at http://127.0.0.1:7701/mcp,\n                                               # Authorization: Bearer <token> required\n\nA client config (stdio):\n  {\"mcpServers\": {\"cordon\": {\"command\": \"cordon\", \"args\": [\"mcp\"]}}}"
)]
pub struct McpArgs {
    #[command(subcommand)]
    command: Option<McpCommand>,
    #[command(flatten)]
    serve: ServeMcpArgs,
}

// Subcommands of `cordon mcp` (a plain comment: a doc comment would
// replace the description of `cordon mcp` once its arguments are built).
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Run an MCP server inside a sandbox, with a tool policy (the gateway).
    Wrap(Box<crate::mcp_wrap_cmd::WrapArgs>),
    /// The tool definitions pinned for wrapped servers: list, diff, approve.
    #[command(subcommand)]
    Pins(crate::mcp_wrap_cmd::PinsCommand),
}

#[derive(Debug, Args)]
pub struct ServeMcpArgs {
    /// Serve Streamable HTTP on this address instead of stdio (POST only,
    /// bearer tokens of `cordon token`, loopback origins only).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Use the sandboxes of a running `cordon serve` at this unix socket
    /// instead of an engine of its own. A call the server's policy holds
    /// for a person names the approval it waits on (a progress message of
    /// the call, and stderr).
    #[arg(long, value_name = "SOCKET")]
    server: Option<PathBuf>,
    /// Let --http listen on an address other than loopback.
    #[arg(long, requires = "http")]
    allow_remote: bool,
    /// The most permissive preset a sandbox may have (stdio; over HTTP the token's ceiling decides).
    #[arg(long, value_name = "LEVEL", default_value = "medium")]
    max_preset: TrustLevel,
    /// The largest memory limit a sandbox may ask for (stdio; over HTTP the token's ceiling decides)
    /// [default: the --max-preset's memory].
    #[arg(long, value_name = "SIZE", value_parser = crate::serve_cmd::parse_memory_ceiling)]
    max_memory: Option<u64>,
    /// A host pattern sandboxes may be allowed to reach (repeatable; stdio; none by default).
    #[arg(long = "allow-net", value_name = "PATTERN")]
    allow_net: Vec<String>,
    /// Most sandboxes alive at once (stdio; over HTTP per token, its ceiling's).
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_sandboxes: usize,
    /// A sandbox unused this long is torn down ("0" never).
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// Largest file one sandbox_write_file may write.
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = crate::serve_cmd::parse_size)]
    max_file_size: u64,
    /// Bytes the files tools may write into one sandbox, all files together.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = crate::serve_cmd::parse_size)]
    files_quota: u64,
    /// The audit store [default: ~/.local/state/cordon/audit.db].
    #[arg(long, value_name = "PATH")]
    audit: Option<PathBuf>,
    /// Record nothing.
    #[arg(long, conflicts_with = "audit")]
    no_audit: bool,
    /// Decide each sandbox_exec with this Cedar policy (see docs/policy.md). An ask is put
    /// to the client as an MCP elicitation when it supports them; otherwise it is refused.
    /// With --server, the server's own policy applies instead.
    #[arg(long, value_name = "FILE", conflicts_with = "server")]
    policy: Option<PathBuf>,
    /// How long an ask waits for the client's answer before the call is refused.
    #[arg(long = "ask-timeout", value_name = "DURATION", default_value = "2m", value_parser = crate::serve_cmd::parse_duration)]
    ask_timeout: Duration,
}

/// A duration, or "0" for none.
fn parse_duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    crate::serve_cmd::parse_duration(s)
}

pub fn run(args: McpArgs) -> anyhow::Result<u8> {
    match args.command {
        None => serve(args.serve),
        Some(McpCommand::Wrap(args)) => crate::mcp_wrap_cmd::run(*args),
        Some(McpCommand::Pins(cmd)) => crate::mcp_wrap_cmd::pins_cmd(cmd),
    }
}

fn serve(args: ServeMcpArgs) -> anyhow::Result<u8> {
    for pattern in &args.allow_net {
        cordon_policy::HostPattern::parse(pattern)
            .map_err(|e| anyhow::anyhow!("--allow-net {pattern}: {e}"))?;
    }
    let audit_path = crate::serve_cmd::audit_path(args.audit.clone(), args.no_audit)?;
    let approvals = match &args.policy {
        Some(path) => Some(cordon_mcp::Approvals::new(
            cordon_authz::Authorizer::load(path).map_err(|e| anyhow::anyhow!("--policy: {e}"))?,
            args.ask_timeout,
        )),
        None => None,
    };
    let transport = match args.http {
        None => cordon_mcp::Transport::Stdio,
        Some(addr) => cordon_mcp::Transport::Http(cordon_mcp::HttpOptions {
            addr,
            allow_remote: args.allow_remote,
            tokens_file: cordon_server::paths::tokens_file(),
        }),
    };
    let opts = cordon_mcp::Options {
        transport,
        engine: match args.server {
            Some(socket) => cordon_mcp::EngineChoice::Server(socket),
            None => cordon_mcp::EngineChoice::InProcess(cordon_session::EngineConfig::default()),
        },
        audit_path,
        limits: cordon_mcp::SandboxLimits {
            idle_timeout: (!args.idle_timeout.is_zero()).then_some(args.idle_timeout),
            max_file_bytes: args.max_file_size,
            files_quota_bytes: args.files_quota,
        },
        ceiling: cordon_server::tokens::Ceiling {
            preset: args.max_preset,
            memory: Some(
                args.max_memory.unwrap_or(
                    cordon_policy::Profile::preset(args.max_preset)
                        .limits
                        .memory
                        .0,
                ),
            ),
            pids: None,
            allow_net: args.allow_net,
            max_sandboxes: args.max_sandboxes.max(1),
        },
        approvals,
    };
    let in_process = matches!(opts.engine, cordon_mcp::EngineChoice::InProcess(_));
    let (spawner, runtime) = if in_process {
        let (spawner, runtime) = crate::serve_cmd::spawner_then_runtime()?;
        (Some(spawner), runtime)
    } else {
        (None, crate::serve_cmd::runtime()?)
    };
    let result = runtime.block_on(cordon_mcp::run(spawner, opts));
    // A read of stdin may still be pending on a blocking thread; it
    // holds nothing of the sandboxes, which are gone by now.
    runtime.shutdown_background();
    result?;
    Ok(0)
}
