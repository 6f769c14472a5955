//! A rule's regex (`code`, `strings`, `requires`), compiled when a text
//! first needs it.
//!
//! Compiling the rule pack's regexes was most of a scanner's start-up (one
//! with `.{0,400}` under `(?s)` alone took 6 ms: every `.` is a UTF-8
//! automaton), and `cordon run --scan` pays start-up on every run. Each
//! regex now also keeps the literals one of which every match holds (its
//! finite prefixes or suffixes, as the query prefilter reads them): a text
//! that holds none of them cannot match, and the regex is neither compiled
//! nor run for it. Those literals are read on first use too.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use regex::Regex;

use crate::prefilter::regex_literals;

#[derive(Debug)]
pub(crate) struct LazyRegex {
    pattern: String,
    /// The literals one of which every match holds; `None` when they are
    /// not finitely many (every text may match). Read on first use.
    literal_set: OnceLock<Option<BTreeSet<Vec<u8>>>>,
    /// Finds them, built on first use.
    literals: OnceLock<Option<AhoCorasick>>,
    regex: OnceLock<Result<Regex, String>>,
}

impl LazyRegex {
    /// A regex to read and compile on first use (a user's rule compiles
    /// it at once with [`LazyRegex::compile`], so that a bad pattern is
    /// refused when the rule is read; the builtin pack is compiled whole
    /// by its tests).
    pub fn new(pattern: &str) -> LazyRegex {
        LazyRegex {
            pattern: pattern.to_owned(),
            literal_set: OnceLock::new(),
            literals: OnceLock::new(),
            regex: OnceLock::new(),
        }
    }

    fn literals(&self) -> Option<&AhoCorasick> {
        self.literals
            .get_or_init(|| {
                self.literal_set()
                    .and_then(|set| AhoCorasick::new(set).ok())
            })
            .as_ref()
    }

    /// Compile now: for a user's rule (so that a pattern too large to
    /// build is refused up front), or to prove a pack compiles.
    pub fn compile(&self) -> Result<&Regex, String> {
        self.regex
            .get_or_init(|| Regex::new(&self.pattern).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The compiled regex when `text` may hold a match; `None` when it
    /// holds none of the literals every match needs.
    pub fn for_text(&self, text: &str) -> Result<Option<&Regex>, String> {
        if self.literals().is_some_and(|l| !l.is_match(text)) {
            return Ok(None);
        }
        self.compile().map(Some)
    }

    /// The literals one of which every match holds; `None` when they are
    /// not finitely many. Read once (for some regexes that takes a
    /// millisecond) for both this regex's own check and the gate's.
    pub fn literal_set(&self) -> Option<&BTreeSet<Vec<u8>>> {
        self.literal_set
            .get_or_init(|| regex_literals(&self.pattern))
            .as_ref()
    }

    /// Whether `text` holds a match.
    pub fn is_match(&self, text: &str) -> Result<bool, String> {
        Ok(self.for_text(text)?.is_some_and(|re| re.is_match(text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_without_the_literals_neither_compiles_nor_matches() {
        let re = LazyRegex::new(r"(?is)(socket|socat).{0,400}(exec|system)");
        assert!(re.literals().is_some());
        assert_eq!(re.is_match("print(1)"), Ok(false));
        assert!(
            re.regex.get().is_none(),
            "compiled for a text that cannot match"
        );
        assert_eq!(re.is_match("s = SOCKET(); os.system('x')"), Ok(true));
        assert!(re.regex.get().is_some());
        // Every case form the regex accepts passes the literals too: the
        // Kelvin sign and the long s fold to k and s under (?i).
        let folded = LazyRegex::new(r"(?i)socket.{0,9}kill");
        assert!(folded.literals().is_some(), "the case forms are literals");
        for text in [
            "SOCKET KILL",
            "\u{17F}ocket \u{212A}ill",
            "SoCkEt; \u{212A}ILL",
        ] {
            assert_eq!(folded.is_match(text), Ok(true), "{text}");
        }
        // No finite literals: every text is tried.
        let any = LazyRegex::new(r"[A-Za-z0-9+/]{40,}");
        assert!(any.literals().is_none());
        assert_eq!(any.is_match(&"QUJD".repeat(12)), Ok(true));
        assert!(LazyRegex::new("(unclosed").compile().is_err());
    }
}
