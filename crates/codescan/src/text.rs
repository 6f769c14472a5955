//! Positions in source text, and what of a tree is comment or string.

use std::sync::OnceLock;

use crate::lang::Language;

/// Byte offsets of line starts, for turning an offset into line and column.
#[derive(Debug)]
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a str) -> LineIndex<'a> {
        let newlines = memchr::memchr_iter(b'\n', text.as_bytes());
        let mut starts = Vec::with_capacity(newlines.clone().count() + 1);
        starts.push(0);
        starts.extend(newlines.map(|i| i + 1));
        LineIndex { text, starts }
    }

    /// 0-based row and 0-based column in characters of a byte offset.
    pub fn position(&self, offset: usize) -> (usize, usize) {
        let row = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let start = self.starts[row];
        let col = self
            .text
            .get(start..offset.min(self.text.len()))
            .map_or(0, |s| s.chars().count());
        (row, col)
    }

    /// The text of a 0-based row, without its newline.
    pub fn line(&self, row: usize) -> &'a str {
        let start = self.starts.get(row).copied().unwrap_or(self.text.len());
        let end = self
            .starts
            .get(row + 1)
            .map_or(self.text.len(), |e| e.saturating_sub(1));
        self.text.get(start..end.max(start)).unwrap_or("")
    }
}

/// A line cut for display: trimmed, at most 200 characters.
pub(crate) fn snippet(line: &str) -> String {
    let t = line.trim();
    match t.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_owned(),
    }
}

/// What a node is to the scanner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeRole {
    Comment,
    /// A string literal; its contents are the byte range given.
    String {
        start: usize,
        end: usize,
    },
    /// A shell word: code, but also matched by string rules.
    Word,
    Other,
}

/// What a node kind is to the scanner, decided once per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Comment,
    /// A string literal whose contents lie `front` bytes after its start
    /// and `back` bytes before its end.
    Quoted {
        front: usize,
        back: usize,
    },
    /// A Python string, whose contents lie between its `string_start` and
    /// `string_end` children.
    PythonString,
    StringStart,
    StringEnd,
    Word,
    Other,
}

fn class(lang: Language, kind: &str) -> Class {
    match (lang, kind) {
        (_, "comment") => Class::Comment,
        (Language::Python, "string") => Class::PythonString,
        (Language::Python, "string_start") => Class::StringStart,
        (Language::Python, "string_end") => Class::StringEnd,
        (Language::Bash, "string" | "raw_string") => Class::Quoted { front: 1, back: 1 },
        (Language::Bash, "ansi_c_string") => Class::Quoted { front: 2, back: 1 },
        (Language::Bash, "word") => Class::Word,
        (
            Language::JavaScript | Language::TypeScript | Language::Tsx,
            "string" | "template_string",
        ) => Class::Quoted { front: 1, back: 1 },
        _ => Class::Other,
    }
}

/// The class of every node kind of a language, by kind id: the walk asks
/// for every node of a tree, and comparing kind names costs more than the
/// rest of the walk. Named kinds only (TypeScript's `string` type keyword
/// is not a string literal).
fn classes(lang: Language) -> &'static [Class] {
    static TABLES: [OnceLock<Vec<Class>>; Language::ALL.len()] =
        [const { OnceLock::new() }; Language::ALL.len()];
    let slot = Language::ALL.iter().position(|&l| l == lang).unwrap_or(0);
    TABLES[slot].get_or_init(|| {
        let grammar = lang.grammar();
        (0..grammar.node_kind_count())
            .map(|id| {
                let id = u16::try_from(id).unwrap_or(u16::MAX);
                match grammar.node_kind_for_id(id) {
                    Some(kind) if grammar.node_kind_is_named(id) => class(lang, kind),
                    _ => Class::Other,
                }
            })
            .collect()
    })
}

fn class_of(table: &[Class], node: &tree_sitter::Node<'_>) -> Class {
    table
        .get(usize::from(node.kind_id()))
        .copied()
        .unwrap_or(Class::Other)
}

/// The role of a node, by grammar.
pub(crate) fn role(lang: Language, node: &tree_sitter::Node<'_>) -> NodeRole {
    let table = classes(lang);
    let (s, e) = (node.start_byte(), node.end_byte());
    match class_of(table, node) {
        Class::Comment => NodeRole::Comment,
        Class::Quoted { front, back } if e >= s + front + back => NodeRole::String {
            start: s + front,
            end: e - back,
        },
        Class::PythonString => python_string(table, node).unwrap_or(NodeRole::Other),
        Class::Word => NodeRole::Word,
        _ => NodeRole::Other,
    }
}

/// A Python string's contents lie between its `string_start` (prefix and
/// quotes) and `string_end` children.
fn python_string(table: &[Class], node: &tree_sitter::Node<'_>) -> Option<NodeRole> {
    let count = node.child_count();
    let first = node.child(0)?;
    let last = node.child(count.checked_sub(1)?)?;
    if class_of(table, &first) != Class::StringStart
        || class_of(table, &last) != Class::StringEnd
        || count < 2
    {
        return None;
    }
    Some(NodeRole::String {
        start: first.end_byte(),
        end: last.start_byte(),
    })
}

/// Where a text holds the bytes that every comment and string literal
/// of its language holds one of: `#`, quotes and the backquote in
/// Python; `/`, quotes and the backquote in JavaScript and TypeScript. A node whose text holds
/// none of them has no comment or string inside, so the walk for them
/// need not go into it (most of a tree, in dense code). Shell has none:
/// every shell word is a literal.
#[derive(Debug)]
pub(crate) struct Landmarks {
    at: Vec<usize>,
}

impl Landmarks {
    pub fn new(lang: Language, source: &str) -> Option<Landmarks> {
        let [a, b, c, d] = match lang {
            Language::Bash => return None,
            // Python 2's backquotes are strings to the grammar too.
            Language::Python => *b"#\"'`",
            Language::JavaScript | Language::TypeScript | Language::Tsx => *b"/\"'`",
        };
        let bytes = source.as_bytes();
        let mut one = memchr::memchr_iter(a, bytes).peekable();
        let mut three = memchr::memchr3_iter(b, c, d, bytes).peekable();
        let mut at = Vec::new();
        // Both come in order: merge them.
        loop {
            let next = match (one.peek(), three.peek()) {
                (Some(x), Some(y)) if x < y => one.next(),
                (_, Some(_)) => three.next(),
                (Some(_), None) => one.next(),
                (None, None) => break,
            };
            at.extend(next);
        }
        Some(Landmarks { at })
    }

    /// A reader for one walk, which asks about nodes in the walk's order.
    pub fn reader(&self) -> LandmarkReader<'_> {
        LandmarkReader {
            at: &self.at,
            next: 0,
            last_start: 0,
        }
    }
}

/// Answers, for nodes asked about in the order a walk meets them (start
/// offsets never go back), whether a node's text holds a landmark.
pub(crate) struct LandmarkReader<'a> {
    at: &'a [usize],
    /// The first landmark at or after the last start asked about.
    next: usize,
    last_start: usize,
}

impl LandmarkReader<'_> {
    /// Whether a landmark lies in `start..end`.
    pub fn any_within(&mut self, start: usize, end: usize) -> bool {
        if start < self.last_start {
            // Not the walk's order: look it up afresh.
            self.next = self.at.partition_point(|&p| p < start);
        } else {
            while self.at.get(self.next).is_some_and(|&p| p < start) {
                self.next += 1;
            }
        }
        self.last_start = start;
        self.at.get(self.next).is_some_and(|&p| p < end)
    }
}

/// The contents of a string-literal or word node as the code would use
/// them (quotes removed; escapes are left as written).
pub(crate) fn literal_value<'s>(
    lang: Language,
    node: &tree_sitter::Node<'_>,
    src: &'s str,
) -> (&'s str, usize) {
    let start = node.start_byte();
    match role(lang, node) {
        NodeRole::String { start, end } => (src.get(start..end).unwrap_or(""), start),
        _ => (src.get(start..node.end_byte()).unwrap_or(""), start),
    }
}
