//! Errors of loading a policy file, each with where it is and how to fix it.

use serde::Serialize;

/// One problem in a policy file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub file: String,
    /// 1-based; 0 when the problem has no place in the file.
    pub line: u32,
    /// 1-based; 0 when unknown.
    pub column: u32,
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// Why a policy could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    #[error("cannot read policy file {path} (check the path and its permissions)")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{} problem(s) in the policy:\n{}", .0.len(), render(.0))]
    Invalid(Vec<Diagnostic>),
}

impl AuthzError {
    /// Every problem with its place (empty for a read error).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            AuthzError::Read { .. } => &[],
            AuthzError::Invalid(d) => d,
        }
    }
}

fn render(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
