//! The rule pack: rules as data (TOML), merged from cordon's own file and
//! the user's, then compiled for the engine.
//!
//! A rule file holds `[[rule]]` tables and `[[embed]]` tables:
//!
//! ```toml
//! [[rule]]
//! id = "pipe-to-shell"            # a later rule with the same id replaces this one
//! severity = "block"              # info | warn | block
//! message = "downloaded content is piped into a shell"
//! explanation = "why it matters"
//! query.bash = '''(pipeline ...) @hit'''   # tree-sitter query; @hit marks the location
//! query.python = '''...'''                 # also javascript, typescript (default: javascript's)
//! code = '\bxmrig\b'              # regex over the code, comments and string contents blanked
//! strings = '^stratum\+tcp://'    # regex over each string literal (and each shell word)
//! languages = ["bash"]            # limit `code` and `strings` to these languages
//! requires = ['socket', 'dup2']   # each must also occur in the code (comments blanked)
//! disabled = true                 # drop a rule of that id defined earlier
//!
//! [[embed]]                       # code inside a string that is run: scan it as `to`
//! from = "python"
//! to = "bash"
//! query = '''(call function: ... arguments: (argument_list . (string) @code))'''
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::error::Error;
use crate::finding::Severity;
use crate::gate::RegexGate;
use crate::lang::Language;
use crate::lazy_regex::LazyRegex;
use crate::prefilter::{Literals, Needs, Pattern};

/// cordon's own rules (`rules/builtin.toml`).
pub const BUILTIN_RULES: &str = include_str!("../rules/builtin.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PackFile {
    #[serde(default)]
    rule: Vec<RuleDef>,
    #[serde(default)]
    embed: Vec<EmbedDef>,
}

/// Every regex of the builtin pack: each rule's `code`, `strings` and
/// `requires`, and each `#match?` of its queries and embeddings.
#[cfg(test)]
pub(crate) fn builtin_regexes() -> Result<Vec<String>, Error> {
    let pack: PackFile = toml::from_str(BUILTIN_RULES).map_err(|e| Error::RuleFile {
        origin: "builtin".into(),
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    for rule in &pack.rule {
        out.extend(rule.code.iter().chain(&rule.strings).cloned());
        out.extend(rule.requires.iter().cloned());
        for query in rule.query.values() {
            out.extend(crate::prefilter::match_regexes(query));
        }
    }
    for embed in &pack.embed {
        out.extend(crate::prefilter::match_regexes(&embed.query));
    }
    Ok(out)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleDef {
    id: String,
    severity: Option<Severity>,
    message: Option<String>,
    explanation: Option<String>,
    #[serde(default)]
    disabled: bool,
    #[serde(default)]
    query: BTreeMap<String, String>,
    code: Option<String>,
    strings: Option<String>,
    #[serde(default)]
    languages: Vec<String>,
    #[serde(default)]
    requires: Vec<String>,
    /// `hosts`: the rule reports hosts the caller does not allow (see
    /// [`crate::Scanner::host_findings`]).
    check: Option<String>,
    /// From cordon's own file (compiled when first needed; a test proves
    /// it compiles), not from a user's (compiled up front to refuse it).
    #[serde(skip)]
    builtin: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbedDef {
    from: String,
    to: String,
    query: String,
    #[serde(skip)]
    builtin: bool,
}

/// Rules and embeddings, merged from one or more rule files, not yet
/// compiled.
#[derive(Debug, Clone, Default)]
pub struct RulePack {
    rules: Vec<(String, RuleDef)>,
    embeds: Vec<(String, EmbedDef)>,
}

/// What a rule says about itself (for `cordon scan --list-rules` and SARIF).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuleInfo {
    /// The id.
    pub id: String,
    /// The severity.
    pub severity: Severity,
    /// One line.
    pub message: String,
    /// Why it matters.
    pub explanation: String,
    /// Where the rule came from (`builtin` or a file).
    pub origin: String,
}

impl RulePack {
    /// cordon's own rules.
    pub fn builtin() -> Result<RulePack, Error> {
        let mut pack = RulePack::default();
        pack.add("builtin", BUILTIN_RULES, true)?;
        Ok(pack)
    }

    /// Add the rules of a file; a rule whose id exists replaces it.
    pub fn add_file(&mut self, path: &Path) -> Result<(), Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.add_str(&path.display().to_string(), &text)
    }

    /// Add the rules of a rule-file text; `origin` names it in errors.
    pub fn add_str(&mut self, origin: &str, text: &str) -> Result<(), Error> {
        self.add(origin, text, false)
    }

    fn add(&mut self, origin: &str, text: &str, builtin: bool) -> Result<(), Error> {
        let file: PackFile = toml::from_str(text).map_err(|e| Error::RuleFile {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        for mut def in file.rule {
            def.builtin = builtin;
            self.rules.retain(|(_, r)| r.id != def.id);
            if !def.disabled {
                check_complete(origin, &def)?;
                self.rules.push((origin.to_owned(), def));
            }
        }
        for mut e in file.embed {
            e.builtin = builtin;
            self.embeds.push((origin.to_owned(), e));
        }
        Ok(())
    }

    /// Drop the rules with these ids (a profile's `[scan] ignore`).
    pub fn ignore<S: AsRef<str>>(&mut self, ids: &[S]) {
        self.rules
            .retain(|(_, r)| !ids.iter().any(|id| id.as_ref() == r.id));
    }

    /// The rules, in order.
    pub fn rules(&self) -> Vec<RuleInfo> {
        self.rules
            .iter()
            .map(|(origin, r)| RuleInfo {
                id: r.id.clone(),
                severity: r.severity.unwrap_or(Severity::Warn),
                message: r.message.clone().unwrap_or_default(),
                explanation: r.explanation.clone().unwrap_or_default(),
                origin: origin.clone(),
            })
            .collect()
    }

    pub(crate) fn compile(&self) -> Result<Compiled, Error> {
        let mut rules = Vec::with_capacity(self.rules.len());
        for (origin, def) in &self.rules {
            rules.push(compile_rule(origin, def)?);
        }
        for (origin, e) in &self.embeds {
            embed_languages(origin, e)?;
        }
        // Compiling queries is most of a scanner's start-up, so a query is
        // compiled when a text first needs it, except a user's: those are
        // compiled now, so that a bad one is refused, naming its file and
        // rule, before anything runs.
        let mut langs = BTreeMap::new();
        for lang in Language::ALL {
            let user = self
                .rules
                .iter()
                .any(|(_, d)| !d.builtin && query_for(d, lang).is_some())
                || self.embeds.iter().any(|(origin, e)| {
                    !e.builtin
                        && embed_languages(origin, e).is_ok_and(|(from, _)| embeds_in(from, lang))
                });
            let cell = OnceLock::new();
            if user {
                let built = lang_rules(lang, &self.rules, &self.embeds)?;
                compile_queries(lang, &built, true)?;
                let _ = cell.set(Ok(built));
            }
            langs.insert(lang, cell);
        }
        Ok(Compiled {
            rules,
            langs,
            gates: Language::ALL
                .into_iter()
                .map(|l| (l, OnceLock::new()))
                .collect(),
            defs: self.rules.clone(),
            embeds: self.embeds.clone(),
        })
    }
}

fn check_complete(origin: &str, def: &RuleDef) -> Result<(), Error> {
    let err = |message: &str| Error::Rule {
        origin: origin.to_owned(),
        rule: def.id.clone(),
        message: message.to_owned(),
    };
    if def.id.is_empty()
        || !def
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(err("the id must be letters, digits, '-', '_' or '.'"));
    }
    if def.severity.is_none() || def.message.is_none() {
        return Err(err("a rule needs severity and message"));
    }
    let has_pattern = !def.query.is_empty() || def.code.is_some() || def.strings.is_some();
    match def.check.as_deref() {
        Some("hosts") if !has_pattern => Ok(()),
        Some("hosts") => Err(err("check = \"hosts\" takes no query, code or strings")),
        Some(other) => Err(err(&format!("unknown check '{other}' (known: hosts)"))),
        None if has_pattern => Ok(()),
        None => Err(err(
            "a rule needs at least one of query.<language>, code, strings",
        )),
    }
}

/// A rule ready to match.
#[derive(Debug)]
pub(crate) struct Rule {
    pub id: String,
    pub severity: Severity,
    pub message: String,
    pub explanation: String,
    pub code: Option<LazyRegex>,
    pub strings: Option<LazyRegex>,
    pub languages: Option<Vec<Language>>,
    pub requires: Vec<LazyRegex>,
    pub hosts: bool,
}

impl Rule {
    /// Every regex of the rule.
    pub fn regexes(&self) -> impl Iterator<Item = &LazyRegex> {
        self.code.iter().chain(&self.strings).chain(&self.requires)
    }

    /// An error compiling one of the rule's regexes, naming the rule.
    pub fn regex_error(&self, message: String) -> Error {
        Error::Rule {
            origin: "rule pack".into(),
            rule: self.id.clone(),
            message,
        }
    }

    pub fn applies_to(&self, lang: Language) -> bool {
        self.languages
            .as_ref()
            .is_none_or(|l| l.contains(&lang) || l.contains(&lang.family()))
    }
}

/// A query of one rule or embedding for one language, compiled when a text
/// first needs it: when the text holds what the query's predicates need
/// (`crate::prefilter`).
#[derive(Debug)]
pub(crate) struct LazyQuery<T> {
    /// The rule's index, or the embedding's target language.
    pub owner: T,
    origin: String,
    /// From cordon's own rule file.
    builtin: bool,
    /// The rule's id, or `embed`.
    id: String,
    text: String,
    needs: Needs,
    query: OnceLock<Result<tree_sitter::Query, String>>,
}

impl<T> LazyQuery<T> {
    /// Whether the query can match a text with these literals.
    pub fn possible(&self, present: &[bool]) -> bool {
        self.needs.possible(present)
    }

    /// Each pattern's needs and roots, in the query's order, when known.
    pub fn patterns(&self) -> Option<&[Pattern]> {
        self.needs.patterns()
    }

    /// The compiled query; an error names the rule and its file.
    pub fn get(&self, lang: Language) -> Result<&tree_sitter::Query, Error> {
        let compiled = self.query.get_or_init(|| {
            tree_sitter::Query::new(&lang.grammar(), &self.text).map_err(|e| e.to_string())
        });
        compiled.as_ref().map_err(|e| Error::Rule {
            origin: self.origin.clone(),
            rule: self.id.clone(),
            message: format!("query for {lang}: {e}"),
        })
    }
}

/// What a pattern of a language's combined query belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The rule query of this index in [`LangRules::rules`].
    Rule(usize),
    /// The embedding query of this index in [`LangRules::embeds`].
    Embed(usize),
}

/// Every query of a language in one.
#[derive(Debug)]
pub(crate) struct Combined {
    pub query: tree_sitter::Query,
    /// For each pattern, the query it came from.
    pub owner: Vec<Owner>,
}

/// One language's queries: each rule's and each embedding's on its own,
/// and all of them in one query for a text that several can match (most of
/// a query's cost is its walk of the tree, so one walk beats several);
/// each compiled when first needed. And the literals that tell which
/// queries a text can match.
#[derive(Debug)]
pub(crate) struct LangRules {
    pub rules: Vec<LazyQuery<usize>>,
    pub embeds: Vec<LazyQuery<Language>>,
    all: OnceLock<Result<Combined, String>>,
    pub literals: Literals,
    /// Whether every pattern is known to be rooted below the tree's root
    /// node, so that a text cut at its statements matches the same
    /// (`crate::parse`).
    pub patterns_below_top: bool,
}

impl LangRules {
    /// The query of an owner, compiled on first use.
    pub fn query(
        &self,
        owner: Owner,
        lang: Language,
    ) -> Result<Option<&tree_sitter::Query>, Error> {
        match owner {
            Owner::Rule(i) => self.rules.get(i).map(|q| q.get(lang)).transpose(),
            Owner::Embed(i) => self.embeds.get(i).map(|q| q.get(lang)).transpose(),
        }
    }

    /// The needs and roots of each pattern of an owner's query, when known.
    pub fn patterns(&self, owner: Owner) -> Option<&[Pattern]> {
        match owner {
            Owner::Rule(i) => self.rules.get(i).and_then(LazyQuery::patterns),
            Owner::Embed(i) => self.embeds.get(i).and_then(LazyQuery::patterns),
        }
    }

    /// Every query in one, compiled on first use.
    pub fn combined(&self, lang: Language) -> Result<&Combined, Error> {
        let all = self.all.get_or_init(|| {
            let mut source = String::new();
            let mut starts = Vec::new();
            let rules = self
                .rules
                .iter()
                .enumerate()
                .map(|(i, q)| (Owner::Rule(i), &q.text));
            let embeds = self
                .embeds
                .iter()
                .enumerate()
                .map(|(i, q)| (Owner::Embed(i), &q.text));
            for (owner, text) in rules.chain(embeds) {
                starts.push((source.len(), owner));
                source.push_str(text);
                source.push('\n');
            }
            match tree_sitter::Query::new(&lang.grammar(), &source) {
                Ok(query) => {
                    let owner = owners(&query, &starts);
                    Ok(Combined { query, owner })
                }
                // A query on its own names the rule that is wrong.
                Err(e) => Err(self
                    .rules
                    .iter()
                    .map(|q| q.get(lang).err())
                    .chain(self.embeds.iter().map(|q| q.get(lang).err()))
                    .flatten()
                    .next()
                    .map_or_else(
                        || format!("combined query for {lang}: {e}"),
                        |e| e.to_string(),
                    )),
            }
        });
        all.as_ref().map_err(|message| Error::RuleFile {
            origin: "rule pack".into(),
            message: message.clone(),
        })
    }
}

/// For each pattern of `query`, the owner of the text it starts in.
fn owners(query: &tree_sitter::Query, starts: &[(usize, Owner)]) -> Vec<Owner> {
    (0..query.pattern_count())
        .filter_map(|i| {
            let at = query.start_byte_for_pattern(i);
            let k = starts.partition_point(|&(s, _)| s <= at);
            starts.get(k.checked_sub(1)?).map(|&(_, owner)| owner)
        })
        .collect()
}

#[derive(Debug)]
pub(crate) struct Compiled {
    pub rules: Vec<Rule>,
    /// Each language's queries, read once, when first needed.
    langs: BTreeMap<Language, OnceLock<Result<LangRules, Error>>>,
    /// Each language's regex literals, read once, when first needed.
    gates: BTreeMap<Language, OnceLock<RegexGate>>,
    defs: Vec<(String, RuleDef)>,
    embeds: Vec<(String, EmbedDef)>,
}

impl Compiled {
    /// A language's queries, read on first use.
    pub fn lang(&self, lang: Language) -> Result<Option<&LangRules>, Error> {
        let Some(cell) = self.langs.get(&lang) else {
            return Ok(None);
        };
        match cell.get_or_init(|| lang_rules(lang, &self.defs, &self.embeds)) {
            Ok(rules) => Ok(Some(rules)),
            Err(e) => Err(Error::RuleFile {
                origin: "rule pack".into(),
                message: e.to_string(),
            }),
        }
    }

    /// The gate of a language's rule regexes, built on first use.
    pub fn gate(&self, lang: Language) -> Option<&RegexGate> {
        let cell = self.gates.get(&lang)?;
        Some(cell.get_or_init(|| RegexGate::new(lang, &self.rules)))
    }

    /// Compile every query of every language now.
    pub fn compile_all(&self) -> Result<(), Error> {
        for rule in &self.rules {
            for re in rule.regexes() {
                re.compile().map_err(|e| rule.regex_error(e))?;
            }
        }
        for lang in Language::ALL {
            if let Some(rules) = self.lang(lang)? {
                compile_queries(lang, rules, false)?;
            }
        }
        Ok(())
    }
}

/// Compile the queries of `rules` (only the user's with `user_only`).
fn compile_queries(lang: Language, rules: &LangRules, user_only: bool) -> Result<(), Error> {
    for q in rules.rules.iter().filter(|q| !(user_only && q.builtin)) {
        q.get(lang)?;
    }
    for q in rules.embeds.iter().filter(|q| !(user_only && q.builtin)) {
        q.get(lang)?;
    }
    let any = !rules.rules.is_empty() || !rules.embeds.is_empty();
    if !user_only && any {
        rules.combined(lang)?;
    }
    Ok(())
}

/// The languages an embedding is from and to; an error names a bad one.
fn embed_languages(origin: &str, e: &EmbedDef) -> Result<(Language, Language), Error> {
    let from: Language = e.from.parse().map_err(|message| Error::RuleFile {
        origin: origin.to_owned(),
        message: format!("embed from: {message}"),
    })?;
    let to: Language = e.to.parse().map_err(|message| Error::RuleFile {
        origin: origin.to_owned(),
        message: format!("embed to: {message}"),
    })?;
    if !e.query.contains("@code") {
        return Err(Error::RuleFile {
            origin: origin.to_owned(),
            message: "an embed query must capture @code".into(),
        });
    }
    Ok((from, to))
}

/// Whether an embedding from `from` is looked for in texts in `lang`.
fn embeds_in(from: Language, lang: Language) -> bool {
    from.family() == lang.family()
        || (from == Language::JavaScript && lang.family() == Language::TypeScript)
}

/// A rule's regex, compiled on first use; a user's is compiled now, so
/// that a bad one is refused before anything runs.
fn regex(origin: &str, def: &RuleDef, what: &str, pattern: &str) -> Result<LazyRegex, Error> {
    let err = |e: String| Error::Rule {
        origin: origin.to_owned(),
        rule: def.id.clone(),
        message: format!("{what}: {e}"),
    };
    let re = LazyRegex::new(pattern);
    if !def.builtin {
        re.compile().map_err(err)?;
    }
    Ok(re)
}

fn compile_rule(origin: &str, def: &RuleDef) -> Result<Rule, Error> {
    let id = def.id.as_str();
    let languages = if def.languages.is_empty() {
        None
    } else {
        let mut out = Vec::new();
        for l in &def.languages {
            out.push(l.parse::<Language>().map_err(|message| Error::Rule {
                origin: origin.to_owned(),
                rule: id.to_owned(),
                message,
            })?);
        }
        Some(out)
    };
    for key in def.query.keys() {
        if !["bash", "python", "javascript", "typescript"].contains(&key.as_str()) {
            return Err(Error::Rule {
                origin: origin.to_owned(),
                rule: id.to_owned(),
                message: format!(
                    "query.{key}: not a language (bash, python, javascript, typescript)"
                ),
            });
        }
    }
    Ok(Rule {
        id: id.to_owned(),
        severity: def.severity.unwrap_or(Severity::Warn),
        message: def.message.clone().unwrap_or_default(),
        explanation: def.explanation.clone().unwrap_or_default(),
        code: def
            .code
            .as_deref()
            .map(|p| regex(origin, def, "code", p))
            .transpose()?,
        strings: def
            .strings
            .as_deref()
            .map(|p| regex(origin, def, "strings", p))
            .transpose()?,
        languages,
        requires: def
            .requires
            .iter()
            .map(|p| regex(origin, def, "requires", p))
            .collect::<Result<_, _>>()?,
        hosts: def.check.as_deref() == Some("hosts"),
    })
}

/// The query text a rule has for a language: its own, or for TypeScript the
/// JavaScript one.
fn query_for(def: &RuleDef, lang: Language) -> Option<&str> {
    match lang.family() {
        Language::TypeScript => def
            .query
            .get("typescript")
            .or_else(|| def.query.get("javascript")),
        other => def.query.get(other.as_str()),
    }
    .map(String::as_str)
}

fn lang_rules(
    lang: Language,
    rules: &[(String, RuleDef)],
    embeds: &[(String, EmbedDef)],
) -> Result<LangRules, Error> {
    let mut literals = Literals::default();
    let grammar = lang.grammar();
    let mut lazy = |origin: &str, builtin: bool, id: &str, text: &str| {
        let mut needs = literals.add_query(text);
        needs.check_roots(&grammar);
        LazyQuery {
            owner: (),
            origin: origin.to_owned(),
            builtin,
            id: id.to_owned(),
            text: text.to_owned(),
            needs,
            query: OnceLock::new(),
        }
    };
    let mut rule_queries = Vec::new();
    for (index, (origin, def)) in rules.iter().enumerate() {
        if let Some(q) = query_for(def, lang) {
            rule_queries.push(lazy(origin, def.builtin, &def.id, q).with_owner(index));
        }
    }
    let mut embed_queries = Vec::new();
    for (origin, e) in embeds {
        let (from, to) = embed_languages(origin, e)?;
        if embeds_in(from, lang) {
            embed_queries.push(lazy(origin, e.builtin, "embed", &e.query).with_owner(to));
        }
    }
    literals.finish();
    let patterns_below_top = rule_queries
        .iter()
        .map(LazyQuery::patterns)
        .chain(embed_queries.iter().map(LazyQuery::patterns))
        .all(|patterns| {
            patterns.is_some_and(|patterns| {
                patterns.iter().all(|p| {
                    p.roots
                        .as_ref()
                        .is_some_and(|roots| roots.iter().all(|r| r != lang.top_kind()))
                })
            })
        });
    Ok(LangRules {
        rules: rule_queries,
        embeds: embed_queries,
        all: OnceLock::new(),
        literals,
        patterns_below_top,
    })
}

impl LazyQuery<()> {
    fn with_owner<T>(self, owner: T) -> LazyQuery<T> {
        LazyQuery {
            owner,
            origin: self.origin,
            builtin: self.builtin,
            id: self.id,
            text: self.text,
            needs: self.needs,
            query: self.query,
        }
    }
}
