//! The file layer: what a profile file may say. Every key is optional; a key
//! that is present replaces the preset's value (lists included), except
//! `env.set`, whose entries are added to the preset's.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cordon_hostpattern::HostPattern;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::{
    Audit, CwdAccess, Env, Filesystem, HttpMethod, InjectAt, Isolation, IsolationLevel, Limits,
    Network, NetworkMode, OnOutputLimit, OnUnlisted, Profile, RateLimit, Scan, ScanMode, Secret,
    SecretSource, Stage, Syscalls, TrustLevel,
};
use crate::units::{ByteSize, DurationSpec};

/// A cordon profile: which files, hosts, credentials and resources a sandbox gets.
/// Every key is optional; unset keys come from the preset named by `extends`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "cordon profile")]
pub struct ProfileFile {
    /// The preset this profile starts from (default: untrusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<TrustLevel>,
    /// What this profile is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<FilesystemFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<EnvFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<SyscallsFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<StageFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanFile>,
    /// Credentials the sandbox sees only as placeholders; the egress proxy
    /// substitutes the real value on requests to the bound hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<SecretFile>>,
}

/// How the sandbox is built.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IsolationFile {
    /// namespaces (full sandbox, default) or process (Landlock + seccomp + rlimits only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<IsolationLevel>,
    /// Accept the process level when user namespaces are unavailable on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_weaker: Option<bool>,
}

/// Which host paths exist inside the sandbox. Paths appear at the same place
/// inside as outside; `~` is the caller's home; relative paths are relative to
/// the directory cordon runs in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilesystemFile {
    /// The current directory: ro, rw or none. It is mounted at its own path and used as the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<CwdAccess>,
    /// Host paths mounted read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<Vec<PathBuf>>,
    /// Host paths mounted writable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_write: Option<Vec<PathBuf>>,
    /// Size of the /tmp tmpfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_size: Option<ByteSize>,
    /// Number of inodes of the /tmp tmpfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_inodes: Option<u64>,
    /// Keep the files that host tools run on their own read-only inside writable paths: a git repository's config, hooks and info (also of submodules and worktrees), editor task and settings directories (.vscode, .idea) and hook-manager configs (.pre-commit-config.yaml, .husky, lefthook). Default true; false lets the workload change what the caller's next `git status` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protect_host_tools: Option<bool>,
}

/// Resource limits, enforced by the kernel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Wall-clock time; the whole process tree is killed when it runs out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
    /// CPU time (RLIMIT_CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<DurationSpec>,
    /// Memory including swap (cgroup limit; an rlimit where no cgroup can be used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
    /// Processes and threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Open file descriptors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
    /// Largest file the workload may write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_size: Option<ByteSize>,
    /// Output kept per stream; the rest is counted and dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<ByteSize>,
    /// truncate (keep the first `output` bytes) or kill the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_output_limit: Option<OnOutputLimit>,
    /// inotify instances the run may hold (taken from the caller's own per-user allowance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inotify_instances: Option<u64>,
    /// inotify watches the run may hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inotify_watches: Option<u64>,
    /// Signals queued to the run's processes at once (RLIMIT_SIGPENDING).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_signals: Option<u64>,
    /// Bytes of POSIX message queues (RLIMIT_MSGQUEUE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mqueue_bytes: Option<ByteSize>,
}

/// The sandbox's environment, built from these only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvFile {
    /// Variables copied from the host environment when set there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<Vec<String>>,
    /// Variables set to fixed values (added to the preset's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<BTreeMap<String, String>>,
}

/// System calls beyond the default set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyscallsFile {
    /// Allow socket(AF_UNIX); socketpair is always allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_sockets: Option<bool>,
}

/// Network access. With mode proxy, traffic leaves only through cordon's
/// egress proxy, which applies these rules (deny wins over allow).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkFile {
    /// none (no network), loopback (own loopback only) or proxy (through cordon's egress proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<NetworkMode>,
    /// Hosts the workload may reach: exact hosts or *.domain, optionally with :port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<HostPattern>>,
    /// Hosts that are always refused, even when an allow pattern matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<HostPattern>>,
    /// Refuse plain HTTP; only CONNECT (TLS) is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_only: Option<bool>,
    /// HTTP methods allowed for plain HTTP requests; empty means any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<HttpMethod>>,
    /// Allow private, loopback, link-local and cloud metadata destinations (default: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_private: Option<bool>,
    /// Let a tunnel start with a TLS ClientHello that names no server (no SNI), e.g. for IP-literal destinations (default: refused). Never for hosts with a bound secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_missing_sni: Option<bool>,
    /// deny or ask (an operator) when no rule names the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_unlisted: Option<OnUnlisted>,
    /// Total bytes transferred through the proxy, both directions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<ByteSize>,
    /// Per-host rate limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Vec<RateLimitFile>>,
}

/// At most `requests` requests and `bytes` bytes per `per` to hosts matching `host`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitFile {
    /// The hosts this limit applies to.
    pub host: HostPattern,
    /// Requests per interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Bytes (both directions) per interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<ByteSize>,
    /// The interval (default 1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<DurationSpec>,
}

/// A secret: the sandbox sees a random placeholder in the environment
/// variable `name`; the proxy swaps in the real value only on requests to `hosts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretFile {
    /// The environment variable that holds the placeholder inside the sandbox.
    pub name: String,
    /// Where the real value comes from: { env = "VAR" }, { file = "path" } or { command = ["prog", "arg"] }.
    pub from: SecretSource,
    /// Hosts the real value may be sent to (each must also be allowed in network.allow).
    pub hosts: Vec<HostPattern>,
    /// Where the value may be injected: header (default), query, body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject: Option<Vec<InjectAt>>,
    /// How long the value is injected after the sandbox starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<DurationSpec>,
}

/// The tamper-evident audit log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditFile {
    /// Record runs (default: true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The audit store (default: under the user's state directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
}

/// Staged directories (`cordon run --stage DIR`): writes are kept aside
/// until `cordon promote`. These globs add to the built-in promotion rules.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageFile {
    /// Paths (globs relative to the staged directory; * stays within a name, ** spans directories) never promoted without --allow profile-refuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refuse: Option<Vec<String>>,
    /// Paths promoted only after a yes on a terminal, or with --allow profile-ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<Vec<String>>,
    /// Paths promoted as soon as the run ends, unless another rule holds them back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<Vec<String>>,
    /// Files larger than this need a yes (default 10MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_size: Option<ByteSize>,
    /// A run whose staged changes take more than this is discarded when it ends (default 1GiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<ByteSize>,
    /// Staged runs older than this are removed when a new one starts (default 7d).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<DurationSpec>,
}

/// The pre-execution scanner: code on the command line and the scripts it
/// names are scanned before the run (advisory; the sandbox is the control).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScanFile {
    /// off (default), warn (print findings, run anyway), ask (on a block-level finding ask on
    /// the terminal; refuse without one), block (refuse on a block-level finding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ScanMode>,
    /// Rule files (TOML) added to cordon's own rules; relative paths are relative to the
    /// current directory, `~` is the home directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<PathBuf>>,
    /// Rule ids to leave out, e.g. ["tls-verify-off"].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<Vec<String>>,
}

/// Replaces `dst` when `src` is set.
fn set<T>(dst: &mut T, src: Option<T>) {
    if let Some(v) = src {
        *dst = v;
    }
}

impl ProfileFile {
    /// Applies this file over `base` (normally the preset named by `extends`).
    /// Does not validate.
    pub fn apply_to(self, base: Profile) -> Profile {
        let mut p = base;
        set(&mut p.description, self.description.map(Some));
        overlay(self.isolation, &mut p.isolation);
        overlay(self.filesystem, &mut p.filesystem);
        overlay(self.limits, &mut p.limits);
        overlay(self.env, &mut p.env);
        overlay(self.syscalls, &mut p.syscalls);
        overlay(self.network, &mut p.network);
        overlay(self.audit, &mut p.audit);
        overlay(self.stage, &mut p.stage);
        overlay(self.scan, &mut p.scan);
        set(
            &mut p.secrets,
            self.secrets.map(|v| {
                v.into_iter()
                    .map(|s| Secret {
                        name: s.name,
                        from: s.from,
                        hosts: s.hosts,
                        inject: s.inject.unwrap_or_else(|| vec![InjectAt::Header]),
                        ttl: s.ttl,
                    })
                    .collect()
            }),
        );
        p
    }
}

/// A section of a profile file, applied over the same section of a
/// profile: each key it sets replaces the profile's. The sections are
/// destructured in full, so a field added to a profile and not applied
/// here does not build.
trait Overlay<T> {
    fn apply(self, to: &mut T);
}

/// Applies `section` over `to` when the file has it.
fn overlay<T, S: Overlay<T>>(section: Option<S>, to: &mut T) {
    if let Some(section) = section {
        section.apply(to);
    }
}

impl Overlay<Isolation> for IsolationFile {
    fn apply(self, to: &mut Isolation) {
        let Isolation {
            level,
            allow_weaker,
        } = to;
        set(level, self.level);
        set(allow_weaker, self.allow_weaker);
    }
}

impl Overlay<Filesystem> for FilesystemFile {
    fn apply(self, to: &mut Filesystem) {
        let Filesystem {
            cwd,
            read_only,
            read_write,
            tmp_size,
            tmp_inodes,
            protect_host_tools,
        } = to;
        set(cwd, self.cwd);
        set(read_only, self.read_only);
        set(read_write, self.read_write);
        set(tmp_size, self.tmp_size);
        set(tmp_inodes, self.tmp_inodes);
        set(protect_host_tools, self.protect_host_tools);
    }
}

impl Overlay<Limits> for LimitsFile {
    fn apply(self, to: &mut Limits) {
        let Limits {
            timeout,
            cpu_time,
            memory,
            pids,
            open_files,
            file_size,
            output,
            on_output_limit,
            inotify_instances,
            inotify_watches,
            queued_signals,
            mqueue_bytes,
        } = to;
        set(timeout, self.timeout);
        set(cpu_time, self.cpu_time);
        set(memory, self.memory);
        set(pids, self.pids);
        set(open_files, self.open_files);
        set(file_size, self.file_size);
        set(output, self.output);
        set(on_output_limit, self.on_output_limit);
        set(inotify_instances, self.inotify_instances);
        set(inotify_watches, self.inotify_watches);
        set(queued_signals, self.queued_signals);
        set(mqueue_bytes, self.mqueue_bytes);
    }
}

impl Overlay<Env> for EnvFile {
    fn apply(self, to: &mut Env) {
        let Env { pass, set: vars } = to;
        set(pass, self.pass);
        if let Some(s) = self.set {
            vars.extend(s);
        }
    }
}

impl Overlay<Syscalls> for SyscallsFile {
    fn apply(self, to: &mut Syscalls) {
        let Syscalls { unix_sockets } = to;
        set(unix_sockets, self.unix_sockets);
    }
}

impl Overlay<Network> for NetworkFile {
    fn apply(self, to: &mut Network) {
        let Network {
            mode,
            allow,
            deny,
            https_only,
            methods,
            allow_private,
            allow_missing_sni,
            on_unlisted,
            max_bytes,
            rate_limit,
        } = to;
        set(mode, self.mode);
        set(allow, self.allow);
        set(deny, self.deny);
        set(https_only, self.https_only);
        set(methods, self.methods);
        set(allow_private, self.allow_private);
        set(allow_missing_sni, self.allow_missing_sni);
        set(on_unlisted, self.on_unlisted);
        set(max_bytes, self.max_bytes);
        set(
            rate_limit,
            self.rate_limit.map(|v| {
                v.into_iter()
                    .map(|r| RateLimit {
                        host: r.host,
                        requests: r.requests,
                        bytes: r.bytes,
                        per: r.per.unwrap_or(DurationSpec::mins(1)),
                    })
                    .collect()
            }),
        );
    }
}

impl Overlay<Audit> for AuditFile {
    fn apply(self, to: &mut Audit) {
        let Audit { enabled, path } = to;
        set(enabled, self.enabled);
        set(path, self.path.map(Some));
    }
}

impl Overlay<Stage> for StageFile {
    fn apply(self, to: &mut Stage) {
        let Stage {
            refuse,
            ask,
            auto,
            max_file_size,
            max_size,
            keep,
        } = to;
        set(refuse, self.refuse);
        set(ask, self.ask);
        set(auto, self.auto);
        set(max_file_size, self.max_file_size);
        set(max_size, self.max_size);
        set(keep, self.keep);
    }
}

impl Overlay<Scan> for ScanFile {
    fn apply(self, to: &mut Scan) {
        let Scan {
            mode,
            rules,
            ignore,
        } = to;
        set(mode, self.mode);
        set(rules, self.rules);
        set(ignore, self.ignore);
    }
}
