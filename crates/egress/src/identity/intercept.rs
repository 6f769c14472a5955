//! One intercepted tunnel: TLS toward the sandbox with a leaf from the
//! per-run CA, TLS toward the origin verified against the trust store, and
//! an HTTP/1.1 loop in between that swaps placeholders for values in each
//! request, turns values back into placeholders in each response, and
//! streams bodies both ways. One event per request.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::timeout;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use zeroize::{Zeroize, Zeroizing};

use super::substitute::{Loc, Outcome, Plan, Rewrite, Scrub};
use super::Inner;
use crate::event::{redact_url, Decision, EgressEvent, Protocol};
use crate::http1::{
    parse_origin_request_head, parse_response_head, BodyKind, ChunkedScanner, RequestError,
    RequestHead, ResponseHead, Target, MAX_HEAD,
};
use crate::proxy::{status_text, EventWriter, InterceptedTunnel, RequestGate};
use crate::stream::{BufStream, TunnelStream, READ_CHUNK};

/// Waiting for the next request on a kept-alive connection.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// TLS handshakes, a request head once started, request body pieces.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);
/// Waiting for the origin's response head or the next body piece.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);

struct Tunnel {
    inner: Arc<Inner>,
    sandbox_id: String,
    host: String,
    port: u16,
    rule: String,
    events: EventWriter,
}

/// One request's event; written when dropped, whatever path ended it.
struct Record<'a> {
    tun: &'a Tunnel,
    ev: Option<EgressEvent>,
    start: Instant,
}

impl Tunnel {
    fn record(&self, method: &str) -> Record<'_> {
        Record {
            tun: self,
            ev: Some(EgressEvent {
                time: SystemTime::now(),
                sandbox_id: self.sandbox_id.clone(),
                protocol: Protocol::Https,
                method: method.to_string(),
                host: self.host.clone(),
                port: self.port,
                path: None,
                bytes_up: 0,
                bytes_down: 0,
                duration: Duration::ZERO,
                decision: Decision::Allow,
                rule: self.rule.clone(),
                status: None,
                secret_leak: None,
                refusal: None,
            }),
            start: Instant::now(),
        }
    }
}

impl Record<'_> {
    fn ev(&mut self) -> &mut EgressEvent {
        // Always Some until drop.
        self.ev.get_or_insert_with(|| EgressEvent {
            time: SystemTime::now(),
            sandbox_id: String::new(),
            protocol: Protocol::Https,
            method: String::new(),
            host: String::new(),
            port: 0,
            path: None,
            bytes_up: 0,
            bytes_down: 0,
            duration: Duration::ZERO,
            decision: Decision::Deny,
            rule: String::new(),
            status: None,
            secret_leak: None,
            refusal: None,
        })
    }
    fn up(&mut self, n: usize) {
        self.ev().bytes_up += n as u64;
    }
    fn down(&mut self, n: usize) {
        self.ev().bytes_down += n as u64;
    }
    fn deny(&mut self, rule: String, status: Option<u16>) {
        let ev = self.ev();
        ev.decision = Decision::Deny;
        ev.rule = rule;
        ev.status = status;
    }
    fn note(&mut self, outcome: &Outcome) {
        let (note, leaked) = outcome.note(&self.tun.inner.bindings, &self.tun.host);
        let ev = self.ev();
        if !note.is_empty() {
            ev.rule = format!("{} {note}", ev.rule);
        }
        if !leaked.is_empty() {
            ev.secret_leak = Some(leaked.join(","));
        }
    }
}

impl Drop for Record<'_> {
    fn drop(&mut self) {
        if let Some(mut ev) = self.ev.take() {
            ev.duration = self.start.elapsed();
            self.tun.events.record(ev);
        }
    }
}

pub(crate) async fn run(inner: Arc<Inner>, t: InterceptedTunnel) -> io::Result<()> {
    let InterceptedTunnel {
        sandbox_id,
        host,
        port,
        rule,
        client,
        upstream,
        events,
        gate,
    } = t;
    let tun = Tunnel {
        inner,
        sandbox_id,
        host,
        port,
        rule,
        events,
    };
    let Some((mut c, mut u)) = handshakes(&tun, client, upstream).await? else {
        return Ok(());
    };
    serve_requests(&tun, &mut c, &mut u, &gate).await;
    let _ = c.s.shutdown().await;
    Ok(())
}

/// The TLS handshakes with the sandbox (as the origin, with a certificate
/// of cordon's CA) and with the origin (verified against the real trust
/// store). `None` when one failed: recorded, and the sandbox told why
/// where it can be.
async fn handshakes(
    tun: &Tunnel,
    client: TunnelStream,
    upstream: tokio::net::TcpStream,
) -> io::Result<
    Option<(
        BufStream<tokio_rustls::server::TlsStream<TunnelStream>>,
        BufStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
    )>,
> {
    let server_cfg = match tun.inner.ca.server_config(&tun.host) {
        Ok(c) => c,
        Err(e) => {
            tun.record("").deny(format!("client-tls: {e}"), None);
            return Err(io::Error::other(e.to_string()));
        }
    };
    let name = ServerName::try_from(tun.host.clone()).map_err(io::Error::other)?;
    let accept = timeout(
        HANDSHAKE_TIMEOUT,
        TlsAcceptor::from(server_cfg).accept(client),
    );
    let connect = timeout(
        HANDSHAKE_TIMEOUT,
        TlsConnector::from(tun.inner.upstream.clone()).connect(name, upstream),
    );
    // Both handshakes at once: one round trip less. Nothing of the
    // sandbox's is sent upstream before both have succeeded, and a failed
    // client handshake ends the tunnel without waiting for the origin.
    tokio::pin!(accept);
    tokio::pin!(connect);
    let mut upstream_done = None;
    let c = loop {
        tokio::select! {
            c = &mut accept => break c,
            u = &mut connect, if upstream_done.is_none() => upstream_done = Some(u),
        }
    };
    let c = match c {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            // E.g. a client that trusts only its own CA bundle: it fails
            // closed here, before any request is read or sent.
            tun.record("").deny(format!("client-tls: {e}"), None);
            return Ok(None);
        }
        Err(_) => {
            tun.record("")
                .deny("client-tls: handshake not completed in time".into(), None);
            return Ok(None);
        }
    };
    let mut c = BufStream::new(c);
    let u = match upstream_done {
        Some(u) => u,
        None => connect.await,
    };
    let u = match u {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => {
            refuse_upstream(tun, &mut c, &e.to_string()).await;
            return Ok(None);
        }
        Err(_) => {
            refuse_upstream(tun, &mut c, "handshake not completed in time").await;
            return Ok(None);
        }
    };
    Ok(Some((c, BufStream::new(u))))
}

/// The sandbox's requests on the tunnel, one after another, until it
/// closes, sends something malformed, or passes a rate limit.
async fn serve_requests<C, U>(
    tun: &Tunnel,
    c: &mut BufStream<C>,
    u: &mut BufStream<U>,
    gate: &RequestGate,
) where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut first = true;
    loop {
        let req = match read_head(c, &tun.host, tun.port, first).await {
            Head::Closed => break,
            Head::Bad(e) => {
                let mut rec = tun.record(&e.method);
                rec.up(c.data().len().min(MAX_HEAD));
                rec.deny(format!("malformed: {}", e.reason), Some(e.status));
                let msg = format!(
                    "cordon: malformed request refused: {}. Inside an intercepted HTTPS tunnel the proxy speaks HTTP/1.1 (origin-form requests).",
                    e.reason
                );
                let n = answer(&mut c.s, e.status, &msg).await;
                rec.down(n);
                break;
            }
            Head::Req(r) => r,
        };
        c.consume(req.head_len);
        // Every request counts against the rate limits, as a plain one
        // does; the tunnel's admission counted the first.
        if !first {
            if let Err(r) = gate.admit(&tun.host, tun.port) {
                let mut rec = tun.record(&req.method);
                rec.up(req.head_len);
                if let Target::Absolute { path, .. } = &req.target {
                    rec.ev().path = Some(redact_url(path));
                }
                rec.deny(r.rule, Some(429));
                let n = answer_retry(&mut c.s, 429, &r.message, r.retry_after).await;
                rec.down(n);
                break;
            }
        }
        first = false;
        if !request(tun, c, u, req).await {
            break;
        }
    }
}

/// The origin's certificate did not verify: nothing is sent upstream; the
/// sandbox's first request gets a 502 that says why.
async fn refuse_upstream<C: AsyncRead + AsyncWrite + Unpin>(
    tun: &Tunnel,
    c: &mut BufStream<C>,
    err: &str,
) {
    let head = read_head(c, &tun.host, tun.port, true).await;
    let mut rec = tun.record("");
    if let Head::Req(r) = &head {
        rec.ev().method = r.method.clone();
        if let Target::Absolute { path, .. } = &r.target {
            rec.ev().path = Some(redact_url(path));
        }
        rec.up(r.head_len);
    }
    rec.deny(format!("upstream-tls: {err}"), Some(502));
    let msg = format!(
        "cordon: the TLS connection to {}:{} failed verification against the host's trust store ({err}); nothing was sent.",
        tun.host, tun.port
    );
    let n = answer(&mut c.s, 502, &msg).await;
    rec.down(n);
    let _ = c.s.shutdown().await;
}

enum Head {
    Req(RequestHead),
    Closed,
    Bad(RequestError),
}

async fn read_head<S: AsyncRead + Unpin>(
    c: &mut BufStream<S>,
    host: &str,
    port: u16,
    first: bool,
) -> Head {
    loop {
        match parse_origin_request_head(c.data(), host, port) {
            Ok(Some(h)) => return Head::Req(h),
            Err(e) => return Head::Bad(e),
            Ok(None) => {}
        }
        let started = !c.data().is_empty();
        let limit = if started || first {
            HANDSHAKE_TIMEOUT
        } else {
            IDLE_TIMEOUT
        };
        match timeout(limit, c.fill(MAX_HEAD + 1)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) if !started => return Head::Closed,
            Ok(_) => {
                return Head::Bad(RequestError {
                    status: 400,
                    reason: "incomplete request head".into(),
                    method: String::new(),
                })
            }
            Err(_) if !started => return Head::Closed,
            Err(_) => {
                return Head::Bad(RequestError {
                    status: 408,
                    reason: "request head not completed in time".into(),
                    method: String::new(),
                })
            }
        }
    }
}

/// Writes a plain-text answer from the proxy and asks to close.
async fn answer<W: AsyncWrite + Unpin>(w: &mut W, status: u16, message: &str) -> usize {
    answer_retry(w, status, message, None).await
}

/// [`answer`], with a `Retry-After` (whole seconds, at least 1) when given.
async fn answer_retry<W: AsyncWrite + Unpin>(
    w: &mut W,
    status: u16,
    message: &str,
    retry_after: Option<Duration>,
) -> usize {
    let body = format!("{message}\n");
    let retry = retry_after
        .map(|r| {
            format!(
                "Retry-After: {}\r\n",
                r.as_secs_f64().ceil().max(1.0) as u64
            )
        })
        .unwrap_or_default();
    let out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Cordon-Egress: refused\r\n{retry}\r\n{body}",
        status_text(status),
        body.len()
    );
    let _ = w.write_all(out.as_bytes()).await;
    let _ = w.flush().await;
    out.len()
}

enum Fail {
    /// Nothing was sent to the sandbox yet: answer 502 with this.
    Before(String),
    /// The origin closed an idle kept-alive connection before answering:
    /// close the sandbox's connection too so its client retries.
    IdleClosed,
    /// The response was under way: only closing is left.
    After,
    /// The origin answered with an encoded body (the coding named), which
    /// cannot be scanned for values: refused, nothing of it passed on.
    Encoded(String),
}

/// Forwards one request with placeholders swapped, and its response.
/// Returns whether the tunnel can carry another request.
async fn request<C, U>(
    tun: &Tunnel,
    c: &mut BufStream<C>,
    u: &mut BufStream<U>,
    req: RequestHead,
) -> bool
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut rec = tun.record(&req.method);
    rec.up(req.head_len);
    if let Target::Absolute { path, .. } = &req.target {
        // The path as the sandbox sent it (placeholders, never values).
        rec.ev().path = Some(redact_url(path));
    }
    let mut outcome = Outcome::default();
    let result = exchange(tun, c, u, &req, &mut rec, &mut outcome).await;
    rec.note(&outcome);
    match result {
        Ok((status, keep)) => {
            rec.ev().status = Some(status);
            keep
        }
        Err(Fail::Before(msg)) => {
            rec.ev().status = Some(502);
            rec.ev().rule = format!("{} (upstream-failed)", rec.ev().rule);
            let m = format!(
                "cordon: the request to {}:{} failed: {msg}.",
                tun.host, tun.port
            );
            let n = answer(&mut c.s, 502, &m).await;
            rec.down(n);
            false
        }
        Err(Fail::IdleClosed) => {
            rec.ev().rule = format!("{} (upstream-closed)", rec.ev().rule);
            false
        }
        Err(Fail::After) => false,
        Err(Fail::Encoded(coding)) => {
            let ev = rec.ev();
            ev.status = Some(502);
            ev.decision = Decision::Deny;
            ev.rule = format!(
                "{} (response refused: Content-Encoding {coding} cannot be scanned for secret values)",
                ev.rule
            );
            let m = format!(
                "cordon: the response from {}:{} was refused: its body is encoded (Content-Encoding: {coding}) and cannot be checked for secret values, so nothing of it was passed on. The proxy asks for unencoded bodies (Accept-Encoding: identity); this origin ignored that.",
                tun.host, tun.port
            );
            let n = answer(&mut c.s, 502, &m).await;
            rec.down(n);
            false
        }
    }
}

async fn exchange<C, U>(
    tun: &Tunnel,
    c: &mut BufStream<C>,
    u: &mut BufStream<U>,
    req: &RequestHead,
    rec: &mut Record<'_>,
    outcome: &mut Outcome,
) -> Result<(u16, bool), Fail>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let bindings = &tun.inner.bindings;
    let matcher = &tun.inner.matcher;
    let plan = Plan::tls(bindings, &tun.host, tun.port, Instant::now());
    let before = |m: &str| Fail::Before(m.to_string());

    // The head, with placeholders swapped where the plan allows.
    let mut out_req = req.clone();
    let in_headers = matcher.inject(bindings, &plan, Loc::Header);
    for (_, v) in out_req.headers.iter_mut() {
        let mut nv = Vec::with_capacity(v.len() + 64);
        in_headers.replace_all(v, &mut nv, outcome);
        *v = nv;
    }
    // Response bodies are scanned for values on their way back, which an
    // encoded (compressed) body would defeat: ask for unencoded ones.
    out_req
        .headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("accept-encoding"));
    out_req
        .headers
        .push(("Accept-Encoding".into(), b"identity".to_vec()));
    if let Target::Absolute { path, .. } = &mut out_req.target {
        let mut np = Vec::with_capacity(path.len() + 64);
        matcher
            .inject(bindings, &plan, Loc::Target)
            .replace_all(path.as_bytes(), &mut np, outcome);
        // ASCII in, ASCII out (values are percent-encoded in the target).
        *path = String::from_utf8_lossy(&np).into_owned();
        np.zeroize();
    }
    if !out_req.has_host {
        let h = if tun.host.contains(':') {
            format!("[{}]", tun.host)
        } else {
            tun.host.clone()
        };
        let a = if tun.port == 443 {
            h
        } else {
            format!("{h}:{}", tun.port)
        };
        out_req.headers.insert(0, ("Host".into(), a.into_bytes()));
        out_req.has_host = true;
    }
    // Body framing: a substitution that changes the length re-frames a
    // Content-Length body as chunked; a chunked body is decoded and
    // re-chunked so placeholders split by chunk boundaries are found.
    let inject_body = req.body != BodyKind::None && plan.injects(Loc::Body);
    let reframe =
        inject_body && (req.body == BodyKind::Chunked || plan.changes_length(bindings, Loc::Body));
    if reframe && matches!(req.body, BodyKind::Length(_)) {
        out_req
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("content-length"));
        out_req
            .headers
            .push(("Transfer-Encoding".into(), b"chunked".to_vec()));
    }
    let mut head = Zeroizing::new(Vec::with_capacity(1024));
    out_req.write_upstream(&mut head);
    for (_, v) in out_req.headers.iter_mut() {
        v.zeroize();
    }
    if let Target::Absolute { path, .. } = &mut out_req.target {
        path.zeroize();
    }
    if req.expect_continue {
        c.s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .map_err(|_| before("client went away"))?;
        c.s.flush().await.map_err(|_| before("client went away"))?;
    }
    u.s.write_all(&head)
        .await
        .map_err(|e| before(&format!("sending to upstream: {e}")))?;
    drop(head);
    send_body(tun, c, u, req.body, reframe, &plan, rec, outcome).await?;
    u.s.flush()
        .await
        .map_err(|e| before(&format!("sending to upstream: {e}")))?;
    relay_response(tun, c, u, req, rec, outcome).await
}

/// How a body is read.
enum BodyIn {
    Len(u64),
    /// Chunked, passed through as it is (only scanned).
    Raw(ChunkedScanner),
    /// Chunked, decoded (and sent on re-chunked).
    Decode(ChunkedScanner),
    /// Until the sender closes (responses only).
    UntilClose,
}

impl BodyIn {
    /// Takes the part of `data` that belongs to the body: its bytes (or,
    /// when decoding, its data) go to `piece`. Returns how many bytes of
    /// `data` were used and whether the body is complete.
    fn take(&mut self, data: &[u8], piece: &mut Vec<u8>) -> Result<(usize, bool), &'static str> {
        Ok(match self {
            Self::Len(left) => {
                let n = (data.len() as u64).min(*left) as usize;
                *left -= n as u64;
                piece.extend_from_slice(&data[..n]);
                (n, *left == 0)
            }
            Self::Raw(s) => {
                let n = s.feed(data)?;
                piece.extend_from_slice(&data[..n]);
                (n, s.is_done())
            }
            Self::Decode(s) => {
                let n = s.decode(data, piece)?;
                (n, s.is_done())
            }
            Self::UntilClose => {
                piece.extend_from_slice(data);
                (data.len(), false)
            }
        })
    }
}

/// Appends body data to `out`, as one chunk when `chunked` (and the last
/// chunk when `done`).
fn frame(chunked: bool, data: &[u8], done: bool, out: &mut Vec<u8>) {
    if !chunked {
        out.extend_from_slice(data);
        return;
    }
    if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    if done {
        out.extend_from_slice(b"0\r\n\r\n");
    }
}

#[allow(clippy::too_many_arguments)]
async fn send_body<C, U>(
    tun: &Tunnel,
    c: &mut BufStream<C>,
    u: &mut BufStream<U>,
    kind: BodyKind,
    reframe: bool,
    plan: &Plan,
    rec: &mut Record<'_>,
    outcome: &mut Outcome,
) -> Result<(), Fail>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut input = match kind {
        BodyKind::None | BodyKind::UntilClose => return Ok(()),
        BodyKind::Length(n) => BodyIn::Len(n),
        BodyKind::Chunked if reframe => BodyIn::Decode(ChunkedScanner::new()),
        BodyKind::Chunked => BodyIn::Raw(ChunkedScanner::new()),
    };
    let inject = tun
        .inner
        .matcher
        .inject(&tun.inner.bindings, plan, Loc::Body);
    let mut carry: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    let mut piece: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::with_capacity(READ_CHUNK));
    let mut sub: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::with_capacity(READ_CHUNK + 64));
    let mut out: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::with_capacity(READ_CHUNK + 64));
    loop {
        if c.data().is_empty() {
            match timeout(HANDSHAKE_TIMEOUT, c.fill(READ_CHUNK)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return Err(Fail::Before("the request body ended early".into())),
            }
        }
        piece.clear();
        let (n, done) = input
            .take(c.data(), &mut piece)
            .map_err(|e| Fail::Before(e.into()))?;
        c.consume(n);
        rec.up(n);
        sub.clear();
        inject.stream(&mut carry, &piece, done, &mut sub, outcome);
        out.clear();
        frame(reframe, &sub, done, &mut out);
        if !out.is_empty() {
            u.s.write_all(&out)
                .await
                .map_err(|e| Fail::Before(format!("sending to upstream: {e}")))?;
        }
        if done {
            return Ok(());
        }
    }
}

/// The content coding of a response body, when it is not `identity`.
fn content_coding(headers: &[(String, Vec<u8>)]) -> Option<String> {
    let mut codings = Vec::new();
    for (n, v) in headers {
        if !n.eq_ignore_ascii_case("content-encoding") {
            continue;
        }
        for t in String::from_utf8_lossy(v).split(',') {
            let t = t.trim();
            if !t.is_empty() && !t.eq_ignore_ascii_case("identity") {
                // Shown in the event and the answer: keep it short and plain.
                codings.push(
                    t.chars()
                        .filter(|c| c.is_ascii_graphic())
                        .take(32)
                        .collect::<String>(),
                );
            }
        }
    }
    (!codings.is_empty()).then(|| codings.join(", "))
}

async fn relay_response<C, U>(
    tun: &Tunnel,
    c: &mut BufStream<C>,
    u: &mut BufStream<U>,
    req: &RequestHead,
    rec: &mut Record<'_>,
    outcome: &mut Outcome,
) -> Result<(u16, bool), Fail>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    // Every byte from the origin is scrubbed: status lines (reason phrase
    // too), interim and final heads, bodies; trailers are never passed on.
    let scrub = Scrub::new(&tun.inner.scrub);
    let mut resp = final_head(&scrub, c, u, req, rec, outcome).await?;
    if resp.body != BodyKind::None {
        if let Some(coding) = content_coding(&resp.headers) {
            return Err(Fail::Encoded(coding));
        }
    }
    let whole = scrub_whole_body(&scrub, u, &mut resp, outcome);
    let out_framing = reframe(&mut resp, req, &scrub, whole.is_some());
    // The origin connection cannot be replaced inside a tunnel (it is the
    // one pinned address): when it cannot carry another request, neither
    // can the tunnel.
    let keep = req.keep_alive && resp.reusable && out_framing != Framing::Close;
    let mut out = Vec::with_capacity(READ_CHUNK + 1024);
    let mut raw = Vec::with_capacity(1024);
    resp.write_client(&mut raw, !keep, req.minor_version);
    scrub.replace_all(&raw, &mut out, outcome);
    raw.zeroize();
    for (_, v) in resp.headers.iter_mut() {
        v.zeroize();
    }
    let read_whole = whole.is_some();
    if let Some(body) = whole {
        out.extend_from_slice(&body);
    }
    let input = match resp.body {
        BodyKind::None => None,
        BodyKind::Length(_) if read_whole => None,
        BodyKind::Length(n) => Some(BodyIn::Len(n)),
        BodyKind::Chunked => Some(BodyIn::Decode(ChunkedScanner::new())),
        BodyKind::UntilClose => Some(BodyIn::UntilClose),
    };
    let chunked = out_framing == Framing::Chunked;
    relay_body(&scrub, c, u, input, chunked, out, rec, outcome).await?;
    c.s.flush().await.map_err(|_| Fail::After)?;
    let keep = keep && u.data().is_empty();
    Ok((resp.status, keep))
}

/// The origin's final response head: interim 1xx heads are scrubbed and
/// passed on to an HTTP/1.1 client, skipped for an HTTP/1.0 one.
async fn final_head<C, U>(
    scrub: &Scrub<'_>,
    c: &mut BufStream<C>,
    u: &mut BufStream<U>,
    req: &RequestHead,
    rec: &mut Record<'_>,
    outcome: &mut Outcome,
) -> Result<ResponseHead, Fail>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let head_request = req.method == "HEAD";
    let mut interim_sent = false;
    loop {
        let parsed = loop {
            match parse_response_head(u.data(), head_request) {
                Ok(Some(r)) => break r,
                Ok(None) => {}
                Err(e) => return Err(Fail::Before(e)),
            }
            match timeout(RESPONSE_TIMEOUT, u.fill(MAX_HEAD + 1)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) if u.data().is_empty() && !interim_sent => return Err(Fail::IdleClosed),
                Ok(_) => {
                    return Err(Fail::Before(
                        "upstream closed the connection mid-response".into(),
                    ))
                }
                Err(_) => return Err(Fail::Before("upstream did not answer in time".into())),
            }
        };
        u.consume(parsed.head_len);
        if (100..200).contains(&parsed.status) {
            if parsed.status == 101 {
                return Err(Fail::Before(
                    "upstream switched protocols (WebSocket and other upgrades are not relayed on intercepted tunnels)"
                        .into(),
                ));
            }
            if req.minor_version == 0 {
                // An HTTP/1.0 client gets no interim responses.
                continue;
            }
            let mut raw = Vec::new();
            parsed.write_client(&mut raw, false, req.minor_version);
            let mut interim = Vec::with_capacity(raw.len());
            scrub.replace_all(&raw, &mut interim, outcome);
            raw.zeroize();
            c.s.write_all(&interim).await.map_err(|_| Fail::After)?;
            rec.down(interim.len());
            interim_sent = true;
            continue;
        }
        return Ok(parsed);
    }
}

/// Values that come back from the origin go back to their placeholders,
/// in headers and in the body. A Content-Length body already read whole
/// with the head (no waiting for it), where scrubbing can change its
/// length, is scrubbed here at once and keeps an exact Content-Length.
fn scrub_whole_body<U>(
    scrub: &Scrub<'_>,
    u: &mut BufStream<U>,
    resp: &mut ResponseHead,
    outcome: &mut Outcome,
) -> Option<Vec<u8>>
where
    U: AsyncRead + Unpin,
{
    let BodyKind::Length(n) = resp.body else {
        return None;
    };
    if !scrub.changes_length() || (u.data().len() as u64) < n {
        return None;
    }
    let n = n as usize;
    let mut body = Vec::with_capacity(n + 64);
    scrub.replace_all(&u.data()[..n], &mut body, outcome);
    u.consume(n);
    for (name, v) in resp.headers.iter_mut() {
        if name.eq_ignore_ascii_case("content-length") {
            *v = body.len().to_string().into_bytes();
        }
    }
    Some(body)
}

/// How the body goes to the client, with the head's framing headers to
/// match. Where scrubbing can change a body's length, a Content-Length
/// body not read whole is re-framed: chunked for HTTP/1.1 clients,
/// delimited by closing for HTTP/1.0 ones. A chunked body is decoded and
/// chunked again (so a value split by the origin's chunks is found).
fn reframe(
    resp: &mut ResponseHead,
    req: &RequestHead,
    scrub: &Scrub<'_>,
    read_whole: bool,
) -> Framing {
    let out_framing = match resp.body {
        BodyKind::None => Framing::Same,
        BodyKind::Length(_) if read_whole => Framing::Same,
        BodyKind::Length(_) if !scrub.changes_length() => Framing::Same,
        BodyKind::Length(_) | BodyKind::Chunked if req.minor_version >= 1 => Framing::Chunked,
        BodyKind::Length(_) | BodyKind::Chunked | BodyKind::UntilClose => Framing::Close,
    };
    match (resp.body, out_framing) {
        (BodyKind::Length(_), Framing::Chunked) => {
            resp.headers
                .retain(|(n, _)| !n.eq_ignore_ascii_case("content-length"));
            resp.headers
                .push(("Transfer-Encoding".into(), b"chunked".to_vec()));
        }
        (_, Framing::Close) => resp.headers.retain(|(n, _)| {
            !n.eq_ignore_ascii_case("content-length")
                && !n.eq_ignore_ascii_case("transfer-encoding")
        }),
        _ => {}
    }
    out_framing
}

/// Relay the rest of the body after `out` (the head, and a whole body
/// already scrubbed), scrubbed as a stream so that a value split across
/// reads is still found, and framed for the client.
#[allow(clippy::too_many_arguments)]
async fn relay_body<C, U>(
    scrub: &Scrub<'_>,
    c: &mut BufStream<C>,
    u: &mut BufStream<U>,
    mut input: Option<BodyIn>,
    chunked: bool,
    mut out: Vec<u8>,
    rec: &mut Record<'_>,
    outcome: &mut Outcome,
) -> Result<(), Fail>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut carry: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    let mut piece: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::with_capacity(READ_CHUNK));
    let mut sub = Vec::with_capacity(READ_CHUNK + 64);
    let mut eof = false;
    loop {
        let mut done = true;
        if let Some(input) = input.as_mut() {
            piece.clear();
            let (n, end) = if eof {
                (0, true)
            } else {
                input.take(u.data(), &mut piece).map_err(|_| Fail::After)?
            };
            u.consume(n);
            done = end;
            sub.clear();
            scrub.stream(&mut carry, &piece, done, &mut sub, outcome);
            frame(chunked, &sub, done, &mut out);
        }
        if !out.is_empty() {
            c.s.write_all(&out).await.map_err(|_| Fail::After)?;
            rec.down(out.len());
            out.clear();
        }
        if done {
            break;
        }
        match timeout(RESPONSE_TIMEOUT, u.fill(READ_CHUNK)).await {
            Ok(Ok(n)) if n > 0 => {}
            // A close-delimited body ends when the origin closes (with or
            // without close_notify).
            Ok(_) if matches!(input, Some(BodyIn::UntilClose)) => eof = true,
            _ => return Err(Fail::After),
        }
    }
    Ok(())
}

/// How a response body is framed toward the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// As the origin framed it (no body, or a length that cannot change).
    Same,
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the proxy closes the connection.
    Close,
}
