//! A switch for the test suite only: `CORDON_TEST_DISABLE_LAYERS` names
//! layers (comma-separated) that the sandbox then leaves out, so a test can
//! show that the layers left stop an attack on their own, and that the test
//! fails when the layer it names is gone.
//!
//! Only debug builds read the variable. In a release build `off` is
//! always false (the code that reads the variable is not compiled) and
//! [`check`] refuses a run while the variable is set, so nobody mistakes a
//! release binary for one that honours it.

/// The environment variable that turns layers off in debug builds.
pub const VAR: &str = "CORDON_TEST_DISABLE_LAYERS";

use crate::spec::Layer;

/// A layer the switch can turn off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// No Landlock ruleset on the workload.
    Landlock,
    /// No seccomp filter on the workload.
    Seccomp,
    /// Binds, the root, /dev and /proc/{sys,sysrq-trigger,...} stay writable.
    MountRo,
    /// Binds and the root are mounted without `nosuid`.
    Nosuid,
    /// The init stays dumpable.
    Dumpable,
    /// The workload does not set no_new_privs itself (Landlock still does,
    /// unless it is off too).
    NoNewPrivs,
    /// The workload keeps its capabilities and bounding set.
    CapDrop,
    /// The workload keeps its bounding set (it drops its other
    /// capabilities).
    BoundingSet,
    /// The workload stays in cordon's session (and keeps its controlling
    /// terminal).
    Session,
    /// Started by root, the sandbox stays host uid 0 (no unprivileged
    /// host identity, no idmapped binds); groups are still dropped.
    /// Started by another user, newgidmap is not used: its supplementary
    /// groups are kept (and said to be).
    Identity,
    /// overlayfs counts as unavailable for staging: the probe says so, a
    /// staged overlay mount is refused, and `cordon run --stage` falls
    /// back to a copy.
    Overlay,
}

impl Switch {
    pub const ALL: [Switch; 11] = [
        Switch::Landlock,
        Switch::Seccomp,
        Switch::MountRo,
        Switch::Nosuid,
        Switch::Dumpable,
        Switch::NoNewPrivs,
        Switch::CapDrop,
        Switch::BoundingSet,
        Switch::Session,
        Switch::Identity,
        Switch::Overlay,
    ];

    /// The layer of the run's report this switch weakens.
    pub fn layer(self) -> Layer {
        match self {
            Switch::Landlock => Layer::Landlock,
            Switch::Seccomp => Layer::Seccomp,
            Switch::MountRo | Switch::Nosuid | Switch::Overlay => Layer::Filesystem,
            Switch::Dumpable => Layer::PidNamespace,
            Switch::NoNewPrivs | Switch::CapDrop | Switch::BoundingSet => Layer::Capabilities,
            Switch::Session => Layer::PidNamespace,
            Switch::Identity => Layer::UserNamespace,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Switch::Landlock => "landlock",
            Switch::Seccomp => "seccomp",
            Switch::MountRo => "mount-ro",
            Switch::Nosuid => "nosuid",
            Switch::Dumpable => "dumpable",
            Switch::NoNewPrivs => "no-new-privs",
            Switch::CapDrop => "cap-drop",
            Switch::BoundingSet => "bounding-set",
            Switch::Session => "session",
            Switch::Identity => "identity",
            Switch::Overlay => "overlay",
        }
    }
}

/// The layers named in `value`; an unknown name is an error, so a typo in a
/// test cannot silently leave every layer on.
pub fn parse(value: &str) -> Result<Vec<Switch>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| {
            Switch::ALL
                .into_iter()
                .find(|s| s.name() == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = Switch::ALL.iter().map(|s| s.name()).collect();
                    format!(
                        "{VAR}: unknown layer '{name}' (known: {})",
                        known.join(", ")
                    )
                })
        })
        .collect()
}

/// The layers turned off for runs of this process, or why the run must be
/// refused (an unknown name; the variable set for a release build).
pub fn check() -> Result<Vec<Switch>, String> {
    let Some(value) = std::env::var_os(VAR) else {
        return Ok(Vec::new());
    };
    if cfg!(debug_assertions) {
        parse(&value.to_string_lossy())
    } else {
        Err(format!(
            "{VAR} is honoured only by debug builds of cordon; this build enforces every layer: unset it"
        ))
    }
}

/// Whether the test switch turned `layer` off. Always false in release
/// builds.
#[cfg(debug_assertions)]
pub(crate) fn off(layer: Switch) -> bool {
    check().is_ok_and(|off| off.contains(&layer))
}

/// Whether the test switch turned `layer` off. Always false in release
/// builds.
#[cfg(not(debug_assertions))]
pub(crate) fn off(_layer: Switch) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_names_are_refused() {
        assert_eq!(
            parse("landlock, mount-ro,,cap-drop").unwrap_or_default(),
            vec![Switch::Landlock, Switch::MountRo, Switch::CapDrop]
        );
        for s in Switch::ALL {
            assert_eq!(parse(s.name()).unwrap_or_default(), vec![s]);
        }
        let err = parse("landlock,selinux").unwrap_err();
        assert!(err.contains("'selinux'"), "{err}");
    }

    /// Runs in both profiles: `cargo test` (debug) sees the switch work,
    /// `cargo test --release` sees it refused and every layer kept on.
    #[test]
    fn only_debug_builds_honour_the_variable() {
        // Only this test sets the variable; it names a layer no other unit
        // test of this crate looks at through `off`.
        std::env::set_var(VAR, "dumpable");
        let checked = check();
        let dumpable_off = off(Switch::Dumpable);
        std::env::remove_var(VAR);
        if cfg!(debug_assertions) {
            assert_eq!(checked, Ok(vec![Switch::Dumpable]));
            assert!(dumpable_off);
        } else {
            let err = checked.unwrap_err();
            assert!(err.contains("only by debug builds"), "{err}");
            assert!(!dumpable_off, "a release build turned a layer off");
        }
        assert!(!off(Switch::Landlock));
    }
}
