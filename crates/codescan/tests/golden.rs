//! The exact findings and hosts of the scanner on texts kept in the
//! repository: the malicious corpus, the benchmark inputs (as they are and
//! repeated to about 1,000 lines), and the corpus's files of each language
//! joined into one text. The
//! corpus test counts how many files are flagged; this one pins every
//! finding (rule, severity, line, column, language, snippet) and every
//! host, so that a change to how the scanner works (not to its rules)
//! cannot add, drop or move one unnoticed.
//!
//! After a deliberate change to the rules, write the file again with
//! `CORDON_UPDATE_GOLDEN=1 cargo test -p cordon-codescan --test golden`
//! and review its diff.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cordon_codescan::{files_under, Scanner};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const GOLDEN: &str = "tests/findings.golden";

/// The texts: (name, language, text).
fn inputs() -> Vec<(String, cordon_codescan::Language, String)> {
    let root = repo();
    let mut out = Vec::new();
    // All malicious snippets of one language in one text (many findings
    // per text: the per-line dedup and the cap on code matches at work).
    let mut joined: Vec<(cordon_codescan::Language, String)> = Vec::new();
    for dir in [
        "crates/codescan/tests/corpus/malicious",
        "benches/scan/inputs",
    ] {
        let path = root.join(dir);
        let mut files = files_under(&path, None).unwrap_or_else(|e| panic!("{e}"));
        files.sort_by(|a, b| a.path.cmp(&b.path));
        for f in files {
            let Ok(text) = std::fs::read_to_string(&f.path) else {
                continue;
            };
            let name = rel(&root, &f.path);
            if name.starts_with("benches/scan/inputs/") {
                let times = 1000 / text.lines().count().max(1);
                out.push((format!("{name} x{times}"), f.language, text.repeat(times)));
            }
            if name.contains("/malicious/") {
                match joined.iter_mut().find(|(l, _)| *l == f.language) {
                    Some((_, all)) => all.push_str(&text),
                    None => joined.push((f.language, text.clone())),
                }
            }
            out.push((name, f.language, text));
        }
    }
    for (lang, text) in joined {
        out.push((format!("malicious corpus, all {lang}"), lang, text));
    }
    out
}

fn rel(root: &Path, path: &Path) -> String {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

fn render(scanner: &Scanner) -> String {
    let mut out = String::new();
    for (name, lang, text) in inputs() {
        let r = scanner
            .scan(&name, lang, &text)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for f in &r.findings {
            let _ = writeln!(
                out,
                "{name}\t{}:{}\t{}\t{:?}\t{}\t{}",
                f.line, f.column, f.rule, f.severity, f.language, f.snippet
            );
        }
        for h in &r.hosts {
            let _ = writeln!(
                out,
                "{name}\t{}:{}\thost {}\t{:?}\t{}",
                h.line, h.column, h.host, h.port, h.snippet
            );
        }
    }
    out
}

#[test]
fn findings_on_the_repositorys_texts_are_exactly_the_pinned_ones() {
    let scanner = Scanner::builtin().unwrap_or_else(|e| panic!("{e}"));
    let got = render(&scanner);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("CORDON_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).unwrap_or_else(|e| panic!("{e}"));
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        got.lines().count() > 200,
        "too few findings to pin anything"
    );
    if got != want {
        let missing: Vec<&str> = want.lines().filter(|l| !got.contains(l)).take(20).collect();
        let extra: Vec<&str> = got.lines().filter(|l| !want.contains(l)).take(20).collect();
        panic!(
            "the findings changed ({} pinned, {} now); if the rules or the corpus changed on purpose, write the file again (see this test's header)\nmissing:\n{}\nnew:\n{}",
            want.lines().count(),
            got.lines().count(),
            missing.join("\n"),
            extra.join("\n")
        );
    }
}
