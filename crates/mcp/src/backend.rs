//! Where the sandboxes live: this process's own engine, or a running
//! `cordon serve` reached over its unix socket (`--server SOCKET`). The
//! tools see one interface.

use std::time::Duration;

use cordon_server::Caller;
use cordon_session::files::Listing;
use cordon_session::{CellResult, Language};
use tokio_util::sync::CancellationToken;

use crate::error::ToolError;
use crate::remote::Remote;
use crate::sandboxes::{CreateRequest, Created, Sandboxes};

/// A command to run and wait for.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    /// A local policy's limits on it (timeout, memory, processes).
    pub limits: Option<cordon_server::wire::ExecLimitsView>,
}

/// How a command ended and what it wrote (what was kept of it).
#[derive(Debug, Clone, Default)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub timed_out: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes beyond what was kept, counted.
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    /// Why it could not start, or what ended it.
    pub message: Option<String>,
    /// The limits a policy put on it, as applied (the local policy's, or
    /// with `--server` the server's).
    pub limits: Option<serde_json::Value>,
    /// The sandbox's egress proxy's answers to connections refused (or
    /// not completed) while it ran, worded as `cordon serve`'s
    /// `egress_refused` hints.
    pub egress: Vec<String>,
    /// What its output said that calls for a hint: the session's watch
    /// over every byte (or, with `--server`, the kinds of the server's
    /// hints).
    pub said: Vec<cordon_plan::said::Said>,
}

#[derive(Debug, Clone)]
pub enum Backend {
    Local(Sandboxes),
    Remote(Remote),
}

impl Backend {
    /// The server, when `cordon serve` is the engine (`--server`).
    pub fn remote(&self) -> Option<&Remote> {
        match self {
            Backend::Local(_) => None,
            Backend::Remote(r) => Some(r),
        }
    }

    pub async fn create(&self, caller: &Caller, req: CreateRequest) -> Result<Created, ToolError> {
        match self {
            Backend::Local(s) => s.create(caller, req).await,
            Backend::Remote(r) => r.create(caller, req).await,
        }
    }

    /// Run and wait; `cancel` kills the command's tree.
    pub async fn exec(
        &self,
        caller: &Caller,
        id: &str,
        spec: ExecSpec,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, ToolError> {
        match self {
            Backend::Local(s) => s.exec(caller, id, spec, cancel).await,
            Backend::Remote(r) => r.exec(caller, id, spec, cancel).await,
        }
    }

    pub async fn run_code(
        &self,
        caller: &Caller,
        id: &str,
        language: Language,
        code: String,
        timeout: Duration,
    ) -> Result<CellResult, ToolError> {
        match self {
            Backend::Local(s) => s.run_code(caller, id, language, code, timeout).await,
            Backend::Remote(r) => r.run_code(caller, id, language, code, timeout).await,
        }
    }

    pub async fn write_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        data: Vec<u8>,
    ) -> Result<u64, ToolError> {
        match self {
            Backend::Local(s) => s.write_file(caller, id, path, data).await,
            Backend::Remote(r) => r.write_file(caller, id, path, data).await,
        }
    }

    /// Keep an exec's whole output in the sandbox; the file's path.
    pub async fn keep_output(
        &self,
        caller: &Caller,
        id: &str,
        stream: &str,
        data: Vec<u8>,
    ) -> Result<String, ToolError> {
        let path = format!(
            "/tmp/cordon-mcp/output-{}.{stream}",
            crate::sandboxes::next_output()
        );
        self.write_file(caller, id, &path, data).await?;
        Ok(path)
    }

    pub async fn read_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        offset: u64,
        max: usize,
    ) -> Result<(Vec<u8>, u64), ToolError> {
        match self {
            Backend::Local(s) => s.read_file(caller, id, path, offset, max).await,
            Backend::Remote(r) => r.read_file(caller, id, path, offset, max).await,
        }
    }

    pub async fn list_files(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
    ) -> Result<Listing, ToolError> {
        match self {
            Backend::Local(s) => s.list_files(caller, id, path).await,
            Backend::Remote(r) => r.list_files(caller, id, path).await,
        }
    }

    pub async fn destroy(&self, caller: &Caller, id: &str) -> Result<bool, ToolError> {
        match self {
            Backend::Local(s) => s.destroy(caller, id).await,
            Backend::Remote(r) => r.destroy(caller, id).await,
        }
    }

    /// Every sandbox this server made, torn down.
    pub async fn shutdown(&self) -> usize {
        match self {
            Backend::Local(s) => s.shutdown().await,
            Backend::Remote(r) => r.shutdown().await,
        }
    }

    /// Record an action (the local engine's audit store; a remote server
    /// records its own API actions).
    pub fn record(&self, caller: &Caller, action: &str, id: &str, detail: serde_json::Value) {
        if let Backend::Local(s) = self {
            s.record(caller, action, id, detail);
        }
    }
}
