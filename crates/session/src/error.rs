//! Errors of the session engine.

/// What went wrong with a session or an exec.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The sandbox could not be built (the jail's error, with its fix).
    #[error(transparent)]
    Jail(#[from] cordon_jail::JailError),
    /// No session or process with that id.
    #[error("{0} not found")]
    NotFound(String),
    /// The session has ended; nothing more runs in it.
    #[error("the session has ended: {0}")]
    Ended(String),
    /// The request cannot be honoured as given.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// Too many sessions or execs at once; retry later.
    #[error("at capacity: {0}")]
    AtCapacity(String),
    /// The sandbox cannot start another process now (its process limit,
    /// namespaces the kernel has not yet freed, memory short); retry later.
    #[error("busy: {0}")]
    Busy(String),
    /// The spawner process is gone (the server must be restarted).
    #[error("the sandbox spawner is gone: {0}")]
    SpawnerGone(String),
    /// A code context's interpreter could not be started or used.
    #[error("code context: {0}")]
    Context(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl SessionError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> SessionError {
        SessionError::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = SessionError> = std::result::Result<T, E>;
