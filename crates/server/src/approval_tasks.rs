//! What runs beside the API for approvals: the sweeper (pending approvals
//! past their time expire, grants past theirs end), the audit record of
//! every approval event, and the webhook that is told of each new
//! approval. None of them ever holds up a request.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cordon_approvals::{ApprovalEvent, Approvals};
use http_body_util::Full;
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::sync::broadcast::error::RecvError;

use crate::audit::AuditLog;

/// How often the sweeper looks for what ran out.
const SWEEP_EVERY: Duration = Duration::from_millis(500);
/// How often closed approvals are pruned, and how long they are kept
/// (the audit store keeps them for good).
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
const KEEP_CLOSED: Duration = Duration::from_secs(30 * 24 * 3600);
/// A webhook delivery gives up after this.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// A webhook URL, checked at start: `http://host[:port]/path`.
#[derive(Debug, Clone)]
pub struct Webhook {
    uri: Uri,
    authority: String,
}

impl Webhook {
    /// Plain HTTP only: the receiver is expected on the same host or a
    /// trusted network (a TLS-terminating relay for anything else).
    pub fn parse(url: &str) -> Result<Webhook, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("--approval-webhook {url}: not a URL ({e})"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!(
                "--approval-webhook {url}: only http:// URLs are supported; put a TLS relay on this host in front of an https receiver"
            ));
        }
        let authority = uri
            .authority()
            .map(|a| {
                if a.port().is_some() {
                    a.to_string()
                } else {
                    format!("{}:80", a.host())
                }
            })
            .ok_or_else(|| format!("--approval-webhook {url}: no host"))?;
        Ok(Webhook { uri, authority })
    }

    /// POST `body` (JSON) to the hook; the status or what went wrong.
    async fn post(&self, body: Vec<u8>) -> Result<u16, String> {
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| format!("connect to {}: {e}", self.authority))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let path = self
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let host = self.uri.authority().map_or("", |a| a.as_str()).to_owned();
        let req = Request::post(path)
            .header("host", host)
            .header("content-type", "application/json")
            .header("user-agent", concat!("cordon/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        Ok(resp.status().as_u16())
    }
}

/// Start the sweeper and the event follower (audit, webhook).
pub fn start(approvals: Arc<Approvals>, audit: AuditLog, webhook: Option<Webhook>) {
    let sweeper = approvals.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        loop {
            tick.tick().await;
            if let Err(e) = sweeper.sweep() {
                tracing::warn!("approvals sweep: {e}");
            }
        }
    });
    let pruner = approvals.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PRUNE_EVERY);
        loop {
            tick.tick().await;
            match pruner.prune(KEEP_CLOSED) {
                Ok(0) => {}
                Ok(n) => tracing::info!("approvals: pruned {n} closed more than 30 days ago"),
                Err(e) => tracing::warn!("approvals prune: {e}"),
            }
        }
    });
    let mut events = approvals.subscribe();
    tokio::spawn(async move {
        loop {
            let e = match events.recv().await {
                Ok(e) => e,
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(
                        "approvals: {n} events were not recorded (the recorder fell behind)"
                    );
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            audit.approval_event(&e);
            if let (Some(hook), ApprovalEvent::Created(a)) = (&webhook, &e) {
                deliver(
                    hook.clone(),
                    serde_json::to_vec(a).unwrap_or_default(),
                    a.id.clone(),
                );
            }
        }
    });
}

/// POST one new approval to the webhook, on its own task; a failure is
/// logged and nothing waits for it.
fn deliver(hook: Webhook, body: Vec<u8>, id: String) {
    tokio::spawn(async move {
        match tokio::time::timeout(WEBHOOK_TIMEOUT, hook.post(body)).await {
            Ok(Ok(status)) if (200..300).contains(&status) => {}
            Ok(Ok(status)) => {
                tracing::warn!("approval webhook: {} answered {status} for {id}", hook.uri);
                eprintln!("cordon serve: the approval webhook answered {status} for {id}");
            }
            Ok(Err(e)) => {
                tracing::warn!("approval webhook: {e}");
                eprintln!("cordon serve: the approval webhook failed for {id}: {e}");
            }
            Err(_) => eprintln!(
                "cordon serve: the approval webhook did not answer within {}s for {id}",
                WEBHOOK_TIMEOUT.as_secs()
            ),
        }
    });
}
