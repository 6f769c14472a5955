//! One pass over a text for the literals of every regex of a language's
//! rules: a regex whose text holds none of the literals every match of it
//! holds cannot match, and is neither compiled nor run.
//!
//! Each [`LazyRegex`] can tell this alone, but asking each one is a pass
//! over the text per regex (nine over a long Python file with the builtin
//! pack); the gate asks for all of them at once. It looks at the whole
//! source, of which the code, the code without comments and every string
//! literal a rule's regex runs on are parts, so a closed gate is exact and
//! an open one is only a maybe: the regex's own check then runs on its
//! text.

use aho_corasick::AhoCorasick;

use crate::lang::Language;
use crate::lazy_regex::LazyRegex;
use crate::rules::Rule;

/// The literals of a language's rule regexes, and which regex needs which.
#[derive(Debug)]
pub(crate) struct RegexGate {
    finder: Option<AhoCorasick>,
    /// By rule index: the needs of its regexes, `None` for a rule that
    /// does not apply to the language.
    rules: Vec<Option<RuleNeeds>>,
}

/// What each regex of one rule needs the text to hold.
#[derive(Debug)]
pub(crate) struct RuleNeeds {
    pub code: Need,
    pub strings: Need,
    pub requires: Vec<Need>,
}

/// One of these literal ids, or nothing (`None`: no finite set of
/// literals, so every text may match).
#[derive(Debug)]
pub(crate) struct Need(Option<Vec<usize>>);

impl Need {
    /// Whether a text whose literals are `present` may match.
    pub fn open(&self, present: &[bool]) -> bool {
        self.0.as_ref().is_none_or(|ids| {
            ids.iter()
                .any(|&id| present.get(id).copied().unwrap_or(true))
        })
    }
}

impl RegexGate {
    /// The gate of `lang` over the regexes of the rules that apply to it.
    pub fn new(lang: Language, rules: &[Rule]) -> RegexGate {
        let mut literals: Vec<Vec<u8>> = Vec::new();
        let mut need = |re: Option<&LazyRegex>| -> Need {
            let Some(re) = re else {
                // No such regex: nothing to open.
                return Need(Some(Vec::new()));
            };
            Need(re.literal_set().map(|set| {
                set.iter()
                    .map(|literal| {
                        literals.push(literal.clone());
                        literals.len() - 1
                    })
                    .collect()
            }))
        };
        let rules = rules
            .iter()
            .map(|rule| {
                rule.applies_to(lang).then(|| RuleNeeds {
                    code: need(rule.code.as_ref()),
                    strings: need(rule.strings.as_ref()),
                    requires: rule.requires.iter().map(|re| need(Some(re))).collect(),
                })
            })
            .collect();
        let finder = AhoCorasick::new(&literals).ok();
        RegexGate {
            finder: finder.filter(|_| !literals.is_empty()),
            rules,
        }
    }

    /// Which literals `text` holds, by id (all of them, when the finder
    /// could not be built).
    pub fn present(&self, text: &str) -> Vec<bool> {
        let Some(finder) = &self.finder else {
            return Vec::new();
        };
        let mut present = vec![false; finder.patterns_len()];
        for m in finder.find_overlapping_iter(text) {
            if let Some(slot) = present.get_mut(m.pattern().as_usize()) {
                *slot = true;
            }
        }
        present
    }

    /// The needs of rule `index`, when it applies to the language.
    pub fn rule(&self, index: usize) -> Option<&RuleNeeds> {
        self.rules.get(index).and_then(Option::as_ref)
    }
}
