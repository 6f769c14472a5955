//! Staged workspaces: a run writes into an upper layer instead of the host
//! tree; this crate reads that layer as a change set, renders it for review,
//! checks it against a promotion policy and applies the chosen part to the
//! host tree all-or-nothing.
//!
//! Where overlayfs cannot be mounted, a stage is a copy of the tree
//! (`copy.rs`) read against a manifest instead of an upper layer.
//!
//! The overlay mount itself is `cordon-jail`'s; this crate only reads and
//! writes files of the calling user, never follows a symlink in the host
//! tree (every access is `openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS` from the tree's root), and never creates device
//! files or setuid/setgid bits.

#![forbid(unsafe_code)]

mod capture;
mod change;
mod copy;
mod diff;
mod error;
pub(crate) mod fsutil;
mod policy;
mod promote;
mod store;

pub use capture::capture;
pub use change::{Base, Change, ChangeSet, Kind, Op};
pub use copy::{make_copy, Copied};
pub use diff::render_diff;
pub use error::{Result, StageError};
pub use policy::{valid_glob, Action, Decision, Matcher, Policy, Rule};
pub use promote::{choose, promote, Promoted, ScanFn, Selection};
pub use store::{bytes_under, Meta, Stage, Store, MODE_COPY, MODE_OVERLAY};

#[cfg(test)]
mod tests;
