#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Soak the supervisor library: run the same sandbox `RUNS` times in this
//! one process and print, every `EVERY` runs, this process's resident
//! memory, its open descriptors and its live child processes, so a leak in
//! `cordon_jail::run` shows up as a number that grows.
//!
//! `cargo run --release -p cordon-jail --example soak_loop -- RUNS EVERY [CMD...]`
//! (default command: `/bin/true`). Output: one line per checkpoint,
//! `run N rss_kib R fds F children C failed X`, then `done`.
use cordon_jail::*;

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn open_fds() -> usize {
    // The directory's own descriptor is counted too, the same every time.
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn children() -> usize {
    let me = std::process::id();
    std::fs::read_to_string(format!("/proc/{me}/task/{me}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .count()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let every: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let mut argv: Vec<String> = args.collect();
    if argv.is_empty() {
        argv.push("/bin/true".into());
    }
    let mut spec = Spec::new(argv, std::path::PathBuf::from("/tmp"));
    spec.limits.wall = Some(std::time::Duration::from_secs(30));
    spec.limits.memory = Some(256 << 20);
    spec.limits.pids = Some(64);
    spec.limits.output = Some(1 << 20);
    let options = RunOptions {
        forward_signals: false,
        ..RunOptions::default()
    };
    let mut failed = 0u64;
    println!(
        "run 0 rss_kib {} fds {} children {} failed 0",
        status_kib("VmRSS:"),
        open_fds(),
        children()
    );
    for i in 1..=runs {
        let mut sink = CaptureSink::default();
        match run(&spec, &mut sink, options) {
            Ok(o) if o.exit_code == 0 => {}
            Ok(o) => {
                failed += 1;
                eprintln!("run {i}: exit {} ({:?})", o.exit_code, o.message);
            }
            Err(e) => {
                failed += 1;
                eprintln!("run {i}: {e}");
            }
        }
        if i % every == 0 {
            println!(
                "run {i} rss_kib {} fds {} children {} failed {failed}",
                status_kib("VmRSS:"),
                open_fds(),
                children()
            );
        }
    }
    println!("done hwm_kib {}", status_kib("VmHWM:"));
}
