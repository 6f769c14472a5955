//! cordon-codescan: pre-execution scanning of code with tree-sitter.
//!
//! A [`Scanner`] holds a compiled [`RulePack`] (cordon's own rules, shipped
//! as data in `rules/builtin.toml`, plus any rule files a user adds) and
//! turns source text into [`Finding`]s: rule id, severity, location,
//! snippet, explanation. Code rules are tree-sitter queries or regular
//! expressions over the code with comments and string contents blanked, so
//! that text inside a string or a comment does not trigger them; string
//! rules look only inside string literals. Code carried inside strings that
//! is run (`sh -c '...'`, `os.system("...")`, `python3 -c '...'`) is parsed
//! again in its own language and scanned too.
//!
//! The scanner is advisory: a heuristic gate in front of the sandbox, which
//! is the control. Findings feed a decision (warn, ask, block) and the audit
//! record; a clean scan proves nothing.

#![forbid(unsafe_code)]

mod command;
mod engine;
mod error;
mod finding;
mod gate;
mod lang;
mod lazy_regex;
mod literal_table;
mod matches;
mod narrow;
mod parse;
mod prefilter;
mod rules;
pub mod sarif;
mod text;
mod walk;

pub use command::{units_for_argv, Unit};
pub use engine::{ScanResult, Scanner};
pub use error::Error;
pub use finding::{Finding, HostRef, Severity};
pub use lang::Language;
pub use rules::{RuleInfo, RulePack, BUILTIN_RULES};
pub use walk::{files_under, SourceFile};
