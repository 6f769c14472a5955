//! Scan one file N times after a warm-up scan, in one function that
//! callgrind can count alone (instructions per scan, steadier than time on
//! a shared machine). Used by `benches/scan/run.sh --instructions`.
//!
//!     valgrind --tool=callgrind --toggle-collect='scanprof::scans' \
//!         target/release/examples/scanprof FILE [LINES] [N]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use cordon_codescan::{Language, Scanner};

/// The binary's allocator (crates/cli/src/main.rs), so that these numbers
/// are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[inline(never)]
fn scans(scanner: &Scanner, name: &str, lang: Language, text: &str, n: usize) -> usize {
    (0..n)
        .map(|_| scanner.scan(name, lang, text).expect("scan").findings.len())
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = Path::new(&args[0]);
    let lines: usize = args.get(1).map_or(0, |s| s.parse().expect("LINES"));
    let n: usize = args.get(2).map_or(10, |s| s.parse().expect("N"));
    let mut text = std::fs::read_to_string(path).expect("read");
    let lang = Language::detect(path, text.as_bytes()).expect("language");
    let have = text.lines().count().max(1);
    if lines > have {
        text = text.repeat(lines / have);
    }
    let scanner = Scanner::builtin().expect("rules");
    let name = path.display().to_string();
    // The warm-up compiles what this text needs.
    let found = scanner
        .scan(&name, lang, &text)
        .expect("scan")
        .findings
        .len();
    std::hint::black_box(scans(&scanner, &name, lang, &text, n));
    println!(
        "{name}: {} lines, {found} findings, {n} scans",
        text.lines().count()
    );
}
