//! cordon-mcp: cordon sandboxes as MCP tools (`cordon mcp`).
//!
//! The tools (`tools.rs`) work on sessions of the session engine
//! (`sandboxes.rs`), planned exactly like those of `cordon serve`
//! (`cordon_server::planning`, within a ceiling), with their egress proxy
//! and audit records. Transports: stdio (the default; when the client
//! closes stdin every sandbox is torn down) and Streamable HTTP
//! (`http.rs`: stateless, POST only, loopback origins, bearer tokens).
//!
//! ```text
//! MCP client ──stdio / HTTP──> CordonTools ──> Sandboxes ──> Engine ──> Spawner
//!                                   │ output cut (output.rs)      (forked before the runtime)
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod approval;
pub mod backend;
pub mod error;
pub mod held;
pub mod http;
pub mod output;
pub mod remote;
pub mod sandboxes;
pub mod tools;

use std::path::PathBuf;

use cordon_server::tokens::Ceiling;
use cordon_server::Caller;
use cordon_session::{Engine, EngineConfig, Spawner};
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

pub use approval::Approvals;
pub use backend::Backend;
pub use error::ToolError;
pub use http::HttpOptions;
pub use sandboxes::{SandboxLimits, Sandboxes};
pub use tools::CordonTools;

/// The name the stdio caller has in audit records and as the owner of
/// its sandboxes.
pub const LOCAL_CALLER: &str = "mcp";

/// Why `cordon mcp` could not run.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("{0}")]
    Setup(String),
    #[error("{0}")]
    Session(#[from] cordon_session::SessionError),
    #[error("{0}")]
    Serve(#[from] cordon_server::ServeError),
}

/// Where the MCP messages come from.
#[derive(Debug, Clone)]
pub enum Transport {
    Stdio,
    Http(HttpOptions),
}

/// Where the sandboxes live.
#[derive(Debug, Clone)]
pub enum EngineChoice {
    /// This process's own engine (its spawner forked before the runtime).
    InProcess(EngineConfig),
    /// A running `cordon serve`, over its unix socket.
    Server(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub transport: Transport,
    pub engine: EngineChoice,
    /// The audit store; `None`: auditing off.
    pub audit_path: Option<PathBuf>,
    pub limits: SandboxLimits,
    /// What the stdio caller may ask for (over HTTP each token's own).
    pub ceiling: Ceiling,
    /// `--policy`: decisions on the tools' actions (the local engine).
    pub approvals: Option<Approvals>,
}

/// Serve until the client goes away (stdio: end of input) or SIGTERM /
/// SIGINT; then every sandbox is torn down. Returns how many were.
/// `spawner`: forked before the runtime, for the in-process engine.
pub async fn run(spawner: Option<Spawner>, opts: Options) -> Result<usize, McpError> {
    let backend = match (&opts.engine, spawner) {
        (EngineChoice::InProcess(config), Some(spawner)) => {
            let engine = Engine::new(spawner, config.clone())?;
            let audit = cordon_server::open_audit(opts.audit_path.as_deref())?;
            Backend::Local(Sandboxes::new(engine, audit, opts.limits.clone()))
        }
        (EngineChoice::Server(socket), _) => {
            let remote = remote::Remote::new(socket.clone(), opts.limits.idle_timeout);
            remote
                .check()
                .await
                .map_err(|e| McpError::Setup(e.to_string()))?;
            Backend::Remote(remote)
        }
        (EngineChoice::InProcess(_), None) => {
            return Err(McpError::Setup(
                "the in-process engine needs the spawner forked before the runtime".into(),
            ))
        }
    };
    let stop = CancellationToken::new();
    let signals = {
        let stop = stop.clone();
        tokio::spawn(async move {
            termination().await;
            stop.cancel();
        })
    };
    let served = match &opts.transport {
        Transport::Stdio => {
            let local = Caller::token(LOCAL_CALLER.into(), opts.ceiling.clone());
            serve_stdio(backend.clone(), local, opts.approvals.clone(), stop.clone()).await
        }
        Transport::Http(http) => {
            let listener = http::bind(http).await?;
            let addr = listener
                .local_addr()
                .map_err(|e| McpError::Setup(e.to_string()))?;
            // One line for whoever started us: where to connect.
            eprintln!(
                "{}",
                serde_json::json!({"listen": addr.to_string(), "url": format!("http://{addr}/mcp"), "pid": std::process::id()})
            );
            http::serve(
                listener,
                backend.clone(),
                http,
                opts.approvals.clone(),
                stop.clone(),
            )
            .await
        }
    };
    signals.abort();
    let ended = backend.shutdown().await;
    served.map(|()| ended)
}

async fn serve_stdio(
    backend: Backend,
    local: Caller,
    approvals: Option<Approvals>,
    stop: CancellationToken,
) -> Result<(), McpError> {
    let tools = CordonTools::new(backend, Some(local)).with_approvals(approvals);
    let running = tokio::select! {
        r = tools.serve(rmcp::transport::stdio()) => r,
        _ = stop.cancelled() => return Ok(()),
    };
    let service = match running {
        Ok(s) => s,
        // The client left before the handshake: nothing to serve.
        Err(e) => {
            tracing::info!("no MCP session: {e}");
            return Ok(());
        }
    };
    let token = service.cancellation_token();
    tokio::select! {
        _ = service.waiting() => {}
        _ = stop.cancelled() => token.cancel(),
    }
    Ok(())
}

async fn termination() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
