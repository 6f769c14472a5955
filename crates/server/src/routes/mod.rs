//! The handlers of the sandbox, exec and meta routes.

pub mod approvals;
pub mod exec;
pub mod meta;
pub mod sandboxes;
