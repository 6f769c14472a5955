//! Parsing a text: one tree, or, for a long text, one tree per piece,
//! parsed on several cores at once.
//!
//! Parsing is most of a scan's cost (a 1,000-line Python file takes
//! milliseconds), and tree-sitter parses on one thread. A long text is cut
//! into pieces at lines that start a top-level statement (`def`, `class`,
//! `import` in Python; `function`, `const`, `class` in JavaScript; a
//! command in shell) and each piece is parsed on its own with the text's
//! other bytes excluded (`set_included_ranges`), so node offsets stay the
//! text's own. A piece that ends inside a construct (a string, a bracket,
//! a heredoc, a compound command, a line continued with `\`) does not
//! parse cleanly; then the text from that piece on is parsed as one piece.
//! Pieces that all parse cleanly, cut where a new statement starts, are
//! the statements the whole parse has, so every node below the top (where
//! every rule's pattern is rooted: the caller checks) is the same. A piece
//! that follows clean pieces starts at a real statement boundary, so a
//! syntax error in it is recovered within it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::error::Error;
use crate::lang::Language;

/// How a text may be cut.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Split {
    /// Below this many bytes a piece is not worth its overhead.
    pub min_piece: usize,
    /// At most this many pieces.
    pub max_pieces: usize,
    /// Threads that take pieces in turn (this one and helpers).
    pub threads: usize,
}

impl Split {
    /// One thread per core (at most four), and four times as many pieces
    /// of at least 6 KiB (under a millisecond of parsing each): a helper
    /// thread that starts late (a new thread may wait for the core it was
    /// made on) finds fewer pieces left, not a whole half to do, and the
    /// threads finish closer together.
    pub fn for_this_machine() -> Split {
        static CORES: OnceLock<usize> = OnceLock::new();
        let cores = *CORES.get_or_init(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        let threads = cores.min(4);
        Split {
            min_piece: 6 << 10,
            max_pieces: if threads > 1 { 4 * threads } else { 1 },
            threads,
        }
    }

    /// Never cut.
    pub fn never() -> Split {
        Split {
            min_piece: usize::MAX,
            max_pieces: 1,
            threads: 1,
        }
    }
}

/// Parse `source`, in pieces when `split` allows, whole otherwise; `then`
/// runs on each piece's tree on the thread that parsed it (which then
/// drops the tree). The results are in the text's order; byte offsets in
/// every tree are the text's.
pub(crate) fn parse<T: Send>(
    lang: Language,
    source: &str,
    split: Split,
    then: &(dyn Fn(&tree_sitter::Tree) -> T + Sync),
) -> Result<Vec<T>, Error> {
    parse_at(
        lang,
        source,
        &cut_points(lang, source, split),
        split.threads,
        then,
    )
}

/// Parse `source` cut before each of `cuts`, the pieces at once. The
/// pieces up to the first that does not parse cleanly are kept; from
/// there to the end the text is parsed as one piece (so a text with no
/// cut, or whose first piece has an error, is parsed whole). A piece that
/// follows clean pieces starts at a real statement boundary, so an error
/// in it is recovered within it.
fn parse_at<T: Send>(
    lang: Language,
    source: &str,
    cuts: &[usize],
    threads: usize,
    then: &(dyn Fn(&tree_sitter::Tree) -> T + Sync),
) -> Result<Vec<T>, Error> {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(source.len());
    let ranges: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
    let mut pieces = parse_pieces(lang, source, &ranges, threads, then)?;
    let first_error = pieces.iter().position(|(clean, _)| !clean);
    if let Some(k) = first_error.filter(|&k| k + 1 < pieces.len()) {
        pieces.truncate(k);
        let start = ranges.get(k).map_or(0, |r| r.0);
        let rest = parse_piece(lang, source, start, source.len())?;
        pieces.push((true, then(&rest)));
    }
    Ok(pieces.into_iter().map(|(_, done)| done).collect())
}

fn parser(lang: Language) -> Result<tree_sitter::Parser, Error> {
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&lang.grammar())
        .map_err(|e| Error::Parse(e.to_string()))?;
    Ok(parser)
}

/// The pieces, taken in turn by this thread and `threads - 1` helpers,
/// `then` after each: whether the piece parsed cleanly, and what `then`
/// gave, in the pieces' order.
fn parse_pieces<T: Send>(
    lang: Language,
    source: &str,
    ranges: &[(usize, usize)],
    threads: usize,
    then: &(dyn Fn(&tree_sitter::Tree) -> T + Sync),
) -> Result<Vec<(bool, T)>, Error> {
    type Done<T> = Vec<(usize, Result<(bool, T), Error>)>;
    let next = AtomicUsize::new(0);
    let work = || -> Done<T> {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(start, end)) = ranges.get(i) else {
                break;
            };
            let piece = parse_piece(lang, source, start, end)
                .map(|tree| (!tree.root_node().has_error(), then(&tree)));
            done.push((i, piece));
        }
        done
    };
    let helpers = threads
        .saturating_sub(1)
        .min(ranges.len().saturating_sub(1));
    let mut all: Done<T> = std::thread::scope(|scope| {
        // A helper that cannot be started (no threads left under the
        // caller's limits) is not needed: this thread takes every piece.
        let handles: Vec<_> = (0..helpers)
            .map_while(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok())
            .collect();
        let mut all = work();
        for handle in handles {
            all.extend(
                handle
                    .join()
                    .map_err(|_| Error::Parse("a parser thread panicked".into()))?,
            );
        }
        Ok::<_, Error>(all)
    })?;
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, piece)| piece).collect()
}

/// The tree of the text from `start` to `end` alone (the whole text
/// without the cost of included ranges when that is what is asked).
fn parse_piece(
    lang: Language,
    source: &str,
    start: usize,
    end: usize,
) -> Result<tree_sitter::Tree, Error> {
    let mut parser = parser(lang)?;
    if (start, end) != (0, source.len()) {
        parser
            .set_included_ranges(&[range(source, start, end)])
            .map_err(|e| Error::Parse(format!("piece {start}..{end}: {e}")))?;
    }
    parser
        .parse(source, None)
        .ok_or_else(|| Error::Parse("the parser gave no tree".into()))
}

/// The range from `start` to `end`, with their rows and columns.
fn range(source: &str, start: usize, end: usize) -> tree_sitter::Range {
    tree_sitter::Range {
        start_byte: start,
        end_byte: end,
        start_point: point(source, start),
        end_point: point(source, end),
    }
}

fn point(source: &str, offset: usize) -> tree_sitter::Point {
    let before = source.as_bytes().get(..offset).unwrap_or_default();
    let row = before.iter().filter(|&&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    tree_sitter::Point {
        row,
        column: offset - line_start,
    }
}

/// Where to cut `source`: the starts of the second and later pieces, each
/// at the first statement line at or after an even share of the text.
fn cut_points(lang: Language, source: &str, split: Split) -> Vec<usize> {
    let pieces = split.max_pieces.min(source.len() / split.min_piece.max(1));
    let mut cuts: Vec<usize> = Vec::new();
    for k in 1..pieces {
        let target = (source.len() * k / pieces).max(cuts.last().map_or(0, |c| c + 1));
        match statement_line_at_or_after(lang, source, target) {
            Some(at) if source.len() - at >= split.min_piece / 2 => cuts.push(at),
            _ => break,
        }
    }
    cuts
}

/// The first line at or after `from` that starts a top-level statement
/// and does not continue the line before it.
fn statement_line_at_or_after(lang: Language, source: &str, from: usize) -> Option<usize> {
    let bytes = source.as_bytes();
    let mut at = from;
    loop {
        // The start of the next line (or `at` itself at a line start).
        if at > 0 && bytes.get(at - 1) != Some(&b'\n') {
            at += bytes.get(at..)?.iter().position(|&b| b == b'\n')? + 1;
        }
        let line = bytes.get(at..)?;
        if line.is_empty() {
            return None;
        }
        let continued = bytes.get(..at.saturating_sub(1)).is_some_and(|before| {
            before
                .iter()
                .rev()
                .find(|b| !matches!(b, b' ' | b'\t' | b'\r'))
                .is_some_and(|&b| b == b'\\')
        });
        if !continued && starts_statement(lang, line) {
            return Some(at);
        }
        at += 1;
    }
}

/// Whether a line starting with `line` begins a top-level statement that
/// cannot continue the one before it.
fn starts_statement(lang: Language, line: &[u8]) -> bool {
    let keyword = |words: &[&str]| words.iter().any(|w| line.starts_with(w.as_bytes()));
    match lang {
        Language::Python => keyword(&["def ", "class ", "async def ", "import ", "from ", "@"]),
        Language::JavaScript | Language::TypeScript | Language::Tsx => keyword(&[
            "function ",
            "async function ",
            "class ",
            "const ",
            "let ",
            "var ",
            "import ",
            "export ",
        ]),
        Language::Bash => line
            .first()
            .is_some_and(|&b| b.is_ascii_alphabetic() || b == b'_'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Split {
        Split {
            min_piece: 16,
            max_pieces: 4,
            threads: 2,
        }
    }

    #[test]
    fn cuts_fall_on_statement_lines_that_do_not_continue_a_line() {
        let py = "import os\nx = (1,\n2)\ndef f():\n    return 1\nclass A:\n    pass\n";
        for cut in cut_points(Language::Python, py, small()) {
            let line = &py[cut..];
            assert!(
                line.starts_with("def ") || line.starts_with("class "),
                "{line:?}"
            );
        }
        let sh = "echo one two three four \\\nrm -rf /tmp/x\necho five six seven\nls -l /\n";
        let cuts = cut_points(Language::Bash, sh, small());
        assert!(!cuts.is_empty());
        for cut in cuts {
            assert!(
                !sh[cut..].starts_with("rm "),
                "a continued line is not a cut"
            );
        }
    }

    #[test]
    fn a_piece_that_ends_inside_a_construct_makes_the_parse_whole() {
        // A statement line inside a construct that spans it: a string, a
        // heredoc, a template, a compound command, a bracket.
        for (lang, text, inner) in [
            (
                Language::Python,
                "x = \"\"\"\ndef f():\n    pass\n\"\"\"\ny = 1\n",
                "def f",
            ),
            (Language::Python, "x = (a\n@ b)\nclass A: pass\n", "@ b"),
            (
                Language::Bash,
                "cat <<EOF\nrm -rf /\nEOF\necho done\n",
                "rm -rf",
            ),
            (Language::Bash, "if true; then\nrm -rf /\nfi\n", "rm -rf"),
            (Language::Bash, "echo 'a\nrm -rf /'\n", "rm -rf"),
            (
                Language::JavaScript,
                "const s = `\nconst t = 1\n`;\nlet u = 2\n",
                "const t",
            ),
            (
                Language::JavaScript,
                "/*\nfunction f() {}\n*/\n",
                "function f",
            ),
        ] {
            let cut = text.find(inner).expect("inner line");
            assert!(starts_statement(lang, &text.as_bytes()[cut..]), "{text:?}");
            let trees = parse_at(lang, text, &[cut], 2, &|t| t.clone()).expect("parse");
            assert_eq!(trees.len(), 1, "{text:?}");
            assert!(!trees[0].root_node().has_error(), "{text:?}");
        }
    }

    /// The top-level statements of `text` as S-expressions, from the whole
    /// parse or from the pieces cut before each statement line.
    fn statements(lang: Language, text: &str, cuts: &[usize]) -> Vec<String> {
        parse_at(lang, text, cuts, 2, &|t| {
            let root = t.root_node();
            let mut cursor = root.walk();
            root.named_children(&mut cursor)
                .map(|n| format!("{}@{}", n.to_sexp(), n.start_byte()))
                .collect::<Vec<_>>()
        })
        .expect("parse")
        .concat()
    }

    #[test]
    fn pieces_cut_at_statement_lines_are_the_whole_parse_s_statements() {
        // Lines a cut may fall before that a careless cut would misread:
        // JavaScript without semicolons (a cut must not end an expression
        // the next line continues), Python decorators and `from`, shell
        // functions and a line after a continued one.
        let texts = [
            (
                Language::JavaScript,
                "let a = b\nconst c = d\n(e)\nfunction f() { return 1 }\nclass G {}\nexport const h = `x\ny`\nvar i = j\n+ k\nimport('l')\nlet m = 1\n",
            ),
            (
                Language::Python,
                "import os\n@decorator\ndef f():\n    return 1\nfrom x import y\nclass A:\n    def g(self):\n        pass\nasync def h():\n    await z\nx = (1 +\n2)\ndef k(): pass\n",
            ),
            (
                Language::Bash,
                "f() {\n  echo one\n}\necho two \\\n  three\ncase x in\n  y) echo y ;;\nesac\nls -l\nfor i in 1 2; do\n  echo $i\ndone\nrm -f x\n",
            ),
        ];
        for (lang, text) in texts {
            let whole = statements(lang, text, &[]);
            let lines: Vec<usize> = std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .filter(|&at| at > 0 && at < text.len())
                .filter(|&at| starts_statement(lang, &text.as_bytes()[at..]))
                .collect();
            assert!(lines.len() >= 3, "{text:?}");
            // Every statement line alone, and all of them at once.
            for cuts in lines.iter().map(|&at| vec![at]).chain([lines.clone()]) {
                assert_eq!(
                    statements(lang, text, &cuts),
                    whole,
                    "{lang} cut at {cuts:?}"
                );
            }
        }
    }

    #[test]
    fn an_error_after_clean_pieces_stays_in_its_piece() {
        let text = "import os\nos.system('id')\ndef f(:\n    pass\nclass A:\n    pass\n";
        let cuts = [
            text.find("def f").expect("def"),
            text.find("class A").expect("class"),
        ];
        let trees = parse_at(Language::Python, text, &cuts, 2, &|t| t.clone()).expect("parse");
        // The clean first piece is kept; the rest is one piece.
        assert_eq!(trees.len(), 2);
        assert!(!trees[0].root_node().has_error());
        assert!(trees[1].root_node().has_error());
        assert_eq!(trees[1].root_node().end_byte(), text.len());
    }

    #[test]
    fn clean_pieces_keep_the_texts_offsets() {
        let text = "import os\nimport sys\ndef f():\n    os.system('id')\nclass A:\n    pass\n";
        let trees = parse(Language::Python, text, small(), &|t| t.clone()).expect("parse");
        assert!(trees.len() > 1);
        let functions: Vec<&str> = trees
            .iter()
            .flat_map(|t| {
                let root = t.root_node();
                (0..root.named_child_count())
                    .filter_map(move |i| root.named_child(i as u32))
                    .collect::<Vec<_>>()
            })
            .map(|n| &text[n.start_byte()..n.end_byte()])
            .collect();
        assert_eq!(
            functions,
            [
                "import os",
                "import sys",
                "def f():\n    os.system('id')",
                "class A:\n    pass"
            ]
        );
    }
}
