//! `cordon doctor`: what this host can enforce and how to fix what it
//! cannot.

use clap::Args;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  cordon doctor\n  cordon doctor --json | jq .isolation_level")]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: DoctorArgs) -> anyhow::Result<u8> {
    let report = cordon_jail::host::probe();
    let staging = staging_check();
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        if let Some(map) = value.as_object_mut() {
            map.insert("staging".into(), serde_json::to_value(&staging)?);
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!(
            "cordon {} on Linux {} (uid {})",
            env!("CARGO_PKG_VERSION"),
            report.kernel,
            report.uid
        );
        let line = |name: &str, c: &cordon_jail::host::Check| {
            println!(
                "  [{}] {name:<16} {}",
                if c.ok { " ok " } else { "MISS" },
                c.detail
            );
            if let Some(fix) = &c.fix {
                println!("         {:<16} fix: {fix}", "");
            }
        };
        line("user namespaces", &report.user_namespaces);
        line("seccomp", &report.seccomp);
        line("landlock", &report.landlock);
        println!(
            "  [{}] {:<16} {}",
            if report.landlock_log.observed {
                " ok "
            } else {
                " off"
            },
            "landlock log",
            if report.landlock_log.observed {
                "denials are read from the kernel's audit log and recorded as incidents"
            } else {
                report.landlock_log.detail.as_str()
            }
        );
        line("cgroups", &report.cgroup);
        line("mount_setattr", &report.mount_setattr);
        line("overlayfs", &report.overlayfs);
        line("staging", &staging);
        let id = &report.identity;
        println!(
            "  [{}] {:<16} uid {} -> host {}, gid {} -> host {} ({}); groups {}",
            if id.complete() { " ok " } else { "WEAK" },
            "identity",
            id.uid,
            id.host_uid,
            id.gid,
            id.host_gid,
            id.binds,
            id.groups
        );
        println!("         {:<16} {}", "", id.detail);
        println!("isolation level: {}", report.isolation_level);
        println!("limits:");
        for (what, how) in &report.limits {
            println!("  {what:<12} {how}");
        }
    }
    let usable = report.user_namespaces.ok && report.seccomp.ok && report.mount_setattr.ok;
    Ok(if usable { 0 } else { 1 })
}

/// How `run --stage` stages here: an overlay with `userxattr` mounted in a
/// user namespace with its upper layer in the stage store, or the copy
/// fallback (and why).
fn staging_check() -> cordon_jail::host::Check {
    use cordon_jail::host::Check;
    let missing = |detail: String, fix: &str| Check {
        ok: false,
        detail,
        fix: Some(fix.to_owned()),
    };
    let store = match crate::stage_cmd::store() {
        Ok(s) => s,
        Err(e) => return missing(format!("{e:#}"), "set HOME or XDG_STATE_HOME"),
    };
    match crate::stage_cmd::staging_mode(&store, true, None) {
        Ok((cordon_jail::StageMode::Overlay, _)) => Check {
            ok: true,
            detail: format!(
                "run --stage: overlayfs (userxattr) in a user namespace, changes kept in {}",
                store.root().display()
            ),
            fix: None,
        },
        Ok((cordon_jail::StageMode::Copy, why)) => Check {
            ok: true,
            detail: format!(
                "run --stage: copy fallback (overlayfs cannot be used: {}): each staged run first copies the directory into {} (up to [stage] max_size)",
                why.unwrap_or_default(),
                store.root().display()
            ),
            fix: Some(cordon_jail::STAGE_FIX.to_owned()),
        },
        Err(e) => missing(format!("{e:#}"), "make the state directory writable"),
    }
}
