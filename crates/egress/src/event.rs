//! Events (one per attempt), sinks that receive them, and redaction.

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::{Serialize, Serializer};

/// How the sandbox asked to go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// A plain HTTP request through the forward proxy.
    Http,
    /// An HTTP CONNECT tunnel.
    Connect,
    /// A SOCKS5 CONNECT.
    Socks5,
    /// One HTTP request inside a TLS tunnel that the identity layer
    /// terminated (a host with a bound secret); the tunnel itself has its
    /// own `Connect` event.
    Https,
}

/// The proxy's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

/// One attempt to leave the sandbox and what came of it. Secrets in the path
/// are already redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgressEvent {
    /// When the attempt started (RFC 3339 in JSON).
    #[serde(serialize_with = "ser_time")]
    pub time: SystemTime,
    pub sandbox_id: String,
    pub protocol: Protocol,
    /// The HTTP method; `CONNECT` for tunnels (SOCKS5 too); empty when the
    /// request could not be parsed that far.
    pub method: String,
    /// Lower-case host (a name or an IP address); empty when unknown.
    pub host: String,
    pub port: u16,
    /// Origin-form path and query of a plain HTTP request, redacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Bytes from the sandbox towards the destination.
    pub bytes_up: u64,
    /// Bytes from the destination back into the sandbox.
    pub bytes_down: u64,
    /// From the start of the attempt to its end (in JSON: `duration_ms`).
    #[serde(rename = "duration_ms", serialize_with = "ser_ms")]
    pub duration: Duration,
    pub decision: Decision,
    /// The rule that allowed it (`allow:HOSTRULE`, `ask:approved`) or why it
    /// was refused or cut: `deny:HOSTRULE`, `unlisted`, `private-address IP`,
    /// `metadata-address IP`, `sni-mismatch`, `sni-missing`, `https-only`,
    /// `method`, `rate-limit`, `byte-cap`, `malformed: ...`,
    /// `unsupported: ...`. An allowed attempt that failed on the host side
    /// keeps its allow rule with ` (resolve-failed)` (the name did not
    /// resolve) or ` (connect-failed)` (nothing answered) appended (HTTP
    /// status 502). The identity layer appends what it did
    /// with secrets: `allow:HOST (secret NAME injected)`, `(secret NAME
    /// expired, not injected)`, `(secret NAME placeholder to a host it is
    /// not bound to)`, `(secret NAME placeholder over cleartext HTTP, not
    /// injected)`; its own refusals inside a tunnel are `upstream-tls: ...`,
    /// `client-tls: ...` and `malformed: ...`.
    pub rule: String,
    /// The HTTP status the proxy or the upstream answered, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Names of secrets (comma-separated, sorted) whose placeholder went out
    /// unchanged where it must not: to a host the secret is not bound to, or
    /// over cleartext HTTP. An incident for the caller to raise; `rule`
    /// says why (`... (secret NAME placeholder to a host it is not bound
    /// to)`). Never holds a secret's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_leak: Option<String>,
    /// What the proxy answered a refused attempt: why, and how to allow
    /// it (`cordon: egress to HOST:PORT denied (not in the allowlist). To
    /// allow it: ...`), or an allowed one that failed on the host side
    /// (the name did not resolve, nothing answered). A client often shows
    /// only the status (curl's "CONNECT tunnel failed, response 403"), so
    /// the caller says it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

impl EgressEvent {
    /// The event as one line of JSON (no trailing newline), as written to
    /// `--net-log`.
    pub fn to_json_line(&self) -> String {
        // Serializing this plain struct cannot fail; fall back to an empty
        // object rather than panic.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}

fn ser_time<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_micros(*t))
}

fn ser_ms<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Receives every event. Called synchronously from the proxy's tasks: keep it
/// quick (push to a channel, append to a buffered file).
pub trait EventSink: Send + Sync {
    /// The attempt is over; this is its whole event.
    fn record(&self, event: EgressEvent);

    /// The sandbox is about to be told of a refusal (`event.refusal` is
    /// set): called before the answer is written, so a sink that says the
    /// refusal again elsewhere (an exec's reply) has it before the client
    /// inside can have read it and ended. The attempt's whole event still
    /// comes to [`EventSink::record`] when it is over.
    fn refusing(&self, _event: &EgressEvent) {}
}

impl<F: Fn(EgressEvent) + Send + Sync> EventSink for F {
    fn record(&self, event: EgressEvent) {
        self(event)
    }
}

/// A sink that sends events into a `std::sync::mpsc` channel (events are
/// dropped once the receiver is gone).
#[derive(Debug)]
pub struct ChannelSink(Mutex<mpsc::Sender<EgressEvent>>);

impl ChannelSink {
    pub fn new(tx: mpsc::Sender<EgressEvent>) -> Self {
        Self(Mutex::new(tx))
    }
}

impl EventSink for ChannelSink {
    fn record(&self, event: EgressEvent) {
        if let Ok(tx) = self.0.lock() {
            let _ = tx.send(event);
        }
    }
}

/// A sink that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl EventSink for NullSink {
    fn record(&self, _event: EgressEvent) {}
}

/// The text that replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Query keys whose values are treated as secrets: a key matches when, lower
/// cased, it contains one of these.
const SECRET_KEY_PARTS: &[&str] = &[
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "pwd",
    "sig",
    "auth",
    "credential",
    "session",
    "code",
    "jwt",
    "bearer",
    "private",
];

fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    SECRET_KEY_PARTS.iter().any(|p| k.contains(p))
}

/// Redacts a URL, an origin-form target or an authority: the userinfo
/// (`user:pass@`) and the values of secret-looking query parameters
/// (`token`, `api_key`, `X-Amz-Signature`, `password`, ...).
pub fn redact_url(url: &str) -> String {
    let (before_frag, frag) = match url.split_once('#') {
        Some((a, _)) => (a, true),
        None => (url, false),
    };
    let (base, query) = match before_frag.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (before_frag, None),
    };
    let mut out = String::with_capacity(url.len());
    // userinfo: in "scheme://userinfo@host/..." or "userinfo@host".
    let (scheme, rest) = match base.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, base),
    };
    if let Some(s) = scheme {
        out.push_str(s);
        out.push_str("://");
    }
    let auth_end = if scheme.is_some() || !rest.starts_with('/') {
        rest.find('/').unwrap_or(rest.len())
    } else {
        0
    };
    let (authority, path) = rest.split_at(auth_end);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(REDACTED);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    out.push_str(path);
    if let Some(q) = query {
        out.push('?');
        for (i, pair) in q.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((k, v)) if !v.is_empty() && is_secret_key(&percent_decode_lossy(k)) => {
                    out.push_str(k);
                    out.push('=');
                    out.push_str(REDACTED);
                }
                _ => out.push_str(pair),
            }
        }
    }
    if frag {
        out.push('#');
        out.push_str(REDACTED);
    }
    out
}

/// Headers whose values are always secret.
pub fn is_secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || n.contains("token")
        || n.contains("api-key")
        || n.contains("apikey")
        || n.contains("secret")
        || n.contains("password")
}

/// The value to show for a header in any log: `[REDACTED]` for secret ones.
/// For `Authorization`-like headers the scheme (`Bearer`, `Basic`) is kept.
pub fn redact_header(name: &str, value: &str) -> String {
    if !is_secret_header(name) {
        return value.to_string();
    }
    let n = name.to_ascii_lowercase();
    if n == "authorization" || n == "proxy-authorization" {
        if let Some((scheme, _)) = value.split_once(' ') {
            if scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return format!("{scheme} {REDACTED}");
            }
        }
    }
    REDACTED.to_string()
}

fn percent_decode_lossy(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_urls() {
        assert_eq!(
            redact_url("/a/b?token=abc&x=1&api_key=zz&Sig=1&empty="),
            "/a/b?token=[REDACTED]&x=1&api_key=[REDACTED]&Sig=[REDACTED]&empty="
        );
        assert_eq!(
            redact_url("http://user:pw@host.test:80/p?password=hunter2#frag"),
            "http://[REDACTED]@host.test:80/p?password=[REDACTED]#[REDACTED]"
        );
        assert_eq!(redact_url("/plain/path"), "/plain/path");
        assert_eq!(redact_url("/p?%74oken=abc"), "/p?%74oken=[REDACTED]");
        assert_eq!(
            redact_url("/s3?X-Amz-Signature=abcd&X-Amz-Credential=k"),
            "/s3?X-Amz-Signature=[REDACTED]&X-Amz-Credential=[REDACTED]"
        );
    }

    #[test]
    fn redacts_headers() {
        assert_eq!(
            redact_header("Authorization", "Bearer abc"),
            "Bearer [REDACTED]"
        );
        assert_eq!(
            redact_header("Proxy-Authorization", "Basic dXNlcjpwYXNz"),
            "Basic [REDACTED]"
        );
        assert_eq!(redact_header("Cookie", "sid=1"), "[REDACTED]");
        assert_eq!(redact_header("X-Api-Key", "k"), "[REDACTED]");
        assert_eq!(redact_header("Accept", "*/*"), "*/*");
    }

    #[test]
    fn json_line() {
        let ev = EgressEvent {
            time: SystemTime::UNIX_EPOCH,
            sandbox_id: "sb".into(),
            protocol: Protocol::Connect,
            method: "CONNECT".into(),
            host: "a.test".into(),
            port: 443,
            path: None,
            bytes_up: 1,
            bytes_down: 2,
            duration: Duration::from_millis(3),
            decision: Decision::Allow,
            rule: "allow:a.test".into(),
            status: Some(200),
            secret_leak: None,
            refusal: None,
        };
        let j = ev.to_json_line();
        assert!(j.contains(r#""time":"1970-01-01T00:00:00.000000Z""#), "{j}");
        assert!(j.contains(r#""protocol":"connect""#), "{j}");
        assert!(j.contains(r#""decision":"allow""#), "{j}");
        assert!(j.contains(r#""duration_ms":3.0"#), "{j}");
        assert!(!j.contains("path"), "{j}");
    }
}
