//! Checks on a resolved profile: values out of range and settings that
//! contradict each other. Each finding names the key to blame.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{ErrorKind, Problem};
use crate::model::{NetworkMode, OnUnlisted, Profile, SecretSource};
use crate::paths::{is_tilde_user, resolve_path};
use crate::units::{ByteSize, DurationSpec};

/// Placeholders used to compare paths lexically without knowing the real
/// current and home directories.
const CWD: &str = "/\u{0}cwd";
const HOME: &str = "/\u{0}home";

/// `true` for a valid environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn resolved(raw: &Path) -> PathBuf {
    resolve_path(raw, Path::new(CWD), Path::new(HOME))
}

fn check_path(key: &str, raw: &Path) -> Result<(), Problem> {
    let bad = |msg: String, hint: &str| Err(Problem::new(ErrorKind::InvalidValue, key, msg, hint));
    let shown = raw.display();
    if raw.as_os_str().is_empty() {
        return bad(
            "an empty path".into(),
            "write a path such as ./data, ~/.cache/pip or /srv/data",
        );
    }
    if raw.as_os_str().as_encoded_bytes().contains(&0) {
        return bad(
            format!("'{}' contains a NUL byte", shown.to_string().escape_debug()),
            "write a path without control characters",
        );
    }
    if is_tilde_user(raw) {
        return bad(
            format!("'{shown}' uses ~user, which is not supported"),
            "write ~/... for your own home directory, or the full path",
        );
    }
    let r = resolved(raw);
    for sys in ["/proc", "/sys", "/dev"] {
        if r.starts_with(sys) {
            return bad(
                format!("'{shown}' is under {sys}, which the sandbox provides itself"),
                "remove it: the sandbox has its own /proc and a minimal /dev, and no /sys",
            );
        }
    }
    Ok(())
}

fn at_least_duration(key: &str, v: DurationSpec, min: DurationSpec) -> Result<(), Problem> {
    if v < min {
        return Err(Problem::new(
            ErrorKind::InvalidValue,
            key,
            format!("{v} is too short"),
            format!("write at least {min}"),
        ));
    }
    Ok(())
}

fn at_least_size(key: &str, v: ByteSize, min: ByteSize, why: &str) -> Result<(), Problem> {
    if v < min {
        return Err(Problem::new(
            ErrorKind::InvalidValue,
            key,
            format!("{v} is too small"),
            format!("write at least {min}{why}"),
        ));
    }
    Ok(())
}

fn in_range(key: &str, v: u64, min: u64, max: u64, why: &str) -> Result<(), Problem> {
    if v < min || v > max {
        return Err(Problem::new(
            ErrorKind::InvalidValue,
            key,
            format!("{v} is out of range"),
            format!("write a number from {min} to {max}{why}"),
        ));
    }
    Ok(())
}

fn conflict(key: impl Into<String>, msg: impl Into<String>, hint: impl Into<String>) -> Problem {
    Problem::new(ErrorKind::Conflict, key, msg, hint)
}

/// Validates a resolved profile; returns the first problem found.
pub(crate) fn check(p: &Profile) -> Result<(), Problem> {
    check_filesystem(p)?;
    check_limits(p)?;
    check_env(p)?;
    check_network(p)?;
    check_secrets(p)?;
    if let Some(path) = &p.audit.path {
        check_path("audit.path", path)?;
    }
    for (i, path) in p.scan.rules.iter().enumerate() {
        check_path(&format!("scan.rules[{i}]"), path)?;
    }
    for (i, id) in p.scan.ignore.iter().enumerate() {
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                format!("scan.ignore[{i}]"),
                format!("'{id}' is not a rule id"),
                "rule ids are letters, digits, '-', '_' and '.'; `cordon scan --list-rules` lists them",
            ));
        }
    }
    Ok(())
}

fn check_filesystem(p: &Profile) -> Result<(), Problem> {
    let fs = &p.filesystem;
    for (name, list) in [("read_only", &fs.read_only), ("read_write", &fs.read_write)] {
        for (i, raw) in list.iter().enumerate() {
            let key = format!("filesystem.{name}[{i}]");
            check_path(&key, raw)?;
            if resolved(raw) == Path::new(CWD) {
                return Err(conflict(
                    key,
                    format!(
                        "'{}' is the current directory, which filesystem.cwd controls",
                        raw.display()
                    ),
                    "set filesystem.cwd = \"rw\" (or \"ro\") instead of listing it",
                ));
            }
        }
    }
    for (j, rw) in fs.read_write.iter().enumerate() {
        let r = resolved(rw);
        if let Some(ro) = fs.read_only.iter().find(|ro| resolved(ro) == r) {
            return Err(conflict(
                format!("filesystem.read_write[{j}]"),
                format!(
                    "'{}' is also in filesystem.read_only (as '{}')",
                    rw.display(),
                    ro.display()
                ),
                "list each path once: in read_write to make it writable, in read_only otherwise",
            ));
        }
    }
    at_least_size(
        "filesystem.tmp_size",
        fs.tmp_size,
        ByteSize::mib(1),
        " (the size of /tmp)",
    )?;
    in_range(
        "filesystem.tmp_inodes",
        fs.tmp_inodes,
        64,
        u64::from(u32::MAX),
        " (files in /tmp)",
    )?;
    Ok(())
}

fn check_limits(p: &Profile) -> Result<(), Problem> {
    let l = &p.limits;
    at_least_duration("limits.timeout", l.timeout, DurationSpec::millis(1))?;
    at_least_duration("limits.cpu_time", l.cpu_time, DurationSpec::secs(1))?;
    at_least_size(
        "limits.memory",
        l.memory,
        ByteSize::mib(8),
        " (a process needs some memory to start)",
    )?;
    in_range(
        "limits.pids",
        l.pids,
        1,
        4_194_304,
        " (processes and threads)",
    )?;
    in_range(
        "limits.open_files",
        l.open_files,
        8,
        1_048_576,
        " (file descriptors per process)",
    )?;
    Ok(())
}

fn check_env(p: &Profile) -> Result<(), Problem> {
    let hint = "use letters, digits and '_', not starting with a digit, e.g. PYTHONPATH";
    for (i, name) in p.env.pass.iter().enumerate() {
        if !is_env_name(name) {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                format!("env.pass[{i}]"),
                format!("'{name}' is not an environment variable name"),
                hint,
            ));
        }
    }
    for (name, value) in &p.env.set {
        let key = format!("env.set.{name}");
        if !is_env_name(name) {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                key,
                format!("'{name}' is not an environment variable name"),
                hint,
            )
            .at_key());
        }
        if value.contains('\0') {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                key,
                "the value contains a NUL byte".to_string(),
                "environment values cannot contain NUL",
            ));
        }
        if let Some(i) = p.env.pass.iter().position(|n| n == name) {
            return Err(conflict(
                format!("env.pass[{i}]"),
                format!("'{name}' is also set in env.set"),
                "either pass it from the host (env.pass) or set it (env.set), not both",
            ));
        }
    }
    Ok(())
}

fn check_network(p: &Profile) -> Result<(), Problem> {
    let n = &p.network;
    if n.mode != NetworkMode::Proxy {
        let mode = n.mode;
        let unused: &[(&str, bool)] = &[
            ("network.allow", !n.allow.is_empty()),
            ("network.deny", !n.deny.is_empty()),
            ("network.rate_limit", !n.rate_limit.is_empty()),
            ("network.methods", !n.methods.is_empty()),
            ("network.https_only", n.https_only),
            ("network.allow_private", n.allow_private),
            ("network.allow_missing_sni", n.allow_missing_sni),
            ("network.on_unlisted", n.on_unlisted == OnUnlisted::Ask),
        ];
        if let Some((key, _)) = unused.iter().find(|(_, set)| *set) {
            return Err(conflict(
                *key,
                format!("has no effect with network.mode = \"{mode}\": only the egress proxy applies it"),
                "set network.mode = \"proxy\" to reach hosts through cordon's proxy, or remove this key",
            ));
        }
    }
    for (i, a) in n.allow.iter().enumerate() {
        if n.deny.contains(a) {
            return Err(conflict(
                format!("network.allow[{i}]"),
                format!("'{a}' is both allowed and denied"),
                "remove it from one of network.allow and network.deny (deny wins)",
            ));
        }
    }
    at_least_size(
        "network.max_bytes",
        n.max_bytes,
        ByteSize(1),
        "; use network.mode = \"none\" to allow no traffic",
    )?;
    for (i, r) in n.rate_limit.iter().enumerate() {
        let key = format!("network.rate_limit[{i}]");
        if r.requests.is_none() && r.bytes.is_none() {
            return Err(Problem::new(
                ErrorKind::MissingKey,
                key,
                "limits nothing: neither requests nor bytes is set",
                "add requests = 60 and/or bytes = \"10MiB\"",
            ));
        }
        if r.requests == Some(0) {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                format!("{key}.requests"),
                "0 requests would refuse every request",
                "write at least 1, or deny the host in network.deny",
            ));
        }
        if r.bytes == Some(ByteSize(0)) {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                format!("{key}.bytes"),
                "0 bytes would refuse every request",
                "write at least 1, or deny the host in network.deny",
            ));
        }
        at_least_duration(&format!("{key}.per"), r.per, DurationSpec::millis(1))?;
    }
    Ok(())
}

fn check_secrets(p: &Profile) -> Result<(), Problem> {
    let mut names = BTreeSet::new();
    for (i, s) in p.secrets.iter().enumerate() {
        let key = format!("secrets[{i}]");
        if p.network.mode != NetworkMode::Proxy {
            return Err(conflict(
                key,
                format!(
                    "secret '{}' can't be used with network.mode = \"{}\": only the egress proxy injects secrets",
                    s.name, p.network.mode
                ),
                "set network.mode = \"proxy\" and allow the secret's hosts in network.allow",
            ));
        }
        if !is_env_name(&s.name) {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                format!("{key}.name"),
                format!("'{}' is not an environment variable name", s.name),
                "the placeholder is put in this variable: use letters, digits and '_', e.g. GITHUB_TOKEN",
            ));
        }
        if !names.insert(s.name.as_str()) {
            return Err(conflict(
                format!("{key}.name"),
                format!("secret '{}' is declared twice", s.name),
                "give each secret its own name",
            ));
        }
        if let Some(j) = p.env.pass.iter().position(|n| n == &s.name) {
            return Err(conflict(
                format!("env.pass[{j}]"),
                format!(
                    "'{}' is a secret: passing it from the host would put the real value in the sandbox",
                    s.name
                ),
                "remove it from env.pass; the sandbox gets a placeholder under this name",
            ));
        }
        if p.env.set.contains_key(&s.name) {
            return Err(conflict(
                format!("env.set.{}", s.name),
                format!("'{}' is a secret and also set in env.set", s.name),
                "remove it from env.set; the sandbox gets a placeholder under this name",
            ));
        }
        match &s.from {
            SecretSource::Env(v) if !is_env_name(v) => {
                return Err(Problem::new(
                    ErrorKind::InvalidValue,
                    format!("{key}.from.env"),
                    format!("'{v}' is not an environment variable name"),
                    "name the host variable that holds the value, e.g. { env = \"GITHUB_TOKEN\" }",
                ))
            }
            SecretSource::File(f) => check_path(&format!("{key}.from.file"), f)?,
            SecretSource::Command(argv) if argv.first().is_none_or(|a| a.is_empty()) => {
                return Err(Problem::new(
                    ErrorKind::InvalidValue,
                    format!("{key}.from.command"),
                    "the command is empty",
                    "write the program and its arguments, e.g. { command = [\"op\", \"read\", \"op://vault/item/token\"] }",
                ))
            }
            _ => {}
        }
        if s.hosts.is_empty() {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                format!("{key}.hosts"),
                "no host is bound, so the secret could never be used",
                "name the hosts it belongs to, e.g. hosts = [\"api.github.com\"]",
            ));
        }
        for (j, h) in s.hosts.iter().enumerate() {
            if !p.network.allow.iter().any(|a| a.covers(h)) {
                return Err(conflict(
                    format!("{key}.hosts[{j}]"),
                    format!("'{h}' is not allowed by network.allow, so the secret could never be sent there"),
                    format!("add \"{h}\" to network.allow"),
                ));
            }
        }
        if s.inject.is_empty() {
            return Err(Problem::new(
                ErrorKind::InvalidValue,
                format!("{key}.inject"),
                "no injection point, so the secret could never be used",
                "write inject = [\"header\"] (query and body only when the API needs them)",
            ));
        }
        if let Some(ttl) = s.ttl {
            at_least_duration(&format!("{key}.ttl"), ttl, DurationSpec::secs(1))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        assert!(is_env_name("PATH"));
        assert!(is_env_name("_x1"));
        assert!(!is_env_name(""));
        assert!(!is_env_name("1X"));
        assert!(!is_env_name("A-B"));
        assert!(!is_env_name("A=B"));
    }
}
