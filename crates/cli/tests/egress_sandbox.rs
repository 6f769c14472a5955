//! Egress through cordon's proxy, end to end: real clients inside the
//! sandbox (curl, openssl, Python urllib and requests, pip, git) against real
//! servers this test starts on the host's loopback (127.0.0.1 only). The
//! servers are reached through `--resolve`, which maps a name to an address
//! for the proxy only.
//!
//! Every test checks three sides: what the client inside saw, the events in
//! the report (and `--net-log`), and what the host server received.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

// ---------------------------------------------------------------------------
// Host side: servers, certificates, fixtures.

/// A small HTTP(S) server for the host side. It logs every accepted
/// connection and every request (method, path, headers) as JSON lines, serves
/// files from a directory, `/big?n=N` (N bytes), `/echo` (POST body length),
/// and `git http-backend` under `/repo.git`. With `--udp` it is a UDP echo
/// server that logs each datagram.
const SERVER_PY: &str = r#"
import argparse, http.server, json, os, socket, ssl, subprocess, sys, threading, time, urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument('--root'); ap.add_argument('--portfile'); ap.add_argument('--log')
ap.add_argument('--cert'); ap.add_argument('--key'); ap.add_argument('--git-root')
ap.add_argument('--udp', action='store_true'); ap.add_argument('--smtp', action='store_true')
a = ap.parse_args()
lock = threading.Lock()

def log(obj):
    with lock:
        with open(a.log, 'a') as f:
            f.write(json.dumps(obj) + '\n')

def ready(port):
    tmp = a.portfile + '.tmp'
    with open(tmp, 'w') as f:
        f.write(str(port))
    os.rename(tmp, a.portfile)

if a.udp:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(('127.0.0.1', 0))
    ready(s.getsockname()[1])
    while True:
        data, peer = s.recvfrom(65536)
        log({'udp': data.decode('latin1')})
        s.sendto(data, peer)

def smtp_session(conn, tls_ctx):
    lines = conn.makefile('rb')
    # openssl s_client -proxy reads the proxy's CONNECT answer through a
    # buffer it then drops: a greeting that arrives with that answer is lost
    # and the client waits for it forever. A real server's greeting comes
    # after a DNS lookup or two; this one waits as long.
    time.sleep(0.5)
    conn.sendall(b'220 smtp.test ESMTP\r\n')
    for line in lines:
        cmd = line.strip().upper()
        log({'smtp': line.decode('latin1').strip()})
        if cmd.startswith(b'EHLO') or cmd.startswith(b'HELO'):
            conn.sendall(b'250-smtp.test\r\n250 STARTTLS\r\n')
        elif cmd == b'STARTTLS':
            conn.sendall(b'220 2.0.0 Ready to start TLS\r\n')
            try:
                t = tls_ctx.wrap_socket(conn, server_side=True)
            except Exception as e:
                log({'tls_error': str(e)})
                return
            log({'tls': t.version()})
            for inner in t.makefile('rb'):
                log({'smtp_tls': inner.decode('latin1').strip()})
                t.sendall(b'250 ok\r\n')
            return
        else:
            conn.sendall(b'250 ok\r\n')

if a.smtp:
    tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls_ctx.load_cert_chain(a.cert, a.key)
    tls_ctx.sni_callback = lambda sock, name, c: log({'sni': name})
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    s.listen(16)
    ready(s.getsockname()[1])
    while True:
        conn, peer = s.accept()
        log({'accept': peer[1]})
        threading.Thread(target=smtp_session, args=(conn, tls_ctx), daemon=True).start()

ctx = None
if a.cert:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    def get_request(self):
        sock, addr = self.socket.accept()
        log({'accept': addr[1]})
        if ctx is not None:
            sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def __init__(self, *args, **kw):
        super().__init__(*args, directory=a.root, **kw)
    def setup(self):
        if ctx is not None:
            self.request.settimeout(10)
            try:
                self.request.do_handshake()
            except Exception as e:
                log({'tls_error': str(e)})
                raise
            self.request.settimeout(None)
        super().setup()
    def log_message(self, *args):
        pass
    def record(self):
        log({'method': self.command, 'path': self.path,
             'headers': [[k, v] for k, v in self.headers.items()]})
    def reply(self, code, body, ctype='text/plain'):
        self.send_response(code)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)
    def git(self):
        if not a.git_root or not self.path.startswith('/repo.git'):
            return False
        u = urllib.parse.urlsplit(self.path)
        n = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(n) if n else b''
        env = dict(os.environ, GIT_PROJECT_ROOT=a.git_root, GIT_HTTP_EXPORT_ALL='1',
                   PATH_INFO=u.path, QUERY_STRING=u.query, REQUEST_METHOD=self.command,
                   CONTENT_TYPE=self.headers.get('Content-Type', ''),
                   CONTENT_LENGTH=str(len(body)), REMOTE_ADDR='127.0.0.1',
                   GIT_PROTOCOL=self.headers.get('Git-Protocol', ''),
                   HTTP_CONTENT_ENCODING=self.headers.get('Content-Encoding', ''))
        out = subprocess.run(['git', 'http-backend'], input=body, env=env,
                             capture_output=True).stdout
        sep = b'\r\n\r\n' if b'\r\n\r\n' in out else b'\n\n'
        head, _, rest = out.partition(sep)
        status, headers = 200, []
        for line in head.decode('latin1').splitlines():
            k, _, v = line.partition(':')
            if k.lower() == 'status':
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)
        return True
    def do_GET(self):
        self.record()
        if self.git():
            return
        u = urllib.parse.urlsplit(self.path)
        if u.path == '/big':
            n = int(urllib.parse.parse_qs(u.query)['n'][0])
            self.send_response(200)
            self.send_header('Content-Type', 'application/octet-stream')
            self.send_header('Content-Length', str(n))
            self.end_headers()
            chunk = b'x' * 65536
            try:
                while n > 0:
                    k = min(n, len(chunk))
                    self.wfile.write(chunk[:k])
                    n -= k
            except OSError:
                pass
            self.close_connection = True
            return
        super().do_GET()
    def do_HEAD(self):
        self.record()
        super().do_HEAD()
    def do_POST(self):
        self.record()
        if self.git():
            return
        n = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(n)
        log({'received': len(body), 'of': n})
        self.reply(200, ('posted %d\n' % len(body)).encode())

srv = Server(('127.0.0.1', 0), H)
ready(srv.server_address[1])
srv.serve_forever()
"#;

/// A server process on the host; killed (by its own pid) when dropped.
struct HostServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl HostServer {
    fn start(dir: &Path, name: &str, extra: &[&str]) -> HostServer {
        let script = dir.join("server.py");
        if !script.exists() {
            std::fs::write(&script, SERVER_PY).expect("write server.py");
        }
        let portfile = dir.join(format!("{name}.port"));
        let log = dir.join(format!("{name}.log"));
        std::fs::write(&log, "").expect("create server log");
        let errlog = std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap();
        let child = Command::new("/usr/bin/python3")
            .arg(&script)
            .arg("--portfile")
            .arg(&portfile)
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(errlog)
            .spawn()
            .expect("start host server");
        let mut server = HostServer {
            child,
            port: 0,
            log,
        };
        let start = Instant::now();
        loop {
            if let Ok(t) = std::fs::read_to_string(&portfile) {
                if let Ok(p) = t.trim().parse() {
                    server.port = p;
                    return server;
                }
            }
            if let Ok(Some(st)) = server.child.try_wait() {
                panic!(
                    "host server {name} exited early ({st}): {}",
                    std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap_or_default()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "host server {name} did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn entries(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("server log line"))
            .collect()
    }

    /// The HTTP requests it received, in order.
    fn requests(&self) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e.get("method").is_some())
            .collect()
    }

    fn paths(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r["path"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// TCP connections it accepted.
    fn accepts(&self) -> usize {
        self.entries()
            .iter()
            .filter(|e| e.get("accept").is_some())
            .count()
    }

    fn datagrams(&self) -> usize {
        self.entries()
            .iter()
            .filter(|e| e.get("udp").is_some())
            .count()
    }
}

impl Drop for HostServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One test's world: the sandbox's cwd (`wd`, bound read-only inside) and a
/// host-only directory for servers, keys and logs (`host`, not visible
/// inside).
struct Net {
    wd: Workdir,
    host: tempfile::TempDir,
}

impl Net {
    fn new() -> Net {
        let host = tempfile::Builder::new()
            .prefix("cordon-egress-host-")
            .tempdir()
            .expect("host tempdir");
        Net {
            wd: Workdir::new(),
            host,
        }
    }

    fn hp(&self) -> &Path {
        self.host.path()
    }

    /// A directory served over HTTP with `hello.txt`.
    fn site(&self, name: &str) -> PathBuf {
        let root = self.hp().join(format!("{name}-root"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("hello.txt"), format!("hello from {name}\n")).unwrap();
        root
    }

    fn http_server(&self, name: &str) -> HostServer {
        let root = self.site(name);
        HostServer::start(self.hp(), name, &["--root", root.to_str().unwrap()])
    }

    /// A TLS server whose certificate (signed by the test CA, which the
    /// sandbox finds as `ca.pem` in its cwd) names `*.test` hosts.
    fn tls_server(&self, name: &str, extra: &[&str]) -> HostServer {
        let (cert, key) = self.certs();
        let root = self.site(name);
        let mut args = vec![
            "--root",
            root.to_str().unwrap(),
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        HostServer::start(self.hp(), name, &args)
    }

    /// A throwaway CA and a server certificate for tls.test, git.test,
    /// pypi.test, a.test, other.test. Returns (cert, key); the CA goes to
    /// `ca.pem` in the sandbox's cwd.
    fn certs(&self) -> (PathBuf, PathBuf) {
        let d = self.hp();
        let cert = d.join("srv.pem");
        let key = d.join("srv.key");
        if cert.exists() {
            return (cert, key);
        }
        std::fs::write(
            d.join("ext.cnf"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\n\
             subjectAltName=DNS:tls.test,DNS:git.test,DNS:pypi.test,DNS:a.test,DNS:other.test\n",
        )
        .unwrap();
        let steps: &[&[&str]] = &[
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=cordon test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "srv.key",
                "-out",
                "srv.csr",
                "-subj",
                "/CN=tls.test",
            ],
            &[
                "x509",
                "-req",
                "-in",
                "srv.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "srv.pem",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        ];
        for args in steps {
            let out = Command::new("openssl")
                .args(*args)
                .current_dir(d)
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::copy(d.join("ca.pem"), self.wd.path().join("ca.pem")).unwrap();
        (cert, key)
    }

    fn net_log(&self) -> PathBuf {
        self.hp().join("net.jsonl")
    }
}

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null 2>&1")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The tools every test here needs on the host and inside (the sandbox sees
/// the host's /usr).
fn ready_with(tools: &[&str]) -> bool {
    if ready() {
        return true;
    }
    for t in ["python3", "openssl"].iter().chain(tools) {
        let (pkg, ok) = match *t {
            "python3" => ("python3", Path::new("/usr/bin/python3").exists()),
            other => (other, have(other)),
        };
        if skip_unless(ok, &format!("{t} is not installed (Debian package {pkg})")) {
            return true;
        }
    }
    false
}

fn py_has(module: &str) -> bool {
    Command::new("/usr/bin/python3")
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn events(o: &Outcome) -> Vec<Value> {
    o.report["egress"].as_array().cloned().unwrap_or_default()
}

fn read_jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("net-log line is JSON"))
        .collect()
}

fn rules(evs: &[Value]) -> Vec<String> {
    evs.iter()
        .map(|e| e["rule"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Checks one event's fields (`status` only when given).
#[track_caller]
fn check_event(
    ev: &Value,
    protocol: &str,
    host: &str,
    port: u16,
    decision: &str,
    rule: &str,
    status: Option<u64>,
) {
    let ctx = || serde_json::to_string_pretty(ev).unwrap();
    assert_eq!(ev["protocol"], protocol, "protocol in {}", ctx());
    assert_eq!(ev["host"], host, "host in {}", ctx());
    assert_eq!(ev["port"], port, "port in {}", ctx());
    assert_eq!(ev["decision"], decision, "decision in {}", ctx());
    assert_eq!(ev["rule"], rule, "rule in {}", ctx());
    if let Some(s) = status {
        assert_eq!(ev["status"], s, "status in {}", ctx());
    }
    assert!(
        ev["sandbox_id"].as_str().is_some_and(|s| !s.is_empty()),
        "sandbox_id in {}",
        ctx()
    );
    assert!(ev["time"].as_str().is_some(), "time in {}", ctx());
    assert!(
        ev["duration_ms"].as_f64().is_some(),
        "duration in {}",
        ctx()
    );
    assert!(ev["bytes_up"].as_u64().is_some(), "bytes_up in {}", ctx());
    assert!(
        ev["bytes_down"].as_u64().is_some(),
        "bytes_down in {}",
        ctx()
    );
}

fn dump(o: &Outcome) -> String {
    format!(
        "code={} stdout={:?} stderr={:?} egress={}",
        o.code,
        o.stdout,
        o.stderr,
        serde_json::to_string_pretty(&o.report["egress"]).unwrap_or_default()
    )
}

/// A shell function for scripts: `get URL...` prints `STATUS BODY` on one
/// line (the body's newlines become spaces).
const GET_SH: &str =
    "get() { curl -sS -o /tmp/body -w '%{http_code} ' \"$@\"; tr '\\n' ' ' </tmp/body; echo; rm -f /tmp/body; }; ";

fn s(x: impl ToString) -> String {
    x.to_string()
}

// ---------------------------------------------------------------------------
// Allowed hosts work, with each real client.

#[test]
fn curl_reaches_an_allowed_host_over_http_and_https() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let tls = n.tls_server("tls", &[]);
    let log = n.net_log();
    let o = n.wd.run(
        &[
            "--allow-net", "a.test",
            "--allow-net", "tls.test",
            "--resolve", "a.test=127.0.0.1",
            "--resolve", &format!("tls.test:443=127.0.0.1:{}", tls.port),
            "--net-log", log.to_str().unwrap(),
        ],
        &[
            "/bin/sh",
            "-c",
            &format!(
                "env | grep -i '_proxy=' | sort; \
                 curl -sS http://a.test:{}/hello.txt && curl -sS --cacert ca.pem https://tls.test/hello.txt",
                web.port
            ),
        ],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert!(o.stdout.contains("hello from web\n"), "{}", dump(&o));
    assert!(o.stdout.contains("hello from tls\n"), "{}", dump(&o));
    // The proxy variables are set, in both cases; NO_PROXY is empty.
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{var}=")) && l.contains("127.0.0.1:3128")),
            "{var} not set to the proxy: {}",
            o.stdout
        );
    }
    for var in ["NO_PROXY", "no_proxy"] {
        assert!(
            o.stdout
                .lines()
                .all(|l| !l.starts_with(&format!("{var}=")) || l == format!("{var}=")),
            "{var} must be empty: {}",
            o.stdout
        );
    }

    let evs = events(&o);
    assert_eq!(evs.len(), 2, "{}", dump(&o));
    check_event(
        &evs[0],
        "http",
        "a.test",
        web.port,
        "allow",
        "allow:a.test",
        Some(200),
    );
    assert_eq!(evs[0]["method"], "GET");
    assert_eq!(evs[0]["path"], "/hello.txt");
    assert!(evs[0]["bytes_down"].as_u64().unwrap() > 15);
    check_event(
        &evs[1],
        "connect",
        "tls.test",
        443,
        "allow",
        "allow:tls.test",
        None,
    );
    assert_eq!(evs[1]["method"], "CONNECT");
    assert!(
        evs[1].get("path").is_none(),
        "no path for tunnels: {}",
        evs[1]
    );
    assert!(
        evs[1]["bytes_up"].as_u64().unwrap() > 100,
        "ClientHello counted"
    );
    assert!(
        evs[1]["bytes_down"].as_u64().unwrap() > 100,
        "certificate counted"
    );

    // --net-log holds the very same events as the report.
    assert_eq!(read_jsonl(&log), evs);
    let sum = &o.report["egress_summary"];
    assert_eq!(sum["connections"], 2, "{sum}");
    assert_eq!(sum["allowed"], 2, "{sum}");
    assert_eq!(sum["denied"], 0, "{sum}");

    assert_eq!(web.paths(), vec!["/hello.txt"]);
    assert_eq!(tls.paths(), vec!["/hello.txt"]);
    assert_eq!(web.accepts(), 1);
    assert_eq!(tls.accepts(), 1);
}

#[test]
fn python_urllib_uses_the_proxy() {
    if ready_with(&[]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let tls = n.tls_server("tls", &[]);
    let code = r#"
import ssl, urllib.request
print(urllib.request.urlopen('http://a.test:@HP@/hello.txt', timeout=20).read().decode(), end='')
ctx = ssl.create_default_context(cafile='ca.pem')
print(urllib.request.urlopen('https://tls.test/hello.txt', context=ctx, timeout=20).read().decode(), end='')
req = urllib.request.Request('http://a.test:@HP@/echo', data=b'abc' * 10, method='POST')
print(urllib.request.urlopen(req, timeout=20).read().decode(), end='')
"#
    .replace("@HP@", &s(web.port));
    let o = n.wd.py(
        &[
            "--allow-net",
            "a.test",
            "--allow-net",
            "tls.test:443",
            "--resolve",
            "a.test=127.0.0.1",
            "--resolve",
            &format!("tls.test:443=127.0.0.1:{}", tls.port),
        ],
        &code,
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(
        o.stdout,
        "hello from web\nhello from tls\nposted 30\n",
        "{}",
        dump(&o)
    );
    let evs = events(&o);
    assert_eq!(evs.len(), 3, "{}", dump(&o));
    check_event(
        &evs[0],
        "http",
        "a.test",
        web.port,
        "allow",
        "allow:a.test",
        Some(200),
    );
    check_event(
        &evs[1],
        "connect",
        "tls.test",
        443,
        "allow",
        "allow:tls.test:443",
        None,
    );
    check_event(
        &evs[2],
        "http",
        "a.test",
        web.port,
        "allow",
        "allow:a.test",
        Some(200),
    );
    assert_eq!(evs[2]["method"], "POST");
    assert_eq!(web.paths(), vec!["/hello.txt", "/echo"]);
    assert_eq!(tls.paths(), vec!["/hello.txt"]);
}

#[test]
fn python_requests_uses_the_proxy() {
    if ready_with(&[]) {
        return;
    }
    if skip_unless(
        py_has("requests"),
        "Python requests is not importable by /usr/bin/python3 (Debian package python3-requests)",
    ) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let tls = n.tls_server("tls", &[]);
    let code = r#"
import requests
r = requests.get('http://a.test:@HP@/hello.txt', timeout=20)
print(r.status_code, r.text, end='')
r = requests.get('https://tls.test/hello.txt', verify='ca.pem', timeout=20)
print(r.status_code, r.text, end='')
r = requests.get('http://b.test:@HP@/hello.txt', timeout=20)
print(r.status_code, r.headers.get('X-Cordon-Egress'), r.text)
"#
    .replace("@HP@", &s(web.port));
    let o = n.wd.py(
        &[
            "--allow-net",
            "a.test",
            "--allow-net",
            "tls.test",
            "--resolve",
            "a.test=127.0.0.1",
            "--resolve",
            "b.test=127.0.0.1",
            "--resolve",
            &format!("tls.test:443=127.0.0.1:{}", tls.port),
        ],
        &code,
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], "200 hello from web", "{}", dump(&o));
    assert_eq!(lines[1], "200 hello from tls", "{}", dump(&o));
    assert!(lines[2].starts_with("403 refused "), "{}", dump(&o));
    assert!(lines[2].contains("--allow-net b.test"), "{}", dump(&o));
    let evs = events(&o);
    assert_eq!(
        rules(&evs),
        ["allow:a.test", "allow:tls.test", "unlisted"],
        "{}",
        dump(&o)
    );
    check_event(
        &evs[2],
        "http",
        "b.test",
        web.port,
        "deny",
        "unlisted",
        Some(403),
    );
    assert_eq!(web.paths(), vec!["/hello.txt"]);
    assert_eq!(tls.paths(), vec!["/hello.txt"]);
}

/// Builds a wheel and a PEP 503 "simple" index for it under `root`.
fn build_index(root: &Path) {
    let code = r#"
import hashlib, io, os, sys, zipfile
root = sys.argv[1]
name, ver = 'cordonpkg', '0.1'
whl = f'{name}-{ver}-py3-none-any.whl'
files = {
    f'{name}/__init__.py': 'VALUE = 42\n',
    f'{name}-{ver}.dist-info/METADATA': f'Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n',
    f'{name}-{ver}.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: cordon-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
record = ''.join(f'{p},,\n' for p in files) + f'{name}-{ver}.dist-info/RECORD,,\n'
files[f'{name}-{ver}.dist-info/RECORD'] = record
os.makedirs(os.path.join(root, 'packages'), exist_ok=True)
os.makedirs(os.path.join(root, 'simple', name), exist_ok=True)
path = os.path.join(root, 'packages', whl)
with zipfile.ZipFile(path, 'w') as z:
    for p, t in files.items():
        z.writestr(p, t)
digest = hashlib.sha256(open(path, 'rb').read()).hexdigest()
open(os.path.join(root, 'simple', 'index.html'), 'w').write(
    f'<!DOCTYPE html><html><body><a href="{name}/">{name}</a></body></html>\n')
open(os.path.join(root, 'simple', name, 'index.html'), 'w').write(
    f'<!DOCTYPE html><html><body><a href="/packages/{whl}#sha256={digest}">{whl}</a></body></html>\n')
"#;
    let out = Command::new("/usr/bin/python3")
        .args(["-c", code])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn pip_downloads_from_a_local_index() {
    if ready_with(&[]) {
        return;
    }
    if skip_unless(
        py_has("pip"),
        "pip is not available for /usr/bin/python3 (Debian package python3-pip)",
    ) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("pypi");
    build_index(&n.hp().join("pypi-root"));
    let o = n.wd.run(
        &[
            "--allow-net",
            "pypi.test",
            "--resolve",
            "pypi.test=127.0.0.1",
            "--timeout",
            "120s",
        ],
        &[
            "/bin/sh",
            "-c",
            &format!(
                "python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
                 --index-url http://pypi.test:{p}/simple/ --trusted-host pypi.test:{p} \
                 --dest /tmp/d cordonpkg && ls /tmp/d",
                p = web.port
            ),
        ],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert!(
        o.stdout.contains("cordonpkg-0.1-py3-none-any.whl"),
        "{}",
        dump(&o)
    );
    let evs = events(&o);
    assert!(!evs.is_empty(), "{}", dump(&o));
    for e in &evs {
        check_event(
            e,
            "http",
            "pypi.test",
            web.port,
            "allow",
            "allow:pypi.test",
            Some(200),
        );
    }
    let paths = web.paths();
    assert_eq!(
        paths,
        vec![
            "/simple/cordonpkg/",
            "/packages/cordonpkg-0.1-py3-none-any.whl"
        ],
        "the index saw only pip's two requests"
    );
    assert_eq!(
        evs.len(),
        paths.len(),
        "one event per request: {}",
        dump(&o)
    );
}

#[test]
fn git_clones_over_https() {
    if ready_with(&["git"]) {
        return;
    }
    let n = Net::new();
    let hp = n.hp();
    let repos = bare_git_repo(hp, "cloned through cordon\n");
    let srv = n.tls_server("git", &["--git-root", repos.to_str().unwrap()]);

    let ca = n.wd.path().join("ca.pem");
    let o = n.wd.run(
        &[
            "--allow-net",
            "git.test",
            "--resolve",
            &format!("git.test:443=127.0.0.1:{}", srv.port),
            "--setenv",
            &format!("GIT_SSL_CAINFO={}", ca.display()),
            "--timeout",
            "60s",
        ],
        &[
            "/bin/sh",
            "-c",
            "git clone -q https://git.test/repo.git /tmp/clone && cat /tmp/clone/README",
        ],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(o.stdout, "cloned through cordon\n", "{}", dump(&o));
    let evs = events(&o);
    assert!(!evs.is_empty(), "{}", dump(&o));
    for e in &evs {
        check_event(
            e,
            "connect",
            "git.test",
            443,
            "allow",
            "allow:git.test",
            None,
        );
    }
    let paths = srv.paths();
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("/repo.git/info/refs?service=git-upload-pack")),
        "{paths:?}"
    );
    assert!(
        paths.iter().all(|p| p.starts_with("/repo.git/")),
        "{paths:?}"
    );
    assert_eq!(
        evs.len(),
        srv.accepts(),
        "one event per tunnel: {}",
        dump(&o)
    );
}

// ---------------------------------------------------------------------------
// Denied and unlisted hosts.

/// Python, inside: a raw request to the proxy; prints the status line and
/// the body.
const RAW_PROXY_PY: &str = r#"
import socket, sys
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
s.sendall(sys.argv[1].encode().decode('unicode_escape').encode('latin1'))
data = b''
while True:
    try:
        b = s.recv(65536)
    except socket.timeout:
        break
    if not b:
        break
    data += b
head, _, body = data.partition(b'\r\n\r\n')
print(head.split(b'\r\n')[0].decode())
print(body.decode(errors='replace'))
"#;

#[test]
fn denied_and_unlisted_hosts_get_a_403_that_says_how_to_allow() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    n.wd.write("raw.py", RAW_PROXY_PY);
    let script = format!(
        r#"
curl -sS -i http://evil.corp.test:{p}/hello.txt; echo; echo ===
curl -sS http://good.corp.test:{p}/hello.txt; echo ===
curl -sS -w '\n%{{http_code}}' http://unlisted.example:{p}/hello.txt; echo; echo ===
python3 raw.py 'CONNECT evil.corp.test:443 HTTP/1.1\r\nHost: evil.corp.test:443\r\n\r\n'; echo ===
curl -sS --cacert ca.pem https://evil.corp.test/ 2>&1; echo "curl=$?"
"#,
        p = web.port
    );
    n.certs();
    let o = n.wd.run(
        &[
            "--allow-net",
            "*.corp.test",
            "--deny-net",
            "evil.corp.test",
            "--resolve",
            "evil.corp.test=127.0.0.1",
            "--resolve",
            "good.corp.test=127.0.0.1",
            "--resolve",
            "unlisted.example=127.0.0.1",
        ],
        &["/bin/sh", "-c", &script],
    );
    let parts: Vec<&str> = o.stdout.split("===").collect();
    assert_eq!(parts.len(), 5, "{}", dump(&o));
    // Deny beats allow ('*.corp.test' covers evil.corp.test).
    let denied = parts[0];
    assert!(denied.starts_with("HTTP/1.1 403"), "{}", dump(&o));
    assert!(denied.contains("X-Cordon-Egress: refused"), "{denied}");
    assert!(
        denied.contains("deny:evil.corp.test"),
        "names the rule: {denied}"
    );
    assert!(
        denied.contains("network.deny"),
        "says how to allow: {denied}"
    );
    // The wildcard allows the others under .corp.test.
    assert_eq!(parts[1].trim(), "hello from web", "{}", dump(&o));
    // Unlisted: how to allow it.
    let unlisted = parts[2];
    assert!(unlisted.trim().ends_with("403"), "{unlisted}");
    assert!(unlisted.contains("not in the allowlist"), "{unlisted}");
    assert!(
        unlisted.contains("--allow-net unlisted.example"),
        "{unlisted}"
    );
    assert!(unlisted.contains("network.allow"), "{unlisted}");
    // CONNECT gets the same answer.
    let connect = parts[3];
    assert!(connect.trim().starts_with("HTTP/1.1 403"), "{connect}");
    assert!(connect.contains("deny:evil.corp.test"), "{connect}");
    // A real HTTPS client fails and does not retry.
    assert!(parts[4].contains("403"), "{}", parts[4]);
    assert!(!parts[4].contains("curl=0"), "{}", parts[4]);

    let evs = events(&o);
    assert_eq!(evs.len(), 5, "one event per attempt: {}", dump(&o));
    check_event(
        &evs[0],
        "http",
        "evil.corp.test",
        web.port,
        "deny",
        "deny:evil.corp.test",
        Some(403),
    );
    check_event(
        &evs[1],
        "http",
        "good.corp.test",
        web.port,
        "allow",
        "allow:*.corp.test",
        Some(200),
    );
    check_event(
        &evs[2],
        "http",
        "unlisted.example",
        web.port,
        "deny",
        "unlisted",
        Some(403),
    );
    check_event(
        &evs[3],
        "connect",
        "evil.corp.test",
        443,
        "deny",
        "deny:evil.corp.test",
        Some(403),
    );
    check_event(
        &evs[4],
        "connect",
        "evil.corp.test",
        443,
        "deny",
        "deny:evil.corp.test",
        Some(403),
    );
    let sum = &o.report["egress_summary"];
    assert_eq!(
        (sum["allowed"].as_u64(), sum["denied"].as_u64()),
        (Some(1), Some(4)),
        "{sum}"
    );
    // The host server saw only the allowed request.
    assert_eq!(web.paths(), vec!["/hello.txt"]);
    assert_eq!(web.accepts(), 1);
    // Clients often show only the status (curl's "CONNECT tunnel failed,
    // response 403"): cordon says each distinct answer again at the end,
    // once, and the report keeps it with its event.
    let told = [
        format!("cordon: egress to evil.corp.test:{} denied by the rule deny:evil.corp.test.", web.port),
        "cordon: egress to evil.corp.test:443 denied by the rule deny:evil.corp.test.".to_owned(),
        format!(
            "cordon: egress to unlisted.example:{} denied (not in the allowlist). To allow it: --allow-net unlisted.example",
            web.port
        ),
    ];
    for line in &told {
        assert_eq!(
            o.stderr.matches(line.as_str()).count(),
            1,
            "{line}\n{}",
            dump(&o)
        );
    }
    assert!(
        !o.stderr.contains("more refused destination"),
        "{}",
        dump(&o)
    );
    assert!(
        evs[2]["refusal"]
            .as_str()
            .unwrap_or("")
            .contains("--allow-net unlisted.example"),
        "{}",
        evs[2]
    );
    assert!(
        evs[1].get("refusal").is_none(),
        "an allowed attempt has none: {}",
        evs[1]
    );
}

#[test]
fn socks5_follows_the_same_rules() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let script = format!(
        "curl -sS --socks5-hostname 127.0.0.1:3128 http://a.test:{p}/hello.txt; \
         curl -sS --socks5-hostname 127.0.0.1:3128 http://b.test:{p}/hello.txt; echo b=$?; \
         curl -sS --socks5 127.0.0.1:3128 http://127.0.0.1:{p}/hello.txt; echo ip=$?",
        p = web.port
    );
    let o = n.wd.run(
        &[
            "--allow-net",
            "a.test",
            "--resolve",
            "a.test=127.0.0.1",
            "--resolve",
            "b.test=127.0.0.1",
        ],
        &["/bin/sh", "-c", &script],
    );
    assert!(o.stdout.starts_with("hello from web\n"), "{}", dump(&o));
    assert!(!o.stdout.contains("b=0"), "{}", dump(&o));
    assert!(!o.stdout.contains("ip=0"), "{}", dump(&o));
    let evs = events(&o);
    assert_eq!(evs.len(), 3, "{}", dump(&o));
    check_event(
        &evs[0],
        "socks5",
        "a.test",
        web.port,
        "allow",
        "allow:a.test",
        None,
    );
    check_event(
        &evs[1], "socks5", "b.test", web.port, "deny", "unlisted", None,
    );
    check_event(
        &evs[2],
        "socks5",
        "127.0.0.1",
        web.port,
        "deny",
        "unlisted",
        None,
    );
    assert_eq!(web.paths(), vec!["/hello.txt"]);
    assert_eq!(web.accepts(), 1);
}

#[test]
fn bad_rules_are_refused_before_the_sandbox_starts() {
    if ready() {
        return;
    }
    let wd = Workdir::new();
    // Flags: a usage error (2) or a setup error (125); no sandbox runs.
    for (rule, says) in [
        ("*", "every host"),
        ("*.com", "top-level domain"),
        ("*.test", "top-level domain"),
        ("*.co.uk", "public registry"),
        ("a.*.test", "first label"),
        ("a.test:0", "port"),
    ] {
        let o = wd.run(&["--allow-net", rule], &["true"]);
        assert!(
            o.code == 2 || o.code == 125,
            "--allow-net {rule}: {}",
            dump(&o)
        );
        assert!(o.report.is_null(), "--allow-net {rule}: a sandbox ran");
        assert!(
            o.stderr.contains(rule),
            "names the rule {rule}: {}",
            o.stderr
        );
        assert!(o.stderr.contains(says), "--allow-net {rule}: {}", o.stderr);
        let o = wd.run(&["--allow-net", "a.test", "--deny-net", rule], &["true"]);
        assert!(
            o.code == 2 || o.code == 125,
            "--deny-net {rule}: {}",
            dump(&o)
        );
        assert!(o.stderr.contains(rule), "--deny-net {rule}: {}", o.stderr);
    }
    // In a profile: the file, line and key are named.
    let prof = wd.write(
        "bad.toml",
        "[network]\nmode = \"proxy\"\nallow = [\"a.test\", \"*.com\"]\n",
    );
    let o = wd.run(&["--profile", prof.to_str().unwrap()], &["true"]);
    assert_eq!(o.code, 125, "{}", dump(&o));
    assert!(o.stderr.contains("bad.toml:3:"), "{}", o.stderr);
    assert!(o.stderr.contains("network.allow[1]"), "{}", o.stderr);
    assert!(o.stderr.contains("*.com"), "{}", o.stderr);
}

// ---------------------------------------------------------------------------
// Nothing but the proxy leads out.

const DIRECT_PY: &str = r#"
import errno, json, socket
res = {}
def err(e):
    if isinstance(e, socket.timeout):
        return 'timeout'
    if isinstance(e, socket.gaierror):
        return 'gaierror'
    return errno.errorcode.get(e.errno, str(e.errno))
def tcp(key, fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
        res[key] = 'connected'
    except OSError as e:
        res[key] = err(e)
    s.close()
tcp('tcp_host_port', socket.AF_INET, ('127.0.0.1', @HP@))
tcp('tcp_inner_port', socket.AF_INET, ('127.0.0.1', @FREE@))
tcp('tcp6_loopback', socket.AF_INET6, ('::1', @HP@))
tcp('tcp6_proxy_port', socket.AF_INET6, ('::1', 3128))
tcp('tcp_private', socket.AF_INET, ('10.0.0.1', 80))
tcp('tcp_proxy', socket.AF_INET, ('127.0.0.1', 3128))
try:
    socket.create_connection(('127.0.0.1', @HP@), timeout=3)
    res['create_connection'] = 'connected'
except OSError as e:
    res['create_connection'] = err(e)
# A listener of its own, on another loopback port: bind or connect is refused.
try:
    l = socket.socket()
    l.bind(('127.0.0.1', @FREE@))
    l.listen()
    res['inner_bind'] = 'bound'
    tcp('tcp_inner_listener', socket.AF_INET, ('127.0.0.1', @FREE@))
except OSError as e:
    res['inner_bind'] = err(e)
def udp(key, fam, addr, payload):
    try:
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(1.5)
        s.sendto(payload, addr)
        data, _ = s.recvfrom(4096)
        res[key] = 'answer'
    except OSError as e:
        res[key] = err(e)
dnsq = b'\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x04test\x00\x00\x01\x00\x01'
udp('udp_host_port', socket.AF_INET, ('127.0.0.1', @UP@), b'cordon-udp-probe')
udp('udp6_host_port', socket.AF_INET6, ('::1', @UP@), b'cordon-udp-probe')
udp('dns_loopback', socket.AF_INET, ('127.0.0.1', 53), dnsq)
udp('dns6_loopback', socket.AF_INET6, ('::1', 53), dnsq)
udp('dns_private', socket.AF_INET, ('10.0.0.1', 53), dnsq)
for key, name in [('resolve_name', 'a.test'), ('resolve_host', 'localhost.localdomain.test')]:
    try:
        socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP)
        res[key] = 'resolved'
    except OSError as e:
        res[key] = err(e)
def sock(key, *args):
    try:
        s = socket.socket(*args)
        res[key] = 'created'
        try:
            s.sendto(b'\x08\x00\xf7\xff\x00\x00\x00\x00', ('127.0.0.1', 0))
            res[key + '_send'] = 'sent'
        except OSError as e:
            res[key + '_send'] = err(e)
    except OSError as e:
        res[key] = err(e)
sock('icmp_dgram', socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
sock('icmp_raw', socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock('icmp6_dgram', socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_ICMPV6)
sock('packet', socket.AF_PACKET, socket.SOCK_RAW, 0)
ifs = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]
res['interfaces'] = ifs
res['routes'] = open('/proc/net/route').read().splitlines()[1:]
print(json.dumps(res))
"#;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn no_direct_path_out_tcp_udp_dns_ipv6_icmp() {
    if ready_with(&[]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let udp = HostServer::start(n.hp(), "udp", &["--udp"]);
    let code = DIRECT_PY
        .replace("@HP@", &s(web.port))
        .replace("@UP@", &s(udp.port))
        .replace("@FREE@", &s(free_port()));
    let o = n.wd.py(
        &["--allow-net", "a.test", "--resolve", "a.test=127.0.0.1"],
        &code,
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let r: Value = serde_json::from_str(o.stdout.trim()).unwrap_or_else(|_| panic!("{}", dump(&o)));
    let get = |k: &str| r[k].as_str().unwrap_or("missing").to_string();
    // Landlock lets TCP connect only to the proxy port: EACCES, not a
    // "connection refused" from an empty port.
    for k in [
        "tcp_host_port",
        "tcp_inner_port",
        "tcp6_loopback",
        "tcp_private",
        "create_connection",
    ] {
        assert_eq!(get(k), "EACCES", "{k}: {r}");
    }
    assert_eq!(get("tcp_proxy"), "connected", "{r}");
    // No IPv6 proxy listener to reach either.
    assert_ne!(get("tcp6_proxy_port"), "connected", "{r}");
    // Its own listener on another port is refused too (at bind or connect).
    if get("inner_bind") == "bound" {
        assert_eq!(get("tcp_inner_listener"), "EACCES", "{r}");
    } else {
        assert_eq!(get("inner_bind"), "EACCES", "{r}");
    }
    // UDP and DNS: no answer from anywhere.
    for k in [
        "udp_host_port",
        "udp6_host_port",
        "dns_loopback",
        "dns6_loopback",
        "dns_private",
    ] {
        let v = get(k);
        assert!(v != "answer" && v != "missing", "{k}: {r}");
    }
    assert_eq!(get("dns_private"), "ENETUNREACH", "no route: {r}");
    assert_eq!(get("resolve_name"), "gaierror", "{r}");
    assert_eq!(get("resolve_host"), "gaierror", "{r}");
    // ICMP and packet sockets cannot even be created.
    for k in ["icmp_dgram", "icmp_raw", "icmp6_dgram", "packet"] {
        let v = get(k);
        assert!(v == "EACCES" || v == "EPERM", "{k}: {r}");
    }
    assert_eq!(r["interfaces"], serde_json::json!(["lo"]), "{r}");
    assert_eq!(r["routes"], serde_json::json!([]), "{r}");

    // Nothing reached the host; the proxy saw no request (the bare connect
    // to it sent nothing).
    assert_eq!(web.accepts(), 0, "{:?}", web.entries());
    assert_eq!(udp.datagrams(), 0, "{:?}", udp.entries());
    assert_eq!(events(&o), Vec::<Value>::new(), "{}", dump(&o));
}

// ---------------------------------------------------------------------------
// TLS SNI must match the CONNECT host.

const SNI_PY: &str = r#"
import socket, ssl, sys
def attempt(host, sni):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(f'CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n'.encode())
    head = b''
    while b'\r\n\r\n' not in head:
        b = s.recv(1)
        if not b:
            break
        head += b
    status = head.split(b'\r\n')[0].decode()
    ctx = ssl.create_default_context(cafile='ca.pem')
    ctx.check_hostname = False
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(f'GET /hello.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n'.encode())
        first = t.recv(4096).split(b'\r\n')[0].decode()
        return f'{status} | tls ok | {first}'
    except (ssl.SSLError, OSError) as e:
        return f'{status} | tls failed: {type(e).__name__}'
print(attempt('tls.test', 'other.test'))
print(attempt('tls.test', 'tls.test'))
"#;

#[test]
fn sni_must_match_the_connect_host() {
    if ready_with(&[]) {
        return;
    }
    let n = Net::new();
    let tls = n.tls_server("tls", &[]);
    n.wd.write("sni.py", SNI_PY);
    let script = "\
        openssl s_client -proxy 127.0.0.1:3128 -connect tls.test:443 -servername other.test \
            -CAfile ca.pem </dev/null >/tmp/o1 2>&1; echo mismatch=$?; \
        openssl s_client -proxy 127.0.0.1:3128 -connect tls.test:443 -noservername \
            -CAfile ca.pem </dev/null >/tmp/o2 2>&1; echo missing=$?; \
        openssl s_client -proxy 127.0.0.1:3128 -connect tls.test:443 -servername tls.test \
            -CAfile ca.pem </dev/null 2>&1 | grep -q 'Verify return code: 0 ' && echo 1 || echo 0; \
        python3 sni.py";
    let o = n.wd.run(
        &[
            "--allow-net",
            "tls.test",
            "--resolve",
            &format!("tls.test:443=127.0.0.1:{}", tls.port),
        ],
        &["/bin/sh", "-c", script],
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", dump(&o));
    assert!(
        lines[0].starts_with("mismatch=") && lines[0] != "mismatch=0",
        "{}",
        dump(&o)
    );
    assert!(
        lines[1].starts_with("missing=") && lines[1] != "missing=0",
        "{}",
        dump(&o)
    );
    assert_eq!(lines[2], "1", "a matching SNI gets through: {}", dump(&o));
    assert!(
        lines[3].contains("tls failed"),
        "python, other SNI: {}",
        dump(&o)
    );
    assert!(
        lines[4].contains("tls ok | HTTP/1.0 200") || lines[4].contains("tls ok | HTTP/1.1 200"),
        "python, right SNI: {}",
        dump(&o)
    );
    let evs = events(&o);
    assert_eq!(
        rules(&evs),
        [
            "sni-mismatch other.test",
            "sni-missing",
            "allow:tls.test",
            "sni-mismatch other.test",
            "allow:tls.test"
        ],
        "{}",
        dump(&o)
    );
    for e in &evs {
        assert_eq!(e["protocol"], "connect");
        assert_eq!(e["host"], "tls.test");
        assert_eq!(e["port"], 443);
    }
    // No byte of a refused tunnel reached the server: the proxy opens the
    // upstream connection before it reads the ClientHello, but closes it
    // without forwarding anything, so only the allowed handshakes happened.
    let handshakes = tls.accepts()
        - tls
            .entries()
            .iter()
            .filter(|e| e["tls_error"].as_str().is_some_and(|m| m.contains("EOF")))
            .count();
    assert_eq!(handshakes, 2, "{:?}", tls.entries());
    assert_eq!(tls.paths(), vec!["/hello.txt"]);
}

/// Layer: the proxy's watch for TLS that starts late (STARTTLS). A tunnel
/// that opens in plaintext is not SNI-checked at its start, so the check
/// follows every byte the sandbox sends: `openssl s_client -starttls smtp`
/// to an SMTP server whose certificate covers both names may not switch
/// to TLS for another host than the tunnel's (the server never sees that
/// ClientHello whole), and switches for the tunnel's own.
#[test]
fn starttls_must_name_the_tunnels_host() {
    if ready_with(&["openssl"]) {
        return;
    }
    let n = Net::new();
    let (cert, key) = n.certs();
    let smtp = HostServer::start(
        n.hp(),
        "smtp",
        &[
            "--smtp",
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    let mut script = String::new();
    for name in ["other.test", "a.test"] {
        script.push_str(&format!(
            "timeout 30 openssl s_client -proxy 127.0.0.1:3128 -connect a.test:2525 \
                 -starttls smtp -servername {name} -CAfile ca.pem </dev/null >/dev/null 2>&1; \
             echo {name}=$?; "
        ));
    }
    let resolve = format!("a.test:2525=127.0.0.1:{}", smtp.port);
    let o = n.wd.run(
        &["--allow-net", "a.test", "--resolve", &resolve],
        &["/bin/sh", "-c", &script],
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", dump(&o));
    assert_ne!(lines[0], "other.test=0", "{}", dump(&o));
    assert_eq!(lines[1], "a.test=0", "{}", dump(&o));
    let evs = events(&o);
    assert_eq!(
        rules(&evs),
        [
            "sni-mismatch other.test (TLS after a plaintext start)",
            "allow:a.test"
        ],
        "{}",
        dump(&o)
    );
    assert_eq!(evs[0]["decision"], "deny", "{}", dump(&o));
    // Both sessions got as far as STARTTLS; only the tunnel's own name
    // reached the server in a ClientHello, and only it made TLS.
    let log = smtp.entries();
    let starttls = log.iter().filter(|e| e["smtp"] == "STARTTLS").count();
    assert_eq!(starttls, 2, "{log:?}");
    let snis: Vec<&Value> = log.iter().filter_map(|e| e.get("sni")).collect();
    assert_eq!(snis, [&Value::from("a.test")], "{log:?}");
    assert_eq!(
        log.iter().filter(|e| e.get("tls").is_some()).count(),
        1,
        "{log:?}"
    );
}

/// Domain fronting on ports other than 443 (8443, 2053: where front ends
/// serve HTTPS too): a tunnel that starts with a ClientHello must name the
/// CONNECT host on every port; without SNI only when the profile says
/// `network.allow_missing_sni = true`. Layer: the proxy's SNI check.
#[test]
fn sni_must_match_the_connect_host_on_every_port() {
    if ready_with(&["curl", "openssl"]) {
        return;
    }
    let n = Net::new();
    let tls = n.tls_server("tls", &[]);
    let mut script = String::new();
    for port in [8443, 2053] {
        script.push_str(&format!(
            "openssl s_client -proxy 127.0.0.1:3128 -connect tls.test:{port} -servername other.test \
                 -CAfile ca.pem </dev/null >/dev/null 2>&1; echo mismatch=$?; \
             openssl s_client -proxy 127.0.0.1:3128 -connect tls.test:{port} -noservername \
                 -CAfile ca.pem </dev/null >/dev/null 2>&1; echo missing=$?; \
             curl -sS --cacert ca.pem https://tls.test:{port}/hello.txt; "
        ));
    }
    let resolve: Vec<String> = [8443, 2053]
        .iter()
        .map(|p| format!("tls.test:{p}=127.0.0.1:{}", tls.port))
        .collect();
    let mut flags = vec!["--allow-net", "tls.test"];
    for r in &resolve {
        flags.extend(["--resolve", r.as_str()]);
    }
    let o = n.wd.run(&flags, &["/bin/sh", "-c", &script]);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{}", dump(&o));
    for i in [0, 3] {
        assert_ne!(lines[i], "mismatch=0", "{}", dump(&o));
        assert_ne!(lines[i + 1], "missing=0", "{}", dump(&o));
        assert_eq!(lines[i + 2], "hello from tls", "{}", dump(&o));
    }
    let evs = events(&o);
    assert_eq!(
        rules(&evs),
        [
            "sni-mismatch other.test",
            "sni-missing",
            "allow:tls.test",
            "sni-mismatch other.test",
            "sni-missing",
            "allow:tls.test"
        ],
        "{}",
        dump(&o)
    );
    // The profile key lets a ClientHello without SNI through; another name
    // is still refused.
    let prof = n.wd.write(
        "nosni.toml",
        "[network]\nmode = \"proxy\"\nallow = [\"tls.test\"]\nallow_missing_sni = true\n",
    );
    let mut flags = vec!["--profile", prof.to_str().unwrap()];
    for r in &resolve {
        flags.extend(["--resolve", r.as_str()]);
    }
    let o = n.wd.run(
        &flags,
        &[
            "/bin/sh",
            "-c",
            "openssl s_client -proxy 127.0.0.1:3128 -connect tls.test:8443 -noservername \
                 -CAfile ca.pem </dev/null >/dev/null 2>&1; echo missing=$?; \
             openssl s_client -proxy 127.0.0.1:3128 -connect tls.test:2053 -servername other.test \
                 -CAfile ca.pem </dev/null >/dev/null 2>&1; echo mismatch=$?",
        ],
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", dump(&o));
    assert_eq!(lines[0], "missing=0", "{}", dump(&o));
    assert_ne!(lines[1], "mismatch=0", "{}", dump(&o));
    assert_eq!(
        rules(&events(&o)),
        ["allow:tls.test", "sni-mismatch other.test"],
        "{}",
        dump(&o)
    );
}

#[test]
fn https_only_refuses_plain_http_and_tunnels_without_tls() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let tls = n.tls_server("tls", &[]);
    let script = format!(
        "curl -sS -w '\\n%{{http_code}}\\n' http://a.test:{p}/hello.txt; \
         curl -sS -p http://a.test:{p}/hello.txt; echo tunnel=$?; \
         curl -sS --cacert ca.pem https://tls.test/hello.txt; \
         curl -sS --cacert ca.pem https://tls.test:{t}/hello.txt",
        p = web.port,
        t = tls.port
    );
    let o = n.wd.run(
        &[
            "--allow-net",
            "a.test",
            "--allow-net",
            "tls.test",
            "--https-only",
            "--resolve",
            "a.test=127.0.0.1",
            "--resolve",
            "tls.test=127.0.0.1",
            "--resolve",
            &format!("tls.test:443=127.0.0.1:{}", tls.port),
        ],
        &["/bin/sh", "-c", &script],
    );
    assert!(o.stdout.contains("\n403\n"), "{}", dump(&o));
    assert!(o.stdout.contains("https"), "the 403 says why: {}", dump(&o));
    assert!(!o.stdout.contains("tunnel=0"), "{}", dump(&o));
    assert!(
        o.stdout.ends_with("hello from tls\nhello from tls\n"),
        "{}",
        dump(&o)
    );
    let evs = events(&o);
    assert_eq!(evs.len(), 4, "{}", dump(&o));
    check_event(
        &evs[0],
        "http",
        "a.test",
        web.port,
        "deny",
        "https-only",
        Some(403),
    );
    check_event(
        &evs[1],
        "connect",
        "a.test",
        web.port,
        "deny",
        "malformed: not a TLS handshake",
        None,
    );
    check_event(
        &evs[2],
        "connect",
        "tls.test",
        443,
        "allow",
        "allow:tls.test",
        None,
    );
    // With https_only, SNI is checked on every port.
    check_event(
        &evs[3],
        "connect",
        "tls.test",
        tls.port,
        "allow",
        "allow:tls.test",
        None,
    );
    assert_eq!(web.requests(), Vec::<Value>::new(), "{:?}", web.entries());
    assert_eq!(tls.paths(), vec!["/hello.txt", "/hello.txt"]);
}

// ---------------------------------------------------------------------------
// SSRF guard: metadata, private and loopback addresses.

#[test]
fn metadata_and_private_ip_literals_are_refused() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let script = format!(
        "curl -sS -m 10 http://169.254.169.254/latest/meta-data/; echo; echo ===; \
         curl -sS -m 10 http://10.0.0.1/; echo; echo ===; \
         curl -sS -m 10 http://127.0.0.1:{p}/hello.txt; echo; echo ===; \
         curl -sS -m 10 -k https://169.254.169.254/ 2>&1; echo ===; \
         curl -sS -m 10 --socks5 127.0.0.1:3128 http://10.0.0.1/ 2>&1",
        p = web.port
    );
    let o = n.wd.run(
        &[
            "--allow-net",
            "169.254.169.254",
            "--allow-net",
            "10.0.0.1",
            "--allow-net",
            "127.0.0.1",
        ],
        &["/bin/sh", "-c", &script],
    );
    let parts: Vec<&str> = o.stdout.split("===").collect();
    assert_eq!(parts.len(), 5, "{}", dump(&o));
    assert!(
        parts[0].contains("169.254.169.254 is a cloud metadata address"),
        "{}",
        parts[0]
    );
    assert!(parts[0].contains("network.allow_private"), "{}", parts[0]);
    assert!(parts[1].contains("10.0.0.1 is a private"), "{}", parts[1]);
    assert!(parts[2].contains("127.0.0.1 is a loopback"), "{}", parts[2]);
    assert!(!o.stdout.contains("hello from web"), "{}", dump(&o));
    let evs = events(&o);
    assert_eq!(evs.len(), 5, "{}", dump(&o));
    check_event(
        &evs[0],
        "http",
        "169.254.169.254",
        80,
        "deny",
        "metadata-address 169.254.169.254",
        Some(403),
    );
    check_event(
        &evs[1],
        "http",
        "10.0.0.1",
        80,
        "deny",
        "private-address 10.0.0.1",
        Some(403),
    );
    check_event(
        &evs[2],
        "http",
        "127.0.0.1",
        web.port,
        "deny",
        "private-address 127.0.0.1",
        Some(403),
    );
    check_event(
        &evs[3],
        "connect",
        "169.254.169.254",
        443,
        "deny",
        "metadata-address 169.254.169.254",
        Some(403),
    );
    check_event(
        &evs[4],
        "socks5",
        "10.0.0.1",
        80,
        "deny",
        "private-address 10.0.0.1",
        None,
    );
    assert_eq!(web.accepts(), 0, "{:?}", web.entries());
}

#[test]
fn a_name_that_resolves_to_loopback_is_refused() {
    if ready_with(&["curl"]) {
        return;
    }
    // Real resolution on the host side: localhost -> 127.0.0.1 (and ::1).
    let resolves = std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 80))
        .map(|mut a| a.all(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    if skip_unless(
        resolves,
        "localhost does not resolve to loopback on this host",
    ) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let log = n.net_log();
    let url = format!("http://localhost:{}/hello.txt", web.port);
    let o = n.wd.run(
        &[
            "--allow-net",
            "localhost",
            "--net-log",
            log.to_str().unwrap(),
        ],
        &["curl", "-sS", &url],
    );
    assert!(o.stdout.contains("denied (it resolves to "), "{}", dump(&o));
    assert!(o.stdout.contains("loopback"), "{}", dump(&o));
    assert!(o.stdout.contains("network.allow_private"), "{}", dump(&o));
    let evs = events(&o);
    assert_eq!(evs.len(), 1, "{}", dump(&o));
    let rule = evs[0]["rule"].as_str().unwrap();
    assert!(
        rule == "private-address 127.0.0.1" || rule == "private-address ::1",
        "{rule}"
    );
    check_event(
        &evs[0],
        "http",
        "localhost",
        web.port,
        "deny",
        rule,
        Some(403),
    );
    assert_eq!(read_jsonl(&log), evs);
    assert_eq!(web.accepts(), 0, "{:?}", web.entries());

    // Control: the same request with allow_private = true in a profile gets
    // through, so the refusal above was the address guard.
    let prof = n.wd.write(
        "private.toml",
        "[network]\nmode = \"proxy\"\nallow = [\"localhost\"]\nallow_private = true\n",
    );
    let o = n.wd.run(
        &["--profile", prof.to_str().unwrap()],
        &["curl", "-sS", &url],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(o.stdout, "hello from web\n", "{}", dump(&o));
    check_event(
        &events(&o)[0],
        "http",
        "localhost",
        web.port,
        "allow",
        "allow:localhost",
        Some(200),
    );
    assert_eq!(web.paths(), vec!["/hello.txt"]);
}

/// The network's own NAT64 prefix in these tests (a /96 from the global
/// unicast space that IANA lists no special purpose for), and the metadata
/// service's address under it.
const NSP: &str = "2602:fe00:64::";
const NSP_METADATA: &str = "2602:fe00:64::a9fe:a9fe";

/// Layer: the address guard's NAT64 prefixes (egress). On a network whose
/// translator uses a prefix of its own, `PREFIX::a9fe:a9fe` is the metadata
/// service; the guard learns the prefix from `ipv4only.arpa` (RFC 7050),
/// here declared with `--resolve` as a DNS64 resolver would answer it.
/// Control: without the prefix the same address is not refused, so the
/// refusal is this layer's.
#[test]
fn a_literal_under_the_networks_nat64_prefix_is_judged_by_what_it_carries() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let allow = format!("[{NSP_METADATA}]");
    let url = format!("http://[{NSP_METADATA}]/latest/meta-data/");
    let curl = ["curl", "-sS", "-m", "5", url.as_str()];
    let declared = [
        format!("ipv4only.arpa={NSP}c000:aa"),
        format!("ipv4only.arpa={NSP}c000:ab"),
    ];
    let o = n.wd.run(
        &[
            "--allow-net",
            &allow,
            "--resolve",
            &declared[0],
            "--resolve",
            &declared[1],
        ],
        &curl,
    );
    assert!(
        o.stdout.contains(&format!(
            "{NSP_METADATA} is a cloud metadata address (169.254.169.254, through this \
             network's NAT64 prefix {NSP}/96"
        )),
        "{}",
        dump(&o)
    );
    let evs = events(&o);
    assert_eq!(evs.len(), 1, "{}", dump(&o));
    let rule = format!("metadata-address {NSP_METADATA}");
    check_event(&evs[0], "http", NSP_METADATA, 80, "deny", &rule, Some(403));

    // Control: no DNS64 answer (the plain A records), no prefix.
    let o = n.wd.run(
        &[
            "--allow-net",
            &allow,
            "--resolve",
            "ipv4only.arpa=192.0.0.170",
        ],
        &curl,
    );
    assert!(!o.stdout.contains("cloud metadata"), "{}", dump(&o));
    assert!(
        events(&o).iter().all(|e| e["decision"] == "allow"),
        "{}",
        dump(&o)
    );
}

/// The same through the host's own resolver: `ipv4only.arpa` and the
/// allowed name both answered by the host's `/etc/hosts` (bound over it in
/// a mount namespace of the run's own, which needs root), as a DNS64
/// resolver would answer them. Control: the same name with no synthesized
/// `ipv4only.arpa` answer is not refused.
#[test]
fn root_only_a_name_under_the_networks_nat64_prefix_is_refused_through_the_hosts_resolver() {
    if ready_with(&["curl", "unshare"]) {
        return;
    }
    if skip_unless(
        is_root(),
        "binding over /etc/hosts in a mount namespace needs root",
    ) {
        return;
    }
    let n = Net::new();
    let curl = [
        "curl",
        "-sS",
        "-m",
        "5",
        "http://metadata.test/latest/meta-data/",
    ];
    let flags = ["--allow-net", "metadata.test"];
    let hosts = format!(
        "127.0.0.1 localhost\n{NSP_METADATA} metadata.test\n\
         {NSP}c000:aa ipv4only.arpa\n{NSP}c000:ab ipv4only.arpa\n"
    );
    let o = run_with_hosts(&n, &hosts, &flags, &curl);
    assert!(
        o.stdout.contains(&format!(
            "denied (it resolves to {NSP_METADATA}): {NSP_METADATA} is a cloud metadata \
             address (169.254.169.254, through this network's NAT64 prefix {NSP}/96"
        )),
        "{}",
        dump(&o)
    );
    let evs = events(&o);
    assert_eq!(evs.len(), 1, "{}", dump(&o));
    let rule = format!("metadata-address {NSP_METADATA}");
    check_event(
        &evs[0],
        "http",
        "metadata.test",
        80,
        "deny",
        &rule,
        Some(403),
    );

    // Control: the name alone, no synthesized answer for ipv4only.arpa.
    let hosts = format!("127.0.0.1 localhost\n{NSP_METADATA} metadata.test\n");
    let o = run_with_hosts(&n, &hosts, &flags, &curl);
    assert!(!o.stdout.contains("cloud metadata"), "{}", dump(&o));
    assert!(
        events(&o).iter().all(|e| e["decision"] == "allow"),
        "{}",
        dump(&o)
    );
}

/// `cordon run` in a mount namespace of its own whose `/etc/hosts` is
/// `hosts` (`unshare` execs in place: the pid is cordon's).
fn run_with_hosts(n: &Net, hosts: &str, flags: &[&str], cmd: &[&str]) -> Outcome {
    let hosts_file = n.hp().join("hosts");
    std::fs::write(&hosts_file, hosts).unwrap();
    let wrapper: [&OsStr; 9] = [
        "unshare".as_ref(),
        "--mount".as_ref(),
        "--propagation".as_ref(),
        "private".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        r#"mount --bind "$1" /etc/hosts && shift && exec "$@""#.as_ref(),
        "sh".as_ref(),
        hosts_file.as_os_str(),
    ];
    n.wd.run_under(&wrapper, flags, cmd)
}

// ---------------------------------------------------------------------------
// Rate limits and the byte cap, from profiles.

#[test]
fn rate_limit_from_a_profile_answers_429() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let prof = n.wd.write(
        "rl.toml",
        "[network]\nmode = \"proxy\"\nallow = [\"a.test\", \"b.test\"]\n\n\
         [[network.rate_limit]]\nhost = \"a.test\"\nrequests = 2\nper = \"1m\"\n",
    );
    let script = format!(
        "{GET_SH}for h in a a a b; do get http://$h.test:{p}/hello.txt; done",
        p = web.port
    );
    let o = n.wd.run(
        &[
            "--profile",
            prof.to_str().unwrap(),
            "--resolve",
            "a.test=127.0.0.1",
            "--resolve",
            "b.test=127.0.0.1",
        ],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", dump(&o));
    assert_eq!(lines[0], "200 hello from web ", "{}", dump(&o));
    assert_eq!(lines[1], "200 hello from web ");
    assert!(lines[2].starts_with("429 "), "third request: {}", dump(&o));
    assert!(lines[2].contains("rate limit"), "says why: {}", dump(&o));
    assert_eq!(
        lines[3],
        "200 hello from web ",
        "other hosts unaffected: {}",
        dump(&o)
    );
    let evs = events(&o);
    assert_eq!(
        rules(&evs),
        ["allow:a.test", "allow:a.test", "rate-limit", "allow:b.test"],
        "{}",
        dump(&o)
    );
    check_event(
        &evs[2],
        "http",
        "a.test",
        web.port,
        "deny",
        "rate-limit",
        Some(429),
    );
    assert_eq!(
        web.paths().len(),
        3,
        "the refused request never reached the host"
    );
}

#[test]
fn rate_limit_refusal_names_the_profile_key() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let prof = n.wd.write(
        "rl.toml",
        "[network]\nmode = \"proxy\"\nallow = [\"a.test\"]\n\n\
         [[network.rate_limit]]\nhost = \"a.test\"\nrequests = 1\nper = \"1m\"\n",
    );
    let url = format!("http://a.test:{}/hello.txt", web.port);
    let o = n.wd.run(
        &[
            "--profile",
            prof.to_str().unwrap(),
            "--resolve",
            "a.test=127.0.0.1",
        ],
        &[
            "/bin/sh",
            "-c",
            &format!("curl -sS {url} >/dev/null; curl -sS {url}"),
        ],
    );
    assert!(o.stdout.contains("rate limit"), "{}", dump(&o));
    assert!(!o.stdout.contains("network.rate_limits"), "{}", o.stdout);
    assert!(o.stdout.contains("network.rate_limit"), "{}", o.stdout);
}

#[test]
fn byte_cap_cuts_a_transfer() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let tls = n.tls_server("tls", &[]);
    let prof = n.wd.write(
        "cap.toml",
        "[network]\nmode = \"proxy\"\nallow = [\"a.test\", \"tls.test\"]\nmax_bytes = \"64KiB\"\n",
    );
    let flags = |extra: &[&str]| {
        let mut f = vec![
            "--profile".to_string(),
            prof.to_str().unwrap().to_string(),
            "--resolve".into(),
            "a.test=127.0.0.1".into(),
            "--resolve".into(),
            format!("tls.test:443=127.0.0.1:{}", tls.port),
        ];
        f.extend(extra.iter().map(|s| s.to_string()));
        f
    };
    // Plain HTTP: a small request, a big one that is cut, then a refusal.
    let script = format!(
        "{GET_SH}get http://a.test:{p}/hello.txt; \
         curl -sS -o /tmp/big http://a.test:{p}/big?n=1000000; echo big=$?; wc -c </tmp/big; \
         get http://a.test:{p}/hello.txt",
        p = web.port
    );
    let f = flags(&[]);
    let f: Vec<&str> = f.iter().map(|s| s.as_str()).collect();
    let o = n.wd.run(&f, &["/bin/sh", "-c", &script]);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", dump(&o));
    assert_eq!(lines[0], "200 hello from web ");
    assert_ne!(lines[1], "big=0", "the big transfer is cut: {}", dump(&o));
    let got: u64 = lines[2].trim().parse().unwrap();
    assert!(got <= CAP, "received {got} bytes past a {CAP} byte cap");
    assert!(lines[3].starts_with("429 "), "{}", dump(&o));
    assert!(lines[3].contains("byte cap"), "{}", dump(&o));
    let evs = events(&o);
    assert_eq!(
        rules(&evs),
        ["allow:a.test", "byte-cap", "byte-cap"],
        "{}",
        dump(&o)
    );
    check_event(
        &evs[1], "http", "a.test", web.port, "deny", "byte-cap", None,
    );
    check_event(
        &evs[2],
        "http",
        "a.test",
        web.port,
        "deny",
        "byte-cap",
        Some(429),
    );
    // The cap counts what crossed the proxy to and from destinations; the
    // proxy's own refusal (the 429) is not a transfer.
    let total: u64 = evs.iter().filter(|e| e["status"] != 429).map(moved).sum();
    assert!(total <= CAP, "counted {total} bytes");
    assert_eq!(web.paths(), vec!["/hello.txt", "/big?n=1000000"]);

    // Through a CONNECT tunnel the cap cuts the same way.
    let o = n.wd.run(
        &f,
        &[
            "/bin/sh",
            "-c",
            "curl -sS --cacert ca.pem -o /tmp/big https://tls.test/big?n=1000000; echo big=$?; cat /tmp/big 2>/dev/null | wc -c",
        ],
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", dump(&o));
    assert_ne!(lines[0], "big=0", "{}", dump(&o));
    let got: u64 = lines[1].trim().parse().unwrap();
    assert!(got <= CAP, "received {got} bytes through the tunnel");
    let evs = events(&o);
    assert_eq!(evs.len(), 1, "{}", dump(&o));
    check_event(
        &evs[0], "connect", "tls.test", 443, "deny", "byte-cap", None,
    );
    assert!(moved(&evs[0]) <= CAP, "{}", dump(&o));
    assert_eq!(tls.paths(), vec!["/big?n=1000000"]);
}

const CAP: u64 = 64 * 1024;

fn moved(e: &Value) -> u64 {
    e["bytes_up"].as_u64().unwrap() + e["bytes_down"].as_u64().unwrap()
}

/// Layer: the proxy's byte cap, granted before bytes are written on.
#[test]
fn byte_cap_is_exact() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let tls = n.tls_server("tls", &[]);
    let prof = n.wd.write(
        "cap.toml",
        "[network]\nmode = \"proxy\"\nallow = [\"a.test\", \"tls.test\"]\nmax_bytes = \"64KiB\"\n",
    );
    for url in [
        format!("http://a.test:{}/big?n=1000000", web.port),
        "https://tls.test/big?n=1000000".to_string(),
    ] {
        let o = n.wd.run(
            &[
                "--profile",
                prof.to_str().unwrap(),
                "--resolve",
                "a.test=127.0.0.1",
                "--resolve",
                &format!("tls.test:443=127.0.0.1:{}", tls.port),
            ],
            &["curl", "-sS", "--cacert", "ca.pem", "-o", "/dev/null", &url],
        );
        let evs = events(&o);
        assert_eq!(evs.len(), 1, "{}", dump(&o));
        assert_eq!(evs[0]["rule"], "byte-cap", "{}", dump(&o));
        // Every byte that crossed the proxy counts against the cap, and no
        // more than the cap crossed.
        assert!(
            moved(&evs[0]) <= CAP,
            "{url}: {} bytes moved under a {CAP} byte cap",
            moved(&evs[0])
        );
    }
    // Four transfers at once, plain and tunnelled: together they receive
    // no byte past the cap.
    let script = format!(
        "for i in 1 2; do \
           curl -sS -o /dev/null -w '%{{size_download}}\\n' http://a.test:{p}/big?n=1000000 & \
           curl -sS --cacert ca.pem -o /dev/null -w '%{{size_download}}\\n' https://tls.test/big?n=1000000 & \
         done 2>/dev/null; wait",
        p = web.port
    );
    let o = n.wd.run(
        &[
            "--profile",
            prof.to_str().unwrap(),
            "--resolve",
            "a.test=127.0.0.1",
            "--resolve",
            &format!("tls.test:443=127.0.0.1:{}", tls.port),
        ],
        &["/bin/sh", "-c", &script],
    );
    let sizes: Vec<u64> = o
        .stdout
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(sizes.len(), 4, "{}", dump(&o));
    let got: u64 = sizes.iter().sum();
    assert!(got > 0 && got <= CAP, "{sizes:?}: {}", dump(&o));
    let evs = events(&o);
    assert!(evs.iter().any(|e| e["rule"] == "byte-cap"), "{}", dump(&o));
}

/// An upload larger than the byte cap (which counts both directions): the
/// origin receives no byte past it, plain or through a tunnel, and the
/// sandbox is told (429, or the tunnel is cut).
#[test]
fn byte_cap_stops_an_upload_at_the_cap() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let tls = n.tls_server("tls", &[]);
    let prof = n.wd.write(
        "cap.toml",
        "[network]\nmode = \"proxy\"\nallow = [\"a.test\", \"tls.test\"]\nmax_bytes = \"64KiB\"\n",
    );
    for (server, url) in [
        (&web, format!("http://a.test:{}/upload", web.port)),
        (&tls, "https://tls.test/upload".to_string()),
    ] {
        let o = n.wd.run(
            &[
                "--profile",
                prof.to_str().unwrap(),
                "--resolve",
                "a.test=127.0.0.1",
                "--resolve",
                &format!("tls.test:443=127.0.0.1:{}", tls.port),
            ],
            &[
                "/bin/sh",
                "-c",
                &format!(
                    "head -c 1000000 /dev/zero >/tmp/up; \
                     curl -sS --cacert ca.pem -o /dev/null -w '%{{http_code}}\\n' \
                       -H 'Expect:' --data-binary @/tmp/up {url}; echo rc=$?"
                ),
            ],
        );
        let evs = events(&o);
        assert_eq!(rules(&evs), ["byte-cap"], "{url}: {}", dump(&o));
        if url.starts_with("http:") {
            assert!(o.stdout.starts_with("429\n"), "{}", dump(&o));
        } else {
            assert!(!o.stdout.contains("rc=0"), "{}", dump(&o));
        }
        // What the origin got of the 1,000,000 byte body (logged when its
        // side of the connection ends).
        let start = Instant::now();
        let received = loop {
            if let Some(e) = server
                .entries()
                .iter()
                .find(|e| e.get("received").is_some())
            {
                break e["received"].as_u64().unwrap();
            }
            if start.elapsed() > Duration::from_secs(10) {
                // The origin may not have read a body at all (the head alone
                // crossed the cap): then nothing was received.
                break 0;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            received < CAP,
            "{url}: the origin received {received} bytes"
        );
        // The sandbox's side of it (the 429 answer aside).
        assert!(
            evs[0]["bytes_up"].as_u64().unwrap() <= CAP,
            "{url}: {}",
            dump(&o)
        );
        if url.starts_with("https:") {
            assert!(moved(&evs[0]) <= CAP, "{url}: {}", dump(&o));
        }
    }
}

// ---------------------------------------------------------------------------
// The log: one event per attempt, secrets redacted.

#[test]
fn net_log_has_one_event_per_attempt_with_secrets_redacted() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let tls = n.tls_server("tls", &[]);
    let p = web.port;
    // The secret is put together at run time so that it appears only in
    // the traffic, not in the command line or the script.
    n.wd.write(
        "attempts.sh",
        &format!(
            r#"
S=SUPER; S="${{S}}SECRET"
curl -sS -H "Authorization: Bearer $S" "http://a.test:{p}/hello.txt?token=$S&x=1"
curl -sS "http://user:$S@a.test:{p}/hello.txt?api_key=$S"
curl -sS -H "Cookie: session=$S" "http://a.test:{p}/hello.txt?password=$S#frag"
curl -sS --cacert ca.pem -H "Authorization: Bearer $S" "https://tls.test/hello.txt?token=$S"
curl -sS -o /dev/null "http://evil.test:{p}/hello.txt?token=$S"
curl -sS -o /dev/null "http://unlisted.example:{p}/x?access_token=$S"
curl -sS -o /dev/null -x http://u:$S@127.0.0.1:3128 "http://a.test:{p}/hello.txt?sig=$S"
curl -sS --socks5-hostname 127.0.0.1:3128 "http://a.test:{p}/hello.txt?token=$S"
true
"#
        ),
    );
    let log = n.net_log();
    let audit = n.hp().join("audit.db");
    let o = n.wd.run(
        &[
            "--allow-net",
            "a.test",
            "--allow-net",
            "tls.test",
            "--allow-net",
            "evil.test",
            "--deny-net",
            "evil.test",
            "--resolve",
            "a.test=127.0.0.1",
            "--resolve",
            "evil.test=127.0.0.1",
            "--resolve",
            "unlisted.example=127.0.0.1",
            "--resolve",
            &format!("tls.test:443=127.0.0.1:{}", tls.port),
            "--net-log",
            log.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
        ],
        &["/bin/sh", "attempts.sh"],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(o.stdout.matches("hello from").count(), 5, "{}", dump(&o));
    let evs = events(&o);
    assert_eq!(
        rules(&evs),
        [
            "allow:a.test",
            "allow:a.test",
            "allow:a.test",
            "allow:tls.test",
            "deny:evil.test",
            "unlisted",
            "allow:a.test",
            "allow:a.test"
        ],
        "one event per attempt, in order: {}",
        dump(&o)
    );
    let logged = read_jsonl(&log);
    assert_eq!(logged, evs, "--net-log and the report hold the same events");
    let sum = &o.report["egress_summary"];
    assert_eq!(sum["connections"], 8, "{sum}");
    assert_eq!(sum["allowed"], 6, "{sum}");
    assert_eq!(sum["denied"], 2, "{sum}");

    // Paths are logged, with the secret values replaced.
    assert_eq!(evs[0]["path"], "/hello.txt?token=[REDACTED]&x=1");
    assert_eq!(evs[1]["path"], "/hello.txt?api_key=[REDACTED]");
    assert_eq!(evs[2]["path"], "/hello.txt?password=[REDACTED]");
    assert_eq!(evs[4]["path"], "/hello.txt?token=[REDACTED]");
    assert_eq!(evs[5]["path"], "/x?access_token=[REDACTED]");

    // SUPERSECRET is nowhere in the log, the report or the audit store.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("SUPERSECRET"), "net-log: {text}");
    let report = serde_json::to_string(&o.report).unwrap();
    assert!(!report.contains("SUPERSECRET"), "report: {report}");
    assert_eq!(
        audit_files_holding(n.hp(), "SUPERSECRET"),
        Vec::<String>::new(),
        "the audit store holds the secret"
    );
    // Redaction is for the log only: the allowed requests went upstream
    // intact, and the denied ones never arrived.
    let paths = web.paths();
    assert_eq!(
        paths,
        vec![
            "/hello.txt?token=SUPERSECRET&x=1",
            "/hello.txt?api_key=SUPERSECRET",
            "/hello.txt?password=SUPERSECRET",
            "/hello.txt?sig=SUPERSECRET",
            "/hello.txt?token=SUPERSECRET",
        ]
    );
    let first = &web.requests()[0];
    assert!(
        first["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[0] == "Authorization" && h[1] == "Bearer SUPERSECRET"),
        "{first}"
    );
    // The proxy's own credentials are not forwarded upstream.
    let proxied = &web.requests()[3];
    assert!(
        !proxied["headers"].as_array().unwrap().iter().any(|h| h[0]
            .as_str()
            .unwrap()
            .eq_ignore_ascii_case("proxy-authorization")),
        "{proxied}"
    );
    assert_eq!(tls.paths(), vec!["/hello.txt?token=SUPERSECRET"]);
}

#[test]
fn secrets_on_the_command_line_are_redacted_in_the_report() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let url = format!("http://a.test:{}/hello.txt?token=SUPERSECRET", web.port);
    let o = n.wd.run(
        &["--allow-net", "a.test", "--resolve", "a.test=127.0.0.1"],
        &[
            "curl",
            "-sS",
            "-H",
            "Authorization: Bearer SUPERSECRET",
            &url,
        ],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let report = serde_json::to_string(&o.report).unwrap();
    assert!(!report.contains("SUPERSECRET"), "report: {report}");
}

#[test]
fn audit_store_redacts_secrets_in_a_script_the_run_used() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    n.wd.write(
        "s.sh",
        &format!(
            "curl -sS -H 'Cookie: session=SUPERSECRET' 'http://a.test:{p}/hello.txt?sig=SUPERSECRET'\n",
            p = web.port
        ),
    );
    let audit = n.hp().join("audit.db");
    let o = n.wd.run(
        &[
            "--allow-net",
            "a.test",
            "--resolve",
            "a.test=127.0.0.1",
            "--audit",
            audit.to_str().unwrap(),
        ],
        &["/bin/sh", "s.sh"],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(
        audit_files_holding(n.hp(), "SUPERSECRET"),
        Vec::<String>::new()
    );
}

/// The audit store's files (`audit.db*` in `dir`) that contain `needle`.
fn audit_files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("audit.db") {
            let bytes = std::fs::read(entry.path()).unwrap();
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(name);
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------
// A profile's [network] section in proxy mode.

#[test]
fn profile_network_section_in_proxy_mode() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let prof = n.wd.write(
        "net.toml",
        r#"extends = "untrusted"

[network]
mode = "proxy"
allow = ["a.test", "*.svc.test"]
deny = ["bad.svc.test"]
methods = ["GET", "HEAD"]
on_unlisted = "ask"
"#,
    );
    let script = format!(
        "{GET_SH}get http://a.test:{p}/hello.txt; \
         get http://api.svc.test:{p}/hello.txt; \
         get -d x=1 http://a.test:{p}/echo; \
         get http://bad.svc.test:{p}/hello.txt; \
         get http://c.test:{p}/hello.txt",
        p = web.port
    );
    let o = n.wd.run(
        &[
            "--profile",
            prof.to_str().unwrap(),
            "--resolve",
            "a.test=127.0.0.1",
            "--resolve",
            "api.svc.test=127.0.0.1",
            "--resolve",
            "bad.svc.test=127.0.0.1",
            "--resolve",
            "c.test=127.0.0.1",
        ],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", dump(&o));
    assert_eq!(lines[0], "200 hello from web ");
    assert_eq!(lines[1], "200 hello from web ");
    assert!(
        lines[2].starts_with("403 ")
            && lines[2].contains("POST")
            && lines[2].contains("network.methods"),
        "method refused: {}",
        dump(&o)
    );
    assert!(
        lines[3].starts_with("403 ") && lines[3].contains("deny:bad.svc.test"),
        "{}",
        dump(&o)
    );
    // on_unlisted = "ask" under `cordon run`: refused, saying how to allow.
    assert!(
        lines[4].starts_with("403 ") && lines[4].contains("--allow-net c.test"),
        "{}",
        dump(&o)
    );
    let evs = events(&o);
    assert_eq!(
        rules(&evs),
        [
            "allow:a.test",
            "allow:*.svc.test",
            "method POST",
            "deny:bad.svc.test",
            "unlisted"
        ],
        "{}",
        dump(&o)
    );
    check_event(
        &evs[2],
        "http",
        "a.test",
        web.port,
        "deny",
        "method POST",
        Some(403),
    );
    assert_eq!(evs[2]["method"], "POST");
    assert_eq!(web.paths(), vec!["/hello.txt", "/hello.txt"]);

    // CLI flags add to the profile: --allow-net c.test lets it through.
    let o = n.wd.run(
        &[
            "--profile",
            prof.to_str().unwrap(),
            "--allow-net",
            "c.test",
            "--resolve",
            "c.test=127.0.0.1",
        ],
        &[
            "curl",
            "-sS",
            &format!("http://c.test:{}/hello.txt", web.port),
        ],
    );
    assert_eq!(o.stdout, "hello from web\n", "{}", dump(&o));
    assert_eq!(rules(&events(&o)), ["allow:c.test"]);
}

#[test]
fn without_proxy_mode_there_is_no_way_out() {
    if ready_with(&["curl"]) {
        return;
    }
    let n = Net::new();
    let web = n.http_server("web");
    let o = n.wd.sh(
        &[],
        &format!(
            "env | grep -ci proxy; curl -sS -m 5 -x http://127.0.0.1:3128 http://127.0.0.1:{}/ 2>&1; echo rc=$?",
            web.port
        ),
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], "0", "no proxy variables: {}", dump(&o));
    assert!(!o.stdout.contains("rc=0"), "{}", dump(&o));
    assert_eq!(events(&o), Vec::<Value>::new());
    assert_eq!(web.accepts(), 0);
}
