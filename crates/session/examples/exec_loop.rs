//! Execs of /bin/true in one live session, back to back, for a
//! system-wide measurement taken from outside (`benches/serve/exec_cpu.sh`
//! counts page faults, context switches and CPU per exec with `perf stat
//! -a` and /proc/stat while it runs).
//!
//!     cargo run --release -p cordon-session --example exec_loop -- 4000 /tmp/go
//!
//! Once 20 warm-up execs are done it creates the marker file (second
//! argument), runs the measured execs, prints the mean wall time of one,
//! and removes the marker.

use std::time::Instant;

use cordon_session::{CreateSession, Engine, EngineConfig, ExecRequest, Spawner};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4000);
    let marker = std::env::args()
        .nth(2)
        .unwrap_or_else(|| "/tmp/exec_loop.go".into());
    let spawner = Spawner::fork().unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        let engine =
            Engine::new(spawner, EngineConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let session = engine
            .create(CreateSession {
                spec: cordon_jail::Spec::new(Vec::new(), "/tmp".into()),
                idle_timeout: None,
                ttl: None,
                owner: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let request = ExecRequest {
            argv: vec!["/bin/true".into()],
            ..ExecRequest::default()
        };
        let exec = || async {
            let p = session
                .exec(request.clone())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            p.wait().await;
        };
        for _ in 0..20 {
            exec().await;
        }
        std::fs::write(&marker, "").unwrap_or_else(|e| panic!("{marker}: {e}"));
        let started = Instant::now();
        for _ in 0..n {
            exec().await;
        }
        println!(
            "{:.3} ms each",
            started.elapsed().as_secs_f64() * 1000.0 / n as f64
        );
        let _ = std::fs::remove_file(&marker);
        engine.shutdown().await;
    });
}
