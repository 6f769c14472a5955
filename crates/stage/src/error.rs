//! One error type for the crate; every message names what and where.

use std::path::PathBuf;

/// Why a staging operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no staged run {0} (see `ls` of the stage directory, or it was promoted or discarded)"
    )]
    NoSuchRun(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Conflict(String),
    #[error("cannot read {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T> = std::result::Result<T, StageError>;

impl StageError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: impl Into<std::io::Error>) -> StageError {
        StageError::Io {
            path: path.into(),
            source: source.into(),
        }
    }
}
