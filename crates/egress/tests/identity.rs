//! The identity layer end to end, on loopback only: HTTPS origins with
//! their own test CA (trusted by the proxy's upstream side through the
//! extra roots), the proxy with `resolve_overrides`, and real clients
//! (curl, Python requests, a rustls client).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{curl, have, overrides, rules, skip_unless, Proxy, Seen, TempDir};
use cordon_egress::{
    Decision, EgressConfig, EgressEvent, HostRule, Identity, InjectWhere, Protocol, SecretBinding,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use zeroize::Zeroizing;

const API_VALUE: &str = "s3cr3t-api-value-0001";
const API_PH: &str = "cordon-api_token-00000000000000000000000000000001";
const OTHER_VALUE: &str = "hunter2-other-value";
const OTHER_PH: &str = "cordon-other_token-0000000000000000000000000000002";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A test CA that signs origin certificates.
struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl TestCa {
    fn new(cn: &str) -> Self {
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    fn leaf(&self, names: &[&str]) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
    }
}

/// An HTTPS origin (HTTP/1.1, keep-alive, Content-Length and chunked
/// request bodies). It answers `ok METHOD TARGET`; `/echo-auth` puts the
/// Authorization it received into an `X-Echo` response header.
struct HttpsOrigin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl HttpsOrigin {
    fn start(ca: &TestCa, names: &[&str]) -> Self {
        let (chain, key) = ca.leaf(names);
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let (cfg, seen) = (cfg.clone(), s2.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(20)));
                    let Ok(tls) = rustls::ServerConnection::new(cfg) else {
                        return;
                    };
                    let stream = rustls::StreamOwned::new(tls, conn);
                    let _ = serve(BufReader::new(stream), seen);
                });
            }
        });
        Self { addr, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve<S: Read + Write>(mut r: BufReader<S>, seen: Arc<Mutex<Vec<Seen>>>) -> std::io::Result<()> {
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
            body.resize(cl.parse().unwrap_or(0), 0);
            r.read_exact(&mut body)?;
        }
        let echo = if target == "/echo-auth" {
            format!("X-Echo: {}\r\n", get("authorization").unwrap_or_default())
        } else {
            String::new()
        };
        seen.lock().unwrap().push(Seen {
            method: method.clone(),
            target: target.clone(),
            headers,
            body,
        });
        let text = match target.strip_prefix("/big?n=") {
            Some(n) => "x".repeat(n.parse().unwrap_or(0)),
            None => format!("ok {method} {target}"),
        };
        let w = r.get_mut();
        write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{echo}\r\n{text}",
            text.len()
        )?;
        w.flush()?;
    }
}

fn binding(
    name: &str,
    ph: &str,
    value: &str,
    hosts: &[&str],
    inject: InjectWhere,
) -> SecretBinding {
    SecretBinding {
        name: name.into(),
        placeholder: ph.into(),
        value: Zeroizing::new(value.into()),
        hosts: hosts.iter().map(|h| HostRule::parse(h).unwrap()).collect(),
        inject,
        expires_at: None,
    }
}

fn everywhere() -> InjectWhere {
    InjectWhere {
        headers: true,
        query: true,
        body: true,
    }
}

/// The usual setup: API_TOKEN bound to api.test, OTHER_TOKEN to other.test.
fn standard_bindings() -> Vec<SecretBinding> {
    vec![
        binding(
            "API_TOKEN",
            API_PH,
            API_VALUE,
            &["api.test"],
            InjectWhere::default(),
        ),
        binding(
            "OTHER_TOKEN",
            OTHER_PH,
            OTHER_VALUE,
            &["other.test"],
            InjectWhere::default(),
        ),
    ]
}

struct Setup {
    proxy: Proxy,
    identity: Identity,
    _dir: TempDir,
    /// The per-run CA (what the sandbox trusts).
    run_ca: std::path::PathBuf,
    /// The origins' own CA only (a client that pins it).
    origin_ca: std::path::PathBuf,
}

/// Waits (up to 5 s) until the proxy has written an event matching `f`.
fn wait_for_event(p: &Proxy, f: impl Fn(&EgressEvent) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !p.events.lock().unwrap().iter().any(&f) {
        assert!(Instant::now() < deadline, "event did not arrive");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn setup(bindings: Vec<SecretBinding>, origin_ca: &TestCa, hosts: &[(&str, SocketAddr)]) -> Setup {
    let identity = Identity::new(bindings, Some(origin_ca.pem.as_bytes())).unwrap();
    let dir = TempDir::new("identity");
    let run_ca = dir.0.join("run-ca.pem");
    std::fs::write(&run_ca, identity.ca_cert_pem()).unwrap();
    let origin_ca_path = dir.0.join("origin-ca.pem");
    std::fs::write(&origin_ca_path, &origin_ca.pem).unwrap();
    let names: Vec<&str> = hosts.iter().map(|(h, _)| *h).collect();
    let cfg = EgressConfig {
        sandbox_id: "sb-identity".into(),
        allow: rules(&names),
        resolve_overrides: overrides(hosts),
        ..Default::default()
    };
    let id2 = identity.clone();
    let proxy = Proxy::start_with(cfg, move |e| e.with_tls_interceptor(Arc::new(id2)));
    Setup {
        proxy,
        identity,
        _dir: dir,
        run_ca,
        origin_ca: origin_ca_path,
    }
}

/// No event (as logged) holds a secret's value.
fn assert_clean(events: &[EgressEvent]) {
    for e in events {
        let line = e.to_json_line();
        let dbg = format!("{e:?}");
        for v in [API_VALUE, OTHER_VALUE] {
            assert!(!line.contains(v), "value in event: {line}");
            assert!(!dbg.contains(v), "value in event Debug: {dbg}");
        }
    }
}

fn https_events<'a>(events: &'a [EgressEvent], host: &str) -> Vec<&'a EgressEvent> {
    events
        .iter()
        .filter(|e| e.protocol == Protocol::Https && e.host == host)
        .collect()
}

fn curl_via(s: &Setup, ca: &std::path::Path, url: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "--proxy".to_string(),
        s.proxy.url(),
        "--cacert".into(),
        ca.display().to_string(),
        url.to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(&refs)
}

#[test]
fn curl_bound_host_gets_the_real_secret() {
    if !skip_unless(
        "curl_bound_host_gets_the_real_secret",
        have("curl"),
        "curl is not installed",
    ) {
        return;
    }
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let s = setup(standard_bindings(), &ca, &[("api.test", api.addr)]);
    let port = api.addr.port();
    let auth = format!("Authorization: Bearer {API_PH}");
    let custom = format!("X-Api-Key: {API_PH}");
    // Two requests on one connection (keep-alive inside the tunnel).
    let (code, out, err) = curl_via(
        &s,
        &s.run_ca,
        &format!("https://api.test:{port}/v1/user?q=1"),
        &[
            "-H",
            &auth,
            "-H",
            &custom,
            &format!("https://api.test:{port}/v1/second"),
        ],
    );
    assert_eq!(code, 0, "curl: {err}");
    assert!(out.contains("ok GET /v1/user?q=1"), "{out}");
    assert!(out.contains("ok GET /v1/second"), "{out}");
    let seen = api.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {API_VALUE}").as_str())
    );
    assert_eq!(seen[0].header("x-api-key"), Some(API_VALUE));
    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    let reqs = https_events(&events, "api.test");
    assert_eq!(reqs.len(), 2, "{events:#?}");
    let e = reqs[0];
    assert_eq!(e.decision, Decision::Allow);
    assert_eq!(e.method, "GET");
    assert_eq!(e.status, Some(200));
    assert_eq!(e.path.as_deref(), Some("/v1/user?q=1"));
    assert_eq!(
        e.rule, "allow:api.test (secret API_TOKEN injected)",
        "{e:?}"
    );
    assert!(e.bytes_up > 0 && e.bytes_down > 0);
    assert_eq!(e.secret_leak, None);
    // The tunnel has its own CONNECT event; only one tunnel was opened.
    let tunnels: Vec<_> = events
        .iter()
        .filter(|e| e.protocol == Protocol::Connect && e.host == "api.test")
        .collect();
    assert_eq!(tunnels.len(), 1, "{events:#?}");
}

#[test]
fn unbound_host_gets_only_the_placeholder_and_the_leak_is_reported() {
    if !skip_unless(
        "unbound_host_gets_only_the_placeholder",
        have("curl"),
        "curl is not installed",
    ) {
        return;
    }
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let other = HttpsOrigin::start(&ca, &["other.test"]);
    let plain = common::HttpServer::start();
    let s = setup(
        standard_bindings(),
        &ca,
        &[
            ("api.test", api.addr),
            ("other.test", other.addr),
            ("plain.test", plain.addr),
        ],
    );
    // API_TOKEN's placeholder to other.test (intercepted for OTHER_TOKEN).
    let auth = format!("Authorization: Bearer {API_PH}");
    let (code, out, err) = curl_via(
        &s,
        &s.run_ca,
        &format!("https://other.test:{}/x", other.addr.port()),
        &["-H", &auth],
    );
    assert_eq!(code, 0, "curl: {err}");
    assert!(out.contains("ok GET /x"), "{out}");
    let seen = other.seen();
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {API_PH}").as_str())
    );
    // Plain HTTP to an unbound host, and to the bound host (never injected
    // over cleartext).
    let q = format!("http://plain.test:{}/p?k={API_PH}", plain.addr.port());
    let (code, _, err) = curl(&["--proxy", &s.proxy.url(), &q]);
    assert_eq!(code, 0, "{err}");
    let plain_seen = plain.seen();
    assert!(plain_seen[0].target.contains(API_PH), "{plain_seen:?}");
    assert!(api.seen().is_empty());

    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    let e = https_events(&events, "other.test")[0];
    assert_eq!(e.secret_leak.as_deref(), Some("API_TOKEN"), "{e:?}");
    assert!(
        e.rule
            .contains("secret API_TOKEN placeholder to other.test, a host it is not bound to"),
        "{e:?}"
    );
    let p = events.iter().find(|e| e.host == "plain.test").unwrap();
    assert_eq!(p.protocol, Protocol::Http);
    assert_eq!(p.secret_leak.as_deref(), Some("API_TOKEN"), "{p:?}");
}

#[test]
fn plain_http_to_a_bound_host_is_not_injected_and_reported() {
    if !skip_unless(
        "plain_http_to_a_bound_host",
        have("curl"),
        "curl is not installed",
    ) {
        return;
    }
    let ca = TestCa::new("origin test CA");
    let plain = common::HttpServer::start();
    let s = setup(standard_bindings(), &ca, &[("api.test", plain.addr)]);
    let auth = format!("Authorization: Bearer {API_PH}");
    let url = format!("http://api.test:{}/cleartext", plain.addr.port());
    let (code, _, err) = curl(&["--proxy", &s.proxy.url(), &url, "-H", &auth]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        plain.seen()[0].header("authorization"),
        Some(format!("Bearer {API_PH}").as_str())
    );
    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    let e = events
        .iter()
        .find(|e| e.protocol == Protocol::Http)
        .unwrap();
    assert_eq!(e.secret_leak.as_deref(), Some("API_TOKEN"));
    assert!(
        e.rule.contains("over cleartext HTTP, not injected"),
        "{e:?}"
    );
}

#[test]
fn a_host_without_a_bound_secret_stays_an_opaque_tunnel() {
    if !skip_unless("opaque_tunnel", have("curl"), "curl is not installed") {
        return;
    }
    let ca = TestCa::new("origin test CA");
    let opaque = HttpsOrigin::start(&ca, &["opaque.test"]);
    let s = setup(standard_bindings(), &ca, &[("opaque.test", opaque.addr)]);
    // The client trusts only the origin's CA: it succeeds, so it talked to
    // the origin's own TLS, not to the proxy.
    let (code, out, err) = curl_via(
        &s,
        &s.origin_ca,
        &format!("https://opaque.test:{}/o", opaque.addr.port()),
        &["-H", &format!("Authorization: Bearer {API_PH}")],
    );
    assert_eq!(code, 0, "curl: {err}");
    assert!(out.contains("ok GET /o"));
    // And with only the per-run CA it fails: nobody presents a per-run leaf.
    let (code, _, _) = curl_via(
        &s,
        &s.run_ca,
        &format!("https://opaque.test:{}/o", opaque.addr.port()),
        &[],
    );
    assert_ne!(code, 0);
    let (events, _) = s.proxy.finish();
    assert!(
        https_events(&events, "opaque.test").is_empty(),
        "{events:#?}"
    );
    assert!(events.iter().any(|e| e.protocol == Protocol::Connect
        && e.host == "opaque.test"
        && e.decision == Decision::Allow));
}

#[test]
fn a_client_pinning_its_own_ca_fails_closed() {
    if !skip_unless(
        "pinning_client_fails_closed",
        have("curl"),
        "curl is not installed",
    ) {
        return;
    }
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let s = setup(standard_bindings(), &ca, &[("api.test", api.addr)]);
    let (code, _, err) = curl_via(
        &s,
        &s.origin_ca,
        &format!("https://api.test:{}/pinned", api.addr.port()),
        &["-H", &format!("Authorization: Bearer {API_PH}")],
    );
    assert_eq!(code, 60, "expected a certificate error: {err}");
    assert!(api.seen().is_empty(), "the origin received a request");
    wait_for_event(&s.proxy, |e| e.protocol == Protocol::Https);
    let (events, _) = s.proxy.finish();
    let e = https_events(&events, "api.test");
    assert_eq!(e.len(), 1, "{events:#?}");
    assert_eq!(e[0].decision, Decision::Deny);
    assert!(e[0].rule.starts_with("client-tls:"), "{:?}", e[0]);
}

#[test]
fn upstream_verification_cannot_be_bypassed() {
    if !skip_unless(
        "upstream_verification",
        have("curl"),
        "curl is not installed",
    ) {
        return;
    }
    let trusted = TestCa::new("origin test CA");
    let rogue = TestCa::new("rogue CA");
    // evil.test: a certificate from a CA the proxy does not trust.
    let evil = HttpsOrigin::start(&rogue, &["evil.test"]);
    // wrong.test: a trusted CA, but the certificate names another host.
    let wrong = HttpsOrigin::start(&trusted, &["not-wrong.test"]);
    let bindings = vec![binding(
        "API_TOKEN",
        API_PH,
        API_VALUE,
        &["evil.test", "wrong.test"],
        InjectWhere::default(),
    )];
    let s = setup(
        bindings,
        &trusted,
        &[("evil.test", evil.addr), ("wrong.test", wrong.addr)],
    );
    for (host, origin) in [("evil.test", &evil), ("wrong.test", &wrong)] {
        let (code, out, err) = curl_via(
            &s,
            &s.run_ca,
            &format!("https://{host}:{}/steal", origin.addr.port()),
            &[
                "-H",
                &format!("Authorization: Bearer {API_PH}"),
                "-w",
                "\n%{http_code}",
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.ends_with("\n502"), "{host}: {out}");
        assert!(out.contains("failed verification"), "{out}");
        assert!(origin.seen().is_empty(), "{host} received a request");
    }
    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    for host in ["evil.test", "wrong.test"] {
        let e = https_events(&events, host);
        assert_eq!(e.len(), 1, "{events:#?}");
        assert_eq!(e[0].decision, Decision::Deny);
        assert!(e[0].rule.starts_with("upstream-tls:"), "{:?}", e[0]);
        assert_eq!(e[0].status, Some(502));
    }
}

#[test]
fn injection_stops_when_the_ttl_is_over() {
    if !skip_unless("ttl", have("curl"), "curl is not installed") {
        return;
    }
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let mut b = standard_bindings();
    b[0].expires_at = Some(Instant::now() + Duration::from_millis(1500));
    let s = setup(b, &ca, &[("api.test", api.addr)]);
    let url = format!("https://api.test:{}/ttl", api.addr.port());
    let auth = format!("Authorization: Bearer {API_PH}");
    let (code, _, err) = curl_via(&s, &s.run_ca, &url, &["-H", &auth]);
    assert_eq!(code, 0, "{err}");
    std::thread::sleep(Duration::from_millis(1700));
    let (code, _, err) = curl_via(&s, &s.run_ca, &url, &["-H", &auth]);
    assert_eq!(code, 0, "{err}");
    let seen = api.seen();
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {API_VALUE}").as_str())
    );
    assert_eq!(
        seen[1].header("authorization"),
        Some(format!("Bearer {API_PH}").as_str())
    );
    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    let e = https_events(&events, "api.test");
    assert!(e[0].rule.contains("injected"));
    assert!(
        e[1].rule.contains("secret API_TOKEN expired, not injected"),
        "{:?}",
        e[1]
    );
    assert_eq!(e[1].secret_leak, None);
}

/// CONNECT through the proxy, then TLS with rustls trusting only `ca_pem`.
fn rustls_client(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    ca_pem: &str,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let mut tcp = TcpStream::connect(proxy).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(
        tcp,
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = rustls::ClientConnection::new(
        Arc::new(cfg),
        ServerName::try_from(host.to_string()).unwrap(),
    )
    .unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// Reads one response: a Content-Length or chunked body (decoded), or,
/// with neither, a body until the connection closes.
fn read_resp<S: Read>(s: &mut S) -> (String, Vec<u8>) {
    read_resp_to(s, "GET")
}

/// [`read_resp`] for a response to `method` (HEAD: no body).
fn read_resp_to<S: Read>(s: &mut S, method: &str) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    if method == "HEAD" || head.starts_with("HTTP/1.1 204") || head.starts_with("HTTP/1.1 304") {
        return (head, Vec::new());
    }
    if header("transfer-encoding").is_some() {
        let mut body = Vec::new();
        loop {
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") {
                s.read_exact(&mut b).unwrap();
                line.push(b[0]);
            }
            let size = std::str::from_utf8(&line).unwrap().trim();
            let n = usize::from_str_radix(size.split(';').next().unwrap(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            s.read_exact(&mut chunk).unwrap();
            if n == 0 {
                assert_eq!(chunk, b"\r\n");
                return (head, body);
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    if let Some(len) = header("content-length") {
        let mut body = vec![0; len.parse().unwrap()];
        s.read_exact(&mut body).unwrap();
        return (head, body);
    }
    let mut body = Vec::new();
    s.read_to_end(&mut body).unwrap();
    (head, body)
}

#[test]
fn body_and_query_injection_only_where_enabled() {
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    // A: query and body enabled, value shorter than the placeholder.
    // B: headers only. C: body enabled, value as long as the placeholder.
    let same_len_ph = "cordon-c-000000000000000000000003";
    let same_len_val = "tok-123-xxxxxxxxxxxxxxxxxxxxxxxxx";
    assert_eq!(same_len_ph.len(), same_len_val.len());
    let b = vec![
        binding("A", API_PH, API_VALUE, &["api.test"], everywhere()),
        binding(
            "B",
            OTHER_PH,
            OTHER_VALUE,
            &["api.test"],
            InjectWhere::default(),
        ),
        binding("C", same_len_ph, same_len_val, &["api.test"], everywhere()),
    ];
    let s = setup(b, &ca, &[("api.test", api.addr)]);
    let port = api.addr.port();
    let mut tls = rustls_client(s.proxy.addr, "api.test", port, &s.identity.ca_cert_pem());

    // 1. Content-Length body with A and B, query with A and B: A is
    // replaced (body re-framed as chunked), B is not.
    let body = format!("{{\"a\":\"{API_PH}\",\"b\":\"{OTHER_PH}\"}}");
    write!(
        tls,
        "POST /q?a={API_PH}&b={OTHER_PH} HTTP/1.1\r\nHost: api.test:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    tls.flush().unwrap();
    let (head, text) = read_resp(&mut tls);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(String::from_utf8_lossy(&text).starts_with("ok POST"));

    // 2. A chunked body with A's placeholder split across chunks.
    let (p1, p2) = API_PH.split_at(10);
    let chunked = format!(
        "{:x}\r\nx={p1}\r\n{:x}\r\n{p2};\r\n0\r\n\r\n",
        p1.len() + 2,
        p2.len() + 1
    );
    write!(
        tls,
        "PUT /chunked HTTP/1.1\r\nHost: api.test:{port}\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}"
    )
    .unwrap();
    tls.flush().unwrap();
    let (head, _) = read_resp(&mut tls);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // 3. C only.
    let body3 = format!("c={same_len_ph}");
    write!(
        tls,
        "POST /same HTTP/1.1\r\nHost: api.test:{port}\r\nContent-Length: {}\r\n\r\n{body3}",
        body3.len()
    )
    .unwrap();
    tls.flush().unwrap();
    let (head, _) = read_resp(&mut tls);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // 4. The origin echoes the injected header: the sandbox sees the
    // placeholder again, not the value.
    write!(
        tls,
        "GET /echo-auth HTTP/1.1\r\nHost: api.test:{port}\r\nAuthorization: Bearer {API_PH}\r\n\r\n"
    )
    .unwrap();
    tls.flush().unwrap();
    let (head, _) = read_resp(&mut tls);
    assert!(head.contains(&format!("X-Echo: Bearer {API_PH}")), "{head}");
    assert!(!head.contains(API_VALUE), "{head}");
    drop(tls);

    let seen = api.seen();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[0].target, format!("/q?a={API_VALUE}&b={OTHER_PH}"));
    assert_eq!(
        String::from_utf8_lossy(&seen[0].body),
        format!("{{\"a\":\"{API_VALUE}\",\"b\":\"{OTHER_PH}\"}}")
    );
    assert_eq!(seen[0].header("transfer-encoding"), Some("chunked"));
    assert_eq!(seen[0].header("content-length"), None);
    assert_eq!(
        String::from_utf8_lossy(&seen[1].body),
        format!("x={API_VALUE};")
    );
    assert_eq!(
        String::from_utf8_lossy(&seen[2].body),
        format!("c={same_len_val}")
    );
    assert_eq!(
        seen[3].header("authorization"),
        Some(format!("Bearer {API_VALUE}").as_str())
    );

    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    let e = https_events(&events, "api.test");
    assert_eq!(e.len(), 4, "{events:#?}");
    assert!(e[0].rule.contains("secret A injected"), "{:?}", e[0]);
    assert!(
        e[0].rule
            .contains("secret B placeholder in the query string, where injection is not enabled"),
        "{:?}",
        e[0]
    );
    assert!(
        e[0].rule.contains("secret B placeholder in the body"),
        "{:?}",
        e[0]
    );
    assert_eq!(e[0].secret_leak, None);
    // The path in the event is the one the sandbox sent, redacted.
    assert!(!e[0].path.as_deref().unwrap_or("").contains(API_VALUE));
}

#[test]
fn python_requests_gets_the_secret_injected() {
    let ok = Command::new("python3")
        .args(["-c", "import requests"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !skip_unless(
        "python_requests",
        ok,
        "python3 with requests is not available",
    ) {
        return;
    }
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let s = setup(standard_bindings(), &ca, &[("api.test", api.addr)]);
    let script = r#"
import sys, requests
proxy, ca, url, ph = sys.argv[1:5]
s = requests.Session()
s.trust_env = False
for i in range(3):
    r = s.get(url, headers={"Authorization": "Bearer " + ph}, proxies={"https": proxy}, verify=ca, timeout=15)
    print(r.status_code, r.text)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(s.proxy.url())
        .arg(&s.run_ca)
        .arg(format!("https://api.test:{}/py", api.addr.port()))
        .arg(API_PH)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("200 ok GET /py").count(), 3, "{stdout}");
    let seen = api.seen();
    assert_eq!(seen.len(), 3);
    for r in &seen {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {API_VALUE}").as_str())
        );
    }
    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    assert_eq!(https_events(&events, "api.test").len(), 3);
}

#[test]
fn values_never_appear_in_debug_output_or_errors() {
    let b = standard_bindings();
    for x in &b {
        let d = format!("{x:?}");
        assert!(!d.contains(API_VALUE) && !d.contains(OTHER_VALUE), "{d}");
        assert!(d.contains("[REDACTED]"));
    }
    let identity = Identity::new(b, None).unwrap();
    let d = format!("{identity:?} {identity:#?} {:?}", InjectWhere::default());
    assert!(!d.contains(API_VALUE) && !d.contains(OTHER_VALUE), "{d}");
    assert!(identity
        .ca_cert_pem()
        .starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(!identity.ca_cert_pem().contains("PRIVATE KEY"));
    let ph = identity.placeholders();
    assert_eq!(ph[0], ("API_TOKEN".to_string(), API_PH.to_string()));

    // Refused bindings: the error names the secret, never its value.
    let bad_value = "line1\r\nX-Injected: s3cr3t";
    let cases = [
        binding(
            "A",
            API_PH,
            bad_value,
            &["api.test"],
            InjectWhere::default(),
        ),
        binding(
            "A",
            "short",
            API_VALUE,
            &["api.test"],
            InjectWhere::default(),
        ),
        binding("A", API_PH, "", &["api.test"], InjectWhere::default()),
        binding("A", API_PH, API_VALUE, &[], InjectWhere::default()),
    ];
    for c in cases {
        let e = Identity::new(vec![c], None).unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(text.contains("\"A\""), "{text}");
        assert!(
            !text.contains("s3cr3t") && !text.contains(API_VALUE),
            "{text}"
        );
    }
    let dup = vec![
        binding(
            "A",
            API_PH,
            API_VALUE,
            &["api.test"],
            InjectWhere::default(),
        ),
        binding(
            "B",
            API_PH,
            OTHER_VALUE,
            &["api.test"],
            InjectWhere::default(),
        ),
    ];
    assert!(Identity::new(dup, None).is_err());
    assert!(Identity::new(Vec::new(), Some(b"not pem")).is_err());

    let p = Identity::new_placeholder("GITHUB_TOKEN").unwrap();
    assert!(
        p.starts_with("cordon-github_token-") && p.len() == 20 + 32,
        "{p}"
    );
    assert_ne!(p, Identity::new_placeholder("GITHUB_TOKEN").unwrap());
}

#[test]
fn socks5_to_a_bound_host_is_intercepted_too() {
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let s = setup(standard_bindings(), &ca, &[("api.test", api.addr)]);
    let mut tcp = TcpStream::connect(s.proxy.addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    tcp.write_all(&[5, 1, 0]).unwrap();
    let mut r = [0u8; 2];
    tcp.read_exact(&mut r).unwrap();
    let host = b"api.test";
    let mut req = vec![5, 1, 0, 3, host.len() as u8];
    req.extend_from_slice(host);
    req.extend_from_slice(&api.addr.port().to_be_bytes());
    tcp.write_all(&req).unwrap();
    let mut r = [0u8; 10];
    tcp.read_exact(&mut r).unwrap();
    assert_eq!(r[1], 0);
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(s.identity.ca_cert_pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("api.test").unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET /socks HTTP/1.1\r\nHost: api.test:{}\r\nAuthorization: token {API_PH}\r\nConnection: close\r\n\r\n",
        api.addr.port()
    )
    .unwrap();
    let (head, _) = read_resp(&mut tls);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        api.seen()[0].header("authorization"),
        Some(format!("token {API_VALUE}").as_str())
    );
    let (events, _) = s.proxy.finish();
    assert_clean(&events);
}

#[test]
fn a_same_length_value_keeps_content_length() {
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let ph = "cordon-c-000000000000000000000003";
    let val = "tok-123-xxxxxxxxxxxxxxxxxxxxxxxxx";
    assert_eq!(ph.len(), val.len());
    let b = vec![binding("C", ph, val, &["api.test"], everywhere())];
    let s = setup(b, &ca, &[("api.test", api.addr)]);
    let port = api.addr.port();
    let mut tls = rustls_client(s.proxy.addr, "api.test", port, &s.identity.ca_cert_pem());
    let body = format!("c={ph}&d={ph}");
    write!(
        tls,
        "POST /same HTTP/1.1\r\nHost: api.test:{port}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    tls.flush().unwrap();
    let (head, _) = read_resp(&mut tls);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(tls);
    let seen = api.seen();
    assert_eq!(
        String::from_utf8_lossy(&seen[0].body),
        format!("c={val}&d={val}")
    );
    assert_eq!(
        seen[0].header("content-length"),
        Some(body.len().to_string().as_str())
    );
    assert_eq!(seen[0].header("transfer-encoding"), None);
    let (events, _) = s.proxy.finish();
    assert_clean(&events);
}

/// An HTTPS origin that reflects the Authorization it receives in its
/// response body, framed as the path says, and written in pieces with
/// pauses so the value straddles reads (and chunks):
/// `/cl` (Content-Length), `/cl-one-write`, `/chunked`, `/close` (no
/// length, body until close), `/gzip` (`Content-Encoding: gzip`), `/204`.
/// It records the Accept-Encoding of each request.
struct ReflectOrigin {
    addr: SocketAddr,
    accept_encoding: Arc<Mutex<Vec<String>>>,
}

impl ReflectOrigin {
    fn start(ca: &TestCa, names: &[&str]) -> Self {
        let (chain, key) = ca.leaf(names);
        let cfg = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let accept_encoding = Arc::new(Mutex::new(Vec::new()));
        let ae = accept_encoding.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let (cfg, ae) = (cfg.clone(), ae.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(20)));
                    let tls = rustls::ServerConnection::new(cfg).unwrap();
                    let _ = reflect(rustls::StreamOwned::new(tls, conn), ae);
                });
            }
        });
        Self {
            addr,
            accept_encoding,
        }
    }
}

fn reflect<S: Read + Write>(s: S, accept_encoding: Arc<Mutex<Vec<String>>>) -> std::io::Result<()> {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let target = line.split(' ').nth(1).unwrap_or("").to_string();
    let mut auth = String::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end_matches(['\r', '\n']);
        if h.is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            if n.eq_ignore_ascii_case("authorization") {
                auth = v.trim().to_string();
            } else if n.eq_ignore_ascii_case("accept-encoding") {
                accept_encoding.lock().unwrap().push(v.trim().to_string());
            }
        }
    }
    let value = auth.strip_prefix("Bearer ").unwrap_or("").to_string();
    if let Some(out) = reflect_forms(&target, &value) {
        let w = r.get_mut();
        w.write_all(&out)?;
        w.flush()?;
        std::thread::sleep(Duration::from_millis(300));
        return Ok(());
    }
    let body = format!("you sent: {auth}\n");
    // Split inside the value.
    let cut = body.len() - 8;
    let (p1, p2) = body.as_bytes().split_at(cut);
    let w = r.get_mut();
    let pause = || std::thread::sleep(Duration::from_millis(150));
    match target.as_str() {
        "/cl" | "/cl-one-write" => {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            if target == "/cl-one-write" {
                w.write_all(format!("{head}{body}").as_bytes())?;
            } else {
                w.write_all(head.as_bytes())?;
                w.flush()?;
                pause();
                w.write_all(p1)?;
                w.flush()?;
                pause();
                w.write_all(p2)?;
            }
        }
        "/chunked" => {
            w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            w.write_all(format!("{:x}\r\n", p1.len()).as_bytes())?;
            w.write_all(p1)?;
            w.write_all(b"\r\n")?;
            w.flush()?;
            pause();
            w.write_all(format!("{:x}\r\n", p2.len()).as_bytes())?;
            w.write_all(p2)?;
            w.write_all(b"\r\n0\r\nX-Trailer: 1\r\n\r\n")?;
        }
        "/close" => {
            w.write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")?;
            w.write_all(p1)?;
            w.flush()?;
            pause();
            w.write_all(p2)?;
            w.flush()?;
            r.into_inner().flush()?;
            return Ok(());
        }
        "/gzip" => {
            w.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )?;
        }
        _ => {
            w.write_all(format!("HTTP/1.1 204 No Content\r\nX-Auth: {auth}\r\n\r\n").as_bytes())?;
        }
    }
    w.flush()?;
    // Let the client read before this end goes away.
    std::thread::sleep(Duration::from_millis(500));
    Ok(())
}

/// Sends one request with the API placeholder through a fresh intercepted
/// tunnel and reads the response.
fn reflected(s: &Setup, origin: &ReflectOrigin, method: &str, path: &str) -> (String, Vec<u8>) {
    let port = origin.addr.port();
    let mut tls = rustls_client(s.proxy.addr, "api.test", port, &s.identity.ca_cert_pem());
    write!(
        tls,
        "{method} {path} HTTP/1.1\r\nHost: api.test:{port}\r\nAuthorization: Bearer {API_PH}\r\nAccept-Encoding: gzip, br\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    tls.flush().unwrap();
    read_resp_to(&mut tls, method)
}

#[test]
fn a_value_reflected_in_a_response_body_is_scrubbed() {
    let ca = TestCa::new("origin test CA");
    let origin = ReflectOrigin::start(&ca, &["api.test"]);
    let s = setup(standard_bindings(), &ca, &[("api.test", origin.addr)]);
    let want = format!("you sent: Bearer {API_PH}\n");
    for path in ["/cl", "/cl-one-write", "/chunked", "/close"] {
        let (head, body) = reflected(&s, &origin, "GET", path);
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        let text = String::from_utf8_lossy(&body);
        assert!(
            !text.contains(API_VALUE),
            "{path}: value reached the client"
        );
        assert_eq!(text, want, "{path}");
        let lower = head.to_ascii_lowercase();
        match path {
            // The value was split across the origin's writes: the length
            // is not known when the head goes out, so it is chunked now.
            "/cl" | "/chunked" => {
                assert!(
                    lower.contains("transfer-encoding: chunked"),
                    "{path}: {head}"
                );
                assert!(!lower.contains("content-length"), "{path}: {head}");
            }
            // Read whole with the head: an exact Content-Length.
            "/cl-one-write" => assert!(
                lower.contains(&format!("content-length: {}", want.len())),
                "{head}"
            ),
            _ => assert!(
                !lower.contains("content-length") && !lower.contains("transfer-encoding"),
                "{path}: {head}"
            ),
        }
    }
    // No body: the value in a header is scrubbed too.
    let (head, body) = reflected(&s, &origin, "GET", "/204");
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
    assert!(head.contains(&format!("X-Auth: Bearer {API_PH}")), "{head}");
    assert!(!head.contains(API_VALUE) && body.is_empty());

    // Every request asked for an unencoded body, whatever the client said.
    let ae = origin.accept_encoding.lock().unwrap().clone();
    assert_eq!(ae.len(), 5, "{ae:?}");
    assert!(ae.iter().all(|v| v == "identity"), "{ae:?}");

    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    let ev = https_events(&events, "api.test");
    assert_eq!(ev.len(), 5, "{ev:?}");
    for e in ev {
        assert_eq!(
            e.status,
            Some(if e.path.as_deref() == Some("/204") {
                204
            } else {
                200
            })
        );
        assert!(
            e.rule.contains("secret API_TOKEN injected")
                && e.rule.contains("secret API_TOKEN scrubbed from response"),
            "{}",
            e.rule
        );
        assert_eq!(e.secret_leak, None);
    }
}

#[test]
fn an_encoded_response_body_is_refused() {
    let ca = TestCa::new("origin test CA");
    let origin = ReflectOrigin::start(&ca, &["api.test"]);
    let s = setup(standard_bindings(), &ca, &[("api.test", origin.addr)]);
    let (head, body) = reflected(&s, &origin, "GET", "/gzip");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("Content-Encoding: gzip"), "{text}");
    assert!(
        !text.contains("you sent") && !text.contains(API_VALUE),
        "{text}"
    );
    // A HEAD answer has no body to scan: passed on.
    let (head, body) = reflected(&s, &origin, "HEAD", "/gzip");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.is_empty());
    assert_eq!(
        *origin.accept_encoding.lock().unwrap(),
        vec!["identity".to_string(), "identity".to_string()]
    );
    let (events, _) = s.proxy.finish();
    assert_clean(&events);
    let ev = https_events(&events, "api.test");
    assert_eq!(ev.len(), 2, "{ev:?}");
    let refused = ev.iter().find(|e| e.method == "GET").unwrap();
    assert_eq!(refused.status, Some(502));
    assert_eq!(refused.decision, Decision::Deny);
    assert!(
        refused
            .rule
            .contains("response refused: Content-Encoding gzip"),
        "{}",
        refused.rule
    );
}

/// `requests = 2` for a bound host: five requests on one kept-alive
/// intercepted tunnel. Every request the proxy parses counts, so the third
/// gets a 429 with Retry-After and the origin sees two, each with the real
/// token. Layer: the rate limiter, asked again by the interceptor.
#[test]
fn rate_limits_count_every_request_inside_an_intercepted_tunnel() {
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let identity = Identity::new(standard_bindings(), Some(ca.pem.as_bytes())).unwrap();
    let cfg = EgressConfig {
        allow: rules(&["api.test"]),
        resolve_overrides: overrides(&[("api.test", api.addr)]),
        rate_limits: vec![cordon_egress::RateLimit {
            host: "api.test".parse().unwrap(),
            requests: Some(2),
            bytes: None,
            per: Duration::from_secs(3600),
        }],
        ..Default::default()
    };
    let id2 = identity.clone();
    let proxy = Proxy::start_with(cfg, move |e| e.with_tls_interceptor(Arc::new(id2)));
    let port = api.addr.port();
    let mut tls = rustls_client(proxy.addr, "api.test", port, &identity.ca_cert_pem());
    let mut statuses = Vec::new();
    for i in 0..5 {
        if write!(
            tls,
            "GET /n{i} HTTP/1.1\r\nHost: api.test:{port}\r\nAuthorization: Bearer {API_PH}\r\n\r\n"
        )
        .and_then(|_| tls.flush())
        .is_err()
        {
            break;
        }
        let (head, _) = read_resp(&mut tls);
        let status = head.split(' ').nth(1).unwrap_or("").to_string();
        statuses.push(status.clone());
        if status == "429" {
            assert!(head.contains("Retry-After: "), "{head}");
            // The proxy closes the tunnel after it.
            assert!(head.contains("Connection: close"), "{head}");
            break;
        }
    }
    assert_eq!(statuses, ["200", "200", "429"]);
    assert_eq!(api.seen().len(), 2);
    let (events, _) = proxy.finish();
    assert_clean(&events);
    let ev = https_events(&events, "api.test");
    let rules: Vec<&str> = ev.iter().map(|e| e.rule.as_str()).collect();
    assert_eq!(rules.len(), 3, "{rules:?}");
    assert_eq!(rules[2], "rate-limit");
    assert_eq!(ev[2].status, Some(429));
}

const FORMS_VALUE: &str = "s3cr3t/v \"q\"<&>\u{e9}+=~:x";
const FORMS_PH: &str = "cordon-forms_token-0000000000000000000000000000003";

/// Test-side encoders, independent of the proxy's.
fn pct_upper(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn form_lower(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b' ' => "+".to_string(),
            b if b.is_ascii_alphanumeric() || b"*-._".contains(&b) => (b as char).to_string(),
            b => format!("%{b:02x}"),
        })
        .collect()
}

/// JSON string text with `\/` and every non-ASCII character as `\uXXXX`.
fn json_escaped(v: &str) -> String {
    let s = serde_json::to_string(v).unwrap();
    let mut o = String::new();
    for c in s[1..s.len() - 1].chars() {
        match c {
            '/' => o.push_str("\\/"),
            c if !c.is_ascii() => o.push_str(&format!("\\u{:04X}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

/// base64url without padding of `user:value` (fits in a header name).
fn b64url(user: &str, v: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{user}:{v}"))
}

fn basic(user: &str, v: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{v}"))
}

/// The forms the origin reflects the value in, for each path of
/// [`reflect_forms`].
fn forms_of(v: &str) -> Vec<String> {
    vec![
        v.to_string(),
        pct_upper(v),
        form_lower(v),
        json_escaped(v),
        basic("user", v),
        basic("ab", v),
        b64url("ab", v),
    ]
}

/// Answers that carry the value in its encodings, in every part of a
/// response: the status line's reason phrase, interim 1xx heads, header
/// names and values (a 301 Location), JSON and base64 (HTTP Basic) in the
/// body, a chunked trailer.
fn reflect_forms(target: &str, v: &str) -> Option<Vec<u8>> {
    let json = format!(
        "{{\"token\":\"{}\",\"basic\":\"Basic {}\",\"q\":\"{}\"}}",
        json_escaped(v),
        basic("user", v),
        form_lower(v)
    );
    let out = match target {
        // (A reason phrase with non-ASCII bytes is dropped whole by the
        // proxy's parser; these forms are ASCII.)
        "/reason" => format!(
            "HTTP/1.1 400 Bad {} {}\r\nContent-Length: 0\r\n\r\n",
            pct_upper(v),
            form_lower(v)
        ),
        "/interim" => format!(
            "HTTP/1.1 103 Hint {}\r\nLink: <https://api.test/x?t={}>\r\nX-{}: 1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            json_escaped(v),
            pct_upper(v),
            b64url("ab", v),
        ),
        "/redirect" => format!(
            "HTTP/1.1 301 Moved\r\nLocation: https://api.test/cb?token={}&b={}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
            pct_upper(v),
            basic("ab", v),
            json.len()
        ),
        "/trailer" => format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Token\r\n\r\n{:x}\r\n{json}\r\n0\r\nX-Token: {v}\r\n\r\n",
            json.len()
        ),
        _ => return None,
    };
    Some(out.into_bytes())
}

/// A bound host reflects the injected value in every part of its response
/// and in its common encodings: no form of the value reaches the sandbox,
/// and the placeholder comes back in the same form. Layer: response
/// scrubbing (every byte from the origin, every form).
#[test]
fn a_value_reflected_in_any_form_anywhere_in_a_response_is_scrubbed() {
    let ca = TestCa::new("origin test CA");
    let origin = ReflectOrigin::start(&ca, &["api.test"]);
    let bindings = vec![binding(
        "FORMS",
        FORMS_PH,
        FORMS_VALUE,
        &["api.test"],
        InjectWhere::default(),
    )];
    let s = setup(bindings, &ca, &[("api.test", origin.addr)]);
    let port = origin.addr.port();
    for path in ["/reason", "/interim", "/redirect", "/trailer"] {
        let mut tls = rustls_client(s.proxy.addr, "api.test", port, &s.identity.ca_cert_pem());
        write!(
            tls,
            "GET {path} HTTP/1.1\r\nHost: api.test:{port}\r\nAuthorization: Bearer {FORMS_PH}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        tls.flush().unwrap();
        let mut all = Vec::new();
        let _ = tls.read_to_end(&mut all);
        let text = String::from_utf8_lossy(&all).into_owned();
        assert!(text.starts_with("HTTP/1.1 "), "{path}: {text}");
        for form in forms_of(FORMS_VALUE) {
            assert!(
                !text.contains(&form),
                "{path}: {form:?} reached the client: {text}"
            );
        }
        match path {
            "/reason" => assert!(
                text.starts_with(&format!(
                    "HTTP/1.1 400 Bad {} {}\r\n",
                    pct_upper(FORMS_PH),
                    form_lower(FORMS_PH)
                )),
                "{text}"
            ),
            "/interim" => {
                assert!(
                    text.starts_with(&format!("HTTP/1.1 103 Hint {FORMS_PH}\r\n")),
                    "{text}"
                );
                assert!(
                    text.contains(&format!("?t={}>", pct_upper(FORMS_PH))),
                    "{text}"
                );
            }
            "/redirect" => {
                assert!(
                    text.contains(&format!("token={}&", pct_upper(FORMS_PH))),
                    "{text}"
                );
                let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
                let j: serde_json::Value = serde_json::from_str(body).unwrap();
                assert_eq!(j["token"], FORMS_PH, "{body}");
            }
            _ => {
                // The trailer is not passed on.
                assert!(!text.contains("X-Token:"), "{text}");
            }
        }
    }
    let (events, _) = s.proxy.finish();
    let ev = https_events(&events, "api.test");
    assert_eq!(ev.len(), 4, "{ev:?}");
    for e in ev {
        assert!(
            e.rule.contains("secret FORMS scrubbed from response"),
            "{}",
            e.rule
        );
    }
}

/// A TCP stream that counts the bytes it reads and writes.
struct Counting {
    s: TcpStream,
    read: Arc<std::sync::atomic::AtomicUsize>,
    written: Arc<std::sync::atomic::AtomicUsize>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.s.read(buf)?;
        self.read.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
        Ok(n)
    }
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.s.write(buf)?;
        self.written
            .fetch_add(n, std::sync::atomic::Ordering::SeqCst);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.s.flush()
    }
}

/// The byte cap on an intercepted tunnel (the metered relay, not splice):
/// the sandbox's socket carries no byte past it, both directions counted,
/// CONNECT included. Layer: the byte cap, granted before bytes are written.
#[test]
fn the_byte_cap_is_exact_on_an_intercepted_tunnel() {
    const CAP: usize = 20_000;
    let ca = TestCa::new("origin test CA");
    let api = HttpsOrigin::start(&ca, &["api.test"]);
    let identity = Identity::new(standard_bindings(), Some(ca.pem.as_bytes())).unwrap();
    let cfg = EgressConfig {
        allow: rules(&["api.test"]),
        resolve_overrides: overrides(&[("api.test", api.addr)]),
        max_bytes: Some(CAP as u64),
        ..Default::default()
    };
    let id2 = identity.clone();
    let proxy = Proxy::start_with(cfg, move |e| e.with_tls_interceptor(Arc::new(id2)));
    let port = api.addr.port();
    let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tcp = Counting {
        s: TcpStream::connect(proxy.addr).unwrap(),
        read: read.clone(),
        written: written.clone(),
    };
    tcp.s
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    write!(
        tcp,
        "CONNECT api.test:{port} HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"));
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(identity.ca_cert_pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = rustls::ClientConnection::new(
        Arc::new(cfg),
        ServerName::try_from("api.test".to_string()).unwrap(),
    )
    .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET /big?n=200000 HTTP/1.1\r\nHost: api.test:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    tls.flush().unwrap();
    let mut got = Vec::new();
    let _ = tls.read_to_end(&mut got);
    assert!(got.len() < 200_000, "the transfer was cut");
    let (events, summary) = proxy.finish();
    let moved = read.load(std::sync::atomic::Ordering::SeqCst)
        + written.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        moved <= CAP,
        "{moved} bytes crossed the sandbox's socket under a {CAP} byte cap"
    );
    assert!(
        moved > CAP / 2,
        "{moved}: the cap was reached, not something else"
    );
    assert!(
        summary.bytes_up + summary.bytes_down <= CAP as u64,
        "{summary:?}"
    );
    let tunnel = events
        .iter()
        .find(|e| e.protocol == Protocol::Connect)
        .unwrap();
    assert_eq!(tunnel.rule, "byte-cap", "{tunnel:?}");
}
