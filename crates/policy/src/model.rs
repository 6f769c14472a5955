//! The resolved profile: concrete values for every setting, after a profile
//! file has been applied over its preset and validated.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use cordon_hostpattern::HostPattern;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::{ByteSize, DurationSpec, ValueError};

/// Declares a closed set of lower-case words with serde, schema, `Display`,
/// `FromStr` (case-insensitive, for CLI flags) and `ALL`.
macro_rules! word_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident => $word:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $word)] $variant ),+
        }

        impl $name {
            /// Every value, in order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The word used in profiles and on the command line.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word),+ }
            }

            /// The accepted words, comma-separated (for messages).
            pub fn expected() -> String {
                [$($word),+].join(", ")
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = ValueError;
            fn from_str(s: &str) -> Result<Self, ValueError> {
                let t = s.trim();
                $( if t.eq_ignore_ascii_case($word) { return Ok($name::$variant); } )+
                Err(ValueError::new(
                    format!("'{s}' is not {}", $what),
                    format!("expected one of: {}", Self::expected()),
                ))
            }
        }
    };
}

word_enum! {
    /// What `cordon run` does with the pre-execution scanner's findings.
    ScanMode, "a scan mode" {
        /// Do not scan.
        Off => "off",
        /// Scan and print findings; run anyway.
        Warn => "warn",
        /// On a block-level finding, ask on the terminal; without one, refuse.
        Ask => "ask",
        /// On a block-level finding, refuse to run (exit 125).
        Block => "block",
    }
}

word_enum! {
    /// How far the code that runs is trusted; names the preset a profile extends.
    TrustLevel, "a preset" {
        /// Code nobody has read (the default): strictest limits, no network.
        Untrusted => "untrusted",
        /// Code from a known source: more resources, still no network.
        Low => "low",
        /// Reviewed code: writable current directory, egress proxy with an empty allowlist.
        Medium => "medium",
        /// Trusted tooling: generous limits; the same boundaries as medium.
        High => "high",
    }
}

word_enum! {
    /// The isolation mechanism.
    IsolationLevel, "an isolation level" {
        /// Full sandbox: user, mount, pid, net, ipc, uts and cgroup namespaces, plus seccomp and Landlock.
        Namespaces => "namespaces",
        /// Landlock + seccomp + rlimits without namespaces (weaker; for hosts without user namespaces).
        Process => "process",
    }
}

word_enum! {
    /// Access to the current directory, which is mounted at its own path and used as the working directory.
    CwdAccess, "a kind of access" {
        /// Readable, not writable.
        Ro => "ro",
        /// Readable and writable.
        Rw => "rw",
        /// Not mounted; the working directory is /tmp.
        None => "none",
    }
}

word_enum! {
    /// What happens when a stream exceeds `limits.output`.
    OnOutputLimit, "an action" {
        /// Keep the first `output` bytes, count and drop the rest.
        Truncate => "truncate",
        /// Kill the sandbox.
        Kill => "kill",
    }
}

word_enum! {
    /// Network access.
    NetworkMode, "a network mode" {
        /// No network at all: IP sockets are refused.
        None => "none",
        /// The sandbox's own loopback only; nothing leaves it.
        Loopback => "loopback",
        /// Loopback plus cordon's egress proxy, which applies the allow/deny rules.
        Proxy => "proxy",
    }
}

word_enum! {
    /// What the proxy does with a host that no rule names.
    OnUnlisted, "an action" {
        /// Refuse with 403 and say how to allow it.
        Deny => "deny",
        /// Ask an operator (server mode); `cordon run` denies with a message.
        Ask => "ask",
    }
}

word_enum! {
    /// Where the proxy may put a secret's real value.
    InjectAt, "an injection point" {
        /// Request headers (Authorization and custom headers).
        Header => "header",
        /// The URL query string.
        Query => "query",
        /// The request body.
        Body => "body",
    }
}

word_enum! {
    /// An HTTP method allowed for plain HTTP requests.
    HttpMethod, "an HTTP method" {
        Get => "GET",
        Head => "HEAD",
        Post => "POST",
        Put => "PUT",
        Patch => "PATCH",
        Delete => "DELETE",
        Options => "OPTIONS",
    }
}

/// Where a secret's real value comes from (read by cordon on the host, never
/// inside the sandbox).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SecretSource {
    /// A host environment variable.
    Env(String),
    /// A file on the host (`~` is expanded).
    File(PathBuf),
    /// A command whose standard output is the value, e.g. a password manager's CLI.
    Command(Vec<String>),
}

/// A resolved profile: every setting has a concrete value.
///
/// Serializes with the same keys as a profile file, so
/// [`Profile::to_toml_string`] gives a file that loads back to an equal
/// profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// Where the profile came from: a file path, `preset:untrusted`, ...
    #[serde(skip)]
    pub origin: String,
    /// The preset this profile was built on.
    pub extends: TrustLevel,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub isolation: Isolation,
    pub filesystem: Filesystem,
    pub limits: Limits,
    pub env: Env,
    pub syscalls: Syscalls,
    pub network: Network,
    pub audit: Audit,
    pub stage: Stage,
    pub scan: Scan,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<Secret>,
}

/// `[isolation]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Isolation {
    pub level: IsolationLevel,
    /// Accept `process` isolation when user namespaces are unavailable.
    pub allow_weaker: bool,
}

/// `[filesystem]`. Paths are kept as written; see [`crate::resolve_path`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Filesystem {
    pub cwd: CwdAccess,
    pub read_only: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub tmp_size: ByteSize,
    pub tmp_inodes: u64,
    /// Bind read-only, inside writable paths, the files that host tools
    /// run on their own (git config and hooks, editor tasks, hook managers).
    pub protect_host_tools: bool,
}

/// `[limits]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Wall clock; the whole process tree is killed when it runs out.
    pub timeout: DurationSpec,
    /// CPU time (RLIMIT_CPU).
    pub cpu_time: DurationSpec,
    /// Memory including swap (cgroup; RLIMIT_AS as a fallback).
    pub memory: ByteSize,
    /// Processes and threads.
    pub pids: u64,
    /// Open file descriptors (RLIMIT_NOFILE).
    pub open_files: u64,
    /// Largest file the workload may write (RLIMIT_FSIZE).
    pub file_size: ByteSize,
    /// Output kept per stream (stdout, stderr).
    pub output: ByteSize,
    pub on_output_limit: OnOutputLimit,
    /// inotify instances the run may hold (charged to the caller's own
    /// per-user allowance; `user.max_inotify_instances` inside).
    pub inotify_instances: u64,
    /// inotify watches the run may hold (`user.max_inotify_watches` inside).
    pub inotify_watches: u64,
    /// Signals queued to the run's processes at once (RLIMIT_SIGPENDING).
    pub queued_signals: u64,
    /// Bytes of POSIX message queues (RLIMIT_MSGQUEUE).
    pub mqueue_bytes: ByteSize,
}

/// `[env]`: the environment is built from these only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Env {
    /// Copied from the host environment when set there.
    pub pass: Vec<String>,
    /// Set to these values.
    pub set: BTreeMap<String, String>,
}

/// `[syscalls]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Syscalls {
    /// Allow `socket(AF_UNIX, ...)`; `socketpair` is always allowed.
    pub unix_sockets: bool,
}

/// `[network]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Network {
    pub mode: NetworkMode,
    pub allow: Vec<HostPattern>,
    pub deny: Vec<HostPattern>,
    pub https_only: bool,
    /// Methods allowed for plain HTTP; empty means any.
    pub methods: Vec<HttpMethod>,
    /// Private, loopback, link-local and metadata destinations.
    pub allow_private: bool,
    /// A tunnel may start with a TLS ClientHello without SNI.
    pub allow_missing_sni: bool,
    pub on_unlisted: OnUnlisted,
    /// Total bytes transferred (both directions) before the proxy refuses more.
    pub max_bytes: ByteSize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_limit: Vec<RateLimit>,
}

/// One `[[network.rate_limit]]`: at most `requests` requests and `bytes`
/// bytes per `per` to hosts matching `host`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateLimit {
    pub host: HostPattern,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<ByteSize>,
    pub per: DurationSpec,
}

/// One `[[secrets]]`: a credential the sandbox sees only as a placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Secret {
    /// The environment variable that holds the placeholder inside.
    pub name: String,
    pub from: SecretSource,
    /// Hosts the real value may be sent to.
    pub hosts: Vec<HostPattern>,
    /// Where the proxy may substitute it.
    pub inject: Vec<InjectAt>,
    /// After this long the proxy stops injecting it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<DurationSpec>,
}

/// `[audit]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Audit {
    pub enabled: bool,
    /// The store; `None` means the audit crate's default location.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
}

/// `[stage]`: staged directories (`run --stage`) and what their
/// promotion lets through. The built-in rules (git hooks and config
/// refused; CI files, shell startup files, new executables and files over
/// `max_file_size` asked about) always apply; these globs add to them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stage {
    /// Globs (relative to the staged directory) never promoted without `--allow profile-refuse`.
    pub refuse: Vec<String>,
    /// Globs promoted only after a yes on a terminal, or with `--allow profile-ask`.
    pub ask: Vec<String>,
    /// Globs promoted as soon as the run ends (unless another rule holds them back).
    pub auto: Vec<String>,
    /// Files larger than this need a yes.
    pub max_file_size: ByteSize,
    /// A run whose staged changes take more than this is discarded when it ends.
    pub max_size: ByteSize,
    /// Staged runs older than this are removed when a new one starts.
    pub keep: DurationSpec,
}

/// `[scan]`: the pre-execution scanner (advisory; the sandbox is the
/// control).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scan {
    pub mode: ScanMode,
    /// Rule files added to cordon's own rules (paths as written).
    pub rules: Vec<PathBuf>,
    /// Rule ids left out.
    pub ignore: Vec<String>,
}

/// The outcome of matching a destination against `[network]` rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostDecision<'a> {
    /// A `deny` pattern matched (deny wins over allow).
    Denied(&'a HostPattern),
    /// An `allow` pattern matched and no `deny` pattern did.
    Allowed(&'a HostPattern),
    /// No pattern matched: apply `on_unlisted`.
    Unlisted,
}

impl Network {
    /// Matches `host`:`port` against the rules: deny wins, then allow, else unlisted.
    /// The mode and address checks (private ranges) are the proxy's job.
    pub fn decide(&self, host: &str, port: u16) -> HostDecision<'_> {
        if let Some(p) = self.deny.iter().find(|p| p.matches(host, port)) {
            return HostDecision::Denied(p);
        }
        if let Some(p) = self.allow.iter().find(|p| p.matches(host, port)) {
            return HostDecision::Allowed(p);
        }
        HostDecision::Unlisted
    }
}

impl Secret {
    /// Parses the command-line form `NAME@host[,host...]`: the value comes from
    /// the host environment variable `NAME`, is injected into headers only,
    /// and only on requests to the listed hosts.
    pub fn parse_flag(text: &str) -> Result<Secret, ValueError> {
        let hint =
            "write NAME@host, e.g. GITHUB_TOKEN@api.github.com (several hosts: NAME@a.com,b.com)";
        let Some((name, hosts)) = text.split_once('@') else {
            return Err(ValueError::new(format!("'{text}' names no host"), hint));
        };
        if !crate::validate::is_env_name(name) {
            return Err(ValueError::new(
                format!("'{name}' is not an environment variable name"),
                "use letters, digits and '_', not starting with a digit",
            ));
        }
        let hosts = hosts
            .split(',')
            .map(HostPattern::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Secret {
            name: name.to_string(),
            from: SecretSource::Env(name.to_string()),
            hosts,
            inject: vec![InjectAt::Header],
            ttl: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_case_insensitively() {
        assert_eq!("HIGH".parse::<TrustLevel>(), Ok(TrustLevel::High));
        assert_eq!("get".parse::<HttpMethod>(), Ok(HttpMethod::Get));
        let e = "hihg".parse::<TrustLevel>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "'hihg' is not a preset; expected one of: untrusted, low, medium, high"
        );
        assert_eq!(CwdAccess::None.to_string(), "none");
    }

    #[test]
    fn secret_flag() {
        let s = Secret::parse_flag("GITHUB_TOKEN@api.github.com,uploads.github.com").unwrap();
        assert_eq!(s.name, "GITHUB_TOKEN");
        assert_eq!(s.from, SecretSource::Env("GITHUB_TOKEN".into()));
        assert_eq!(s.hosts.len(), 2);
        assert_eq!(s.inject, vec![InjectAt::Header]);
        assert!(Secret::parse_flag("GITHUB_TOKEN").is_err());
        assert!(Secret::parse_flag("1X@a.com").is_err());
        assert!(Secret::parse_flag("X@*").is_err());
    }

    #[test]
    fn deny_wins() {
        let n = Network {
            mode: NetworkMode::Proxy,
            allow: vec![HostPattern::parse("*.example.com").unwrap()],
            deny: vec![HostPattern::parse("evil.example.com").unwrap()],
            https_only: false,
            methods: vec![],
            allow_private: false,
            allow_missing_sni: false,
            on_unlisted: OnUnlisted::Deny,
            max_bytes: ByteSize::gib(1),
            rate_limit: vec![],
        };
        assert!(matches!(
            n.decide("evil.example.com", 443),
            HostDecision::Denied(_)
        ));
        assert!(matches!(
            n.decide("ok.example.com", 443),
            HostDecision::Allowed(_)
        ));
        assert_eq!(n.decide("example.com", 443), HostDecision::Unlisted);
    }
}
