//! Presets by trust level. Strict by default; higher trust relaxes resource
//! limits, makes the current directory writable (medium and up) and routes
//! the network through the egress proxy with an *empty* allowlist (medium and
//! up). No preset reaches private addresses, binds a secret, allows unix
//! sockets or accepts weaker isolation: those are always the profile's own,
//! explicit choice.

use std::collections::BTreeMap;

use crate::model::{
    Audit, CwdAccess, Env, Filesystem, Isolation, IsolationLevel, Limits, Network, NetworkMode,
    OnOutputLimit, OnUnlisted, Profile, Scan, ScanMode, Stage, Syscalls, TrustLevel,
};
use crate::units::{ByteSize, DurationSpec};

/// The numbers that differ between presets.
struct Row {
    cwd: CwdAccess,
    network: NetworkMode,
    tmp_size: ByteSize,
    tmp_inodes: u64,
    timeout: DurationSpec,
    memory: ByteSize,
    pids: u64,
    open_files: u64,
    file_size: ByteSize,
    output: ByteSize,
    max_bytes: ByteSize,
    inotify_instances: u64,
    inotify_watches: u64,
}

fn row(level: TrustLevel) -> Row {
    match level {
        TrustLevel::Untrusted => Row {
            cwd: CwdAccess::Ro,
            network: NetworkMode::None,
            tmp_size: ByteSize::mib(64),
            tmp_inodes: 16_384,
            timeout: DurationSpec::mins(5),
            memory: ByteSize::mib(512),
            pids: 128,
            open_files: 256,
            file_size: ByteSize::mib(64),
            output: ByteSize::mib(8),
            max_bytes: ByteSize::mib(256),
            inotify_instances: 16,
            inotify_watches: 8_192,
        },
        TrustLevel::Low => Row {
            cwd: CwdAccess::Ro,
            network: NetworkMode::None,
            tmp_size: ByteSize::mib(256),
            tmp_inodes: 65_536,
            timeout: DurationSpec::mins(15),
            memory: ByteSize::gib(1),
            pids: 256,
            open_files: 1024,
            file_size: ByteSize::mib(256),
            output: ByteSize::mib(16),
            max_bytes: ByteSize::mib(512),
            inotify_instances: 16,
            inotify_watches: 8_192,
        },
        TrustLevel::Medium => Row {
            cwd: CwdAccess::Rw,
            network: NetworkMode::Proxy,
            tmp_size: ByteSize::gib(1),
            tmp_inodes: 262_144,
            timeout: DurationSpec::mins(30),
            memory: ByteSize::gib(2),
            pids: 512,
            open_files: 4096,
            file_size: ByteSize::gib(1),
            output: ByteSize::mib(32),
            max_bytes: ByteSize::gib(2),
            inotify_instances: 32,
            inotify_watches: 16_384,
        },
        TrustLevel::High => Row {
            cwd: CwdAccess::Rw,
            network: NetworkMode::Proxy,
            tmp_size: ByteSize::gib(4),
            tmp_inodes: 1_048_576,
            timeout: DurationSpec::hours(2),
            memory: ByteSize::gib(8),
            pids: 2048,
            open_files: 16_384,
            file_size: ByteSize::gib(4),
            output: ByteSize::mib(64),
            max_bytes: ByteSize::gib(8),
            inotify_instances: 64,
            inotify_watches: 65_536,
        },
    }
}

/// The preset for a trust level.
pub fn preset(level: TrustLevel) -> Profile {
    let r = row(level);
    let mut set = BTreeMap::new();
    set.insert(
        "PATH".to_string(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
    );
    Profile {
        origin: format!("preset:{level}"),
        extends: level,
        description: None,
        isolation: Isolation {
            level: IsolationLevel::Namespaces,
            allow_weaker: false,
        },
        filesystem: Filesystem {
            cwd: r.cwd,
            read_only: Vec::new(),
            read_write: Vec::new(),
            tmp_size: r.tmp_size,
            tmp_inodes: r.tmp_inodes,
            protect_host_tools: true,
        },
        limits: Limits {
            timeout: r.timeout,
            cpu_time: r.timeout,
            memory: r.memory,
            pids: r.pids,
            open_files: r.open_files,
            file_size: r.file_size,
            output: r.output,
            on_output_limit: OnOutputLimit::Truncate,
            inotify_instances: r.inotify_instances,
            inotify_watches: r.inotify_watches,
            queued_signals: 256,
            mqueue_bytes: ByteSize::kib(128),
        },
        env: Env {
            pass: ["LANG", "LC_ALL", "TERM", "TZ"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            set,
        },
        syscalls: Syscalls {
            unix_sockets: false,
        },
        network: Network {
            mode: r.network,
            allow: Vec::new(),
            deny: Vec::new(),
            https_only: false,
            methods: Vec::new(),
            allow_private: false,
            allow_missing_sni: false,
            on_unlisted: OnUnlisted::Deny,
            max_bytes: r.max_bytes,
            rate_limit: Vec::new(),
        },
        audit: Audit {
            enabled: true,
            path: None,
        },
        stage: Stage {
            refuse: Vec::new(),
            ask: Vec::new(),
            auto: Vec::new(),
            max_file_size: ByteSize(10 << 20),
            max_size: ByteSize(1 << 30),
            keep: DurationSpec::from(std::time::Duration::from_secs(7 * 24 * 3600)),
        },
        scan: Scan {
            mode: ScanMode::Off,
            rules: Vec::new(),
            ignore: Vec::new(),
        },
        secrets: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_is_the_documented_default() {
        let p = preset(TrustLevel::Untrusted);
        assert_eq!(p.filesystem.cwd, CwdAccess::Ro);
        assert!(p.filesystem.read_write.is_empty());
        assert!(p.filesystem.read_only.is_empty());
        assert_eq!(p.filesystem.tmp_size, ByteSize::mib(64));
        assert_eq!(p.limits.memory, ByteSize::mib(512));
        assert_eq!(p.limits.pids, 128);
        assert_eq!(p.limits.timeout, DurationSpec::mins(5));
        assert_eq!(p.limits.output, ByteSize::mib(8));
        assert_eq!(p.network.mode, NetworkMode::None);
        assert_eq!(p.isolation.level, IsolationLevel::Namespaces);
        assert!(!p.isolation.allow_weaker);
        assert!(p.audit.enabled);
        assert_eq!(p, Profile::default());
    }

    #[test]
    fn trust_relaxes_limits_but_never_boundaries() {
        let all: Vec<Profile> = TrustLevel::ALL.iter().map(|&l| preset(l)).collect();
        for w in all.windows(2) {
            let (a, b) = (&w[0].limits, &w[1].limits);
            assert!(b.memory > a.memory);
            assert!(b.timeout > a.timeout);
            assert!(b.pids > a.pids);
            assert!(b.open_files >= a.open_files);
            assert!(w[1].filesystem.tmp_size > w[0].filesystem.tmp_size);
        }
        for p in &all {
            assert!(!p.network.allow_private, "{}", p.origin);
            assert!(p.network.allow.is_empty(), "{}", p.origin);
            assert!(p.secrets.is_empty(), "{}", p.origin);
            assert!(!p.isolation.allow_weaker, "{}", p.origin);
            assert_eq!(p.isolation.level, IsolationLevel::Namespaces);
            assert!(!p.syscalls.unix_sockets);
            assert!(p.filesystem.read_write.is_empty());
            assert!(p.validate().is_ok(), "{}", p.origin);
            assert!(p.lint().is_empty(), "{}: {:?}", p.origin, p.lint());
        }
        assert_eq!(all[2].filesystem.cwd, CwdAccess::Rw);
        assert_eq!(all[2].network.mode, NetworkMode::Proxy);
        assert_eq!(all[1].network.mode, NetworkMode::None);
    }
}
