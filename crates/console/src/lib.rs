//! cordon-console: the web console of `cordon serve` (`/ui`).
//!
//! * [`assets`]: the page, its script and its style sheet, compiled in.
//! * [`sessions`]: console sessions (the cookie's server side), their CSRF
//!   tokens, idle and absolute expiry, and the end of every session of a
//!   revoked token.
//! * [`web`]: the cookie's attributes, the security headers of every
//!   console response (a CSP without inline script, no framing, nosniff),
//!   and the check that refuses a browser's cross-site writes.
//!
//! The routes themselves live in the server (`cordon_server::console`).

#![forbid(unsafe_code)]

pub mod assets;
pub mod sessions;
pub mod web;

pub use sessions::{Active, ConsoleConfig, ConsoleError, ConsoleSessions, Issued, Login};
