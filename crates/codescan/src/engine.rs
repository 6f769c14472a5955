//! Scanning one text: find where the rules' literals are, parse (a long
//! text in pieces on several cores) and, on each piece's thread, walk it
//! once (comments, string literals) and run the rule queries it can match;
//! then the code and string expressions, the hosts, and the embeddings.

use std::cell::OnceCell;
use std::collections::HashSet;
use std::sync::{LazyLock, OnceLock};

use regex::Regex;

use crate::error::Error;
use crate::finding::{Finding, HostRef};
use crate::gate::{Need, RegexGate, RuleNeeds};
use crate::lang::Language;
use crate::lazy_regex::LazyRegex;
use crate::matches::{find, live_queries, Found, Live};
use crate::parse::{parse, Split};
use crate::prefilter::Hits;
use crate::rules::{Compiled, LangRules, Rule, RulePack};
use crate::text::{role, snippet, Landmarks, LineIndex, NodeRole};

/// How deep code inside strings inside code is followed.
const MAX_DEPTH: usize = 4;
/// From this many bytes on, one pass over the text for every rule regex's
/// literals ([`RegexGate`]) replaces a pass per regex. Below, the passes
/// cost less than reading the literals of every regex (two of the builtin
/// pack's take a millisecond each), which a short-lived scanner pays.
const GATE_FROM: usize = 8 << 10;
/// Matches of one code expression kept per text (the rest add nothing).
const MAX_CODE_MATCHES: usize = 16;

/// A string that is a URL and nothing else (prose that mentions one, such
/// as a docstring, is not a host the code contacts).
static URL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^\s*(?:https?|wss?|ftp)://(?:[^@/\s]*@)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::(\d{1,5}))?(?:[/?#]\S*)?\s*$",
    )
    .ok()
});
/// Bash's network redirection.
static DEV_TCP: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"/dev/(?:tcp|udp)/([A-Za-z0-9.:\[\]-]+)/(\d{1,5})").ok());

/// A compiled rule pack, ready to scan text. Build it once; scanning is
/// then a parse, one walk of the tree, and a pass of each query whose
/// literals the text holds.
#[derive(Debug)]
pub struct Scanner {
    compiled: Compiled,
    /// How long texts are cut to be parsed on several cores.
    split: Split,
}

/// Findings of one scan, and the hosts the code names.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScanResult {
    /// Every finding, by file, line, column.
    pub findings: Vec<Finding>,
    /// Hosts named as URLs (or `/dev/tcp/HOST/PORT`), for
    /// [`Scanner::host_findings`].
    pub hosts: Vec<HostRef>,
}

impl ScanResult {
    /// Add another result (of another file).
    pub fn extend(&mut self, other: ScanResult) {
        self.findings.extend(other.findings);
        self.hosts.extend(other.hosts);
    }
}

/// Where the first byte of a text lies in the file it was found in
/// (0-based row, column in characters).
#[derive(Debug, Clone, Copy)]
struct Origin {
    row: usize,
    col: usize,
}

impl Origin {
    fn map(self, row: usize, col: usize) -> (u32, u32) {
        let (r, c) = if row == 0 {
            (self.row, self.col + col)
        } else {
            (self.row + row, col)
        };
        (
            u32::try_from(r + 1).unwrap_or(u32::MAX),
            u32::try_from(c + 1).unwrap_or(u32::MAX),
        )
    }
}

/// One text being scanned.
struct Unit<'a> {
    file: &'a str,
    lang: Language,
    source: &'a str,
    /// Built when a first position is asked for (most texts have none).
    lines: OnceCell<LineIndex<'a>>,
    origin: Origin,
}

impl<'a> Unit<'a> {
    fn lines(&self) -> &LineIndex<'a> {
        self.lines.get_or_init(|| LineIndex::new(self.source))
    }

    fn locate(&self, offset: usize) -> (u32, u32, String) {
        let lines = self.lines();
        let (row, col) = lines.position(offset);
        let (line, column) = self.origin.map(row, col);
        (line, column, snippet(lines.line(row)))
    }

    fn finding(&self, rule: &Rule, offset: usize) -> Finding {
        let (line, column, snippet) = self.locate(offset);
        Finding {
            rule: rule.id.clone(),
            severity: rule.severity,
            message: rule.message.clone(),
            explanation: rule.explanation.clone(),
            file: self.file.to_owned(),
            line,
            column,
            snippet,
            language: self.lang.as_str().to_owned(),
        }
    }
}

/// Comments and strings of a tree, found in one walk.
struct Walked {
    /// The text with comments and string contents blanked.
    code: String,
    /// The text with comments blanked.
    no_comments: String,
    /// Byte ranges of string contents and shell words.
    literals: Vec<(usize, usize)>,
}

fn blank(bytes: &mut [u8], start: usize, end: usize) {
    if let Some(range) = bytes.get_mut(start..end) {
        for b in range.iter_mut().filter(|b| **b != b'\n') {
            *b = b' ';
        }
    }
}

/// What every piece's walk needs of the whole text, and the regex gate's
/// look at it.
struct Prepared<'r> {
    hits: Hits,
    live: Vec<Live<'r>>,
    landmarks: Option<Landmarks>,
    gate: Option<(&'r RegexGate, Vec<bool>)>,
}

/// What scanning one piece of a text found on the thread that parsed it.
struct Piece<'s> {
    marks: Marks,
    found: Vec<Found<'s>>,
}

/// What one walk of a tree finds: byte ranges of comments, of string
/// contents, and of literals (string contents and shell words, in the
/// tree's order).
#[derive(Debug, Default, PartialEq, Eq)]
struct Marks {
    comments: Vec<(usize, usize)>,
    strings: Vec<(usize, usize)>,
    literals: Vec<(usize, usize)>,
}

/// The text with the marks of each of its trees applied.
fn walked<'m>(source: &str, marks: impl Iterator<Item = &'m Marks>) -> Walked {
    let mut code = source.as_bytes().to_vec();
    let mut no_comments = code.clone();
    let mut literals = Vec::new();
    for m in marks {
        for &(start, end) in &m.comments {
            blank(&mut code, start, end);
            blank(&mut no_comments, start, end);
        }
        for &(start, end) in &m.strings {
            blank(&mut code, start, end);
        }
        literals.extend_from_slice(&m.literals);
    }
    Walked {
        code: into_text(code),
        no_comments: into_text(no_comments),
        literals,
    }
}

/// Whole nodes (comments, string contents) were blanked byte for byte, so
/// the text is still UTF-8 and is taken as it is, without a copy; the
/// lossy conversion is there for a tree whose node cut a character.
fn into_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Walk a tree once for its comments, strings and shell words, going
/// only into nodes that hold a landmark (into all without landmarks).
fn mark(lang: Language, tree: &tree_sitter::Tree, landmarks: Option<&Landmarks>) -> Marks {
    let mut marks = Marks::default();
    let mut landmarks = landmarks.map(Landmarks::reader);
    let mut cursor = tree.walk();
    'outer: loop {
        let node = cursor.node();
        let descend = match role(lang, &node) {
            NodeRole::Comment => {
                marks.comments.push((node.start_byte(), node.end_byte()));
                false
            }
            NodeRole::String { start, end } => {
                marks.strings.push((start, end));
                marks.literals.push((start, end));
                false
            }
            NodeRole::Word => {
                marks.literals.push((node.start_byte(), node.end_byte()));
                false
            }
            NodeRole::Other => landmarks
                .as_mut()
                .is_none_or(|l| l.any_within(node.start_byte(), node.end_byte())),
        };
        if descend && cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'outer;
            }
        }
    }
    marks
}

impl Scanner {
    /// Compile a rule pack.
    pub fn new(pack: &RulePack) -> Result<Scanner, Error> {
        Ok(Scanner {
            compiled: pack.compile()?,
            split: Split::for_this_machine(),
        })
    }

    /// Compile every query now (a scanner otherwise compiles a query when
    /// a text first needs it): for a long-lived scanner, or to prove a
    /// rule pack compiles.
    pub fn compile_all(&self) -> Result<(), Error> {
        self.compiled.compile_all()
    }

    /// A scanner with cordon's own rules only.
    pub fn builtin() -> Result<Scanner, Error> {
        Scanner::new(&RulePack::builtin()?)
    }

    /// Scan one text. `file` names it in findings.
    pub fn scan(&self, file: &str, lang: Language, source: &str) -> Result<ScanResult, Error> {
        let mut out = ScanResult::default();
        self.unit(file, lang, source, Origin { row: 0, col: 0 }, 0, &mut out)?;
        let mut seen = HashSet::new();
        out.findings
            .sort_by(|a, b| (a.line, a.column, &a.rule).cmp(&(b.line, b.column, &b.rule)));
        // One finding per rule and line: a line that matches a rule twice
        // (a query and a string expression, or code scanned again inside
        // a string) says nothing new the second time.
        out.findings
            .retain(|f| seen.insert((f.rule.clone(), f.line)));
        // A host in code inside a string is seen in both languages.
        let mut seen = HashSet::new();
        out.hosts.retain(|h| seen.insert((h.host.clone(), h.line)));
        Ok(out)
    }

    /// Findings of the `check = "hosts"` rule for every host that `allowed`
    /// refuses.
    pub fn host_findings(
        &self,
        hosts: &[HostRef],
        allowed: impl Fn(&str, Option<u16>) -> bool,
    ) -> Vec<Finding> {
        let Some(rule) = self.compiled.rules.iter().find(|r| r.hosts) else {
            return Vec::new();
        };
        hosts
            .iter()
            .filter(|h| !allowed(&h.host, h.port))
            .map(|h| Finding {
                rule: rule.id.clone(),
                severity: rule.severity,
                message: format!("{} ({})", rule.message, h.host),
                explanation: rule.explanation.clone(),
                file: h.file.clone(),
                line: h.line,
                column: h.column,
                snippet: h.snippet.clone(),
                language: String::new(),
            })
            .collect()
    }

    fn unit(
        &self,
        file: &str,
        lang: Language,
        source: &str,
        origin: Origin,
        depth: usize,
        out: &mut ScanResult,
    ) -> Result<(), Error> {
        let Some(rules) = self.compiled.lang(lang)? else {
            return Ok(());
        };
        let split = if rules.patterns_below_top {
            self.split
        } else {
            Split::never()
        };
        // Found by the first thread done parsing, while the others parse.
        let prepared: OnceLock<Result<Prepared<'_>, Error>> = OnceLock::new();
        let prepare = || -> Result<Prepared<'_>, Error> {
            let hits = rules.literals.hits(source);
            Ok(Prepared {
                live: live_queries(rules, lang, &hits, depth < MAX_DEPTH)?,
                hits,
                landmarks: Landmarks::new(lang, source),
                gate: (source.len() >= GATE_FROM)
                    .then(|| self.compiled.gate(lang))
                    .flatten()
                    .map(|g| (g, g.present(source))),
            })
        };
        let pieces = parse(lang, source, split, &|tree| {
            let Ok(p) = prepared.get_or_init(prepare) else {
                return None;
            };
            Some(
                find(rules, lang, &p.live, tree, &p.hits, source).map(|found| Piece {
                    marks: mark(lang, tree, p.landmarks.as_ref()),
                    found,
                }),
            )
        })
        .map_err(|e| match e {
            Error::Parse(why) => Error::Parse(format!("{file}: {why}")),
            other => other,
        })?;
        let prepared = match prepared.into_inner() {
            Some(Ok(prepared)) => prepared,
            Some(Err(e)) => return Err(e),
            None => return Err(Error::Parse(format!("{file}: no piece was parsed"))),
        };
        let pieces = pieces
            .into_iter()
            .map(|piece| {
                piece.ok_or_else(|| Error::Parse(format!("{file}: a piece was not scanned")))
            })
            .collect::<Result<Result<Vec<Piece<'_>>, Error>, Error>>()??;
        let unit = Unit {
            file,
            lang,
            source,
            lines: OnceCell::new(),
            origin,
        };
        let walked = walked(source, pieces.iter().map(|p| &p.marks));
        let inner = self.found(&unit, rules, &pieces, &walked, out)?;
        self.expressions(&unit, prepared.gate.as_ref(), &walked, out)?;
        hosts(&unit, &walked, out);
        self.embedded(&unit, inner, depth, out)?;
        Ok(())
    }

    /// The findings of the rule queries whose rules' `requires` the text
    /// meets, and the code inside strings that is run, as (target, text,
    /// offset).
    fn found<'s>(
        &self,
        unit: &Unit<'s>,
        rules: &LangRules,
        pieces: &[Piece<'s>],
        walked: &Walked,
        out: &mut ScanResult,
    ) -> Result<Vec<(Language, &'s str, usize)>, Error> {
        let mut inner = Vec::new();
        let mut met: Vec<Option<bool>> = vec![None; rules.rules.len()];
        for found in pieces.iter().flat_map(|p| &p.found) {
            match *found {
                Found::Rule { query, at } => {
                    let Some(rule) = rules
                        .rules
                        .get(query)
                        .and_then(|q| self.compiled.rules.get(q.owner))
                    else {
                        continue;
                    };
                    let Some(slot) = met.get_mut(query) else {
                        continue;
                    };
                    let holds = match *slot {
                        Some(known) => known,
                        None => *slot.insert(requires(rule, &walked.no_comments)?),
                    };
                    if holds {
                        out.findings.push(unit.finding(rule, at));
                    }
                }
                Found::Embed { to, text, start } => inner.push((to, text, start)),
            }
        }
        Ok(inner)
    }

    /// The findings of the rules' `code` regexes (on the code view) and
    /// `strings` regexes (on each literal).
    fn expressions(
        &self,
        unit: &Unit<'_>,
        gate: Option<&(&RegexGate, Vec<bool>)>,
        walked: &Walked,
        out: &mut ScanResult,
    ) -> Result<(), Error> {
        for (index, rule) in self.compiled.rules.iter().enumerate() {
            if !rule.applies_to(unit.lang) {
                continue;
            }
            // Without a gate every need is open: each regex checks its own
            // text for its literals.
            let needs = gate.and_then(|(g, present)| Some((g.rule(index)?, present)));
            let open = |need: fn(&RuleNeeds) -> &Need| {
                needs.is_none_or(|(n, present)| need(n).open(present))
            };
            let requires_open =
                needs.is_none_or(|(n, present)| n.requires.iter().all(|r| r.open(present)));
            if !requires_open || !requires(rule, &walked.no_comments)? {
                continue;
            }
            if let Some(re) = rule
                .code
                .as_ref()
                .filter(|_| open(|n| &n.code))
                .map(|re| compiled(rule, re, &walked.code))
                .transpose()?
                .flatten()
            {
                for m in re.find_iter(&walked.code).take(MAX_CODE_MATCHES) {
                    out.findings.push(unit.finding(rule, m.start()));
                }
            }
            let Some(strings) = rule.strings.as_ref().filter(|_| open(|n| &n.strings)) else {
                continue;
            };
            for &(start, end) in &walked.literals {
                let Some(text) = unit.source.get(start..end) else {
                    continue;
                };
                // The source may hold the literals outside every string:
                // each string is asked before the regex is compiled.
                if let Some(m) = compiled(rule, strings, text)?.and_then(|re| re.find(text)) {
                    out.findings.push(unit.finding(rule, start + m.start()));
                }
            }
        }
        Ok(())
    }

    /// Scan the code found inside strings, in its own language.
    fn embedded(
        &self,
        unit: &Unit<'_>,
        mut inner: Vec<(Language, &str, usize)>,
        depth: usize,
        out: &mut ScanResult,
    ) -> Result<(), Error> {
        inner.sort_by_key(|&(_, _, start)| start);
        inner.dedup_by_key(|&mut (_, _, start)| start);
        for (target, text, start) in inner {
            let (row, col) = unit.lines().position(start);
            let (line, column) = unit.origin.map(row, col);
            let origin = Origin {
                row: line as usize - 1,
                col: column as usize - 1,
            };
            self.unit(unit.file, target, text, origin, depth + 1, out)?;
        }
        Ok(())
    }
}

/// `re` of `rule` compiled, when `text` may hold a match.
fn compiled<'r>(rule: &Rule, re: &'r LazyRegex, text: &str) -> Result<Option<&'r Regex>, Error> {
    re.for_text(text).map_err(|e| rule.regex_error(e))
}

/// Whether every `requires` regex of `rule` matches the text without
/// comments.
fn requires(rule: &Rule, no_comments: &str) -> Result<bool, Error> {
    for re in &rule.requires {
        if !re.is_match(no_comments).map_err(|e| rule.regex_error(e))? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn hosts(unit: &Unit<'_>, walked: &Walked, out: &mut ScanResult) {
    let (Some(url), Some(dev_tcp)) = (URL.as_ref(), DEV_TCP.as_ref()) else {
        return;
    };
    for &(start, end) in &walked.literals {
        let Some(text) = unit.source.get(start..end) else {
            continue;
        };
        let found = url
            .captures(text)
            .or_else(|| dev_tcp.captures(text))
            .and_then(|c| Some((c.get(1)?, c.get(2))));
        let Some((host, port)) = found else { continue };
        let name = host.as_str().trim_start_matches('[').trim_end_matches(']');
        if is_loopback(name) {
            continue;
        }
        let (line, column, snippet) = unit.locate(start + host.start());
        out.hosts.push(HostRef {
            host: name.to_owned(),
            port: port.and_then(|p| p.as_str().parse().ok()),
            file: unit.file.to_owned(),
            line,
            column,
            snippet,
        });
    }
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.starts_with("127.") || host == "::1"
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tree_sitter::StreamingIterator;

    use super::*;
    use crate::matches::live_patterns;
    use crate::narrow::{match_roots, Where};
    use crate::prefilter::Pattern;
    use crate::rules::Owner;

    /// A match: its query, its pattern, and each capture's index and byte
    /// range.
    type Match = (String, usize, Vec<(u32, usize, usize)>);

    /// Every match of every query of `lang` in `source`, as (owner,
    /// pattern, captured ranges), found over the whole tree or only at the
    /// nodes `crate::narrow` places them at, as scans run them.
    fn matches(rules: &LangRules, lang: Language, source: &str, narrowed: bool) -> Vec<Match> {
        let mut parser = tree_sitter::Parser::new();
        parser.set_language(&lang.grammar()).expect("grammar");
        let tree = parser.parse(source, None).expect("parse");
        let trees = [&tree];
        let hits = rules.literals.hits(source);
        let owners: Vec<Owner> = (0..rules.rules.len())
            .map(Owner::Rule)
            .chain((0..rules.embeds.len()).map(Owner::Embed))
            .collect();
        let queries: Vec<&tree_sitter::Query> = owners
            .iter()
            .map(|&o| rules.query(o, lang).expect("query").expect("owner"))
            .collect();
        let groups: Vec<Vec<Option<&Pattern>>> = owners
            .iter()
            .zip(&queries)
            .map(|(&o, q)| match narrowed {
                true => live_patterns(rules, o, q, &hits),
                false => vec![None],
            })
            .collect();
        let mut cursor = tree_sitter::QueryCursor::new();
        let mut out = Vec::new();
        let placed = match_roots(&trees, &hits, &groups);
        for ((owner, query), at) in owners.iter().zip(&queries).zip(placed) {
            let (nodes, depth) = match at {
                Where::RootedAt(nodes) => (nodes, Some(0)),
                Where::Everywhere => (vec![tree.root_node()], None),
            };
            cursor.set_max_start_depth(depth);
            for node in nodes {
                let mut found = cursor.matches(query, node, source.as_bytes());
                while let Some(m) = found.next() {
                    let captures = m
                        .captures()
                        .iter()
                        .map(|c| (c.index, c.node.start_byte(), c.node.end_byte()))
                        .collect();
                    out.push((format!("{owner:?}"), m.pattern_index, captures));
                }
            }
        }
        out.sort();
        out
    }

    /// The texts of the corpora the scanner is measured on: the malicious
    /// snippets and the repository's scripts, the host's Python standard
    /// library and npm's JavaScript when the machine has them.
    fn corpus() -> Vec<(PathBuf, Language)> {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut roots = vec![
            repo.join("crates/codescan/tests/corpus"),
            repo.join(".ci"),
            repo.join("benches"),
            repo.join("clients"),
            PathBuf::from("/usr/lib/node_modules/npm/lib"),
            PathBuf::from("/usr/share/nodejs/npm/lib"),
        ];
        if let Ok(entries) = std::fs::read_dir("/usr/lib") {
            roots.extend(
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                    .map(|e| e.path()),
            );
        }
        roots
            .iter()
            .filter(|r| r.is_dir())
            .flat_map(|r| crate::walk::files_under(r, None).unwrap_or_default())
            .map(|f| (f.path, f.language))
            .collect()
    }

    /// Cutting a text to parse it on several cores (`crate::parse`) only
    /// saves time: every text of the corpora that parses cleanly, cut into
    /// pieces as small as 256 bytes, gives the same findings and hosts as
    /// parsed whole.
    #[test]
    fn texts_cut_into_pieces_scan_like_whole_ones() {
        let whole = Scanner {
            split: Split::never(),
            ..Scanner::builtin().expect("builtin rules")
        };
        let small = Split {
            min_piece: 256,
            max_pieces: 4,
            threads: 2,
        };
        let cut = Scanner {
            split: small,
            ..Scanner::builtin().expect("builtin rules")
        };
        let (mut compared, mut cut_texts, mut findings) = (0, 0, 0);
        for (path, lang) in corpus() {
            let Ok(source) = std::fs::read_to_string(&path) else {
                continue;
            };
            let errors = parse(lang, &source, Split::never(), &|t| {
                t.root_node().has_error()
            });
            if errors.expect("parse").contains(&true) {
                continue;
            }
            let name = path.display().to_string();
            let expected = whole.scan(&name, lang, &source).expect("scan");
            let got = cut.scan(&name, lang, &source).expect("scan");
            assert_eq!(expected, got, "{name}");
            compared += 1;
            if parse(lang, &source, small, &|_| ()).expect("parse").len() > 1 {
                cut_texts += 1;
            }
            findings += expected.findings.len() + expected.hosts.len();
        }
        eprintln!("{compared} texts, {cut_texts} of them cut, {findings} findings and hosts");
        assert!(cut_texts >= 100 && findings >= 100, "too little compared");
    }

    /// The walk for comments and strings that goes only into nodes holding
    /// a landmark byte (`crate::text::Landmarks`) marks exactly what the
    /// walk into every node marks, over every text of the corpora whole
    /// and cut off halfway (a cut text has parse errors, whose recovery
    /// makes the odd trees: in one, Python 2's backquoted strings).
    /// JavaScript is read as TypeScript and TSX as well.
    #[test]
    fn the_walk_into_landmarked_nodes_marks_what_the_whole_walk_does() {
        let mut parser = tree_sitter::Parser::new();
        let mut per_lang: std::collections::BTreeMap<Language, (usize, usize)> =
            std::collections::BTreeMap::new();
        let texts = corpus().into_iter().flat_map(|(path, lang)| {
            let also: &[Language] = match lang {
                Language::JavaScript => &[Language::TypeScript, Language::Tsx],
                _ => &[],
            };
            std::iter::once((path.clone(), lang))
                .chain(also.iter().map(move |&l| (path.clone(), l)))
        });
        for (path, lang) in texts {
            let Ok(whole) = std::fs::read_to_string(&path) else {
                continue;
            };
            let half = whole.floor_char_boundary(whole.len() / 2);
            for source in [whole.as_str(), &whole[..half]] {
                parser.set_language(&lang.grammar()).expect("grammar");
                let tree = parser.parse(source, None).expect("parse");
                let landmarks = Landmarks::new(lang, source);
                let everywhere = mark(lang, &tree, None);
                let landmarked = mark(lang, &tree, landmarks.as_ref());
                assert_eq!(everywhere, landmarked, "{}", path.display());
                let seen = per_lang.entry(lang).or_default();
                seen.0 += 1;
                seen.1 += everywhere.comments.len() + everywhere.strings.len();
            }
        }
        eprintln!("texts, comments and strings by language: {per_lang:?}");
        for lang in [
            Language::Python,
            Language::JavaScript,
            Language::TypeScript,
            Language::Tsx,
        ] {
            let (texts, marked) = per_lang.get(&lang).copied().unwrap_or_default();
            assert!(
                texts >= 20 && marked >= 1000,
                "{lang:?}: too little compared"
            );
        }
    }

    /// The regex gate (`crate::gate`) only saves work: over every text of
    /// the corpora, every builtin rule regex that matches the text it runs
    /// on (the code, the code without comments, a string literal) finds
    /// its gate open for the whole source.
    #[test]
    fn the_regex_gate_is_open_wherever_a_rule_regex_matches() {
        let scanner = Scanner::builtin().expect("builtin rules");
        scanner.compile_all().expect("compile");
        let mut parser = tree_sitter::Parser::new();
        let (mut texts, mut matched) = (0, 0);
        for (path, lang) in corpus() {
            let Ok(source) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Some(gate) = scanner.compiled.gate(lang) else {
                continue;
            };
            parser.set_language(&lang.grammar()).expect("grammar");
            let tree = parser.parse(&source, None).expect("parse");
            let walked = walked(&source, [mark(lang, &tree, None)].iter());
            let present = gate.present(&source);
            texts += 1;
            for (index, rule) in scanner.compiled.rules.iter().enumerate() {
                let Some(needs) = gate.rule(index) else {
                    continue;
                };
                let literals: Vec<&str> = walked
                    .literals
                    .iter()
                    .filter_map(|&(s, e)| source.get(s..e))
                    .collect();
                let runs = [
                    (rule.code.as_ref(), &needs.code, vec![walked.code.as_str()]),
                    (rule.strings.as_ref(), &needs.strings, literals),
                ]
                .into_iter()
                .chain(
                    rule.requires
                        .iter()
                        .zip(&needs.requires)
                        .map(|(re, need)| (Some(re), need, vec![walked.no_comments.as_str()])),
                );
                for (re, need, on) in runs {
                    let Some(re) = re else { continue };
                    let re = re.compile().expect("compiled");
                    if on.iter().any(|text| re.is_match(text)) {
                        matched += 1;
                        assert!(
                            need.open(&present),
                            "{}: {} shut out",
                            path.display(),
                            rule.id
                        );
                    }
                }
            }
        }
        eprintln!("{texts} texts, {matched} regex matches");
        assert!(texts >= 100 && matched >= 100, "too little compared");
    }

    /// Narrowing (`crate::narrow`) only saves work: over every text of the
    /// corpora, each query of the builtin pack finds exactly the same
    /// matches starting only at the placed nodes as over the whole tree.
    #[test]
    fn narrowed_queries_find_every_match_the_whole_tree_has() {
        let scanner = Scanner::builtin().expect("builtin rules");
        let files = corpus();
        let mut per_lang: std::collections::BTreeMap<Language, (usize, usize)> =
            std::collections::BTreeMap::new();
        for (path, lang) in &files {
            let Ok(source) = std::fs::read_to_string(path) else {
                continue;
            };
            let Some(rules) = scanner.compiled.lang(*lang).expect("rules") else {
                continue;
            };
            let whole = matches(rules, *lang, &source, false);
            let narrowed = matches(rules, *lang, &source, true);
            assert_eq!(whole, narrowed, "{}", path.display());
            let seen = per_lang.entry(*lang).or_default();
            seen.0 += 1;
            seen.1 += whole.len();
        }
        eprintln!("files and matches by language: {per_lang:?}");
        for lang in [Language::Python, Language::Bash, Language::JavaScript] {
            let (files, matched) = per_lang.get(&lang).copied().unwrap_or_default();
            assert!(
                files >= 10 && matched >= 10,
                "{lang}: only {files} files and {matched} matches compared"
            );
        }
    }
}
