//! A small client of the `cordon serve` API over its unix socket (hyper's
//! HTTP/1 client on a unix stream): what `cordon sandbox` uses.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// One connection to the server.
pub struct Client {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

/// The socket: `--socket`, else `CORDON_SOCKET`, else the server's default.
pub fn socket_path(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os("CORDON_SOCKET")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(cordon_server::paths::default_socket)
}

impl Client {
    pub async fn connect(socket: &Path) -> anyhow::Result<Client> {
        let stream = tokio::net::UnixStream::connect(socket).await.with_context(|| {
            format!(
                "cannot reach `cordon serve` at {}; start it with `cordon serve`, or name its socket with --socket",
                socket.display()
            )
        })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP handshake with the server")?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Client { sender })
    }

    /// Send a request; the response with its body still to read.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        accept: Option<&str>,
        body: Vec<u8>,
    ) -> anyhow::Result<Response<Incoming>> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "cordon");
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let req = req.body(Full::new(Bytes::from(body)))?;
        self.sender
            .ready()
            .await
            .context("the server closed the connection")?;
        self.sender
            .send_request(req)
            .await
            .context("the request failed")
    }

    /// A JSON request; a JSON answer (`Value::Null` for 204). An error
    /// answer becomes an error with the server's message and fix.
    pub async fn json(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let bytes = body
            .map(serde_json::to_vec)
            .transpose()?
            .unwrap_or_default();
        let ct = body.map(|_| "application/json");
        let resp = self.send(method, path, ct, None, bytes).await?;
        let status = resp.status();
        let data = resp.into_body().collect().await?.to_bytes();
        check(status, &data)?;
        if data.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&data).context("the server's answer is not JSON")
    }
}

/// Turn an error answer into an error that says what the server said.
pub fn check(status: StatusCode, body: &[u8]) -> anyhow::Result<()> {
    if status.is_success() {
        return Ok(());
    }
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let msg = v["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    match v["error"]["fix"].as_str() {
        Some(fix) => bail!("{} {msg} ({fix})", status.as_u16()),
        None => bail!("{} {msg}", status.as_u16()),
    }
}
