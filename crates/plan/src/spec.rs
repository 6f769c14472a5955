//! From a resolved profile to a concrete sandbox `Spec`: canonical host
//! paths, the allowlisted environment, limits in plain numbers.

use std::path::{Path, PathBuf};

use cordon_jail::{Bind, Isolation, Layer, Limits, Spec, StdinMode};
use cordon_policy::{CwdAccess, NetworkMode, OnOutputLimit, Profile};

use crate::host_tools::{self, HostTools};
use crate::PlanError;

/// Where the egress proxy listens inside the sandbox's own network
/// namespace (any port works there; a fixed one keeps the environment
/// predictable).
pub const PROXY_PORT: u16 = 3128;

/// Variables every sandbox gets (before the profile's `env.pass`/`env.set`).
fn base_env(cwd_inside: &Path) -> Vec<(String, String)> {
    vec![
        ("PATH".into(), cordon_jail::DEFAULT_PATH.into()),
        ("HOME".into(), "/tmp".into()),
        ("TMPDIR".into(), "/tmp".into()),
        ("USER".into(), "sandbox".into()),
        ("LOGNAME".into(), "sandbox".into()),
        ("SHELL".into(), "/bin/sh".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("PWD".into(), cwd_inside.display().to_string()),
    ]
}

pub(crate) fn set_env(env: &mut Vec<(String, String)>, key: &str, value: String) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_owned(), value));
}

/// Build the spec for `argv` under `profile`, run from `cwd` (a host
/// directory; declared paths are bound at the same path inside, so it is
/// also the working directory inside unless the profile's `cwd = "none"`,
/// which makes it /tmp). `argv` is not looked at here: it may be empty
/// (see [`sandbox_spec`]).
pub fn spec_for(profile: &Profile, argv: Vec<String>, cwd: &Path) -> Result<Spec, PlanError> {
    let home = home_dir();
    let mut binds = Vec::new();
    let lexical_cwd = cordon_policy::normalize(cwd);
    for rule in profile.mounts(cwd, &home) {
        let flag = if rule.writable { "--rw" } else { "--ro" };
        let canonical = std::fs::canonicalize(&rule.path).map_err(|source| PlanError::Path {
            path: rule.path.clone(),
            flag,
            source,
        })?;
        // A declared path that goes through a symlink is refused: a link
        // planted by an earlier sandbox in a writable directory must not
        // turn a later `--ro dir/data` into a view of /etc or ~/.ssh.
        // (The working directory itself is resolved silently.)
        if canonical != rule.path && rule.path != lexical_cwd {
            return Err(PlanError::Symlink {
                path: rule.path,
                resolved: canonical,
                flag,
            });
        }
        binds.push(Bind {
            path: canonical,
            writable: rule.writable,
        });
    }
    let cwd_inside = match profile.filesystem.cwd {
        CwdAccess::None => PathBuf::from("/tmp"),
        _ => std::fs::canonicalize(cwd).map_err(PlanError::Cwd)?,
    };

    let network = match profile.network.mode {
        NetworkMode::None => cordon_jail::NetworkMode::None,
        NetworkMode::Loopback => cordon_jail::NetworkMode::Loopback,
        NetworkMode::Proxy => cordon_jail::NetworkMode::Proxy,
    };
    let l = &profile.limits;
    let nonzero = |v: u64| (v > 0).then_some(v);
    let limits = Limits {
        wall: Some(l.timeout.as_duration()).filter(|d| !d.is_zero()),
        cpu: Some(l.cpu_time.as_duration()).filter(|d| !d.is_zero()),
        memory: nonzero(l.memory.0),
        pids: nonzero(l.pids),
        open_files: nonzero(l.open_files),
        file_size: nonzero(l.file_size.0),
        output: Some(l.output.0),
        on_output_limit: match l.on_output_limit {
            OnOutputLimit::Truncate => cordon_jail::OutputLimitAction::Truncate,
            OnOutputLimit::Kill => cordon_jail::OutputLimitAction::Kill,
        },
        kernel: cordon_jail::KernelBudgets {
            inotify_instances: l.inotify_instances,
            inotify_watches: l.inotify_watches,
            queued_signals: l.queued_signals,
            mqueue_bytes: l.mqueue_bytes.0,
        },
    };

    let mut env = base_env(&cwd_inside);
    if network == cordon_jail::NetworkMode::Proxy {
        let http = format!("http://127.0.0.1:{PROXY_PORT}");
        let socks = format!("socks5h://127.0.0.1:{PROXY_PORT}");
        for (k, v) in [
            ("HTTP_PROXY", &http),
            ("HTTPS_PROXY", &http),
            ("ALL_PROXY", &socks),
            ("http_proxy", &http),
            ("https_proxy", &http),
            ("all_proxy", &socks),
            ("NO_PROXY", &String::new()),
            ("no_proxy", &String::new()),
        ] {
            set_env(&mut env, k, v.clone());
        }
    }
    for name in &profile.env.pass {
        if let Ok(v) = std::env::var(name) {
            set_env(&mut env, name, v);
        }
    }
    for (k, v) in &profile.env.set {
        set_env(&mut env, k, v.clone());
    }

    let mut spec = Spec::new(argv, cwd_inside);
    spec.env = env;
    spec.binds = binds;
    spec.tmp_size = profile.filesystem.tmp_size.0;
    spec.tmp_inodes = profile.filesystem.tmp_inodes;
    spec.limits = limits;
    spec.network = network;
    spec.proxy_port = PROXY_PORT;
    spec.allow_unix_sockets = profile.syscalls.unix_sockets;
    spec.isolation = Isolation {
        level: match profile.isolation.level {
            cordon_policy::IsolationLevel::Namespaces => cordon_jail::IsolationLevel::Namespaces,
            cordon_policy::IsolationLevel::Process => cordon_jail::IsolationLevel::Process,
        },
        allow_weaker: profile.isolation.allow_weaker,
    };
    if profile.isolation.allow_weaker {
        spec.accept_missing.push(Layer::Landlock);
    }
    spec.stdin = StdinMode::Inherit;
    Ok(spec)
}

/// The spec of a long-lived sandbox (`cordon serve`): [`spec_for`] with an
/// empty argv, which never fails for being empty. The sandbox runs no
/// command of its own; each exec brings its argv (the session engine
/// ignores the spec's). `cwd` is the working directory, on the host and
/// inside alike (declared paths are bound at the same path).
pub fn sandbox_spec(profile: &Profile, cwd: &Path) -> Result<Spec, PlanError> {
    spec_for(profile, Vec::new(), cwd)
}

/// Bind read-only what host tools run on their own inside the writable
/// paths (unless the profile opts out), and return what was found for the
/// check after the run.
pub fn protect_host_tools(profile: &Profile, spec: &mut Spec) -> Option<HostTools> {
    if !profile.filesystem.protect_host_tools {
        return None;
    }
    let found = host_tools::find(&spec.binds, &home_dir());
    spec.binds.extend(found.binds());
    Some(found)
}

/// The caller's home (`$HOME`, else `/`): what `~` in a profile means.
pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// At the process isolation level the host's /tmp is visible, so the
/// workload gets a private directory instead (removed afterwards).
pub fn private_tmp(spec: &mut Spec) -> Result<Option<tempfile::TempDir>, PlanError> {
    if spec.isolation.level != cordon_jail::IsolationLevel::Process {
        return Ok(None);
    }
    let dir = tempfile::Builder::new()
        .prefix("cordon-tmp-")
        .tempdir()
        .map_err(PlanError::PrivateTmp)?;
    let path = std::fs::canonicalize(dir.path()).map_err(PlanError::PrivateTmp)?;
    spec.binds.push(Bind {
        path: path.clone(),
        writable: true,
    });
    set_env(&mut spec.env, "TMPDIR", path.display().to_string());
    set_env(&mut spec.env, "HOME", path.display().to_string());
    Ok(Some(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::{Overrides, TrustLevel};

    #[test]
    fn a_long_lived_sandbox_has_an_empty_argv_and_the_declared_paths() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir(root.join("out")).unwrap();
        let profile = Profile::preset(TrustLevel::Low)
            .with_overrides(&Overrides {
                read_write: vec![root.join("out")],
                env_set: vec![("K".into(), "V".into())],
                memory: Some("256MiB".parse().unwrap()),
                pids: Some(64),
                allow_hosts: vec!["pypi.org".parse().unwrap()],
                ..Overrides::default()
            })
            .unwrap();
        let spec = sandbox_spec(&profile, &root).unwrap();
        assert!(spec.argv.is_empty());
        assert_eq!(spec.cwd, root);
        assert!(spec
            .binds
            .iter()
            .any(|b| b.path == root.join("out") && b.writable));
        assert!(spec.env.iter().any(|(k, v)| k == "K" && v == "V"));
        assert_eq!(spec.limits.memory, Some(256 << 20));
        assert_eq!(spec.limits.pids, Some(64));
        assert_eq!(spec.network, cordon_jail::NetworkMode::Proxy);
        assert!(spec
            .env
            .iter()
            .any(|(k, v)| k == "HTTPS_PROXY" && v == "http://127.0.0.1:3128"));
    }

    #[test]
    fn a_missing_or_symlinked_path_is_refused_with_its_flag() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let with = |o: Overrides| Profile::default().with_overrides(&o).unwrap();
        let e = sandbox_spec(
            &with(Overrides {
                read_only: vec![root.join("absent")],
                ..Overrides::default()
            }),
            &root,
        )
        .unwrap_err();
        assert!(matches!(e, PlanError::Path { flag: "--ro", .. }), "{e}");
        assert!(e.to_string().contains("create it first"), "{e}");
        let e = sandbox_spec(
            &with(Overrides {
                read_write: vec![root.join("link")],
                ..Overrides::default()
            }),
            &root,
        )
        .unwrap_err();
        assert!(matches!(e, PlanError::Symlink { flag: "--rw", .. }), "{e}");
    }
}
