//! Loopback benchmark of the egress proxy (see benches/egress/run.sh).
//!
//! In one run: bulk throughput through a CONNECT tunnel vs a direct TCP
//! connection, downloads and uploads (an upload on a tunnel that starts in
//! plaintext passes the proxy's watch for a late ClientHello), then request rate and latency of small plain-HTTP requests
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
    skip_http: bool,
    threads: usize,
}

fn args() -> Args {
    let mut a = Args {
        bulk_mb: 1024,
        requests: 20_000,
        conns: 4,
        peer: None,
        peer_name: "tinyproxy".into(),
        skip_http: false,
        threads: 1,
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
            "--skip-http" => a.skip_http = v[i + 1] == "1",
            "--proxy-threads" => a.threads = v[i + 1].parse().unwrap(),
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    a
}

/// A loopback listener that runs `serve` on a thread of its own for every
/// connection it accepts.
fn server(serve: impl Fn(TcpStream) + Send + Sync + Clone + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let serve = serve.clone();
            std::thread::spawn(move || serve(c));
        }
    });
    addr
}

/// Sends `bytes` to every connection, then closes it.
fn bulk_server(bytes: usize) -> SocketAddr {
    let buf = std::sync::Arc::new(vec![0x5a_u8; 256 * 1024]);
    server(move |mut c| {
        let mut left = bytes;
        while left > 0 {
            let n = left.min(buf.len());
            if c.write_all(&buf[..n]).is_err() {
                return;
            }
            left -= n;
        }
    })
}

/// Reads `bytes` from every connection, then answers one byte.
fn sink_server(bytes: usize) -> SocketAddr {
    server(move |mut c| {
        let mut buf = vec![0u8; 256 * 1024];
        let mut left = bytes;
        while left > 0 {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
        let _ = c.write_all(b"k");
    })
}

/// Sends `bytes` of pseudo-random data (as compressed or encrypted
/// traffic is: the byte that starts a TLS record comes once in 256), waits
/// for the sink's answer; returns bytes/second.
fn upload(mut s: TcpStream, bytes: usize) -> f64 {
    let mut chunk = vec![0u8; 256 * 1024];
    fastrand::Rng::with_seed(1).fill(&mut chunk);
    let start = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    let mut k = [0u8; 1];
    s.read_exact(&mut k).unwrap();
    bytes as f64 / start.elapsed().as_secs_f64()
}

/// A keep-alive HTTP/1.1 origin answering every request with "ok".
fn http_server() -> SocketAddr {
    server(|mut c| {
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
    })
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Reads one response (head + Content-Length body). `None` when the server
/// closed before sending a byte (a keep-alive connection it did not keep);
/// otherwise whether the server will close the connection.
fn read_response(s: &mut TcpStream, buf: &mut [u8], have: &mut usize) -> Option<bool> {
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
            return Some(close);
        }
        let n = s.read(&mut buf[*have..]).unwrap_or(0);
        if n == 0 {
            assert_eq!(*have, 0, "closed mid-head");
            return None;
        }
        *have += n;
    }
}

#[derive(Clone)]
struct Route {
    connect_to: SocketAddr,
    /// `Host`/target part of the request: `GET {target} HTTP/1.1`.
    target: String,
    host: String,
}

impl Route {
    fn request(&self, close: bool) -> Vec<u8> {
        format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bench\r\nAccept: */*\r\n{}\r\n",
            self.target,
            self.host,
            if close { "Connection: close\r\n" } else { "" }
        )
        .into_bytes()
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Runs `n` sequential requests and returns each one's latency and how many
/// connections were opened. `close_each`: a new connection per request
/// (`Connection: close`); otherwise keep-alive, reconnecting (and counting
/// the retry in the latency) whenever the server does not keep it.
fn run_client(route: &Route, n: usize, close_each: bool) -> (Vec<Duration>, usize) {
    let request = route.request(close_each);
    let mut lat = Vec::with_capacity(n);
    let mut conns = 0;
    let mut s: Option<TcpStream> = None;
    let mut buf = vec![0u8; 16 * 1024];
    let mut have = 0;
    for _ in 0..n {
        let t = Instant::now();
        loop {
            let conn = s.get_or_insert_with(|| {
                conns += 1;
                have = 0;
                connect(route.connect_to)
            });
            let sent = conn.write_all(&request).is_ok();
            match sent
                .then(|| read_response(conn, &mut buf, &mut have))
                .flatten()
            {
                Some(close) => {
                    if close {
                        s = None;
                    }
                    break;
                }
                None => s = None,
            }
        }
        lat.push(t.elapsed());
    }
    (lat, conns)
}

struct HttpResult {
    rate: f64,
    median: Duration,
    p99: Duration,
    conns: usize,
}

fn measure_http(route: &Route, requests: usize, conns: usize, close_each: bool) -> HttpResult {
    // Warm-up.
    run_client(route, 200, close_each);
    // Latency: one client, sequential.
    let (mut lat, _) = run_client(route, requests / 2, close_each);
    lat.sort();
    let median = lat[lat.len() / 2];
    let p99 = lat[lat.len() * 99 / 100];
    // Rate: `conns` concurrent clients.
    let per = requests / conns;
    let start = Instant::now();
    let handles: Vec<_> = (0..conns)
        .map(|_| {
            let r = route.clone();
            std::thread::spawn(move || run_client(&r, per, close_each))
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

/// CPU time (user + system) of this whole process so far, all threads.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the state.
    let ticks = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
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
    drain(tunnel(proxy, "bulk.test:9000"), bytes)
}

fn upload_tunnel(proxy: SocketAddr, bytes: usize) -> f64 {
    upload(tunnel(proxy, "sink.test:9001"), bytes)
}

/// A CONNECT tunnel to `target` through the proxy, its 200 read.
fn tunnel(proxy: SocketAddr, target: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
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
    s
}

fn main() {
    let a = args();
    let bulk_bytes = a.bulk_mb * 1024 * 1024;
    let bulk = bulk_server(bulk_bytes);
    let sink = sink_server(bulk_bytes);
    let origin = http_server();

    let mut overrides = std::collections::HashMap::new();
    overrides.insert(
        "bulk.test:9000".to_string(),
        vec![OverrideAddr::Socket(bulk)],
    );
    overrides.insert(
        "sink.test:9001".to_string(),
        vec![OverrideAddr::Socket(sink)],
    );
    overrides.insert(
        "bench.test:80".to_string(),
        vec![OverrideAddr::Socket(origin)],
    );
    let cfg = EgressConfig {
        sandbox_id: "bench".into(),
        allow: vec![
            HostRule::parse("bulk.test").unwrap(),
            HostRule::parse("sink.test").unwrap(),
            HostRule::parse("bench.test").unwrap(),
        ],
        resolve_overrides: overrides,
        ..Default::default()
    };
    // Events go to a sink that drops them; building and redacting each
    // event is still measured.
    // A second proxy relays tunnels by copying through user space
    // (CORDON_EGRESS_NO_SPLICE), for comparison.
    std::env::set_var("CORDON_EGRESS_NO_SPLICE", "1");
    let copy_proxy = Egress::new(cfg.clone())
        .unwrap()
        .with_sink(Arc::new(NullSink))
        .spawn(TcpListener::bind("127.0.0.1:0").unwrap())
        .unwrap();
    std::env::remove_var("CORDON_EGRESS_NO_SPLICE");
    let proxy = Egress::new(cfg)
        .unwrap()
        .with_threads(a.threads)
        .with_sink(Arc::new(NullSink))
        .spawn(TcpListener::bind("127.0.0.1:0").unwrap())
        .unwrap();
    let paddr = proxy.local_addr();

    // Bulk: alternate direct and tunnel, best of 3 each.
    let mut direct = 0.0f64;
    let mut tunnel = 0.0f64;
    let mut copied = 0.0f64;
    let (mut direct_cpu, mut tunnel_cpu, mut copy_cpu) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for _ in 0..3 {
        let c0 = cpu_time();
        direct = direct.max(bulk_direct(bulk, bulk_bytes));
        let c1 = cpu_time();
        copied = copied.max(bulk_tunnel(copy_proxy.local_addr(), bulk_bytes));
        let c2 = cpu_time();
        tunnel = tunnel.max(bulk_tunnel(paddr, bulk_bytes));
        let c3 = cpu_time();
        direct_cpu += c1 - c0;
        copy_cpu += c2 - c1;
        tunnel_cpu += c3 - c2;
    }
    // Uploads: the tunnel starts in plaintext, so every byte the client
    // sends passes the watch for a late ClientHello.
    let (mut up_direct, mut up_tunnel) = (0.0f64, 0.0f64);
    let (mut up_direct_cpu, mut up_tunnel_cpu) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..3 {
        let c0 = cpu_time();
        up_direct = up_direct.max(upload(TcpStream::connect(sink).unwrap(), bulk_bytes));
        let c1 = cpu_time();
        up_tunnel = up_tunnel.max(upload_tunnel(paddr, bulk_bytes));
        let c2 = cpu_time();
        up_direct_cpu += c1 - c0;
        up_tunnel_cpu += c2 - c1;
    }
    copy_proxy.shutdown();
    let gib = 3.0 * bulk_bytes as f64 / (1u64 << 30) as f64;
    let per_gib = |d: Duration| d.as_secs_f64() / gib * 1e3;

    let direct_route = Route {
        connect_to: origin,
        target: "/small".into(),
        host: "bench.test".into(),
    };
    let cordon_route = Route {
        connect_to: paddr,
        target: "http://bench.test/small".into(),
        host: "bench.test".into(),
    };
    let peer_route = a.peer.map(|p| Route {
        connect_to: p,
        target: format!("http://{origin}/small"),
        host: origin.to_string(),
    });
    let mut tables = Vec::new();
    for close_each in [false, true] {
        if a.skip_http {
            break;
        }
        let d = measure_http(&direct_route, a.requests, a.conns, close_each);
        let c = measure_http(&cordon_route, a.requests, a.conns, close_each);
        let p = peer_route
            .as_ref()
            .map(|r| measure_http(r, a.requests, a.conns, close_each));
        tables.push((close_each, d, c, p));
    }
    let summary = proxy.shutdown();

    let gbit = |b: f64| b * 8.0 / 1e9;
    println!("### Bulk transfer ({} MiB, best of 3)\n", a.bulk_mb);
    println!("| path | throughput | ratio to direct | CPU time per GiB (all threads: sender, receiver, proxy) |");
    println!("|---|---:|---:|---:|");
    println!(
        "| direct TCP | {:.2} Gbit/s | 1.00x | {:.0} ms |",
        gbit(direct),
        per_gib(direct_cpu)
    );
    println!(
        "| cordon CONNECT tunnel (splice, default) | {:.2} Gbit/s | {:.2}x | {:.0} ms |",
        gbit(tunnel),
        tunnel / direct,
        per_gib(tunnel_cpu)
    );
    println!(
        "| cordon CONNECT tunnel (user-space copy, 64/256 KiB buffers) | {:.2} Gbit/s | {:.2}x | {:.0} ms |",
        gbit(copied),
        copied / direct,
        per_gib(copy_cpu)
    );
    println!(
        "| upload, direct TCP | {:.2} Gbit/s | 1.00x | {:.0} ms |",
        gbit(up_direct),
        per_gib(up_direct_cpu)
    );
    println!(
        "| upload, cordon CONNECT tunnel (plaintext start: the client's bytes watched in user space) | {:.2} Gbit/s | {:.2}x | {:.0} ms |",
        gbit(up_tunnel),
        up_tunnel / up_direct,
        per_gib(up_tunnel_cpu)
    );
    for (close_each, d, c, p) in &tables {
        println!(
            "\n### Small plain-HTTP requests, {} ({} requests; rate with {} concurrent clients, latency with 1)\n",
            if *close_each {
                "a new connection per request"
            } else {
                "keep-alive clients"
            },
            a.requests,
            a.conns
        );
        println!("| path | requests/s | median latency | added median latency | p99 latency | connections opened (rate run) |");
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
        row("direct", d);
        row("cordon", c);
        if let Some(p) = p {
            row(&a.peer_name, p);
            println!(
                "\ncordon / {}: request rate {:.2}x",
                a.peer_name,
                c.rate / p.rate
            );
        }
    }
    println!(
        "\ncordon proxy totals: {} connections, {} events",
        summary.connections, summary.events
    );
}
