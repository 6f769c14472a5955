//! The proxy driven by real clients against real servers on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use cordon_egress::{
    sni, Approver, BoxFuture, Decision, EgressConfig, EgressEvent, InterceptedTunnel, Protocol,
    RateLimit, TlsInterceptor, Unlisted,
};

fn base(http: &HttpServer) -> EgressConfig {
    EgressConfig {
        sandbox_id: "sb-test".into(),
        allow: rules(&["allowed.test", "*.corp.test"]),
        deny: rules(&["secret.corp.test"]),
        resolve_overrides: overrides(&[
            ("allowed.test:80", http.addr),
            ("www.corp.test:80", http.addr),
            ("secret.corp.test:80", http.addr),
            ("evil.test:80", http.addr),
        ]),
        ..Default::default()
    }
}

fn one<'a>(events: &'a [EgressEvent], host: &str) -> &'a EgressEvent {
    let matching: Vec<_> = events.iter().filter(|e| e.host == host).collect();
    assert_eq!(
        matching.len(),
        1,
        "expected one event for {host}: {events:#?}"
    );
    matching[0]
}

#[test]
fn curl_http_allowed_and_redacted() {
    if !have("curl") {
        return skip("curl_http_allowed_and_redacted", "curl is not installed");
    }
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let (code, out, err) = curl(&[
        "-x",
        &p.url(),
        "-H",
        "Authorization: Bearer s3cr3t",
        "-H",
        "Cookie: sid=hunter2",
        "http://allowed.test/hello?token=tok-123&x=1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hello GET /hello?token=tok-123&x=1 body=");
    let seen = http.seen();
    assert_eq!(seen.len(), 1);
    // Origin-form upstream, end-to-end headers kept, proxy headers dropped.
    assert_eq!(seen[0].target, "/hello?token=tok-123&x=1");
    assert_eq!(seen[0].header("authorization"), Some("Bearer s3cr3t"));
    assert_eq!(seen[0].header("host"), Some("allowed.test"));
    assert!(seen[0].header("proxy-connection").is_none());
    let (ev, summary) = p.finish();
    let e = one(&ev, "allowed.test");
    assert_eq!(e.protocol, Protocol::Http);
    assert_eq!(e.decision, Decision::Allow);
    assert_eq!(e.rule, "allow:allowed.test");
    assert_eq!(e.method, "GET");
    assert_eq!(e.port, 80);
    assert_eq!(e.sandbox_id, "sb-test");
    assert_eq!(e.status, Some(200));
    assert_eq!(e.path.as_deref(), Some("/hello?token=[REDACTED]&x=1"));
    assert!(e.bytes_up > 50 && e.bytes_down > 40, "{e:?}");
    assert_eq!(summary.events, 1);
    assert_eq!(summary.allowed, 1);
}

#[test]
fn keep_alive_reuses_both_connections() {
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for i in 0..3 {
        write!(
            s,
            "GET http://allowed.test/n{i} HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
        )
        .unwrap();
        let (status, _, body) = read_response(&mut s);
        assert_eq!(status, 200);
        assert_eq!(
            String::from_utf8_lossy(&body),
            format!("hello GET /n{i} body=")
        );
    }
    // A POST with a chunked body, a chunked response, and a HEAD.
    s.write_all(b"POST http://allowed.test/up HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        .unwrap();
    let (status, _, body) = read_response(&mut s);
    assert_eq!(status, 200);
    assert_eq!(String::from_utf8_lossy(&body), "hello POST /up body=abcde");
    s.write_all(b"HEAD http://allowed.test/h HTTP/1.1\r\n\r\n")
        .unwrap();
    let (status, head, body) = read_response_head_only(&mut s);
    assert_eq!(status, 200, "{head}");
    assert!(body.is_empty());
    s.write_all(b"GET http://allowed.test/chunked HTTP/1.1\r\n\r\n")
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !got.ends_with(b"0\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).contains("hello\r\n6\r\n world"));
    drop(s);
    assert_eq!(
        http.connections.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 6, "{ev:#?}");
    assert!(ev.iter().all(|e| e.decision == Decision::Allow));
}

#[test]
fn stale_upstream_connection_is_replaced_once() {
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET http://allowed.test/quiet-close HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s).0, 200);
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(b"GET http://allowed.test/after HTTP/1.1\r\n\r\n")
        .unwrap();
    let (status, _, body) = read_response(&mut s);
    assert_eq!(status, 200);
    assert_eq!(String::from_utf8_lossy(&body), "hello GET /after body=");
    drop(s);
    assert_eq!(
        http.connections.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 2);
}

fn read_response_head_only(s: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    (
        status_of(&head),
        String::from_utf8_lossy(&head).into(),
        Vec::new(),
    )
}

#[test]
fn curl_denied_unlisted_and_deny_beats_allow() {
    if !have("curl") {
        return skip(
            "curl_denied_unlisted_and_deny_beats_allow",
            "curl is not installed",
        );
    }
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let (code, out, _) = curl(&["-x", &p.url(), "-w", "\n%{http_code}", "http://evil.test/x"]);
    assert_eq!(code, 0);
    assert!(out.ends_with("\n403"), "{out}");
    assert!(
        out.contains("cordon: egress to evil.test:80 denied (not in the allowlist). To allow it: --allow-net evil.test or network.allow in the profile."),
        "{out}"
    );
    let (_, out, _) = curl(&[
        "-x",
        &p.url(),
        "-w",
        "\n%{http_code}",
        "http://secret.corp.test/",
    ]);
    assert!(out.ends_with("\n403"), "{out}");
    assert!(out.contains("deny:secret.corp.test"), "{out}");
    let (_, out, _) = curl(&["-x", &p.url(), "http://www.corp.test/ok"]);
    assert_eq!(out, "hello GET /ok body=");
    // CONNECT to an unlisted host: 403 before any tunnel.
    let (code, _, err) = curl(&[
        "-x",
        &p.url(),
        "-w",
        "%{http_connect}",
        "https://evil.test/",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("403"), "{err}");
    assert!(
        http.seen().iter().all(|s| s.target == "/ok"),
        "denied requests reached the server"
    );
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 4, "{ev:#?}");
    let evil: Vec<_> = ev.iter().filter(|e| e.host == "evil.test").collect();
    assert_eq!(evil.len(), 2);
    assert!(evil
        .iter()
        .all(|e| e.rule == "unlisted" && e.decision == Decision::Deny));
    assert!(evil
        .iter()
        .any(|e| e.protocol == Protocol::Connect && e.port == 443));
    let s = one(&ev, "secret.corp.test");
    assert_eq!(s.rule, "deny:secret.corp.test");
    assert_eq!(s.status, Some(403));
    assert_eq!(one(&ev, "www.corp.test").rule, "allow:*.corp.test");
}

#[test]
fn curl_https_through_connect_and_sni() {
    if !have("curl") {
        return skip(
            "curl_https_through_connect_and_sni",
            "curl is not installed",
        );
    }
    let Some(tls) = TlsServer::start("allowed.test") else {
        return skip(
            "curl_https_through_connect_and_sni",
            "openssl is not installed",
        );
    };
    let http = HttpServer::start();
    let mut cfg = base(&http);
    cfg.resolve_overrides.extend(overrides(&[
        ("allowed.test:443", tls.addr),
        ("www.corp.test:443", tls.addr),
    ]));
    let p = Proxy::start(cfg);
    let (code, out, err) = curl(&["-k", "-x", &p.url(), "https://allowed.test/"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("s_server"), "{out}");
    // SNI that differs from the CONNECT host: openssl s_client can say so.
    let proxy = p.addr.to_string();
    let run_s_client = |extra: &[&str]| {
        let mut c = Command::new("openssl");
        c.args([
            "s_client",
            "-proxy",
            &proxy,
            "-connect",
            "www.corp.test:443",
        ])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        let out = c.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, text) = run_s_client(&["-servername", "evil.test"]);
    assert!(!ok, "{text}");
    assert!(text.contains("access denied"), "{text}");
    let (ok, text) = run_s_client(&["-noservername"]);
    assert!(!ok, "{text}");
    let (ok, text) = run_s_client(&["-servername", "www.corp.test"]);
    assert!(ok, "{text}");
    let (ev, _) = p.finish();
    let a = one(&ev, "allowed.test");
    assert_eq!(a.protocol, Protocol::Connect);
    assert_eq!(a.decision, Decision::Allow);
    assert!(a.bytes_up > 200 && a.bytes_down > 500, "{a:?}");
    let corp: Vec<_> = ev.iter().filter(|e| e.host == "www.corp.test").collect();
    assert_eq!(corp.len(), 3, "{corp:#?}");
    assert!(corp
        .iter()
        .any(|e| e.rule == "sni-mismatch evil.test" && e.decision == Decision::Deny));
    assert!(corp
        .iter()
        .any(|e| e.rule == "sni-missing" && e.decision == Decision::Deny));
    assert!(corp.iter().any(|e| e.decision == Decision::Allow));
}

/// CONNECT, then a ClientHello, by hand; returns what the proxy sent back.
fn connect_with_hello(proxy: std::net::SocketAddr, target: &str, hello: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let (status, head, _) = read_response_head_only(&mut s);
    assert_eq!(status, 200, "{head}");
    s.write_all(hello).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn raw_sni_checks() {
    let echo = echo_server();
    let p = Proxy::start(EgressConfig {
        allow: rules(&["tls.test"]),
        resolve_overrides: overrides(&[("tls.test:443", echo)]),
        ..Default::default()
    });
    // Matching SNI: the ClientHello is forwarded as is (the echo returns it).
    let hello = sni::build_client_hello(Some("TLS.test"));
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"CONNECT tls.test:443 HTTP/1.1\r\n\r\n")
        .unwrap();
    s.write_all(&hello).unwrap(); // pipelined before the 200
    let (status, _, _) = read_response_head_only(&mut s);
    assert_eq!(status, 200);
    let mut back = vec![0; hello.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, hello);
    drop(s);
    // Mismatch, missing, not TLS: a TLS access_denied alert, then close.
    let alert = [21u8, 3, 3, 0, 2, 2, 49];
    assert_eq!(
        connect_with_hello(
            p.addr,
            "tls.test:443",
            &sni::build_client_hello(Some("other.test"))
        ),
        alert
    );
    assert_eq!(
        connect_with_hello(p.addr, "tls.test:443", &sni::build_client_hello(None)),
        alert
    );
    assert_eq!(
        connect_with_hello(p.addr, "tls.test:443", b"GET / HTTP/1.1\r\n\r\n"),
        alert
    );
    let (ev, _) = p.finish();
    let rules: Vec<_> = ev.iter().map(|e| e.rule.as_str()).collect();
    assert_eq!(ev.len(), 4, "{ev:#?}");
    assert!(rules.contains(&"allow:tls.test"), "{rules:?}");
    assert!(rules.contains(&"sni-mismatch other.test"));
    assert!(rules.contains(&"sni-missing"));
    assert!(
        rules.iter().any(|r| r.starts_with("malformed: not a TLS")),
        "{rules:?}"
    );
}

#[test]
fn connect_plain_tcp_and_socks5() {
    let echo = echo_server();
    let http = HttpServer::start();
    let mut cfg = base(&http);
    cfg.allow
        .extend(rules(&["echo.test:7000", "127.0.0.1", "[::1]"]));
    cfg.resolve_overrides
        .extend(overrides(&[("echo.test:7000", echo)]));
    let p = Proxy::start(cfg);
    // CONNECT to a non-TLS port is spliced without an SNI check.
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"CONNECT echo.test:7000 HTTP/1.1\r\n\r\n")
        .unwrap();
    let (status, _, _) = read_response_head_only(&mut s);
    assert_eq!(status, 200);
    let payload = vec![7u8; 300_000];
    let mut r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; 300_000];
        r.read_exact(&mut got).unwrap();
        got
    });
    s.write_all(&payload).unwrap();
    assert_eq!(reader.join().unwrap(), payload);
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty());

    // SOCKS5, domain name.
    let reply = socks5(p.addr, 1, &socks_domain("echo.test", 7000));
    assert_eq!(reply.0[1], 0, "SOCKS5 CONNECT should succeed");
    let mut s = reply.1;
    s.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
    drop(s);
    // Refusals carry the right reply codes.
    assert_eq!(socks5(p.addr, 1, &socks_domain("evil.test", 80)).0[1], 2);
    assert_eq!(socks5(p.addr, 2, &socks_domain("echo.test", 7000)).0[1], 7);
    assert_eq!(socks5(p.addr, 3, &socks_domain("echo.test", 7000)).0[1], 7);
    let mut v4 = vec![1, 127, 0, 0, 1];
    v4.extend_from_slice(&http.addr.port().to_be_bytes());
    assert_eq!(
        socks5(p.addr, 1, &v4).0[1],
        2,
        "loopback literal must be refused"
    );
    let mut v6 = vec![4];
    v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    v6.extend_from_slice(&http.addr.port().to_be_bytes());
    assert_eq!(socks5(p.addr, 1, &v6).0[1], 2, "[::1] must be refused");
    assert_eq!(
        socks5(p.addr, 1, &[9, 0, 0]).0[1],
        8,
        "unknown address type"
    );
    // No acceptable auth method.
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[5, 1, 2]).unwrap();
    let mut b = Vec::new();
    let _ = s.read_to_end(&mut b);
    assert_eq!(b, [5, 0xff]);

    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 9, "{ev:#?}");
    let c = &ev.iter().find(|e| e.protocol == Protocol::Connect).unwrap();
    assert_eq!(
        c.bytes_up as usize,
        300_000 + "CONNECT echo.test:7000 HTTP/1.1\r\n\r\n".len()
    );
    assert!(c.bytes_down >= 300_000);
    let socks: Vec<_> = ev
        .iter()
        .filter(|e| e.protocol == Protocol::Socks5)
        .collect();
    assert_eq!(socks.len(), 8);
    assert!(socks.iter().any(|e| e.rule == "private-address ::1"));
    assert!(socks
        .iter()
        .any(|e| e.rule == "unsupported: SOCKS5 address type"));
    assert!(socks.iter().any(|e| e.rule == "unsupported: SOCKS5 BIND"));
    assert!(socks
        .iter()
        .any(|e| e.rule == "unsupported: SOCKS5 UDP ASSOCIATE"));
    assert!(socks.iter().any(|e| e.rule == "private-address 127.0.0.1"));
    assert!(socks
        .iter()
        .any(|e| e.rule == "unlisted" && e.host == "evil.test"));
    assert!(socks
        .iter()
        .any(|e| e.rule.starts_with("unsupported: SOCKS5 authentication")));
}

fn socks_domain(host: &str, port: u16) -> Vec<u8> {
    let mut v = vec![3, host.len() as u8];
    v.extend_from_slice(host.as_bytes());
    v.extend_from_slice(&port.to_be_bytes());
    v
}

/// Greets, sends a request with `cmd` and the address part; returns the
/// 10-byte reply and the stream.
fn socks5(proxy: std::net::SocketAddr, cmd: u8, addr: &[u8]) -> (Vec<u8>, TcpStream) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut g = [0u8; 2];
    s.read_exact(&mut g).unwrap();
    assert_eq!(g, [5, 0]);
    let mut req = vec![5, cmd, 0];
    req.extend_from_slice(addr);
    s.write_all(&req).unwrap();
    let mut reply = vec![0u8; 10];
    s.read_exact(&mut reply).unwrap();
    (reply, s)
}

#[test]
fn curl_socks5h() {
    if !have("curl") {
        return skip("curl_socks5h", "curl is not installed");
    }
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let (code, out, err) = curl(&[
        "--proxy",
        &format!("socks5h://{}", p.addr),
        "http://allowed.test/via-socks",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hello GET /via-socks body=");
    let (code, _, err) = curl(&[
        "--proxy",
        &format!("socks5h://{}", p.addr),
        "http://evil.test/",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.to_lowercase().contains("not allowed") || err.contains("97"),
        "{err}"
    );
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 2);
    assert_eq!(one(&ev, "allowed.test").protocol, Protocol::Socks5);
    assert_eq!(one(&ev, "evil.test").rule, "unlisted");
}

#[test]
fn private_addresses_refused() {
    if !have("curl") {
        return skip("private_addresses_refused", "curl is not installed");
    }
    let http = HttpServer::start();
    let port = http.addr.port();
    let mut cfg = base(&http);
    cfg.allow.extend(rules(&[
        "localhost",
        "127.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "0.0.0.0",
    ]));
    let p = Proxy::start(cfg.clone());
    for url in [
        format!("http://localhost:{port}/"),
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://0.0.0.0:{port}/"),
    ] {
        let (code, out, err) = curl(&["-x", &p.url(), "-w", "\n%{http_code}", &url]);
        assert_eq!(code, 0, "{err}");
        assert!(out.ends_with("\n403"), "{url}: {out}");
        assert!(out.contains("network.allow_private = true"), "{out}");
    }
    // A CONNECT to a loopback literal on 443 is refused before the tunnel.
    let resp = raw(p.addr, b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 403);
    assert!(
        http.seen().is_empty(),
        "a refused request reached the server"
    );
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 6);
    let lh = one(&ev, "localhost");
    assert!(lh.rule.starts_with("private-address "), "{lh:?}");
    assert!(
        lh.rule == "private-address 127.0.0.1" || lh.rule == "private-address ::1",
        "{lh:?}"
    );
    assert!(ev
        .iter()
        .all(|e| e.decision == Decision::Deny && e.rule.starts_with("private-address ")));

    // allow_private lets the same request through.
    cfg.allow_private = true;
    let p = Proxy::start(cfg);
    let (code, out, _) = curl(&["-x", &p.url(), &format!("http://127.0.0.1:{port}/ok")]);
    assert_eq!(code, 0);
    assert_eq!(out, "hello GET /ok body=");
    p.finish();
}

#[test]
fn https_only_and_methods() {
    let http = HttpServer::start();
    let echo = echo_server();
    let mut cfg = base(&http);
    cfg.allow.extend(rules(&["echo.test"]));
    cfg.resolve_overrides
        .extend(overrides(&[("echo.test:7000", echo)]));
    cfg.https_only = true;
    let p = Proxy::start(cfg.clone());
    let resp = raw(p.addr, b"GET http://allowed.test/ HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 403);
    assert!(String::from_utf8_lossy(&resp).contains("only use HTTPS"));
    // Under https_only, every tunnel must start with a matching ClientHello.
    let got = connect_with_hello(p.addr, "echo.test:7000", b"plain text\r\n");
    assert_eq!(got, [21, 3, 3, 0, 2, 2, 49]);
    let hello = sni::build_client_hello(Some("echo.test"));
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"CONNECT echo.test:7000 HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_response_head_only(&mut s).0, 200);
    s.write_all(&hello).unwrap();
    let mut back = vec![0; hello.len()];
    s.read_exact(&mut back).unwrap();
    drop(s);
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 3);
    assert_eq!(one(&ev, "allowed.test").rule, "https-only");

    cfg.https_only = false;
    cfg.methods = vec!["GET".into(), "head".into()];
    let p = Proxy::start(cfg);
    let resp = raw(
        p.addr,
        b"POST http://allowed.test/ HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!(status_of(&resp), 403);
    let resp = raw(p.addr, b"HEAD http://allowed.test/ HTTP/1.0\r\n\r\n");
    assert_eq!(status_of(&resp), 200);
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 2);
    assert!(ev.iter().any(|e| e.rule == "method POST"));
}

#[test]
fn rate_limits_and_byte_cap() {
    let http = HttpServer::start();
    let echo = echo_server();
    let mut cfg = base(&http);
    cfg.allow.extend(rules(&["echo.test"]));
    cfg.resolve_overrides
        .extend(overrides(&[("echo.test:7000", echo)]));
    cfg.rate_limits = vec![
        RateLimit {
            host: "allowed.test".parse().unwrap(),
            requests: Some(2),
            bytes: None,
            per: Duration::from_secs(3600),
        },
        RateLimit {
            host: "echo.test".parse().unwrap(),
            requests: None,
            bytes: Some(100_000),
            per: Duration::from_secs(3600),
        },
    ];
    let p = Proxy::start(cfg.clone());
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for _ in 0..2 {
        s.write_all(b"GET http://allowed.test/ HTTP/1.1\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut s).0, 200);
    }
    s.write_all(b"GET http://allowed.test/ HTTP/1.1\r\n\r\n")
        .unwrap();
    let (status, head, body) = read_response(&mut s);
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("Retry-After:"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("rate limit for allowed.test"));
    // Other hosts are not affected.
    let resp = raw(
        p.addr,
        b"GET http://www.corp.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&resp), 200);
    // A byte rate limit cuts a tunnel.
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"CONNECT echo.test:7000 HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_response_head_only(&mut s).0, 200);
    let mut r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut total = 0;
        let mut b = [0u8; 8192];
        while let Ok(n) = r.read(&mut b) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    for _ in 0..50 {
        if s.write_all(&[1u8; 10_000]).is_err() {
            break;
        }
    }
    let got = reader.join().unwrap();
    assert!(got < 100_000, "tunnel was not cut: {got}");
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 5, "{ev:#?}");
    assert_eq!(
        ev.iter().filter(|e| e.rule == "rate-limit").count(),
        2,
        "{ev:#?}"
    );
    let echo_ev = one(&ev, "echo.test");
    assert_eq!(echo_ev.rule, "rate-limit");
    assert!(echo_ev.bytes_up > 0);

    // The total byte cap: a large download is cut, the next request refused.
    cfg.rate_limits.clear();
    cfg.max_bytes = Some(200_000);
    let p = Proxy::start(cfg);
    let resp = raw(
        p.addr,
        b"GET http://allowed.test/big?n=1000000 HTTP/1.1\r\n\r\n",
    );
    assert!(resp.len() < 300_000, "download was not cut: {}", resp.len());
    let resp = raw(p.addr, b"GET http://allowed.test/ HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 429);
    assert!(String::from_utf8_lossy(&resp).contains("byte cap"));
    let (ev, summary) = p.finish();
    assert_eq!(ev.len(), 2);
    assert!(ev.iter().all(|e| e.rule == "byte-cap"), "{ev:#?}");
    assert!(summary.bytes_down < 300_000);
}

#[test]
fn malformed_requests_get_4xx_and_one_event_each() {
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let cases: &[(&[u8], u16)] = &[
        (b"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n", 400),
        (b"GET http://allowed.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 400),
        (b"POST http://allowed.test/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"POST http://allowed.test/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", 400),
        (b"POST http://allowed.test/ HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", 400),
        (b"GET http://allowed.test/\x00 HTTP/1.1\r\n\r\n", 400),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX-A: a\x00b\r\n\r\n", 400),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400),
        (b"GET /origin-form HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400),
        (b"\x16\x03\x01\x00\x05hello", 400),
        (b"garbage garbage garbage\r\n\r\n", 400),
        (b"CONNECT allowed.test HTTP/1.1\r\n\r\n", 400),
        (b"GET http://allowed.test/ HTTP/1.1\r\nincomplete", 400),
    ];
    for (req, want) in cases {
        let mut s = TcpStream::connect(p.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req).unwrap();
        if req.ends_with(b"incomplete") {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert_eq!(
            status_of(&out),
            *want,
            "{:?} -> {:?}",
            String::from_utf8_lossy(req),
            String::from_utf8_lossy(&out)
        );
        assert!(String::from_utf8_lossy(&out).contains("cordon: malformed request refused"));
    }
    // Oversized request line and head.
    let long = format!(
        "GET http://allowed.test/{} HTTP/1.1\r\n\r\n",
        "a".repeat(20_000)
    );
    assert_eq!(status_of(&raw(p.addr, long.as_bytes())), 414);
    let mut big = b"GET http://allowed.test/ HTTP/1.1\r\n".to_vec();
    for _ in 0..3000 {
        big.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(&big);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert_eq!(status_of(&out), 431);
    assert!(
        http.seen().is_empty(),
        "a malformed request reached the server"
    );
    let (ev, summary) = p.finish();
    assert_eq!(ev.len(), cases.len() + 2, "{ev:#?}");
    assert!(
        ev.iter()
            .all(|e| e.decision == Decision::Deny && e.rule.starts_with("malformed: ")),
        "{ev:#?}"
    );
    assert_eq!(summary.denied as usize, cases.len() + 2);
}

#[test]
fn python_urllib_and_requests() {
    if !have("python3") {
        return skip("python_urllib_and_requests", "python3 is not installed");
    }
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let script = r#"
import sys, urllib.request, urllib.error
proxy = sys.argv[1]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
print(opener.open("http://allowed.test/urllib?key=s3cr3t", timeout=10).read().decode())
try:
    opener.open("http://evil.test/", timeout=10)
    print("NOT DENIED")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
try:
    import requests
except ImportError:
    print("NO-REQUESTS")
    sys.exit(0)
s = requests.Session()
s.trust_env = False
r = s.get("http://allowed.test/requests", proxies={"http": proxy}, timeout=10)
print(r.status_code, r.text)
r = s.post("http://allowed.test/post", data=b"x" * 3000, proxies={"http": proxy}, timeout=10)
print(r.status_code, len(r.text))
r = s.get("http://secret.corp.test/", proxies={"http": proxy}, timeout=10)
print(r.status_code, r.text.strip())
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(p.url())
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines[0], "hello GET /urllib?key=s3cr3t body=");
    assert!(
        lines[1].starts_with("403 cordon: egress to evil.test:80 denied"),
        "{text}"
    );
    if lines.get(2) == Some(&"NO-REQUESTS") {
        skip(
            "python_urllib_and_requests (requests part)",
            "python3 module requests is not installed",
        );
        p.finish();
        return;
    }
    assert_eq!(lines[2], "200 hello GET /requests body=");
    assert!(lines[3].starts_with("200 "), "{text}");
    assert!(
        lines[4].starts_with(
            "403 cordon: egress to secret.corp.test:80 denied by the rule deny:secret.corp.test"
        ),
        "{text}"
    );
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 5, "{ev:#?}");
    assert!(ev
        .iter()
        .any(|e| e.path.as_deref() == Some("/urllib?key=[REDACTED]")));
}

#[test]
fn curl_expect_continue_and_large_upload() {
    if !have("curl") {
        return skip(
            "curl_expect_continue_and_large_upload",
            "curl is not installed",
        );
    }
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let dir = TempDir::new("upload");
    let file = dir.0.join("body");
    std::fs::write(&file, vec![b'u'; 2_000_000]).unwrap();
    let start = Instant::now();
    let (code, out, err) = curl(&[
        "-x",
        &p.url(),
        "-H",
        "Expect: 100-continue",
        "--data-binary",
        &format!("@{}", file.display()),
        "http://allowed.test/upload",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("hello POST /upload body=uuu"));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "Expect: 100-continue stalled"
    );
    assert_eq!(http.seen()[0].body.len(), 2_000_000);
    assert!(http.seen()[0].header("expect").is_none());
    let (code, out, _) = curl(&[
        "-x",
        &p.url(),
        "http://allowed.test/big?n=3000000",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
    ]);
    assert_eq!(code, 0);
    assert_eq!(out, "3000000");
    let (code, out, _) = curl(&["-x", &p.url(), "http://allowed.test/close"]);
    assert_eq!(code, 0);
    assert_eq!(out, "until close");
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 3);
    let up = ev
        .iter()
        .find(|e| e.path.as_deref() == Some("/upload"))
        .unwrap();
    assert!(up.bytes_up > 2_000_000);
}

struct Approve(&'static str);

impl Approver for Approve {
    fn decide<'a>(&'a self, sandbox: &'a str, host: &'a str, _port: u16) -> BoxFuture<'a, bool> {
        let ok = host == self.0 && sandbox == "sb-test";
        Box::pin(async move { ok })
    }
}

#[test]
fn ask_hook() {
    let http = HttpServer::start();
    let mut cfg = base(&http);
    cfg.on_unlisted = Unlisted::Ask;
    cfg.resolve_overrides
        .extend(overrides(&[("ask.test:80", http.addr)]));
    // The default approver refuses with the how-to-allow message.
    let p = Proxy::start(cfg.clone());
    let resp = raw(p.addr, b"GET http://ask.test/ HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 403);
    assert!(String::from_utf8_lossy(&resp).contains("--allow-net ask.test"));
    p.finish();
    let p = Proxy::start_with(cfg, |e| e.with_approver(Arc::new(Approve("ask.test"))));
    let resp = raw(
        p.addr,
        b"GET http://ask.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&resp), 200);
    let resp = raw(p.addr, b"GET http://evil.test/ HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 403);
    let (ev, _) = p.finish();
    assert_eq!(one(&ev, "ask.test").rule, "ask:approved");
    assert_eq!(one(&ev, "evil.test").rule, "unlisted");
}

struct Intercept;

impl TlsInterceptor for Intercept {
    fn intercepts(&self, host: &str, _port: u16) -> bool {
        host == "bound.test"
    }
    fn intercept(&self, mut t: InterceptedTunnel) -> BoxFuture<'static, std::io::Result<()>> {
        Box::pin(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut first = [0u8; 5];
            t.client.read_exact(&mut first).await?;
            let msg = format!("intercepted {} {:?}", t.host, first);
            t.client.write_all(msg.as_bytes()).await?;
            t.client.shutdown().await
        })
    }
}

#[test]
fn tls_interceptor_hook() {
    let echo = echo_server();
    let p = Proxy::start_with(
        EgressConfig {
            allow: rules(&["bound.test", "plain.test"]),
            resolve_overrides: overrides(&[("bound.test:443", echo), ("plain.test:443", echo)]),
            ..Default::default()
        },
        |e| e.with_tls_interceptor(Arc::new(Intercept)),
    );
    let got = connect_with_hello(
        p.addr,
        "bound.test:443",
        &sni::build_client_hello(Some("bound.test")),
    );
    assert_eq!(
        String::from_utf8_lossy(&got),
        "intercepted bound.test [22, 3, 1, 0, 73]"
    );
    // Other hosts stay opaque tunnels (the echo returns the ClientHello).
    let hello = sni::build_client_hello(Some("plain.test"));
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"CONNECT plain.test:443 HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_response_head_only(&mut s).0, 200);
    s.write_all(&hello).unwrap();
    let mut back = vec![0; hello.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, hello);
    drop(s);
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 2);
    assert!(one(&ev, "bound.test").bytes_down > 20);
}

#[test]
fn shutdown_closes_live_tunnels_and_reports_them() {
    let echo = echo_server();
    let p = Proxy::start(EgressConfig {
        allow: rules(&["echo.test"]),
        resolve_overrides: overrides(&[("echo.test:7000", echo)]),
        ..Default::default()
    });
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"CONNECT echo.test:7000 HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_response_head_only(&mut s).0, 200);
    s.write_all(b"hi").unwrap();
    let mut b = [0u8; 2];
    s.read_exact(&mut b).unwrap();
    // An idle keep-alive client too.
    let idle = TcpStream::connect(p.addr).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.summary().connections < 2 {
        assert!(
            Instant::now() < deadline,
            "the idle connection was not accepted"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = Instant::now();
    let (ev, summary) = p.finish();
    assert!(start.elapsed() < Duration::from_secs(3));
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap_or(0), 0);
    drop(idle);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].bytes_up, 2 + 35);
    assert_eq!(summary.connections, 2);
}

#[test]
fn serve_on_callers_runtime() {
    let http = HttpServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let ev2 = events.clone();
    let summary = rt.block_on(async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(cordon_egress::serve(
            base(&http),
            l,
            Arc::new(move |e: EgressEvent| ev2.lock().unwrap().push(e)),
            async {
                let _ = rx.await;
            },
        ));
        let resp = tokio::task::spawn_blocking(move || {
            raw(
                addr,
                b"GET http://allowed.test/rt HTTP/1.1\r\nConnection: close\r\n\r\n",
            )
        })
        .await
        .unwrap();
        assert_eq!(status_of(&resp), 200);
        let _ = tx.send(());
        server.await.unwrap().unwrap()
    });
    assert_eq!(summary.events, 1);
    assert_eq!(events.lock().unwrap().len(), 1);
}

#[test]
fn config_errors_are_clear() {
    let e = cordon_egress::HostRule::parse("*").unwrap_err().to_string();
    assert!(e.contains("bare '*'"), "{e}");
    let e = cordon_egress::HostRule::parse("*.com")
        .unwrap_err()
        .to_string();
    assert!(e.contains("top-level domain"), "{e}");
    let cfg = EgressConfig {
        rate_limits: vec![RateLimit {
            host: "a.test".parse().unwrap(),
            requests: None,
            bytes: None,
            per: Duration::from_secs(1),
        }],
        ..Default::default()
    };
    let e = cordon_egress::Egress::new(cfg).unwrap_err().to_string();
    assert!(e.contains("a.test"), "{e}");
}

#[test]
fn refusal_is_readable_while_the_client_still_sends() {
    let http = HttpServer::start();
    let p = Proxy::start(base(&http));
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = vec![b'b'; 600_000];
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(
            format!(
                "POST http://evil.test/up HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        let _ = w.write_all(&body);
    });
    let (status, _, text) = read_response(&mut s);
    assert_eq!(status, 403);
    assert!(String::from_utf8_lossy(&text).contains("not in the allowlist"));
    writer.join().unwrap();
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].rule, "unlisted");
}

/// Keeps what the proxy says it is about to refuse, as the server's
/// egress notes do: the rule, the message and the status the client is
/// given (none over SOCKS5, which has no HTTP status).
#[derive(Default)]
struct Refusals(std::sync::Mutex<Vec<(String, String, Option<u16>)>>);

impl cordon_egress::EventSink for Refusals {
    fn record(&self, _event: EgressEvent) {}

    fn refusing(&self, e: &EgressEvent) {
        let message = e.refusal.clone().unwrap_or_default();
        self.0
            .lock()
            .unwrap()
            .push((e.rule.clone(), message, e.status));
    }
}

/// A client ends the moment it has read the proxy's answer (curl's
/// "CONNECT tunnel failed, response 403"), and the exec it ran in returns;
/// the reply may say the refusal again only if the sink heard of it
/// before the answer was written. Each way of being refused or failing,
/// for each protocol, is heard of by the time the client has the answer,
/// while the client's connection is still open (so the attempt is not
/// over and its event not yet recorded).
#[test]
fn every_refusal_is_told_to_the_sink_before_the_client_has_the_answer() {
    let http = HttpServer::start();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut cfg = base(&http);
    cfg.allow.extend(rules(&["down.test"]));
    cfg.resolve_overrides.extend(overrides(&[
        ("down.test:80", closed),
        ("down.test:443", closed),
    ]));
    cfg.https_only = false;
    let refusals = Arc::new(Refusals::default());
    let sink = refusals.clone();
    let p = Proxy::start_with(cfg, move |e| e.with_sink(sink));
    let heard = |what: &str, rule: &str, says: &str, status: Option<u16>| {
        let all = refusals.0.lock().unwrap();
        assert!(
            all.iter()
                .any(|(r, m, s)| r.starts_with(rule) && m.contains(says) && *s == status),
            "{what}: the refusal (status {status:?}) was not heard of before the answer: {all:?}"
        );
    };
    let ask = |request: &str| {
        let mut s = TcpStream::connect(p.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let (status, _, _) = read_response(&mut s);
        (status, s)
    };
    let (status, _open) = ask("GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n");
    assert_eq!(status, 403);
    heard(
        "plain HTTP, denied",
        "unlisted",
        "not in the allowlist",
        Some(403),
    );
    let (status, _open) = ask("CONNECT evil.test:443 HTTP/1.1\r\n\r\n");
    assert_eq!(status, 403);
    heard("CONNECT, denied", "unlisted", "evil.test:443", Some(403));
    let (status, _open) = ask("GET http://down.test/ HTTP/1.1\r\nHost: down.test\r\n\r\n");
    assert_eq!(status, 502);
    heard(
        "plain HTTP, failed",
        "allow:down.test",
        "could not connect",
        Some(502),
    );
    let (status, _open) = ask("CONNECT down.test:443 HTTP/1.1\r\n\r\n");
    assert_eq!(status, 502);
    heard(
        "CONNECT, failed",
        "allow:down.test",
        "down.test:443",
        Some(502),
    );
    let (reply, _open) = socks5(p.addr, 1, &socks_domain("evil.test", 8443));
    assert_eq!(reply[1], 2);
    heard("SOCKS5, denied", "unlisted", "evil.test:8443", None);
    let (reply, _open) = socks5(p.addr, 1, &socks_domain("down.test", 443));
    assert_eq!(reply[1], 5);
    assert_eq!(
        refusals.0.lock().unwrap().len(),
        6,
        "SOCKS5, failed: {:?}",
        refusals.0.lock().unwrap()
    );
    heard("SOCKS5, failed", "allow:down.test", "down.test:443", None);
}

#[test]
fn unreachable_upstream_gives_502_and_socks_refused() {
    // A port with nothing listening on it (bound, then closed).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let p = Proxy::start(EgressConfig {
        allow: rules(&["down.test"]),
        resolve_overrides: overrides(&[("down.test:80", closed), ("down.test:7000", closed)]),
        ..Default::default()
    });
    let resp = raw(p.addr, b"GET http://down.test/ HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 502, "{}", String::from_utf8_lossy(&resp));
    let resp = raw(p.addr, b"CONNECT down.test:7000 HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 502);
    assert_eq!(socks5(p.addr, 1, &socks_domain("down.test", 7000)).0[1], 5);
    let (ev, _) = p.finish();
    assert_eq!(ev.len(), 3);
    for e in &ev {
        assert_eq!(e.decision, Decision::Allow);
        assert!(
            e.rule.starts_with("allow:down.test") && e.rule.ends_with("(connect-failed)"),
            "{e:?}"
        );
        assert!(
            e.refusal
                .as_deref()
                .is_some_and(|r| r.contains("could not connect")),
            "{e:?}"
        );
    }
}

/// An allowed name that does not resolve on the host (`.invalid` never
/// does, RFC 6761) is a failure, not a denial: 502, the event stays
/// allowed with `(resolve-failed)`, and the answer says the name did not
/// resolve on the host, for HTTP, CONNECT and SOCKS5 alike. A name that
/// resolves to a private address is still denied (the SSRF guard).
#[test]
fn an_allowed_name_that_does_not_resolve_is_a_failure_not_a_denial() {
    let p = Proxy::start(EgressConfig {
        allow: rules(&["nowhere.invalid", "localhost"]),
        allow_private: false,
        ..Default::default()
    });
    let resp = raw(p.addr, b"GET http://nowhere.invalid/ HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 502, "{}", String::from_utf8_lossy(&resp));
    assert!(
        String::from_utf8_lossy(&resp).contains("could not be resolved on the host"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    let resp = raw(p.addr, b"CONNECT nowhere.invalid:443 HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 502);
    assert_eq!(
        socks5(p.addr, 1, &socks_domain("nowhere.invalid", 443)).0[1],
        4
    );
    let resp = raw(p.addr, b"GET http://localhost:9/ HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 403, "{}", String::from_utf8_lossy(&resp));
    let (ev, _) = p.finish();
    let failed: Vec<_> = ev.iter().filter(|e| e.host == "nowhere.invalid").collect();
    assert_eq!(failed.len(), 3, "{ev:#?}");
    for e in failed {
        assert_eq!(e.decision, Decision::Allow, "{e:?}");
        assert_eq!(e.rule, "allow:nowhere.invalid (resolve-failed)", "{e:?}");
        assert!(
            e.refusal
                .as_deref()
                .is_some_and(|r| r.contains("nowhere.invalid could not be resolved on the host")),
            "{e:?}"
        );
    }
    let private = one(&ev, "localhost");
    assert_eq!(private.decision, Decision::Deny, "{private:?}");
    assert!(private.rule.starts_with("private-address"), "{private:?}");
}

/// A TLS client in Python: CONNECT through the proxy, then a handshake
/// naming `sni`; prints `tls ok ...` or `tls failed ...`.
const PY_SNI: &str = r#"
import socket, ssl, sys
proxy, host, port, sni = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
s = socket.create_connection(("127.0.0.1", proxy), timeout=10)
s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    t = ctx.wrap_socket(s, server_hostname=sni if sni != "-" else None)
    t.sendall(b"GET / HTTP/1.0\r\n\r\n")
    print("tls ok", t.recv(15))
except Exception as e:
    print("tls failed", type(e).__name__)
"#;

/// Runs `openssl s_client` through the proxy; `Ok` when the handshake
/// finished, else what it printed.
fn s_client(proxy: std::net::SocketAddr, target: &str, extra: &[&str]) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(["s_client", "-proxy", &proxy.to_string(), "-connect", target])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(())
    } else {
        Err(text)
    }
}

fn py_sni(proxy: std::net::SocketAddr, host: &str, port: u16, sni: &str) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            PY_SNI,
            &proxy.port().to_string(),
            host,
            &port.to_string(),
            sni,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Ports where front ends commonly serve HTTPS besides 443.
const TLS_PORTS: [u16; 6] = [8443, 2053, 2083, 2087, 2096, 4443];

/// Domain fronting on a port other than 443: whenever a tunnel's first
/// bytes are a TLS ClientHello, its SNI must name the CONNECT host, on every
/// port; a ClientHello without SNI is refused unless `allow_missing_sni`.
/// Layer: the proxy's SNI check (`splice`); fails when it only runs on 443.
#[test]
fn sni_is_checked_on_every_port() {
    let test = "sni_is_checked_on_every_port";
    if !skip_unless(
        test,
        have("curl") && have("python3"),
        "curl and python3 are needed",
    ) {
        return;
    }
    let Some(tls) = TlsServer::start("tls.test") else {
        return skip(test, "openssl is not installed");
    };
    let map: Vec<(String, std::net::SocketAddr)> = TLS_PORTS
        .iter()
        .map(|p| (format!("tls.test:{p}"), tls.addr))
        .collect();
    let map: Vec<(&str, std::net::SocketAddr)> =
        map.iter().map(|(k, a)| (k.as_str(), *a)).collect();
    let cfg = EgressConfig {
        allow: rules(&["tls.test"]),
        resolve_overrides: overrides(&map),
        ..Default::default()
    };
    let p = Proxy::start(cfg.clone());
    for port in TLS_PORTS {
        let target = format!("tls.test:{port}");
        let err = s_client(p.addr, &target, &["-servername", "denied.test"]).unwrap_err();
        assert!(err.contains("access denied"), "{target} other SNI: {err}");
        s_client(p.addr, &target, &["-noservername"]).unwrap_err();
        s_client(p.addr, &target, &["-servername", "tls.test"]).unwrap();
        let text = py_sni(p.addr, "tls.test", port, "denied.test");
        assert!(
            text.starts_with("tls failed"),
            "{target} python other SNI: {text}"
        );
        let text = py_sni(p.addr, "tls.test", port, "tls.test");
        assert!(
            text.starts_with("tls ok b'HTTP/1.0 200"),
            "{target} python: {text}"
        );
        let (code, out, err) = curl(&["-k", "-x", &p.url(), &format!("https://{target}/")]);
        assert_eq!(code, 0, "{target} curl: {err}");
        assert!(out.contains("s_server"), "{out}");
    }
    let (ev, _) = p.finish();
    for port in TLS_PORTS {
        let rules: Vec<&str> = ev
            .iter()
            .filter(|e| e.port == port)
            .map(|e| e.rule.as_str())
            .collect();
        assert_eq!(
            rules,
            [
                "sni-mismatch denied.test",
                "sni-missing",
                "allow:tls.test",
                "sni-mismatch denied.test",
                "allow:tls.test",
                "allow:tls.test"
            ],
            "port {port}"
        );
    }

    // With allow_missing_sni a ClientHello without SNI goes on; another
    // name still does not.
    let p = Proxy::start(EgressConfig {
        allow_missing_sni: true,
        ..cfg
    });
    s_client(p.addr, "tls.test:8443", &["-noservername"]).unwrap();
    let text = py_sni(p.addr, "tls.test", 2053, "-");
    assert!(text.starts_with("tls ok"), "python without SNI: {text}");
    s_client(p.addr, "tls.test:8443", &["-servername", "denied.test"]).unwrap_err();
    let (ev, _) = p.finish();
    let rules: Vec<&str> = ev.iter().map(|e| e.rule.as_str()).collect();
    assert_eq!(
        rules,
        [
            "allow:tls.test",
            "allow:tls.test",
            "sni-mismatch denied.test"
        ]
    );
}

/// A server that speaks first (`220 ready`), then echoes.
fn banner_server() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let _ = conn.write_all(b"220 ready\r\n");
                let mut w = conn.try_clone().unwrap();
                let _ = std::io::copy(&mut conn, &mut w);
            });
        }
    });
    addr
}

/// Tunnels on other ports that do not start with TLS still work: a
/// destination that speaks first, a client that speaks first. Odd first
/// bytes that claim to be TLS are judged as TLS: an SSLv2-format
/// ClientHello has no SNI, and a TLS record that is not a handshake is not
/// a ClientHello.
#[test]
fn non_tls_tunnels_pass_and_tls_lookalikes_are_judged() {
    let echo = echo_server();
    let banner = banner_server();
    let p = Proxy::start(EgressConfig {
        allow: rules(&["tls.test", "mail.test"]),
        resolve_overrides: overrides(&[("mail.test:2525", banner), ("tls.test:8443", echo)]),
        ..Default::default()
    });
    // The destination speaks first; the client waits for it.
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"CONNECT mail.test:2525 HTTP/1.1\r\n\r\n")
        .unwrap();
    let (status, _, _) = read_response_head_only(&mut s);
    assert_eq!(status, 200);
    let mut banner_line = [0u8; 11];
    s.read_exact(&mut banner_line).unwrap();
    assert_eq!(&banner_line, b"220 ready\r\n");
    s.write_all(b"EHLO x\r\n").unwrap();
    let mut back = [0u8; 8];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"EHLO x\r\n");
    drop(s);
    // The client speaks first, not TLS.
    let out = connect_with_hello(p.addr, "tls.test:8443", b"PING plain text\r\n");
    assert_eq!(out, b"PING plain text\r\n");
    // SSLv2-format ClientHello: no SNI.
    let v2 = [
        0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10,
    ];
    let out = connect_with_hello(p.addr, "tls.test:8443", &v2);
    assert_eq!(out, [21, 3, 3, 0, 2, 2, 49], "an access_denied alert");
    // A TLS alert record first.
    let out = connect_with_hello(p.addr, "tls.test:8443", &[21, 3, 1, 0, 2, 1, 0]);
    assert_eq!(out, [21, 3, 3, 0, 2, 2, 49]);
    // A ClientHello naming another host, pipelined with the CONNECT.
    let hello = sni::build_client_hello(Some("denied.test"));
    let out = connect_with_hello(p.addr, "tls.test:8443", &hello);
    assert_eq!(out, [21, 3, 3, 0, 2, 2, 49]);
    let (ev, _) = p.finish();
    // Live tunnels end (and are logged) at shutdown: compare as sets.
    let mut rules: Vec<&str> = ev.iter().map(|e| e.rule.as_str()).collect();
    rules.sort_unstable();
    assert_eq!(
        rules,
        [
            "allow:mail.test",
            "allow:tls.test",
            "malformed: not a TLS handshake",
            "sni-mismatch denied.test",
            "sni-missing (SSLv2-format ClientHello)"
        ]
    );
}

/// A host granted while the proxy runs is reachable from the next attempt;
/// revoking the grant refuses the next attempt and cuts the tunnel the grant
/// opened (a long-lived connection does not outlive it), while a tunnel the
/// static rules allowed stays up. A deny rule beats a grant.
#[test]
fn live_grants_widen_and_revoke_cuts_open_tunnels() {
    let echo = echo_server();
    let grants = cordon_egress::LiveGrants::new();
    let g2 = grants.clone();
    let p = Proxy::start_with(
        EgressConfig {
            allow: rules(&["static.test"]),
            deny: rules(&["denied.test"]),
            resolve_overrides: overrides(&[
                ("echo.test:7000", echo),
                ("static.test:7000", echo),
                ("denied.test:7000", echo),
            ]),
            ..Default::default()
        },
        move |e| e.with_live_grants(g2),
    );
    let open = |target: &str| {
        let mut s = TcpStream::connect(p.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        let code = read_response_head_only(&mut s).0;
        (code, s)
    };
    let echoes = |s: &mut TcpStream| {
        s.write_all(b"hi").is_ok() && {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).is_ok() && &b == b"hi"
        }
    };
    assert_eq!(open("echo.test:7000").0, 403, "not granted yet");
    grants.grant(
        "g-echo",
        cordon_egress::HostRule::parse("echo.test:7000").unwrap(),
    );
    grants.grant(
        "g-deny",
        cordon_egress::HostRule::parse("denied.test").unwrap(),
    );
    assert_eq!(open("denied.test:7000").0, 403, "a deny rule beats a grant");
    let (code, mut granted) = open("echo.test:7000");
    assert_eq!(code, 200);
    assert!(echoes(&mut granted));
    let (code, mut fixed) = open("static.test:7000");
    assert_eq!(code, 200);
    assert!(echoes(&mut fixed));
    assert_eq!(grants.open_connections("g-echo"), 1);
    assert_eq!(grants.revoke("g-echo"), Some(1));
    // The granted tunnel is closed by the proxy: end-of-file, not a timeout.
    let start = Instant::now();
    let mut rest = Vec::new();
    let n = granted.read_to_end(&mut rest).unwrap_or(0);
    assert_eq!(n, 0, "nothing more arrives on the cut tunnel");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "cut, not timed out"
    );
    assert_eq!(
        open("echo.test:7000").0,
        403,
        "refused again after the revoke"
    );
    assert!(echoes(&mut fixed), "the statically allowed tunnel stays up");
    let (ev, _) = p.finish();
    assert!(
        ev.iter()
            .any(|e| e.rule == "grant:g-echo" && e.decision == Decision::Allow),
        "{ev:#?}"
    );
}
