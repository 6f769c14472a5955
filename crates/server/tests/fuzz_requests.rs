//! Randomized, bounded fuzzing of request decoding on stable Rust (the
//! cargo-fuzz target `request_body` in fuzz/ runs the same checks with
//! coverage guidance). `CORDON_FUZZ_ITERS` sets the iterations (default
//! 20000).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/fuzz_checks.rs"]
mod fuzz_checks;

/// xorshift64*: deterministic, so a failure reproduces from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const SEEDS: &[&str] = &[
    r#"{"preset":"low","memory":"512M","pids":64,"allow_net":["pypi.org"],"env":{"A":"1"},"ttl":"1h","idle_timeout":30}"#,
    r#"{"preset":"high","rw":["/tmp"],"ro":["/etc"],"profile":{"limits":{"memory":"1G"}}}"#,
    r#"{"argv":["python3","-c","print(1)"],"stdin":"x","cwd":"/tmp","env":{"K":"V"},"timeout":"30s","background":true}"#,
    r#"{"signal":"TERM"}"#,
    r#"{"signal":9}"#,
    r#"{"allow_net":["*.pythonhosted.org:443"],"memory":1073741824}"#,
];

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\u0000",
    "\\",
    "null",
    "true",
    "-1",
    "1e999",
    "18446744073709551616",
    "\"argv\"",
    "\"preset\"",
    "\"memory\"",
    "\"allow_net\"",
    "\"rw\"",
    "\"../../etc\"",
    "\"/\"",
    "\"*\"",
    "\"0s\"",
    "\"9999999999h\"",
    "\"KILL\"",
    "\"SIGTERM\"",
    "\"profile\"",
    "{}",
    "[]",
    "\u{feff}",
    "\u{0}",
    " ",
];

fn mutate(rng: &mut Rng, seed: &str) -> Vec<u8> {
    let mut data = seed.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(4) {
            0 => {
                let p = PIECES[rng.below(PIECES.len())];
                data.splice(at..at, p.bytes());
            }
            1 if !data.is_empty() => {
                let end = (at + rng.below(8)).min(data.len());
                data.drain(at.min(end)..end);
            }
            2 => data.insert(at, rng.next() as u8),
            _ => data.truncate(at),
        }
    }
    data
}

#[test]
fn request_decoding_never_panics_and_refuses_with_4xx() {
    let iters: usize = std::env::var("CORDON_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    for seed in SEEDS {
        fuzz_checks::request_bodies(seed.as_bytes());
    }
    for _ in 0..iters {
        let seed = SEEDS[rng.below(SEEDS.len())];
        let data = mutate(&mut rng, seed);
        fuzz_checks::request_bodies(&data);
    }
}
