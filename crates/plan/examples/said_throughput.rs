//! How fast the output watch reads: 256 MiB of ordinary text in 64 KiB
//! chunks, as an exec's pump hands them over.
//!
//!     cargo run --release -p cordon-plan --example said_throughput

use std::time::Instant;

use cordon_jail::Stream;
use cordon_plan::said::OutputWatch;

fn main() {
    let line = b"2026-11-29 12:00:00 INFO request served in 3 ms from cache, status 200 OK\n";
    let chunk: Vec<u8> = line.iter().copied().cycle().take(64 * 1024).collect();
    let chunks = 4096;
    let mut watch = OutputWatch::default();
    let start = Instant::now();
    for _ in 0..chunks {
        watch.look(Stream::Stdout, &chunk);
    }
    let secs = start.elapsed().as_secs_f64();
    let mib = (chunks * chunk.len()) as f64 / (1024.0 * 1024.0);
    println!(
        "{mib:.0} MiB in {:.1} ms: {:.0} MiB/s (said: {:?})",
        secs * 1000.0,
        mib / secs,
        watch.all()
    );
}
