//! Argument rules: a path under a directory, a host in a list, a regular
//! expression, a maximum size. A rule names one top-level argument; an
//! array of strings is checked element by element.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// One rule on one argument, as written in the policy file. Every check
/// that is set must pass.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgRule {
    /// The argument (a key of the call's `arguments`).
    pub name: String,
    /// The value is an absolute path under one of these directories (after
    /// `.` and `..` are resolved; relative paths are refused).
    #[serde(default)]
    pub under: Vec<PathBuf>,
    /// The value is a host, `host:port` or URL whose host matches one of
    /// these patterns (exact, `*.suffix`, optional `:port`).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The value matches this regular expression (anchor it yourself).
    pub regex: Option<String>,
    /// The value's JSON text is at most this many bytes.
    pub max_size: Option<u64>,
}

impl ArgRule {
    /// The kind of check, for the rule's name in refusals.
    pub fn kind(&self) -> &'static str {
        if !self.under.is_empty() {
            "under"
        } else if !self.hosts.is_empty() {
            "hosts"
        } else if self.regex.is_some() {
            "regex"
        } else {
            "max_size"
        }
    }

    /// Refuse a rule that cannot work (a bad pattern, a relative directory).
    pub fn check(&self) -> Result<(), String> {
        for d in &self.under {
            if !d.is_absolute() {
                return Err(format!(
                    "under = {:?} must be an absolute path",
                    d.display().to_string()
                ));
            }
        }
        for h in &self.hosts {
            cordon_hostpattern::HostPattern::parse(h)
                .map_err(|e| format!("hosts: {h:?} is not a host pattern: {e}"))?;
        }
        if let Some(r) = &self.regex {
            regex::Regex::new(r).map_err(|e| format!("regex {r:?}: {e}"))?;
        }
        if self.under.is_empty()
            && self.hosts.is_empty()
            && self.regex.is_none()
            && self.max_size.is_none()
        {
            return Err(format!(
                "the rule on {:?} checks nothing: give under, hosts, regex or max_size",
                self.name
            ));
        }
        Ok(())
    }

    /// Check the argument's value (absent: nothing to check).
    pub fn check_value(&self, value: Option<&Value>) -> Result<(), String> {
        let Some(value) = value else { return Ok(()) };
        if let Some(max) = self.max_size {
            let size = value.to_string().len() as u64;
            if size > max {
                return Err(format!(
                    "the argument {} is {size} bytes, over the policy's max_size of {max}",
                    self.name
                ));
            }
        }
        let strings: Vec<&str> = match value {
            Value::String(s) => vec![s.as_str()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let textual = !self.under.is_empty() || !self.hosts.is_empty() || self.regex.is_some();
        let all_strings = match value {
            Value::String(_) => true,
            Value::Array(items) => items.iter().all(Value::is_string),
            _ => false,
        };
        if textual && !all_strings {
            return Err(format!(
                "the argument {} must be a string (or a list of strings) for the policy to check it",
                self.name
            ));
        }
        for s in strings {
            self.check_string(s)?;
        }
        Ok(())
    }

    fn check_string(&self, s: &str) -> Result<(), String> {
        if !self.under.is_empty() {
            let inside = normalize(Path::new(s)).is_some_and(|p| {
                self.under
                    .iter()
                    .filter_map(|d| normalize(d))
                    .any(|d| p.starts_with(d))
            });
            if !inside {
                let dirs: Vec<String> =
                    self.under.iter().map(|d| d.display().to_string()).collect();
                return Err(format!(
                    "the argument {} = {s:?} is not an absolute path under {}",
                    self.name,
                    dirs.join(", ")
                ));
            }
        }
        if !self.hosts.is_empty() {
            let ok = host_of(s).is_some_and(|(host, port)| {
                self.hosts.iter().any(|h| {
                    cordon_hostpattern::HostPattern::parse(h).is_ok_and(|p| p.matches(&host, port))
                })
            });
            if !ok {
                return Err(format!(
                    "the argument {} = {s:?} does not name one of the hosts {}",
                    self.name,
                    self.hosts.join(", ")
                ));
            }
        }
        if let Some(r) = &self.regex {
            let ok = regex::Regex::new(r).is_ok_and(|re| re.is_match(s));
            if !ok {
                return Err(format!(
                    "the argument {} does not match the regex {r:?}",
                    self.name
                ));
            }
        }
        Ok(())
    }
}

/// An absolute path with `.` and `..` resolved lexically (`..` at the root
/// stays at the root); `None` for a relative path.
fn normalize(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// The host and port a value names: a URL (`scheme://[user@]host[:port]/...`)
/// or a bare `host[:port]`. Without a port: 80 for http, else 443.
fn host_of(value: &str) -> Option<(String, u16)> {
    let (scheme, rest) = match value.split_once("://") {
        Some((s, r)) => (Some(s.to_ascii_lowercase()), r),
        None => (None, value),
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let default_port = if scheme.as_deref() == Some("http") {
        80
    } else {
        443
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        (h.to_owned(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), p.parse().ok()?),
            None => (authority.to_owned(), default_port),
        }
    };
    (!host.is_empty()).then_some((host, port))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(toml_text: &str) -> ArgRule {
        let r: ArgRule = toml::from_str(toml_text).unwrap();
        r.check().unwrap();
        r
    }

    #[test]
    fn under_resolves_dot_dot_and_refuses_relative() {
        let r = rule("name = \"path\"\nunder = [\"/srv/docs\"]");
        assert!(r.check_value(Some(&json!("/srv/docs/a/b.txt"))).is_ok());
        assert!(r.check_value(Some(&json!("/srv/docs"))).is_ok());
        assert!(r.check_value(Some(&json!("/srv/docs/../secret"))).is_err());
        assert!(r.check_value(Some(&json!("/srv/docsx/a"))).is_err());
        assert!(r.check_value(Some(&json!("docs/a"))).is_err());
        assert!(r
            .check_value(Some(&json!(["/srv/docs/a", "/etc/passwd"])))
            .is_err());
        assert!(r.check_value(Some(&json!({"p": "/srv/docs"}))).is_err());
        assert!(r.check_value(None).is_ok());
    }

    #[test]
    fn hosts_match_urls_and_bare_names() {
        let r = rule("name = \"url\"\nhosts = [\"example.com\", \"*.example.org\"]");
        assert!(r.check_value(Some(&json!("https://example.com/x"))).is_ok());
        assert!(r
            .check_value(Some(&json!("http://user@a.example.org:8080/")))
            .is_ok());
        assert!(r.check_value(Some(&json!("example.com"))).is_ok());
        assert!(r
            .check_value(Some(&json!("https://evil.com/?example.com")))
            .is_err());
        assert!(r
            .check_value(Some(&json!("https://example.com@evil.com/")))
            .is_err());
        assert!(r
            .check_value(Some(&json!("https://example.com.evil.com/")))
            .is_err());
    }

    #[test]
    fn regex_and_max_size() {
        let r = rule("name = \"q\"\nregex = \"^[a-z ]+$\"\nmax_size = 12");
        assert!(r.check_value(Some(&json!("abc def"))).is_ok());
        assert!(r.check_value(Some(&json!("abc; rm"))).is_err());
        assert!(r.check_value(Some(&json!("abcdefghijklmnop"))).is_err());
    }

    #[test]
    fn a_rule_that_checks_nothing_is_refused() {
        let r: ArgRule = toml::from_str("name = \"x\"").unwrap();
        assert!(r.check().is_err());
    }
}
