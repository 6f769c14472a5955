//! HTTP/1.0 clients through the proxy, by RFC 9112 section 9.3: the
//! connection stays open only when both sides say keep-alive, and a
//! response to an HTTP/1.0 keep-alive request says `Connection: keep-alive`
//! when the proxy keeps it open. Every client runs against the same origin
//! directly too, in the same test, so a difference is the proxy's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use cordon_egress::EgressConfig;

/// An origin that follows RFC 9112 section 9.3 itself: keep-alive for
/// HTTP/1.1 unless `close`, for HTTP/1.0 only with `keep-alive` (and then
/// it says so). `/chunked` is chunked for HTTP/1.1 requests and delimited
/// by the close for HTTP/1.0 ones; anything else is `hello\n`.
fn origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || {
                let _ = serve(conn);
            });
        }
    });
    addr
}

fn serve(conn: TcpStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let http10 = line.trim_end().ends_with("HTTP/1.0");
        let target = line.split(' ').nth(1).unwrap_or("").to_string();
        let head = line.starts_with("HEAD ");
        let mut tokens = Vec::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                if n.eq_ignore_ascii_case("connection") {
                    tokens.extend(v.split(',').map(|t| t.trim().to_ascii_lowercase()));
                }
            }
        }
        let keep = if http10 {
            tokens.iter().any(|t| t == "keep-alive")
        } else {
            !tokens.iter().any(|t| t == "close")
        };
        let conn_hdr = match (keep, http10) {
            (false, _) => "Connection: close\r\n",
            (true, true) => "Connection: keep-alive\r\n",
            (true, false) => "",
        };
        if target.ends_with("/chunked") && !http10 {
            write!(
                w,
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{conn_hdr}\r\n6\r\nhello \r\n6\r\nworld\n\r\n0\r\n\r\n"
            )?;
        } else if target.ends_with("/chunked") {
            write!(
                w,
                "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello world\n"
            )?;
            return Ok(());
        } else {
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n{conn_hdr}\r\n"
            )?;
            if !head {
                w.write_all(b"hello\n")?;
            }
        }
        w.flush()?;
        if !keep {
            return Ok(());
        }
    }
}

/// Runs a client with a time bound (a hung keep-alive shows as the bound).
fn run(cmd: &str, args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new("timeout")
        .arg("30")
        .arg(cmd)
        .args(args)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("no_proxy")
        .env_remove("NO_PROXY")
        .output()
        .unwrap();
    (out, start.elapsed())
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// What `ab` reports: complete, failed and keep-alive requests.
fn ab_counts(o: &Output) -> (u32, u32, u32) {
    let t = text(o);
    // A line ab leaves out counts 0 (it prints keep-alive requests only
    // with -k); a line it prints but that does not parse cannot match.
    let num = |key: &str| match t.lines().find(|l| l.starts_with(key)) {
        None => 0,
        Some(l) => l
            .split(':')
            .nth(1)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(u32::MAX),
    };
    (
        num("Complete requests"),
        num("Failed requests"),
        num("Keep-Alive requests"),
    )
}

const N: u32 = 50;

#[test]
fn http10_clients_through_the_proxy_behave_as_directly() {
    let test = "http10_clients_through_the_proxy_behave_as_directly";
    let tools = ["ab", "curl", "wget", "python3", "timeout"];
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !have(t)).collect();
    if !skip_unless(
        test,
        missing.is_empty(),
        &format!("missing {missing:?} (Debian: apache2-utils, curl, wget, python3, coreutils)"),
    ) {
        return;
    }
    let web = origin();
    let p = Proxy::start(EgressConfig {
        allow: rules(&["web.test"]),
        resolve_overrides: overrides(&[("web.test", web)]),
        ..Default::default()
    });
    let proxy = p.addr.to_string();
    let via = format!("http://web.test:{}/", web.port());
    let direct = format!("http://{web}/");
    let n = N.to_string();

    // ApacheBench, an HTTP/1.0 client, without and with keep-alive.
    for keep in [false, true] {
        let mut base = vec!["-n", &n, "-c", "4", "-s", "10"];
        if keep {
            base.push("-k");
        }
        let mut a = base.clone();
        a.push(&direct);
        let (d, _) = run("ab", &a);
        let mut a = base.clone();
        a.extend(["-X", &proxy, &via]);
        let (v, took) = run("ab", &a);
        let want = (N, 0, if keep { N } else { 0 });
        assert_eq!(ab_counts(&d), want, "ab direct keep={keep}: {}", text(&d));
        assert_eq!(
            ab_counts(&v),
            want,
            "ab via proxy keep={keep} ({took:?}): {}",
            text(&v)
        );
    }

    // curl -0: HTTP/1.0, also a chunked origin answer (HTTP/1.0 has no
    // chunked framing) and two URLs on one command line.
    for url in [&direct, &format!("{direct}chunked")] {
        let (d, _) = run("curl", &["-sS", "-0", url]);
        let via_url = url.replace(&direct, &via);
        let (v, _) = run("curl", &["-sS", "-0", "-x", &proxy, &via_url]);
        assert!(d.status.success(), "{}", text(&d));
        assert_eq!(text(&v), text(&d), "curl -0 {url}");
    }
    let (v, _) = run(
        "curl",
        &[
            "-sS",
            "-0",
            "-H",
            "Connection: keep-alive",
            "-w",
            "%{num_connects}\n",
            "-x",
            &proxy,
            &via,
            &via,
        ],
    );
    assert_eq!(
        text(&v),
        "hello\n1\nhello\n0\n",
        "curl -0 keep-alive reuses the connection"
    );

    // wget.
    let (d, _) = run("wget", &["-q", "-O", "-", &direct]);
    let (v, _) = run(
        "wget",
        &[
            "-q",
            "-O",
            "-",
            "-e",
            "use_proxy=yes",
            "-e",
            &format!("http_proxy=http://{proxy}"),
            &via,
        ],
    );
    assert_eq!(text(&d), "hello\n");
    assert_eq!(text(&v), text(&d), "wget");

    // Python http.client speaking HTTP/1.0, three requests on one
    // connection object (it reconnects when the server closes).
    let py = r#"
import http.client, sys
host, port, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
class C(http.client.HTTPConnection):
    _http_vsn = 10
    _http_vsn_str = "HTTP/1.0"
for keep in (False, True):
    c = C(host, port, timeout=10)
    for path in ("", "chunked", ""):
        h = {"Connection": "keep-alive"} if keep else {}
        c.request("GET", url + path, headers=h)
        r = c.getresponse()
        print(r.status, r.getheader("Connection"), r.read().decode().strip())
"#;
    let (d, _) = run(
        "python3",
        &["-c", py, "127.0.0.1", &web.port().to_string(), "/"],
    );
    let (v, _) = run(
        "python3",
        &["-c", py, "127.0.0.1", &p.addr.port().to_string(), &via],
    );
    assert!(d.status.success(), "{}", text(&d));
    assert_eq!(text(&v), text(&d), "python http.client");

    // Raw HTTP/1.0: without keep-alive the proxy closes after the answer;
    // with it, the answer says so and a second request follows on the
    // same connection.
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {via} HTTP/1.0\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    assert!(all.ends_with("\r\n\r\nhello\n"), "{all}");
    assert!(all.contains("Connection: close\r\n"), "{all}");
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for _ in 0..2 {
        write!(s, "GET {via} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
        let (status, head, body) = read_response(&mut s);
        assert_eq!(status, 200, "{head}");
        assert!(head.contains("Connection: keep-alive\r\n"), "{head}");
        assert_eq!(body, b"hello\n");
    }
    let (ev, _) = p.finish();
    assert!(ev.iter().all(|e| e.status == Some(200)), "{ev:#?}");
}
