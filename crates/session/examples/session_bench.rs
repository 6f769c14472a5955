//! Engine-level timings (no HTTP): a session claimed from the pool, one
//! exec of /bin/true, deleted; an exec in a live session; bare exec.
//!
//!     cargo run --release -p cordon-session --example session_bench -- 300

use std::time::{Duration, Instant};

use cordon_session::{
    CreateSession, EndCause, Engine, EngineConfig, ExecRequest, PoolConfig, Spawner,
};

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

fn report(name: &str, v: &mut [Duration]) {
    println!(
        "{name:<40} median {:>7.3} ms  p99 {:>7.3} ms  (n={})",
        pct(v, 0.5),
        pct(v, 0.99),
        v.len()
    );
}

/// `MemAvailable` from /proc/meminfo, KiB.
fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Busy CPU time of the whole machine so far (every process, the
/// kernel's workers too), from /proc/stat, in milliseconds.
fn machine_busy_ms() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle,
    // iowait and steal; USER_HZ is 100 on Linux.
    let busy: u64 = ticks
        .iter()
        .take(7)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    busy as f64 * 10.0
}

fn report_cpu(name: &str, busy_ms: f64, n: usize) {
    println!(
        "{name:<40} {:>7.3} ms of CPU each (whole machine, /proc/stat)",
        busy_ms / n as f64
    );
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let idle: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let spawner = Spawner::fork().unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        let base = cordon_jail::Spec::new(Vec::new(), "/tmp".into());
        let engine = Engine::new(
            spawner,
            EngineConfig {
                pools: vec![PoolConfig { base: base.clone(), size: 4, auto: false }],
                ..EngineConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let req = |argv: &[&str]| ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ..ExecRequest::default()
        };
        let bare_busy = machine_busy_ms();
        let mut bare = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let _ = std::process::Command::new("/bin/true").status();
            bare.push(t.elapsed());
        }
        let bare_busy = machine_busy_ms() - bare_busy;
        report("bare exec /bin/true", &mut bare);
        report_cpu("  CPU per exec", bare_busy, n);

        let cycle_busy = machine_busy_ms();
        let mut cycle = Vec::new();
        let (mut c_create, mut c_exec, mut c_delete) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..n {
            // Let the pool refill between claims (claim rate under refill rate).
            while engine.pool_stats().ready < 1 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let t = Instant::now();
            let sb = engine
                .create(CreateSession { spec: base.clone(), idle_timeout: None, ttl: None, owner: String::new() })
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let t1 = Instant::now();
            let p = sb.exec(req(&["/bin/true"])).await.unwrap_or_else(|e| panic!("{e}"));
            p.wait().await;
            let t2 = Instant::now();
            engine.destroy(sb.id(), EndCause::Deleted).await.unwrap_or_else(|e| panic!("{e}"));
            cycle.push(t.elapsed());
            c_create.push(t1 - t);
            c_exec.push(t2 - t1);
            c_delete.push(t2.elapsed());
        }
        let cycle_busy = machine_busy_ms() - cycle_busy;
        report("pooled create + exec true + delete", &mut cycle);
        report_cpu("  CPU per cycle, the pool's refill too", cycle_busy, n);
        report("  of which create (claim)", &mut c_create);
        report("  of which exec", &mut c_exec);
        report("  of which delete", &mut c_delete);
        println!("pool: {:?}", engine.pool_stats());

        let sb = engine
            .create(CreateSession { spec: base.clone(), idle_timeout: None, ttl: None, owner: String::new() })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let exec_busy = machine_busy_ms();
        let mut exec = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let p = sb.exec(req(&["/bin/true"])).await.unwrap_or_else(|e| panic!("{e}"));
            p.wait().await;
            exec.push(t.elapsed());
        }
        let exec_busy = machine_busy_ms() - exec_busy;
        report("exec /bin/true in a live session", &mut exec);
        report_cpu("  CPU per exec", exec_busy, n);
        // The same with a pause before each: the next exec's pair is
        // ready when its order comes, as between an agent's calls.
        let mut paused = Vec::new();
        for _ in 0..n {
            tokio::time::sleep(Duration::from_millis(3)).await;
            let t = Instant::now();
            let p = sb.exec(req(&["/bin/true"])).await.unwrap_or_else(|e| panic!("{e}"));
            p.wait().await;
            paused.push(t.elapsed());
        }
        report("  the same, 3 ms apart", &mut paused);

        // First, second and third exec in fresh (pooled) sessions.
        let (mut first, mut second, mut third) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..(n / 4).max(10) {
            while engine.pool_stats().ready < 1 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let s = engine
                .create(CreateSession { spec: base.clone(), idle_timeout: None, ttl: None, owner: String::new() })
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            for v in [&mut first, &mut second, &mut third] {
                let t = Instant::now();
                let p = s.exec(req(&["/bin/true"])).await.unwrap_or_else(|e| panic!("{e}"));
                p.wait().await;
                v.push(t.elapsed());
            }
            engine.destroy(s.id(), EndCause::Deleted).await.unwrap_or_else(|e| panic!("{e}"));
        }
        report("1st exec in a fresh session", &mut first);
        report("2nd exec in a fresh session", &mut second);
        report("3rd exec in a fresh session", &mut third);
        engine.shutdown().await;

        if idle > 0 {
            let before = mem_available_kib();
            let mut kept = Vec::new();
            for _ in 0..idle {
                kept.push(
                    engine
                        .create(CreateSession { spec: base.clone(), idle_timeout: None, ttl: None, owner: String::new() })
                        .await
                        .unwrap_or_else(|e| panic!("{e}")),
                );
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            let after = mem_available_kib();
            println!(
                "{idle} idle sessions: host memory {:.2} MiB each (MemAvailable {} -> {} KiB); this process RSS {} KiB",
                (before.saturating_sub(after)) as f64 / 1024.0 / idle as f64,
                before,
                after,
                rss_kib(std::process::id())
            );
            engine.shutdown().await;
        }
    });
}
