//! `cordon learn`: run a command permissively but observed, then write the
//! smallest profile that allows what it did.
//!
//! The learning run is a sandbox too (namespaces, seccomp, no
//! capabilities), only wider: the host's top-level directories are
//! readable, the working directory and `--rw` paths writable, and the
//! proxy lets every host through (still refusing private addresses). The
//! seccomp filter hands every open, creat, execve and mkdir to the
//! supervisor, which notes the path and lets the call continue; the proxy
//! reports every host. Nothing here enforces: the learned profile is
//! enforced later by the real layers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use cordon_policy::{CwdAccess, NetworkMode, OnUnlisted, Profile, TrustLevel};

use cordon_plan::egress;

use crate::learn;

#[derive(Debug, Args)]
#[command(
    after_help = "The learning run can read the host's top-level directories (not /proc, \
/sys, /dev, /tmp or /etc, which the sandbox builds itself), write the current directory and the \
--rw paths, and reach any public host through cordon's proxy. The profile it writes allows only \
what the run used; writes outside the writable paths are refused while learning and listed as \
not granted.\n\n\
Examples:\n  cordon learn -o tool.toml -- python3 tool.py\n  \
cordon run --profile tool.toml -- python3 tool.py\n  \
cordon learn -o tool.toml --report observed.json -- python3 tool.py\n  \
cordon learn -o job.toml --rw /srv/out --timeout 2m -- ./job.sh"
)]
pub struct LearnArgs {
    /// Where to write the learned profile (TOML).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: PathBuf,
    /// Also make this host path writable while learning (repeatable).
    #[arg(long = "rw", value_name = "PATH")]
    read_write: Vec<PathBuf>,
    /// Map a host name for the proxy only, like curl's --resolve
    /// (HOST[:PORT]=ADDR); not written into the profile.
    #[arg(long, value_name = "HOST[:PORT]=ADDR", value_parser = egress::parse_resolve)]
    resolve: Vec<(String, cordon_egress::OverrideAddr)>,
    /// Also write what was observed as JSON: every path with its access,
    /// every proxy attempt, the outcome (for programs).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Deadline for the learning run.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    timeout: cordon_policy::DurationSpec,
    /// The command to observe.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Host directories the learning run never binds: the sandbox builds them.
const BUILT_BY_THE_SANDBOX: &[&str] = &["/proc", "/sys", "/dev", "/tmp", "/etc", "/run"];

pub fn run(args: LearnArgs) -> anyhow::Result<u8> {
    crate::out_path::check_writable(&args.output, "-o")?;
    if let Some(path) = &args.report {
        crate::out_path::check_writable(path, "--report")?;
    }
    let cwd = std::fs::canonicalize(std::env::current_dir()?)
        .context("cannot resolve the current directory")?;
    let writable: Vec<PathBuf> = std::iter::once(Ok(cwd.clone()))
        .chain(
            args.read_write
                .iter()
                .map(|p| std::fs::canonicalize(p).with_context(|| format!("--rw {}", p.display()))),
        )
        .collect::<anyhow::Result<_>>()?;
    let profile = learning_profile(&writable, args.timeout);
    let mut spec = cordon_plan::spec_for(&profile, args.command.clone(), &cwd)?;
    spec.observe = true;
    let _host_tools = cordon_plan::protect_host_tools(&profile, &mut spec);

    let recorder = Arc::new(egress::Recorder::new(None)?);
    let mut hooks = LearnHooks {
        egress: Some(egress::config(
            &profile,
            &cordon_audit::new_run_id(),
            &args.resolve,
        )),
        recorder: Arc::clone(&recorder),
        proxy: None,
    };
    let outcome = cordon_jail::run_with(
        &spec,
        &mut cordon_jail::StdioSink,
        cordon_jail::RunOptions::default(),
        &mut hooks,
    )
    .map_err(|e| anyhow::anyhow!("cannot build the sandbox: {e}"))?;
    if let Some(p) = hooks.proxy.take() {
        p.shutdown();
    }

    let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let (hosts, refused_hosts) = learn::hosts(&recorder.events());
    let observed = learn::Observed {
        command: &args.command,
        cwd: &cwd,
        writable: &writable,
        paths: &outcome.observed,
        hosts,
        refused_hosts,
        wall: outcome.wall_time,
        cpu: outcome.user_time + outcome.system_time,
        peak_memory: outcome.peak_memory,
        peak_address_space: outcome.observed_peak_address_space,
        most_threads: usize::try_from(outcome.observed_most_threads).unwrap_or(usize::MAX),
        // The pids cgroup's own counter of refusals is there exactly when
        // one was in force.
        peak_tasks: learn::PeakTasks::of(
            outcome.peak_tasks,
            outcome.breaches.pids_limit_hits.is_some(),
        ),
        processes: usize::try_from(outcome.observed_processes).unwrap_or(usize::MAX),
        exists: &exists,
    };
    let (text, files) = learn::profile(&observed);
    // What is written must load: a learned profile that cordon refuses
    // would be worse than none.
    Profile::from_toml_str(&text, &args.output.display().to_string())
        .map_err(|e| anyhow::anyhow!("the learned profile does not load (a bug): {e}"))?;
    std::fs::write(&args.output, &text)
        .with_context(|| format!("cannot write {}", args.output.display()))?;

    if let Some(path) = &args.report {
        let report = serde_json::json!({
            "cordon_version": env!("CARGO_PKG_VERSION"),
            "command": &args.command,
            "cwd": cwd.display().to_string(),
            "profile": args.output.display().to_string(),
            "not_granted_writes": &files.refused_writes,
            "egress": recorder.events(),
            "outcome": &outcome,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    eprintln!(
        "cordon learn: wrote {} from {} observed path(s) and {} host(s); the command {}",
        args.output.display(),
        outcome.observed.len(),
        observed.hosts.len(),
        match outcome.reason {
            cordon_jail::EndReason::Exited => format!("exited {}", outcome.exit_code),
            _ => format!(
                "ended: {}",
                outcome.message.as_deref().unwrap_or("see the report")
            ),
        }
    );
    for p in &files.refused_writes {
        eprintln!(
            "cordon learn: not granted: {} was written but was not writable while learning (learn again with --rw)",
            p.display()
        );
    }
    if outcome.observed_unreadable > 0 {
        eprintln!(
            "cordon learn: warning: the path of {} call(s) could not be read; the profile may miss them",
            outcome.observed_unreadable
        );
    }
    if outcome.exit_code != 0 {
        eprintln!("cordon learn: the command failed while learning; the profile allows only what it did until then");
    }
    Ok(u8::try_from(outcome.exit_code.clamp(0, 255)).unwrap_or(125))
}

/// The wide profile the learning run uses.
fn learning_profile(writable: &[PathBuf], timeout: cordon_policy::DurationSpec) -> Profile {
    let mut p = Profile::preset(TrustLevel::High);
    p.origin = "learn".into();
    p.filesystem.cwd = CwdAccess::Rw;
    p.filesystem.read_only = top_level_dirs();
    p.filesystem.read_write = writable.iter().skip(1).cloned().collect();
    p.network.mode = NetworkMode::Proxy;
    p.network.allow.clear();
    p.network.deny.clear();
    p.network.on_unlisted = OnUnlisted::Ask;
    p.network.rate_limit.clear();
    p.limits.timeout = timeout;
    p.limits.cpu_time = timeout;
    p
}

/// `/` minus what the sandbox builds itself and the system directories it
/// binds anyway; only real directories (no symlinks).
fn top_level_dirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|p| {
            let s = p.to_string_lossy();
            !BUILT_BY_THE_SANDBOX.contains(&s.as_ref())
                && !cordon_jail::SYSTEM_DIRS.contains(&s.as_ref())
                && p != Path::new("/lost+found")
        })
        .collect();
    out.sort();
    out
}

/// Lets every host through the proxy: learning wants to see them all.
struct AllowAll;

impl cordon_egress::Approver for AllowAll {
    fn decide<'a>(&'a self, _: &'a str, _: &'a str, _: u16) -> cordon_egress::BoxFuture<'a, bool> {
        Box::pin(async { true })
    }
}

struct LearnHooks {
    egress: Option<cordon_egress::EgressConfig>,
    recorder: Arc<egress::Recorder>,
    proxy: Option<cordon_egress::ProxyHandle>,
}

impl cordon_jail::Hooks for LearnHooks {
    fn proxy_listener(&mut self, listener: std::net::TcpListener) -> Result<(), String> {
        let config = self.egress.take().ok_or("no egress configuration")?;
        self.proxy = Some(
            egress::start(
                config,
                listener,
                Arc::clone(&self.recorder),
                None,
                Some(Arc::new(AllowAll)),
            )
            .map_err(|e| e.to_string())?,
        );
        Ok(())
    }
}
