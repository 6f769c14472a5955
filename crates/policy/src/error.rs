//! Errors. Every error a user can cause is a [`Diagnostic`]: where
//! (`file:line:col`), which key (`limits.memory`), what was wrong, and on a
//! second line what is allowed.

use std::fmt;
use std::path::PathBuf;

/// What kind of mistake a [`Diagnostic`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The text is not valid TOML (or JSON).
    Syntax,
    /// A key that profiles do not have.
    UnknownKey,
    /// A required key is missing (e.g. a secret's `hosts`).
    MissingKey,
    /// A value of the wrong type (a number where a string belongs, ...).
    WrongType,
    /// A value of the right type that is not acceptable (bad size, pattern, ...).
    InvalidValue,
    /// `extends` names no preset.
    UnknownPreset,
    /// Settings that contradict each other.
    Conflict,
}

/// One located, explained mistake.
///
/// `Display` is one line — `origin:line:col: key: message` (parts that are
/// unknown are left out) — followed by `\n  hint: ...` when there is a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub kind: ErrorKind,
    /// The file name (as given), `command line`, or a preset name.
    pub origin: String,
    /// 1-based line, when the mistake is in a file.
    pub line: Option<usize>,
    /// 1-based column (in characters), when the mistake is in a file.
    pub column: Option<usize>,
    /// The dotted key, e.g. `limits.memory` or `secrets[0].hosts[1]`.
    pub key: Option<String>,
    /// What was wrong.
    pub message: String,
    /// What is allowed, or how to fix it.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        f.write_str(": ")?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// The error type of this crate.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The profile file could not be read.
    #[error("{}: cannot read the profile: {source}\n  hint: check the path given to --profile", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The profile (or an override) is wrong; see the diagnostic.
    #[error("{0}")]
    Invalid(Box<Diagnostic>),
}

impl PolicyError {
    /// The diagnostic, for errors the user caused in a profile or a flag.
    pub fn diagnostic(&self) -> Option<&Diagnostic> {
        match self {
            PolicyError::Invalid(d) => Some(d),
            PolicyError::Read { .. } => None,
        }
    }
}

impl From<Diagnostic> for PolicyError {
    fn from(d: Diagnostic) -> Self {
        PolicyError::Invalid(Box::new(d))
    }
}

/// A mistake found by validation, before it is located in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub kind: ErrorKind,
    pub key: String,
    pub message: String,
    pub hint: String,
    /// Point at the value (bad values) rather than the key (conflicts).
    pub at_value: bool,
}

impl Problem {
    pub(crate) fn new(
        kind: ErrorKind,
        key: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Problem {
            kind,
            key: key.into(),
            message: message.into(),
            hint: hint.into(),
            at_value: kind == ErrorKind::InvalidValue,
        }
    }

    /// Points at the key even for a bad value (e.g. a bad variable name).
    pub(crate) fn at_key(mut self) -> Self {
        self.at_value = false;
        self
    }

    /// A diagnostic without a position (for overrides and JSON profiles).
    pub(crate) fn unlocated(self, origin: &str) -> Diagnostic {
        Diagnostic {
            kind: self.kind,
            origin: origin.to_string(),
            line: None,
            column: None,
            key: Some(self.key),
            message: self.message,
            hint: Some(self.hint),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shape() {
        let d = Diagnostic {
            kind: ErrorKind::InvalidValue,
            origin: "p.toml".into(),
            line: Some(3),
            column: Some(10),
            key: Some("limits.memory".into()),
            message: "'512XB' is not a size".into(),
            hint: Some("write a number with a unit such as 512MiB or 2GiB".into()),
        };
        assert_eq!(
            d.to_string(),
            "p.toml:3:10: limits.memory: '512XB' is not a size\n  hint: write a number with a unit such as 512MiB or 2GiB"
        );
        let e = PolicyError::from(Diagnostic {
            line: None,
            column: None,
            key: None,
            hint: None,
            ..d
        });
        assert_eq!(e.to_string(), "p.toml: '512XB' is not a size");
    }
}
