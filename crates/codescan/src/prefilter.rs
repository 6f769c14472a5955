//! Which queries can match a text at all, from the literal text their
//! predicates require.
//!
//! Running a tree-sitter query costs a walk of the whole tree with every
//! pattern in play, and the text predicates (`#eq?`, `#match?`) are only
//! checked once a pattern has matched structurally. But a predicate on a
//! capture that every match has can only hold when the captured text, a
//! part of the source, contains what the predicate asks for: the string of
//! `#eq?` or `#any-of?`, or one of the literals every match of a `#match?`
//! regex starts with (or, when those are not finitely many, ends with). A
//! pattern is possible when the source holds, for each such predicate, one
//! of its literals; a query whose patterns are all impossible cannot match
//! and is not run. Predicates this cannot read (negated ones, captures a
//! match may lack, regexes with neither a finite literal prefix nor
//! suffix) require nothing, so the filter never drops a match.
//!
//! The same reading gives the node kinds a pattern's match is rooted at,
//! which `crate::narrow` uses to run a query only where it can match.
//!
//! tree-sitter reads predicates only when it compiles a query and gives the
//! text ones no public accessor, so this module reads the query's text
//! itself: enough of the query syntax to see nesting, alternations,
//! quantifiers, captures and predicates.

use std::collections::{BTreeSet, HashMap};

use aho_corasick::AhoCorasick;
use regex_syntax::hir::literal::{ExtractKind, Extractor};

/// The literals of a set of queries, found in a text with one pass.
#[derive(Debug, Default)]
pub(crate) struct Literals {
    ids: HashMap<Vec<u8>, usize>,
    list: Vec<Vec<u8>>,
    finder: Option<AhoCorasick>,
}

/// For each pattern of a query, what it needs: every inner set must have
/// one of its literals (by id) in the text. A query with no patterns
/// read (text this module does not follow) is always possible.
#[derive(Debug, Clone, Default)]
pub(crate) struct Needs {
    patterns: Option<Vec<Pattern>>,
}

/// What one pattern of a query needs, and where its matches can be rooted.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pattern {
    /// Literal ids: one of each set must be in the text, inside the match.
    pub sets: Vec<Vec<usize>>,
    /// The node kinds a match's outermost node can have; `None` for any.
    pub roots: Option<Vec<String>>,
}

impl Pattern {
    /// Whether this pattern can match a text with these literals.
    pub fn possible(&self, present: &[bool]) -> bool {
        self.sets.iter().all(|any| {
            any.iter()
                .any(|&id| present.get(id).copied().unwrap_or(true))
        })
    }
}

/// Where the literals of a set of queries occur in one text.
#[derive(Debug, Default)]
pub(crate) struct Hits {
    /// By literal id: whether it occurs at all.
    pub present: Vec<bool>,
    /// Every occurrence as (literal id, start byte, end byte), by start.
    pub spans: Vec<(usize, usize, usize)>,
    /// Whether `spans` lists every occurrence (the finder was built).
    pub complete: bool,
}

impl Literals {
    /// The needs of `query`, its literals added to this set.
    pub fn add_query(&mut self, query: &str) -> Needs {
        let Some(patterns) = parse(query) else {
            return Needs::default();
        };
        let patterns = patterns
            .iter()
            .map(|p| Pattern {
                sets: requirements(p)
                    .into_iter()
                    .map(|set| set.into_iter().map(|l| self.id(l)).collect())
                    .collect(),
                roots: roots(p),
            })
            .collect();
        Needs {
            patterns: Some(patterns),
        }
    }

    fn id(&mut self, literal: Vec<u8>) -> usize {
        if let Some(&id) = self.ids.get(&literal) {
            return id;
        }
        let id = self.list.len();
        self.ids.insert(literal.clone(), id);
        self.list.push(literal);
        id
    }

    /// Build the finder once every query was added.
    pub fn finish(&mut self) {
        if !self.list.is_empty() {
            self.finder = AhoCorasick::new(&self.list).ok();
        }
    }

    /// Every occurrence of every literal in `text`, in one pass. Without a
    /// finder every literal counts as present and no span is known.
    pub fn hits(&self, text: &str) -> Hits {
        let Some(finder) = &self.finder else {
            return Hits {
                present: vec![true; self.list.len()],
                spans: Vec::new(),
                complete: false,
            };
        };
        let mut present = vec![false; self.list.len()];
        let mut spans: Vec<(usize, usize, usize)> = finder
            .find_overlapping_iter(text)
            .map(|m| (m.pattern().as_usize(), m.start(), m.end()))
            .collect();
        for &(id, _, _) in &spans {
            if let Some(slot) = present.get_mut(id) {
                *slot = true;
            }
        }
        // Found in the order they end: nearly sorted by start already,
        // which a stable sort finds runs in.
        spans.sort_by_key(|&(_, start, end)| (start, end));
        Hits {
            present,
            spans,
            complete: true,
        }
    }
}

impl Needs {
    /// Whether a query with these needs can match a text whose literals
    /// are `present`.
    pub fn possible(&self, present: &[bool]) -> bool {
        let Some(patterns) = &self.patterns else {
            return true;
        };
        patterns.iter().any(|p| p.possible(present))
    }

    /// Each pattern's needs and roots, in the query's order; `None` when
    /// the query's text was not followed.
    pub fn patterns(&self) -> Option<&[Pattern]> {
        self.patterns.as_deref()
    }

    /// Forget the roots the grammar does not name as a plain node kind: a
    /// supertype (`expression`) matches nodes of other kinds, and an
    /// unknown name is not followed.
    pub fn check_roots(&mut self, grammar: &tree_sitter::Language) {
        for pattern in self.patterns.iter_mut().flatten() {
            let plain = pattern.roots.iter().flatten().all(|kind| {
                let id = grammar.id_for_node_kind(kind, true);
                id != 0 && !grammar.node_kind_is_supertype(id)
            });
            if !plain {
                pattern.roots = None;
            }
        }
    }
}

/// One element of a query's text.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    /// `( ... )`, `[ ... ]`, or a predicate `(#name? ...)`, with the
    /// captures and the quantifier that follow it.
    Group {
        kind: Kind,
        items: Vec<Item>,
        captures: Vec<String>,
        optional: bool,
        /// Followed by `+`.
        repeated: bool,
    },
    /// A quoted string (an anonymous node, or a predicate's argument).
    Str(String),
    /// A capture name, inside a predicate.
    Capture(String),
    /// Anything else: node and field names, `.`, `_`, `!field`.
    Word(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Paren,
    Bracket,
    Predicate,
}

struct Reader<'a> {
    s: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn skip_space(&mut self) {
        while let Some(&c) = self.s.get(self.at) {
            if c == b';' {
                while self.s.get(self.at).is_some_and(|&c| c != b'\n') {
                    self.at += 1;
                }
            } else if c.is_ascii_whitespace() {
                self.at += 1;
            } else {
                break;
            }
        }
    }

    fn name(&mut self) -> String {
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || b"_-.?!#".contains(&c) || c >= 0x80)
        {
            self.at += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.at]).into_owned()
    }

    /// A quoted string, unescaped as tree-sitter does.
    fn string(&mut self) -> Option<String> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let c = *self.s.get(self.at)?;
            self.at += 1;
            match c {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.s.get(self.at)?;
                    self.at += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'0' => 0,
                        other => other,
                    });
                }
                other => out.push(other),
            }
        }
    }

    /// The items up to `close` (or the end, for `None`).
    fn items(&mut self, close: Option<u8>) -> Option<Vec<Item>> {
        let mut items: Vec<Item> = Vec::new();
        loop {
            self.skip_space();
            let Some(&c) = self.s.get(self.at) else {
                return close.is_none().then_some(items);
            };
            match c {
                b')' | b']' => {
                    self.at += 1;
                    return (Some(c) == close).then_some(items);
                }
                b'(' | b'[' => {
                    self.at += 1;
                    self.skip_space();
                    let kind = match (c, self.s.get(self.at)) {
                        (b'(', Some(b'#')) => Kind::Predicate,
                        (b'(', _) => Kind::Paren,
                        _ => Kind::Bracket,
                    };
                    let inner = self.items(Some(if c == b'(' { b')' } else { b']' }))?;
                    items.push(Item::Group {
                        kind,
                        items: inner,
                        captures: Vec::new(),
                        optional: false,
                        repeated: false,
                    });
                }
                b'"' => items.push(Item::Str(self.string()?)),
                b'@' => {
                    self.at += 1;
                    let name = self.name();
                    if let Some(Item::Group { captures, .. }) = items.last_mut() {
                        captures.push(name.clone());
                    }
                    items.push(Item::Capture(name));
                }
                b'?' | b'*' => {
                    self.at += 1;
                    if let Some(Item::Group { optional, .. }) = items.last_mut() {
                        *optional = true;
                    } else {
                        // A quantifier on something that is not a group:
                        // what it makes optional is not followed here.
                        return None;
                    }
                }
                b'+' => {
                    self.at += 1;
                    if let Some(Item::Group { repeated, .. }) = items.last_mut() {
                        *repeated = true;
                    }
                }
                _ => {
                    let word = self.name();
                    if word.is_empty() {
                        // `:` after a field name, or a character this
                        // reader does not know.
                        if c == b':' {
                            self.at += 1;
                            continue;
                        }
                        return None;
                    }
                    items.push(Item::Word(word));
                }
            }
        }
    }
}

/// The top-level patterns of a query, or `None` for text this module does
/// not follow.
fn parse(query: &str) -> Option<Vec<Item>> {
    let items = Reader {
        s: query.as_bytes(),
        at: 0,
    }
    .items(None)?;
    // Each top-level group is a pattern; its trailing captures are kept on
    // it. Anything else at the top level is not followed.
    let mut out = Vec::new();
    for item in items {
        match item {
            Item::Group {
                kind: Kind::Paren | Kind::Bracket,
                ..
            } => out.push(item),
            Item::Capture(_) => {}
            _ => return None,
        }
    }
    Some(out)
}

/// The captures every match of `item` has, and the predicates that hold in
/// every match of it (those outside alternations and optional groups).
fn mandatory<'a>(item: &'a Item, captures: &mut BTreeSet<&'a str>, preds: &mut Vec<&'a [Item]>) {
    let Item::Group {
        kind,
        items,
        captures: own,
        optional,
        ..
    } = item
    else {
        return;
    };
    if *optional {
        return;
    }
    captures.extend(own.iter().map(String::as_str));
    match kind {
        Kind::Predicate => preds.push(items),
        Kind::Paren => {
            for i in items {
                mandatory(i, captures, preds);
            }
        }
        Kind::Bracket => {
            // A capture every branch has; no predicate inside a branch.
            let mut common: Option<BTreeSet<&str>> = None;
            for i in items.iter().filter(|i| !matches!(i, Item::Capture(_))) {
                let mut mine = BTreeSet::new();
                mandatory(i, &mut mine, &mut Vec::new());
                common = Some(match common {
                    None => mine,
                    Some(c) => c.intersection(&mine).copied().collect(),
                });
            }
            captures.extend(common.unwrap_or_default());
        }
    }
}

/// The node kinds a match of a top-level pattern is rooted at, when this
/// module can tell: the node of `(kind ...)`, each branch of `[...]`, the
/// one node of a `((kind ...) (#pred? ...))` group. `None` (any node) for a
/// wildcard, a quantified or anonymous node, a sibling sequence, a
/// `kind/subtype` name; supertypes are for the caller, who has the grammar.
fn roots(pattern: &Item) -> Option<Vec<String>> {
    let Item::Group {
        kind,
        items,
        optional: false,
        repeated: false,
        ..
    } = pattern
    else {
        return None;
    };
    match kind {
        Kind::Predicate => None,
        Kind::Bracket => {
            let mut all = Vec::new();
            for item in items.iter().filter(|i| !matches!(i, Item::Capture(_))) {
                all.extend(roots(item)?);
            }
            (!all.is_empty()).then_some(all)
        }
        Kind::Paren => match items.first()? {
            Item::Word(name) if name != "_" && !name.contains('/') && name != "MISSING" => {
                Some(vec![name.clone()])
            }
            Item::Group { .. } => {
                let mut nodes = items.iter().filter(|i| {
                    matches!(
                        i,
                        Item::Group {
                            kind: Kind::Paren | Kind::Bracket,
                            ..
                        } | Item::Str(_)
                            | Item::Word(_)
                    )
                });
                match (nodes.next(), nodes.next()) {
                    (Some(only), None) => roots(only),
                    _ => None,
                }
            }
            _ => None,
        },
    }
}

/// What a pattern needs: sets of literals, one of each set in the text.
fn requirements(pattern: &Item) -> Vec<BTreeSet<Vec<u8>>> {
    let mut captures = BTreeSet::new();
    let mut preds = Vec::new();
    mandatory(pattern, &mut captures, &mut preds);
    preds
        .into_iter()
        .filter_map(|p| predicate_literals(p, &captures))
        .collect()
}

/// Every `#match?` regex in `query`, wherever it stands (more than
/// [`Literals::add_query`] reads literals from).
#[cfg(test)]
pub(crate) fn match_regexes(query: &str) -> Vec<String> {
    fn collect(items: &[Item], out: &mut Vec<String>) {
        for item in items {
            let Item::Group { kind, items, .. } = item else {
                continue;
            };
            if let (Kind::Predicate, [Item::Word(name), Item::Capture(_), Item::Str(re)]) =
                (kind, items.as_slice())
            {
                if name == "#match?" {
                    out.push(re.clone());
                }
            }
            collect(items, out);
        }
    }
    let mut out = Vec::new();
    let items = Reader {
        s: query.as_bytes(),
        at: 0,
    }
    .items(None);
    collect(items.as_deref().unwrap_or_default(), &mut out);
    out
}

/// The literals one predicate needs, when it needs any.
fn predicate_literals(pred: &[Item], captures: &BTreeSet<&str>) -> Option<BTreeSet<Vec<u8>>> {
    let (Some(Item::Word(name)), Some(Item::Capture(capture))) = (pred.first(), pred.get(1)) else {
        return None;
    };
    if !captures.contains(capture.as_str()) {
        return None;
    }
    let args: Vec<&str> = pred[2..]
        .iter()
        .map(|i| match i {
            Item::Str(s) => Some(s.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let set: BTreeSet<Vec<u8>> = match (name.as_str(), args.as_slice()) {
        ("#eq?", [s]) => [s.as_bytes().to_vec()].into(),
        ("#any-of?", list) if !list.is_empty() => {
            list.iter().map(|s| s.as_bytes().to_vec()).collect()
        }
        ("#match?", [re]) => regex_literals(re)?,
        _ => return None,
    };
    (!set.iter().any(Vec::is_empty)).then_some(set)
}

/// Literals one of which every match of `re` holds, when they are finitely
/// many: those every match starts with or, failing that, ends with. The
/// builtin pack's regexes are looked up in [`crate::literal_table`].
pub(crate) fn regex_literals(re: &str) -> Option<BTreeSet<Vec<u8>>> {
    match crate::literal_table::lookup(re) {
        Some(known) => known,
        None => extract_regex_literals(re),
    }
}

/// [`regex_literals`] read from the regex itself (a millisecond for some
/// of the builtin ones).
pub(crate) fn extract_regex_literals(re: &str) -> Option<BTreeSet<Vec<u8>>> {
    let hir = regex_syntax::parse(re).ok()?;
    [ExtractKind::Prefix, ExtractKind::Suffix]
        .into_iter()
        .find_map(|kind| {
            let seq = Extractor::new().kind(kind).extract(&hir);
            let literals = seq.literals()?;
            let set: BTreeSet<Vec<u8>> = literals.iter().map(|l| l.as_bytes().to_vec()).collect();
            (!set.is_empty() && !set.iter().any(Vec::is_empty)).then_some(set)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(q: &str) -> Vec<Vec<Vec<String>>> {
        let patterns = parse(q).unwrap_or_else(|| panic!("not read: {q}"));
        patterns
            .iter()
            .map(|p| {
                requirements(p)
                    .into_iter()
                    .map(|s| {
                        s.into_iter()
                            .map(|l| String::from_utf8_lossy(&l).into_owned())
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn predicates_on_captures_every_match_has_need_their_literals() {
        assert_eq!(
            needs(
                r#"(command name: (command_name) @hit (#eq? @hit "rm") argument: (_) @f (#match? @f "^(-r|--rec)"))"#
            ),
            vec![vec![
                vec!["rm".to_owned()],
                vec!["--rec".to_owned(), "-r".to_owned()]
            ]]
        );
        // Both branches capture @hit: needed.
        assert_eq!(
            needs(
                r#"(call function: [(identifier) @hit (attribute attribute: (identifier) @hit)] (#match? @hit "^(exec|eval)$"))"#
            ),
            vec![vec![vec!["eval".to_owned(), "exec".to_owned()]]]
        );
        // Trailing captures on a top-level group, two patterns.
        assert_eq!(
            needs("((file_redirect) @hit (#match? @hit \"/dev/\"))\n(x) @y"),
            vec![vec![vec!["/dev/".to_owned()]], vec![]]
        );
    }

    #[test]
    fn predicates_that_may_not_apply_need_nothing() {
        // Only one branch captures @a; an optional capture; a negated
        // predicate; a regex with no finite prefix; a capture compared to
        // a capture.
        for q in [
            r#"(x [(a) @a (b)] (#eq? @a "k"))"#,
            r#"(x (a)? @a (#eq? @a "k"))"#,
            r#"(x (a) @a (#not-eq? @a "k"))"#,
            r#"(x (a) @a (#match? @a "[a-z]+"))"#,
            r#"(x (a) @a (b) @b (#eq? @a @b))"#,
            r#"(x (a) @a (#match? @a "x?"))"#,
        ] {
            assert_eq!(needs(q), vec![Vec::<Vec<String>>::new()], "{q}");
        }
    }

    fn pattern_roots(q: &str) -> Vec<Option<Vec<String>>> {
        let patterns = parse(q).unwrap_or_else(|| panic!("not read: {q}"));
        patterns.iter().map(roots).collect()
    }

    #[test]
    fn roots_are_the_outermost_node_kinds_of_a_pattern() {
        let some = |kinds: &[&str]| Some(kinds.iter().map(|k| (*k).to_owned()).collect());
        assert_eq!(
            pattern_roots(r#"(command name: (command_name) @n (#eq? @n "rm")) @hit"#),
            vec![some(&["command"])]
        );
        assert_eq!(
            pattern_roots("[(call) (new_expression arguments: (_))] @hit"),
            vec![some(&["call", "new_expression"])]
        );
        assert_eq!(
            pattern_roots(r#"((file_redirect) @hit (#match? @hit "x"))"#),
            vec![some(&["file_redirect"])]
        );
        // Any node: a wildcard, a sibling sequence, a quantified node, an
        // anonymous node, a subtype name, and a branch of any node.
        for q in [
            "(_) @x",
            "((comment) . (function_definition))",
            "(comment)+ @c",
            "(comment)? @c",
            "\"eval\" @e",
            "(expression/identifier) @i",
            "[(call) (_)] @x",
        ] {
            assert!(
                parse(q).is_none_or(|p| p.iter().all(|p| roots(p).is_none())),
                "{q}"
            );
        }
    }

    #[test]
    fn strings_unescape_and_comments_are_skipped() {
        assert_eq!(
            needs("; a comment (#eq? @a \"no\")\n(x (a) @a (#match? @a \"^a\\\\.b\"))"),
            vec![vec![vec!["a.b".to_owned()]]]
        );
    }

    #[test]
    fn a_query_is_possible_only_with_its_literals() {
        let mut lits = Literals::default();
        let n = lits.add_query(r#"(x (a) @a (#eq? @a "rm")) (y (b) @b (#eq? @b "shred"))"#);
        let free = lits.add_query("(z) @z");
        lits.finish();
        assert!(!n.possible(&lits.hits("ls -l").present));
        assert!(n.possible(&lits.hits("sudo shred x").present));
        assert!(n.possible(&lits.hits("farm").present));
        assert!(free.possible(&lits.hits("").present));
    }
}
