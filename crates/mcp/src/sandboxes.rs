//! The sandboxes `cordon mcp` made: sessions of the engine, each with its
//! owner (the caller that made it), its egress proxy, its files quota and
//! its code contexts (one per language, made on first use).
//!
//! A request becomes a sandbox exactly as in `cordon serve`: the
//! arguments are a `CreateSandbox` request, planned by
//! `cordon_server::planning` within the caller's ceiling, then built by
//! the engine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_server::{AuditLog, Caller};
use cordon_session::files::{
    as_sandbox_user, Listing, Node, PendingWrite, Quota, SandboxPath, SandboxRoot,
};
use cordon_session::{
    CellResult, CodeContext, CreateSession, EndCause, Engine, EventKind, ExecRequest, Language,
    Session, StreamName,
};
use tokio_util::sync::CancellationToken;

use crate::backend::{ExecOutput, ExecSpec};
use crate::output::KEPT_BYTES;
use serde_json::json;
use tokio::sync::oneshot;

use crate::error::ToolError;

/// Numbers the files that hold an exec's whole output.
static NEXT_OUTPUT: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_output() -> u64 {
    NEXT_OUTPUT.fetch_add(1, Ordering::Relaxed)
}

/// Bounds of what tools may do to one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxLimits {
    /// A sandbox unused this long ends (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Largest file one `sandbox_write_file` may write.
    pub max_file_bytes: u64,
    /// Bytes the files tools may write into one sandbox, all files together.
    pub files_quota_bytes: u64,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            idle_timeout: Some(Duration::from_secs(30 * 60)),
            max_file_bytes: 64 << 20,
            files_quota_bytes: 1 << 30,
        }
    }
}

/// What `sandbox_create` asks for.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    pub preset: Option<String>,
    pub allow_net: Vec<String>,
    /// `"10m"`, `"1h"`, or seconds as text.
    pub ttl: Option<serde_json::Value>,
    /// Bytes, or text such as `"2GiB"`.
    pub memory: Option<serde_json::Value>,
}

impl CreateRequest {
    /// The body of `POST /v1/sandboxes` this request makes, as the MCP
    /// server's own engine and a running `cordon serve` both plan it.
    pub fn to_wire(&self, idle_timeout: Option<Duration>) -> serde_json::Value {
        let mut body = json!({"preset": self.preset, "allow_net": self.allow_net, "ttl": self.ttl});
        if let Some(memory) = &self.memory {
            body["memory"] = memory.clone();
        }
        if let Some(idle) = idle_timeout {
            body["idle_timeout"] = json!(idle.as_secs().max(1));
        }
        body
    }
}

/// A new sandbox as the tool reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Created {
    pub sandbox_id: String,
    pub preset: String,
    pub network: String,
    pub allow_net: Vec<String>,
    pub memory_bytes: Option<u64>,
}

struct Entry {
    owner: String,
    quota: Arc<Quota>,
    proxy_stop: Option<oneshot::Sender<()>>,
}

/// Every sandbox of this `cordon mcp`. Cheap to clone.
#[derive(Clone)]
pub struct Sandboxes {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sandboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandboxes").finish_non_exhaustive()
    }
}

struct Inner {
    engine: Engine,
    audit: AuditLog,
    limits: SandboxLimits,
    table: Mutex<HashMap<String, Entry>>,
    /// (sandbox, language) -> interpreter.
    contexts: tokio::sync::Mutex<HashMap<(String, &'static str), Arc<CodeContext>>>,
    /// What each sandbox's proxy refused lately, for the exec's note.
    egress_notes: Arc<cordon_server::egress_notes::EgressNotes>,
}

impl Sandboxes {
    pub fn new(engine: Engine, audit: AuditLog, limits: SandboxLimits) -> Sandboxes {
        let sandboxes = Sandboxes {
            inner: Arc::new(Inner {
                engine,
                audit,
                limits,
                table: Mutex::new(HashMap::new()),
                contexts: tokio::sync::Mutex::new(HashMap::new()),
                egress_notes: Arc::default(),
            }),
        };
        let reaper = sandboxes.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                reaper.reap().await;
            }
        });
        sandboxes
    }

    fn table(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Entry>>, ToolError> {
        self.inner
            .table
            .lock()
            .map_err(|_| ToolError::new("the sandbox table is poisoned by an earlier failure"))
    }

    /// Plan within the caller's ceiling, build, start the egress proxy.
    pub async fn create(&self, caller: &Caller, req: CreateRequest) -> Result<Created, ToolError> {
        self.recordable(caller, None, "create")?;
        if let Some(ceiling) = caller.ceiling() {
            let mine = self
                .table()?
                .values()
                .filter(|e| e.owner == caller.name())
                .count();
            if mine >= ceiling.max_sandboxes {
                return Err(ToolError::new(format!(
                    "{mine} sandboxes are alive, the most allowed here"
                ))
                .with_fix("destroy one with sandbox_destroy first"));
            }
        }
        let body = req.to_wire(self.inner.limits.idle_timeout);
        let wire: cordon_server::wire::CreateSandbox = serde_json::from_value(body)
            .map_err(|e| ToolError::new(format!("the arguments do not form a request: {e}")))?;
        let plan = cordon_server::planning::plan(&wire, caller)?;
        let proxied = plan.spec.network == cordon_jail::NetworkMode::Proxy;
        let session = self
            .inner
            .engine
            .create(CreateSession {
                spec: plan.spec,
                idle_timeout: plan.idle_timeout,
                ttl: plan.ttl,
                owner: caller.name().to_owned(),
            })
            .await?;
        let id = session.id().to_owned();
        let allow_net: Vec<String> = plan
            .profile
            .network
            .allow
            .iter()
            .map(|h| h.to_string())
            .collect();
        self.inner.audit.sandbox_created(
            caller,
            &id,
            &plan.profile_name,
            json!({"via": "mcp", "preset": plan.profile_name, "allow_net": allow_net}),
        );
        let proxy_stop = match (proxied, session.take_proxy_listener()) {
            (true, Some(listener)) => match cordon_server::egress::start(
                &plan.profile,
                &id,
                listener,
                cordon_server::egress::Recorders {
                    audit: self.inner.audit.clone(),
                    notes: self.inner.egress_notes.clone(),
                },
                plan.identity.clone(),
                session.live_grants(),
                None,
            ) {
                Ok(stop) => Some(stop),
                Err(e) => {
                    let _ = self.inner.engine.destroy(&id, EndCause::Deleted).await;
                    self.inner
                        .audit
                        .sandbox_ended("mcp", &id, "setup_failed", false);
                    return Err(e.into());
                }
            },
            _ => None,
        };
        // As the server does: a sandbox whose run cannot be recorded is
        // not handed out.
        if let Err(error) = self.inner.audit.committed().await {
            if let Some(stop) = proxy_stop {
                let _ = stop.send(());
            }
            let clean = self
                .inner
                .engine
                .destroy(&id, EndCause::Deleted)
                .await
                .is_ok_and(|t| t.clean);
            self.inner
                .audit
                .sandbox_ended("mcp", &id, "audit_failed", clean);
            return Err(cordon_server::ApiError::audit_unavailable(
                &error,
                self.inner.audit.store_path(),
            )
            .into());
        }
        self.table()?.insert(
            id.clone(),
            Entry {
                owner: caller.name().to_owned(),
                quota: Arc::new(Quota::new(self.inner.limits.files_quota_bytes)),
                proxy_stop,
            },
        );
        Ok(Created {
            sandbox_id: id,
            preset: plan.profile_name,
            network: format!("{:?}", session.spec().network).to_ascii_lowercase(),
            allow_net,
            memory_bytes: session.spec().limits.memory,
        })
    }

    /// The caller's running sandbox `id` (another caller's looks missing).
    pub fn session(&self, caller: &Caller, id: &str) -> Result<Arc<Session>, ToolError> {
        let session = self
            .inner
            .engine
            .session(id)
            .filter(|s| s.owner() == caller.name())
            .ok_or_else(|| ToolError::no_sandbox(id))?;
        session.touch();
        Ok(session)
    }

    /// The caller's running sandbox `id` for `action`, refused while the
    /// audit store cannot record it (nothing is done unrecorded).
    fn session_for(
        &self,
        caller: &Caller,
        id: &str,
        action: &str,
    ) -> Result<Arc<Session>, ToolError> {
        let session = self.session(caller, id)?;
        self.recordable(caller, Some(id), action)?;
        Ok(session)
    }

    fn recordable(&self, caller: &Caller, id: Option<&str>, action: &str) -> Result<(), ToolError> {
        let asked = json!({"kind": action, "via": "mcp"});
        Ok(self.inner.audit.ready_for(caller, id, asked)?)
    }

    /// Record an action on a sandbox.
    pub fn record(&self, caller: &Caller, action: &str, id: &str, detail: serde_json::Value) {
        self.inner.audit.record(caller, action, Some(id), detail);
    }

    /// Tear a sandbox down: its processes, contexts, proxy, files.
    pub async fn destroy(&self, caller: &Caller, id: &str) -> Result<bool, ToolError> {
        let session = self.session(caller, id)?;
        let teardown = self
            .inner
            .engine
            .destroy(session.id(), EndCause::Deleted)
            .await?;
        self.forget(id).await;
        self.inner
            .audit
            .sandbox_ended(caller.name(), id, "deleted", teardown.clean);
        Ok(teardown.clean)
    }

    /// Drop what this server keeps of a sandbox that is gone.
    async fn forget(&self, id: &str) {
        let entry = self.table().ok().and_then(|mut t| t.remove(id));
        if let Some(stop) = entry.and_then(|e| e.proxy_stop) {
            let _ = stop.send(());
        }
        self.inner.egress_notes.forget(id);
        let mut contexts = self.inner.contexts.lock().await;
        contexts.retain(|(sandbox, _), _| sandbox != id);
    }

    /// Sandboxes that ended on their own (idle, ttl, death).
    async fn reap(&self) {
        let ids: Vec<String> = match self.table() {
            Ok(t) => t.keys().cloned().collect(),
            Err(_) => return,
        };
        for id in ids {
            let gone = self
                .inner
                .engine
                .session(&id)
                .is_none_or(|s| s.ended().is_some());
            if gone {
                self.forget(&id).await;
                self.inner.audit.sandbox_ended("mcp", &id, "ended", true);
            }
        }
    }

    /// Every sandbox down (the client went away, or a signal).
    pub async fn shutdown(&self) -> usize {
        let ended = self.inner.engine.shutdown().await;
        for t in &ended {
            self.forget(&t.id).await;
            self.inner
                .audit
                .sandbox_ended("mcp", &t.id, "shutdown", t.clean);
        }
        self.inner.audit.flush();
        ended.len()
    }

    /// The sandbox's interpreter for `language`, started on first use.
    pub async fn context(
        &self,
        caller: &Caller,
        id: &str,
        language: Language,
    ) -> Result<Arc<CodeContext>, ToolError> {
        let session = self.session_for(caller, id, "code_context")?;
        let mut contexts = self.inner.contexts.lock().await;
        let key = (id.to_owned(), language.as_str());
        if let Some(ctx) = contexts.get(&key) {
            return Ok(ctx.clone());
        }
        let ctx = Arc::new(CodeContext::start(session, language).await?);
        contexts.insert(key, ctx.clone());
        Ok(ctx)
    }

    fn quota(&self, id: &str) -> Result<Arc<Quota>, ToolError> {
        self.table()?
            .get(id)
            .map(|e| e.quota.clone())
            .ok_or_else(|| ToolError::no_sandbox(id))
    }

    /// Write `data` to `path` in the sandbox (atomically, as its user).
    pub async fn write_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        data: Vec<u8>,
    ) -> Result<u64, ToolError> {
        let session = self.session_for(caller, id, "file_write")?;
        self.write_into(&session, path, data).await
    }

    async fn write_into(
        &self,
        session: &Session,
        path: &str,
        data: Vec<u8>,
    ) -> Result<u64, ToolError> {
        let path = SandboxPath::parse(path)?;
        let quota = self.quota(session.id())?;
        let root = SandboxRoot::new(session.open_root().await?);
        let max_file = self.inner.limits.max_file_bytes;
        let written = as_sandbox_user(session.host_ids(), move || {
            let mut pending = PendingWrite::begin(&root, &path, max_file, quota)?;
            pending.write(&data)?;
            pending.commit()
        })
        .await?;
        Ok(written)
    }

    /// Run a command and wait for it (`cancel`: kill its tree).
    pub async fn exec(
        &self,
        caller: &Caller,
        id: &str,
        spec: ExecSpec,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, ToolError> {
        let session = self.session_for(caller, id, "exec")?;
        let mut req = ExecRequest {
            argv: spec.argv,
            env: spec.env,
            cwd: spec.cwd.map(Into::into),
            stdin: spec.stdin,
            keep_stdin_open: false,
            timeout: Some(spec.timeout),
            output_limit: Some(KEPT_BYTES),
            ..ExecRequest::default()
        };
        // An allow with limits: the exec's timeout and its own rlimits.
        let applied = spec
            .limits
            .map(|l| cordon_server::routes::exec::limit_exec(&mut req, &l));
        let process = session.exec(req).await?;
        let exit = tokio::select! {
            exit = process.wait() => exit,
            _ = cancel.cancelled() => {
                process.kill().await;
                process.wait().await
            }
        };
        let mut out = ExecOutput {
            exit_code: exit.exit_code,
            timed_out: exit.timed_out,
            stdout_dropped: exit.usage.stdout_dropped,
            stderr_dropped: exit.usage.stderr_dropped,
            message: exit.message,
            limits: applied.and_then(|l| serde_json::to_value(l).ok()),
            said: exit.said,
            ..ExecOutput::default()
        };
        let (from, to) = process.span();
        out.egress = cordon_server::hints::egress(self.inner.egress_notes.between(id, from, to))
            .into_iter()
            .map(|h| h.message)
            .collect();
        for e in process.events_now(0).0 {
            if let EventKind::Output { stream, data } = e.kind {
                match stream {
                    StreamName::Stdout => out.stdout.extend_from_slice(&data),
                    StreamName::Stderr => out.stderr.extend_from_slice(&data),
                }
            }
        }
        Ok(out)
    }

    /// One cell in the sandbox's interpreter for `language`. The cell runs
    /// to its end even if the call is cancelled, so the interpreter stays
    /// in step with its cells.
    pub async fn run_code(
        &self,
        caller: &Caller,
        id: &str,
        language: Language,
        code: String,
        timeout: Duration,
    ) -> Result<CellResult, ToolError> {
        let context = self.context(caller, id, language).await?;
        tokio::spawn(async move { context.run(&code, timeout).await })
            .await
            .map_err(|e| ToolError::new(format!("the cell's task failed: {e}")))?
            .map_err(ToolError::from)
    }

    /// Up to `max` bytes of the file at `path` from `offset`, and its size.
    pub async fn read_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        offset: u64,
        max: usize,
    ) -> Result<(Vec<u8>, u64), ToolError> {
        use std::io::{Read, Seek, SeekFrom};
        let session = self.session_for(caller, id, "file_read")?;
        let p = SandboxPath::parse(path)?;
        let root = SandboxRoot::new(session.open_root().await?);
        let shown = path.to_owned();
        as_sandbox_user(session.host_ids(), move || match root.open(&p)? {
            Node::File { mut file, size } => {
                let io = |e: std::io::Error| cordon_session::files::FilesError {
                    kind: cordon_session::files::FilesErrorKind::Io,
                    message: format!("cannot read {shown}: {e}"),
                    fix: None,
                };
                file.seek(SeekFrom::Start(offset)).map_err(io)?;
                let mut buf = Vec::with_capacity(max.min(size as usize));
                file.take(max as u64).read_to_end(&mut buf).map_err(io)?;
                Ok((buf, size))
            }
            Node::Dir(_) => Err(cordon_session::files::FilesError {
                kind: cordon_session::files::FilesErrorKind::Conflict,
                message: format!("{shown} is a directory"),
                fix: Some("list it with sandbox_list_files".into()),
            }),
        })
        .await
        .map_err(ToolError::from)
    }

    /// The entries of the directory at `path`.
    pub async fn list_files(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
    ) -> Result<Listing, ToolError> {
        let session = self.session_for(caller, id, "file_list")?;
        let p = SandboxPath::parse(path)?;
        let root = SandboxRoot::new(session.open_root().await?);
        let shown = path.to_owned();
        as_sandbox_user(session.host_ids(), move || match root.open(&p)? {
            Node::Dir(fd) => {
                use std::os::fd::AsFd;
                Listing::read(fd.as_fd(), &p)
            }
            Node::File { .. } => Err(cordon_session::files::FilesError {
                kind: cordon_session::files::FilesErrorKind::Conflict,
                message: format!("{shown} is a file, not a directory"),
                fix: Some("read it with sandbox_read_file".into()),
            }),
        })
        .await
        .map_err(ToolError::from)
    }
}
