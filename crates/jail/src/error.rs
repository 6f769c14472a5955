//! Errors of the jail, each naming the layer, what went wrong and how to fix
//! the host.

use serde::{Deserialize, Serialize};

use crate::spec::Layer;

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// The sandbox could not be built. `cordon run` exits 125 with this.
    #[error("{layer}: {message}{}", fix_suffix(fix))]
    Setup {
        layer: Layer,
        message: String,
        fix: Option<String>,
    },
    /// The spec asks for something that cannot be done.
    #[error("invalid sandbox spec: {0}")]
    InvalidSpec(String),
    /// The caller's hook (audit store, egress proxy) failed; the sandbox
    /// was stopped.
    #[error("{0}")]
    Hook(String),
    /// An I/O error on the supervisor side.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn fix_suffix(fix: &Option<String>) -> String {
    match fix {
        Some(f) => format!(" (fix: {f})"),
        None => String::new(),
    }
}

impl JailError {
    pub fn setup(layer: Layer, message: impl Into<String>, fix: Option<&str>) -> JailError {
        JailError::Setup {
            layer,
            message: message.into(),
            fix: fix.map(str::to_owned),
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> JailError {
        JailError::Io {
            context: context.into(),
            source,
        }
    }

    /// The layer this error is about, if any.
    pub fn layer(&self) -> Option<Layer> {
        match self {
            JailError::Setup { layer, .. } => Some(*layer),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, JailError>;

/// What the helper inside the sandbox reports to the supervisor before it
/// gives up. Sent as one JSON document over the report pipe. A session's
/// exec reports the same way on its own pipe, ending with `Ended`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChildReport {
    Setup {
        layer: Layer,
        message: String,
        fix: Option<String>,
    },
    Exec {
        program: String,
        errno: i32,
    },
    /// Sent just before exec: which Landlock ABI was applied.
    Landlock {
        abi: u32,
        fully: bool,
    },
    /// A session's exec: the command's wait status and what its process
    /// tree used, from the exec's leader (PID 1 of its PID namespace).
    Ended {
        status: i32,
        user_us: u64,
        system_us: u64,
        max_rss_kib: u64,
    },
}
