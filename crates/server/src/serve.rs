//! Running the server: bind, serve until SIGTERM/SIGINT, then tear every
//! sandbox down, record it, remove the socket.

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_session::{Engine, EngineConfig, Spawner};
use serde_json::json;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::audit::AuditLog;
use crate::listen::Acceptor;
use crate::state::{AppState, Limits};
use crate::tokens::TokenStore;

/// How `cordon serve` was asked to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub socket: PathBuf,
    pub listen: Option<SocketAddr>,
    pub limits: Limits,
    pub tokens_file: PathBuf,
    /// The audit store; `None`: auditing off.
    pub audit_path: Option<PathBuf>,
    pub engine: EngineConfig,
    /// The server's command line, for its record.
    pub argv: Vec<String>,
    pub approvals: ApprovalOptions,
}

/// The Gate's settings: policy, approvals store, timeout, webhook.
#[derive(Debug, Clone)]
pub struct ApprovalOptions {
    /// The Cedar policy file (`--policy`); `None`: each action gets what
    /// its profile or token says.
    pub policy: Option<PathBuf>,
    /// The approvals store (SQLite; pending approvals survive a restart).
    pub store: PathBuf,
    /// How long an approval waits for an answer.
    pub timeout: Duration,
    pub webhook: Option<crate::approval_tasks::Webhook>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Session(#[from] cordon_session::SessionError),
    #[error("{path}: {action}: {source}")]
    Io {
        path: String,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: another `cordon serve` is listening there; stop it, or give another --socket")]
    InUse(PathBuf),
    #[error("cannot open the audit store {path}: {message}; name another with --audit PATH or turn it off with --no-audit")]
    Audit { path: PathBuf, message: String },
    #[error("the policy: {0}; `cordon policy check FILE` shows what is wrong")]
    Policy(String),
    #[error("cannot open the approvals store: {0}; check the state directory (CORDON_STATE_DIR)")]
    Approvals(String),
}

fn io_err(
    path: impl std::fmt::Display,
    action: &'static str,
) -> impl FnOnce(std::io::Error) -> ServeError {
    let path = path.to_string();
    move |source| ServeError::Io {
        path,
        action,
        source,
    }
}

/// The server's listeners.
#[derive(Debug)]
pub struct Bound {
    unix: UnixListener,
    tcp: Option<TcpListener>,
    socket: PathBuf,
}

impl Bound {
    /// Bind the unix socket (0600, in a 0700 directory when the directory
    /// is made here; a stale socket is replaced, a live one refused) and
    /// the TCP address if any. Inside a tokio runtime.
    pub fn bind(socket: &Path, listen: Option<SocketAddr>) -> Result<Bound, ServeError> {
        if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(io_err(dir.display(), "create the socket's directory"))?;
            }
        }
        if let Ok(meta) = std::fs::symlink_metadata(socket) {
            if !meta.file_type().is_socket() {
                return Err(ServeError::Io {
                    path: socket.display().to_string(),
                    action: "bind the socket",
                    source: std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        "a file that is not a socket is there",
                    ),
                });
            }
            if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                return Err(ServeError::InUse(socket.to_path_buf()));
            }
            std::fs::remove_file(socket)
                .map_err(io_err(socket.display(), "remove the stale socket"))?;
        }
        let unix =
            UnixListener::bind(socket).map_err(io_err(socket.display(), "bind the socket"))?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(socket.display(), "make the socket 0600"))?;
        let tcp = match listen {
            Some(addr) => {
                let std_listener =
                    std::net::TcpListener::bind(addr).map_err(io_err(addr, "listen"))?;
                std_listener
                    .set_nonblocking(true)
                    .map_err(io_err(addr, "listen"))?;
                Some(TcpListener::from_std(std_listener).map_err(io_err(addr, "listen"))?)
            }
            None => None,
        };
        Ok(Bound {
            unix,
            tcp,
            socket: socket.to_path_buf(),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serve until `stop` completes; then stop accepting, run `teardown`
    /// (the engine's shutdown), close the connections (5 s of grace) and
    /// remove the socket.
    pub async fn run<F, T>(self, state: AppState, stop: impl Future<Output = ()>, teardown: T)
    where
        T: FnOnce() -> F,
        F: Future<Output = ()>,
    {
        let (tx, rx) = watch::channel(false);
        let acceptor = Acceptor::new(
            crate::router::router(state.clone()),
            state.limits().clone(),
            rx,
        );
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(acceptor.clone().unix(self.unix)));
        if let Some(tcp) = self.tcp {
            tasks.push(tokio::spawn(acceptor.clone().tcp(tcp)));
        }
        let reaper = tokio::spawn({
            let state = state.clone();
            async move {
                let mut every = tokio::time::interval(Duration::from_secs(2));
                loop {
                    every.tick().await;
                    crate::routes::sandboxes::reap(&state);
                }
            }
        });
        stop.await;
        let _ = std::fs::remove_file(&self.socket);
        reaper.abort();
        teardown().await;
        let _ = tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        acceptor.drained(Duration::from_secs(5)).await;
    }
}

/// SIGTERM or SIGINT.
pub async fn termination() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The audit store at `path` with the server's settings (`None`: auditing off).
pub fn open_audit(path: Option<&Path>) -> Result<AuditLog, ServeError> {
    let Some(path) = path else {
        return Ok(AuditLog::disabled());
    };
    let opts = cordon_audit::WriterOptions {
        commit_delay: Duration::from_millis(5),
        ..Default::default()
    };
    cordon_audit::AuditWriter::open_with(path, opts)
        .map(|w| AuditLog::new(Some(w)))
        .map_err(|e| ServeError::Audit {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// The Gate on the policy file, with the approvals store.
fn open_gate(
    opts: &ApprovalOptions,
    audit: &AuditLog,
) -> Result<std::sync::Arc<cordon_approvals::Gate>, ServeError> {
    let store = cordon_approvals::Approvals::open(&opts.store)
        .map_err(|e| ServeError::Approvals(e.to_string()))?
        .with_policy_file(opts.policy.clone())
        .with_unclaimed_once(opts.timeout);
    let log: std::sync::Arc<dyn cordon_approvals::DecisionLog> = std::sync::Arc::new(audit.clone());
    cordon_approvals::Gate::new(
        std::sync::Arc::new(store),
        opts.policy.clone(),
        opts.timeout,
        log,
    )
    .map(std::sync::Arc::new)
    .map_err(|e| ServeError::Policy(e.to_string()))
}

/// `cordon serve`: the engine on `spawner` (forked before the runtime),
/// the listeners, and the API until SIGTERM/SIGINT.
pub async fn serve(spawner: Spawner, opts: ServeOptions) -> Result<(), ServeError> {
    let engine = Engine::new(spawner, opts.engine.clone())?;
    let audit = open_audit(opts.audit_path.as_deref())?;
    let gate = open_gate(&opts.approvals, &audit)?;
    let state = AppState::new(
        Some(engine.clone()),
        TokenStore::new(opts.tokens_file.clone()),
        audit.clone(),
        opts.limits.clone(),
        gate.clone(),
    );
    let bound = Bound::bind(&opts.socket, opts.listen)?;
    let listen = bound.tcp_addr().map(|a| a.to_string());
    audit.server_started(
        opts.argv.clone(),
        json!({"socket": bound.socket(), "listen": listen, "max_sandboxes": opts.engine.max_sessions, "pid": std::process::id()}),
    );
    // A previous server's sandboxes died with it (and their groups were
    // swept by its spawner's sweeper); their runs are ended as lost.
    if let Some(path) = &opts.audit_path {
        let lost = crate::lost::record_lost(path, &audit);
        if lost > 0 {
            eprintln!("cordon serve: {lost} sandbox(es) of a previous server were lost with it (recorded)");
        }
    }
    crate::escalation::start(state.clone());
    crate::approval_tasks::start(
        gate.approvals().clone(),
        audit.clone(),
        opts.approvals.webhook.clone(),
    );
    println!(
        "{}",
        json!({"socket": bound.socket(), "listen": listen, "pid": std::process::id()})
    );
    let teardown = {
        let audit = audit.clone();
        let state = state.clone();
        move || async move {
            let ended = engine.shutdown().await;
            for t in &ended {
                crate::routes::sandboxes::forget(&state, &t.id);
                audit.sandbox_ended("server", &t.id, "shutdown", t.clean);
            }
            audit.server_stopped(json!({"sandboxes_torn_down": ended.len()}));
            audit.flush();
        }
    };
    bound.run(state, termination(), teardown).await;
    Ok(())
}
