//! Randomized, bounded fuzzing of the parsers that runs on stable Rust (CI
//! runs this; the cargo-fuzz targets in fuzz/ run the same checks with
//! coverage guidance when a nightly toolchain is available).
//!
//! `CORDON_FUZZ_ITERS` sets the iterations per parser (default 20000).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/fuzz_checks.rs"]
mod fuzz_checks;

use cordon_egress::sni;

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

const TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\n",
    b"\r",
    b"\0",
    b" ",
    b"\t",
    b":",
    b"\r\n ",
    b"\r\n\r\n",
    b"Host: a.test\r\n",
    b"Host: b.test\r\n",
    b"Content-Length: 5\r\n",
    b"Content-Length: -1\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: identity, chunked\r\n",
    b"Connection: close, X-A\r\n",
    b"Proxy-Authorization: Basic eA==\r\n",
    b"Expect: 100-continue\r\n",
    b"http://",
    b"https://",
    b"[::1]",
    b"@",
    b"%00",
    b"#",
    b"?token=x",
    b":80",
    b":0",
    b":65536",
    b"CONNECT ",
    b"GET ",
    b"HTTP/1.1",
    b"HTTP/1.0",
    b"HTTP/2.0",
    b"0\r\n\r\n",
    b"ffffffffffffffff\r\n",
    b"5;ext\r\n",
    b"\xff",
    b"\x16\x03\x01",
    b"\x00\x00",
    b"\xff\xff",
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(6) {
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(v.len() + 1);
                let t = TOKENS[rng.below(TOKENS.len())];
                v.splice(i..i, t.iter().copied());
            }
            3 if !v.is_empty() => {
                let i = rng.below(v.len());
                let n = rng.below(v.len() - i + 1).min(16);
                v.drain(i..i + n);
            }
            4 => {
                let cut = rng.below(v.len() + 1);
                v.truncate(cut);
            }
            5 if v.len() > 2 => {
                // Duplicate a slice (repeated headers, repeated extensions).
                let i = rng.below(v.len());
                let n = rng.below(v.len() - i).min(64);
                let part = v[i..i + n].to_vec();
                let j = rng.below(v.len() + 1);
                v.splice(j..j, part);
            }
            _ => {
                let n = rng.below(32);
                for _ in 0..n {
                    v.push(rng.next() as u8);
                }
            }
        }
    }
    v
}

fn iterations() -> usize {
    std::env::var("CORDON_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

fn run(name: &str, seeds: &[Vec<u8>], check: fn(&[u8])) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
    for seed in seeds {
        check(seed);
    }
    for i in 0..iterations() {
        let seed = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, seed);
        let r = std::panic::catch_unwind(|| check(&input));
        assert!(r.is_ok(), "{name}: iteration {i} failed on input {input:?}");
    }
    for _ in 0..iterations() / 10 {
        let n = rng.below(600);
        let input: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        check(&input);
    }
}

#[test]
fn fuzz_request_head() {
    let seeds: Vec<Vec<u8>> = [
        &b"GET http://a.test/p?q=1 HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n"[..],
        b"POST http://a.test:8080/x HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 3\r\n\r\nabc",
        b"POST http://a.test/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n",
        b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nProxy-Authorization: Basic eA==\r\n\r\n",
        b"GET http://[::1]:80/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        b"GET http://u:p@a.test HTTP/1.1\r\nExpect: 100-continue\r\nX-A: b\r\n\r\n",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect();
    run("request_head", &seeds, fuzz_checks::request_head);
}

#[test]
fn fuzz_client_hello() {
    let mut split = Vec::new();
    let one = sni::build_client_hello(Some("split.example.test"));
    let hs = &one[5..];
    for chunk in [&hs[..7], &hs[7..]] {
        split.extend_from_slice(&[22, 3, 1]);
        split.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        split.extend_from_slice(chunk);
    }
    let seeds = vec![
        sni::build_client_hello(Some("a.test")),
        sni::build_client_hello(None),
        sni::build_client_hello(Some("very-long-label.sub.example.test")),
        split,
    ];
    run("client_hello", &seeds, fuzz_checks::client_hello);
}

#[test]
fn fuzz_late_hello() {
    let hello = |name: Option<&str>| {
        let mut s = b"EHLO sandbox\r\nSTARTTLS\r\n".to_vec();
        s.extend_from_slice(&sni::build_client_hello(name));
        s
    };
    let mut split = b"\0\0\0\x08\x04\xd2\x16\x2f".to_vec(); // a PostgreSQL SSLRequest
    let one = sni::build_client_hello(Some("b.test"));
    for chunk in one[5..].chunks(9) {
        split.extend_from_slice(&[22, 3, 3]);
        split.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        split.extend_from_slice(chunk);
    }
    let seeds = vec![
        hello(Some("a.test")),
        hello(Some("b.test")),
        hello(None),
        split,
        b"SSH-2.0-OpenSSH_9.6\r\n\x16\x03\x01\x00\x30\x01\x00\x00".to_vec(),
    ];
    run("late_hello", &seeds, fuzz_checks::late_hello);
}

#[test]
fn fuzz_chunked() {
    let seeds: Vec<Vec<u8>> = [
        &b"5\r\nhello\r\n0\r\n\r\n"[..],
        b"3;a=b\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\nrest",
        b"0\r\n\r\n",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect();
    run("chunked", &seeds, fuzz_checks::chunked);
}
