//! Secrets end to end (issue 5): a host secret is bound to a host with
//! `--secret NAME@host` or `[[secrets]]`; inside the sandbox `$NAME` holds a
//! placeholder, and cordon's proxy swaps in the real value only in requests
//! to the bound host. Real clients inside (curl, Python requests, git)
//! against servers this test starts on the host's loopback (127.0.0.1 only),
//! reached through `--resolve`.
//!
//! Each test checks what the client inside saw, every header the origin
//! received, and the report (egress events, incidents). Real values are
//! random per test and never passed into the sandbox, so finding one
//! anywhere inside (or in what cordon stores) is a leak.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

// ---------------------------------------------------------------------------
// Host side: origins, certificates.

/// An origin server for the host side. It logs every accepted connection,
/// TLS handshake failure and request (method, path, every header, body) as
/// JSON lines. `/echo?h=NAME` reflects request header NAME (default
/// Authorization) in the body and in an `X-Echo` response header; `/repo.git/...` is `git http-backend`;
/// everything else answers `hello from NAME`.
const ORIGIN_PY: &str = r#"
import argparse, http.server, json, os, ssl, subprocess, threading, urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument('--name'); ap.add_argument('--portfile'); ap.add_argument('--log')
ap.add_argument('--cert'); ap.add_argument('--key'); ap.add_argument('--git-root')
a = ap.parse_args()
lock = threading.Lock()

def log(obj):
    with lock:
        with open(a.log, 'a') as f:
            f.write(json.dumps(obj) + '\n')

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

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
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
    def body(self):
        n = int(self.headers.get('Content-Length') or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            out = b''
            while True:
                size = int(self.rfile.readline().split(b';')[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b''
    def reply(self, code, body, extra=()):
        self.send_response(code)
        self.send_header('Content-Type', 'text/plain')
        for k, v in extra:
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)
    def git(self, body):
        u = urllib.parse.urlsplit(self.path)
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
    def handle_any(self):
        body = self.body()
        log({'method': self.command, 'path': self.path,
             'headers': [[k, v] for k, v in self.headers.items()],
             'body': body.decode('latin1')})
        if a.git_root and self.path.startswith('/repo.git'):
            return self.git(body)
        if self.path.startswith('/echo'):
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            v = self.headers.get(q.get('h', ['Authorization'])[0], '')
            return self.reply(200, ('reflected: %s\n' % v).encode('latin1'), [('X-Echo', v)])
        self.reply(200, ('hello from %s\n' % a.name).encode())
    do_GET = do_POST = do_HEAD = do_PUT = handle_any

srv = Server(('127.0.0.1', 0), H)
tmp = a.portfile + '.tmp'
with open(tmp, 'w') as f:
    f.write(str(srv.server_address[1]))
os.rename(tmp, a.portfile)
srv.serve_forever()
"#;

/// An origin process on the host; killed (by its own pid) when dropped.
struct Origin {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Origin {
    fn start(dir: &Path, name: &str, extra: &[&str]) -> Origin {
        let script = dir.join("origin.py");
        if !script.exists() {
            std::fs::write(&script, ORIGIN_PY).expect("write origin.py");
        }
        let portfile = dir.join(format!("{name}.port"));
        let log = dir.join(format!("{name}.log"));
        std::fs::write(&log, "").expect("create origin log");
        let errlog = std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap();
        let child = Command::new("/usr/bin/python3")
            .arg(&script)
            .args(["--name", name, "--portfile"])
            .arg(&portfile)
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(errlog)
            .spawn()
            .expect("start origin");
        let mut o = Origin {
            child,
            port: 0,
            log,
        };
        let start = Instant::now();
        loop {
            if let Ok(t) = std::fs::read_to_string(&portfile) {
                if let Ok(p) = t.trim().parse() {
                    o.port = p;
                    return o;
                }
            }
            if let Ok(Some(st)) = o.child.try_wait() {
                panic!(
                    "origin {name} exited early ({st}): {}",
                    std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap_or_default()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "origin {name} did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn raw_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn entries(&self) -> Vec<Value> {
        self.raw_log()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("origin log line"))
            .collect()
    }

    /// The HTTP requests it received, in order.
    fn requests(&self) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e.get("method").is_some())
            .collect()
    }

    /// The values of header `name` (any case) over all requests, in order.
    fn header_values(&self, name: &str) -> Vec<String> {
        self.requests()
            .iter()
            .flat_map(|r| {
                r["headers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|h| h[0].as_str().is_some_and(|k| k.eq_ignore_ascii_case(name)))
                    .map(|h| h[1].as_str().unwrap_or("").to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn paths(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r["path"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One test's world: the sandbox's cwd (`wd`, read-only inside) and a
/// host-only directory (`host`: keys, logs, profiles, secret files, the
/// audit store; not visible inside).
struct World {
    wd: Workdir,
    host: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let host = tempfile::Builder::new()
            .prefix("cordon-secrets-host-")
            .tempdir()
            .expect("host tempdir");
        World {
            wd: Workdir::new(),
            host,
        }
    }

    fn hp(&self) -> &Path {
        self.host.path()
    }

    fn hpath(&self, name: &str) -> String {
        self.hp().join(name).to_str().unwrap().to_string()
    }

    fn http_origin(&self, name: &str) -> Origin {
        Origin::start(self.hp(), name, &[])
    }

    /// A TLS origin whose certificate (signed by the test's own CA) names
    /// api.test and other.test.
    fn tls_origin(&self, name: &str, extra: &[&str]) -> Origin {
        let (cert, key) = self.certs();
        let mut args = vec![
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Origin::start(self.hp(), name, &args)
    }

    /// The origins' CA (`ca.pem` on the host, given to the proxy with
    /// `--upstream-ca`; copied to `origin-ca.pem` in the sandbox's cwd for
    /// clients that pin it) and the server certificate.
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
             extendedKeyUsage=serverAuth\nsubjectAltName=DNS:api.test,DNS:other.test\n",
        )
        .unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let steps: Vec<Vec<&str>> = vec![
            [
                &["req", "-x509"][..],
                &ec[..],
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=cordon secrets test CA",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ][..],
            ]
            .concat(),
            [
                &["req"][..],
                &ec[..],
                &[
                    "-keyout",
                    "srv.key",
                    "-out",
                    "srv.csr",
                    "-subj",
                    "/CN=api.test",
                ][..],
            ]
            .concat(),
            vec![
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
        for args in &steps {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(d)
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::copy(d.join("ca.pem"), self.wd.path().join("origin-ca.pem")).unwrap();
        (cert, key)
    }

    fn upstream_ca(&self) -> String {
        self.certs();
        self.hpath("ca.pem")
    }

    /// `cordon run` with the host environment variables `env` set for
    /// cordon itself (where the real values come from).
    fn run(&self, env: &[(&str, &str)], flags: &[String], cmd: &[&str]) -> Outcome {
        let flags: Vec<&str> = flags.iter().map(|s| s.as_str()).collect();
        self.wd.run_with(&flags, cmd, |c| {
            for (k, v) in env {
                c.env(k, v);
            }
        })
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

/// The tools a test needs on the host and inside (the sandbox sees the
/// host's /usr). True when the test must stop.
fn ready_with(tools: &[&str]) -> bool {
    if ready() {
        return true;
    }
    for t in ["python3", "openssl"].iter().chain(tools) {
        let ok = match *t {
            "python3" => Path::new("/usr/bin/python3").exists(),
            other => have(other),
        };
        if skip_unless(ok, &format!("{t} is not installed (Debian package {t})")) {
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

fn requests_missing() -> bool {
    skip_unless(
        py_has("requests"),
        "Python requests is not importable by /usr/bin/python3 (Debian package python3-requests)",
    )
}

/// A fresh random secret value, different in every test and run.
fn fresh_value(tag: &str) -> String {
    let mut b = [0u8; 12];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("urandom");
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("realval-{tag}-{hex}")
}

fn has(hay: &[u8], needle: &str) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The placeholder of secret `name` the workload printed as `PH=...`.
#[track_caller]
fn placeholder_in(o: &Outcome, name: &str) -> String {
    let ph = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("PH="))
        .unwrap_or_else(|| panic!("no PH= line: {}", dump(o)))
        .to_string();
    let prefix = format!("cordon-{}-", name.to_ascii_lowercase());
    let hex = ph.strip_prefix(&prefix).unwrap_or_else(|| {
        panic!(
            "placeholder {ph:?} does not start with {prefix}: {}",
            dump(o)
        )
    });
    assert!(
        hex.len() == 32 && hex.bytes().all(|c| c.is_ascii_hexdigit()),
        "placeholder {ph:?}"
    );
    ph
}

fn events(o: &Outcome) -> Vec<Value> {
    o.report["egress"].as_array().cloned().unwrap_or_default()
}

fn incidents(o: &Outcome) -> Vec<Value> {
    o.report["incidents"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn secret_incidents(o: &Outcome) -> Vec<Value> {
    incidents(o)
        .into_iter()
        .filter(|i| i["kind"] == "secret")
        .collect()
}

/// The events whose rule contains `text`.
fn events_with(o: &Outcome, text: &str) -> Vec<Value> {
    events(o)
        .into_iter()
        .filter(|e| e["rule"].as_str().is_some_and(|r| r.contains(text)))
        .collect()
}

fn dump(o: &Outcome) -> String {
    format!(
        "code={} stdout={:?} stderr={:?} egress={} incidents={}",
        o.code,
        o.stdout,
        o.stderr,
        serde_json::to_string_pretty(&o.report["egress"]).unwrap_or_default(),
        serde_json::to_string_pretty(&o.report["incidents"]).unwrap_or_default()
    )
}

fn s(x: impl ToString) -> String {
    x.to_string()
}

fn flags(list: &[&str]) -> Vec<String> {
    list.iter().map(|x| x.to_string()).collect()
}

/// The report as written, never holding `value`.
#[track_caller]
fn assert_report_clean(o: &Outcome, value: &str) {
    let text = serde_json::to_string(&o.report).unwrap();
    assert!(
        !has(text.as_bytes(), value),
        "the report holds the value: {text}"
    );
}

// ---------------------------------------------------------------------------
// The bound host receives the real value, with each real client.

#[test]
fn curl_sends_the_real_value_only_to_the_bound_host() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("curl");
    let script = format!(
        "echo PH=$TOKEN; \
         curl -sS -H \"Authorization: Bearer $TOKEN\" -H \"X-Api-Key: $TOKEN\" https://api.test:{p}/hello; \
         echo rc=$?",
        p = api.port
    );
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
        ]),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    assert_ne!(ph, value);
    // The client saw the origin's answer, and never the value.
    assert!(o.stdout.contains("hello from api\nrc=0\n"), "{}", dump(&o));
    assert!(!o.stdout.contains(&value) && !o.stderr.contains(&value));
    // The origin got the real value in both headers, the placeholder nowhere.
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {value}")]
    );
    assert_eq!(api.header_values("X-Api-Key"), vec![value.clone()]);
    assert!(!api.raw_log().contains(&ph), "{}", api.raw_log());
    assert_eq!(api.paths(), vec!["/hello"]);
    // One event for the tunnel, one for the request inside it, which says
    // the secret was injected; no incident.
    let evs = events(&o);
    assert_eq!(evs.len(), 2, "{}", dump(&o));
    let inner = events_with(&o, "(secret TOKEN injected)");
    assert_eq!(inner.len(), 1, "{}", dump(&o));
    assert_eq!(inner[0]["protocol"], "https");
    assert_eq!(inner[0]["host"], "api.test");
    assert_eq!(inner[0]["port"], api.port);
    assert_eq!(inner[0]["path"], "/hello");
    assert_eq!(inner[0]["status"], 200);
    assert_eq!(inner[0]["decision"], "allow");
    assert!(inner[0].get("secret_leak").is_none(), "{}", dump(&o));
    assert_eq!(incidents(&o), Vec::<Value>::new(), "{}", dump(&o));
    assert_report_clean(&o, &value);
}

#[test]
fn python_requests_sends_the_real_value_to_the_bound_host() {
    if ready_with(&[]) || requests_missing() {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("requests");
    let code = r#"
import os, requests
print('PH=' + os.environ['TOKEN'])
r = requests.get('https://api.test:@P@/hello', headers={'Authorization': 'Bearer ' + os.environ['TOKEN']}, timeout=20)
print(r.status_code, r.text, end='')
r = requests.post('https://api.test:@P@/submit', headers={'X-Token': os.environ['TOKEN']}, data=b'payload', timeout=20)
print(r.status_code, r.text, end='')
"#
    .replace("@P@", &s(api.port));
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
        ]),
        &["python3", "-c", &code],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    assert!(
        o.stdout
            .ends_with("200 hello from api\n200 hello from api\n"),
        "{}",
        dump(&o)
    );
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {value}")]
    );
    assert_eq!(api.header_values("X-Token"), vec![value.clone()]);
    assert_eq!(api.paths(), vec!["/hello", "/submit"]);
    assert_eq!(api.requests()[1]["body"], "payload");
    assert!(!api.raw_log().contains(&ph));
    assert_eq!(
        events_with(&o, "(secret TOKEN injected)").len(),
        2,
        "{}",
        dump(&o)
    );
    assert_eq!(incidents(&o), Vec::<Value>::new(), "{}", dump(&o));
    assert_report_clean(&o, &value);
}

#[test]
fn git_clone_with_an_extra_header_sends_the_real_value() {
    if ready_with(&["git"]) {
        return;
    }
    let w = World::new();
    let hp = w.hp();
    let repos = bare_git_repo(hp, "cloned with a bound secret\n");
    let srv = w.tls_origin("git", &["--git-root", repos.to_str().unwrap()]);
    let value = fresh_value("git");
    let script = format!(
        "echo PH=$TOKEN; \
         git -c http.extraHeader=\"Authorization: Bearer $TOKEN\" clone -q https://api.test:{p}/repo.git /tmp/clone \
         && cat /tmp/clone/README",
        p = srv.port
    );
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
            "--timeout",
            "60s",
        ]),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    assert!(
        o.stdout.ends_with("cloned with a bound secret\n"),
        "{}",
        dump(&o)
    );
    // Every request of the smart-HTTP exchange carried the real value.
    let paths = srv.paths();
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("/repo.git/info/refs?service=git-upload-pack")),
        "{paths:?}"
    );
    assert!(
        paths.iter().any(|p| p == "/repo.git/git-upload-pack"),
        "{paths:?}"
    );
    let auth = srv.header_values("Authorization");
    assert_eq!(auth.len(), paths.len(), "{}", srv.raw_log());
    assert!(
        auth.iter().all(|a| *a == format!("Bearer {value}")),
        "{auth:?}"
    );
    assert!(!srv.raw_log().contains(&ph));
    assert_eq!(
        events_with(&o, "(secret TOKEN injected)").len(),
        paths.len(),
        "one injected event per request: {}",
        dump(&o)
    );
    assert_eq!(incidents(&o), Vec::<Value>::new(), "{}", dump(&o));
    assert_report_clean(&o, &value);
}

// ---------------------------------------------------------------------------
// Anywhere else, only the placeholder goes out, and that is an incident.

#[test]
fn unbound_host_and_cleartext_get_only_the_placeholder_and_an_incident() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let plain = w.http_origin("plain");
    let other_tls = w.tls_origin("othertls", &[]);
    let value = fresh_value("unbound");
    let net_log = w.hp().join("net.jsonl");
    let script = format!(
        "echo PH=$TOKEN; \
         curl -sS -H \"Authorization: Bearer $TOKEN\" http://other.test:{pp}/to-other; echo rc=$?; \
         curl -sS -H \"Authorization: Bearer $TOKEN\" http://api.test:{pp}/cleartext-to-bound; echo rc=$?; \
         curl -sS --cacert origin-ca.pem -H \"Authorization: Bearer $TOKEN\" https://other.test:{tp}/tunnel-to-other; echo rc=$?; \
         curl -sS -H \"Authorization: Bearer $TOKEN\" https://api.test:{ap}/bound; echo rc=$?",
        pp = plain.port,
        tp = other_tls.port,
        ap = api.port,
    );
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--allow-net",
            "other.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--resolve",
            "other.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
            "--net-log",
            net_log.to_str().unwrap(),
        ]),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    assert_eq!(
        o.stdout.lines().skip(1).collect::<Vec<_>>(),
        vec![
            "hello from plain",
            "rc=0",
            "hello from plain",
            "rc=0",
            "hello from othertls",
            "rc=0",
            "hello from api",
            "rc=0"
        ],
        "{}",
        dump(&o)
    );
    // The unbound host (plain HTTP and an opaque tunnel) and the bound host
    // over cleartext received the placeholder, unchanged; only the bound
    // host over TLS got the value.
    assert_eq!(plain.paths(), vec!["/to-other", "/cleartext-to-bound"]);
    assert_eq!(
        plain.header_values("Authorization"),
        vec![format!("Bearer {ph}"), format!("Bearer {ph}")]
    );
    assert_eq!(
        plain.header_values("Host")[0],
        format!("other.test:{}", plain.port)
    );
    assert_eq!(
        plain.header_values("Host")[1],
        format!("api.test:{}", plain.port)
    );
    assert_eq!(
        other_tls.header_values("Authorization"),
        vec![format!("Bearer {ph}")]
    );
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {value}")]
    );
    for origin in [&plain, &other_tls] {
        assert!(!origin.raw_log().contains(&value), "{}", origin.raw_log());
    }

    // The two leaks the proxy can see are events with secret_leak and
    // `secret` incidents naming the secret and the host.
    let leaks: Vec<Value> = events(&o)
        .into_iter()
        .filter(|e| e.get("secret_leak").is_some())
        .collect();
    assert_eq!(leaks.len(), 2, "{}", dump(&o));
    assert_eq!(leaks[0]["host"], "other.test");
    assert_eq!(leaks[0]["secret_leak"], "TOKEN");
    assert!(
        leaks[0]["rule"]
            .as_str()
            .unwrap()
            .contains("secret TOKEN placeholder to other.test, a host it is not bound to"),
        "{}",
        leaks[0]
    );
    assert_eq!(leaks[1]["host"], "api.test");
    assert_eq!(leaks[1]["secret_leak"], "TOKEN");
    assert!(
        leaks[1]["rule"]
            .as_str()
            .unwrap()
            .contains("secret TOKEN placeholder over cleartext HTTP, not injected"),
        "{}",
        leaks[1]
    );
    let inc = secret_incidents(&o);
    assert_eq!(inc.len(), 2, "{}", dump(&o));
    for (i, host) in inc.iter().zip(["other.test", "api.test"]) {
        assert_eq!(i["severity"], "high", "{i}");
        assert_eq!(i["evidence"]["secrets"], "TOKEN", "{i}");
        assert_eq!(i["evidence"]["host"], host, "{i}");
        assert_eq!(i["evidence"]["port"], plain.port, "{i}");
        let summary = i["summary"].as_str().unwrap();
        assert!(summary.contains("TOKEN") && summary.contains(host), "{i}");
        assert!(!summary.contains(&ph), "incidents name, not quote: {i}");
    }
    // The opaque tunnel to other.test is not intercepted (no CA of cordon's
    // is involved there), so the proxy cannot see what went through it.
    assert!(
        events(&o).iter().any(|e| e["protocol"] == "connect"
            && e["host"] == "other.test"
            && e["rule"] == "allow:other.test"),
        "{}",
        dump(&o)
    );
    // No other incident: nothing was denied.
    assert_eq!(incidents(&o).len(), 2, "{}", dump(&o));
    // The net log holds the same events, without the value.
    let log = std::fs::read_to_string(&net_log).unwrap();
    assert!(!log.contains(&value), "{log}");
    assert_eq!(log.lines().count(), events(&o).len());
    assert_report_clean(&o, &value);
}

// ---------------------------------------------------------------------------
// Nothing inside holds the real value.

/// Python, inside: collects everything the workload can read into the
/// output directory (argv[1]) for the host to search: every readable file
/// under /etc, /tmp, /dev/shm, /proc/self and the cwd (`files.bin`), every
/// process's environ and cmdline (`proc.bin`), and the readable memory of
/// every process it may read, itself included (`mem.bin`: what a core dump
/// would hold; core files are disabled inside). Prints counts.
const COLLECT_PY: &str = r#"
import os, sys
out = sys.argv[1]
SKIP = {'pagemap', 'mem', 'clear_refs', 'kcore', 'kmsg'}
nfiles = 0
with open(os.path.join(out, 'files.bin'), 'wb') as f:
    for root in ['/etc', '/tmp', '/dev/shm', '/proc/self', os.getcwd()]:
        for dirpath, dirs, files in os.walk(root, followlinks=False):
            for n in files:
                p = os.path.join(dirpath, n)
                if n in SKIP or os.path.islink(p):
                    continue
                try:
                    with open(p, 'rb') as g:
                        data = g.read(8 << 20)
                except OSError:
                    continue
                f.write(b'\n=== ' + p.encode() + b'\n' + data)
                nfiles += 1
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
with open(os.path.join(out, 'proc.bin'), 'wb') as f:
    for pid in pids:
        for what in ('environ', 'cmdline'):
            try:
                data = open('/proc/%d/%s' % (pid, what), 'rb').read()
            except OSError:
                continue
            f.write(b'\n=== %d %s\n' % (pid, what.encode()) + data)
scanned = []
with open(os.path.join(out, 'mem.bin'), 'wb') as f:
    for pid in pids:
        try:
            maps = open('/proc/%d/maps' % pid).read().splitlines()
            mem = open('/proc/%d/mem' % pid, 'rb', 0)
        except OSError:
            continue
        total = 0
        for line in maps:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split('-'))
            name = parts[5] if len(parts) > 5 else ''
            if 'r' not in parts[1] or name in ('[vvar]', '[vvar_vclock]', '[vsyscall]'):
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, OverflowError, ValueError):
                continue
            f.write(data)
            total += len(data)
        scanned.append((pid, total))
print('files', nfiles)
print('memory', ' '.join('%d:%d' % p for p in scanned))
"#;

#[test]
fn nothing_inside_holds_the_real_value() {
    if ready_with(&["curl", "grep"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("inside");
    // For the in-sandbox grep the value is given in two halves and joined
    // only in grep's pattern, which is read from a pipe; the collection
    // before it runs with no process holding the whole value.
    let (half_a, half_b) = value.split_at(value.len() / 2);
    let out = w.hp().join("out");
    std::fs::create_dir_all(&out).unwrap();
    w.wd.write("collect.py", COLLECT_PY);
    let script = format!(
        r#"echo PH=$TOKEN
curl -sS -o /dev/null -w 'status=%{{http_code}}\n' -H "Authorization: Bearer $TOKEN" https://api.test:{p}/hello
env > {o}/env.txt
cat /proc/self/environ > {o}/self-environ.bin
cat /etc/ssl/certs/ca-certificates.crt > {o}/bundle.pem
echo bundle_vars=$SSL_CERT_FILE,$REQUESTS_CA_BUNDLE,$NODE_EXTRA_CA_CERTS,$CURL_CA_BUNDLE,$GIT_SSL_CAINFO
ulimit -c
python3 collect.py {o}
G="grep -rlF --exclude=pagemap --exclude=mem -f - /etc /tmp /dev/shm /proc/self ."
printf '%s%s\n' "$RV_A" "$RV_B" | $G 2>/dev/null | sed 's/^/value-in: /'
printf '%s\n' "$TOKEN" | $G 2>/dev/null | sed 's/^/placeholder-in: /'
echo done
"#,
        p = api.port,
        o = out.display()
    );
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
            "--rw",
            out.to_str().unwrap(),
            "--setenv",
            &format!("RV_A={half_a}"),
            "--setenv",
            &format!("RV_B={half_b}"),
            "--timeout",
            "120s",
        ]),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert!(o.stdout.ends_with("done\n"), "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    // The secret was in use during the run: the origin got the value.
    assert!(o.stdout.contains("status=200\n"), "{}", dump(&o));
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {value}")]
    );
    // Core files are off (RLIMIT_CORE=1 shows as 0 blocks).
    assert!(
        o.stdout.lines().any(|l| l == "0"),
        "ulimit -c: {}",
        dump(&o)
    );

    // The in-sandbox grep: nothing holds the value, and the same grep finds
    // the placeholder (in its own /proc/self/environ), so it did search.
    assert!(
        !o.stdout.contains("value-in:"),
        "files inside hold the real value: {}",
        dump(&o)
    );
    assert!(
        o.stdout
            .lines()
            .any(|l| l == "placeholder-in: /proc/self/environ"),
        "{}",
        dump(&o)
    );

    // What the workload collected, searched on the host.
    let read = |n: &str| std::fs::read(out.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
    let env = String::from_utf8(read("env.txt")).unwrap();
    assert!(env.lines().any(|l| l == format!("TOKEN={ph}")), "{env}");
    for name in [
        "env.txt",
        "self-environ.bin",
        "files.bin",
        "proc.bin",
        "mem.bin",
    ] {
        let data = read(name);
        assert!(
            !has(&data, &value),
            "{name} ({} bytes) holds the real value",
            data.len()
        );
        assert!(
            has(&data, &ph),
            "{name} ({} bytes) does not even hold the placeholder: the search proves nothing",
            data.len()
        );
    }
    // /proc/*/environ and cmdline of several processes, and the memory of
    // at least the collector itself and its shell, were read.
    let procs = read("proc.bin");
    let text = String::from_utf8_lossy(&procs);
    assert!(
        text.matches(" environ\n").count() >= 2,
        "environ of fewer than two processes read"
    );
    let mem_line = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("memory "))
        .unwrap_or_else(|| panic!("{}", dump(&o)));
    let regions: Vec<(u32, u64)> = mem_line
        .split_whitespace()
        .map(|p| {
            let (a, b) = p.split_once(':').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert!(
        regions.len() >= 2 && regions.iter().all(|(_, n)| *n > 0),
        "memory scanned: {mem_line}"
    );
    assert!(
        read("mem.bin").len() > 1 << 20,
        "less than 1 MiB of memory read"
    );
    let files_line = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("files "))
        .unwrap();
    assert!(files_line.parse::<u32>().unwrap() > 20, "{files_line}");

    // The CA bundle: the variables point at it; it is the host's bundle
    // plus exactly one more certificate (cordon's CA, a CA certificate),
    // and no private key.
    let vars = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("bundle_vars="))
        .unwrap();
    let bundle_path = "/etc/ssl/certs/ca-certificates.crt";
    assert_eq!(vars, [bundle_path; 5].join(","), "{}", dump(&o));
    let bundle = String::from_utf8(read("bundle.pem")).unwrap();
    assert!(!bundle.contains("PRIVATE KEY"), "the CA bundle holds a key");
    assert!(!bundle.contains(&value));
    let host_bundle = std::fs::read_to_string(bundle_path).unwrap_or_default();
    let extra = bundle
        .strip_prefix(host_bundle.as_str())
        .unwrap_or_else(|| panic!("the bundle does not start with the host's bundle"));
    assert_eq!(
        extra.matches("-----BEGIN CERTIFICATE-----").count(),
        1,
        "one certificate added: {extra}"
    );
    assert_eq!(extra.matches("-----BEGIN ").count(), 1, "{extra}");
    let pem = &extra[extra.find("-----BEGIN CERTIFICATE-----").unwrap()..];
    std::fs::write(w.hp().join("cordon-ca.pem"), pem).unwrap();
    let x = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(w.hp().join("cordon-ca.pem"))
        .output()
        .unwrap();
    let x = String::from_utf8_lossy(&x.stdout);
    assert!(x.contains("CA:TRUE"), "{x}");
    assert_report_clean(&o, &value);
}

// ---------------------------------------------------------------------------
// Nothing cordon stores holds the real value, even when the origin
// reflects it.

#[test]
fn report_net_log_excerpts_and_audit_never_hold_the_value() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("stored");
    let net_log = w.hp().join("net.jsonl");
    let audit_dir = w.hp().join("audit");
    std::fs::create_dir_all(&audit_dir).unwrap();
    let db = audit_dir.join("a.db");
    // The origin reflects a custom header holding the secret (in the body
    // and in a response header); the workload prints what it got on stdout
    // and stderr. A custom header and a plain `reflected:` line keep the
    // pattern-based redaction (bearer tokens, `key=`) out of the way: only
    // redaction by value can catch it.
    let script = format!(
        "echo PH=$TOKEN; \
         curl -sS -D /tmp/h -H \"X-Custom: $TOKEN\" 'https://api.test:{p}/echo?h=X-Custom' | tee /dev/stderr; \
         grep -i '^x-echo' /tmp/h | tr -d '\\r'",
        p = api.port
    );
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
            "--net-log",
            net_log.to_str().unwrap(),
            "--audit",
            db.to_str().unwrap(),
        ]),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    assert_eq!(api.header_values("X-Custom"), vec![value.clone()]);
    // A value echoed in a response header is turned back into the
    // placeholder.
    assert!(
        o.stdout.lines().any(|l| l == format!("X-Echo: {ph}")),
        "{}",
        dump(&o)
    );
    // A value reflected in a response body is scrubbed back to the
    // placeholder before it reaches the workload.
    assert!(
        !o.stdout.contains(&value) && o.stdout.contains(&format!("reflected: {ph}\n")),
        "{}",
        dump(&o)
    );
    assert!(!o.stderr.contains(&value), "{}", dump(&o));

    assert_report_clean(&o, &value);
    let log = std::fs::read_to_string(&net_log).unwrap();
    assert!(!log.is_empty() && !log.contains(&value), "{log}");

    // Every file of the audit store (database, WAL, head, anything else),
    // raw bytes.
    let mut seen = Vec::new();
    let mut stack = vec![audit_dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let bytes = std::fs::read(&p).unwrap();
            assert!(!has(&bytes, &value), "{} holds the real value", p.display());
            seen.push(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(seen.iter().any(|n| n == "a.db"), "{seen:?}");

    // What the audit commands print: the run, with its output excerpts
    // (redacted) and the egress events.
    let run_id = o.report["run_id"].as_str().unwrap().to_string();
    let audit = |args: &[&str]| {
        let out = Command::new(cordon_bin())
            .arg("audit")
            .args(args)
            .arg("--store")
            .arg(&db)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cordon audit {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let export = audit(&["export", "--format", "jsonl"]);
    let show = audit(&["show", &run_id, "--json"]);
    for (what, text) in [("export", &export), ("show", &show)] {
        assert!(
            !text.contains(&value),
            "audit {what} holds the value: {text}"
        );
    }
    assert!(export.contains(&run_id), "{export}");
    // The output excerpts are stored, with the placeholder the workload saw.
    let shown: Value = serde_json::from_str(&show).unwrap();
    let excerpts: Vec<String> = shown["records"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            ["stdout", "stderr"]
                .into_iter()
                .filter_map(|k| r["body"][k]["excerpt"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(excerpts.len(), 2, "{show}");
    for e in &excerpts {
        assert!(e.contains(&format!("reflected: {ph}")), "excerpt: {e:?}");
    }
    assert!(excerpts[0].contains(&format!("PH={ph}")), "{excerpts:?}");
}

// ---------------------------------------------------------------------------
// Fail closed: clients that pin their own CA, origins that don't verify.

#[test]
fn a_client_pinning_its_own_ca_fails_closed() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("pinned");
    let with_requests = py_has("requests");
    let script = format!(
        r#"echo PH=$TOKEN
curl -sS --cacert origin-ca.pem -H "Authorization: Bearer $TOKEN" https://api.test:{p}/curl-pinned; echo curl_rc=$?
if [ {r} = 1 ]; then python3 -c '
import os, requests
try:
    r = requests.get("https://api.test:{p}/requests-pinned", verify="origin-ca.pem",
                     headers={{"Authorization": "Bearer " + os.environ["TOKEN"]}}, timeout=20)
    print("requests", r.status_code)
except requests.exceptions.SSLError as e:
    print("requests SSLError")
'; fi
"#,
        p = api.port,
        r = u8::from(with_requests)
    );
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
        ]),
        &["/bin/sh", "-c", &script],
    );
    let ph = placeholder_in(&o, "TOKEN");
    // curl: certificate verification failed (60) against the pinned CA.
    assert!(o.stdout.contains("curl_rc=60\n"), "{}", dump(&o));
    if with_requests {
        assert!(o.stdout.contains("requests SSLError\n"), "{}", dump(&o));
    }
    // The origin received no request: neither the value nor the
    // placeholder.
    assert_eq!(api.requests(), Vec::<Value>::new(), "{}", api.raw_log());
    let raw = api.raw_log();
    assert!(!raw.contains(&value) && !raw.contains(&ph), "{raw}");
    // The proxy recorded the failed client handshake.
    let refused = events_with(&o, "client-tls:");
    assert_eq!(
        refused.len(),
        if with_requests { 2 } else { 1 },
        "{}",
        dump(&o)
    );
    for e in &refused {
        assert_eq!(e["decision"], "deny", "{e}");
        assert_eq!(e["host"], "api.test", "{e}");
    }
    assert!(events_with(&o, "injected").is_empty(), "{}", dump(&o));
    assert!(secret_incidents(&o).is_empty(), "{}", dump(&o));
    assert_report_clean(&o, &value);
    if !with_requests {
        skip_unless(
            false,
            "Python requests is not importable (Debian package python3-requests); only curl was checked",
        );
    }
}

#[test]
fn upstream_verification_cannot_be_weakened() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("upstream");
    // Without --upstream-ca the origin's certificate (a private CA) does not
    // verify against the host's trust store. The client inside can't change
    // that: not by skipping its own verification (-k), not by trusting the
    // origin's CA itself.
    let script = format!(
        "echo PH=$TOKEN; \
         curl -sS -w ' code=%{{http_code}}\\n' -H \"Authorization: Bearer $TOKEN\" https://api.test:{p}/plain; \
         curl -sS -k -w ' code=%{{http_code}}\\n' -H \"Authorization: Bearer $TOKEN\" https://api.test:{p}/insecure; \
         SSL_CERT_FILE=origin-ca.pem CURL_CA_BUNDLE=origin-ca.pem curl -sS -w ' code=%{{http_code}}\\n' -H \"Authorization: Bearer $TOKEN\" https://api.test:{p}/own-bundle; \
         echo rc=$?",
        p = api.port
    );
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
        ]),
        &["/bin/sh", "-c", &script],
    );
    let ph = placeholder_in(&o, "TOKEN");
    // The first two requests: a 502 from the proxy saying why, nothing sent.
    let lines: Vec<&str> = o.stdout.lines().skip(1).collect();
    let refusal = format!(
        "cordon: the TLS connection to api.test:{} failed verification against the host's trust store",
        api.port
    );
    assert_eq!(lines.len(), 6, "{}", dump(&o));
    for i in [0, 2] {
        assert!(
            lines[i].starts_with(&refusal) && lines[i].ends_with("nothing was sent."),
            "{}",
            dump(&o)
        );
        assert_eq!(lines[i + 1], " code=502", "{}", dump(&o));
    }
    // Trusting only the origin's CA, the client rejects cordon's leaf.
    assert!(o.stdout.contains("rc=60"), "{}", dump(&o));
    assert_eq!(api.requests(), Vec::<Value>::new(), "{}", api.raw_log());
    let raw = api.raw_log();
    assert!(!raw.contains(&value) && !raw.contains(&ph), "{raw}");
    let refused = events_with(&o, "upstream-tls:");
    assert_eq!(refused.len(), 2, "{}", dump(&o));
    for e in &refused {
        assert_eq!(e["decision"], "deny", "{e}");
        assert_eq!(e["status"], 502, "{e}");
    }
    assert!(events_with(&o, "injected").is_empty(), "{}", dump(&o));
    assert_report_clean(&o, &value);
}

// ---------------------------------------------------------------------------
// Sources, TTL, and what a missing source does.

#[test]
fn an_expired_ttl_stops_injection() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let short = fresh_value("short");
    let long = fresh_value("long");
    let prof = w.hp().join("ttl.toml");
    std::fs::write(
        &prof,
        r#"[network]
mode = "proxy"
allow = ["api.test"]

[[secrets]]
name = "TOKEN"
from = { env = "TTL_SHORT_VALUE" }
hosts = ["api.test"]
ttl = "1s"

[[secrets]]
name = "KEEP"
from = { env = "TTL_LONG_VALUE" }
hosts = ["api.test"]
"#,
    )
    .unwrap();
    let script = format!(
        "echo PH=$TOKEN; sleep 2; \
         curl -sS -H \"Authorization: Bearer $TOKEN\" -H \"X-Keep: $KEEP\" https://api.test:{p}/late",
        p = api.port
    );
    let o = w.run(
        &[("TTL_SHORT_VALUE", &short), ("TTL_LONG_VALUE", &long)],
        &flags(&[
            "--profile",
            prof.to_str().unwrap(),
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
        ]),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    assert!(o.stdout.ends_with("hello from api\n"), "{}", dump(&o));
    // After its TTL the placeholder goes out unchanged; the other secret,
    // in the same request, is still injected.
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {ph}")]
    );
    assert_eq!(api.header_values("X-Keep"), vec![long.clone()]);
    assert!(!api.raw_log().contains(&short));
    let ev = events_with(&o, "secret TOKEN expired, not injected");
    assert_eq!(ev.len(), 1, "{}", dump(&o));
    assert!(
        ev[0]["rule"]
            .as_str()
            .unwrap()
            .contains("secret KEEP injected"),
        "{}",
        ev[0]
    );
    assert_report_clean(&o, &short);
    assert_report_clean(&o, &long);
}

#[test]
fn values_from_a_file_and_a_command() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let from_file = fresh_value("file");
    let from_cmd = fresh_value("cmd");
    // Both the secret file and the profile (which holds the command's
    // output literally) stay on the host side, out of the sandbox's view.
    let secret_file = w.hp().join("token.txt");
    std::fs::write(&secret_file, format!("{from_file}\n")).unwrap();
    let prof = w.hp().join("sources.toml");
    std::fs::write(
        &prof,
        format!(
            r#"[network]
mode = "proxy"
allow = ["api.test"]

[[secrets]]
name = "FILE_TOKEN"
from = {{ file = "{f}" }}
hosts = ["api.test"]

[[secrets]]
name = "CMD_TOKEN"
from = {{ command = ["printf", "{from_cmd}"] }}
hosts = ["api.test"]
"#,
            f = secret_file.display()
        ),
    )
    .unwrap();
    let db = w.hp().join("audit").join("a.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let script = format!(
        "echo PH=$FILE_TOKEN; echo CMD_PH=$CMD_TOKEN; \
         curl -sS -H \"Authorization: Bearer $FILE_TOKEN\" -H \"X-Cmd: $CMD_TOKEN\" https://api.test:{p}/both",
        p = api.port
    );
    let o = w.run(
        &[],
        &flags(&[
            "--profile",
            prof.to_str().unwrap(),
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
            "--audit",
            db.to_str().unwrap(),
        ]),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "FILE_TOKEN");
    assert!(
        o.stdout.contains("CMD_PH=cordon-cmd_token-"),
        "{}",
        dump(&o)
    );
    assert!(o.stdout.ends_with("hello from api\n"), "{}", dump(&o));
    // The file's trailing newline is not part of the value.
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {from_file}")]
    );
    assert_eq!(api.header_values("X-Cmd"), vec![from_cmd.clone()]);
    assert!(!api.raw_log().contains(&ph));
    let ev = events_with(&o, "injected");
    assert_eq!(ev.len(), 1, "{}", dump(&o));
    let rule = ev[0]["rule"].as_str().unwrap();
    assert!(
        rule.contains("secret FILE_TOKEN injected") && rule.contains("secret CMD_TOKEN injected"),
        "{rule}"
    );
    for v in [&from_file, &from_cmd] {
        assert_report_clean(&o, v);
        assert!(!o.stdout.contains(v.as_str()) && !o.stderr.contains(v.as_str()));
        // The profile (stored in the audit store) holds the command's
        // output literally: it is redacted there too.
        for e in std::fs::read_dir(db.parent().unwrap()).unwrap().flatten() {
            let bytes = std::fs::read(e.path()).unwrap();
            assert!(!has(&bytes, v), "{} holds a value", e.path().display());
        }
    }
}

#[test]
fn a_missing_source_refuses_to_start() {
    if ready_with(&[]) {
        return;
    }
    let w = World::new();
    let marker_file = w.hp().join("ran");
    let o = w.wd.run_with(
        &["--secret", "CORDON_TEST_SURELY_UNSET_TOKEN@api.test"],
        &[
            "/bin/sh",
            "-c",
            &format!("touch {}; echo ran", marker_file.display()),
        ],
        |c| {
            c.env_remove("CORDON_TEST_SURELY_UNSET_TOKEN");
        },
    );
    assert_eq!(o.code, 125, "{}", dump(&o));
    assert!(
        o.stderr.contains("CORDON_TEST_SURELY_UNSET_TOKEN") && o.stderr.contains("export it"),
        "{}",
        dump(&o)
    );
    assert_eq!(o.stdout, "", "the command did not run");
    assert!(!marker_file.exists());

    // Same for a secret file that does not exist, and a command that fails.
    for (from, needle) in [
        (
            format!("{{ file = \"{}\" }}", w.hp().join("nope.txt").display()),
            "nope.txt",
        ),
        ("{ command = [\"false\"] }".to_string(), "failed"),
    ] {
        let prof = w.hp().join("missing.toml");
        std::fs::write(
            &prof,
            format!(
                "[network]\nmode = \"proxy\"\nallow = [\"api.test\"]\n\n[[secrets]]\nname = \"TOKEN\"\nfrom = {from}\nhosts = [\"api.test\"]\n"
            ),
        )
        .unwrap();
        let o = w.wd.run(
            &["--profile", prof.to_str().unwrap()],
            &["/bin/sh", "-c", "echo ran"],
        );
        assert_eq!(o.code, 125, "{from}: {}", dump(&o));
        assert!(
            o.stderr.contains("secret TOKEN") && o.stderr.contains(needle),
            "{from}: {}",
            dump(&o)
        );
        assert_eq!(o.stdout, "");
    }
}

// ---------------------------------------------------------------------------
// A secret's hosts are allowed by the secret; nothing else is.

#[test]
fn a_secret_allows_its_hosts_and_nothing_else() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let plain = w.http_origin("plain");
    let value = fresh_value("allow");
    let script = format!(
        "echo PH=$TOKEN; \
         curl -sS -H \"Authorization: Bearer $TOKEN\" https://api.test:{ap}/bound; \
         curl -sS -w ' code=%{{http_code}}\\n' -H \"Authorization: Bearer $TOKEN\" http://other.test:{pp}/denied; \
         curl -sS -H \"Authorization: Bearer $TOKEN\" https://other.test:{ap}/denied-tunnel; echo rc=$?",
        ap = api.port,
        pp = plain.port
    );
    // Only --secret: no --allow-net at all.
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--resolve",
            "other.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
        ]),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    placeholder_in(&o, "TOKEN");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[1], "hello from api", "{}", dump(&o));
    // The plain request to other.test: a 403 that says how to allow it.
    assert!(
        lines[2].contains("denied") && lines[2].contains("--allow-net other.test"),
        "{}",
        dump(&o)
    );
    assert_eq!(lines[3], " code=403", "{}", dump(&o));
    // The tunnel to other.test: CONNECT refused (curl exit 56).
    assert_eq!(lines[4], "rc=56", "{}", dump(&o));
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {value}")]
    );
    assert_eq!(api.paths(), vec!["/bound"]);
    assert_eq!(plain.requests(), Vec::<Value>::new());
    let rules: Vec<String> = events(&o)
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["host"].as_str().unwrap(),
                e["rule"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        rules.iter().any(|r| r == "api.test allow:api.test"),
        "the secret's host is allowed by the secret: {rules:?}"
    );
    assert_eq!(
        rules.iter().filter(|r| *r == "other.test unlisted").count(),
        2,
        "{rules:?}"
    );
    // Denied egress is an egress incident, not a secret leak: nothing went.
    assert!(secret_incidents(&o).is_empty(), "{}", dump(&o));
    assert_eq!(
        incidents(&o)
            .iter()
            .filter(|i| i["kind"] == "egress")
            .count(),
        2,
        "{}",
        dump(&o)
    );
    assert_report_clean(&o, &value);
}

// ---------------------------------------------------------------------------
// What cordon tells people about secret incidents.

#[test]
fn the_incident_line_names_secret_leaks() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let plain = w.http_origin("plain");
    let value = fresh_value("summary");
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--allow-net",
            "other.test",
            "--resolve",
            "other.test=127.0.0.1",
        ]),
        &[
            "/bin/sh",
            "-c",
            &format!(
                "curl -sS -H \"Authorization: Bearer $TOKEN\" http://other.test:{}/x",
                plain.port
            ),
        ],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(secret_incidents(&o).len(), 1, "{}", dump(&o));
    let line = o
        .stderr
        .lines()
        .find(|l| l.contains("incident(s)"))
        .unwrap_or_else(|| panic!("{}", dump(&o)));
    assert!(line.contains("1 secret"), "{line}");
}

#[test]
fn a_cleartext_leak_to_the_bound_host_says_cleartext() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let plain = w.http_origin("plain");
    let value = fresh_value("cleartext");
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
        ]),
        &[
            "/bin/sh",
            "-c",
            &format!(
                "curl -sS -H \"Authorization: Bearer $TOKEN\" http://api.test:{}/x",
                plain.port
            ),
        ],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    let inc = secret_incidents(&o);
    assert_eq!(inc.len(), 1, "{}", dump(&o));
    let summary = inc[0]["summary"].as_str().unwrap();
    assert!(!summary.contains("not bound"), "{summary}");
    assert!(summary.contains("cleartext"), "{summary}");
}

// ---------------------------------------------------------------------------
// Where a value may be injected: headers by default; the query string and
// the body only when the profile enables them.

#[test]
fn query_and_body_are_injected_only_when_enabled() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("where");
    let profile = |inject: &str| {
        let p = w.hp().join(format!("inject-{}.toml", inject.len()));
        std::fs::write(
            &p,
            format!(
                "[network]\nmode = \"proxy\"\nallow = [\"api.test\"]\n\n[[secrets]]\nname = \"TOKEN\"\n\
                 from = {{ env = \"WHERE_VALUE\" }}\nhosts = [\"api.test\"]\ninject = {inject}\n"
            ),
        )
        .unwrap();
        p
    };
    let script = format!(
        "echo PH=$TOKEN; \
         curl -sS -H \"Authorization: Bearer $TOKEN\" --data-binary \"tok=$TOKEN\" \"https://api.test:{p}/q?key=$TOKEN\"",
        p = api.port
    );
    let run = |prof: &Path| {
        w.run(
            &[("WHERE_VALUE", &value)],
            &flags(&[
                "--profile",
                prof.to_str().unwrap(),
                "--resolve",
                "api.test=127.0.0.1",
                "--upstream-ca",
                &w.upstream_ca(),
            ]),
            &["/bin/sh", "-c", &script],
        )
    };

    // Default (headers): the header gets the value; the query and the body
    // keep the placeholder, and the event says injection is not enabled
    // there (not a leak: the host is bound).
    let o = run(&profile("[\"header\"]"));
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    assert!(o.stdout.ends_with("hello from api\n"), "{}", dump(&o));
    let r = &api.requests()[0];
    assert_eq!(r["path"], format!("/q?key={ph}"));
    assert_eq!(r["body"], format!("tok={ph}"));
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {value}")]
    );
    let ev = events_with(&o, "secret TOKEN injected");
    assert_eq!(ev.len(), 1, "{}", dump(&o));
    let rule = ev[0]["rule"].as_str().unwrap();
    assert!(rule.contains("where injection is not enabled"), "{rule}");
    assert!(secret_incidents(&o).is_empty(), "{}", dump(&o));
    assert_report_clean(&o, &value);

    // All three enabled: the value arrives in each (the body re-framed when
    // its length changes).
    let o = run(&profile("[\"header\", \"query\", \"body\"]"));
    assert_eq!(o.code, 0, "{}", dump(&o));
    let ph = placeholder_in(&o, "TOKEN");
    assert!(o.stdout.ends_with("hello from api\n"), "{}", dump(&o));
    let r = &api.requests()[1];
    assert_eq!(r["path"], format!("/q?key={value}"));
    assert_eq!(r["body"], format!("tok={value}"));
    assert_eq!(
        api.header_values("Authorization")[1],
        format!("Bearer {value}")
    );
    assert!(!api.raw_log().contains(&ph));
    let ev = events_with(&o, "secret TOKEN injected");
    assert_eq!(ev.len(), 1, "{}", dump(&o));
    // The event's path is what the sandbox sent (the placeholder, never the
    // value), with the `key=` parameter redacted like any credential.
    assert_eq!(ev[0]["path"], "/q?key=[REDACTED]", "{}", dump(&o));
    assert_report_clean(&o, &value);
}

// ---------------------------------------------------------------------------
// Cleartext never carries a value, also through a CONNECT tunnel to the
// bound host, and placeholders in a plain-HTTP body are seen.

#[test]
fn cleartext_through_a_tunnel_to_the_bound_host_is_refused() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let plain = w.http_origin("plain");
    let value = fresh_value("tunnel");
    let script = format!(
        "echo PH=$TOKEN; \
         curl -sS -p -H \"Authorization: Bearer $TOKEN\" http://api.test:{p}/through-tunnel; echo rc=$?; \
         curl -sS --data-binary \"tok=$TOKEN\" http://other.test:{p}/body-to-other; echo rc=$?",
        p = plain.port
    );
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--allow-net",
            "other.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--resolve",
            "other.test=127.0.0.1",
        ]),
        &["/bin/sh", "-c", &script],
    );
    let ph = placeholder_in(&o, "TOKEN");
    // Plain HTTP inside a CONNECT to the bound host: refused before
    // anything reaches the origin.
    assert!(
        !o.stdout.contains("hello from plain\nrc=0\nhello"),
        "{}",
        dump(&o)
    );
    assert_eq!(plain.paths(), vec!["/body-to-other"], "{}", plain.raw_log());
    assert_eq!(plain.requests()[0]["body"], format!("tok={ph}"));
    assert!(!plain.raw_log().contains(&value));
    let refused = events_with(&o, "not a TLS handshake");
    assert_eq!(refused.len(), 1, "{}", dump(&o));
    assert_eq!(refused[0]["host"], "api.test");
    assert_eq!(refused[0]["decision"], "deny");
    // The placeholder in the body to other.test is an incident.
    let inc = secret_incidents(&o);
    assert_eq!(inc.len(), 1, "{}", dump(&o));
    assert_eq!(inc[0]["evidence"]["host"], "other.test");
    assert_eq!(inc[0]["evidence"]["secrets"], "TOKEN");
    assert_report_clean(&o, &value);
}

#[test]
fn a_value_reflected_in_a_response_body_does_not_reach_the_sandbox() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("reflect");
    let out = w.hp().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let o = w.run(
        &[("TOKEN", &value)],
        &flags(&[
            "--secret",
            "TOKEN@api.test",
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
            "--rw",
            out.to_str().unwrap(),
        ]),
        &[
            "/bin/sh",
            "-c",
            &format!(
                "curl -sS -o {}/body -H \"Authorization: Bearer $TOKEN\" https://api.test:{}/echo",
                out.display(),
                api.port
            ),
        ],
    );
    assert_eq!(o.code, 0, "{}", dump(&o));
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {value}")]
    );
    let body = std::fs::read(out.join("body")).unwrap();
    assert!(
        !has(&body, &value),
        "the sandbox received the real value: {}",
        String::from_utf8_lossy(&body)
    );
}

/// `requests = 2` for a host a secret is bound to: curl sends five requests
/// on one kept-alive (intercepted) connection. Every request counts, so the
/// origin gets two, each with the real value, and the third is answered 429
/// with Retry-After. Layer: the rate limiter, asked for every request the
/// interceptor parses.
#[test]
fn rate_limits_count_every_request_on_a_kept_alive_intercepted_tunnel() {
    if ready_with(&["curl"]) {
        return;
    }
    let w = World::new();
    let api = w.tls_origin("api", &[]);
    let value = fresh_value("rate");
    let prof = w.hp().join("rate.toml");
    std::fs::write(
        &prof,
        r#"[network]
mode = "proxy"
allow = ["api.test"]

[[network.rate_limit]]
host = "api.test"
requests = 2
per = "1h"

[[secrets]]
name = "TOKEN"
from = { env = "RATE_VALUE" }
hosts = ["api.test"]
"#,
    )
    .unwrap();
    let urls: Vec<String> = (1..=5)
        .map(|i| format!("https://api.test:{}/n{i}", api.port))
        .collect();
    let script = format!(
        "curl -sS -w '%{{http_code}} %{{num_connects}}\\n' -H \"Authorization: Bearer $TOKEN\" {} 2>/dev/null; \
         curl -sS -D - -o /dev/null -H \"Authorization: Bearer $TOKEN\" {} | grep -i '^retry-after:'",
        urls.iter()
            .map(|u| format!("-o /dev/null {u}"))
            .collect::<Vec<_>>()
            .join(" "),
        urls[0]
    );
    let o = w.run(
        &[("RATE_VALUE", &value)],
        &flags(&[
            "--profile",
            prof.to_str().unwrap(),
            "--resolve",
            "api.test=127.0.0.1",
            "--upstream-ca",
            &w.upstream_ca(),
        ]),
        &["/bin/sh", "-c", &script],
    );
    let lines: Vec<&str> = o.stdout.lines().collect();
    // Two answered on the first connection, the third refused there with
    // 429 (and the connection closed); the rest are refused when curl
    // opens new tunnels (CONNECT answered 429).
    assert_eq!(lines.len(), 6, "{}", dump(&o));
    assert_eq!(lines[0], "200 1", "{}", dump(&o));
    assert_eq!(lines[1], "200 0", "kept alive: {}", dump(&o));
    assert_eq!(lines[2], "429 0", "same connection: {}", dump(&o));
    assert!(
        lines[5].to_ascii_lowercase().starts_with("retry-after: "),
        "{}",
        dump(&o)
    );
    assert_eq!(api.paths(), vec!["/n1", "/n2"], "{}", dump(&o));
    assert_eq!(
        api.header_values("Authorization"),
        vec![format!("Bearer {value}"), format!("Bearer {value}")]
    );
    assert_report_clean(&o, &value);
}
