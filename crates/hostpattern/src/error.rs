//! The one error of this crate.

/// A pattern (or host name) that could not be parsed. `Display` gives one
/// line: what was wrong, then `; ` and what to write instead. The message
/// never contains `; `, so the two parts can be told apart again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}; {hint}")]
pub struct PatternError {
    /// What was wrong, naming the input, e.g. `'*.com' would allow every
    /// host under the top-level domain 'com'`.
    pub message: String,
    /// What is allowed instead.
    pub hint: String,
}

impl PatternError {
    pub(crate) fn new(message: impl Into<String>, hint: impl Into<String>) -> Self {
        PatternError {
            message: message.into(),
            hint: hint.into(),
        }
    }
}
