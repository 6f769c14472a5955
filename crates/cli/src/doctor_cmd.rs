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
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
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
        println!("isolation level: {}", report.isolation_level);
        println!("limits:");
        for (what, how) in &report.limits {
            println!("  {what:<12} {how}");
        }
    }
    let usable = report.user_namespaces.ok && report.seccomp.ok && report.mount_setattr.ok;
    Ok(if usable { 0 } else { 1 })
}
