//! cordon-plan: what `cordon run` and `cordon serve` share to turn a
//! resolved [`Profile`](cordon_policy::Profile) into a jail
//! [`Spec`](cordon_jail::Spec), its secrets and its egress proxy's
//! configuration.
//!
//! - [`spec`]: the spec itself (canonical host paths, the allowlisted
//!   environment, limits in plain numbers), the private /tmp of the
//!   process isolation level, and the read-only binds that protect host
//!   tools ([`host_tools`]).
//! - [`secrets`]: each secret's real value (read on the host, never in the
//!   sandbox), its placeholder, the per-sandbox CA bundle, and the identity
//!   the proxy intercepts TLS with.
//! - [`egress`]: the profile's `[network]` rules as an
//!   [`EgressConfig`](cordon_egress::EgressConfig), the recorder of its
//!   events, and starting the proxy on the listener the sandbox hands over.
//! - [`said`]: what a command's output says that calls for a hint (a
//!   read-only path, a failed name lookup).
//!
//! A long-lived sandbox (`cordon serve`) is planned like a run: resolve
//! the profile with [`cordon_policy::Profile::with_overrides`], then
//! [`spec::sandbox_spec`] (an empty argv), [`spec::private_tmp`],
//! [`spec::protect_host_tools`], [`secrets::resolve`] and [`secrets::arm`],
//! and, when the spec's network mode is `Proxy`, [`egress::config`].
//!
//! Errors are [`PlanError`]: what went wrong and how to fix it.

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod egress;
mod error;
pub mod host_tools;
pub mod said;
pub mod secrets;
pub mod spec;

pub use error::PlanError;
pub use host_tools::HostTools;
pub use spec::{home_dir, private_tmp, protect_host_tools, sandbox_spec, spec_for, PROXY_PORT};
