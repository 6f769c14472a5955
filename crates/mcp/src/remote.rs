//! A running `cordon serve` as the engine (`cordon mcp --server SOCKET`):
//! each tool call is a request to its API over the unix socket, where
//! this process is the server's owner. So the caller's ceiling is checked
//! here (the same planning as the server's, before the request), and a
//! sandbox is found only for the caller that made it through this
//! `cordon mcp`. At the end every sandbox it made is deleted.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use cordon_server::Caller;
use cordon_session::files::Listing;
use cordon_session::{CellError, CellResult, Language};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::backend::{ExecOutput, ExecSpec};
use crate::error::ToolError;
use crate::sandboxes::{CreateRequest, Created};

enum FileAnswer {
    File(Bytes),
    Listing(Listing),
}

#[derive(Debug, Clone)]
pub struct Remote {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    socket: PathBuf,
    idle_timeout: Option<Duration>,
    /// sandbox id -> the caller that made it.
    owners: Mutex<HashMap<String, String>>,
    /// (sandbox, language) -> context id on the server.
    contexts: tokio::sync::Mutex<HashMap<(String, &'static str), String>>,
}

/// A path's segments percent-encoded for a URL (`/` kept).
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.trim_start_matches('/').bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl Remote {
    pub fn new(socket: PathBuf, idle_timeout: Option<Duration>) -> Remote {
        Remote {
            inner: Arc::new(Inner {
                socket,
                idle_timeout,
                owners: Mutex::new(HashMap::new()),
                contexts: tokio::sync::Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Whether the server answers (at start, to fail early).
    pub async fn check(&self) -> Result<(), ToolError> {
        self.json(Method::GET, "/v1/health", None).await.map(|_| ())
    }

    /// One request on a connection of its own.
    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<(Option<String>, Bytes), ToolError> {
        let socket = &self.inner.socket;
        let unreachable = |e: &dyn std::fmt::Display| {
            ToolError::new(format!(
                "cannot reach cordon serve at {}: {e}",
                socket.display()
            ))
            .with_fix("start it with `cordon serve`, or name its socket with --server")
        };
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| unreachable(&e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "cordon")
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ToolError::new(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(&e))?;
        let status = resp.status();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let data = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(&e))?
            .to_bytes();
        if !status.is_success() {
            let v: Value = serde_json::from_slice(&data).unwrap_or(Value::Null);
            let message = v["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("cordon serve answered {status}"));
            let mut e = ToolError::new(message);
            if let Some(fix) = v["error"]["fix"].as_str() {
                e = e.with_fix(fix);
            }
            // A refusal of the server's policy or approvals: the same
            // structured error as `cordon mcp --policy` gives.
            if v["error"].get("rule").is_some() {
                let r = &v["error"];
                e = e.with_detail(serde_json::json!({
                    "error": r["code"], "subject": r["subject"], "rule": r["rule"],
                    "approval": r["approval"], "would_allow": r["would_allow"],
                }));
            }
            return Err(e);
        }
        Ok((content_type, data))
    }

    async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ToolError> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let (_, data) = self.send(method, path, "application/json", bytes).await?;
        if data.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&data)
            .map_err(|e| ToolError::new(format!("cordon serve's answer is not JSON: {e}")))
    }

    /// The server's approvals that wait for a person's answer.
    pub async fn pending_approvals(&self) -> Result<Vec<cordon_approvals::Approval>, ToolError> {
        #[derive(serde::Deserialize)]
        struct Pending {
            approvals: Vec<cordon_approvals::Approval>,
        }
        let v = self
            .json(Method::GET, "/v1/approvals?state=pending", None)
            .await?;
        serde_json::from_value::<Pending>(v)
            .map(|p| p.approvals)
            .map_err(|e| {
                ToolError::new(format!("cordon serve's approvals are not as expected: {e}"))
            })
    }

    fn owned(&self, caller: &Caller, id: &str) -> Result<(), ToolError> {
        let owners =
            self.inner.owners.lock().map_err(|_| {
                ToolError::new("the sandbox table is poisoned by an earlier failure")
            })?;
        match owners.get(id) {
            Some(owner) if owner == caller.name() => Ok(()),
            _ => Err(ToolError::no_sandbox(id)),
        }
    }

    pub async fn create(&self, caller: &Caller, req: CreateRequest) -> Result<Created, ToolError> {
        let body = req.to_wire(self.inner.idle_timeout);
        // The caller's ceiling, checked here: the server sees its owner.
        let wire: cordon_server::wire::CreateSandbox = serde_json::from_value(body.clone())
            .map_err(|e| ToolError::new(format!("the arguments do not form a request: {e}")))?;
        cordon_server::planning::plan(&wire, caller)?;
        if let Some(ceiling) = caller.ceiling() {
            let mine = self
                .inner
                .owners
                .lock()
                .map(|o| o.values().filter(|v| *v == caller.name()).count())
                .unwrap_or(usize::MAX);
            if mine >= ceiling.max_sandboxes {
                return Err(ToolError::new(format!(
                    "{mine} sandboxes are alive, the most allowed here"
                ))
                .with_fix("destroy one with sandbox_destroy first"));
            }
        }
        let view = self.json(Method::POST, "/v1/sandboxes", Some(body)).await?;
        let id = view["id"]
            .as_str()
            .ok_or_else(|| ToolError::new("cordon serve made a sandbox but sent no id"))?
            .to_owned();
        if let Ok(mut owners) = self.inner.owners.lock() {
            owners.insert(id.clone(), caller.name().to_owned());
        }
        let limits = &view["limits"];
        Ok(Created {
            sandbox_id: id,
            preset: view["preset"].as_str().unwrap_or_default().to_owned(),
            network: limits["network"].as_str().unwrap_or_default().to_owned(),
            allow_net: serde_json::from_value(limits["allow_net"].clone()).unwrap_or_default(),
            memory_bytes: limits["memory_bytes"].as_u64(),
        })
    }

    pub async fn exec(
        &self,
        caller: &Caller,
        id: &str,
        spec: ExecSpec,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, ToolError> {
        self.owned(caller, id)?;
        let env: HashMap<String, String> = spec.env.into_iter().collect();
        let body = json!({
            "argv": spec.argv,
            "env": env,
            "cwd": spec.cwd,
            "stdin": spec.stdin.map(|s| String::from_utf8_lossy(&s).into_owned()),
            "timeout": spec.timeout.as_secs_f64().ceil().max(1.0) as u64,
        });
        let path = format!("/v1/sandboxes/{id}/exec");
        // A dropped request closes its connection: the server kills a
        // foreground exec whose client is gone.
        let reply = tokio::select! {
            r = self.json(Method::POST, &path, Some(body)) => r?,
            _ = cancel.cancelled() => return Err(ToolError::new("the call was cancelled; the command was killed")),
        };
        let stream = |name: &str| -> Vec<u8> {
            let text = reply[name].as_str().unwrap_or_default();
            if reply[format!("{name}_encoding")].as_str() == Some("base64") {
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .unwrap_or_default()
            } else {
                text.as_bytes().to_vec()
            }
        };
        let hints = || reply["hints"].as_array().into_iter().flatten();
        Ok(ExecOutput {
            exit_code: reply["exit_code"].as_i64().unwrap_or(-1) as i32,
            timed_out: reply["timed_out"].as_bool().unwrap_or(false),
            stdout: stream("stdout"),
            stderr: stream("stderr"),
            stdout_dropped: reply["usage"]["stdout_dropped"].as_u64().unwrap_or(0),
            stderr_dropped: reply["usage"]["stderr_dropped"].as_u64().unwrap_or(0),
            message: reply["message"].as_str().map(str::to_owned),
            limits: reply.get("limits").filter(|l| l.is_object()).cloned(),
            egress: hints()
                .filter(|h| h["kind"] == "egress_refused")
                .filter_map(|h| h["message"].as_str().map(str::to_owned))
                .collect(),
            // A kind this build does not know is left out.
            said: hints()
                .filter_map(|h| serde_json::from_value(h["kind"].clone()).ok())
                .collect(),
        })
    }

    pub async fn run_code(
        &self,
        caller: &Caller,
        id: &str,
        language: Language,
        code: String,
        timeout: Duration,
    ) -> Result<CellResult, ToolError> {
        self.owned(caller, id)?;
        let ctx = {
            let mut contexts = self.inner.contexts.lock().await;
            let key = (id.to_owned(), language.as_str());
            match contexts.get(&key) {
                Some(ctx) => ctx.clone(),
                None => {
                    let made = self
                        .json(
                            Method::POST,
                            &format!("/v1/sandboxes/{id}/contexts"),
                            Some(json!({"language": language.as_str()})),
                        )
                        .await?;
                    let ctx = made["id"].as_str().unwrap_or_default().to_owned();
                    contexts.insert(key, ctx.clone());
                    ctx
                }
            }
        };
        let r = self
            .json(
                Method::POST,
                &format!("/v1/sandboxes/{id}/contexts/{ctx}/run"),
                Some(json!({"code": code, "timeout": timeout.as_secs().max(1)})),
            )
            .await?;
        let text = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
        Ok(CellResult {
            stdout: text("stdout"),
            stderr: text("stderr"),
            value: r["value"].as_str().map(str::to_owned),
            error: (!r["error"].is_null()).then(|| CellError {
                name: r["error"]["name"].as_str().unwrap_or_default().to_owned(),
                message: r["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                traceback: r["error"]["traceback"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            }),
            restarted: r["restarted"].as_bool().unwrap_or(false),
        })
    }

    fn file_url(id: &str, path: &str) -> Result<String, ToolError> {
        // The same checks as the local files (NUL, `..`), before sending.
        cordon_session::files::SandboxPath::parse(path)?;
        Ok(format!("/v1/sandboxes/{id}/files/{}", encode_path(path)))
    }

    pub async fn write_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        data: Vec<u8>,
    ) -> Result<u64, ToolError> {
        self.owned(caller, id)?;
        let n = data.len() as u64;
        self.send(
            Method::PUT,
            &Self::file_url(id, path)?,
            "application/octet-stream",
            data,
        )
        .await?;
        Ok(n)
    }

    /// `GET .../files/PATH`: a file's bytes, or a directory's listing
    /// (JSON, by its content type).
    async fn get_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
    ) -> Result<FileAnswer, ToolError> {
        self.owned(caller, id)?;
        let url = Self::file_url(id, path)?;
        let (content_type, data) = self
            .send(Method::GET, &url, "application/octet-stream", Vec::new())
            .await?;
        if content_type.is_some_and(|t| t.starts_with("application/json")) {
            let listing = serde_json::from_slice(&data).map_err(|e| {
                ToolError::new(format!("cordon serve sent a listing that is not one: {e}"))
            })?;
            return Ok(FileAnswer::Listing(listing));
        }
        Ok(FileAnswer::File(data))
    }

    pub async fn read_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        offset: u64,
        max: usize,
    ) -> Result<(Vec<u8>, u64), ToolError> {
        let data = match self.get_file(caller, id, path).await? {
            FileAnswer::File(data) => data,
            FileAnswer::Listing(_) => {
                return Err(ToolError::new(format!("{path} is a directory"))
                    .with_fix("list it with sandbox_list_files"))
            }
        };
        let size = data.len() as u64;
        let start = offset.min(size) as usize;
        let end = (start + max).min(data.len());
        Ok((data[start..end].to_vec(), size))
    }

    pub async fn list_files(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
    ) -> Result<Listing, ToolError> {
        match self.get_file(caller, id, path).await? {
            FileAnswer::Listing(listing) => Ok(listing),
            FileAnswer::File(_) => {
                Err(ToolError::new(format!("{path} is a file, not a directory"))
                    .with_fix("read it with sandbox_read_file"))
            }
        }
    }

    pub async fn destroy(&self, caller: &Caller, id: &str) -> Result<bool, ToolError> {
        self.owned(caller, id)?;
        self.json(Method::DELETE, &format!("/v1/sandboxes/{id}"), None)
            .await?;
        self.forget(id).await;
        Ok(true)
    }

    async fn forget(&self, id: &str) {
        if let Ok(mut owners) = self.inner.owners.lock() {
            owners.remove(id);
        }
        self.inner
            .contexts
            .lock()
            .await
            .retain(|(sandbox, _), _| sandbox != id);
    }

    pub async fn shutdown(&self) -> usize {
        let ids: Vec<String> = self
            .inner
            .owners
            .lock()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        let mut n = 0;
        for id in ids {
            if self
                .json(Method::DELETE, &format!("/v1/sandboxes/{id}"), None)
                .await
                .is_ok()
            {
                n += 1;
            }
            self.forget(&id).await;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::encode_path;

    #[test]
    fn paths_are_encoded_by_segment() {
        assert_eq!(encode_path("/tmp/a b/c%d.txt"), "tmp/a%20b/c%25d.txt");
        assert_eq!(encode_path("/tmp/ü?#"), "tmp/%C3%BC%3F%23");
    }
}
