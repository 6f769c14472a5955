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

use regex::Regex;
use serde::Deserialize;

use crate::error::Error;
use crate::finding::Severity;
use crate::lang::Language;

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
        // Compiling a language's queries is most of a scanner's start-up, so
        // a language is compiled when a text in it is first scanned, unless a
        // user's rule or embedding has a query for it: that is compiled now,
        // so that a bad one is refused, naming its file and rule, before
        // anything runs.
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
                let _ = cell.set(Ok(compile_language(lang, &self.rules, &self.embeds)?));
            }
            langs.insert(lang, cell);
        }
        Ok(Compiled {
            rules,
            langs,
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
    pub code: Option<Regex>,
    pub strings: Option<Regex>,
    pub languages: Option<Vec<Language>>,
    pub requires: Vec<Regex>,
    pub hosts: bool,
}

impl Rule {
    pub fn applies_to(&self, lang: Language) -> bool {
        self.languages
            .as_ref()
            .is_none_or(|l| l.contains(&lang) || l.contains(&lang.family()))
    }
}

/// One language's combined queries: every rule's patterns in one query (one
/// pass over the tree), and the embeddings in another.
#[derive(Debug)]
pub(crate) struct LangRules {
    pub rules: Option<tree_sitter::Query>,
    /// Rule index for each pattern of `rules`.
    pub pattern_rule: Vec<usize>,
    pub embeds: Option<tree_sitter::Query>,
    /// Target language for each pattern of `embeds`.
    pub pattern_target: Vec<Language>,
}

#[derive(Debug)]
pub(crate) struct Compiled {
    pub rules: Vec<Rule>,
    /// Each language's queries, compiled once, when first needed.
    langs: BTreeMap<Language, OnceLock<Result<LangRules, Error>>>,
    defs: Vec<(String, RuleDef)>,
    embeds: Vec<(String, EmbedDef)>,
}

impl Compiled {
    /// A language's queries, compiled on first use.
    pub fn lang(&self, lang: Language) -> Result<Option<&LangRules>, Error> {
        let Some(cell) = self.langs.get(&lang) else {
            return Ok(None);
        };
        match cell.get_or_init(|| compile_language(lang, &self.defs, &self.embeds)) {
            Ok(rules) => Ok(Some(rules)),
            Err(e) => Err(Error::RuleFile {
                origin: "rule pack".into(),
                message: e.to_string(),
            }),
        }
    }
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

fn regex(origin: &str, id: &str, what: &str, pattern: &str) -> Result<Regex, Error> {
    Regex::new(pattern).map_err(|e| Error::Rule {
        origin: origin.to_owned(),
        rule: id.to_owned(),
        message: format!("{what}: {e}"),
    })
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
            .map(|p| regex(origin, id, "code", p))
            .transpose()?,
        strings: def
            .strings
            .as_deref()
            .map(|p| regex(origin, id, "strings", p))
            .transpose()?,
        languages,
        requires: def
            .requires
            .iter()
            .map(|p| regex(origin, id, "requires", p))
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

fn compile_language(
    lang: Language,
    rules: &[(String, RuleDef)],
    embeds: &[(String, EmbedDef)],
) -> Result<LangRules, Error> {
    let grammar = lang.grammar();
    // Every rule's query in one text; (start byte, rule index) per rule, to
    // map each pattern of the combined query back to its rule.
    let mut source = String::new();
    let mut starts = Vec::new();
    for (index, (_, def)) in rules.iter().enumerate() {
        let Some(q) = query_for(def, lang) else {
            continue;
        };
        starts.push((source.len(), index));
        source.push_str(q);
        source.push('\n');
    }
    let rules_query = combined(&grammar, &source, lang).map_err(|e| {
        // Compile each rule alone only to say which one is wrong.
        first_bad(
            &grammar,
            lang,
            rules.iter().filter_map(|(origin, def)| {
                query_for(def, lang).map(|q| (origin.as_str(), def.id.as_str(), q))
            }),
        )
        .unwrap_or(e)
    })?;
    let pattern_rule = owners(rules_query.as_ref(), &starts);
    let mut source = String::new();
    let mut starts = Vec::new();
    for (origin, e) in embeds {
        let (from, to) = embed_languages(origin, e)?;
        if !embeds_in(from, lang) {
            continue;
        }
        starts.push((source.len(), to));
        source.push_str(&e.query);
        source.push('\n');
    }
    let embeds_query = combined(&grammar, &source, lang).map_err(|err| {
        first_bad(
            &grammar,
            lang,
            embeds
                .iter()
                .filter(|(origin, e)| {
                    embed_languages(origin, e).is_ok_and(|(from, _)| embeds_in(from, lang))
                })
                .map(|(origin, e)| (origin.as_str(), "embed", e.query.as_str())),
        )
        .unwrap_or(err)
    })?;
    let pattern_target = owners(embeds_query.as_ref(), &starts);
    Ok(LangRules {
        rules: rules_query,
        pattern_rule,
        embeds: embeds_query,
        pattern_target,
    })
}

/// For each pattern of `query`, the owner of the text it starts in.
fn owners<T: Copy>(query: Option<&tree_sitter::Query>, starts: &[(usize, T)]) -> Vec<T> {
    let Some(query) = query else {
        return Vec::new();
    };
    (0..query.pattern_count())
        .filter_map(|i| {
            let at = query.start_byte_for_pattern(i);
            let k = starts.partition_point(|&(s, _)| s <= at);
            starts.get(k.checked_sub(1)?).map(|&(_, owner)| owner)
        })
        .collect()
}

/// The first query (origin, id, text) that does not compile, as an error
/// naming it.
fn first_bad<'a>(
    grammar: &tree_sitter::Language,
    lang: Language,
    queries: impl Iterator<Item = (&'a str, &'a str, &'a str)>,
) -> Option<Error> {
    queries
        .filter_map(|(origin, id, q)| {
            tree_sitter::Query::new(grammar, q)
                .err()
                .map(|e| Error::Rule {
                    origin: origin.to_owned(),
                    rule: id.to_owned(),
                    message: format!("query for {lang}: {e}"),
                })
        })
        .next()
}

fn combined(
    grammar: &tree_sitter::Language,
    source: &str,
    lang: Language,
) -> Result<Option<tree_sitter::Query>, Error> {
    if source.trim().is_empty() {
        return Ok(None);
    }
    tree_sitter::Query::new(grammar, source)
        .map(Some)
        .map_err(|e| Error::RuleFile {
            origin: "rule pack".into(),
            message: format!("combined query for {lang}: {e}"),
        })
}
