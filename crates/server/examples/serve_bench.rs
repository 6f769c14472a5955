//! Timings of a running `cordon serve` over its unix socket, with
//! keep-alive connections, against baselines measured in the same run.
//! `benches/serve/run.sh` starts the server and calls this.
//!
//!     serve_bench SOCKET [--runs N] [--idle N] [--clients N] [--per-client N]
//!
//! Prints one JSON object per measurement. A hand-written HTTP/1.1 client
//! (fixed-length bodies only; what the server sends): the point is a
//! client that adds next to nothing to what is measured.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Conn {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Conn {
    fn open(socket: &Path) -> Conn {
        let s = UnixStream::connect(socket)
            .unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
        Conn {
            writer: s.try_clone().unwrap(),
            reader: BufReader::new(s),
        }
    }

    /// One request; the status and the body.
    fn call(&mut self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: cordon\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        self.writer.write_all(head.as_bytes()).unwrap();
        self.writer.write_all(body.as_bytes()).unwrap();
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).unwrap();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        let mut out = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size).unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                let mut chunk = vec![0u8; n + 2];
                self.reader.read_exact(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..n]);
            }
        } else {
            out.resize(length, 0);
            self.reader.read_exact(&mut out).unwrap();
        }
        (status, String::from_utf8_lossy(&out).into_owned())
    }

    fn json(&mut self, method: &str, path: &str, body: Option<&Value>, want: u16) -> Value {
        let (status, text) = self.call(method, path, body);
        assert_eq!(status, want, "{method} {path}: {text}");
        if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        }
    }
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

fn report(name: &str, samples: &mut [f64], extra: Value) {
    let median = quantile(samples, 0.5);
    let p99 = quantile(samples, 0.99);
    let mut v = json!({"measure": name, "runs": samples.len(), "median_ms": round(median), "p99_ms": round(p99)});
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    println!("{v}");
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The pause before each paced run: an agent's next command comes after
/// it has read the last one's result, not back to back.
const PACE: Duration = Duration::from_millis(5);

fn time_command(program: &str, args: &[&str], runs: usize) -> Vec<f64> {
    time_command_paced(program, args, runs, None)
}

fn time_command_paced(
    program: &str,
    args: &[&str],
    runs: usize,
    pause: Option<Duration>,
) -> Vec<f64> {
    (0..runs)
        .map(|_| {
            if let Some(p) = pause {
                std::thread::sleep(p);
            }
            let t = Instant::now();
            let status = Command::new(program).args(args).status().unwrap();
            assert!(status.success(), "{program} failed");
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect()
}

fn pool(conn: &mut Conn) -> Value {
    conn.json("GET", "/v1/health", None, 200)["pool"].clone()
}

fn wait_ready(conn: &mut Conn, at_least: u64) {
    let t = Instant::now();
    while pool(conn)["ready"].as_u64().unwrap_or(0) < at_least
        && t.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until the pool holds its target, so that no build competes with
/// what is measured next.
fn wait_full(conn: &mut Conn) {
    let t = Instant::now();
    loop {
        let p = pool(conn);
        let (ready, target) = (
            p["ready"].as_u64().unwrap_or(0),
            p["target"].as_u64().unwrap_or(0),
        );
        if ready >= target || t.elapsed() > Duration::from_secs(120) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How much a pool counter grew between two readings.
fn grew(before: &Value, after: &Value, key: &str) -> u64 {
    after[key]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(before[key].as_u64().unwrap_or(0))
}

/// `runs` warm cycles, each after `wait`, reported as `name` against
/// bwrap's median.
fn warm_cycles(
    conn: &mut Conn,
    runs: usize,
    bwrap_median: f64,
    name: &str,
    wait: impl Fn(&mut Conn),
) {
    let before = pool(conn);
    let mut warm = Vec::new();
    let mut steps: [Vec<f64>; 3] = Default::default();
    for _ in 0..runs {
        wait(conn);
        let (all, each) = cycle(conn);
        warm.push(all);
        for (v, ms) in steps.iter_mut().zip(each) {
            v.push(ms);
        }
    }
    let after = pool(conn);
    let median = quantile(&mut warm, 0.5);
    let [create, exec, delete] = steps.map(|mut v| round(quantile(&mut v, 0.5)));
    report(
        name,
        &mut warm,
        json!({"x_bwrap_median": round(median / bwrap_median),
               "create_median_ms": create, "exec_median_ms": exec, "delete_median_ms": delete,
               "pool_hits": grew(&before, &after, "hits"),
               "pool_misses": grew(&before, &after, "misses")}),
    );
}

/// Create + exec `/bin/true` + delete: the whole cycle's milliseconds, and
/// each step's.
fn cycle(conn: &mut Conn) -> (f64, [f64; 3]) {
    let t = Instant::now();
    let id = conn.json("POST", "/v1/sandboxes", Some(&json!({})), 201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let created = t.elapsed();
    let r = conn.json(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(&json!({"argv": ["/bin/true"]})),
        200,
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let executed = t.elapsed();
    conn.json("DELETE", &format!("/v1/sandboxes/{id}"), None, 204);
    let all = t.elapsed();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(all),
        [ms(created), ms(executed - created), ms(all - executed)],
    )
}

fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let socket = PathBuf::from(args.get(1).expect("usage: serve_bench SOCKET [--runs N] [--idle N] [--clients N] [--per-client N] [--server-pid PID]"));
    let flag = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let runs = flag("--runs", 300);
    let idle = flag("--idle", 1000);
    let clients = flag("--clients", 100);
    let per_client = flag("--per-client", 5);
    let server_pid = flag("--server-pid", 0) as u32;

    // Baselines, in this run, once the server's pool is built (its
    // builds would otherwise slow the baselines down).
    wait_full(&mut Conn::open(&socket));
    report(
        "bare exec /bin/true",
        &mut time_command("/bin/true", &[], runs),
        json!({}),
    );
    let bwrap = [
        "--unshare-all",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--die-with-parent",
        "/bin/true",
    ];
    let mut bw = time_command("bwrap", &bwrap, runs);
    let bwrap_median = quantile(&mut bw, 0.5);
    report("bwrap --unshare-all /bin/true", &mut bw, json!({}));

    let mut conn = Conn::open(&socket);
    // Warm pool: create + exec /bin/true + delete, the pool full before
    // each cycle (the claim rate under the refill rate: no build competes
    // with the cycle), then at the refill rate (each cycle starts once one
    // sandbox is ready, so the build of the next runs beside it).
    warm_cycles(
        &mut conn,
        runs,
        bwrap_median,
        "warm pool: create + exec /bin/true + delete",
        wait_full,
    );
    warm_cycles(
        &mut conn,
        runs,
        bwrap_median,
        "warm pool at its refill rate: create + exec /bin/true + delete",
        |conn| wait_ready(conn, 1),
    );

    // Exec in an existing session, and a code-context cell.
    let id = conn.json("POST", "/v1/sandboxes", Some(&json!({})), 201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let exec_path = format!("/v1/sandboxes/{id}/exec");
    let mut exec_one = |pause: Option<Duration>| {
        if let Some(p) = pause {
            std::thread::sleep(p);
        }
        let t = Instant::now();
        conn.json(
            "POST",
            &exec_path,
            Some(&json!({"argv": ["/bin/true"]})),
            200,
        );
        t.elapsed().as_secs_f64() * 1000.0
    };
    let mut exec: Vec<f64> = (0..runs).map(|_| exec_one(None)).collect();
    let mut paced: Vec<f64> = (0..runs).map(|_| exec_one(Some(PACE))).collect();
    report(
        "exec /bin/true in an existing session",
        &mut exec,
        json!({}),
    );
    // The same with a pause before each, and bare exec paced the same way
    // (an idle core is slower to wake, for both).
    let mut bare_paced = time_command_paced("/bin/true", &[], runs, Some(PACE));
    report(
        "bare exec /bin/true, 5 ms apart",
        &mut bare_paced,
        json!({}),
    );
    report(
        "exec /bin/true in an existing session, 5 ms apart",
        &mut paced,
        json!({}),
    );
    let ctx = conn.json(
        "POST",
        &format!("/v1/sandboxes/{id}/contexts"),
        Some(&json!({"language": "python"})),
        201,
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run_path = format!("/v1/sandboxes/{id}/contexts/{ctx}/run");
    conn.json("POST", &run_path, Some(&json!({"code": "0"})), 200);
    let mut cell = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let r = conn.json("POST", &run_path, Some(&json!({"code": "1+1"})), 200);
        assert_eq!(r["value"], "2", "{r}");
        cell.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    report("code-context cell 1+1", &mut cell, json!({}));
    conn.json("DELETE", &format!("/v1/sandboxes/{id}"), None, 204);

    // Many clients at once: create + exec + delete each, the pool (sized
    // for the burst) full first. Every client connects, then all start
    // together: without the barrier the first clients' cycles ran while
    // the last threads were still being started, and the burst's p99
    // depended on how far those starts overlapped.
    wait_full(&mut conn);
    let before = pool(&mut conn);
    let go = std::sync::Arc::new(std::sync::Barrier::new(clients + 1));
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            let socket = socket.clone();
            let go = go.clone();
            std::thread::spawn(move || {
                // A client that cannot connect still meets the others at
                // the barrier (or they would wait for it forever), then
                // counts its cycles as errors.
                let conn = std::panic::catch_unwind(|| Conn::open(&socket)).ok();
                go.wait();
                let began = Instant::now();
                let Some(mut c) = conn else {
                    return (vec![None; per_client], began, began);
                };
                let results = (0..per_client)
                    .map(|_| {
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cycle(&mut c)))
                            .ok()
                    })
                    .collect::<Vec<_>>();
                (results, began, Instant::now())
            })
        })
        .collect();
    go.wait();
    // The burst's span: from the first client's start to the last one's
    // end (the threads measure it, not this one, which may wait for a CPU
    // behind them).
    let mut span: Option<(Instant, Instant)> = None;
    let mut all = Vec::new();
    let mut burst_steps: [Vec<f64>; 3] = Default::default();
    let mut errors = 0;
    for h in handles {
        let Ok((results, began, ended)) = h.join() else {
            errors += per_client;
            continue;
        };
        span = Some(span.map_or((began, ended), |(b, e)| (b.min(began), e.max(ended))));
        for r in results {
            match r {
                Some((ms, each)) => {
                    all.push(ms);
                    for (v, ms) in burst_steps.iter_mut().zip(each) {
                        v.push(ms);
                    }
                }
                None => errors += 1,
            }
        }
    }
    let [create, exec, delete] = burst_steps.map(|mut v| {
        if v.is_empty() {
            0.0
        } else {
            round(quantile(&mut v, 0.5))
        }
    });
    let wall = span.map_or(0.0, |(b, e)| e.duration_since(b).as_secs_f64());
    let after = pool(&mut conn);
    let hits = grew(&before, &after, "hits");
    let misses = grew(&before, &after, "misses");
    let done = all.len();
    report(
        &format!("{clients} clients at once: create + exec + delete"),
        &mut all,
        json!({"errors": errors, "cycles_per_s": round(done as f64 / wall.max(1e-9)),
               "create_median_ms": create, "exec_median_ms": exec, "delete_median_ms": delete,
               "pool_hit_ratio": round(hits as f64 / (hits + misses).max(1) as f64)}),
    );

    // Idle sessions: host memory per session.
    if idle > 0 {
        let before = mem_available_kib();
        let ids: Vec<String> = (0..idle)
            .map(|_| {
                conn.json("POST", "/v1/sandboxes", Some(&json!({})), 201)["id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        std::thread::sleep(Duration::from_secs(3));
        let after = mem_available_kib();
        println!(
            "{}",
            json!({"measure": format!("{idle} idle sessions"),
                   "host_mib_per_session": round(before.saturating_sub(after) as f64 / 1024.0 / idle as f64),
                   "server_rss_mib": round(rss_kib(server_pid) as f64 / 1024.0)})
        );
        for id in ids {
            conn.json("DELETE", &format!("/v1/sandboxes/{id}"), None, 204);
        }
    }
}
