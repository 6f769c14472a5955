//! What can go wrong while planning a sandbox. Every message says what
//! went wrong and how to fix it; the underlying I/O error, when there is
//! one, is the error's `source`.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A declared path (or the working directory) cannot be resolved on the host.
    #[error("{}: cannot use this path ({flag}); create it first or remove it from the profile/flags", path.display())]
    Path {
        path: PathBuf,
        /// `--rw` or `--ro`: how the profile or the flags declared it.
        flag: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A declared path goes through a symlink.
    #[error("{}: this path goes through a symlink (it resolves to {}); cordon binds only real locations, so name {} with {flag} if that is what the command needs", path.display(), resolved.display(), resolved.display())]
    Symlink {
        path: PathBuf,
        resolved: PathBuf,
        flag: &'static str,
    },
    /// The working directory cannot be resolved.
    #[error("cannot resolve the current directory")]
    Cwd(#[source] std::io::Error),
    /// The private temporary directory of the process isolation level.
    #[error("cannot create a private temporary directory")]
    PrivateTmp(#[source] std::io::Error),
    /// A secret's value cannot be read, or is refused.
    #[error("secret {name}: {message}")]
    Secret {
        name: String,
        message: String,
        #[source]
        source: Option<std::io::Error>,
    },
    /// The per-sandbox certificate authority or the TLS interceptor.
    #[error("cannot set up TLS interception for secrets: {0}")]
    Tls(cordon_egress::EgressError),
    /// The `--net-log` file.
    #[error("cannot create the net log {}", path.display())]
    NetLog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The egress proxy refused its configuration or could not start.
    #[error(transparent)]
    Proxy(cordon_egress::EgressError),
}

impl PlanError {
    pub(crate) fn secret(name: &str, message: impl Into<String>) -> PlanError {
        PlanError::Secret {
            name: name.to_owned(),
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn secret_io(
        name: &str,
        message: impl Into<String>,
        source: std::io::Error,
    ) -> PlanError {
        PlanError::Secret {
            name: name.to_owned(),
            message: message.into(),
            source: Some(source),
        }
    }
}
