//! Errors of the egress crate.

use std::io;

/// A host rule that could not be parsed: what was wrong (naming the rule)
/// and what to write instead.
pub type RuleError = cordon_hostpattern::PatternError;

/// Everything that can go wrong when configuring or starting the proxy.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error("invalid rate limit for {rule}: {reason}")]
    RateLimit { rule: String, reason: String },
    #[error("invalid resolve override {key:?}: {reason} (expected HOST or HOST:PORT mapped to IP or IP:PORT addresses)")]
    Override { key: String, reason: String },
    #[error(
        "invalid HTTP method {0:?} in the allowed methods (expected a token such as GET or POST)"
    )]
    Method(String),
    #[error("the proxy listener could not be used: {0}")]
    Listener(#[source] io::Error),
    #[error("the proxy runtime could not be started: {0}")]
    Runtime(#[source] io::Error),
    /// A secret binding or the TLS setup of the identity layer (never
    /// contains a secret's value).
    #[error("identity: {0}")]
    Identity(String),
    #[error("the proxy thread panicked")]
    ThreadPanicked,
}
