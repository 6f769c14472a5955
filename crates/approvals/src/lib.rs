//! cordon-approvals: what the policy cannot decide goes to a human.
//!
//! An action the policy answers with *ask* becomes a pending [`Approval`]
//! in a SQLite store ([`Approvals`]; pending approvals survive a restart
//! and expire at their time). A human answers it from any surface (API,
//! CLI, console, MCP) with a [`Scope`]: once (the exact subject), the
//! session, a duration, or persistent (a Cedar rule appended to the policy
//! file after a second confirmation). An approval makes a [`Grant`] whose
//! subject is narrowed automatically ([`subject`]). The [`Gate`] is the
//! one call every surface makes: policy decision, grants, asking, waiting,
//! and a record of the decision with the rule that made it.

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod cedar;
pub mod gate;
pub mod model;
pub mod persist;
pub mod store;
pub mod subject;
pub mod waiting;

pub use gate::{Allowed, DecisionLog, DecisionRecord, Gate, Limits, Refusal, DEFAULT_TIMEOUT};
pub use model::{Answer, Approval, ApprovalEvent, ApprovalState, Grant, GrantEnd, Scope};
pub use store::{ApprovalError, Approvals, OWNER};
pub use subject::Subject;
