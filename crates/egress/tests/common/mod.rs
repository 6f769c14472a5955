//! Loopback servers, a proxy harness and small clients for the tests.
//! Everything listens on and connects to 127.0.0.1 only.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_egress::{
    Egress, EgressConfig, EgressEvent, EgressSummary, HostRule, OverrideAddr, ProxyHandle,
};

/// Says SKIPPED (past the test harness's output capture, so it is always
/// seen), or, with CORDON_TESTS_REQUIRE_ALL set (as in CI), fails the test:
/// a check that cannot run there must not pass silently.
pub fn skip(test: &str, why: &str) {
    if std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_some() {
        panic!("{test}: required but cannot run here: {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// `true` when the test can go on; otherwise [`skip`]s it.
pub fn skip_unless(test: &str, ok: bool, why: &str) -> bool {
    if !ok {
        skip(test, why);
    }
    ok
}

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd} >/dev/null 2>&1"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A request as the origin server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A small HTTP/1.1 origin server (keep-alive, Content-Length and chunked
/// request bodies). Paths: `/big?n=N` (N bytes), `/chunked`, `/close`
/// (HTTP/1.0-style body until close), anything else echoes the request.
pub struct HttpServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub connections: Arc<AtomicUsize>,
}

impl HttpServer {
    pub fn start() -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (s2, c2) = (seen.clone(), connections.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                c2.fetch_add(1, Ordering::SeqCst);
                let seen = s2.clone();
                std::thread::spawn(move || {
                    let _ = serve_http_conn(conn, seen);
                });
            }
        });
        Self {
            addr,
            seen,
            connections,
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_http_conn(conn: TcpStream, seen: Arc<Mutex<Vec<Seen>>>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h)?;
            let h = h.trim_end_matches(['\r', '\n']);
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_string(), v.trim().to_string()));
            }
        }
        let get = |n: &str| {
            headers
                .iter()
                .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if get("transfer-encoding").is_some() {
            loop {
                let mut size = String::new();
                r.read_line(&mut size)?;
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                    .unwrap_or(0);
                if n == 0 {
                    let mut end = String::new();
                    loop {
                        end.clear();
                        r.read_line(&mut end)?;
                        if end.trim().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let mut chunk = vec![0; n + 2];
                r.read_exact(&mut chunk)?;
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(cl) = get("content-length") {
            let n: usize = cl.parse().unwrap_or(0);
            body.resize(n, 0);
            r.read_exact(&mut body)?;
        }
        let head_only = method == "HEAD";
        seen.lock().unwrap().push(Seen {
            method: method.clone(),
            target: target.clone(),
            headers: headers.clone(),
            body: body.clone(),
        });
        if let Some(n) = target.strip_prefix("/big?n=") {
            let n: usize = n.parse().unwrap_or(0);
            write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n")?;
            let chunk = vec![b'x'; 64 * 1024];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len());
                w.write_all(&chunk[..k])?;
                left -= k;
            }
        } else if target == "/chunked" {
            w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")?;
        } else if target == "/quiet-close" {
            // Looks reusable (Content-Length, no Connection: close), then the
            // server drops the connection as an idle timeout would.
            w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")?;
            return Ok(());
        } else if target == "/close" {
            w.write_all(b"HTTP/1.0 200 OK\r\n\r\nuntil close")?;
            return Ok(());
        } else {
            let text = format!(
                "hello {method} {target} body={}",
                String::from_utf8_lossy(&body)
            );
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Origin: test\r\n\r\n",
                text.len()
            )?;
            if !head_only {
                w.write_all(text.as_bytes())?;
            }
        }
        w.flush()?;
    }
}

/// A TCP echo server.
pub fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut w = conn.try_clone().unwrap();
                let _ = std::io::copy(&mut conn, &mut w);
                let _ = w.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

/// An `openssl s_server -www` with a self-signed certificate, killed on drop.
pub struct TlsServer {
    pub addr: SocketAddr,
    child: Child,
    _dir: TempDir,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "cordon-egress-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TlsServer {
    /// `None` when openssl is not installed (the caller reports the skip).
    pub fn start(cn: &str) -> Option<Self> {
        if !have("openssl") {
            return None;
        }
        let dir = TempDir::new("tls");
        let key = dir.0.join("key.pem");
        let cert = dir.0.join("cert.pem");
        let ok = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "1",
                "-subj",
            ])
            .arg(format!("/CN={cn}"))
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?
            .success();
        assert!(ok, "openssl req failed");
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "openssl s_server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Self {
            addr,
            child,
            _dir: dir,
        })
    }
}

pub fn rules(list: &[&str]) -> Vec<HostRule> {
    list.iter().map(|s| HostRule::parse(s).unwrap()).collect()
}

pub fn overrides(map: &[(&str, SocketAddr)]) -> HashMap<String, Vec<OverrideAddr>> {
    map.iter()
        .map(|(k, a)| (k.to_string(), vec![OverrideAddr::Socket(*a)]))
        .collect()
}

/// A running proxy and the events it wrote.
pub struct Proxy {
    pub addr: SocketAddr,
    handle: Option<ProxyHandle>,
    pub events: Arc<Mutex<Vec<EgressEvent>>>,
}

impl Proxy {
    pub fn start(cfg: EgressConfig) -> Self {
        Self::start_with(cfg, |e| e)
    }

    pub fn start_with(cfg: EgressConfig, f: impl FnOnce(Egress) -> Egress) -> Self {
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev2 = events.clone();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let egress = Egress::new(cfg)
            .unwrap()
            .with_sink(Arc::new(move |e: EgressEvent| ev2.lock().unwrap().push(e)));
        let handle = f(egress).spawn(listener).unwrap();
        Self {
            addr: handle.local_addr(),
            handle: Some(handle),
            events,
        }
    }

    pub fn summary(&self) -> EgressSummary {
        self.handle.as_ref().unwrap().summary()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the proxy (so every event is written) and returns them.
    pub fn finish(mut self) -> (Vec<EgressEvent>, EgressSummary) {
        let summary = self.handle.take().unwrap().shutdown();
        let ev = self.events.lock().unwrap().clone();
        // Every event, as it would be logged, must be free of the test secrets.
        for e in &ev {
            let line = e.to_json_line();
            for secret in ["s3cr3t", "hunter2", "tok-123"] {
                assert!(!line.contains(secret), "secret leaked into event: {line}");
            }
        }
        (ev, summary)
    }
}

/// Runs curl; returns (exit code, stdout, stderr).
pub fn curl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "15"])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("run curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sends raw bytes to the proxy and reads until it closes (or times out).
pub fn raw(proxy: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// Reads one HTTP response head (and a Content-Length body) from `s`.
pub fn read_response(s: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let len = text
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    (status, text, body)
}

pub fn status_of(resp: &[u8]) -> u16 {
    String::from_utf8_lossy(resp)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}
