//! Identity-layer benchmark, all on 127.0.0.1: small HTTPS requests to a
//! local origin (its own CA), direct, through cordon's proxy as an opaque
//! CONNECT tunnel, through cordon's proxy with TLS interception and
//! placeholder substitution, and through a peer proxy (e.g. mitmproxy with
//! a header-rewriting addon) given by `--peer HOST:PORT --peer-ca PEM`.
//!
//! Usage: identity_bench [--requests N] [--conns C] [--fresh N]
//!        [--peer ADDR --peer-ca FILE --peer-name NAME]
//!        [--serve-origin FILE] (print the origin's address and CA to FILE
//!        and serve until killed; used by run.sh to start the peer first)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_egress::{
    Egress, EgressConfig, HostRule, Identity, InjectWhere, OverrideAddr, SecretBinding,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use zeroize::Zeroizing;

const PH: &str = "cordon-bench_token-0123456789abcdef0123456789abcdef";
const VALUE: &str = "real-secret-value-for-the-benchmark";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

struct Args {
    requests: usize,
    conns: usize,
    fresh: usize,
    peer: Option<SocketAddr>,
    peer_ca: Option<String>,
    peer_name: String,
    serve_origin: Option<String>,
    origin: Option<String>,
}

fn args() -> Args {
    let v: Vec<String> = std::env::args().skip(1).collect();
    let get = |k: &str| {
        v.iter()
            .position(|a| a == k)
            .and_then(|i| v.get(i + 1))
            .cloned()
    };
    Args {
        requests: get("--requests")
            .map(|s| s.parse().unwrap())
            .unwrap_or(20000),
        conns: get("--conns").map(|s| s.parse().unwrap()).unwrap_or(8),
        fresh: get("--fresh").map(|s| s.parse().unwrap()).unwrap_or(500),
        peer: get("--peer").map(|s| s.parse().unwrap()),
        peer_ca: get("--peer-ca"),
        peer_name: get("--peer-name").unwrap_or_else(|| "peer".into()),
        serve_origin: get("--serve-origin"),
        origin: get("--origin"),
    }
}

/// The origin: HTTP/1.1 keep-alive over TLS, answers `ok`; counts requests
/// that carried the real value.
struct Origin {
    addr: SocketAddr,
    ca_pem: String,
    with_value: Arc<AtomicU64>,
}

fn start_origin() -> Origin {
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "bench origin CA");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let mut leaf =
        rcgen::CertificateParams::new(vec!["api.test".to_string(), "tunnel.test".to_string()])
            .unwrap();
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let cfg = Arc::new(cfg);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let with_value = Arc::new(AtomicU64::new(0));
    let wv = with_value.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            let _ = conn.set_nodelay(true);
            let (cfg, wv) = (cfg.clone(), wv.clone());
            std::thread::spawn(move || {
                let tls = rustls::ServerConnection::new(cfg).unwrap();
                let mut r = BufReader::new(rustls::StreamOwned::new(tls, conn));
                let needle = format!("Bearer {VALUE}");
                let mut line = String::new();
                loop {
                    let mut real = false;
                    loop {
                        line.clear();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line.contains(&needle) {
                            real = true;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    if real {
                        wv.fetch_add(1, Ordering::Relaxed);
                    }
                    let w = r.get_mut();
                    if w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .and_then(|_| w.flush())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    Origin {
        addr,
        ca_pem: ca_cert.pem(),
        with_value,
    }
}

#[derive(Clone)]
struct Route {
    /// Proxy to CONNECT through; `None`: straight to the origin.
    proxy: Option<SocketAddr>,
    host: &'static str,
    origin: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn open(route: &Route) -> BufReader<Tls> {
    let port = route.origin.port();
    let mut tcp = TcpStream::connect(route.proxy.unwrap_or(route.origin)).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    if route.proxy.is_some() {
        write!(
            tcp,
            "CONNECT {}:{port} HTTP/1.1\r\nHost: {}:{port}\r\n\r\n",
            route.host, route.host
        )
        .unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            tcp.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
    }
    let conn = rustls::ClientConnection::new(
        route.tls.clone(),
        ServerName::try_from(route.host.to_string()).unwrap(),
    )
    .unwrap();
    BufReader::new(rustls::StreamOwned::new(conn, tcp))
}

fn one(s: &mut BufReader<Tls>, req: &[u8]) {
    let w = s.get_mut();
    w.write_all(req).unwrap();
    w.flush().unwrap();
    let mut line = String::new();
    let mut len = 0usize;
    loop {
        line.clear();
        s.read_line(&mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
}

fn request_bytes(route: &Route) -> Vec<u8> {
    format!(
        "GET /v1/thing HTTP/1.1\r\nHost: {}:{}\r\nAuthorization: Bearer {PH}\r\nAccept: */*\r\n\r\n",
        route.host,
        route.origin.port()
    )
    .into_bytes()
}

/// `conns` keep-alive connections, `n` requests in all: rate, and the
/// median latency of a request on a warm connection.
fn keepalive(route: &Route, n: usize, conns: usize) -> (f64, Duration) {
    let per = n / conns;
    let start = Instant::now();
    let handles: Vec<_> = (0..conns)
        .map(|_| {
            let route = route.clone();
            std::thread::spawn(move || {
                let req = request_bytes(&route);
                let mut s = open(&route);
                one(&mut s, &req);
                for _ in 0..per {
                    one(&mut s, &req);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let rate = (per * conns) as f64 / start.elapsed().as_secs_f64();
    // Latency: one connection, one request at a time.
    let req = request_bytes(route);
    let mut s = open(route);
    for _ in 0..50 {
        one(&mut s, &req);
    }
    let mut lat: Vec<Duration> = (0..2000)
        .map(|_| {
            let t = Instant::now();
            one(&mut s, &req);
            t.elapsed()
        })
        .collect();
    lat.sort();
    (rate, lat[lat.len() / 2])
}

/// A new connection (CONNECT + TLS) for every request, one at a time:
/// rate and median time per request.
fn fresh(route: &Route, n: usize) -> (f64, Duration) {
    let req = request_bytes(route);
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let mut s = open(route);
        one(&mut s, &req);
        lat.push(t.elapsed());
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    lat.sort();
    (rate, lat[lat.len() / 2])
}

fn main() {
    let a = args();
    if let Some(file) = &a.serve_origin {
        let o = start_origin();
        std::fs::write(format!("{file}.ca"), &o.ca_pem).unwrap();
        std::fs::write(file, o.addr.to_string()).unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    // The origin is either started here or shared with the peer (run.sh
    // starts it first so the peer can be pointed at it).
    let (origin_addr, origin_ca, counter) = match &a.origin {
        Some(file) => (
            std::fs::read_to_string(file)
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
            std::fs::read_to_string(format!("{file}.ca")).unwrap(),
            None,
        ),
        None => {
            let o = start_origin();
            (o.addr, o.ca_pem, Some(o.with_value))
        }
    };
    let identity = Identity::new(
        vec![SecretBinding {
            name: "BENCH_TOKEN".into(),
            placeholder: PH.into(),
            value: Zeroizing::new(VALUE.into()),
            hosts: vec![HostRule::parse("api.test").unwrap()],
            inject: InjectWhere::default(),
            expires_at: None,
        }],
        Some(origin_ca.as_bytes()),
    )
    .unwrap();
    let mut overrides = HashMap::new();
    for h in ["api.test", "tunnel.test"] {
        overrides.insert(h.to_string(), vec![OverrideAddr::Socket(origin_addr)]);
    }
    let cfg = EgressConfig {
        sandbox_id: "bench".into(),
        allow: vec![
            HostRule::parse("api.test").unwrap(),
            HostRule::parse("tunnel.test").unwrap(),
        ],
        resolve_overrides: overrides,
        ..Default::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = Egress::new(cfg)
        .unwrap()
        .with_tls_interceptor(Arc::new(identity.clone()))
        .spawn(listener)
        .unwrap();
    let origin_tls = client_config(&origin_ca);
    let mut routes: Vec<(String, Route)> = vec![
        (
            "direct (no proxy)".into(),
            Route {
                proxy: None,
                host: "tunnel.test",
                origin: origin_addr,
                tls: origin_tls.clone(),
            },
        ),
        (
            "cordon CONNECT tunnel (opaque)".into(),
            Route {
                proxy: Some(proxy.local_addr()),
                host: "tunnel.test",
                origin: origin_addr,
                tls: origin_tls.clone(),
            },
        ),
        (
            "cordon intercept + substitution".into(),
            Route {
                proxy: Some(proxy.local_addr()),
                host: "api.test",
                origin: origin_addr,
                tls: client_config(&identity.ca_cert_pem()),
            },
        ),
    ];
    if let (Some(peer), Some(ca)) = (a.peer, &a.peer_ca) {
        routes.push((
            format!("{} + header rewrite", a.peer_name),
            Route {
                proxy: Some(peer),
                host: "api.test",
                origin: origin_addr,
                tls: client_config(&std::fs::read_to_string(ca).unwrap()),
            },
        ));
    }
    println!(
        "keep-alive: {} requests over {} connections; latency: median of 2000 sequential requests on one warm connection; fresh: {} requests, each on a new connection (CONNECT + TLS handshake), one at a time.",
        a.requests, a.conns, a.fresh
    );
    println!();
    println!("| route | keep-alive req/s | median latency | added vs direct | fresh conn req/s | fresh median |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut base = Duration::ZERO;
    let mut rates = Vec::new();
    for (name, r) in &routes {
        let (rate, med) = keepalive(r, a.requests, a.conns);
        let (frate, fmed) = fresh(r, a.fresh);
        if r.proxy.is_none() {
            base = med;
        }
        let added = med.as_secs_f64() - base.as_secs_f64();
        println!(
            "| {name} | {rate:.0} | {:.1} µs | {:+.1} µs | {frate:.0} | {:.2} ms |",
            med.as_secs_f64() * 1e6,
            added * 1e6,
            fmed.as_secs_f64() * 1e3
        );
        rates.push((name.clone(), rate, frate));
    }
    println!();
    let find = |p: &str| rates.iter().find(|(n, _, _)| n.starts_with(p)).cloned();
    if let (Some(c), Some(t)) = (find("cordon intercept"), find("cordon CONNECT")) {
        println!(
            "- intercept vs opaque tunnel: {:.2}x keep-alive rate, {:.2}x fresh-connection rate",
            c.1 / t.1,
            c.2 / t.2
        );
    }
    if let (Some(c), Some(p)) = (find("cordon intercept"), rates.get(3).cloned()) {
        println!(
            "- intercept vs {}: {:.1}x keep-alive rate, {:.1}x fresh-connection rate",
            p.0,
            c.1 / p.1,
            c.2 / p.2
        );
    }
    if let Some(c) = counter {
        println!(
            "- requests that reached the origin with the real value: {}",
            c.load(Ordering::Relaxed)
        );
    }
    drop(proxy);
}
