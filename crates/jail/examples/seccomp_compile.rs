//! Time to generate the seccomp program, per option set, and its size:
//! `cargo run --release -p cordon-jail --example seccomp_compile`.

use std::time::Instant;

use cordon_jail::seccomp::{compile, FilterOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const ROUNDS: u32 = 20_000;
    for (unix_sockets, inet_sockets) in [(false, false), (true, false), (false, true), (true, true)]
    {
        let options = FilterOptions {
            unix_sockets,
            inet_sockets,
            notify: true,
            observe: false,
        };
        let mut samples = Vec::with_capacity(ROUNDS as usize);
        let mut len = 0;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            len = std::hint::black_box(compile(std::hint::black_box(options))?).len();
            samples.push(t.elapsed());
        }
        samples.sort();
        println!(
            "unix={unix_sockets} inet={inet_sockets}: {len} instructions, median {:?}, p99 {:?}",
            samples[samples.len() / 2],
            samples[samples.len() * 99 / 100]
        );
    }
    Ok(())
}
