//! Time `Scanner::scan` on files: each file as it is and repeated to 1,000
//! lines, with the tree-sitter parse alone (one thread, whole text) as the
//! baseline, timed in turn with the scan. Used by `benches/scan/run.sh`.
//!
//!     cargo run --release -p cordon-codescan --example scanbench -- [--iters N] FILE...
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use cordon_codescan::{Language, Scanner};

/// The binary's allocator (crates/cli/src/main.rs), so that these numbers
/// are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn grammar(lang: Language) -> tree_sitter::Language {
    match lang {
        Language::Bash => tree_sitter_bash::LANGUAGE.into(),
        Language::Python => tree_sitter_python::LANGUAGE.into(),
        Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
        Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
    }
}

/// Median and 90th percentile of `a` and `b`, timed in turn (a, b, a, b,
/// ...) so that both see the same moments of a shared machine.
fn time_both(
    iters: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> ((Duration, Duration), (Duration, Duration)) {
    for _ in 0..iters / 10 + 1 {
        a();
        b();
    }
    let mut sa = Vec::with_capacity(iters);
    let mut sb = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        a();
        sa.push(t.elapsed());
        let t = Instant::now();
        b();
        sb.push(t.elapsed());
    }
    sa.sort();
    sb.sort();
    (
        (sa[iters / 2], sa[iters * 9 / 10]),
        (sb[iters / 2], sb[iters * 9 / 10]),
    )
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut iters = 300;
    if args.first().map(String::as_str) == Some("--iters") {
        iters = args[1].parse().expect("--iters N");
        args.drain(..2);
    }
    let t = Instant::now();
    let scanner = Scanner::builtin().expect("rules");
    println!(
        "rule pack compiled in {} ms (once per process)\n",
        ms(t.elapsed())
    );
    println!("| input | language | lines | scan median | scan p90 | parse-only median (baseline) | findings |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for file in &args {
        let path = Path::new(file);
        let text = std::fs::read_to_string(path).expect("read input");
        let lang = Language::detect(path, text.as_bytes()).expect("language");
        let lines = text.lines().count().max(1);
        let mut variants = vec![(file.clone(), text.clone())];
        if lines < 1000 {
            let times = 1000 / lines;
            variants.push((format!("{file} x{times}"), text.repeat(times)));
        }
        for (name, src) in variants {
            let n = src.lines().count();
            let found = scanner
                .scan(&name, lang, &src)
                .expect("scan")
                .findings
                .len();
            let mut parser = tree_sitter::Parser::new();
            parser.set_language(&grammar(lang)).expect("grammar");
            let ((median, p90), (parse, _)) = time_both(
                iters,
                || {
                    std::hint::black_box(scanner.scan(&name, lang, &src).expect("scan"));
                },
                || {
                    std::hint::black_box(parser.parse(&src, None));
                },
            );
            println!(
                "| `{name}` | {lang} | {n} | {} ms | {} ms | {} ms | {found} |",
                ms(median),
                ms(p90),
                ms(parse)
            );
        }
    }
}
