//! The scanner's numbers as tests, on corpora: recall on malicious
//! snippets kept in the repository (`tests/corpus/malicious`, one attack per
//! file), and the share of benign real code flagged at block severity: the
//! Python standard library shipped on this machine, the repository's own
//! shell scripts, and npm's JavaScript when the machine has it.
//!
//! Fails when recall at warn level drops below 0.9 or more than 1% of the
//! benign files of a corpus are flagged at block level.

use std::path::{Path, PathBuf};

use cordon_codescan::{files_under, Language, Scanner, Severity};

const MIN_RECALL: f64 = 0.9;
const MAX_BLOCK_SHARE: f64 = 0.01;

fn scanner() -> Scanner {
    Scanner::builtin().unwrap_or_else(|e| panic!("{e}"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Skip, or with CORDON_TESTS_REQUIRE_ALL=1 (CI) fail, when a corpus is
/// not on this machine.
fn skip_unless(available: bool, reason: &str) -> bool {
    if available {
        return false;
    }
    if std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_some() {
        panic!("required corpus missing: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    true
}

/// The highest severity found in a file, `None` for no finding.
fn worst(s: &Scanner, path: &Path, lang: Language) -> Option<Severity> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return None;
    };
    let name = path.display().to_string();
    let r = s
        .scan(&name, lang, &text)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    r.findings.iter().map(|f| f.severity).max()
}

#[test]
fn malicious_snippets_are_flagged_at_warn_or_above() {
    let s = scanner();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/malicious");
    let files = files_under(&dir, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        files.len() >= 100,
        "only {} malicious snippets",
        files.len()
    );
    let mut missed = Vec::new();
    let mut at_block = 0;
    for f in &files {
        match worst(&s, &f.path, f.language) {
            Some(Severity::Block) => at_block += 1,
            Some(Severity::Warn) => {}
            _ => missed.push(f.path.file_name().map(|n| n.to_string_lossy().into_owned())),
        }
    }
    let recall = 1.0 - missed.len() as f64 / files.len() as f64;
    eprintln!(
        "malicious corpus: {} snippets, recall at warn {:.3}, at block {:.3}; missed: {:?}",
        files.len(),
        recall,
        at_block as f64 / files.len() as f64,
        missed
    );
    assert!(
        recall >= MIN_RECALL,
        "recall {recall:.3} < {MIN_RECALL}; missed {missed:?}"
    );
}

/// Scan every file of a benign corpus; fail when more than 1% are flagged
/// at block level. Returns (files, block, warn) for the message.
fn benign(s: &Scanner, what: &str, roots: &[PathBuf]) {
    let mut files = 0usize;
    let mut warn = 0usize;
    let mut block = Vec::new();
    for root in roots {
        let found = files_under(root, None).unwrap_or_else(|e| panic!("{e}"));
        for f in found {
            files += 1;
            match worst(s, &f.path, f.language) {
                Some(Severity::Block) => block.push(f.path.display().to_string()),
                Some(Severity::Warn) => warn += 1,
                _ => {}
            }
        }
    }
    assert!(files > 0, "{what}: no files");
    let share = block.len() as f64 / files as f64;
    eprintln!(
        "{what}: {files} files, {} ({:.2}%) flagged at block, {warn} ({:.1}%) at warn only; block: {block:?}",
        block.len(),
        share * 100.0,
        warn as f64 * 100.0 / files as f64
    );
    assert!(
        share <= MAX_BLOCK_SHARE,
        "{what}: {:.2}% of files flagged at block (limit {:.0}%): {block:?}",
        share * 100.0,
        MAX_BLOCK_SHARE * 100.0
    );
}

fn python_lib_dirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/usr/lib") else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn python_standard_library_is_rarely_flagged_at_block() {
    let dirs = python_lib_dirs();
    if skip_unless(!dirs.is_empty(), "no /usr/lib/python3* on this machine") {
        return;
    }
    benign(&scanner(), "python (/usr/lib/python3*)", &dirs);
}

#[test]
fn the_repositorys_own_scripts_are_not_flagged_at_block() {
    let root = repo();
    let roots: Vec<PathBuf> = [".ci", "benches", "fuzz", "profiles"]
        .iter()
        .map(|d| root.join(d))
        .filter(|p| p.is_dir())
        .collect();
    benign(&scanner(), "repository scripts", &roots);
}

#[test]
fn npm_javascript_is_rarely_flagged_at_block() {
    let roots: Vec<PathBuf> = ["/usr/lib/node_modules/npm/lib", "/usr/share/nodejs/npm/lib"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect();
    if skip_unless(
        !roots.is_empty(),
        "npm's JavaScript is not installed (nodejs/npm)",
    ) {
        return;
    }
    benign(&scanner(), "npm's JavaScript", &roots);
}
