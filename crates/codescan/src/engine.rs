//! Scanning one text: parse, walk once (comments, string literals), run the
//! combined query, the code and string expressions, and the embeddings.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use tree_sitter::StreamingIterator;

use crate::error::Error;
use crate::finding::{Finding, HostRef};
use crate::lang::Language;
use crate::rules::{Compiled, LangRules, Rule, RulePack};
use crate::text::{literal_value, role, snippet, LineIndex, NodeRole};

/// How deep code inside strings inside code is followed.
const MAX_DEPTH: usize = 4;
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
/// then a parse and one pass over the tree per text.
#[derive(Debug)]
pub struct Scanner {
    compiled: Compiled,
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
    lines: LineIndex<'a>,
    origin: Origin,
}

impl Unit<'_> {
    fn locate(&self, offset: usize) -> (u32, u32, String) {
        let (row, col) = self.lines.position(offset);
        let (line, column) = self.origin.map(row, col);
        (line, column, snippet(self.lines.line(row)))
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

fn walk(lang: Language, tree: &tree_sitter::Tree, source: &str) -> Walked {
    let mut code = source.as_bytes().to_vec();
    let mut no_comments = code.clone();
    let mut literals = Vec::new();
    let mut cursor = tree.walk();
    'outer: loop {
        let node = cursor.node();
        let descend = match role(lang, &node) {
            NodeRole::Comment => {
                blank(&mut code, node.start_byte(), node.end_byte());
                blank(&mut no_comments, node.start_byte(), node.end_byte());
                false
            }
            NodeRole::String { start, end } => {
                blank(&mut code, start, end);
                literals.push((start, end));
                false
            }
            NodeRole::Word => {
                literals.push((node.start_byte(), node.end_byte()));
                false
            }
            NodeRole::Other => true,
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
    // Whole nodes (comments, string contents) were blanked byte for byte,
    // so the text is still UTF-8; the lossy conversion never replaces.
    Walked {
        code: String::from_utf8_lossy(&code).into_owned(),
        no_comments: String::from_utf8_lossy(&no_comments).into_owned(),
        literals,
    }
}

impl Scanner {
    /// Compile a rule pack.
    pub fn new(pack: &RulePack) -> Result<Scanner, Error> {
        Ok(Scanner {
            compiled: pack.compile()?,
        })
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
        let mut parser = tree_sitter::Parser::new();
        parser
            .set_language(&lang.grammar())
            .map_err(|e| Error::Parse(format!("{file}: {e}")))?;
        let tree = parser
            .parse(source, None)
            .ok_or_else(|| Error::Parse(file.to_owned()))?;
        let unit = Unit {
            file,
            lang,
            source,
            lines: LineIndex::new(source),
            origin,
        };
        let walked = walk(lang, &tree, source);
        self.queries(&unit, rules, &tree, &walked, out);
        self.expressions(&unit, &walked, out);
        hosts(&unit, &walked, out);
        if depth < MAX_DEPTH {
            self.embedded(&unit, rules, &tree, depth, out)?;
        }
        Ok(())
    }

    fn queries(
        &self,
        unit: &Unit<'_>,
        rules: &LangRules,
        tree: &tree_sitter::Tree,
        walked: &Walked,
        out: &mut ScanResult,
    ) {
        let Some(query) = &rules.rules else { return };
        let hit = query.capture_index_for_name("hit");
        let mut cursor = tree_sitter::QueryCursor::new();
        let mut matches = cursor.matches(query, tree.root_node(), unit.source.as_bytes());
        while let Some(m) = matches.next() {
            let Some(rule) = rules
                .pattern_rule
                .get(m.pattern_index)
                .and_then(|&i| self.compiled.rules.get(i))
            else {
                continue;
            };
            let node = m
                .captures()
                .iter()
                .find(|c| Some(c.index) == hit)
                .or_else(|| m.captures().first());
            if let Some(c) = node {
                if requires(rule, &walked.no_comments) {
                    out.findings.push(unit.finding(rule, c.node.start_byte()));
                }
            }
        }
    }

    fn expressions(&self, unit: &Unit<'_>, walked: &Walked, out: &mut ScanResult) {
        for rule in &self.compiled.rules {
            if !rule.applies_to(unit.lang) || !requires(rule, &walked.no_comments) {
                continue;
            }
            if let Some(re) = &rule.code {
                for m in re.find_iter(&walked.code).take(MAX_CODE_MATCHES) {
                    out.findings.push(unit.finding(rule, m.start()));
                }
            }
            if let Some(re) = &rule.strings {
                for &(start, end) in &walked.literals {
                    let Some(text) = unit.source.get(start..end) else {
                        continue;
                    };
                    if let Some(m) = re.find(text) {
                        out.findings.push(unit.finding(rule, start + m.start()));
                    }
                }
            }
        }
    }

    fn embedded(
        &self,
        unit: &Unit<'_>,
        rules: &LangRules,
        tree: &tree_sitter::Tree,
        depth: usize,
        out: &mut ScanResult,
    ) -> Result<(), Error> {
        let Some(query) = &rules.embeds else {
            return Ok(());
        };
        let Some(code) = query.capture_index_for_name("code") else {
            return Ok(());
        };
        let mut inner = Vec::new();
        let mut cursor = tree_sitter::QueryCursor::new();
        let mut matches = cursor.matches(query, tree.root_node(), unit.source.as_bytes());
        while let Some(m) = matches.next() {
            let Some(&target) = rules.pattern_target.get(m.pattern_index) else {
                continue;
            };
            for c in m.captures().iter().filter(|c| c.index == code) {
                let (text, start) = literal_value(unit.lang, &c.node, unit.source);
                if !text.trim().is_empty() {
                    inner.push((target, text, start));
                }
            }
        }
        inner.sort_by_key(|&(_, _, start)| start);
        inner.dedup_by_key(|&mut (_, _, start)| start);
        for (target, text, start) in inner {
            let (row, col) = unit.lines.position(start);
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

fn requires(rule: &Rule, no_comments: &str) -> bool {
    rule.requires.iter().all(|re| re.is_match(no_comments))
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
