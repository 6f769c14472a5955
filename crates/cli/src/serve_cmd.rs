//! `cordon serve`: the HTTP control plane. The sandbox spawner is forked
//! first, while this process has one thread (the kernel refuses user
//! namespaces to a multi-threaded process); then the tokio runtime is
//! built and the server runs until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  cordon serve                                  # unix socket only, owner only\n  cordon serve --listen 127.0.0.1:7700          # also TCP: bearer tokens required\n  cordon serve --socket /tmp/cordon.sock --max-sandboxes 50\n  cordon serve --max-file-size 64M --files-quota 512M\n  cordon serve --warm 4 --warm-preset untrusted --warm-preset low\n  cordon serve --warm 16 --warm-auto                # pool sized from the claim rate\n  cordon serve --policy policy.cedar --approval-timeout 5m\n  cordon serve --policy policy.cedar --approval-webhook http://127.0.0.1:9000/approvals\n  cordon serve --print-openapi > docs/openapi.json\n\nOn start it prints one JSON line: {\"socket\", \"listen\", \"pid\"}.\nAPI: docs/api.md; tokens: cordon token create --help"
)]
pub struct ServeArgs {
    /// Also listen on this TCP address (every request needs a token).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// The unix socket [default: $XDG_RUNTIME_DIR/cordon/cordon.sock, /run/cordon/cordon.sock for root].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Sandboxes to keep built ahead of time for each --warm-preset (the
    /// warm pool; a create with its own paths, limits, hosts or environment
    /// is still served from it).
    #[arg(long, value_name = "N", default_value_t = 0)]
    warm: usize,
    /// Size each pool from the claim rate, up to --warm.
    #[arg(long, requires = "warm")]
    warm_auto: bool,
    /// A preset to keep a warm pool for (repeatable) [default: untrusted].
    #[arg(long, value_name = "PRESET")]
    warm_preset: Vec<String>,
    /// Most sandboxes alive at once (a create beyond it: 429).
    #[arg(long, value_name = "N", default_value_t = 100)]
    max_sandboxes: usize,
    /// The audit store [default: ~/.local/state/cordon/audit.db].
    #[arg(long, value_name = "PATH")]
    audit: Option<PathBuf>,
    /// Record nothing.
    #[arg(long, conflicts_with = "audit")]
    no_audit: bool,
    /// Print the OpenAPI document of the API and exit.
    #[arg(long)]
    print_openapi: bool,
    /// Deadline for a request's headers.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    header_timeout: Duration,
    /// Close a connection idle this long.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// A streamed reply sends a keepalive line at least this often (at most 15s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_keepalive)]
    keepalive: Duration,
    /// Most connections open at once (the next: 429).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_connections: usize,
    /// Most requests handled at once (the next: 429).
    #[arg(long, value_name = "N", default_value_t = 512)]
    max_requests: usize,
    /// Largest file one PUT of the files API may write (beyond: 413).
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    max_file_size: u64,
    /// Bytes the files API may write into one sandbox, all files together (beyond: 507).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_size)]
    files_quota: u64,
    /// A Cedar policy file deciding every action (exec, files, egress,
    /// secrets, creates); without it each action gets what its profile or
    /// token says. Persistent approvals are appended to it.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// How long an approval waits for an answer before it expires (the
    /// action is then refused with `approval_expired`).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    approval_timeout: Duration,
    /// POST each new approval as JSON to this http:// URL (failures are
    /// logged; nothing waits for it).
    #[arg(long, value_name = "URL")]
    approval_webhook: Option<String>,
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    cordon_policy::parse_duration(s)
        .map(|d| d.as_duration())
        .map_err(|e| e.to_string())
}

fn parse_keepalive(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() || d > Duration::from_secs(15) {
        return Err(format!(
            "'{s}': a keepalive interval is more than 0 and at most 15s"
        ));
    }
    Ok(d)
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    cordon_policy::parse_size(s)
        .map(|v| v.0)
        .map_err(|e| e.to_string())
}

/// A ceiling on a sandbox's memory: 0 would mean "no limit" to a profile,
/// which no ceiling lets through, so a ceiling of 0 would refuse every
/// sandbox; it is refused here instead.
pub(crate) fn parse_memory_ceiling(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err("a memory ceiling must be above 0 (leave it out for none)".into()),
        bytes => Ok(bytes),
    }
}

/// One warm pool per --warm-preset, each built from what a create naming
/// only that preset gets.
fn warm_pools(args: &ServeArgs) -> anyhow::Result<Vec<cordon_session::PoolConfig>> {
    if args.warm == 0 {
        return Ok(Vec::new());
    }
    let presets = if args.warm_preset.is_empty() {
        vec!["untrusted".to_owned()]
    } else {
        args.warm_preset.clone()
    };
    presets
        .iter()
        .map(|preset| {
            let base = cordon_server::planning::pool_base(preset)
                .map_err(|e| anyhow::anyhow!("--warm-preset {preset}: {e}"))?;
            Ok(cordon_session::PoolConfig {
                base,
                size: args.warm,
                auto: args.warm_auto,
            })
        })
        .collect()
}

/// The sandbox spawner, forked while this process has one thread (the
/// kernel refuses user namespaces to a multi-threaded process), then the
/// tokio runtime.
pub(crate) fn spawner_then_runtime(
) -> anyhow::Result<(cordon_session::Spawner, tokio::runtime::Runtime)> {
    let spawner = cordon_session::Spawner::fork().context(
        "cannot start the sandbox spawner (`cordon doctor` shows what this host can enforce)",
    )?;
    Ok((spawner, runtime()?))
}

/// The tokio runtime of a command that serves.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The audit store `--audit` / `--no-audit` name (`None`: auditing off).
pub(crate) fn audit_path(
    audit: Option<PathBuf>,
    no_audit: bool,
) -> anyhow::Result<Option<PathBuf>> {
    if no_audit {
        return Ok(None);
    }
    match audit {
        Some(p) => Ok(Some(p)),
        None => Ok(Some(cordon_audit::default_path().context(
            "cannot find a place for the audit store; name one with --audit PATH, or turn auditing off with --no-audit",
        )?)),
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<u8> {
    if args.print_openapi {
        print!("{}", cordon_server::openapi::document());
        return Ok(0);
    }
    let pools = warm_pools(&args)?;
    let webhook = args
        .approval_webhook
        .as_deref()
        .map(cordon_server::Webhook::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    if args.approval_timeout.is_zero() {
        anyhow::bail!("--approval-timeout must be more than 0 (e.g. 2m)");
    }
    let audit_path = audit_path(args.audit.clone(), args.no_audit)?;
    let opts = cordon_server::ServeOptions {
        socket: args
            .socket
            .clone()
            .unwrap_or_else(cordon_server::paths::default_socket),
        listen: args.listen,
        limits: cordon_server::Limits {
            header_read_timeout: args.header_timeout,
            idle_timeout: args.idle_timeout,
            keepalive: args.keepalive,
            max_connections: args.max_connections.max(1),
            max_requests: args.max_requests.max(1),
            max_file_bytes: args.max_file_size,
            files_quota_bytes: args.files_quota,
            ..cordon_server::Limits::default()
        },
        tokens_file: cordon_server::paths::tokens_file(),
        audit_path,
        engine: cordon_session::EngineConfig {
            max_sessions: args.max_sandboxes,
            pools,
            ..Default::default()
        },
        argv: std::env::args().collect(),
        approvals: cordon_server::ApprovalOptions {
            policy: args.policy.clone(),
            store: cordon_server::paths::approvals_file(),
            timeout: args.approval_timeout,
            webhook,
        },
    };
    let (spawner, runtime) = spawner_then_runtime()?;
    runtime.block_on(cordon_server::serve(spawner, opts))?;
    Ok(0)
}
