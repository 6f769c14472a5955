//! The spawner: a single-threaded process, forked before the caller
//! starts any thread, that makes sandboxes on request.

use crate::error::{Result, SessionError};

/// Handle to the spawner process.
#[derive(Debug)]
pub struct Spawner {
    _private: (),
}

impl Spawner {
    /// Fork the spawner. Call this before any other thread exists (before
    /// the tokio runtime is built).
    pub fn fork() -> Result<Spawner> {
        Err(SessionError::Invalid("the spawner is not built yet".into()))
    }
}
