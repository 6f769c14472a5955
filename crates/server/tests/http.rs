//! The server's HTTP layer through real sockets and raw HTTP: who may
//! call (unix socket owner, TCP bearer tokens), bounds (connections,
//! header deadline, idle deadline, body size) and hostile input. These run
//! without a sandbox engine (the sandbox routes answer 503 there); the
//! sandbox lifecycle is tested through the `cordon serve` binary in
//! crates/cli/tests/serve.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cordon_policy::TrustLevel;
use cordon_server::tokens::{Ceiling, TokenStore};
use cordon_server::{AppState, AuditLog, Bound, Limits};

struct Server {
    socket: PathBuf,
    tcp: SocketAddr,
    token: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(limits: Limits) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/cordon.sock");
    let tokens = TokenStore::new(dir.path().join("tokens.json"));
    let token = tokens
        .create(
            "alpha",
            Ceiling {
                preset: TrustLevel::Low,
                memory: None,
                pids: None,
                allow_net: vec![],
                max_sandboxes: 1,
            },
        )
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let sock = socket.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let bound = Bound::bind(&sock, Some("127.0.0.1:0".parse().unwrap())).unwrap();
            ready_tx.send(bound.tcp_addr().unwrap()).unwrap();
            let audit = AuditLog::disabled();
            let gate = cordon_server::gate::in_memory(&audit).unwrap();
            let state = AppState::new(None, tokens, audit, limits, gate);
            let stop = async {
                let _ = stopped.await;
            };
            bound.run(state, stop, || async {}).await;
        });
    });
    let tcp = ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    Server {
        socket,
        tcp,
        token,
        stop: Some(stop),
        thread: Some(thread),
        _dir: dir,
    }
}

/// Send one request (with `Connection: close`) and return the status and
/// body.
fn exchange(mut s: impl Read + Write, request: &[u8]) -> (u16, String) {
    // A server that answers early (413) may close before the whole body
    // is written; its answer is still there to read.
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

fn tcp(s: &Server) -> TcpStream {
    let t = TcpStream::connect(s.tcp).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    t
}

fn unix(s: &Server) -> UnixStream {
    let u = UnixStream::connect(&s.socket).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    u
}

fn get(path: &str, auth: Option<&str>) -> Vec<u8> {
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").into_bytes()
}

fn post(path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

#[test]
fn the_socket_is_0600() {
    let s = start(Limits::default());
    let mode = std::fs::metadata(&s.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn tcp_needs_a_valid_token_and_the_unix_socket_does_not() {
    let s = start(Limits::default());
    let (status, body) = exchange(tcp(&s), &get("/v1/sandboxes", None));
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("\"unauthorized\""), "{body}");
    let (status, _) = exchange(tcp(&s), &get("/v1/sandboxes", Some("cordon_0000")));
    assert_eq!(status, 401);
    // A valid token passes authentication (no engine here: 503).
    let (status, body) = exchange(tcp(&s), &get("/v1/sandboxes", Some(&s.token)));
    assert_eq!(status, 503, "{body}");
    let (status, body) = exchange(unix(&s), &get("/v1/sandboxes", None));
    assert_eq!(status, 503, "{body}");
    // Health and the document need no token.
    let (status, body) = exchange(tcp(&s), &get("/v1/health", None));
    assert_eq!(status, 200, "{body}");
    let (status, body) = exchange(tcp(&s), &get("/v1/openapi.json", None));
    assert_eq!(status, 200);
    assert!(body.contains("\"openapi\""));
}

#[test]
fn a_token_beyond_its_ceiling_is_403() {
    let s = start(Limits::default());
    let body = br#"{"preset":"high"}"#;
    let mut req = post("/v1/sandboxes", "application/json", body);
    let auth = format!("Authorization: Bearer {}\r\n", s.token);
    let at = req.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
    req.splice(at..at, auth.bytes());
    let (status, body) = exchange(tcp(&s), &req);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("ceiling"), "{body}");
}

#[test]
fn malformed_requests_get_4xx_with_a_message() {
    let s = start(Limits::default());
    let cases: &[(&[u8], &str, u16)] = &[
        (b"{", "application/json", 400),
        (b"{\"preset\": \"nope\"}", "application/json", 400),
        (b"{\"presett\": \"low\"}", "application/json", 422),
        (b"{\"memory\": \"lots\"}", "application/json", 400),
        (b"\x00\xff\xfe", "application/json", 400),
        (b"{}", "text/plain", 415),
    ];
    for (body, ct, want) in cases {
        let (status, reply) = exchange(unix(&s), &post("/v1/sandboxes", ct, body));
        assert_eq!(status, *want, "{body:?} -> {reply}");
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
    let huge = vec![b' '; 2 << 20];
    let (status, _) = exchange(unix(&s), &post("/v1/sandboxes", "application/json", &huge));
    assert_eq!(status, 413);
    let (status, _) = exchange(unix(&s), &get("/v1/nothing/here", None));
    assert_eq!(status, 404);
    // The server is still up.
    let (status, _) = exchange(unix(&s), &get("/v1/health", None));
    assert_eq!(status, 200);
}

#[test]
fn slowloris_headers_are_cut_off_and_do_not_block_others() {
    let s = start(Limits {
        header_read_timeout: Duration::from_secs(1),
        ..Limits::default()
    });
    let started = Instant::now();
    let mut slow = tcp(&s);
    slow.set_write_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut cut_off = false;
    for b in head.iter() {
        if slow.write_all(&[*b]).is_err() {
            cut_off = true;
            break;
        }
        // Someone else is served meanwhile.
        if started.elapsed() < Duration::from_millis(300) {
            let (status, _) = exchange(unix(&s), &get("/v1/health", None));
            assert_eq!(status, 200);
        }
        std::thread::sleep(Duration::from_millis(100));
        if started.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    if !cut_off {
        // The server closed its side: reading gives EOF (or the 408 hyper
        // may send first), never the health answer.
        let mut buf = [0u8; 256];
        let n = slow.read(&mut buf).unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            !text.contains(" 200 "),
            "a trickled request was served: {text}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(7),
        "the slow client was not cut off"
    );
}

#[test]
fn an_idle_connection_is_closed() {
    let s = start(Limits {
        idle_timeout: Duration::from_secs(1),
        ..Limits::default()
    });
    let started = Instant::now();
    let mut idle = tcp(&s);
    let mut buf = [0u8; 16];
    let n = idle.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the server closes an idle connection");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn connections_beyond_the_bound_get_429_with_retry_after() {
    let s = start(Limits {
        max_connections: 2,
        ..Limits::default()
    });
    let _a = unix(&s);
    let _b = unix(&s);
    std::thread::sleep(Duration::from_millis(200));
    let mut c = unix(&s);
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 429"), "{out}");
    assert!(out.to_ascii_lowercase().contains("retry-after: 1"), "{out}");
    drop(_a);
    std::thread::sleep(Duration::from_millis(300));
    let (status, _) = exchange(unix(&s), &get("/v1/health", None));
    assert_eq!(status, 200, "a freed slot is usable again");
}
