//! Execs of /bin/true in one live session, back to back, for a
//! system-wide measurement taken from outside (`benches/serve/exec_cpu.sh`
//! counts page faults, context switches and CPU per exec with `perf stat
//! -a` and /proc/stat while it runs).
//!
//!     cargo run --release -p cordon-session --example exec_loop -- 100000 /tmp/go
//!
//! Once 20 warm-up execs are done it creates the marker file (second
//! argument) and runs execs until the measurer removes the marker (or the
//! first argument's number of them is done), so the loop outlasts the
//! measurement however fast an exec is; then it prints the mean wall time
//! of one.

use std::time::Instant;

use cordon_session::{CreateSession, Engine, EngineConfig, ExecRequest, Spawner};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
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
        let mut done = 0;
        while done < n && std::path::Path::new(&marker).exists() {
            exec().await;
            done += 1;
        }
        println!(
            "{:.3} ms each ({done} execs)",
            started.elapsed().as_secs_f64() * 1000.0 / done.max(1) as f64
        );
        let _ = std::fs::remove_file(&marker);
        engine.shutdown().await;
    });
}
