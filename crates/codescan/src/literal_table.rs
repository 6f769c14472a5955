//! The literals of the builtin pack's regexes, read once when the pack is
//! written instead of in every process that scans.
//!
//! Reading a regex's literals (`regex_syntax`'s extractor, in
//! [`crate::prefilter::extract_regex_literals`]) costs up to a millisecond
//! for some of the builtin regexes (case-insensitive alternations), about
//! 5 ms for the pack: more than the scan of a short command line, paid
//! again by every `cordon run --scan` and `cordon scan`. The answers only
//! depend on the regex's text, so they are kept in
//! `rules/builtin.literals.json`, and a test fails when that file differs
//! from what the extractor gives for every regex of the pack today (a
//! changed rule, a new `regex-syntax`): regenerate it with
//!
//! ```text
//! CORDON_UPDATE_LITERALS=1 cargo test -p cordon-codescan literal_table
//! ```
//!
//! A regex the file does not hold (a user's rule) is read as before.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// Regex text → its literals (`null`: not finitely many).
const TABLE: &str = include_str!("../rules/builtin.literals.json");

type Table = HashMap<String, Option<Literals>>;

/// A regex's literals: as strings, or, when one is not UTF-8 (a prefix cut
/// inside a character), every one in hexadecimal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Literals {
    Text(Vec<String>),
    Hex { hex: Vec<String> },
}

impl Literals {
    #[cfg(test)]
    fn of(set: BTreeSet<Vec<u8>>) -> Literals {
        let set: Vec<Vec<u8>> = set.into_iter().collect();
        match set
            .iter()
            .map(|l| String::from_utf8(l.clone()))
            .collect::<Result<Vec<String>, _>>()
        {
            Ok(text) => Literals::Text(text),
            Err(_) => Literals::Hex {
                hex: set
                    .iter()
                    .map(|l| l.iter().map(|b| format!("{b:02x}")).collect())
                    .collect(),
            },
        }
    }

    /// The literals as bytes; `None` for a hexadecimal one that is not.
    fn bytes(&self) -> Option<BTreeSet<Vec<u8>>> {
        match self {
            Literals::Text(text) => Some(text.iter().map(|l| l.as_bytes().to_vec()).collect()),
            Literals::Hex { hex } => hex.iter().map(|l| unhex(l)).collect(),
        }
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// The literals of `re` when the table holds it: `Some(None)` when they
/// are not finitely many, `None` when `re` is not in the table (or its
/// entry does not decode).
pub(crate) fn lookup(re: &str) -> Option<Option<BTreeSet<Vec<u8>>>> {
    static PARSED: OnceLock<Table> = OnceLock::new();
    // A table that does not parse is no table: every regex is read.
    let table = PARSED.get_or_init(|| serde_json::from_str(TABLE).unwrap_or_default());
    match table.get(re)? {
        None => Some(None),
        Some(literals) => literals.bytes().map(Some),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::prefilter::extract_regex_literals;

    /// The table as the extractor gives it today, in the file's form.
    fn fresh_table() -> String {
        let table: BTreeMap<String, Option<Literals>> = crate::rules::builtin_regexes()
            .expect("the builtin pack")
            .into_iter()
            .map(|re| {
                let literals = extract_regex_literals(&re).map(Literals::of);
                (re, literals)
            })
            .collect();
        let mut text = serde_json::to_string_pretty(&table).expect("json");
        text.push('\n');
        text
    }

    #[test]
    fn the_table_is_what_the_extractor_gives_for_every_builtin_regex() {
        let fresh = fresh_table();
        if std::env::var_os("CORDON_UPDATE_LITERALS").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/rules/builtin.literals.json");
            std::fs::write(path, &fresh).expect("write the table");
            return;
        }
        assert!(
            TABLE == fresh,
            "rules/builtin.literals.json is stale: regenerate it with \
             CORDON_UPDATE_LITERALS=1 cargo test -p cordon-codescan literal_table"
        );
    }

    fn literals_entry(re: &str) -> Option<Option<Literals>> {
        let table: Table = serde_json::from_str(TABLE).expect("the table parses");
        table.into_iter().find(|(k, _)| k == re).map(|(_, v)| v)
    }

    #[test]
    fn a_regex_of_the_table_is_looked_up_and_any_other_is_not() {
        let regexes = crate::rules::builtin_regexes().expect("the builtin pack");
        assert!(regexes.len() > 50, "{}", regexes.len());
        for re in &regexes {
            assert_eq!(lookup(re), Some(extract_regex_literals(re)), "{re}");
        }
        assert!(
            regexes
                .iter()
                .any(|re| matches!(literals_entry(re), Some(Some(Literals::Hex { .. })))),
            "the hexadecimal form is exercised"
        );
        assert_eq!(lookup("a regex of no pack (x|y)"), None);
    }
}
