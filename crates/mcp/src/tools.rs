//! The MCP tools (names fixed): `sandbox_create`, `sandbox_exec`,
//! `sandbox_run_code`, `sandbox_write_file`, `sandbox_read_file`,
//! `sandbox_list_files`, `sandbox_destroy`. A sandbox is named by the
//! `sandbox_id` argument, so any request stands on its own (stateless
//! transports need nothing more). Failures are tool errors
//! (`isError: true`) that say what went wrong and how to fix it.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use cordon_server::Caller;
use cordon_session::Language;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::approval::Approvals;
use crate::backend::{Backend, ExecSpec};
use crate::error::ToolError;
use crate::held::{while_held, Held, Listener};
use crate::output::{self, SHOWN_BYTES};
use crate::sandboxes::CreateRequest;

/// Default and longest timeout of one exec or code cell.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Default and largest read of `sandbox_read_file`.
const DEFAULT_READ: usize = SHOWN_BYTES;
const MAX_READ: usize = 1 << 20;

/// A duration: seconds, or text such as `"30s"`, `"10m"`, `"1h"`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "a duration: a number of seconds, or text such as \"30s\", \"10m\" or \"1h\""
)]
pub enum DurationArg {
    Seconds(f64),
    Text(String),
}

impl DurationArg {
    fn to_duration(&self, field: &str) -> Result<Duration, ToolError> {
        let d = match self {
            DurationArg::Seconds(s) if s.is_finite() && *s > 0.0 => Duration::from_secs_f64(*s),
            DurationArg::Seconds(s) => {
                return Err(ToolError::new(format!(
                    "{field}: {s} is not a positive number of seconds"
                )))
            }
            DurationArg::Text(t) => cordon_policy::parse_duration(t)
                .map(|d| d.as_duration())
                .map_err(|e| {
                    ToolError::new(format!("{field}: {e}")).with_fix("write it like 30s, 10m or 1h")
                })?,
        };
        Ok(d)
    }

    fn to_json(&self) -> Value {
        match self {
            DurationArg::Seconds(s) => json!(s.ceil().max(1.0) as u64),
            DurationArg::Text(t) => json!(t),
        }
    }
}

/// A size: bytes, or text such as `"512MiB"`, `"2GiB"`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "a size: a whole number of bytes, or text such as \"512MiB\" or \"2GiB\""
)]
pub enum SizeArg {
    Bytes(u64),
    Text(String),
}

impl SizeArg {
    fn to_json(&self) -> Value {
        match self {
            SizeArg::Bytes(b) => json!(b),
            SizeArg::Text(t) => json!(t),
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// The trust preset: `untrusted` (default: no network, 512 MiB),
    /// `low` (no network, 1 GiB), `medium` or `high` (network through
    /// cordon's egress proxy to the `allow_net` hosts only). This server
    /// may allow only some of them.
    #[serde(default)]
    pub preset: Option<String>,
    /// Hosts the sandbox may reach through its egress proxy
    /// (`pypi.org`, `*.githubusercontent.com`, `api.example.com:443`);
    /// needs a preset with network. Only hosts this server allows.
    #[serde(default)]
    pub allow_net: Vec<String>,
    /// The sandbox ends this long after creation, whatever it is doing
    /// (seconds, or `"30m"`, `"2h"`). Without it, it lives until
    /// `sandbox_destroy`, an idle timeout, or the end of this server.
    #[serde(default)]
    pub ttl: Option<DurationArg>,
    /// The sandbox's memory limit (bytes, or `"512MiB"`, `"4GiB"`), in
    /// place of its preset's; at most what this server allows.
    #[serde(default)]
    pub memory: Option<SizeArg>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The id `sandbox_create` returned.
    pub sandbox_id: String,
    /// The command as an argument vector, run without a shell
    /// (`["python3", "-c", "print(1)"]`). Give this or `script`.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// A shell script, run with `sh -c` (pipes, redirections, `&&`).
    /// Give this or `argv`.
    #[serde(default)]
    pub script: Option<String>,
    /// Working directory inside the sandbox (default: the sandbox's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Environment variables added for this command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Text written to the command's standard input (then closed).
    #[serde(default)]
    pub stdin: Option<String>,
    /// The command and everything it started are killed after this long
    /// (seconds or `"5m"`; default 120 s, at most 1 h).
    #[serde(default)]
    pub timeout: Option<DurationArg>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// The id `sandbox_create` returned.
    pub sandbox_id: String,
    /// `python` (the only language so far).
    #[serde(default = "python")]
    pub language: String,
    /// The code of one cell. Variables, imports and functions persist
    /// to the next call for the same sandbox and language; the value of
    /// a trailing expression is returned as `value`.
    pub code: String,
    /// The interpreter is killed (its state lost) when the cell runs
    /// longer (seconds or `"5m"`; default 120 s, at most 1 h).
    #[serde(default)]
    pub timeout: Option<DurationArg>,
}

fn python() -> String {
    "python".into()
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The id `sandbox_create` returned.
    pub sandbox_id: String,
    /// Absolute path inside the sandbox (missing directories are made),
    /// e.g. `/tmp/work/main.py`. `/tmp` is the sandbox's own.
    pub path: String,
    /// The file's content.
    pub content: String,
    /// `utf8` (default) or `base64` (for binary content).
    #[serde(default)]
    pub encoding: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The id `sandbox_create` returned.
    pub sandbox_id: String,
    /// Absolute path inside the sandbox.
    pub path: String,
    /// Byte offset to start at (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Most bytes returned (default 16384, at most 1048576).
    #[serde(default)]
    pub max_bytes: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// The id `sandbox_create` returned.
    pub sandbox_id: String,
    /// Absolute path of a directory inside the sandbox (default `/tmp`).
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DestroyArgs {
    /// The id `sandbox_create` returned.
    pub sandbox_id: String,
}

/// The MCP server: the tools over the sandboxes.
#[derive(Debug, Clone)]
pub struct CordonTools {
    backend: Backend,
    /// `--policy`: decisions on execs (the local engine only).
    approvals: Option<Approvals>,
    /// The caller when the transport names none (stdio: the user who
    /// started `cordon mcp`, within the ceiling of its flags).
    local: Option<Caller>,
}

fn done(value: Value) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::structured(value))
}

fn failed(e: ToolError) -> Result<CallToolResult, ErrorData> {
    let mut result = CallToolResult::error(vec![ContentBlock::text(e.to_string())]);
    if let Some(mut detail) = e.detail {
        detail["message"] = json!(e.message);
        result.structured_content = Some(detail);
    }
    Ok(result)
}

/// A tool's body: its value, or a tool error.
fn reply(r: Result<Value, ToolError>) -> Result<CallToolResult, ErrorData> {
    match r {
        Ok(v) => done(v),
        Err(e) => failed(e),
    }
}

fn timeout_of(arg: &Option<DurationArg>) -> Result<Duration, ToolError> {
    let t = match arg {
        Some(a) => a.to_duration("timeout")?,
        None => DEFAULT_TIMEOUT,
    };
    if t > MAX_TIMEOUT {
        return Err(ToolError::new(format!(
            "timeout: {t:?} is longer than the {MAX_TIMEOUT:?} allowed"
        ))
        .with_fix(
            "run long jobs in the background (script: 'nohup job > /tmp/job.log 2>&1 &') and poll",
        ));
    }
    Ok(t)
}

#[tool_router]
impl CordonTools {
    pub fn new(backend: Backend, local: Option<Caller>) -> CordonTools {
        CordonTools {
            backend,
            approvals: None,
            local,
        }
    }

    /// Decide each exec with this policy (the local engine; a remote
    /// server decides its own).
    pub fn with_approvals(mut self, approvals: Option<Approvals>) -> CordonTools {
        if matches!(self.backend, Backend::Local(_)) {
            self.approvals = approvals;
        }
        self
    }

    /// Who is calling: the HTTP request's token, else the local caller.
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, ToolError> {
        if let Some(caller) = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
        {
            return Ok(caller.clone());
        }
        self.local
            .clone()
            .ok_or_else(|| ToolError::new("this request carries no caller"))
    }

    #[tool(
        description = "Create a sandbox: a fresh, isolated Linux environment (own filesystem root with a private /tmp, no host files, no network unless allowed, memory/process/time limits) that lives across calls. Returns sandbox_id, which every other sandbox_* tool takes. Destroy it with sandbox_destroy when done.",
        annotations(
            title = "Create a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn sandbox_create(
        &self,
        Parameters(args): Parameters<CreateArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        reply(self.create(args, &ctx).await)
    }

    #[tool(
        description = "Run a command in a sandbox and wait for it: argv (no shell) or script (sh -c), with optional cwd, env, stdin and timeout. Returns exit_code, stdout, stderr and timed_out (and limits, when a policy allowed it with limits). Each stream shows at most 16 KiB (head and tail); a longer one is saved whole in a file in the sandbox, named in the result's note.",
        annotations(
            title = "Run a command in a sandbox",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn sandbox_exec(
        &self,
        Parameters(args): Parameters<ExecArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        reply(self.exec(args, &ctx).await)
    }

    #[tool(
        description = "Run code in a persistent interpreter inside a sandbox (one per sandbox and language; python). State (variables, imports, functions) carries over between calls. Returns stdout, stderr, the value of a trailing expression, and the error with its traceback if the code raised.",
        annotations(
            title = "Run code in a sandbox",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn sandbox_run_code(
        &self,
        Parameters(args): Parameters<RunCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        reply(self.run_code(args, &ctx).await)
    }

    #[tool(
        description = "Write a file inside a sandbox (replacing it atomically if it exists; missing directories are made). Content is UTF-8 text, or base64 with encoding=base64.",
        annotations(
            title = "Write a file in a sandbox",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_write_file(
        &self,
        Parameters(args): Parameters<WriteFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        reply(self.write_file(args, &ctx).await)
    }

    #[tool(
        description = "Read a file inside a sandbox: up to max_bytes (default 16 KiB) from offset. Returns the text (or base64 for binary data), the file's size, and the offset to continue from when there is more.",
        annotations(
            title = "Read a file in a sandbox",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_read_file(
        &self,
        Parameters(args): Parameters<ReadFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        reply(self.read_file(args, &ctx).await)
    }

    #[tool(
        description = "List a directory inside a sandbox (default /tmp): each entry's name, type (file, dir, symlink, other) and size.",
        annotations(
            title = "List files in a sandbox",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_list_files(
        &self,
        Parameters(args): Parameters<ListFilesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        reply(self.list_files(args, &ctx).await)
    }

    #[tool(
        description = "Destroy a sandbox: every process in it is killed and its files are gone. The sandbox_id is invalid afterwards.",
        annotations(
            title = "Destroy a sandbox",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn sandbox_destroy(
        &self,
        Parameters(args): Parameters<DestroyArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        reply(self.destroy(args, &ctx).await)
    }
}

#[tool_handler(
    name = "cordon",
    instructions = "cordon sandboxes: isolated Linux environments that live across calls. Call sandbox_create first and pass its sandbox_id to the other tools; run commands with sandbox_exec, code with sandbox_run_code, move files with sandbox_write_file / sandbox_read_file / sandbox_list_files, and call sandbox_destroy when done."
)]
impl ServerHandler for CordonTools {}

/// The tools' bodies.
impl CordonTools {
    async fn create(
        &self,
        args: CreateArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let caller = self.caller(ctx)?;
        let req = CreateRequest {
            preset: args.preset,
            allow_net: args.allow_net,
            ttl: args.ttl.as_ref().map(DurationArg::to_json),
            memory: args.memory.as_ref().map(SizeArg::to_json),
        };
        // Not looked up while it waits: the server's pending creates are
        // every client's (all of them its owner through `--server`), and
        // one may name another tenant's secret or profile.
        let created = self.backend.create(&caller, req).await?;
        serde_json::to_value(created).map_err(|e| ToolError::new(e.to_string()))
    }

    async fn exec(
        &self,
        args: ExecArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let caller = self.caller(ctx)?;
        let argv = match (args.argv, args.script) {
            (Some(argv), None) if !argv.is_empty() => argv,
            (None, Some(script)) => vec!["sh".into(), "-c".into(), script],
            _ => {
                return Err(ToolError::new(
                    "give either argv (a non-empty list) or script, not both",
                )
                .with_fix(r#"e.g. {"argv": ["ls", "-l"]} or {"script": "ls -l | head"}"#))
            }
        };
        let decided = match &self.approvals {
            Some(a) => {
                let d = a.exec(&ctx.peer, &caller, &args.sandbox_id, &argv).await;
                self.backend
                    .record(&caller, "decision", &args.sandbox_id, d.record);
                Some(d.result?)
            }
            None => None,
        };
        let spec = ExecSpec {
            argv: argv.clone(),
            env: args.env.into_iter().collect(),
            cwd: args.cwd,
            stdin: args.stdin.map(String::into_bytes),
            timeout: timeout_of(&args.timeout)?,
            limits: decided.as_ref().and_then(|d| d.limits),
        };
        // The server's policy may hold the exec, or a connection of its
        // command, for a person's answer.
        let held = Held {
            session: &args.sandbox_id,
            kinds: &["exec", "egress"],
        };
        // A cancelled call kills the command's whole tree.
        let exit = while_held(
            self.backend.remote(),
            Listener::of(ctx),
            held,
            self.backend
                .exec(&caller, &args.sandbox_id, spec, ctx.ct.clone()),
        )
        .await?;
        let applied = &exit.limits;
        self.backend.record(
            &caller,
            "exec",
            &args.sandbox_id,
            json!({"via": "mcp", "argv": argv, "exit_code": exit.exit_code, "timed_out": exit.timed_out,
                   "rule": decided.as_ref().map(|d| &d.rule), "limits": applied}),
        );
        let mut result = json!({
            "exit_code": exit.exit_code,
            "timed_out": exit.timed_out,
        });
        if let Some(l) = applied {
            result["limits"] = l.clone();
        }
        let mut notes = Vec::new();
        for (name, data, dropped) in [
            ("stdout", exit.stdout, exit.stdout_dropped),
            ("stderr", exit.stderr, exit.stderr_dropped),
        ] {
            let shown = output::cut(&data, SHOWN_BYTES);
            if shown.cut_bytes > 0 || dropped > 0 {
                let total = data.len() as u64 + dropped;
                let kept = self
                    .backend
                    .keep_output(&caller, &args.sandbox_id, name, data)
                    .await
                    .ok();
                notes.push(output::note(name, total, dropped, kept.as_deref()));
            }
            result[name] = json!(shown.text);
        }
        if let Some(message) = exit.message {
            notes.push(message);
        }
        notes.extend(output::hints(&exit.said));
        // The proxy's answers while it ran: curl and pip show only "403".
        notes.extend(exit.egress.iter().map(|e| {
            let mut chars = e.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_uppercase().chain(chars).collect::<String>()
            })
        }));
        if !notes.is_empty() {
            result["note"] = json!(notes.join(" "));
        }
        Ok(result)
    }

    async fn run_code(
        &self,
        args: RunCodeArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let caller = self.caller(ctx)?;
        let language = Language::from_str(&args.language)?;
        let timeout = timeout_of(&args.timeout)?;
        let result = self
            .backend
            .run_code(&caller, &args.sandbox_id, language, args.code, timeout)
            .await?;
        self.backend.record(
            &caller,
            "context_run",
            &args.sandbox_id,
            json!({"via": "mcp", "language": language.as_str(), "error": result.error.as_ref().map(|e| &e.name)}),
        );
        let stdout = output::cut(result.stdout.as_bytes(), SHOWN_BYTES);
        let stderr = output::cut(result.stderr.as_bytes(), SHOWN_BYTES);
        let mut value = json!({
            "stdout": stdout.text,
            "stderr": stderr.text,
            "value": result.value,
            "error": result.error.map(|e| json!({"name": e.name, "message": e.message, "traceback": e.traceback})),
            "restarted": result.restarted,
        });
        if stdout.cut_bytes > 0 || stderr.cut_bytes > 0 {
            value["note"] = json!(format!(
                "the cell's output was longer than {SHOWN_BYTES} bytes per stream and was cut in the middle; write large results to a file in the sandbox and read it in parts with sandbox_read_file"
            ));
        }
        Ok(value)
    }

    async fn write_file(
        &self,
        args: WriteFileArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let caller = self.caller(ctx)?;
        let data = match args.encoding.as_deref() {
            None | Some("utf8") | Some("utf-8") | Some("text") => args.content.into_bytes(),
            Some("base64") => base64::engine::general_purpose::STANDARD
                .decode(args.content.as_bytes())
                .map_err(|e| ToolError::new(format!("content is not valid base64: {e}")))?,
            Some(other) => {
                return Err(ToolError::new(format!("encoding {other:?} is not known"))
                    .with_fix("use utf8 or base64"))
            }
        };
        let held = Held {
            session: &args.sandbox_id,
            kinds: &["path"],
        };
        let written = while_held(
            self.backend.remote(),
            Listener::of(ctx),
            held,
            self.backend
                .write_file(&caller, &args.sandbox_id, &args.path, data),
        )
        .await;
        self.record_file_op(
            &caller,
            "file_write",
            &args.sandbox_id,
            &args.path,
            written.as_ref().copied(),
        );
        Ok(json!({"path": args.path, "bytes_written": written?}))
    }

    async fn read_file(
        &self,
        args: ReadFileArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let caller = self.caller(ctx)?;
        let offset = args.offset.unwrap_or(0);
        let max = args.max_bytes.unwrap_or(DEFAULT_READ).clamp(1, MAX_READ);
        let read = self
            .backend
            .read_file(&caller, &args.sandbox_id, &args.path, offset, max)
            .await;
        let bytes = read.as_ref().map(|(data, _)| data.len() as u64);
        self.record_file_op(&caller, "file_read", &args.sandbox_id, &args.path, bytes);
        let (data, size) = read?;
        let end = offset.saturating_add(data.len() as u64);
        let mut value =
            json!({"path": args.path, "size": size, "offset": offset, "bytes": data.len()});
        match String::from_utf8(data) {
            Ok(text) => {
                value["encoding"] = json!("utf8");
                value["content"] = json!(text);
            }
            Err(e) => {
                value["encoding"] = json!("base64");
                value["content"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(e.into_bytes()));
            }
        }
        if end < size {
            value["next_offset"] = json!(end);
            value["note"] = json!(format!(
                "{} more bytes; call sandbox_read_file again with offset={end}",
                size - end
            ));
        }
        Ok(value)
    }

    async fn list_files(
        &self,
        args: ListFilesArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let caller = self.caller(ctx)?;
        let path = args.path.unwrap_or_else(|| "/tmp".into());
        let listing = self
            .backend
            .list_files(&caller, &args.sandbox_id, &path)
            .await;
        let entries = listing.as_ref().map(|l| l.entries.len() as u64);
        self.record_file_op(&caller, "file_read", &args.sandbox_id, &path, entries);
        let listing = listing?;
        Ok(json!({"path": path, "entries": listing.entries, "truncated": listing.truncated}))
    }

    /// A files tool's audit record, whether it succeeded or not (as the
    /// server records its files API): the path, and the bytes or entries
    /// it moved or the error.
    fn record_file_op(
        &self,
        caller: &Caller,
        action: &str,
        id: &str,
        path: &str,
        result: Result<u64, &ToolError>,
    ) {
        let outcome = match result {
            Ok(n) => json!({"ok": n}),
            Err(e) => json!({"error": e.message}),
        };
        self.backend.record(
            caller,
            action,
            id,
            json!({"via": "mcp", "path": path, "outcome": outcome}),
        );
    }

    async fn destroy(
        &self,
        args: DestroyArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let caller = self.caller(ctx)?;
        let clean = self.backend.destroy(&caller, &args.sandbox_id).await?;
        if !clean {
            return Err(ToolError::new(format!(
                "sandbox {} was torn down but a control group of it is left (the spawner retries when it exits)",
                args.sandbox_id
            )));
        }
        Ok(json!({"sandbox_id": args.sandbox_id, "destroyed": true}))
    }
}
