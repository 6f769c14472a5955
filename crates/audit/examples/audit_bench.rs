//! Events appended per second through `AuditWriter` (durable group commit)
//! against plain SQLite insert loops in the same run, plus redaction speed.
//!
//! cargo run --release -p cordon-audit --example audit_bench -- [EVENTS] [DIR]

use std::path::Path;
use std::time::{Duration, Instant};

use cordon_audit::{AuditWriter, Decision, Egress, EndReason, RunEnded, RunStarted};
use cordon_scan::Redactor;

fn egress(i: usize) -> Egress {
    Egress {
        method: "CONNECT".into(),
        host: format!("api{}.example.com", i % 50),
        port: 443,
        path: Some("/v1/chat/completions".into()),
        bytes_sent: 1200 + i as u64,
        bytes_received: 48_000,
        duration_ms: 230,
        decision: if i.is_multiple_of(7) {
            Decision::Deny
        } else {
            Decision::Allow
        },
        rule: Some("allow api*.example.com:443".into()),
        reason: None,
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn writer_run(
    dir: &Path,
    name: &str,
    n: usize,
    flush_every: usize,
    threads: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let path = dir.join(format!("{name}.db"));
    let w = std::sync::Arc::new(AuditWriter::open(&path)?);
    let start = Instant::now();
    let per = n / threads;
    let mut hs = Vec::new();
    for t in 0..threads {
        let w = std::sync::Arc::clone(&w);
        hs.push(std::thread::spawn(
            move || -> Result<(), cordon_audit::AuditError> {
                let run = format!("run-{t}");
                for i in 0..per {
                    w.append(&run, egress(i))?;
                    if flush_every > 0 && (i + 1) % flush_every == 0 {
                        w.flush()?;
                    }
                }
                w.flush()?;
                Ok(())
            },
        ));
    }
    for h in hs {
        h.join().map_err(|_| "thread panicked")??;
    }
    let d = start.elapsed();
    let report = cordon_audit::AuditStore::open(&path)?.verify()?;
    if !report.ok || report.records as usize != per * threads {
        return Err(format!("store does not verify: {:?}", report.problems).into());
    }
    Ok(rate(per * threads, d))
}

/// What the store adds to one `cordon run`, as that command drives it
/// (InlineWriter in spool mode): open the store, put the profile blob,
/// append the start and the end, commit (durable). Median and p90 over
/// `runs` runs, in µs.
fn run_lifecycle(dir: &Path, runs: usize) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let path = dir.join("lifecycle.db");
    let profile = "[limits]\nmemory = \"512M\"\n".repeat(40);
    let mut times = Vec::with_capacity(runs);
    for i in 0..runs + 10 {
        let start = Instant::now();
        let mut w = cordon_audit::InlineWriter::open_with(
            &path,
            cordon_audit::WriterOptions {
                spool: true,
                ..Default::default()
            },
        )?;
        let run = cordon_audit::new_run_id();
        let profile_hash = w.put_blob(profile.as_bytes())?;
        w.append(
            &run,
            RunStarted {
                argv: vec!["/bin/true".into()],
                cwd: Some("/work".into()),
                profile_name: Some("medium".into()),
                profile_hash: Some(profile_hash),
                cordon_version: "bench".into(),
                ..Default::default()
            },
        )?;
        w.append(
            &run,
            RunEnded {
                reason: EndReason::Exited,
                exit_code: Some(0),
                signal: None,
                wall_ms: 2,
                user_ms: 0,
                sys_ms: 1,
                peak_memory_bytes: Some(600_000),
                stdout: Default::default(),
                stderr: Default::default(),
                enforcement: serde_json::json!({"seccomp": true, "landlock": 7}),
            },
        )?;
        w.commit()?;
        if i >= 10 {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    let report = cordon_audit::AuditStore::open(&path)?.verify()?;
    if !report.ok || report.records as usize != 2 * (runs + 10) {
        return Err(format!("store does not verify: {:?}", report.problems).into());
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], times[times.len() * 9 / 10]))
}

/// How long a caller waits for one record: appended, then waited for
/// until committed (`committed_then`, what the server's create does) or
/// until durable (`flush`). Median and p99 over `n` records, in µs.
fn wait_for_one(
    dir: &Path,
    name: &str,
    n: usize,
    durable: bool,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let path = dir.join(format!("{name}.db"));
    let w = AuditWriter::open_with(
        &path,
        cordon_audit::WriterOptions {
            commit_delay: Duration::from_millis(5),
            ..Default::default()
        },
    )?;
    let mut times = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let start = Instant::now();
        w.append("run-0", egress(i))?;
        if durable {
            w.flush()?;
        } else {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            w.committed_then(move |r| {
                let _ = tx.send(r);
            })?;
            rx.recv()?.map_err(|e| format!("commit: {e}"))?;
        }
        if i >= 10 {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        // As a server's creates come: not back to back with the last sync.
        std::thread::sleep(Duration::from_millis(2));
    }
    w.close()?;
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], times[times.len() * 99 / 100]))
}

fn plain_run(
    dir: &Path,
    name: &str,
    n: usize,
    batch: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let path = dir.join(format!("{name}.db"));
    let mut c = rusqlite::Connection::open(&path)?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.execute_batch(
        "CREATE TABLE events (id INTEGER PRIMARY KEY, time_ns INTEGER, run_id TEXT, kind TEXT, body TEXT)",
    )?;
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        let tx = c.transaction()?;
        {
            let mut st = tx.prepare_cached(
                "INSERT INTO events (time_ns, run_id, kind, body) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for _ in 0..batch.min(n - i) {
                let body = serde_json::to_string(&egress(i))?;
                st.execute(rusqlite::params![i as i64, "run-0", "egress", body])?;
                i += 1;
            }
        }
        tx.commit()?;
    }
    Ok(rate(n, start.elapsed()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200_000);
    let tmp;
    let dir = match args.get(2) {
        Some(d) => Path::new(d).to_path_buf(),
        None => {
            tmp = std::env::temp_dir().join(format!("cordon-audit-bench-{}", std::process::id()));
            std::fs::create_dir_all(&tmp)?;
            tmp.clone()
        }
    };
    let single = (n / 100).clamp(200, 2000);
    if std::env::var_os("AUDIT_BENCH_WAIT_ONLY").is_some() {
        for round in 0..3 {
            let (cm, cp) = wait_for_one(&dir, &format!("committed-{round}"), 500, false)?;
            let (dm, dp) = wait_for_one(&dir, &format!("durable-{round}"), 500, true)?;
            println!(
                "one record, waited for: committed median {cm:.0} µs (p99 {cp:.0}), durable median {dm:.0} µs (p99 {dp:.0})"
            );
        }
        return Ok(());
    }
    if std::env::var_os("AUDIT_BENCH_LIFECYCLE_ONLY").is_some() {
        let (median, p90) = run_lifecycle(&dir, 300)?;
        println!("per-run store lifecycle: median {median:.0} µs, p90 {p90:.0} µs");
        return Ok(());
    }

    let plain_single = plain_run(&dir, "plain-single", single, 1)?;
    let plain_batched = plain_run(&dir, "plain-batched", n, 8192)?;
    let w_bulk = writer_run(&dir, "writer-bulk", n, 0, 1)?;
    let w_4threads = writer_run(&dir, "writer-4threads", n, 0, 4)?;
    let w_flush100 = writer_run(&dir, "writer-flush100", n / 4, 100, 1)?;
    let w_flush100_4 = writer_run(&dir, "writer-flush100-4threads", n / 4, 100, 4)?;

    // Redaction: a 4 MiB log with a few secrets.
    let line =
        "INFO 2024-05-01T12:00:00Z handled GET /api/v1/items/42 in 12ms status=200 user=alice\n";
    let mut text = line.repeat((4 << 20) / line.len());
    text.push_str("oops ghp_aaaabbbbccccddddeeeeffffgggghhhhiiii and password=hunter2\n");
    let red = Redactor::with_values(&["bound-secret-value"]);
    let start = Instant::now();
    let mut total = 0usize;
    for _ in 0..5 {
        total += red.redact(&text).len();
    }
    let mib_s = (5 * text.len()) as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64();
    let _ = total;

    println!("| what | events/s | vs plain batched |");
    println!("|---|---:|---:|");
    let row = |what: &str, r: f64| {
        println!("| {what} | {r:.0} | {:.2}x |", r / plain_batched);
    };
    row(
        &format!("plain SQLite, 1 insert per transaction (WAL, synchronous=FULL; {single} events)"),
        plain_single,
    );
    row(
        &format!("plain SQLite, 8192 inserts per transaction (WAL, FULL; {n} events)"),
        plain_batched,
    );
    row(
        &format!("AuditWriter, 1 thread, flush at end ({n} events)"),
        w_bulk,
    );
    row(
        &format!("AuditWriter, 4 threads, flush at end ({n} events)"),
        w_4threads,
    );
    row(
        &format!(
            "AuditWriter, 1 thread, flush every 100 events ({} events)",
            n / 4
        ),
        w_flush100,
    );
    row(
        &format!(
            "AuditWriter, 4 threads, each flushing every 100 events ({} events)",
            n / 4
        ),
        w_flush100_4,
    );
    println!();
    println!(
        "AuditWriter bulk vs plain 1-insert-per-transaction: {:.0}x",
        w_bulk / plain_single
    );
    let (median, p90) = run_lifecycle(&dir, 300)?;
    println!(
        "per-run store lifecycle (open, profile blob, start, end, commit; spool mode, as `cordon run` does): median {median:.0} µs, p90 {p90:.0} µs"
    );
    let (cm, cp) = wait_for_one(&dir, "committed", 500, false)?;
    let (dm, dp) = wait_for_one(&dir, "durable", 500, true)?;
    println!(
        "one record, waited for (5 ms commit delay, 2 ms apart): committed median {cm:.0} µs (p99 {cp:.0}), durable median {dm:.0} µs (p99 {dp:.0})"
    );
    println!(
        "redaction of a {:.1} MiB log: {mib_s:.0} MiB/s",
        text.len() as f64 / (1 << 20) as f64
    );
    if args.get(2).is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
