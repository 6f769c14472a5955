//! Running a text's live queries over the tree of one piece of it, on the
//! thread that parsed the piece: where the rule queries point, and the
//! code in strings that the embeddings find.
//!
//! Which queries are live is decided once per text, from where its
//! literals are (`crate::prefilter`); each runs only at the nodes its
//! matches can be rooted at (`crate::narrow`), and those whose matches
//! cannot be placed walk the whole tree (together, as the language's
//! combined query, when there are several).

use tree_sitter::StreamingIterator;

use crate::error::Error;
use crate::lang::Language;
use crate::narrow::{match_roots, Where};
use crate::prefilter::{Hits, Pattern};
use crate::rules::{LangRules, Owner};
use crate::text::literal_value;

/// Above this many queries that must walk whole trees, they run as the
/// language's one combined query: most of a query's cost is its walk of
/// the tree (`benches/scan/run.sh`, instruction counts), so one walk beats
/// several.
const COMBINE_OVER: usize = 1;

/// A query that can match the text, with its patterns that can.
pub(crate) struct Live<'r> {
    pub owner: Owner,
    pub query: &'r tree_sitter::Query,
    /// Each pattern that can match, or one `None` when the query's
    /// patterns are not known.
    pub patterns: Vec<Option<&'r Pattern>>,
}

/// What a query found in a piece.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found<'s> {
    /// Rule query `query` (an index of [`LangRules::rules`]) matched; the
    /// finding points at byte `at`.
    Rule { query: usize, at: usize },
    /// An embedding into `to` matched code: `text`, starting at byte
    /// `start` of the text.
    Embed {
        to: Language,
        text: &'s str,
        start: usize,
    },
}

/// The rule queries (and, with `embeds`, the embedding queries) whose
/// literals the text holds, compiled.
pub(crate) fn live_queries<'r>(
    rules: &'r LangRules,
    lang: Language,
    hits: &Hits,
    embeds: bool,
) -> Result<Vec<Live<'r>>, Error> {
    let rule_owners = rules
        .rules
        .iter()
        .enumerate()
        .filter(|(_, q)| q.possible(&hits.present))
        .map(|(i, _)| Owner::Rule(i));
    let embed_owners = rules
        .embeds
        .iter()
        .enumerate()
        .filter(|(_, q)| embeds && q.possible(&hits.present))
        .map(|(i, _)| Owner::Embed(i));
    let mut live = Vec::new();
    for owner in rule_owners.chain(embed_owners) {
        if let Some(query) = rules.query(owner, lang)? {
            live.push(Live {
                owner,
                query,
                patterns: live_patterns(rules, owner, query, hits),
            });
        }
    }
    Ok(live)
}

/// The patterns of an owner's query that can match a text with these hits
/// (one `None`, unknown, when the query's patterns are not known).
pub(crate) fn live_patterns<'r>(
    rules: &'r LangRules,
    owner: Owner,
    query: &tree_sitter::Query,
    hits: &Hits,
) -> Vec<Option<&'r Pattern>> {
    match rules.patterns(owner) {
        Some(known) if known.len() == query.pattern_count() => known
            .iter()
            .filter(|p| p.possible(&hits.present))
            .map(Some)
            .collect(),
        _ => vec![None],
    }
}

/// Run the `live` queries over `tree`, a piece of `source`.
pub(crate) fn find<'s>(
    rules: &LangRules,
    lang: Language,
    live: &[Live<'_>],
    tree: &tree_sitter::Tree,
    hits: &Hits,
    source: &'s str,
) -> Result<Vec<Found<'s>>, Error> {
    let mut out = Vec::new();
    let mut keep =
        |owner: Owner, query: &tree_sitter::Query, m: &tree_sitter::QueryMatch<'_, '_>| {
            record(rules, lang, source, owner, query, m, &mut out);
        };
    let mut cursor = tree_sitter::QueryCursor::new();
    let groups: Vec<Vec<Option<&Pattern>>> = live.iter().map(|l| l.patterns.clone()).collect();
    let mut everywhere = Vec::new();
    cursor.set_max_start_depth(Some(0));
    for (l, at) in live.iter().zip(match_roots(&[tree], hits, &groups)) {
        let Where::RootedAt(nodes) = at else {
            everywhere.push(l);
            continue;
        };
        for node in nodes {
            let mut matches = cursor.matches(l.query, node, source.as_bytes());
            while let Some(m) = matches.next() {
                keep(l.owner, l.query, m);
            }
        }
    }
    cursor.set_max_start_depth(None);
    let root = tree.root_node();
    if everywhere.len() > COMBINE_OVER {
        let all = rules.combined(lang)?;
        let mut matches = cursor.matches(&all.query, root, source.as_bytes());
        while let Some(m) = matches.next() {
            match all.owner.get(m.pattern_index) {
                Some(owner) if everywhere.iter().any(|l| l.owner == *owner) => {
                    keep(*owner, &all.query, m);
                }
                _ => {}
            }
        }
    } else {
        for l in everywhere {
            let mut matches = cursor.matches(l.query, root, source.as_bytes());
            while let Some(m) = matches.next() {
                keep(l.owner, l.query, m);
            }
        }
    }
    Ok(out)
}

/// What one match says: where a rule points (its `@hit`, or its first
/// capture), or the code of an embedding's `@code` captures.
fn record<'s>(
    rules: &LangRules,
    lang: Language,
    source: &'s str,
    owner: Owner,
    query: &tree_sitter::Query,
    m: &tree_sitter::QueryMatch<'_, '_>,
    out: &mut Vec<Found<'s>>,
) {
    match owner {
        Owner::Rule(i) => {
            let hit = query.capture_index_for_name("hit");
            let node = m
                .captures()
                .iter()
                .find(|c| Some(c.index) == hit)
                .or_else(|| m.captures().first());
            if let Some(c) = node {
                out.push(Found::Rule {
                    query: i,
                    at: c.node.start_byte(),
                });
            }
        }
        Owner::Embed(i) => {
            let (Some(code), Some(q)) = (query.capture_index_for_name("code"), rules.embeds.get(i))
            else {
                return;
            };
            for c in m.captures().iter().filter(|c| c.index == code) {
                let (text, start) = literal_value(lang, &c.node, source);
                if !text.trim().is_empty() {
                    out.push(Found::Embed {
                        to: q.owner,
                        text,
                        start,
                    });
                }
            }
        }
    }
}
