//! The Streamable HTTP transport (`cordon mcp --http ADDR`): rmcp's
//! stateless service behind three checks that run before any MCP message
//! is read: POST is the only method, an `Origin` header must name a
//! loopback origin (a web page the user visits cannot drive the tools:
//! DNS rebinding and cross-site requests carry the page's origin), and a
//! bearer token from the token store of `cordon serve` (`cordon token
//! create`) names the caller, whose ceiling bounds every sandbox it makes.
//! The listener is on loopback unless `allow_remote` says otherwise.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cordon_server::tokens::TokenStore;
use cordon_server::Caller;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::tools::CordonTools;
use crate::McpError;

/// Largest request body (one JSON-RPC message; a file written with
/// `sandbox_write_file` travels in it).
const MAX_BODY: usize = 16 << 20;

#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Listen on an address other than loopback (the token is then the
    /// only guard; put TLS in front).
    pub allow_remote: bool,
    /// `tokens.json` of `cordon token`.
    pub tokens_file: PathBuf,
}

/// Whether an `Origin` header value names a page served from this
/// machine's loopback (`http://localhost:3000`, `https://127.0.0.1`,
/// `http://[::1]:8080`).
pub fn loopback_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if scheme != "http" && scheme != "https" {
        return false;
    }
    if rest.contains(['/', '@', '?', '#']) {
        return false;
    }
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, port)) if port.is_empty() || port_ok(port) => h,
            _ => return false,
        }
    } else {
        match rest.split_once(':') {
            Some((h, port)) if port_ok(&format!(":{port}")) => h,
            Some(_) => return false,
            None => rest,
        }
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

fn port_ok(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.parse::<u16>().is_ok())
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message}}).to_string();
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The checks before rmcp sees the request.
async fn guard(State(tokens): State<Arc<TokenStore>>, mut req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        let mut r = refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "this MCP endpoint takes POST only (stateless Streamable HTTP)",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        if !origin.to_str().is_ok_and(loopback_origin) {
            return refuse(
                StatusCode::FORBIDDEN,
                "requests from a web page of another origin are refused (Origin is not loopback)",
            );
        }
    }
    let secret = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .map(str::to_owned);
    let unauthorized = |why: &str| {
        let mut r = refuse(StatusCode::UNAUTHORIZED, why);
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"cordon mcp\""),
        );
        r
    };
    let Some(secret) = secret else {
        return unauthorized("a bearer token is required (cordon token create --name NAME)");
    };
    let store = tokens.clone();
    let found = tokio::task::spawn_blocking(move || store.authenticate(&secret)).await;
    match found {
        Ok(Ok(Some(record))) => {
            req.extensions_mut()
                .insert(Caller::token(record.name, record.ceiling));
            next.run(req).await
        }
        Ok(Ok(None)) => unauthorized("the bearer token is not known (revoked, or a typo)"),
        Ok(Err(e)) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the token store cannot be read: {e}"),
        ),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// Bind the address (loopback unless allowed otherwise).
pub async fn bind(opts: &HttpOptions) -> Result<tokio::net::TcpListener, McpError> {
    if !opts.addr.ip().is_loopback() && !opts.allow_remote {
        return Err(McpError::Setup(format!(
            "{} is not a loopback address; the MCP endpoint listens on loopback only (127.0.0.1, ::1) unless --allow-remote is given",
            opts.addr
        )));
    }
    tokio::net::TcpListener::bind(opts.addr)
        .await
        .map_err(|e| McpError::Setup(format!("cannot listen on {}: {e}", opts.addr)))
}

/// Serve MCP on `listener` until `stop` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    backend: Backend,
    opts: &HttpOptions,
    approvals: Option<crate::Approvals>,
    stop: CancellationToken,
) -> Result<(), McpError> {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_BODY)
        .with_cancellation_token(stop.child_token());
    if opts.allow_remote {
        // The Host header is then whatever name clients use for this
        // machine; the token and the Origin check still hold.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        // Stateless: no stream carries a question back to the client, so
        // an ask is refused here (the structured error says what would
        // allow it).
        move || Ok(CordonTools::new(backend.clone(), None).with_approvals(approvals.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let tokens = Arc::new(TokenStore::new(opts.tokens_file.clone()));
    let app = axum::Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn_with_state(tokens, guard));
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
        .map_err(|e| McpError::Setup(format!("the HTTP listener failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::loopback_origin;

    #[test]
    fn only_loopback_origins_pass() {
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://127.0.0.2:8080",
            "http://[::1]:7701",
            "http://[::1]",
        ] {
            assert!(loopback_origin(ok), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "https://localhost.evil.example",
            "http://127.0.0.1.evil.example",
            "http://localhost@evil.example",
            "http://evil.example/localhost",
            "file://localhost",
            "http://10.0.0.1",
            "http://[::2]",
            "http://localhost:",
            "http://localhost:99999",
            "",
        ] {
            assert!(!loopback_origin(bad), "{bad}");
        }
    }
}
