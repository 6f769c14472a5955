//! cordon-server: the HTTP control plane of `cordon serve`.
//!
//! The API (docs/api.md, `GET /v1/openapi.json`) is served with axum on
//! hyper's HTTP/1 connections, on a unix socket (0600; its caller is the
//! owner) and, when asked, on TCP (every request needs a bearer token,
//! [`tokens`]). A token carries a ceiling and sees only its own
//! sandboxes. Sandboxes are sessions of the [`cordon_session::Engine`];
//! each is a run in the audit store, and every API action is recorded with
//! its caller's name.
//!
//! Modules: [`listen`] (connections and their bounds), [`router`] (routes,
//! authentication, the request bound), [`routes`] (the handlers),
//! [`planning`] (request -> spec, within the caller's ceiling), [`state`]
//! ([`AppState`], [`AppState::session_for`]), [`audit`], [`tokens`],
//! [`files`], [`contexts`] and [`grants`] (their own routes on the same
//! state), [`timeline`] (the audit store read back: a sandbox's timeline,
//! the chain's check) and [`console`] (the web console at `/ui`: its page,
//! login, and the cookie side of authentication).

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod approval_tasks;
pub mod audit;
pub mod auth;
pub mod console;
pub mod contexts;
pub mod egress;
pub mod egress_notes;
pub mod error;
pub mod escalation;
pub mod extract;
pub mod files;
pub mod gate;
pub mod grants;
pub mod hints;
pub mod listen;
mod lost;
pub mod openapi;
pub mod paths;
pub mod planning;
pub mod router;
pub mod routes;
mod serve;
pub mod state;
pub mod timeline;
pub mod tokens;
pub mod wire;

pub use approval_tasks::Webhook;
pub use audit::AuditLog;
pub use auth::{Caller, Transport};
pub use error::ApiError;
pub use serve::{open_audit, serve, ApprovalOptions, Bound, ServeError, ServeOptions};
pub use state::{AppState, Limits};
