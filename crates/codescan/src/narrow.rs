//! Where the live patterns of a query can match: the nodes a query cursor
//! has to start at.
//!
//! A cursor's cost is its walk: every node under where it starts, with
//! every pattern of the query in play (a few milliseconds for a 1,000-line
//! shell script, for one pattern as for fifty). But the prefilter
//! (`crate::prefilter`) knows, for each pattern, literals its predicates
//! need inside its captures, so inside the match's outermost node, and the
//! node kinds that outermost node can have. A match of pattern P is
//! therefore rooted at a node of one of P's root kinds that holds a literal
//! of each of P's literal sets. Walking down from the tree's root only into
//! nodes that hold the literals of some live pattern finds every such
//! node (every ancestor of one holds them too); the cursor then
//! starts at each of them and matches patterns rooted there alone (a
//! maximum start depth of 0), instead of walking the whole tree. A pattern
//! whose roots or literals are not known sends the cursor over the whole
//! tree.

use crate::prefilter::{Hits, Pattern};

/// Where a query cursor has to look for the matches of a group of patterns
/// (one query's).
#[derive(Debug)]
pub(crate) enum Where<'t> {
    /// Everywhere: start at the root and walk the whole tree.
    Everywhere,
    /// Only matches rooted at these nodes (document order).
    RootedAt(Vec<tree_sitter::Node<'t>>),
}

/// For each group of live patterns (a query's), the nodes of `trees`
/// every match of the group is rooted at, or [`Where::Everywhere`] when one
/// of its patterns' matches cannot be placed. One walk of each tree serves
/// every group.
pub(crate) fn match_roots<'t>(
    trees: &[&'t tree_sitter::Tree],
    hits: &Hits,
    groups: &[Vec<Option<&Pattern>>],
) -> Vec<Where<'t>> {
    let plan = Plan::of(hits, groups);
    let mut found: Vec<Vec<tree_sitter::Node<'t>>> = vec![Vec::new(); groups.len()];
    if !plan.patterns.is_empty() {
        let mut held = Vec::with_capacity(plan.sets.len());
        for tree in trees {
            let mut cursor = tree.walk();
            'walk: loop {
                let node = cursor.node();
                if plan.visit(&node, &mut held, &mut found) && cursor.goto_first_child() {
                    continue;
                }
                while !cursor.goto_next_sibling() {
                    if !cursor.goto_parent() {
                        break 'walk;
                    }
                }
            }
        }
    }
    found
        .into_iter()
        .zip(&plan.placeable)
        .map(|(nodes, &placeable)| {
            if placeable {
                Where::RootedAt(nodes)
            } else {
                Where::Everywhere
            }
        })
        .collect()
}

/// One live pattern to look for.
struct Wanted<'a> {
    group: usize,
    roots: &'a [String],
    /// Indices of its literal sets in [`Plan::sets`].
    sets: Vec<usize>,
}

/// What the walk looks for: the live patterns of the groups whose matches
/// can be placed, and where the literals of each of their sets are.
struct Plan<'a> {
    patterns: Vec<Wanted<'a>>,
    /// For each distinct literal set, the (start, end) of each occurrence
    /// of its literals, by start.
    sets: Vec<Vec<(usize, usize)>>,
    /// By group: whether its matches can be placed (its patterns' roots
    /// and literals are known, and so is where the literals are).
    placeable: Vec<bool>,
}

impl<'a> Plan<'a> {
    fn of(hits: &Hits, groups: &[Vec<Option<&'a Pattern>>]) -> Plan<'a> {
        let placeable: Vec<bool> = groups
            .iter()
            .map(|group| {
                hits.complete
                    && group
                        .iter()
                        .all(|p| p.is_some_and(|p| p.roots.is_some() && !p.sets.is_empty()))
            })
            .collect();
        let mut distinct: Vec<&[usize]> = Vec::new();
        let mut patterns = Vec::new();
        for (group, members) in groups.iter().enumerate() {
            if !placeable.get(group).copied().unwrap_or(false) {
                continue;
            }
            for pattern in members.iter().flatten() {
                let sets = pattern
                    .sets
                    .iter()
                    .map(
                        |set| match distinct.iter().position(|d| *d == set.as_slice()) {
                            Some(i) => i,
                            None => {
                                distinct.push(set);
                                distinct.len() - 1
                            }
                        },
                    )
                    .collect();
                patterns.push(Wanted {
                    group,
                    roots: pattern.roots.as_deref().unwrap_or_default(),
                    sets,
                });
            }
        }
        Plan {
            patterns,
            sets: spans_by_set(hits, &distinct),
            placeable,
        }
    }

    /// Record `node` for each group a live pattern of which can be rooted
    /// at it (it holds a literal of each of the pattern's sets and has one
    /// of its root kinds); whether a match may lie inside it at all.
    /// `held` is scratch space, kept between calls.
    fn visit<'t>(
        &self,
        node: &tree_sitter::Node<'t>,
        held: &mut Vec<Option<bool>>,
        found: &mut [Vec<tree_sitter::Node<'t>>],
    ) -> bool {
        let (start, end) = (node.start_byte(), node.end_byte());
        held.clear();
        held.resize(self.sets.len(), None);
        let mut holds = |set: usize| -> bool {
            if let Some(known) = held.get(set).copied().flatten() {
                return known;
            }
            let inside = self
                .sets
                .get(set)
                .is_some_and(|spans| within(spans, start, end));
            if let Some(slot) = held.get_mut(set) {
                *slot = Some(inside);
            }
            inside
        };
        let mut holds_a_match = false;
        let mut kind = None;
        for wanted in &self.patterns {
            if !wanted.sets.iter().all(|&s| holds(s)) {
                continue;
            }
            holds_a_match = true;
            let kind = *kind.get_or_insert_with(|| node.kind());
            if !wanted.roots.iter().any(|r| r == kind) {
                continue;
            }
            if let Some(nodes) = found.get_mut(wanted.group) {
                if nodes.last() != Some(node) {
                    nodes.push(*node);
                }
            }
        }
        holds_a_match
    }
}

/// For each of `sets`, where its literals occur, by start.
fn spans_by_set(hits: &Hits, sets: &[&[usize]]) -> Vec<Vec<(usize, usize)>> {
    let mut sets_of: Vec<Vec<usize>> = vec![Vec::new(); hits.present.len()];
    for (i, set) in sets.iter().enumerate() {
        for &id in set.iter() {
            if let Some(of) = sets_of.get_mut(id) {
                of.push(i);
            }
        }
    }
    let mut out = vec![Vec::new(); sets.len()];
    for &(id, start, end) in &hits.spans {
        for &i in sets_of.get(id).map(Vec::as_slice).unwrap_or_default() {
            if let Some(spans) = out.get_mut(i) {
                spans.push((start, end));
            }
        }
    }
    out
}

/// Whether one of `spans` (by start) lies wholly inside `start..end`.
fn within(spans: &[(usize, usize)], start: usize, end: usize) -> bool {
    let first = spans.partition_point(|&(s, _)| s < start);
    spans
        .get(first..)
        .unwrap_or_default()
        .iter()
        .take_while(|&&(s, _)| s < end)
        .any(|&(_, e)| e <= end)
}
