//! cordon-policy: what a sandbox may do, as data.
//!
//! # The model
//!
//! A **profile** says which files, hosts, credentials and resources a sandbox
//! gets. It exists in two layers:
//!
//! - [`ProfileFile`], the file layer: what a TOML (or JSON) profile may say.
//!   Every key is optional and unknown keys are refused. Its JSON Schema is
//!   [`json_schema`] (checked in as `schema/profile.schema.json`).
//! - [`Profile`], the resolved layer: a concrete value for every setting. It
//!   is obtained by applying a file over the **preset** named by its `extends`
//!   key ([`TrustLevel`]: `untrusted` (the default), `low`, `medium`, `high`),
//!   then validating the result. A key present in the file replaces the
//!   preset's value, lists included; only `env.set` is merged by name.
//!
//! Command-line flags are an [`Overrides`] applied with
//! [`Profile::with_overrides`], which validates again. [`Profile::lint`]
//! reports settings that are valid but risky (the lethal trifecta, writable
//! home, `allow_private`, ...).
//!
//! Presets are strict by default: `untrusted` is a read-only current
//! directory, nothing writable on the host, no network, 64MiB /tmp, 512MiB
//! memory, 128 processes, 5 minutes. Higher trust relaxes limits, makes the
//! current directory writable (`medium`, `high`) and routes the network
//! through cordon's proxy with an empty allowlist; no preset allows private
//! addresses, binds secrets or accepts weaker isolation.
//!
//! # Errors
//!
//! Every mistake a user can make is a [`Diagnostic`] whose `Display` is one
//! line with the place, the dotted key and what was wrong, then a hint:
//!
//! ```text
//! python.toml:12:10: limits.memory: '512XB' is not a size
//!   hint: write a number with a unit such as 512MiB or 2GiB
//! ```
//!
//! # Values
//!
//! Sizes ([`ByteSize`], [`parse_size`]) and durations ([`DurationSpec`],
//! [`parse_duration`]) are strings such as `"512MiB"` and `"1h30m"`; host
//! patterns ([`HostPattern`]) are `api.example.com`, `*.example.com`, with an
//! optional `:port`. Paths are kept as written; [`resolve_path`] expands `~`
//! and makes them absolute, lexically.
//!
//! This crate does no syscalls and no I/O beyond reading a profile file.

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod error;
mod file;
mod lint;
mod load;
mod model;
mod overrides;
mod paths;
mod presets;
mod schema;
mod units;
mod validate;

use std::path::{Path, PathBuf};

pub use cordon_hostpattern::{HostPattern, PatternError};
pub use error::{Diagnostic, ErrorKind, PolicyError};
pub use file::{
    AuditFile, EnvFile, FilesystemFile, IsolationFile, LimitsFile, NetworkFile, ProfileFile,
    RateLimitFile, ScanFile, SecretFile, SyscallsFile,
};
pub use lint::{LintWarning, Severity};
pub use model::{
    Audit, CwdAccess, Env, Filesystem, HostDecision, HttpMethod, InjectAt, Isolation,
    IsolationLevel, Limits, Network, NetworkMode, OnOutputLimit, OnUnlisted, Profile, RateLimit,
    Scan, ScanMode, Secret, SecretSource, Stage, Syscalls, TrustLevel,
};
pub use overrides::Overrides;
pub use paths::{normalize, resolve_path};
pub use schema::json_schema;
pub use units::{parse_duration, parse_size, ByteSize, DurationSpec, ValueError};
pub use validate::is_env_name;

/// A host path the sandbox sees, resolved to an absolute path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MountRule {
    /// Absolute, lexically normalized; the same path inside and outside.
    pub path: PathBuf,
    pub writable: bool,
}

impl Default for Profile {
    /// The `untrusted` preset: what `cordon run` gets without a profile.
    fn default() -> Self {
        presets::preset(TrustLevel::Untrusted)
    }
}

impl Profile {
    /// The preset for a trust level.
    pub fn preset(level: TrustLevel) -> Profile {
        presets::preset(level)
    }

    /// Parses a TOML profile, applies it over its preset and validates it.
    /// `origin` names the file in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Profile, PolicyError> {
        load::from_toml(text, origin)
    }

    /// Parses a JSON profile (the same keys as TOML).
    pub fn from_json_str(text: &str, origin: &str) -> Result<Profile, PolicyError> {
        load::from_json(text, origin)
    }

    /// Reads and parses a profile file: JSON when the name ends in `.json`,
    /// TOML otherwise. Relative paths inside stay relative (to the directory
    /// cordon runs in, see [`Profile::mounts`]).
    pub fn load(path: &Path) -> Result<Profile, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let origin = path.display().to_string();
        if path.extension().is_some_and(|e| e == "json") {
            Self::from_json_str(&text, &origin)
        } else {
            Self::from_toml_str(&text, &origin)
        }
    }

    /// Applies an already-parsed file layer over its preset and validates.
    pub fn from_file(file: ProfileFile, origin: &str) -> Result<Profile, PolicyError> {
        load::resolve(file, origin).map_err(|p| PolicyError::from(p.unlocated(origin)))
    }

    /// Checks values and contradictions again (e.g. after editing fields).
    pub fn validate(&self) -> Result<(), PolicyError> {
        validate::check(self).map_err(|p| PolicyError::from(p.unlocated(&self.origin)))
    }

    /// The profile as TOML, with every setting explicit. Loading it back with
    /// [`Profile::from_toml_str`] gives an equal profile.
    pub fn to_toml_string(&self) -> String {
        match toml::to_string(self) {
            Ok(s) => s,
            // Every field is a string, number, bool, list or table, so this
            // cannot fail; keep a readable fallback anyway.
            Err(e) => format!("# cannot serialize profile: {e}\n"),
        }
    }

    /// The host paths to mount, resolved against `cwd` and `home`: the
    /// current directory first (unless `cwd = "none"`), then `read_only`,
    /// then `read_write`. Later rules for the same path win.
    pub fn mounts(&self, cwd: &Path, home: &Path) -> Vec<MountRule> {
        let mut out = Vec::new();
        match self.filesystem.cwd {
            CwdAccess::None => {}
            access => out.push(MountRule {
                path: resolve_path(Path::new("."), cwd, home),
                writable: access == CwdAccess::Rw,
            }),
        }
        for (list, writable) in [
            (&self.filesystem.read_only, false),
            (&self.filesystem.read_write, true),
        ] {
            for raw in list {
                let path = resolve_path(raw, cwd, home);
                out.retain(|m: &MountRule| m.path != path);
                out.push(MountRule { path, writable });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
