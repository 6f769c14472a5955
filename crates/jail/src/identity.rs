//! Who the sandbox is on the host, and which of the caller's groups it
//! keeps.
//!
//! The sandbox's user is uid/gid 1000 inside. For an ordinary caller that
//! is the caller's own uid and gid (the kernel lets a user map only itself).
//! For root it would be host uid 0: no capabilities, but still the owner of
//! every root-owned file and sysctl that checks nothing but the uid
//! (`/proc/kpageflags`, `slabinfo`, `/proc/sys/...` at mode 0600). So when
//! the caller is root, the sandbox is a host uid and gid that is no one:
//! the first id of root's range in `/etc/subuid` and `/etc/subgid`, or
//! [`FALLBACK_HOST_ID`]. Its declared binds are idmapped mounts (made by the
//! supervisor, which holds `CAP_SYS_ADMIN` over the host filesystems) that
//! show the caller's files as the sandbox's, so the workload reads and
//! writes what was declared and a file it creates is owned by the caller
//! on the host. Where a filesystem cannot be idmapped, the sandbox stays
//! host uid 0 and the report says so.
//!
//! Supplementary groups: root may drop them (`setgroups(0, NULL)` in the
//! sandbox's init, with the group map written by root, which needs no
//! `setgroups=deny`). An unprivileged caller must deny `setgroups` to map
//! its own gid itself; so when it has supplementary groups, the setuid
//! `newgidmap` (package `uidmap`) writes the group map instead and the init
//! drops them the same way. `newgidmap` leaves `setgroups` allowed only
//! when the map holds one of the caller's `/etc/subgid` ids, so the map is
//! the caller's gid as 1000 plus the first subordinate gid as
//! [`SPARE_GID`], which no process of the sandbox holds. Without
//! `newgidmap` or a subordinate range the groups stay in the credentials
//! and the report and `cordon doctor` say so, with the fix. A caller
//! without supplementary groups never runs `newgidmap` (it costs a setuid
//! fork and exec per run).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::mount::OpenTreeFlags;
use serde::{Deserialize, Serialize};

use crate::error::{JailError, Result};
use crate::spec::{IsolationLevel, Layer, SANDBOX_GID, SANDBOX_UID};
use crate::sys;

/// The host uid and gid of a sandbox started by root when `/etc/subuid`
/// (`/etc/subgid`) gives root no range: a high id that no account has.
pub const FALLBACK_HOST_ID: u32 = 2_147_418_112;

/// The sandbox's gid for the caller's first subordinate gid, mapped only
/// so that `newgidmap` leaves `setgroups` allowed; no process holds it.
pub const SPARE_GID: u32 = 65_533;

/// The identity a run had, for the report and `cordon doctor`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityReport {
    /// The sandbox's uid and gid inside.
    pub uid: u32,
    pub gid: u32,
    /// The host uid and gid they are.
    pub host_uid: u32,
    pub host_gid: u32,
    /// Where the host ids come from: `caller`, `/etc/subuid`, `fixed`.
    pub source: String,
    /// How the declared binds reach the sandbox's identity: `direct` (it
    /// is the caller) or `idmapped` (host uid 0 shown as the sandbox's).
    pub binds: String,
    /// The caller's supplementary groups: `dropped` (root),
    /// `dropped (newgidmap)` (an unprivileged caller), `none` (it had none)
    /// or `kept` (they still grant access inside).
    pub groups: String,
    /// One sentence: what is in force and why.
    pub detail: String,
}

impl IdentityReport {
    /// Whether the sandbox is an unprivileged host identity without the
    /// caller's extra groups.
    pub fn complete(&self) -> bool {
        self.host_uid != 0 && self.host_gid != 0 && self.groups != "kept"
    }
}

/// Prepared by the supervisor before the sandbox is cloned.
#[derive(Debug, Default)]
pub(crate) struct Identity {
    pub report: IdentityReport,
    /// The caller is root: the gid map is written without denying
    /// `setgroups`, and the init drops the supplementary groups.
    pub drop_groups: bool,
    /// One detached, idmapped mount per declared bind (in the plan's
    /// order), or none.
    pub idmapped: Vec<OwnedFd>,
    /// An unprivileged caller's group map is written by `newgidmap`.
    pub newgidmap: Option<Newgidmap>,
}

/// How `newgidmap` maps an unprivileged caller's group.
#[derive(Debug)]
pub(crate) struct Newgidmap {
    tool: std::path::PathBuf,
    /// The first gid of the caller's `/etc/subgid` range.
    subgid: u32,
}

impl Newgidmap {
    /// Whether `newgidmap` will map the caller's gid with `setgroups`
    /// left allowed, or why not (with the fix). It checks the same itself.
    fn plan(uid: u32, gid: u32) -> std::result::Result<Newgidmap, String> {
        let tool = tool_path("newgidmap")
            .ok_or("newgidmap is not installed (install the package uidmap)")?;
        let (name, primary) =
            account(uid).ok_or(format!("uid {uid} has no account for newgidmap to check"))?;
        if primary != gid {
            return Err(format!(
                "the current group {gid} is not the account's primary group {primary}, which newgidmap requires (run cordon without sg/newgrp)"
            ));
        }
        let subgid = subordinate("/etc/subgid", &[&name, &uid.to_string()]).ok_or(format!(
            "{name} has no range in /etc/subgid for newgidmap (add one: `usermod --add-subgids 200000-265535 {name}`)"
        ))?;
        Ok(Newgidmap { tool, subgid })
    }

    /// Write the group map of the sandbox `pid`: `1000 gid 1` and the
    /// spare subordinate gid. A failure refuses the run: the report
    /// already says the groups are dropped.
    fn write(&self, pid: libc::pid_t, host_gid: u32) -> Result<()> {
        let out = std::process::Command::new(&self.tool)
            .env_clear()
            .arg(pid.to_string())
            .args([SANDBOX_GID, host_gid, 1, SPARE_GID, self.subgid, 1].map(|n| n.to_string()))
            .stdin(std::process::Stdio::null())
            .output();
        let why = match out {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => format!(
                "{} ({})",
                String::from_utf8_lossy(&o.stderr).trim(),
                o.status
            ),
            Err(e) => e.to_string(),
        };
        Err(JailError::Setup {
            layer: Layer::UserNamespace,
            message: format!(
                "{} could not write the sandbox's group map, so the caller's supplementary groups cannot be dropped: {why}",
                self.tool.display()
            ),
            fix: Some(
                "repair newgidmap and this user's /etc/subgid range, or run cordon as a user without supplementary groups".into(),
            ),
        })
    }
}

/// The name and primary gid of the account of `uid`, looked up as
/// `newgidmap` does (libc's `getpwuid_r`, through NSS; rustix has no
/// account lookup and a crate for this one call is not worth it).
fn account(uid: u32) -> Option<(String, u32)> {
    let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and `buf` (whose length is
    // passed) and sets `found` to `pw` or null.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            pw.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: `found` is non-null, so `pw` was filled and its name points
    // into `buf`, which is still alive.
    let pw = unsafe { pw.assume_init() };
    // SAFETY: as above; pw_name is a NUL-terminated string in `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some((name.to_string_lossy().into_owned(), pw.pw_gid))
}

/// The caller's supplementary groups other than its primary group.
fn extra_groups() -> Vec<u32> {
    let primary = rustix::process::getgid().as_raw();
    rustix::process::getgroups()
        .unwrap_or_default()
        .into_iter()
        .map(|g| g.as_raw())
        .filter(|g| *g != primary)
        .collect()
}

/// The first id of `user`'s range in a `/etc/subuid`-style file.
fn subordinate(file: &str, names: &[&str]) -> Option<u32> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let mut f = line.trim().split(':');
        let (who, start, count) = (f.next()?, f.next()?, f.next()?);
        let start: u32 = start.trim().parse().ok()?;
        let count: u32 = count.trim().parse().ok()?;
        (names.contains(&who) && count > 0 && start > 0).then_some(start)
    })
}

/// The host uid, gid and their source for a sandbox started by root.
fn root_host_ids() -> (u32, u32, &'static str) {
    match (
        subordinate("/etc/subuid", &["root", "0"]),
        subordinate("/etc/subgid", &["root", "0"]),
    ) {
        (Some(u), Some(g)) => (u, g, "/etc/subuid"),
        _ => (FALLBACK_HOST_ID, FALLBACK_HOST_ID, "fixed"),
    }
}

fn groups_word(drop: bool, extra: &[u32]) -> &'static str {
    if drop {
        "dropped"
    } else if extra.is_empty() {
        "none"
    } else {
        "kept"
    }
}

fn groups_sentence(drop: bool, extra: &[u32]) -> String {
    if drop {
        "the caller's supplementary groups are dropped (setgroups(0) inside)".into()
    } else if extra.is_empty() {
        "the caller has no supplementary groups".into()
    } else {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let why = match Newgidmap::plan(uid, gid) {
            Err(why) => why,
            Ok(_) if crate::test_switch::off(crate::test_switch::Switch::Identity) => {
                "the identity test switch leaves newgidmap unused".into()
            }
            Ok(_) => "the process level has no user namespace to drop them in".into(),
        };
        format!(
            "the caller's supplementary groups {extra:?} still grant access inside: an unprivileged caller must deny setgroups to map its own group, and {why}; or run cordon as a user without them (a dedicated account)"
        )
    }
}

/// `name` in the system's binary directories (never the caller's PATH).
fn tool_path(name: &str) -> Option<std::path::PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

impl Identity {
    /// Decide the identity of a run at `level` whose declared binds are
    /// `binds` (host paths, in the order the root filesystem mounts them).
    /// `staged`: the run has staged (overlay) writable paths, which are
    /// not idmapped.
    pub(crate) fn prepare(level: IsolationLevel, binds: &[&Path], staged: bool) -> Identity {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let extra = extra_groups();
        let caller = |drop: bool, detail: String| Identity {
            report: IdentityReport {
                uid: SANDBOX_UID,
                gid: SANDBOX_GID,
                host_uid: uid,
                host_gid: gid,
                source: "caller".into(),
                binds: "direct".into(),
                groups: groups_word(drop, &extra).into(),
                detail,
            },
            drop_groups: drop,
            idmapped: Vec::new(),
            newgidmap: None,
        };
        if level == IsolationLevel::Process {
            let mut id = caller(
                false,
                format!(
                    "process level: no user namespace, the workload is the caller (uid {uid}); {}",
                    groups_sentence(false, &extra)
                ),
            );
            id.report.uid = uid;
            id.report.gid = gid;
            return id;
        }
        if uid != 0
            && !extra.is_empty()
            && !crate::test_switch::off(crate::test_switch::Switch::Identity)
        {
            if let Ok(map) = Newgidmap::plan(uid, gid) {
                let mut id = caller(
                    true,
                    format!(
                        "the sandbox is the caller (uid {uid}); the caller's supplementary groups are dropped (newgidmap maps gid {gid} and subordinate gid {} with setgroups allowed, setgroups(0) inside)",
                        map.subgid
                    ),
                );
                id.report.groups = "dropped (newgidmap)".into();
                id.newgidmap = Some(map);
                return id;
            }
        }
        if uid != 0 {
            return caller(
                false,
                format!(
                    "the sandbox is the caller (uid {uid}); {}",
                    groups_sentence(false, &extra)
                ),
            );
        }
        if crate::test_switch::off(crate::test_switch::Switch::Identity) {
            return caller(
                true,
                "test switch: the sandbox stays host uid 0; the caller's supplementary groups are dropped".into(),
            );
        }
        if staged {
            return caller(
                true,
                format!(
                    "the caller is root and staged writable paths (overlayfs) are not idmapped: the sandbox stays host uid 0 (without capabilities); {}",
                    groups_sentence(true, &extra)
                ),
            );
        }
        let (host_uid, host_gid, source) = root_host_ids();
        match idmapped_binds(binds, host_uid, host_gid) {
            Ok(idmapped) => Identity {
                report: IdentityReport {
                    uid: SANDBOX_UID,
                    gid: SANDBOX_GID,
                    host_uid,
                    host_gid,
                    source: source.into(),
                    binds: "idmapped".into(),
                    groups: "dropped".into(),
                    detail: format!(
                        "the caller is root: the sandbox is host uid {host_uid}, gid {host_gid} ({source}), declared paths are idmapped so that root's files are the sandbox's; {}",
                        groups_sentence(true, &extra)
                    ),
                },
                drop_groups: true,
                idmapped,
                newgidmap: None,
            },
            Err(why) => caller(
                true,
                format!(
                    "the caller is root and {why}: the sandbox stays host uid 0 (without capabilities) so that the declared paths keep working; {}",
                    groups_sentence(true, &extra)
                ),
            ),
        }
    }

    /// Write the sandbox's uid and gid maps (supervisor side).
    pub(crate) fn write_maps(&self, pid: libc::pid_t) -> Result<()> {
        let write = |file: &str, text: String| {
            std::fs::write(format!("/proc/{pid}/{file}"), text).map_err(|e| JailError::Setup {
                layer: Layer::UserNamespace,
                message: format!("cannot write {file} for the sandbox: {e}"),
                fix: Some(crate::run::userns_fix()),
            })
        };
        if !self.drop_groups {
            write("setgroups", "deny".into())?;
        }
        let r = &self.report;
        write("uid_map", format!("{} {} 1", r.uid, r.host_uid))?;
        match &self.newgidmap {
            Some(map) => map.write(pid, r.host_gid),
            None => write("gid_map", format!("{} {} 1", r.gid, r.host_gid)),
        }
    }

    /// Give the pipes the workload writes its output to to the sandbox's
    /// host identity, so that reopening them (`/dev/stdout`, `/dev/stderr`,
    /// which go through `/proc/self/fd`) passes the owner check.
    pub(crate) fn give_pipes(&self, pipes: &[BorrowedFd<'_>]) -> Result<()> {
        let r = &self.report;
        if r.source == "caller" {
            return Ok(());
        }
        for fd in pipes {
            rustix::fs::fchown(
                fd,
                Some(rustix::process::Uid::from_raw(r.host_uid)),
                Some(rustix::process::Gid::from_raw(r.host_gid)),
            )
            .map_err(|e| JailError::io("give the output pipes to the sandbox", e.into()))?;
        }
        Ok(())
    }

    /// The raw descriptors the sandbox's init must keep open.
    pub(crate) fn raw_fds(&self) -> Vec<RawFd> {
        self.idmapped.iter().map(|f| f.as_raw_fd()).collect()
    }
}

/// One detached, recursively idmapped copy of each path in `binds`, in
/// which host uid/gid 0 appear as `host_uid`/`host_gid`; or why not.
fn idmapped_binds(
    binds: &[&Path],
    host_uid: u32,
    host_gid: u32,
) -> std::result::Result<Vec<OwnedFd>, String> {
    if binds.is_empty() {
        return Ok(Vec::new());
    }
    let userns = idmap_userns(host_uid, host_gid)
        .map_err(|e| format!("cannot create the user namespace of an idmapped mount: {e}"))?;
    binds
        .iter()
        .map(|path| {
            idmapped_tree(path, userns.as_fd())
                .map_err(|e| format!("{} cannot be idmapped ({e})", path.display()))
        })
        .collect()
}

fn idmapped_tree(path: &Path, userns: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    let src = rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    let tree = rustix::mount::open_tree(
        &src,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH
            | OpenTreeFlags::AT_RECURSIVE,
    )?;
    sys::mount_setattr_idmap(tree.as_fd(), userns)?;
    Ok(tree)
}

/// A user namespace whose maps are `0 host_uid 1` / `0 host_gid 1`, held
/// by its descriptor (the helper process that made it is gone).
fn idmap_userns(host_uid: u32, host_gid: u32) -> std::io::Result<OwnedFd> {
    sys::in_new_user_namespace(|pid| {
        std::fs::write(format!("/proc/{pid}/uid_map"), format!("0 {host_uid} 1"))?;
        std::fs::write(format!("/proc/{pid}/gid_map"), format!("0 {host_gid} 1"))?;
        Ok(rustix::fs::open(
            format!("/proc/{pid}/ns/user"),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    })?
}

/// Take ownership of a tree the supervisor opened before the clone (the
/// init's own copy of the descriptor).
pub(crate) fn take(fd: RawFd) -> OwnedFd {
    // SAFETY: the idmapped trees are opened by the supervisor before the
    // clone; the init inherited its own copies, keeps them open
    // (`child::enter`) and takes each exactly once, when it builds the
    // root.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Become the sandbox's user inside (the init, before anything else):
/// drop the supplementary groups where the caller could, then take uid and
/// gid 1000, which are the host ids the supervisor mapped.
pub(crate) fn become_sandbox_user(drop_groups: bool) -> std::io::Result<()> {
    if drop_groups {
        // SAFETY: setgroups with a zero count and no list.
        if unsafe { libc::setgroups(0, std::ptr::null()) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: setresgid/setresuid with plain ids; this process is
    // single-threaded, so the change applies to all of it.
    if unsafe { libc::setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// What a run by this process would get, for `cordon doctor` (the
/// declared paths tried are the current directory's).
pub fn probe() -> IdentityReport {
    let cwd = std::env::current_dir().ok();
    let binds: Vec<&Path> = cwd.as_deref().into_iter().collect();
    Identity::prepare(IsolationLevel::Namespaces, &binds, false).report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subordinate_ranges_are_read_by_name() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let f = dir.path().join("subuid");
        std::fs::write(&f, "alice:100000:65536\nroot:200000:65536\nbad:x:1\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let f = f.to_string_lossy();
        assert_eq!(subordinate(&f, &["root", "0"]), Some(200_000));
        assert_eq!(subordinate(&f, &["alice"]), Some(100_000));
        assert_eq!(subordinate(&f, &["bad"]), None);
        assert_eq!(subordinate(&f, &["nobody"]), None);
    }

    /// A newgidmap that fails refuses the run (the report already says
    /// the groups are dropped), naming the layer and the fix.
    #[test]
    fn a_failing_newgidmap_refuses_the_run() {
        let map = Newgidmap {
            tool: "/bin/false".into(),
            subgid: 100_000,
        };
        match map.write(1, 1000) {
            Err(JailError::Setup {
                layer: Layer::UserNamespace,
                message,
                fix: Some(fix),
            }) => {
                assert!(message.contains("cannot be dropped"), "{message}");
                assert!(fix.contains("subgid"), "{fix}");
            }
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn kept_groups_are_never_complete() {
        let r = IdentityReport {
            host_uid: 1000,
            host_gid: 1000,
            groups: "kept".into(),
            ..IdentityReport::default()
        };
        assert!(!r.complete());
        let r = IdentityReport {
            groups: "none".into(),
            ..r
        };
        assert!(r.complete());
    }
}
