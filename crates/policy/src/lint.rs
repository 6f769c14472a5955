//! Warnings about valid but risky profiles. Each has a stable `code` that
//! tools and users can match on.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::model::{
    CwdAccess, InjectAt, IsolationLevel, NetworkMode, OnUnlisted, Profile, TrustLevel,
};
use crate::units::{ByteSize, DurationSpec};

/// How much a warning matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Probably not what was meant.
    Warning,
    /// Opens a real path for an attack.
    Danger,
}

/// One finding of [`Profile::lint`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LintWarning {
    /// Stable identifier, e.g. `lethal-trifecta`.
    pub code: &'static str,
    pub severity: Severity,
    /// The key concerned, e.g. `network.allow_private`.
    pub key: Option<String>,
    pub message: String,
    pub hint: String,
}

impl fmt::Display for LintWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Danger => "danger",
        };
        write!(f, "{sev}[{}]: ", self.code)?;
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        write!(f, "{}\n  hint: {}", self.message, self.hint)
    }
}

/// Domains under which anyone can publish (a wildcard over them allows
/// exfiltration to attacker-controlled hosts). Wildcards over public
/// registries such as `*.co.uk` never get here: the pattern parser refuses
/// them like `*.com`.
const SHARED_SUFFIXES: &[&str] = &[
    "amazonaws.com",
    "s3.amazonaws.com",
    "cloudfront.net",
    "azurewebsites.net",
    "blob.core.windows.net",
    "cloudapp.net",
    "appspot.com",
    "googleusercontent.com",
    "storage.googleapis.com",
    "firebaseapp.com",
    "web.app",
    "github.io",
    "githubusercontent.com",
    "gitlab.io",
    "herokuapp.com",
    "netlify.app",
    "vercel.app",
    "pages.dev",
    "workers.dev",
    "ngrok.io",
    "ngrok-free.app",
    "trycloudflare.com",
    "glitch.me",
    "repl.co",
    "fly.dev",
    "onrender.com",
];

/// Home-directory paths that hold credentials.
const SENSITIVE_HOME: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".config/gcloud",
    ".config/gh",
    ".password-store",
    ".local/share/keyrings",
    ".mozilla",
    ".config/google-chrome",
];

const HOME: &str = "/\u{0}home";
const CWD: &str = "/\u{0}cwd";

fn resolved(raw: &Path) -> std::path::PathBuf {
    crate::resolve_path(raw, Path::new(CWD), Path::new(HOME))
}

/// `Some(rest)` when the path is in a home directory (`~`, `/home/u`,
/// `/root`, `/Users/u`); `rest` is the part below the home directory.
fn under_home(raw: &Path) -> Option<std::path::PathBuf> {
    let r = resolved(raw);
    if let Ok(rest) = r.strip_prefix(HOME) {
        return Some(rest.to_path_buf());
    }
    if let Ok(rest) = r.strip_prefix("/root") {
        return Some(rest.to_path_buf());
    }
    for base in ["/home", "/Users"] {
        if let Ok(rest) = r.strip_prefix(base) {
            let mut c = rest.components();
            if c.next().is_some() {
                return Some(c.as_path().to_path_buf());
            }
        }
    }
    None
}

fn looks_like_credential(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "APIKEY",
        "PRIVATE_KEY",
        "CREDENTIAL",
    ]
    .iter()
    .any(|w| n.contains(w))
        || n.ends_with("_KEY")
        || n.starts_with("AWS_")
}

/// The warnings found so far, in the order they were found.
#[derive(Default)]
struct Findings(Vec<LintWarning>);

impl Findings {
    fn warn(
        &mut self,
        code: &'static str,
        severity: Severity,
        key: Option<String>,
        message: String,
        hint: &str,
    ) {
        self.0.push(LintWarning {
            code,
            severity,
            key,
            message,
            hint: hint.to_string(),
        })
    }
}

impl Profile {
    /// Risky settings in a valid profile, in a stable order.
    pub fn lint(&self) -> Vec<LintWarning> {
        let mut found = Findings::default();
        self.lint_trifecta(&mut found);
        self.lint_writable_paths(&mut found);
        self.lint_visible_paths(&mut found);
        self.lint_host_tools(&mut found);
        self.lint_network(&mut found);
        self.lint_secrets(&mut found);
        self.lint_isolation(&mut found);
        self.lint_limits(&mut found);
        found.0
    }

    /// The lethal trifecta: private data, untrusted code and a way out.
    fn lint_trifecta(&self, found: &mut Findings) {
        let fs = &self.filesystem;
        let net = &self.network;
        let home_paths: Vec<String> = fs
            .read_only
            .iter()
            .chain(&fs.read_write)
            .filter(|p| under_home(p).is_some() || resolved(p) == Path::new("/"))
            .map(|p| p.display().to_string())
            .collect();
        let egress = net.mode == NetworkMode::Proxy
            && (!net.allow.is_empty() || net.on_unlisted == OnUnlisted::Ask);
        let untrusted = matches!(self.extends, TrustLevel::Untrusted | TrustLevel::Low);
        if untrusted && egress && (!home_paths.is_empty() || !self.secrets.is_empty()) {
            let mut data = home_paths.clone();
            data.extend(self.secrets.iter().map(|s| format!("secret {}", s.name)));
            found.warn(
                "lethal-trifecta",
                Severity::Danger,
                Some("network.allow".into()),
                format!(
                    "untrusted code ({} preset) can read private data ({}) and send data out through the proxy",
                    self.extends,
                    data.join(", ")
                ),
                "remove one of the three: the private paths or secrets, the network allowlist, or the untrusted preset (only for code you have reviewed)",
            );
        }
    }

    /// Writable places that should never be.
    fn lint_writable_paths(&self, found: &mut Findings) {
        let fs = &self.filesystem;
        for (i, raw) in fs.read_write.iter().enumerate() {
            let key = Some(format!("filesystem.read_write[{i}]"));
            let r = resolved(raw);
            let shown = raw.display();
            if r == Path::new("/") {
                found.warn(
                    "writable-root",
                    Severity::Danger,
                    key,
                    format!("'{shown}' makes the whole host filesystem writable"),
                    "list only the directories the workload writes, e.g. ./out",
                );
            } else if under_home(raw).is_some_and(|rest| rest.as_os_str().is_empty()) {
                found.warn(
                    "writable-home",
                    Severity::Danger,
                    key,
                    format!("'{shown}' makes the home directory writable (shell startup files, ssh keys, git hooks)"),
                    "list only the directories the workload writes, e.g. ./out or ~/.cache/pip",
                );
            } else if [
                "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/var", "/opt", "/srv",
            ]
            .iter()
            .any(|s| r == Path::new(s))
            {
                found.warn(
                    "writable-system",
                    Severity::Danger,
                    key,
                    format!("'{shown}' makes a system directory writable"),
                    "mount it read-only, or write to a scratch directory instead",
                );
            }
        }
    }

    /// Readable places that hold the host, a home directory or credentials.
    fn lint_visible_paths(&self, found: &mut Findings) {
        let fs = &self.filesystem;
        for (name, list) in [("read_only", &fs.read_only), ("read_write", &fs.read_write)] {
            for (i, raw) in list.iter().enumerate() {
                let key = Some(format!("filesystem.{name}[{i}]"));
                let shown = raw.display();
                let Some(rest) = under_home(raw) else {
                    if name == "read_only" && resolved(raw) == Path::new("/") {
                        found.warn(
                            "readable-root",
                            Severity::Warning,
                            key,
                            format!("'{shown}' makes the whole host filesystem readable"),
                            "list only the directories the workload reads",
                        );
                    }
                    continue;
                };
                if rest.as_os_str().is_empty() && name == "read_only" {
                    found.warn(
                        "readable-home",
                        Severity::Warning,
                        key,
                        format!("'{shown}' makes the whole home directory readable, credentials included"),
                        "list only the directories the workload reads, e.g. ~/.cache/pip",
                    );
                } else if SENSITIVE_HOME.iter().any(|s| rest.starts_with(s)) {
                    found.warn(
                        "credential-path",
                        Severity::Danger,
                        key,
                        format!("'{shown}' holds credentials"),
                        "bind the credential as a [[secrets]] entry instead, so the sandbox never sees it",
                    );
                }
            }
        }
    }

    /// Writable paths with the host tools' files unprotected.
    fn lint_host_tools(&self, found: &mut Findings) {
        let fs = &self.filesystem;
        if !fs.protect_host_tools && (fs.cwd == CwdAccess::Rw || !fs.read_write.is_empty()) {
            found.warn(
                "host-tools-unprotected",
                Severity::Danger,
                Some("filesystem.protect_host_tools".into()),
                "the workload may change what host tools run on their own in writable paths (git config and hooks, editor tasks): the caller's next `git status` can run its code".into(),
                "keep protect_host_tools = true, or write only to directories that hold no repository",
            );
        }
    }

    /// An allowlist anyone can join; private addresses.
    fn lint_network(&self, found: &mut Findings) {
        let net = &self.network;
        for (i, a) in net.allow.iter().enumerate() {
            if a.is_wildcard() && SHARED_SUFFIXES.contains(&a.host()) {
                found.warn(
                    "broad-allow",
                    Severity::Warning,
                    Some(format!("network.allow[{i}]")),
                    format!(
                        "'{a}' allows hosts that anyone can create, which makes exfiltration easy"
                    ),
                    "name the exact hosts, e.g. my-bucket.s3.amazonaws.com",
                );
            }
        }
        if net.allow_private {
            found.warn(
                "allow-private",
                Severity::Danger,
                Some("network.allow_private".into()),
                "the sandbox may reach private, loopback, link-local and cloud metadata addresses".into(),
                "keep it false unless the workload must reach a service on your network; name that host in network.allow",
            );
        }
    }

    /// Secrets where servers log them, on wildcards, over plain HTTP; credentials passed as environment.
    fn lint_secrets(&self, found: &mut Findings) {
        let net = &self.network;
        for (i, s) in self.secrets.iter().enumerate() {
            if s.inject
                .iter()
                .any(|w| matches!(w, InjectAt::Query | InjectAt::Body))
            {
                found.warn(
                    "secret-in-query-or-body",
                    Severity::Warning,
                    Some(format!("secrets[{i}].inject")),
                    format!("secret '{}' may be injected into URLs or bodies, which servers often log or echo back", s.name),
                    "use inject = [\"header\"] unless the API requires otherwise",
                );
            }
            if s.hosts.iter().any(|h| h.is_wildcard()) {
                found.warn(
                    "secret-wildcard-host",
                    Severity::Warning,
                    Some(format!("secrets[{i}].hosts")),
                    format!("secret '{}' is bound to a wildcard, so every host below it receives the value", s.name),
                    "bind it to the exact API host, e.g. api.github.com",
                );
            }
        }
        if !self.secrets.is_empty() && !net.https_only {
            found.warn(
                "secret-plain-http",
                Severity::Warning,
                Some("network.https_only".into()),
                "secrets may be substituted into plain-HTTP requests, which travel unencrypted"
                    .into(),
                "set network.https_only = true",
            );
        }
        for (i, name) in self.env.pass.iter().enumerate() {
            if looks_like_credential(name) {
                found.warn(
                    "env-credential",
                    Severity::Warning,
                    Some(format!("env.pass[{i}]")),
                    format!("'{name}' looks like a credential and is copied into the sandbox"),
                    "declare it as a [[secrets]] entry so the sandbox sees only a placeholder",
                );
            }
        }
    }

    /// Weaker isolation and unix sockets.
    fn lint_isolation(&self, found: &mut Findings) {
        if self.isolation.level == IsolationLevel::Process {
            found.warn(
                "weaker-isolation",
                Severity::Warning,
                Some("isolation.level".into()),
                "process isolation has no mount, pid or network namespaces: host files and processes stay visible".into(),
                "use level = \"namespaces\" where user namespaces are available",
            );
        } else if self.isolation.allow_weaker {
            found.warn(
                "weaker-isolation",
                Severity::Warning,
                Some("isolation.allow_weaker".into()),
                "on hosts without user namespaces the sandbox silently falls back to process isolation".into(),
                "keep it false and fix the host (cordon doctor says how), or accept it knowingly",
            );
        }
        if self.syscalls.unix_sockets {
            found.warn(
                "unix-sockets",
                Severity::Info,
                Some("syscalls.unix_sockets".into()),
                "the workload may create unix sockets and connect to any listener in a mounted path".into(),
                "keep it false unless the workload needs it (socketpair works without it)",
            );
        }
    }

    /// Very large limits.
    fn lint_limits(&self, found: &mut Findings) {
        let fs = &self.filesystem;
        let net = &self.network;
        let l = &self.limits;
        let big: [(&str, bool, String); 13] = [
            (
                "limits.memory",
                l.memory > ByteSize::gib(64),
                l.memory.to_string(),
            ),
            (
                "limits.timeout",
                l.timeout > DurationSpec::hours(24),
                l.timeout.to_string(),
            ),
            (
                "limits.cpu_time",
                l.cpu_time > DurationSpec::hours(24),
                l.cpu_time.to_string(),
            ),
            ("limits.pids", l.pids > 32_768, l.pids.to_string()),
            (
                "limits.open_files",
                l.open_files > 65_536,
                l.open_files.to_string(),
            ),
            (
                "limits.file_size",
                l.file_size > ByteSize(ByteSize::TIB),
                l.file_size.to_string(),
            ),
            (
                "limits.output",
                l.output > ByteSize::gib(1),
                l.output.to_string(),
            ),
            (
                "filesystem.tmp_size",
                fs.tmp_size > ByteSize::gib(64),
                fs.tmp_size.to_string(),
            ),
            (
                "network.max_bytes",
                net.max_bytes > ByteSize::gib(100),
                net.max_bytes.to_string(),
            ),
            // Taken from the caller's own per-user allowance (Linux's
            // defaults: 128 instances, 8192+ watches, 800 KiB of queues).
            (
                "limits.inotify_instances",
                l.inotify_instances > 64,
                l.inotify_instances.to_string(),
            ),
            (
                "limits.inotify_watches",
                l.inotify_watches > 65_536,
                l.inotify_watches.to_string(),
            ),
            (
                "limits.queued_signals",
                l.queued_signals > 4096,
                l.queued_signals.to_string(),
            ),
            (
                "limits.mqueue_bytes",
                l.mqueue_bytes > ByteSize::kib(400),
                l.mqueue_bytes.to_string(),
            ),
        ];
        for (key, is_big, value) in big {
            if is_big {
                found.warn(
                    "huge-limit",
                    Severity::Info,
                    Some(key.into()),
                    format!("{value} is very large; a runaway workload can use all of it"),
                    "set what the workload needs, with some headroom",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(toml: &str) -> Vec<&'static str> {
        let p = Profile::from_toml_str(toml, "t.toml").unwrap();
        p.lint().into_iter().map(|w| w.code).collect()
    }

    #[test]
    fn trifecta() {
        let base = r#"
[filesystem]
read_only = ["~/notes"]
[network]
mode = "proxy"
allow = ["api.example.com"]
"#;
        assert_eq!(codes(base), vec!["lethal-trifecta"]);
        // Reviewed code: no trifecta.
        assert!(codes(&format!("extends = \"medium\"\n{base}")).is_empty());
        // No egress: no trifecta.
        assert!(codes("[filesystem]\nread_only = [\"~/notes\"]\n").is_empty());
        // A secret counts as private data.
        let with_secret = r#"
[network]
mode = "proxy"
allow = ["api.github.com"]
https_only = true
[[secrets]]
name = "GITHUB_TOKEN"
from = { env = "GITHUB_TOKEN" }
hosts = ["api.github.com"]
"#;
        assert_eq!(codes(with_secret), vec!["lethal-trifecta"]);
        let p = Profile::from_toml_str(with_secret, "t.toml").unwrap();
        let w = &p.lint()[0];
        assert_eq!(w.severity, Severity::Danger);
        assert!(w.message.contains("secret GITHUB_TOKEN"), "{w}");
        assert!(w
            .to_string()
            .starts_with("danger[lethal-trifecta]: network.allow: "));
    }

    #[test]
    fn unprotected_host_tools_with_writable_paths() {
        let off = "[filesystem]\nprotect_host_tools = false\n";
        assert!(
            codes(off).is_empty(),
            "nothing writable: nothing to warn about"
        );
        assert_eq!(
            codes(&format!("{off}read_write = [\"./out\"]")),
            vec!["host-tools-unprotected"]
        );
        assert_eq!(
            codes(&format!("{off}cwd = \"rw\"")),
            vec!["host-tools-unprotected"]
        );
        assert!(codes("[filesystem]\nread_write = [\"./out\"]").is_empty());
    }

    #[test]
    fn dangerous_paths() {
        assert_eq!(
            codes("[filesystem]\nread_write = [\"~\"]"),
            vec!["writable-home"]
        );
        assert_eq!(
            codes("[filesystem]\nread_write = [\"/home/alice/\"]"),
            vec!["writable-home"]
        );
        assert_eq!(
            codes("[filesystem]\nread_write = [\"/\"]"),
            vec!["writable-root"]
        );
        assert_eq!(
            codes("[filesystem]\nread_write = [\"/etc\"]"),
            vec!["writable-system"]
        );
        assert_eq!(
            codes("[filesystem]\nread_only = [\"~/\"]"),
            vec!["readable-home"]
        );
        assert_eq!(
            codes("[filesystem]\nread_only = [\"/\"]"),
            vec!["readable-root"]
        );
        assert_eq!(
            codes("[filesystem]\nread_only = [\"~/.ssh\"]"),
            vec!["credential-path"]
        );
        assert_eq!(
            codes("[filesystem]\nread_only = [\"/root/.aws/credentials\"]"),
            vec!["credential-path"]
        );
        assert!(codes("[filesystem]\nread_write = [\"~/.cache/pip\"]").is_empty());
    }

    #[test]
    fn network_and_secrets() {
        let c = codes(
            r#"
extends = "medium"
[network]
mode = "proxy"
allow = ["*.amazonaws.com", "*.github.io", "*.example.com", "api.x.com"]
allow_private = true
[[secrets]]
name = "TOKEN"
from = { command = ["op", "read", "x"] }
hosts = ["*.example.com"]
inject = ["header", "query"]
"#,
        );
        assert_eq!(
            c,
            vec![
                "broad-allow",
                "broad-allow",
                "allow-private",
                "secret-in-query-or-body",
                "secret-wildcard-host",
                "secret-plain-http"
            ]
        );
    }

    #[test]
    fn env_isolation_limits() {
        assert_eq!(
            codes("[env]\npass = [\"OPENAI_API_KEY\", \"LANG\", \"AWS_PROFILE\"]"),
            vec!["env-credential", "env-credential"]
        );
        assert_eq!(
            codes("[isolation]\nlevel = \"process\""),
            vec!["weaker-isolation"]
        );
        assert_eq!(
            codes("[isolation]\nallow_weaker = true"),
            vec!["weaker-isolation"]
        );
        assert_eq!(
            codes("[syscalls]\nunix_sockets = true"),
            vec!["unix-sockets"]
        );
        assert_eq!(
            codes("[limits]\nmemory = \"128GiB\"\ntimeout = \"48h\"\npids = 100000"),
            vec!["huge-limit", "huge-limit", "huge-limit"]
        );
    }
}
