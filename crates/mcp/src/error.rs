//! A tool call that failed: what went wrong and how to fix it. It goes
//! back to the client as a tool error (`isError: true`), never as a
//! protocol error, so the model reads it and can act on it.

use cordon_server::ApiError;
use cordon_session::files::FilesError;
use cordon_session::SessionError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub message: String,
    pub fix: Option<String>,
    /// The error as data too (a policy refusal's subject, rule and the
    /// grant that would allow it), sent as the result's structured content.
    pub detail: Option<serde_json::Value>,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError {
            message: message.into(),
            fix: None,
            detail: None,
        }
    }

    pub fn with_fix(mut self, fix: impl Into<String>) -> ToolError {
        self.fix = Some(fix.into());
        self
    }

    pub fn with_detail(mut self, detail: serde_json::Value) -> ToolError {
        self.detail = Some(detail);
        self
    }

    /// The sandbox is not there (never made, destroyed, ended, or
    /// another caller's: all look the same).
    pub fn no_sandbox(id: &str) -> ToolError {
        ToolError::new(format!("no sandbox '{id}'"))
            .with_fix("create one with sandbox_create and pass the sandbox_id it returns")
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, " (fix: {fix})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ToolError {}

impl From<ApiError> for ToolError {
    fn from(e: ApiError) -> ToolError {
        ToolError {
            message: e.message,
            fix: e.fix,
            detail: None,
        }
    }
}

impl From<SessionError> for ToolError {
    fn from(e: SessionError) -> ToolError {
        ToolError::from(ApiError::from(e))
    }
}

impl From<FilesError> for ToolError {
    fn from(e: FilesError) -> ToolError {
        ToolError {
            message: e.message,
            fix: e.fix,
            detail: None,
        }
    }
}
