//! Loopback benchmark of the egress proxy (see benches/egress/run.sh).
//!
//! In one run: bulk throughput through a CONNECT tunnel vs a direct TCP
//! connection, then request rate and latency of small plain-HTTP requests
//! direct, through cordon's proxy, and through a peer proxy (tinyproxy) when
//! `--peer HOST:PORT` is given. Everything stays on 127.0.0.1. Prints a
//! Markdown table.
//!
//! Options: `--bulk-mb N` (default 1024), `--requests N` per measurement
//! (default 20000), `--conns N` concurrent keep-alive clients for the rate
//! (default 4), `--peer 127.0.0.1:PORT` the peer proxy, `--peer-name NAME`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_egress::{Egress, EgressConfig, HostRule, NullSink, OverrideAddr};

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";

struct Args {
    bulk_mb: usize,
    requests: usize,
    conns: usize,
    peer: Option<SocketAddr>,
    peer_name: String,
}

fn args() -> Args {
    let mut a = Args {
        bulk_mb: 1024,
        requests: 20_000,
        conns: 4,
        peer: None,
        peer_name: "tinyproxy".into(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        match v[i].as_str() {
            "--bulk-mb" => a.bulk_mb = v[i + 1].parse().unwrap(),
            "--requests" => a.requests = v[i + 1].parse().unwrap(),
            "--conns" => a.conns = v[i + 1].parse().unwrap(),
            "--peer" => a.peer = Some(v[i + 1].parse().unwrap()),
            "--peer-name" => a.peer_name = v[i + 1].clone(),
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    a
}

/// Sends `bytes` to every connection, then closes it.
fn bulk_server(bytes: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let buf = vec![0x5a_u8; 256 * 1024];
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let buf = buf.clone();
            std::thread::spawn(move || {
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(buf.len());
                    if c.write_all(&buf[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    addr
}

/// A keep-alive HTTP/1.1 origin answering every request with "ok".
fn http_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let _ = c.set_nodelay(true);
                let mut buf = vec![0u8; 16 * 1024];
                let mut have = 0;
                loop {
                    match find_head_end(&buf[..have]) {
                        Some(end) => {
                            let close = contains_ci(&buf[..end], b"connection: close");
                            buf.copy_within(end..have, 0);
                            have -= end;
                            if c.write_all(RESPONSE).is_err() || close {
                                return;
                            }
                        }
                        None => match c.read(&mut buf[have..]) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => have += n,
                        },
                    }
                }
            });
        }
    });
    addr
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Reads one response (head + Content-Length body); returns whether the
/// server will close the connection.
fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>, have: &mut usize) -> bool {
    loop {
        if let Some(end) = find_head_end(&buf[..*have]) {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(
                head.starts_with("http/1.1 200") || head.starts_with("http/1.0 200"),
                "{head}"
            );
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            while *have < end + len {
                let n = s.read(&mut buf[*have..]).unwrap();
                assert!(n > 0, "closed mid-body");
                *have += n;
            }
            let close = head.contains("connection: close") || head.starts_with("http/1.0");
            buf.copy_within(end + len..*have, 0);
            *have -= end + len;
            return close;
        }
        let n = s.read(&mut buf[*have..]).unwrap();
        assert!(n > 0, "closed before a response");
        *have += n;
    }
}

#[derive(Clone)]
struct Route {
    connect_to: SocketAddr,
    request: Vec<u8>,
}

/// Runs `n` sequential requests on keep-alive connections (reconnecting
/// when the server asks to close); returns each request's latency.
fn run_client(route: &Route, n: usize) -> (Vec<Duration>, usize) {
    let mut lat = Vec::with_capacity(n);
    let mut conns = 1;
    let mut s = TcpStream::connect(route.connect_to).unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    let mut have = 0;
    for _ in 0..n {
        let t = Instant::now();
        s.write_all(&route.request).unwrap();
        let close = read_response(&mut s, &mut buf, &mut have);
        lat.push(t.elapsed());
        if close {
            s = TcpStream::connect(route.connect_to).unwrap();
            s.set_nodelay(true).unwrap();
            have = 0;
            conns += 1;
        }
    }
    (lat, conns)
}

struct HttpResult {
    rate: f64,
    median: Duration,
    p99: Duration,
    conns: usize,
}

fn measure_http(route: &Route, requests: usize, conns: usize) -> HttpResult {
    // Warm-up.
    run_client(route, 200);
    // Latency: one client, sequential.
    let (mut lat, _) = run_client(route, requests / 2);
    lat.sort();
    let median = lat[lat.len() / 2];
    let p99 = lat[lat.len() * 99 / 100];
    // Rate: `conns` concurrent clients.
    let per = requests / conns;
    let start = Instant::now();
    let handles: Vec<_> = (0..conns)
        .map(|_| {
            let r = route.clone();
            std::thread::spawn(move || run_client(&r, per))
        })
        .collect();
    let mut opened = 0;
    for h in handles {
        opened += h.join().unwrap().1;
    }
    let rate = (per * conns) as f64 / start.elapsed().as_secs_f64();
    HttpResult {
        rate,
        median,
        p99,
        conns: opened,
    }
}

/// Reads everything from a connection; returns bytes/second.
fn drain(mut s: TcpStream, expect: usize) -> f64 {
    let mut buf = vec![0u8; 256 * 1024];
    let start = Instant::now();
    let mut got = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => panic!("read: {e}"),
        }
    }
    assert_eq!(got, expect);
    got as f64 / start.elapsed().as_secs_f64()
}

fn bulk_direct(addr: SocketAddr, bytes: usize) -> f64 {
    drain(TcpStream::connect(addr).unwrap(), bytes)
}

fn bulk_tunnel(proxy: SocketAddr, bytes: usize) -> f64 {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.write_all(b"CONNECT bulk.test:9000 HTTP/1.1\r\nHost: bulk.test:9000\r\n\r\n")
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1);
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    drain(s, bytes)
}

fn main() {
    let a = args();
    let bulk_bytes = a.bulk_mb * 1024 * 1024;
    let bulk = bulk_server(bulk_bytes);
    let origin = http_server();

    let mut overrides = std::collections::HashMap::new();
    overrides.insert(
        "bulk.test:9000".to_string(),
        vec![OverrideAddr::Socket(bulk)],
    );
    overrides.insert(
        "bench.test:80".to_string(),
        vec![OverrideAddr::Socket(origin)],
    );
    let cfg = EgressConfig {
        sandbox_id: "bench".into(),
        allow: vec![
            HostRule::parse("bulk.test").unwrap(),
            HostRule::parse("bench.test").unwrap(),
        ],
        resolve_overrides: overrides,
        ..Default::default()
    };
    // Events go to a sink that drops them; building and redacting each
    // event is still measured.
    let proxy = Egress::new(cfg)
        .unwrap()
        .with_sink(Arc::new(NullSink))
        .spawn(TcpListener::bind("127.0.0.1:0").unwrap())
        .unwrap();
    let paddr = proxy.local_addr();

    // Bulk: alternate direct and tunnel, best of 3 each.
    let mut direct = 0.0f64;
    let mut tunnel = 0.0f64;
    for _ in 0..3 {
        direct = direct.max(bulk_direct(bulk, bulk_bytes));
        tunnel = tunnel.max(bulk_tunnel(paddr, bulk_bytes));
    }

    let direct_route = Route {
        connect_to: origin,
        request:
            b"GET /small HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
                .to_vec(),
    };
    let cordon_route = Route {
        connect_to: paddr,
        request: b"GET http://bench.test/small HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n".to_vec(),
    };
    let d = measure_http(&direct_route, a.requests, a.conns);
    let c = measure_http(&cordon_route, a.requests, a.conns);
    let peer = a.peer.map(|p| {
        let route = Route {
            connect_to: p,
            request: format!(
                "GET http://{origin}/small HTTP/1.1\r\nHost: {origin}\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
            )
            .into_bytes(),
        };
        measure_http(&route, a.requests, a.conns)
    });
    let summary = proxy.shutdown();

    let gbit = |b: f64| b * 8.0 / 1e9;
    println!("### Bulk transfer ({} MiB, best of 3)\n", a.bulk_mb);
    println!("| path | throughput | ratio to direct |");
    println!("|---|---:|---:|");
    println!("| direct TCP | {:.2} Gbit/s | 1.00x |", gbit(direct));
    println!(
        "| cordon CONNECT tunnel | {:.2} Gbit/s | {:.2}x |",
        gbit(tunnel),
        tunnel / direct
    );
    println!(
        "\n### Small plain-HTTP requests ({} requests; rate with {} keep-alive clients, latency with 1)\n",
        a.requests, a.conns
    );
    println!("| path | requests/s | median latency | added median latency | p99 latency | client connections opened |");
    println!("|---|---:|---:|---:|---:|---:|");
    let row = |name: &str, r: &HttpResult| {
        let added = r.median.as_secs_f64() - d.median.as_secs_f64();
        println!(
            "| {name} | {:.0} | {:.1} µs | {} | {:.1} µs | {} |",
            r.rate,
            r.median.as_secs_f64() * 1e6,
            if name == "direct" {
                "–".to_string()
            } else {
                format!("{:.1} µs", added * 1e6)
            },
            r.p99.as_secs_f64() * 1e6,
            r.conns
        );
    };
    row("direct", &d);
    row("cordon", &c);
    if let Some(p) = &peer {
        row(&a.peer_name, p);
        println!(
            "\ncordon / {} request rate: {:.2}x",
            a.peer_name,
            c.rate / p.rate
        );
    }
    println!(
        "\ncordon proxy totals: {} connections, {} events",
        summary.connections, summary.events
    );
}
