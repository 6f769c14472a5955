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
//! nodes that hold a needed literal finds every such node; the cursor then
//! starts at each of them and matches patterns rooted there alone (a
//! maximum start depth of 0), instead of walking the whole tree. A pattern
//! whose roots or literals are not known sends the cursor over the whole
//! tree.

use crate::prefilter::{Hits, Pattern};

/// Where a query cursor has to look for the matches of the live patterns.
pub(crate) enum Where<'t> {
    /// Everywhere: start at the root and walk the whole tree.
    Everywhere,
    /// Only matches rooted at these nodes (document order).
    RootedAt(Vec<tree_sitter::Node<'t>>),
}

/// The nodes every match of the `live` patterns is rooted at, or
/// [`Where::Everywhere`] when a pattern's matches cannot be placed.
pub(crate) fn match_roots<'t>(
    tree: &'t tree_sitter::Tree,
    hits: &Hits,
    live: &[Option<&Pattern>],
) -> Where<'t> {
    let Some(plan) = Plan::of(hits, live) else {
        return Where::Everywhere;
    };
    let mut out = Vec::new();
    let mut cursor = tree.walk();
    'walk: loop {
        let node = cursor.node();
        let inside = plan.spans_inside(&node);
        if !inside.is_empty() {
            if plan.can_root_a_match(&node, inside) {
                out.push(node);
            }
            if cursor.goto_first_child() {
                continue;
            }
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'walk;
            }
        }
    }
    Where::RootedAt(out)
}

/// What the walk looks for: each live pattern's root kinds and literal
/// sets, and where those literals are.
struct Plan<'a> {
    patterns: Vec<(&'a [String], &'a [Vec<usize>])>,
    /// (literal id, start, end) of each occurrence of a literal a live
    /// pattern needs, by start.
    spans: Vec<(usize, usize, usize)>,
}

impl<'a> Plan<'a> {
    /// `None` when some live pattern can match anywhere: its roots or its
    /// literals are unknown, or where the literals are is unknown.
    fn of(hits: &Hits, live: &[Option<&'a Pattern>]) -> Option<Plan<'a>> {
        if !hits.complete {
            return None;
        }
        let mut patterns = Vec::new();
        let mut needed = vec![false; hits.present.len()];
        for pattern in live {
            let pattern = (*pattern)?;
            let roots = pattern.roots.as_deref()?;
            if pattern.sets.is_empty() {
                return None;
            }
            for &id in pattern.sets.iter().flatten() {
                *needed.get_mut(id)? = true;
            }
            patterns.push((roots, pattern.sets.as_slice()));
        }
        let spans = hits
            .spans
            .iter()
            .filter(|&&(id, _, _)| needed.get(id).copied().unwrap_or(false))
            .copied()
            .collect();
        Some(Plan { patterns, spans })
    }

    /// The needed literals that lie wholly inside `node` (with, at the
    /// end, those that start inside and end past it).
    fn spans_inside(&self, node: &tree_sitter::Node<'_>) -> &[(usize, usize, usize)] {
        let (start, end) = (node.start_byte(), node.end_byte());
        let first = self.spans.partition_point(|&(_, s, _)| s < start);
        let last = self.spans.partition_point(|&(_, s, _)| s < end);
        let inside = self.spans.get(first..last).unwrap_or_default();
        if inside.iter().any(|&(_, _, e)| e <= end) {
            inside
        } else {
            &[]
        }
    }

    /// Whether a live pattern can be rooted at `node`: the node has one of
    /// its root kinds and holds a literal of each of its sets.
    fn can_root_a_match(
        &self,
        node: &tree_sitter::Node<'_>,
        inside: &[(usize, usize, usize)],
    ) -> bool {
        let kind = node.kind();
        let end = node.end_byte();
        self.patterns.iter().any(|(roots, sets)| {
            roots.iter().any(|r| r == kind)
                && sets.iter().all(|set| {
                    inside
                        .iter()
                        .any(|&(id, _, e)| e <= end && set.contains(&id))
                })
        })
    }
}
