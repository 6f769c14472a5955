//! HTTP/1.x request and response heads, strictly validated for a forward
//! proxy, and a chunked-body scanner (where the body ends, and its data).
//!
//! Tokenizing is done by `httparse`; this module adds what a proxy must
//! check on top of it (request smuggling shapes, target forms, Host
//! agreement, hop-by-hop headers).

use std::fmt;

use crate::rules::DestHost;

/// Longest request line accepted (414 beyond).
pub const MAX_REQUEST_LINE: usize = 8 * 1024;
/// Largest request or response head accepted (431 / 502 beyond).
pub const MAX_HEAD: usize = 64 * 1024;
/// Most header fields in one head.
pub const MAX_HEADERS: usize = 100;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    Chunked,
    /// Until the sender closes (responses only).
    UntilClose,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `http://host[:port]/path?query` (absolute-form).
    Absolute {
        host: String,
        is_ip: bool,
        port: u16,
        /// Origin-form path and query to send upstream (`/` when empty).
        path: String,
        /// The request carried `user:pass@` (stripped, never forwarded).
        had_userinfo: bool,
    },
    /// `host:port` of a CONNECT.
    Authority {
        host: String,
        is_ip: bool,
        port: u16,
    },
}

impl Target {
    pub fn host(&self) -> &str {
        match self {
            Self::Absolute { host, .. } | Self::Authority { host, .. } => host,
        }
    }
    pub fn port(&self) -> u16 {
        match self {
            Self::Absolute { port, .. } | Self::Authority { port, .. } => *port,
        }
    }
    pub fn is_ip(&self) -> bool {
        match self {
            Self::Absolute { is_ip, .. } | Self::Authority { is_ip, .. } => *is_ip,
        }
    }
}

/// A parsed, validated request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub target: Target,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Headers to forward (hop-by-hop and `Proxy-*` removed), in order.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: BodyKind,
    /// Whether the client connection may stay open after this exchange.
    pub keep_alive: bool,
    /// The client sent `Expect: 100-continue` (removed from `headers`).
    pub expect_continue: bool,
    /// Whether a Host header was present (one is added upstream if not).
    pub has_host: bool,
    /// Bytes the head took in the buffer.
    pub head_len: usize,
}

/// Why a request is refused, with the status to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    pub status: u16,
    pub reason: String,
    /// What was parsed before the error, for the event.
    pub method: String,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.reason, self.status)
    }
}

fn bad(status: u16, reason: impl Into<String>) -> RequestError {
    RequestError {
        status,
        reason: reason.into(),
        method: String::new(),
    }
}

/// Hop-by-hop headers a proxy must not forward (RFC 9110 7.6.1), plus
/// `Proxy-*` and `Expect`, which the proxy handles itself.
fn is_hop_by_hop(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "connection" | "keep-alive" | "te" | "trailer" | "upgrade" | "expect"
    ) || n.starts_with("proxy-")
}

/// Parses a request head at the start of `buf`. `Ok(None)` means more bytes
/// are needed; errors carry the status to answer (400, 414, 417, 431, 501,
/// 505).
pub fn parse_request_head(buf: &[u8]) -> Result<Option<RequestHead>, RequestError> {
    parse_head(buf, None)
}

/// Parses an origin-form request head (`GET /path HTTP/1.1`) as sent inside
/// a TLS tunnel to `host:port` that the proxy terminated. The target becomes
/// [`Target::Absolute`] for `host:port`; a Host header must name that host
/// (its port defaults to 443); absolute-form targets and CONNECT are refused.
pub fn parse_origin_request_head(
    buf: &[u8],
    host: &str,
    port: u16,
) -> Result<Option<RequestHead>, RequestError> {
    parse_head(buf, Some((host, port)))
}

fn parse_head(
    buf: &[u8],
    origin: Option<(&str, u16)>,
) -> Result<Option<RequestHead>, RequestError> {
    let line_end = buf.iter().position(|&b| b == b'\n');
    match line_end {
        None if buf.len() > MAX_REQUEST_LINE => {
            return Err(bad(414, "request line too long"));
        }
        Some(n) if n > MAX_REQUEST_LINE => return Err(bad(414, "request line too long")),
        _ => {}
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > MAX_HEAD {
                return Err(bad(431, "request head too large"));
            }
            // httparse reads headers only once the line is complete, so a
            // NUL or bare CR in an unfinished head is found here first.
            if let Some(e) = scan_incomplete(buf) {
                return Err(e);
            }
            return Ok(None);
        }
        Err(e) => return Err(explain_parse_error(buf, e)),
    };
    if head_len > MAX_HEAD {
        return Err(bad(431, "request head too large"));
    }
    let method = req.method.unwrap_or_default().to_string();
    let with_method = |mut e: RequestError| {
        e.method = method.clone();
        e
    };
    let minor_version = req.version.unwrap_or(1);
    let path = req.path.unwrap_or_default();
    let target = if let Some((host, port)) = origin {
        parse_origin_target(&method, path, host, port).map_err(with_method)?
    } else if method == "CONNECT" {
        parse_authority_target(path).map_err(with_method)?
    } else {
        parse_absolute_target(path).map_err(with_method)?
    };
    let default_port = if origin.is_some() { 443 } else { 80 };

    let facts = read_headers(req.headers).map_err(with_method)?;
    refuse_ambiguous(&facts, minor_version).map_err(with_method)?;
    if let Some(h) = facts.host {
        check_host_header(h, &target, default_port).map_err(with_method)?;
    }
    let HeaderFacts {
        mut headers,
        host_count,
        content_length,
        chunked,
        connection_tokens,
        expect_continue,
        ..
    } = facts;
    // Drop headers that Connection names as hop-by-hop.
    if !connection_tokens.is_empty() {
        headers.retain(|(n, _)| {
            let l = n.to_ascii_lowercase();
            !connection_tokens.contains(&l)
                || l == "host"
                || l == "content-length"
                || l == "transfer-encoding"
        });
    }
    let keep_alive = if minor_version == 0 {
        connection_tokens.iter().any(|t| t == "keep-alive")
    } else {
        !connection_tokens.iter().any(|t| t == "close")
    };
    let body = if chunked {
        BodyKind::Chunked
    } else {
        match content_length {
            Some(0) | None => BodyKind::None,
            Some(n) => BodyKind::Length(n),
        }
    };
    Ok(Some(RequestHead {
        method,
        target,
        minor_version,
        headers,
        body,
        keep_alive,
        expect_continue: expect_continue && minor_version == 1,
        has_host: host_count == 1,
        head_len,
    }))
}

/// What a request's headers say, gathered in one pass.
struct HeaderFacts<'b> {
    /// The headers passed on (the hop-by-hop ones left out).
    headers: Vec<(String, Vec<u8>)>,
    /// The last Host header, and how many there were.
    host: Option<&'b [u8]>,
    host_count: usize,
    content_length: Option<u64>,
    /// How many Transfer-Encoding headers, and whether one said chunked.
    te_count: usize,
    chunked: bool,
    /// The tokens of Connection and Proxy-Connection, lowercased.
    connection_tokens: Vec<String>,
    expect_continue: bool,
}

/// Read the headers in one pass, refusing at the first a NUL in a value,
/// a second or invalid Content-Length, a coding other than a single
/// `chunked`, or an Expect other than `100-continue`.
fn read_headers<'b>(list: &[httparse::Header<'b>]) -> Result<HeaderFacts<'b>, RequestError> {
    let mut facts = HeaderFacts {
        headers: Vec::with_capacity(list.len()),
        host: None,
        host_count: 0,
        content_length: None,
        te_count: 0,
        chunked: false,
        connection_tokens: Vec::new(),
        expect_continue: false,
    };
    for h in list {
        let name = h.name;
        let value = h.value;
        if value.contains(&0) {
            return Err(bad(400, "NUL byte in a header value"));
        }
        if name.eq_ignore_ascii_case("host") {
            facts.host_count += 1;
            facts.host = Some(value);
        } else if name.eq_ignore_ascii_case("content-length") {
            if facts.content_length.is_some() {
                return Err(bad(400, "more than one Content-Length"));
            }
            facts.content_length = Some(content_length(value)?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            facts.te_count += 1;
            let s = std::str::from_utf8(value)
                .unwrap_or("")
                .trim_matches([' ', '\t']);
            if !s.eq_ignore_ascii_case("chunked") {
                return Err(bad(
                    501,
                    "Transfer-Encoding other than a single 'chunked' is not supported",
                ));
            }
            facts.chunked = true;
        } else if name.eq_ignore_ascii_case("connection")
            || name.eq_ignore_ascii_case("proxy-connection")
        {
            for tok in std::str::from_utf8(value).unwrap_or("").split(',') {
                let t = tok.trim().to_ascii_lowercase();
                if !t.is_empty() {
                    facts.connection_tokens.push(t);
                }
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if value.eq_ignore_ascii_case(b"100-continue") {
                facts.expect_continue = true;
            } else {
                return Err(bad(417, "unsupported Expect"));
            }
        }
        if is_hop_by_hop(name) {
            continue;
        }
        facts.headers.push((name.to_string(), value.to_vec()));
    }
    Ok(facts)
}

/// A Content-Length value: digits only (optional blanks around), at most
/// 18 of them.
fn content_length(value: &[u8]) -> Result<u64, RequestError> {
    let s = std::str::from_utf8(value)
        .unwrap_or("")
        .trim_matches([' ', '\t']);
    if s.is_empty() || s.len() > 18 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(400, "invalid Content-Length"));
    }
    s.parse::<u64>()
        .map_err(|_| bad(400, "invalid Content-Length"))
}

/// Refuse the heads that two parsers could read two ways (the shapes of
/// request smuggling): two Host or Transfer-Encoding headers, both
/// Content-Length and Transfer-Encoding, chunked in HTTP/1.0.
fn refuse_ambiguous(facts: &HeaderFacts<'_>, minor_version: u8) -> Result<(), RequestError> {
    if facts.host_count > 1 {
        return Err(bad(400, "duplicate Host header"));
    }
    if facts.te_count > 1 {
        return Err(bad(400, "duplicate Transfer-Encoding header"));
    }
    if facts.chunked && facts.content_length.is_some() {
        return Err(bad(
            400,
            "both Content-Length and Transfer-Encoding (request smuggling shape)",
        ));
    }
    if facts.chunked && minor_version == 0 {
        return Err(bad(400, "Transfer-Encoding in an HTTP/1.0 request"));
    }
    Ok(())
}

fn scan_incomplete(buf: &[u8]) -> Option<RequestError> {
    if buf.contains(&0) {
        return Some(bad(400, "NUL byte in the request head"));
    }
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\r' && i + 1 < buf.len() && buf[i + 1] != b'\n' {
            return Some(bad(400, "bare CR in the request head"));
        }
        i += 1;
    }
    if buf.windows(2).any(|w| w == b"\n " || w == b"\n\t") {
        return Some(bad(400, "obs-fold (a header continued on the next line)"));
    }
    None
}

fn explain_parse_error(buf: &[u8], e: httparse::Error) -> RequestError {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(buf.len());
    let head = &buf[..end];
    if head.contains(&0) {
        return bad(400, "NUL byte in the request head");
    }
    if head.windows(2).any(|w| w == b"\n " || w == b"\n\t") {
        return bad(400, "obs-fold (a header continued on the next line)");
    }
    match e {
        httparse::Error::TooManyHeaders => bad(431, "too many header fields"),
        httparse::Error::Version => {
            let line_end = head
                .iter()
                .position(|&b| b == b'\r' || b == b'\n')
                .unwrap_or(head.len());
            let line = &head[..line_end];
            let parts = line.split(|&b| b == b' ').count();
            let version_like = line
                .rsplit(|&b| b == b' ')
                .next()
                .is_some_and(|v| v.starts_with(b"HTTP/"));
            if parts != 3 || !version_like {
                bad(400, "invalid request line")
            } else if head.starts_with(b"PRI * HTTP/2") {
                bad(505, "HTTP/2 prior knowledge is not supported; use HTTP/1.1")
            } else {
                bad(505, "unsupported HTTP version (HTTP/1.0 and 1.1 are)")
            }
        }
        httparse::Error::HeaderName => bad(400, "invalid header name"),
        httparse::Error::HeaderValue => bad(400, "invalid character in a header value"),
        httparse::Error::NewLine => bad(400, "invalid line ending (bare CR or LF)"),
        httparse::Error::Token => {
            if head
                .iter()
                .take(16)
                .any(|b| !b.is_ascii_graphic() && *b != b' ')
            {
                bad(400, "not an HTTP request")
            } else {
                bad(400, "invalid request line")
            }
        }
        httparse::Error::Status => bad(400, "invalid request line"),
    }
}

/// Splits `host[:port]` / `[v6][:port]`; `None` port when absent.
fn split_host_port(s: &str) -> Result<(String, bool, Option<u16>), RequestError> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let end = rest
            .find(']')
            .ok_or_else(|| bad(400, "unclosed '[' in the host"))?;
        let host = &rest[..end];
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad(400, "invalid IPv6 address in brackets"));
        }
        let port = match &rest[end + 1..] {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| bad(400, "junk after the IPv6 address"))?,
            ),
        };
        (host, port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => {
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(400, "invalid port"));
            }
            match p.parse::<u16>() {
                Ok(0) | Err(_) => return Err(bad(400, "invalid port")),
                Ok(n) => Some(n),
            }
        }
    };
    if host.is_empty() {
        return Err(bad(400, "empty host"));
    }
    let dest = DestHost::parse(host).map_err(|e| bad(400, format!("invalid host: {e}")))?;
    let is_ip = matches!(dest, DestHost::Ip(_));
    Ok((dest.as_text(), is_ip, port))
}

fn parse_authority_target(t: &str) -> Result<Target, RequestError> {
    if t.contains(['/', '@', '?', '#']) {
        return Err(bad(400, "CONNECT target must be host:port"));
    }
    let (host, is_ip, port) = split_host_port(t)?;
    let port = port.ok_or_else(|| bad(400, "CONNECT target must include a port"))?;
    Ok(Target::Authority { host, is_ip, port })
}

fn parse_absolute_target(t: &str) -> Result<Target, RequestError> {
    if t.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(bad(400, "invalid character in the request target"));
    }
    let lower_scheme = t
        .get(..8)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    let rest = if lower_scheme.starts_with("http://") {
        &t[7..]
    } else if lower_scheme.starts_with("https://") {
        return Err(bad(
            400,
            "https:// URLs must go through CONNECT (the proxy does not originate TLS)",
        ));
    } else if t.starts_with('/') || t == "*" {
        return Err(bad(
            400,
            "this is a forward proxy: send the absolute URL (http://host/path)",
        ));
    } else {
        return Err(bad(400, "unsupported URL scheme (only http:// is proxied)"));
    };
    if rest.contains('#') {
        return Err(bad(400, "a fragment (#) cannot be in a request target"));
    }
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (mut authority, path) = rest.split_at(auth_end);
    let mut had_userinfo = false;
    if let Some(at) = authority.rfind('@') {
        had_userinfo = true;
        authority = &authority[at + 1..];
    }
    let (host, is_ip, port) = split_host_port(authority)?;
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Ok(Target::Absolute {
        host,
        is_ip,
        port: port.unwrap_or(80),
        path,
        had_userinfo,
    })
}

fn parse_origin_target(
    method: &str,
    t: &str,
    host: &str,
    port: u16,
) -> Result<Target, RequestError> {
    if method == "CONNECT" {
        return Err(bad(400, "CONNECT inside an intercepted tunnel"));
    }
    if t.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(bad(400, "invalid character in the request target"));
    }
    if t.contains('#') {
        return Err(bad(400, "a fragment (#) cannot be in a request target"));
    }
    if !(t.starts_with('/') || (t == "*" && method == "OPTIONS")) {
        return Err(bad(
            400,
            "inside a TLS tunnel send origin-form requests (GET /path HTTP/1.1)",
        ));
    }
    let dest = DestHost::parse(host).map_err(|e| bad(400, format!("invalid host: {e}")))?;
    Ok(Target::Absolute {
        is_ip: matches!(dest, DestHost::Ip(_)),
        host: dest.as_text(),
        port,
        path: t.to_string(),
        had_userinfo: false,
    })
}

fn check_host_header(value: &[u8], target: &Target, default_port: u16) -> Result<(), RequestError> {
    let s = std::str::from_utf8(value)
        .map_err(|_| bad(400, "Host header is not ASCII"))?
        .trim_matches([' ', '\t']);
    let (host, _, port) =
        split_host_port(s).map_err(|e| bad(400, format!("invalid Host header: {}", e.reason)))?;
    let port_ok = match (target, port) {
        (Target::Absolute { port: tp, .. }, p) => p.unwrap_or(default_port) == *tp,
        (Target::Authority { port: tp, .. }, Some(p)) => p == *tp,
        (Target::Authority { .. }, None) => true,
    };
    if host != target.host() || !port_ok {
        return Err(bad(
            400,
            "Host header does not match the host in the request target",
        ));
    }
    Ok(())
}

impl RequestHead {
    /// The `host[:port]` to put in a Host header when the client sent none.
    pub fn authority(&self) -> String {
        let h = self.target.host();
        let h = if h.contains(':') {
            format!("[{h}]")
        } else {
            h.to_string()
        };
        match self.target.port() {
            80 => h,
            p => format!("{h}:{p}"),
        }
    }

    /// Serializes the head for the origin server: origin-form target,
    /// HTTP/1.1, forwarded headers, Host added when missing.
    pub fn write_upstream(&self, out: &mut Vec<u8>) {
        let path = match &self.target {
            Target::Absolute { path, .. } => path.as_str(),
            Target::Authority { .. } => "/",
        };
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        if !self.has_host {
            out.extend_from_slice(b"Host: ");
            out.extend_from_slice(self.authority().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        for (n, v) in &self.headers {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        if self.minor_version == 0 && !self.keep_alive {
            // An HTTP/1.0 client waits for the close; tell upstream so.
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub minor_version: u8,
    pub reason: String,
    /// Headers to forward (hop-by-hop removed).
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: BodyKind,
    /// Whether the upstream connection can carry another request.
    pub reusable: bool,
    pub head_len: usize,
}

/// Parses an upstream response head. `head_request` tells whether the
/// request was HEAD (no body whatever the headers say).
pub fn parse_response_head(buf: &[u8], head_request: bool) -> Result<Option<ResponseHead>, String> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut slots);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > MAX_HEAD {
                return Err("response head too large".into());
            }
            return Ok(None);
        }
        Err(e) => return Err(format!("invalid response from upstream: {e}")),
    };
    let status = resp.code.unwrap_or(0);
    let minor_version = resp.version.unwrap_or(1);
    let mut headers = Vec::with_capacity(resp.headers.len());
    let mut content_length: Option<u64> = None;
    let mut te: Option<String> = None;
    let mut conn_close = minor_version == 0;
    let mut connection_tokens: Vec<String> = Vec::new();
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let s = std::str::from_utf8(h.value).unwrap_or("").trim();
            let n = s
                .parse::<u64>()
                .map_err(|_| "invalid Content-Length from upstream".to_string())?;
            if content_length.is_some_and(|c| c != n) {
                return Err("conflicting Content-Length from upstream".into());
            }
            content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let s = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            te = Some(match te {
                Some(prev) => format!("{prev}, {s}"),
                None => s,
            });
        } else if h.name.eq_ignore_ascii_case("connection") {
            for tok in String::from_utf8_lossy(h.value).split(',') {
                let t = tok.trim().to_ascii_lowercase();
                if t == "close" {
                    conn_close = true;
                } else if t == "keep-alive" && minor_version == 0 {
                    conn_close = false;
                }
                connection_tokens.push(t);
            }
        }
        let n = h.name.to_ascii_lowercase();
        if matches!(
            n.as_str(),
            "connection" | "keep-alive" | "te" | "trailer" | "upgrade"
        ) || n.starts_with("proxy-")
            || connection_tokens.contains(&n)
        {
            continue;
        }
        headers.push((h.name.to_string(), h.value.to_vec()));
    }
    let no_body = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    let body = if no_body {
        BodyKind::None
    } else if let Some(te) = &te {
        if te.rsplit(',').next().map(str::trim) == Some("chunked") {
            BodyKind::Chunked
        } else {
            BodyKind::UntilClose
        }
    } else if let Some(n) = content_length {
        if n == 0 {
            BodyKind::None
        } else {
            BodyKind::Length(n)
        }
    } else {
        BodyKind::UntilClose
    };
    if te.is_some() {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case("content-length"));
    }
    Ok(Some(ResponseHead {
        status,
        minor_version,
        reason: resp.reason.unwrap_or("").to_string(),
        headers,
        body,
        reusable: !conn_close && body != BodyKind::UntilClose,
        head_len,
    }))
}

impl ResponseHead {
    /// Serializes the head for a client that speaks HTTP/1.`client_minor`.
    /// An HTTP/1.0 client keeps the connection only when told so (RFC 9112
    /// section 9.3): `Connection: keep-alive` unless `close`.
    pub fn write_client(&self, out: &mut Vec<u8>, close: bool, client_minor: u8) {
        out.extend_from_slice(format!("HTTP/1.1 {} {}\r\n", self.status, self.reason).as_bytes());
        for (n, v) in &self.headers {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        if close {
            out.extend_from_slice(b"Connection: close\r\n");
        } else if client_minor == 0 {
            out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Follows a chunked body as it streams past: finds where it ends
/// ([`feed`](Self::feed), bytes unchanged) or also hands out the data it
/// carries ([`decode`](Self::decode), framing and trailers dropped). Feed it
/// every byte of the body in order.
#[derive(Debug, Clone, Default)]
pub struct ChunkedScanner {
    state: ChunkState,
    size: u64,
    digits: u8,
    line_len: usize,
    trailer_bytes: usize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
    Done,
}

const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

impl ChunkedScanner {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Consumes bytes of `input`; returns how many belong to the body (all
    /// of them unless the body ended inside `input`).
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, &'static str> {
        self.step(input, None)
    }

    /// Like [`feed`](Self::feed), and appends the chunks' data to `out`.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, &'static str> {
        self.step(input, Some(out))
    }

    fn step(
        &mut self,
        input: &[u8],
        mut data_out: Option<&mut Vec<u8>>,
    ) -> Result<usize, &'static str> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                ChunkState::Done => return Ok(i),
                ChunkState::Data => {
                    let take =
                        (input.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    if let Some(out) = data_out.as_deref_mut() {
                        out.extend_from_slice(&input[i..i + take]);
                    }
                    self.size -= take as u64;
                    i += take;
                    if self.size == 0 {
                        self.state = ChunkState::DataCr;
                    }
                    continue;
                }
                ChunkState::Size => {
                    if let Some(d) = (b as char).to_digit(16) {
                        if self.digits >= 15 {
                            return Err("chunk size too large");
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                    } else if self.digits == 0 {
                        return Err("invalid chunk size");
                    } else if b == b';' || b == b' ' || b == b'\t' {
                        self.state = ChunkState::Ext;
                        self.line_len = 0;
                    } else if b == b'\r' {
                        self.state = ChunkState::SizeLf;
                    } else {
                        return Err("invalid chunk size");
                    }
                }
                ChunkState::Ext => {
                    self.line_len += 1;
                    if self.line_len > MAX_CHUNK_LINE {
                        return Err("chunk extension too long");
                    }
                    if b == b'\r' {
                        self.state = ChunkState::SizeLf;
                    } else if b == b'\n' || b == 0 {
                        return Err("invalid chunk extension");
                    }
                }
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err("bare CR in chunk size line");
                    }
                    self.digits = 0;
                    if self.size == 0 {
                        self.state = ChunkState::TrailerStart;
                    } else {
                        self.state = ChunkState::Data;
                    }
                }
                ChunkState::DataCr => {
                    if b != b'\r' {
                        return Err("chunk data not followed by CRLF");
                    }
                    self.state = ChunkState::DataLf;
                }
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return Err("chunk data not followed by CRLF");
                    }
                    self.state = ChunkState::Size;
                    self.size = 0;
                }
                ChunkState::TrailerStart => {
                    if b == b'\r' {
                        self.state = ChunkState::EndLf;
                    } else if b == b'\n' || b == 0 {
                        return Err("invalid trailer");
                    } else {
                        self.state = ChunkState::TrailerLine;
                    }
                    self.trailer_bytes += 1;
                }
                ChunkState::TrailerLine => {
                    self.trailer_bytes += 1;
                    if self.trailer_bytes > MAX_TRAILERS {
                        return Err("trailers too large");
                    }
                    if b == b'\r' {
                        self.state = ChunkState::TrailerLf;
                    } else if b == b'\n' || b == 0 {
                        return Err("invalid trailer");
                    }
                }
                ChunkState::TrailerLf => {
                    if b != b'\n' {
                        return Err("bare CR in trailer");
                    }
                    self.state = ChunkState::TrailerStart;
                }
                ChunkState::EndLf => {
                    if b != b'\n' {
                        return Err("bare CR after the last chunk");
                    }
                    self.state = ChunkState::Done;
                    return Ok(i + 1);
                }
            }
            i += 1;
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<RequestHead>, RequestError> {
        parse_request_head(s.as_bytes())
    }

    fn status(s: &str) -> u16 {
        match parse(s) {
            Err(e) => e.status,
            Ok(r) => panic!("expected an error for {s:?}, got {r:?}"),
        }
    }

    #[test]
    fn absolute_form() {
        let r = parse("GET http://User:Pw@Allowed.TEST:8080/a?b=1 HTTP/1.1\r\nHost: allowed.test:8080\r\nProxy-Authorization: Basic x\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            r.target,
            Target::Absolute {
                host: "allowed.test".into(),
                is_ip: false,
                port: 8080,
                path: "/a?b=1".into(),
                had_userinfo: true
            }
        );
        assert!(r.keep_alive);
        let mut out = Vec::new();
        r.write_upstream(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: allowed.test:8080\r\nAccept: */*\r\n\r\n"
        );
        let r = parse("GET http://a.test HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!r.keep_alive);
        let mut out = Vec::new();
        r.write_upstream(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn connect_form() {
        let r = parse("CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            r.target,
            Target::Authority {
                host: "::1".into(),
                is_ip: true,
                port: 443
            }
        );
        assert_eq!(status("CONNECT a.test HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status("CONNECT a.test:443/x HTTP/1.1\r\n\r\n"), 400);
    }

    #[test]
    fn incomplete() {
        assert_eq!(parse("GET http://a.test/ HTTP/1.1\r\nHost: a"), Ok(None));
        assert_eq!(parse(""), Ok(None));
    }

    #[test]
    fn refuses_malformed() {
        let cases: &[(&str, u16)] = &[
            ("GET /origin HTTP/1.1\r\nHost: a.test\r\n\r\n", 400),
            ("GET https://a.test/ HTTP/1.1\r\n\r\n", 400),
            ("GET ftp://a.test/ HTTP/1.1\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/1.1\r\nHost: a.test:81\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n", 400),
            ("POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400),
            ("POST http://a.test/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 400),
            ("POST http://a.test/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
            ("POST http://a.test/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400),
            ("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", 501),
            ("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501),
            ("POST http://a.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/1.1\r\nX-A: a\0b\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400),
            ("GET http://a.test/\0 HTTP/1.1\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/1.1\r\nX A: b\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/1.1\r\nHost : a.test\r\n\r\n", 400),
            ("GET http://a.test/#frag HTTP/1.1\r\n\r\n", 400),
            ("GET http://a b/ HTTP/1.1\r\n\r\n", 400),
            ("GET http://a.test/ HTTP/2.0\r\n\r\n", 505),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
            ("GET http://a.test/ HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417),
            ("GET http://127.1/ HTTP/1.1\r\n\r\n", 400),
            ("GET http://a.test:0/ HTTP/1.1\r\n\r\n", 400),
            ("GET http://a.test:99999/ HTTP/1.1\r\n\r\n", 400),
            ("GET http://%61.test/ HTTP/1.1\r\n\r\n", 400),
            ("\x16\x03\x01\x02\x00\x01\x00\x01\x7c\x03\x03", 400),
            ("SSH-2.0-OpenSSH_9.2\r\n\r\n", 400),
        ];
        for (req, want) in cases {
            assert_eq!(status(req), *want, "{req:?}");
        }
        let long = format!(
            "GET http://a.test/{} HTTP/1.1\r\n",
            "a".repeat(MAX_REQUEST_LINE)
        );
        assert_eq!(status(&long), 414);
        let big = format!(
            "GET http://a.test/ HTTP/1.1\r\n{}",
            "X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(2200)
        );
        assert!(matches!(status(&big), 431));
    }

    #[test]
    fn connection_named_headers_are_dropped() {
        let r = parse("GET http://a.test/ HTTP/1.1\r\nConnection: X-Secret, close\r\nX-Secret: 1\r\nUpgrade: websocket\r\nTE: trailers\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(r.headers.is_empty(), "{:?}", r.headers);
        assert!(!r.keep_alive);
    }

    #[test]
    fn response_heads() {
        let r = parse_response_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nKeep-Alive: x\r\n\r\nhello",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.body, BodyKind::Length(5));
        assert!(r.reusable);
        assert_eq!(r.headers.len(), 1);
        let r = parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(r.body, BodyKind::None);
        let r = parse_response_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.body, BodyKind::Chunked);
        assert!(!r
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-length")));
        let r = parse_response_head(b"HTTP/1.0 200 OK\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!(r.body, BodyKind::UntilClose);
        assert!(!r.reusable);
        assert!(parse_response_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            false
        )
        .is_err());
    }

    #[test]
    fn chunked_scanner() {
        let body = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let mut s = ChunkedScanner::new();
        assert_eq!(s.feed(body), Ok(body.len() - 4));
        assert!(s.is_done());
        // Byte by byte gives the same answer.
        let mut s = ChunkedScanner::new();
        let mut used = 0;
        for b in body.iter() {
            used += s.feed(std::slice::from_ref(b)).unwrap();
            if s.is_done() {
                break;
            }
        }
        assert_eq!(used, body.len() - 4);
        for bad in [
            &b"x\r\n"[..],
            b"5\nhello",
            b"5\r\nhelloXX",
            b"fffffffffffffffff\r\n",
            b"0\r\n\n",
        ] {
            assert!(ChunkedScanner::new().feed(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn chunked_decode_hands_out_the_data() {
        let body = b"5\r\nhello\r\n3;x=1\r\nabc\r\n0\r\nT: 1\r\n\r\nNEXT";
        let mut whole = Vec::new();
        assert_eq!(
            ChunkedScanner::new().decode(body, &mut whole),
            Ok(body.len() - 4)
        );
        assert_eq!(whole, b"helloabc");
        let mut d = ChunkedScanner::new();
        let mut out = Vec::new();
        let mut used = 0;
        for b in body.iter() {
            used += d.decode(std::slice::from_ref(b), &mut out).unwrap();
            if d.is_done() {
                break;
            }
        }
        assert_eq!(used, body.len() - 4);
        assert_eq!(out, b"helloabc");
        assert!(ChunkedScanner::new().decode(b"x\r\n", &mut out).is_err());
    }
}
