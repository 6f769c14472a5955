//! From a resolved profile to a concrete sandbox `Spec`: canonical host
//! paths, the allowlisted environment, limits in plain numbers.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use cordon_jail::{Bind, Isolation, Layer, Limits, Spec, StdinMode};
use cordon_policy::{CwdAccess, NetworkMode, OnOutputLimit, Profile};

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

fn set_env(env: &mut Vec<(String, String)>, key: &str, value: String) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_owned(), value));
}

/// Build the spec for `argv` under `profile`, run from `cwd`.
pub fn spec_for(profile: &Profile, argv: Vec<String>, cwd: &Path) -> anyhow::Result<Spec> {
    let home = home_dir();
    let mut binds = Vec::new();
    let lexical_cwd = cordon_policy::normalize(cwd);
    for rule in profile.mounts(cwd, &home) {
        let flag = if rule.writable { "--rw" } else { "--ro" };
        let canonical = std::fs::canonicalize(&rule.path).with_context(|| {
            format!(
                "{}: cannot use this path ({flag}); create it first or remove it from the profile/flags",
                rule.path.display()
            )
        })?;
        // A declared path that goes through a symlink is refused: a link
        // planted by an earlier sandbox in a writable directory must not
        // turn a later `--ro dir/data` into a view of /etc or ~/.ssh.
        // (The working directory itself is resolved silently.)
        if canonical != rule.path && rule.path != lexical_cwd {
            bail!(
                "{}: this path goes through a symlink (it resolves to {}); cordon binds only real locations, so name {} with {flag} if that is what the command needs",
                rule.path.display(),
                canonical.display(),
                canonical.display()
            );
        }
        binds.push(Bind {
            path: canonical,
            writable: rule.writable,
        });
    }
    let cwd_inside = match profile.filesystem.cwd {
        CwdAccess::None => PathBuf::from("/tmp"),
        _ => std::fs::canonicalize(cwd).context("cannot resolve the current directory")?,
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

/// Bind read-only what host tools run on their own inside the writable
/// paths (unless the profile opts out), and return what was found for the
/// check after the run.
pub fn protect_host_tools(
    profile: &Profile,
    spec: &mut Spec,
) -> Option<crate::host_tools::HostTools> {
    if !profile.filesystem.protect_host_tools {
        return None;
    }
    let found = crate::host_tools::find(&spec.binds, &home_dir());
    spec.binds.extend(found.binds());
    Some(found)
}

pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// At the process isolation level the host's /tmp is visible, so the
/// workload gets a private directory instead (removed afterwards).
pub fn private_tmp(spec: &mut Spec) -> anyhow::Result<Option<tempfile::TempDir>> {
    if spec.isolation.level != cordon_jail::IsolationLevel::Process {
        return Ok(None);
    }
    let dir = tempfile::Builder::new()
        .prefix("cordon-tmp-")
        .tempdir()
        .context("cannot create a private temporary directory")?;
    let path = std::fs::canonicalize(dir.path())?;
    spec.binds.push(Bind {
        path: path.clone(),
        writable: true,
    });
    set_env(&mut spec.env, "TMPDIR", path.display().to_string());
    set_env(&mut spec.env, "HOME", path.display().to_string());
    Ok(Some(dir))
}
