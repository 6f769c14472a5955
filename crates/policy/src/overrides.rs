//! Command-line flags applied over a resolved profile.

use std::path::PathBuf;

use cordon_hostpattern::HostPattern;

use crate::error::PolicyError;
use crate::model::{
    CwdAccess, IsolationLevel, NetworkMode, OnOutputLimit, Profile, ScanMode, Secret,
};
use crate::units::{ByteSize, DurationSpec};
use crate::validate;

/// Settings given on the command line. `None` and empty lists leave the
/// profile's value alone.
///
/// - `read_only` / `read_write` add paths; a path named by a flag moves out of
///   the other list (`--rw ./out` makes a profile's read-only `./out` writable).
/// - `env_pass` adds names; `env_set` sets values (and removes the name from
///   `env.pass`).
/// - `allow_hosts` / `deny_hosts` add patterns. Allowing hosts or binding a
///   secret while the network mode is not `proxy` switches it to `proxy`
///   (unless `network_mode` says otherwise, which then fails validation).
/// - `secrets` are added (replacing a profile secret of the same name), and
///   their hosts are added to the allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub read_only: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub cwd: Option<CwdAccess>,
    pub tmp_size: Option<ByteSize>,
    pub tmp_inodes: Option<u64>,
    pub memory: Option<ByteSize>,
    pub timeout: Option<DurationSpec>,
    pub cpu_time: Option<DurationSpec>,
    pub pids: Option<u64>,
    pub open_files: Option<u64>,
    pub file_size: Option<ByteSize>,
    pub output: Option<ByteSize>,
    pub on_output_limit: Option<OnOutputLimit>,
    pub env_pass: Vec<String>,
    pub env_set: Vec<(String, String)>,
    pub isolation: Option<IsolationLevel>,
    pub allow_weaker: Option<bool>,
    pub unix_sockets: Option<bool>,
    pub network_mode: Option<NetworkMode>,
    pub allow_hosts: Vec<HostPattern>,
    pub deny_hosts: Vec<HostPattern>,
    pub https_only: Option<bool>,
    pub allow_private: Option<bool>,
    pub max_bytes: Option<ByteSize>,
    pub secrets: Vec<Secret>,
    pub audit: Option<bool>,
    pub audit_path: Option<PathBuf>,
    pub scan_mode: Option<ScanMode>,
    /// Rule files added to the profile's.
    pub scan_rules: Vec<PathBuf>,
}

fn set<T>(dst: &mut T, src: &Option<T>)
where
    T: Clone,
{
    if let Some(v) = src {
        *dst = v.clone();
    }
}

fn same_path(a: &std::path::Path, b: &std::path::Path) -> bool {
    let cwd = std::path::Path::new("/\u{0}cwd");
    let home = std::path::Path::new("/\u{0}home");
    crate::resolve_path(a, cwd, home) == crate::resolve_path(b, cwd, home)
}

impl Profile {
    /// Applies command-line overrides and validates the result. Errors name
    /// the profile key and come from `command line`.
    pub fn with_overrides(&self, o: &Overrides) -> Result<Profile, PolicyError> {
        let mut p = self.clone();

        for rw in &o.read_write {
            if o.read_only.iter().any(|ro| same_path(ro, rw)) {
                return Err(crate::error::Problem::new(
                    crate::ErrorKind::Conflict,
                    "filesystem.read_write",
                    format!("'{}' is given both read-only and writable", rw.display()),
                    "give the path once: --rw to make it writable, --ro otherwise",
                )
                .unlocated("command line")
                .into());
            }
        }
        let fs = &mut p.filesystem;
        let dot = std::path::Path::new(".");
        for ro in &o.read_only {
            if same_path(ro, dot) {
                fs.cwd = CwdAccess::Ro;
                continue;
            }
            fs.read_write.retain(|x| !same_path(x, ro));
            if !fs.read_only.iter().any(|x| same_path(x, ro)) {
                fs.read_only.push(ro.clone());
            }
        }
        for rw in &o.read_write {
            if same_path(rw, dot) {
                fs.cwd = CwdAccess::Rw;
                continue;
            }
            fs.read_only.retain(|x| !same_path(x, rw));
            if !fs.read_write.iter().any(|x| same_path(x, rw)) {
                fs.read_write.push(rw.clone());
            }
        }
        set(&mut fs.cwd, &o.cwd);
        set(&mut fs.tmp_size, &o.tmp_size);
        set(&mut fs.tmp_inodes, &o.tmp_inodes);

        let l = &mut p.limits;
        set(&mut l.memory, &o.memory);
        set(&mut l.timeout, &o.timeout);
        set(&mut l.cpu_time, &o.cpu_time);
        set(&mut l.pids, &o.pids);
        set(&mut l.open_files, &o.open_files);
        set(&mut l.file_size, &o.file_size);
        set(&mut l.output, &o.output);
        set(&mut l.on_output_limit, &o.on_output_limit);

        for name in &o.env_pass {
            if !p.env.pass.contains(name) {
                p.env.pass.push(name.clone());
            }
            p.env.set.remove(name);
        }
        for (k, v) in &o.env_set {
            p.env.pass.retain(|n| n != k);
            p.env.set.insert(k.clone(), v.clone());
        }

        set(&mut p.isolation.level, &o.isolation);
        set(&mut p.isolation.allow_weaker, &o.allow_weaker);
        set(&mut p.syscalls.unix_sockets, &o.unix_sockets);

        let n = &mut p.network;
        for h in &o.allow_hosts {
            n.deny.retain(|d| d != h);
            if !n.allow.contains(h) {
                n.allow.push(h.clone());
            }
        }
        for h in &o.deny_hosts {
            n.allow.retain(|a| a != h);
            if !n.deny.contains(h) {
                n.deny.push(h.clone());
            }
        }
        for s in &o.secrets {
            for h in &s.hosts {
                if !n.allow.iter().any(|a| a.covers(h)) {
                    n.allow.push(h.clone());
                }
            }
            p.secrets.retain(|x| x.name != s.name);
            p.secrets.push(s.clone());
        }
        if (!o.allow_hosts.is_empty() || !o.secrets.is_empty()) && o.network_mode.is_none() {
            p.network.mode = NetworkMode::Proxy;
        }
        let n = &mut p.network;
        set(&mut n.mode, &o.network_mode);
        set(&mut n.https_only, &o.https_only);
        set(&mut n.allow_private, &o.allow_private);
        set(&mut n.max_bytes, &o.max_bytes);

        set(&mut p.audit.enabled, &o.audit);
        if let Some(path) = &o.audit_path {
            p.audit.path = Some(path.clone());
        }

        set(&mut p.scan.mode, &o.scan_mode);
        p.scan.rules.extend(o.scan_rules.iter().cloned());

        validate::check(&p).map_err(|e| PolicyError::from(e.unlocated("command line")))?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn base() -> Profile {
        Profile::from_toml_str(
            r#"
[filesystem]
read_only = ["./data", "./out"]
read_write = ["./cache"]
"#,
            "p.toml",
        )
        .unwrap()
    }

    #[test]
    fn flags_replace_limits() {
        let o = Overrides {
            memory: Some(ByteSize::gib(1)),
            timeout: Some(DurationSpec::secs(30)),
            pids: Some(64),
            cwd: Some(CwdAccess::Rw),
            ..Default::default()
        };
        let p = base().with_overrides(&o).unwrap();
        assert_eq!(p.limits.memory, ByteSize::gib(1));
        assert_eq!(p.limits.timeout, DurationSpec::secs(30));
        assert_eq!(p.limits.pids, 64);
        assert_eq!(p.filesystem.cwd, CwdAccess::Rw);
        // Untouched values stay.
        assert_eq!(p.limits.output, base().limits.output);
    }

    #[test]
    fn paths_move_between_lists() {
        let o = Overrides {
            read_write: vec!["out/".into()],
            read_only: vec!["./cache".into(), "./more".into()],
            ..Default::default()
        };
        let p = base().with_overrides(&o).unwrap();
        assert_eq!(
            p.filesystem.read_only,
            vec![PathBuf::from("./data"), "./cache".into(), "./more".into()]
        );
        assert_eq!(p.filesystem.read_write, vec![PathBuf::from("out/")]);
    }

    #[test]
    fn current_directory_flags_set_cwd() {
        let o = Overrides {
            read_write: vec![".".into()],
            ..Default::default()
        };
        let p = Profile::default().with_overrides(&o).unwrap();
        assert_eq!(p.filesystem.cwd, CwdAccess::Rw);
        assert!(p.filesystem.read_write.is_empty());
    }

    #[test]
    fn same_path_twice_on_the_command_line() {
        let o = Overrides {
            read_write: vec!["./x".into()],
            read_only: vec!["x".into()],
            ..Default::default()
        };
        let e = base().with_overrides(&o).unwrap_err();
        let d = e.diagnostic().unwrap();
        assert_eq!(d.kind, ErrorKind::Conflict);
        assert_eq!(d.origin, "command line");
        assert!(e.to_string().contains("both read-only and writable"), "{e}");
    }

    #[test]
    fn allow_net_switches_to_proxy() {
        let o = Overrides {
            allow_hosts: vec![HostPattern::parse("pypi.org").unwrap()],
            ..Default::default()
        };
        let p = Profile::default().with_overrides(&o).unwrap();
        assert_eq!(p.network.mode, NetworkMode::Proxy);
        assert_eq!(p.network.allow.len(), 1);

        // An explicit mode wins, and then the combination is refused.
        let o = Overrides {
            network_mode: Some(NetworkMode::None),
            ..o
        };
        let e = Profile::default().with_overrides(&o).unwrap_err();
        assert!(e.to_string().contains("network.allow"), "{e}");
    }

    #[test]
    fn secret_flag_allows_its_hosts() {
        let o = Overrides {
            secrets: vec![Secret::parse_flag("GITHUB_TOKEN@api.github.com").unwrap()],
            ..Default::default()
        };
        let p = Profile::default().with_overrides(&o).unwrap();
        assert_eq!(p.network.mode, NetworkMode::Proxy);
        assert_eq!(p.network.allow[0].to_string(), "api.github.com");
        assert_eq!(p.secrets.len(), 1);
    }

    #[test]
    fn secret_cannot_be_passed_through() {
        let o = Overrides {
            secrets: vec![Secret::parse_flag("GITHUB_TOKEN@api.github.com").unwrap()],
            env_pass: vec!["GITHUB_TOKEN".into()],
            ..Default::default()
        };
        let e = Profile::default().with_overrides(&o).unwrap_err();
        assert!(e.to_string().contains("real value"), "{e}");
    }

    #[test]
    fn overrides_are_validated() {
        let o = Overrides {
            pids: Some(0),
            ..Default::default()
        };
        let e = Profile::default().with_overrides(&o).unwrap_err();
        assert_eq!(
            e.to_string(),
            "command line: limits.pids: 0 is out of range\n  hint: write a number from 1 to 4194304 (processes and threads)"
        );
    }

    #[test]
    fn env_flags() {
        let o = Overrides {
            env_pass: vec!["HOME".into()],
            env_set: vec![("LANG".into(), "C.UTF-8".into())],
            ..Default::default()
        };
        let p = Profile::default().with_overrides(&o).unwrap();
        assert!(p.env.pass.contains(&"HOME".to_string()));
        assert!(!p.env.pass.contains(&"LANG".to_string()));
        assert_eq!(p.env.set["LANG"], "C.UTF-8");
    }

    #[test]
    fn deny_flag_removes_allow() {
        let p = Profile::from_toml_str(
            "extends = \"medium\"\n[network]\nallow = [\"a.example.com\"]\n",
            "p.toml",
        )
        .unwrap();
        let o = Overrides {
            deny_hosts: vec![HostPattern::parse("a.example.com").unwrap()],
            ..Default::default()
        };
        let q = p.with_overrides(&o).unwrap();
        assert!(q.network.allow.is_empty());
        assert_eq!(q.network.deny.len(), 1);
    }
}
