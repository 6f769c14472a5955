//! Errors a caller can cause: a bad rule file, an unreadable input.

use std::path::PathBuf;

/// What went wrong, with what and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rule file is not valid TOML or not a rule pack.
    #[error("{origin}: {message}")]
    RuleFile {
        /// The file (or `builtin`).
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A rule's pattern does not compile.
    #[error("{origin}: rule '{rule}': {message}")]
    Rule {
        /// The file the rule came from.
        origin: String,
        /// The rule id.
        rule: String,
        /// What is wrong.
        message: String,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The language of a file could not be told.
    #[error("cannot tell the language of {}: name it with --lang (python, javascript, typescript, bash)", path.display())]
    UnknownLanguage {
        /// The path.
        path: PathBuf,
    },
    /// The parser gave up (it was cancelled or has no language).
    #[error("tree-sitter could not parse {0}")]
    Parse(String),
}
