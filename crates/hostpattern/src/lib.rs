//! cordon-hostpattern: the host patterns of network rules and secret bindings.
//!
//! One language, used by the profile (`network.allow`, `network.deny`,
//! `network.rate_limit`, `secrets.hosts`, `--allow-net`, ...) and by the
//! egress proxy that enforces it, so a pattern means the same on both sides.
//!
//! A pattern is an exact host (`api.example.com`, `203.0.113.7`,
//! `[2001:db8::1]`) or `*.` followed by a domain (`*.example.com`, which
//! matches every name *below* `example.com` but not `example.com` itself;
//! list both when both are meant), with an optional `:port` (no port means
//! any port). Matching is case-insensitive and tolerates one trailing dot, so
//! `EVIL.com.` is the same host as `evil.com`. Internationalized names must be
//! written in their punycode form (`xn--...`); they are compared as written.
//!
//! Refused as mistakes:
//!
//! - a bare `*` (also `*.*`, `*:443`);
//! - a wildcard over a top-level domain (`*.com`) or a public second-level
//!   registry (`*.co.uk`);
//! - a `*` anywhere else than as the whole first label;
//! - IP ranges (`10.0.0.0/8`, `10.*`, `*.0.0.10`) and wildcards over addresses;
//! - IPv6 addresses without brackets (`2001:db8::1:443` could be an address or
//!   an address and a port; write `[2001:db8::1]:443`);
//! - names that end in a number (`127.1`, `2130706433`, `a.0x7f`), which
//!   resolvers and URL parsers may read as IPv4 addresses;
//! - empty labels, labels over 63 characters, names over 253, characters
//!   other than letters, digits, `-` and `_`, a label that starts or ends
//!   with `-`, non-ASCII characters;
//! - schemes, paths, user info, and ports that are not a plain number from 1
//!   to 65535 (`:0`, `:+80`, `:*`).
//!
//! ```
//! use cordon_hostpattern::HostPattern;
//! # fn main() -> Result<(), cordon_hostpattern::PatternError> {
//! let p: HostPattern = "*.Example.com:443".parse()?;
//! assert!(p.matches("api.example.com", 443));
//! assert!(!p.matches("example.com", 443));
//! assert!(!p.matches("api.example.com", 80));
//! assert_eq!(p.to_string(), "*.example.com:443");
//!
//! let e = HostPattern::parse("*.com").unwrap_err();
//! assert_eq!(
//!     e.to_string(),
//!     "'*.com' would allow every host under the top-level domain 'com'; name the domain, e.g. *.example.com"
//! );
//! # Ok(()) }
//! ```
//!
//! With the `schemars` feature, [`HostPattern`] also describes itself as a
//! JSON Schema string. It (de)serializes as its text form.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod error;
mod name;
mod pattern;
mod serde_impl;
#[cfg(test)]
mod tests;

pub use error::PatternError;
pub use name::check_host_name;
pub use pattern::HostPattern;
