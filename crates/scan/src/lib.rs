//! cordon-scan: inspection of code and output before it crosses a boundary.
//!
//! For now this crate holds only [`redact`]: replacing well-known secret
//! formats (and values registered at run time) in text and bytes with
//! `[REDACTED:<kind>]` markers before anything is stored or shown.

#![forbid(unsafe_code)]

pub mod redact;

pub use redact::Redactor;
