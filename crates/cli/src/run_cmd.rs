//! `cordon run`: one command, one fresh sandbox.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use cordon_jail::{EndReason, Outcome, RunOptions};
use cordon_policy::{
    CwdAccess, IsolationLevel, NetworkMode, OnOutputLimit, Overrides, Profile, TrustLevel,
};
use serde::Serialize;

use cordon_plan::{egress, secrets};

use crate::{audit_bridge, output_hints, run_policy, scan_gate, stage_cmd, unseen_args};

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: the command's own; 128+N if it died from signal N; 124 if the \
deadline killed it; 125 if cordon could not build the sandbox or refused to run it (--scan block or an unanswered --scan ask); 126/127 if the command could not be \
executed / was not found.\n\n\
Examples:\n  cordon run -- python3 -c 'print(1+1)'\n  cordon run --rw ./out --ro ./data --memory 512MiB --timeout 30s -- python3 job.py\n  \
cordon run --profile profiles/python.toml -- pytest\n  cordon run --report outcome.json -- make test\n  \
cordon run --stage ./repo -- make fmt test    # then: cordon changes RUN_ID\n  \
cordon run --preset medium --cwd rw -- ./build.sh\n  \
cordon run --allow-net pypi.org --allow-net '*.pythonhosted.org' -- pip download requests\n  \
cordon run --allow-net api.example.com --net-log net.jsonl -- python3 agent_tool.py\n  \
cordon run --scan block -- python3 -c \"$CODE\"   # refuse code the scanner flags at block level (exit 125)\n  \
cordon run --policy agent.cedar --allow-net pypi.org -- pip download requests   # asks on the terminal\n  \
GITHUB_TOKEN=... cordon run --secret GITHUB_TOKEN@api.github.com -- python3 tool.py"
)]
pub struct RunArgs {
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
    /// Make a host directory writable inside, but keep every write aside
    /// (an overlay): the host tree is untouched until `cordon promote`.
    #[arg(long, value_name = "DIR")]
    stage: Option<PathBuf>,
    /// Stdin of the command: inherit (default) or null.
    #[arg(long, value_name = "MODE", default_value = "inherit")]
    stdin: StdinArg,
    /// Scan the command line and the scripts it names before running: off, warn (show findings),
    /// ask (on a block-level finding ask on the terminal; refuse without one), block (refuse on a
    /// block-level finding, exit 125). Default: the profile's [scan] mode (off).
    #[arg(long, value_name = "MODE")]
    scan: Option<cordon_policy::ScanMode>,
    /// Add the rules of this file to the scanner's (TOML; repeatable).
    #[arg(long = "scan-rules", value_name = "FILE")]
    scan_rules: Vec<PathBuf>,
    /// Decide the command and each egress connection with this policy
    /// (Cedar; see docs/policy.md). An ask goes to cordon's terminal; without
    /// one it is a deny.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// How long a policy question on the terminal waits for an answer
    /// before it is a deny.
    #[arg(
        long = "ask-timeout",
        value_name = "DURATION",
        default_value = "2m",
        requires = "policy"
    )]
    ask_timeout: cordon_policy::DurationSpec,
    /// Write the outcome as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Print the outcome as JSON on stderr when the command ends.
    #[arg(long)]
    json: bool,
    /// Print nothing of cordon's own unless it fails.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

// The sandbox's flags, shared by `cordon run` and `cordon mcp wrap`:
// profile, paths, limits, network, secrets, audit. (A plain comment: a doc
// comment here would become the description of every subcommand that
// flattens these, once its arguments are built.)
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Profile file (TOML or JSON); flags override it.
    #[arg(long, short = 'p', value_name = "FILE")]
    pub(crate) profile: Option<PathBuf>,
    /// Start from a preset instead of a file: untrusted (default), low, medium, high.
    #[arg(long, value_name = "LEVEL", conflicts_with = "profile")]
    pub(crate) preset: Option<TrustLevel>,
    /// Make a host path readable inside, at the same path (repeatable).
    #[arg(long = "ro", value_name = "PATH")]
    pub(crate) read_only: Vec<PathBuf>,
    /// Make a host path writable inside, at the same path (repeatable).
    #[arg(long = "rw", value_name = "PATH")]
    pub(crate) read_write: Vec<PathBuf>,
    /// Access to the current directory: ro, rw or none.
    #[arg(long, value_name = "ACCESS")]
    pub(crate) cwd: Option<CwdAccess>,
    /// Memory limit, swap included (e.g. 512MiB).
    #[arg(long, value_name = "SIZE")]
    pub(crate) memory: Option<cordon_policy::ByteSize>,
    /// Wall-clock deadline (e.g. 30s, 5m); the whole tree is killed then.
    #[arg(long, value_name = "DURATION")]
    pub(crate) timeout: Option<cordon_policy::DurationSpec>,
    /// CPU time limit (e.g. 60s).
    #[arg(long = "cpu-time", value_name = "DURATION")]
    pub(crate) cpu_time: Option<cordon_policy::DurationSpec>,
    /// Maximum processes and threads.
    #[arg(long, value_name = "N")]
    pub(crate) pids: Option<u64>,
    /// Maximum open files per process.
    #[arg(long = "open-files", value_name = "N")]
    pub(crate) open_files: Option<u64>,
    /// Largest file the command may write.
    #[arg(long = "file-size", value_name = "SIZE")]
    pub(crate) file_size: Option<cordon_policy::ByteSize>,
    /// Output kept per stream; the rest is counted and dropped.
    #[arg(long, value_name = "SIZE")]
    pub(crate) output: Option<cordon_policy::ByteSize>,
    /// What to do when output passes its limit: truncate or kill.
    #[arg(long = "on-output-limit", value_name = "ACTION")]
    pub(crate) on_output_limit: Option<OnOutputLimit>,
    /// Size of the /tmp tmpfs.
    #[arg(long = "tmp-size", value_name = "SIZE")]
    pub(crate) tmp_size: Option<cordon_policy::ByteSize>,
    /// Pass a host environment variable through (repeatable).
    #[arg(long = "env", value_name = "NAME")]
    pub(crate) env_pass: Vec<String>,
    /// Set an environment variable inside (repeatable).
    #[arg(long = "setenv", value_name = "NAME=VALUE", value_parser = parse_kv)]
    pub(crate) env_set: Vec<(String, String)>,
    /// Network: none, loopback (the sandbox's own loopback only) or proxy
    /// (egress through cordon's proxy, following the allow/deny rules).
    #[arg(long, value_name = "MODE")]
    pub(crate) net: Option<NetworkMode>,
    /// Allow egress to a host: exact name, *.suffix, optional :port (repeatable; implies --net proxy).
    #[arg(long = "allow-net", value_name = "HOST")]
    pub(crate) allow_net: Vec<cordon_policy::HostPattern>,
    /// Deny egress to a host, even if an allow rule covers it (repeatable).
    #[arg(long = "deny-net", value_name = "HOST")]
    pub(crate) deny_net: Vec<cordon_policy::HostPattern>,
    /// Refuse plain HTTP; tunnels must carry a TLS SNI that matches their host.
    #[arg(long = "https-only")]
    pub(crate) https_only: bool,
    /// For the proxy only, resolve HOST[:PORT] to ADDRESS (like curl's --resolve; repeatable).
    /// Such operator-declared addresses may be private or loopback.
    /// `ipv4only.arpa=PREFIX::192.0.0.170` declares the network's NAT64
    /// prefix, under which addresses are judged by the IPv4 address they carry.
    #[arg(long, value_name = "HOST[:PORT]=ADDR", value_parser = egress::parse_resolve)]
    pub(crate) resolve: Vec<(String, cordon_egress::OverrideAddr)>,
    /// Audit store (SQLite); default: the profile's audit.path, else ~/.local/state/cordon/audit.db.
    #[arg(long, value_name = "FILE", conflicts_with = "no_audit")]
    pub(crate) audit: Option<PathBuf>,
    /// Do not record this run in the audit store.
    #[arg(long = "no-audit")]
    pub(crate) no_audit: bool,
    /// Let the command use a host secret without seeing it: NAME@host[,host...]. Inside, $NAME
    /// holds a placeholder; cordon's proxy swaps in the real value (from the host's $NAME) only
    /// in requests to those hosts (repeatable; implies --allow-net for them).
    #[arg(long, value_name = "NAME@HOST")]
    pub(crate) secret: Vec<String>,
    /// Also trust these PEM certificates when the proxy verifies upstream servers (a private CA);
    /// the system's trust store stays in force.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub(crate) upstream_ca: Option<PathBuf>,
    /// Write every egress decision as JSON lines to FILE.
    #[arg(long = "net-log", value_name = "FILE")]
    pub(crate) net_log: Option<PathBuf>,
    /// Allow socket(AF_UNIX) inside (socketpair is always allowed).
    #[arg(long = "unix-sockets")]
    pub(crate) unix_sockets: bool,
    /// Isolation level: namespaces (default) or process (Landlock + seccomp + rlimits only).
    #[arg(long, value_name = "LEVEL")]
    pub(crate) isolation: Option<IsolationLevel>,
    /// Accept the weaker process level if user namespaces are unavailable.
    #[arg(long = "allow-weaker")]
    pub(crate) allow_weaker: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum StdinArg {
    Inherit,
    Null,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if cordon_policy::is_env_name(k) => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!(
            "'{s}' is not NAME=VALUE with a valid variable name"
        )),
    }
}

/// What `--report` writes: the outcome plus what was run.
#[derive(Debug, Serialize)]
struct Report<'a> {
    cordon_version: &'static str,
    run_id: &'a str,
    command: &'a [String],
    cwd: String,
    profile: &'a str,
    #[serde(flatten)]
    outcome: &'a Outcome,
    /// Every egress decision (empty without network access).
    egress: &'a [cordon_egress::EgressEvent],
    #[serde(skip_serializing_if = "Option::is_none")]
    egress_summary: Option<EgressTotals>,
    incidents: &'a [cordon_audit::Incident],
    /// What host tools run on their own in the writable paths: bound
    /// read-only, created by the run, or left unprotected (absent when the
    /// profile opts out).
    #[serde(skip_serializing_if = "Option::is_none")]
    host_tools: Option<&'a cordon_plan::HostTools>,
    /// The staged directory's run and change count (`--stage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    stage: Option<&'a stage_cmd::StageReport>,
    /// The pre-execution scan (`--scan` / `[scan] mode`), when it was on.
    #[serde(skip_serializing_if = "Option::is_none")]
    scan: Option<&'a scan_gate::Gate>,
}

#[derive(Debug, Serialize)]
struct EgressTotals {
    connections: u64,
    allowed: u64,
    denied: u64,
    bytes_up: u64,
    bytes_down: u64,
}

impl SandboxArgs {
    /// The profile these flags name, with the flags applied over it;
    /// `extra` adds overrides of the caller's own (e.g. `run --scan`).
    pub(crate) fn profile(&self, extra: Overrides) -> anyhow::Result<Profile> {
        let profile = match (&self.profile, self.preset) {
            (Some(path), _) => Profile::load(path).map_err(|e| anyhow::anyhow!("{e}"))?,
            (None, Some(level)) => Profile::preset(level),
            (None, None) => Profile::default(),
        };
        let secrets_flags = self
            .secret
            .iter()
            .map(|s| {
                cordon_policy::Secret::parse_flag(s)
                    .map_err(|e| anyhow::anyhow!("--secret {s}: {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let overrides = Overrides {
            read_only: self.read_only.clone(),
            read_write: self.read_write.clone(),
            cwd: self.cwd,
            tmp_size: self.tmp_size,
            memory: self.memory,
            timeout: self.timeout,
            cpu_time: self.cpu_time,
            pids: self.pids,
            open_files: self.open_files,
            file_size: self.file_size,
            output: self.output,
            on_output_limit: self.on_output_limit,
            env_pass: self.env_pass.clone(),
            env_set: self.env_set.clone(),
            isolation: self.isolation,
            allow_weaker: self.allow_weaker.then_some(true),
            unix_sockets: self.unix_sockets.then_some(true),
            network_mode: self.net,
            allow_hosts: self.allow_net.clone(),
            deny_hosts: self.deny_net.clone(),
            https_only: self.https_only.then_some(true),
            secrets: secrets_flags,
            ..extra
        };
        profile
            .with_overrides(&overrides)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// A sandbox planned from the shared flags, ready for
/// `cordon_jail::run_with`: the spec, the hooks that start the egress
/// proxy and the audit session, and what the caller reports afterwards.
pub(crate) struct Prepared {
    pub spec: cordon_jail::Spec,
    pub hooks: RunHooks,
    pub redactor: cordon_scan::Redactor,
    pub recorder: Arc<egress::Recorder>,
    pub audit_path: Option<PathBuf>,
    pub run_id: String,
    pub host_tools: Option<cordon_plan::HostTools>,
    /// The private /tmp of a process-level sandbox; removed on drop.
    pub _private_tmp: Option<tempfile::TempDir>,
}

/// Plan the sandbox for `command`: spec, secrets (placeholders inside, the
/// real values for the proxy), egress, audit.
pub(crate) fn prepare(
    sb: &SandboxArgs,
    profile: &Profile,
    command: &[String],
    cwd: &std::path::Path,
    stdin: cordon_jail::StdinMode,
    gate: Option<&scan_gate::Gate>,
) -> anyhow::Result<Prepared> {
    let mut spec = cordon_plan::spec_for(profile, command.to_vec(), cwd)?;
    spec.stdin = stdin;
    let private_tmp = cordon_plan::private_tmp(&mut spec)?;
    let host_tools = cordon_plan::protect_host_tools(profile, &mut spec);

    // Secrets: real values stay here; the sandbox gets placeholders and a
    // CA bundle that trusts cordon's per-run authority.
    let resolved = secrets::resolve(&profile.secrets)?;
    // The upstream CA file is read only when a secret needs the proxy to
    // intercept TLS.
    let extra = match &sb.upstream_ca {
        Some(p) if !resolved.is_empty() => {
            Some(std::fs::read(p).with_context(|| format!("--upstream-ca {}", p.display()))?)
        }
        _ => None,
    };
    let identity = secrets::arm(&mut spec, &resolved, extra.as_deref())?;
    let values: Vec<&str> = resolved.iter().map(|r| r.value.as_str()).collect();
    let redactor = cordon_scan::Redactor::with_values(&values);

    let run_id = cordon_audit::new_run_id();
    let audit_path = audit_bridge::store_path(sb.audit.as_deref(), sb.no_audit, profile)?;
    let recorder = Arc::new(egress::Recorder::new(sb.net_log.as_deref())?);
    let hooks = RunHooks {
        identity,
        redactor: redactor.clone(),
        egress: if spec.network == cordon_jail::NetworkMode::Proxy {
            Some(egress::config(profile, &run_id, &sb.resolve))
        } else {
            None
        },
        recorder: Arc::clone(&recorder),
        proxy: None,
        policy: None,
        audit_plan: audit_path.as_ref().map(|path| AuditPlan {
            path: path.clone(),
            started: cordon_audit::RunStarted {
                argv: command.to_vec(),
                cwd: Some(spec.cwd.display().to_string()),
                profile_name: Some(profile.origin.clone()),
                enforcement: serde_json::json!({
                    "isolation": format!("{:?}", spec.isolation.level).to_lowercase(),
                    "landlock_abi": cordon_jail::landlock_abi(),
                    "network": format!("{:?}", spec.network).to_lowercase(),
                }),
                cordon_version: env!("CARGO_PKG_VERSION").to_owned(),
                scan: gate.map(scan_gate::Gate::record),
                ..Default::default()
            },
            code: audit_bridge::code_of(command, cwd),
            profile_text: profile.to_toml_string(),
            notes: gate.map(scan_gate::Gate::incidents).unwrap_or_default(),
        }),
        audit: None,
        start_committed: false,
        stage_watch: None,
        run_id: run_id.clone(),
    };
    Ok(Prepared {
        spec,
        hooks,
        redactor,
        recorder,
        audit_path,
        run_id,
        host_tools,
        _private_tmp: private_tmp,
    })
}

pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    if let Some(path) = &args.report {
        crate::out_path::check_writable(path, "--report")?;
    }
    let profile = args.sandbox.profile(Overrides {
        scan_mode: args.scan,
        scan_rules: args.scan_rules.clone(),
        ..Overrides::default()
    })?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    // The scanner looks before anything is built (or any secret fetched).
    let gate = scan_gate::check(&profile, &args.command, &cwd, args.quiet)?;
    if let Some(g) = gate.as_ref().filter(|g| g.refused()) {
        return refuse(&args, &profile, &cwd, g);
    }
    let stdin = match args.stdin {
        StdinArg::Null => cordon_jail::StdinMode::Null,
        StdinArg::Inherit => cordon_jail::StdinMode::Inherit,
    };
    let Prepared {
        mut spec,
        mut hooks,
        redactor,
        recorder,
        audit_path,
        run_id,
        mut host_tools,
        _private_tmp,
    } = prepare(
        &args.sandbox,
        &profile,
        &args.command,
        &cwd,
        stdin,
        gate.as_ref(),
    )?;
    if !args.quiet {
        note_a_declared_tmp(&spec);
        for (arg, real) in unseen_args::unseen(&spec, &cwd) {
            eprintln!("{}", unseen_args::note(&arg, &real));
        }
    }
    let staging = match &args.stage {
        Some(dir) => Some(stage_cmd::prepare(
            dir,
            &run_id,
            &args.command,
            &mut spec,
            &profile,
            audit_path.clone(),
        )?),
        None => None,
    };
    hooks.stage_watch = staging.as_ref().map(stage_cmd::Staging::watch);
    if let Some(path) = &args.policy {
        let asker = run_policy::Asker::detect(args.ask_timeout.as_duration());
        let policy = Arc::new(run_policy::RunPolicy::load(path, &profile, &run_id, asker)?);
        if let Err(message) = decide_by_policy(&policy, &args, &mut spec, &mut hooks) {
            if let Some(s) = staging {
                s.abandon();
            }
            return refuse_by_policy(&args, &profile, &cwd, &run_id, &policy, &message);
        }
        hooks.policy = Some(policy);
    }
    warn_of_layers_turned_off();
    let mut sink = audit_bridge::TeeSink::new(audit_path.is_some());
    let result = cordon_jail::run_with(&spec, &mut sink, RunOptions::default(), &mut hooks);
    let summary = hooks.proxy.take().map(|p| p.shutdown());
    let outcome = match result {
        Ok(o) => o,
        Err(e) => return Err(not_run(e, staging, hooks)),
    };
    if let Some(t) = &mut host_tools {
        t.check_after(outcome.enforcement.isolation == cordon_jail::IsolationLevel::Process);
    }
    let egress = recorder.events();
    let stage_report = match staging {
        Some(s) => Some(s.finish()?),
        None => None,
    };
    let incidents = record_the_end(&mut hooks, &outcome, &egress, &sink)?;

    if let Some(path) = &args.report {
        // The command line can carry tokens (URLs, headers): redact it like
        // everything else that is stored.
        let redacted_command: Vec<String> = args
            .command
            .iter()
            .map(|a| redactor.redact(a).into_owned())
            .collect();
        let report = Report {
            cordon_version: env!("CARGO_PKG_VERSION"),
            run_id: &run_id,
            command: &redacted_command,
            cwd: spec.cwd.display().to_string(),
            profile: &profile.origin,
            outcome: &outcome,
            egress: &egress,
            incidents: &incidents,
            host_tools: host_tools.as_ref(),
            stage: stage_report.as_ref(),
            scan: gate.as_ref(),
            egress_summary: summary.map(|s| EgressTotals {
                connections: s.connections,
                allowed: s.allowed,
                denied: s.denied,
                bytes_up: s.bytes_up,
                bytes_down: s.bytes_down,
            }),
        };
        write_report(path, &report, &redactor)?;
    }
    if args.json {
        eprintln!("{}", serde_json::to_string(&outcome)?);
    }
    if !args.quiet {
        TheEnd {
            outcome: &outcome,
            spec: &spec,
            host_tools: host_tools.as_ref(),
            stage_report: stage_report.as_ref(),
            incidents: &incidents,
            egress: &egress,
            said: &sink.said,
        }
        .tell();
    }
    Ok(u8::try_from(outcome.exit_code.clamp(0, 255)).unwrap_or(125))
}

/// `--policy`'s decision on the command: refused (the message), or
/// allowed, with any limits of its rule put on the run (they only
/// tighten) and recorded with its start.
fn decide_by_policy(
    policy: &run_policy::RunPolicy,
    args: &RunArgs,
    spec: &mut cordon_jail::Spec,
    hooks: &mut RunHooks,
) -> Result<(), String> {
    match policy.exec(&args.command) {
        run_policy::Verdict::Refused { message, .. } => Err(message),
        run_policy::Verdict::Allowed {
            rule,
            limits: Some(limits),
        } => {
            run_policy::tighten(&limits, &mut spec.limits);
            let in_force = limits_in_force(&spec.limits);
            if let Some(plan) = hooks.audit_plan.as_mut() {
                plan.started.enforcement["policy_limits"] =
                    serde_json::json!({"rule": rule, "in_force": in_force});
            }
            if !args.quiet {
                eprintln!(
                    "cordon: policy rule {rule} allows this with limits; in force: {}",
                    limits_in_words(&spec.limits)
                );
            }
            Ok(())
        }
        run_policy::Verdict::Allowed { limits: None, .. } => Ok(()),
    }
}

/// The sandbox could not be built or run: staged changes are dropped, a
/// run recorded as started is recorded as failed, and the error says why.
fn not_run(
    e: cordon_jail::JailError,
    staging: Option<stage_cmd::Staging>,
    mut hooks: RunHooks,
) -> anyhow::Error {
    if let Some(s) = staging {
        s.abandon();
    }
    if let Some(session) = hooks.audit.take() {
        if let Err(recording) = session.failed(&e.to_string()) {
            return recording;
        }
    }
    if let Some(why) = hooks.stage_watch.and_then(|w| w.tripped) {
        return anyhow::anyhow!("the run was stopped and its staged changes discarded: {why}");
    }
    anyhow::anyhow!("cannot build the sandbox: {e}")
}

/// Record how the run ended (with the policy's decisions on its
/// connections) in the audit store; returns the run's incidents.
fn record_the_end(
    hooks: &mut RunHooks,
    outcome: &Outcome,
    egress: &[cordon_egress::EgressEvent],
    sink: &audit_bridge::TeeSink,
) -> anyhow::Result<Vec<cordon_audit::Incident>> {
    let Some(mut session) = hooks.audit.take() else {
        return Ok(audit_bridge::incidents(outcome, egress));
    };
    if let Some(policy) = &hooks.policy {
        for (at, record) in policy.take_records() {
            session.record(at, record).map_err(|e| anyhow::anyhow!(e))?;
        }
    }
    session.finish(outcome, egress, &sink.excerpts)
}

/// Write `--report`: no real secret value can be in it, and the redactor
/// (which knows them) makes sure of it.
fn write_report(
    path: &std::path::Path,
    report: &Report<'_>,
    redactor: &cordon_scan::Redactor,
) -> anyhow::Result<()> {
    let mut value = serde_json::to_value(report)?;
    redact_strings(&mut value, redactor);
    let text = serde_json::to_string_pretty(&value)?;
    std::fs::write(path, text + "\n")
        .with_context(|| format!("cannot write the report to {}", path.display()))
}

/// What a run's end says on stderr besides the command's own output.
struct TheEnd<'a> {
    outcome: &'a Outcome,
    spec: &'a cordon_jail::Spec,
    host_tools: Option<&'a cordon_plan::HostTools>,
    stage_report: Option<&'a stage_cmd::StageReport>,
    incidents: &'a [cordon_audit::Incident],
    egress: &'a [cordon_egress::EgressEvent],
    /// What the command said that calls for a hint.
    said: &'a cordon_plan::said::OutputWatch,
}

/// At most this many refused egress attempts are told one by one.
const EGRESS_REFUSALS_TOLD: usize = 3;

impl TheEnd<'_> {
    fn tell(&self) {
        let (outcome, spec) = (self.outcome, self.spec);
        for layer in outcome.enforcement.degraded() {
            eprintln!(
                "cordon: warning: {} not enforced: {}",
                layer.layer,
                layer.warning_text()
            );
        }
        // A death by a signal is said too: the shell sees only 128+N.
        let notable = outcome.reason != EndReason::Exited;
        if let (true, Some(msg)) = (
            notable || outcome.breaches.output_truncated,
            &outcome.message,
        ) {
            let fix = limit_flag(outcome.reason).map_or(String::new(), |f| format!("; give {f}"));
            eprintln!("cordon: {msg}{fix}");
        }
        self.tell_host_tools();
        if let Some(s) = self.stage_report {
            eprintln!("{}", s.lines());
        }
        for line in egress_refusals(self.egress, EGRESS_REFUSALS_TOLD) {
            eprintln!("{line}");
        }
        if let Some(line) = incident_summary(self.incidents, outcome) {
            eprintln!("{line}");
        }
        if outcome.breaches.output_truncated {
            // Where the run was killed for it, that line named the flag.
            let fix = if outcome.reason == EndReason::OutputLimit {
                ""
            } else {
                "; give a larger --output, or write to a file"
            };
            eprintln!(
                "cordon: output truncated: {} bytes of stdout and {} of stderr dropped (limit {} per stream{fix})",
                outcome.stdout.dropped,
                outcome.stderr.dropped,
                spec.limits.output.unwrap_or(0)
            );
        }
        for hint in output_hints::hints(self.said, spec, outcome) {
            eprintln!("{hint}");
        }
    }

    fn tell_host_tools(&self) {
        let Some(t) = self.host_tools else { return };
        for note in &t.unprotected {
            eprintln!("cordon: warning: host tools not protected: {note}");
        }
        for path in &t.created {
            eprintln!(
                "cordon: warning: the run created {}, which git or an editor on the host acts on without asking; review it before running git there",
                path.display()
            );
        }
    }
}

/// The flag that raises the limit a run ended at.
fn limit_flag(reason: EndReason) -> Option<&'static str> {
    Some(match reason {
        EndReason::Timeout => "a longer --timeout",
        EndReason::CpuLimit => "a larger --cpu-time",
        EndReason::MemoryLimit => "a larger --memory",
        EndReason::PidsLimit => "a larger --pids",
        EndReason::FileSizeLimit => "a larger --file-size",
        EndReason::OutputLimit => "a larger --output",
        _ => return None,
    })
}

/// What the proxy answered the run's refused attempts (why, and how to
/// allow each), said again since clients often show only a status: each
/// distinct answer once, at most `most`, then how many more.
fn egress_refusals(egress: &[cordon_egress::EgressEvent], most: usize) -> Vec<String> {
    let mut distinct: Vec<&str> = Vec::new();
    for message in egress.iter().filter_map(|e| e.refusal.as_deref()) {
        if !distinct.contains(&message) {
            distinct.push(message);
        }
    }
    let more = distinct.len().saturating_sub(most);
    let mut lines: Vec<String> = distinct.iter().take(most).map(|m| m.to_string()).collect();
    if more > 0 {
        lines.push(format!(
            "cordon: and {more} more refused destination(s) (all of them: --net-log FILE, or `cordon audit incidents`)"
        ));
    }
    lines
}

/// The scanner refused the run: record it (start, the refusal, the end),
/// write the report, say why and how to proceed, exit 125.
fn refuse(
    args: &RunArgs,
    profile: &Profile,
    cwd: &std::path::Path,
    gate: &scan_gate::Gate,
) -> anyhow::Result<u8> {
    let run_id = cordon_audit::new_run_id();
    // No secret is resolved for a refused run; well-known formats are
    // still redacted.
    let redactor = cordon_scan::Redactor::with_values::<&str>(&[]);
    if let Some(session) = refused_run(args, profile, cwd, &run_id, Some(gate.record()))? {
        session.refused(gate.refusal_incident())?;
    }
    if let Some(path) = &args.report {
        let command: Vec<String> = args
            .command
            .iter()
            .map(|a| redactor.redact(a).into_owned())
            .collect();
        let mut value = serde_json::json!({
            "cordon_version": env!("CARGO_PKG_VERSION"),
            "run_id": run_id,
            "command": command,
            "cwd": cwd.display().to_string(),
            "profile": profile.origin,
            "exit_code": crate::EXIT_CORDON,
            "reason": "scan_refused",
            "message": gate.refusal_line(),
            "scan": gate,
        });
        redact_strings(&mut value, &redactor);
        std::fs::write(path, serde_json::to_string_pretty(&value)? + "\n")
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    eprintln!("{}", gate.refusal_line());
    Ok(crate::EXIT_CORDON)
}

/// The audit session of a run refused before its sandbox was built (its
/// start noted), or `None` without auditing. No secret is resolved for a
/// refused run; well-known formats are still redacted.
fn refused_run(
    args: &RunArgs,
    profile: &Profile,
    cwd: &std::path::Path,
    run_id: &str,
    scan: Option<serde_json::Value>,
) -> anyhow::Result<Option<audit_bridge::AuditSession>> {
    let Some(path) = audit_bridge::store_path(
        args.sandbox.audit.as_deref(),
        args.sandbox.no_audit,
        profile,
    )?
    else {
        return Ok(None);
    };
    let started = cordon_audit::RunStarted {
        argv: args.command.clone(),
        cwd: Some(cwd.display().to_string()),
        profile_name: Some(profile.origin.clone()),
        cordon_version: env!("CARGO_PKG_VERSION").to_owned(),
        scan,
        ..Default::default()
    };
    let session = audit_bridge::AuditSession::start(
        &path,
        run_id.to_owned(),
        started,
        std::time::SystemTime::now(),
        audit_bridge::code_of(&args.command, cwd).as_deref(),
        &profile.to_toml_string(),
        cordon_scan::Redactor::with_values::<&str>(&[]),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    Ok(Some(session))
}

/// The memory, process and wall-clock limits of a run, as JSON (bytes,
/// processes, seconds; absent when unlimited).
fn limits_in_force(l: &cordon_jail::Limits) -> serde_json::Value {
    serde_json::json!({
        "memory": l.memory,
        "pids": l.pids,
        "wall_seconds": l.wall.map(|w| w.as_secs_f64()),
    })
}

/// "memory 64MiB, processes 8, timeout 1s" (what is unlimited is said
/// so).
fn limits_in_words(l: &cordon_jail::Limits) -> String {
    let memory = l.memory.map_or("unlimited".to_owned(), |m| {
        cordon_policy::ByteSize(m).to_string()
    });
    let pids = l.pids.map_or("unlimited".to_owned(), |p| p.to_string());
    let wall = l
        .wall
        .map_or("none".to_owned(), |w| format!("{}s", w.as_secs_f64()));
    format!("memory {memory}, processes {pids}, timeout {wall}")
}

/// The policy refused the command: record the start, the decision and the
/// refusal; say why and what would allow it; exit 125.
fn refuse_by_policy(
    args: &RunArgs,
    profile: &Profile,
    cwd: &std::path::Path,
    run_id: &str,
    policy: &run_policy::RunPolicy,
    message: &str,
) -> anyhow::Result<u8> {
    if let Some(mut session) = refused_run(args, profile, cwd, run_id, None)? {
        for (at, record) in policy.take_records() {
            session.record(at, record).map_err(|e| anyhow::anyhow!(e))?;
        }
        session.refused(cordon_audit::Incident {
            kind: cordon_audit::IncidentKind::Other,
            severity: cordon_audit::Severity::Medium,
            summary: message.to_owned(),
            evidence: serde_json::json!({"policy": "refused"}),
        })?;
    }
    if let Some(path) = &args.report {
        let value = serde_json::json!({
            "cordon_version": env!("CARGO_PKG_VERSION"),
            "run_id": run_id,
            "exit_code": crate::EXIT_CORDON,
            "reason": "policy_refused",
            "message": message,
        });
        std::fs::write(path, serde_json::to_string_pretty(&value)? + "\n")
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    eprintln!("{message}");
    Ok(crate::EXIT_CORDON)
}

/// What the audit session needs once the sandbox runs.
pub(crate) struct AuditPlan {
    path: PathBuf,
    started: cordon_audit::RunStarted,
    code: Option<Vec<u8>>,
    profile_text: String,
    /// Records to add right after the start (the scanner's incidents).
    notes: Vec<cordon_audit::Incident>,
}

/// The supervisor's callbacks: open the audit store and start the egress
/// proxy once the sandbox exists (the proxy starts threads, which must not
/// exist when the sandbox is cloned), and commit a long run's start.
pub(crate) struct RunHooks {
    identity: Option<cordon_egress::Identity>,
    redactor: cordon_scan::Redactor,
    egress: Option<cordon_egress::EgressConfig>,
    recorder: Arc<egress::Recorder>,
    pub(crate) proxy: Option<cordon_egress::ProxyHandle>,
    /// `--policy`: decides every egress connection.
    policy: Option<Arc<run_policy::RunPolicy>>,
    audit_plan: Option<AuditPlan>,
    pub(crate) audit: Option<audit_bridge::AuditSession>,
    /// The start was committed on its own (a long run).
    start_committed: bool,
    /// The staged run's size, checked while it goes (`--stage`).
    stage_watch: Option<stage_cmd::Watch>,
    run_id: String,
}

impl cordon_jail::Hooks for RunHooks {
    fn started(&mut self, started: &cordon_jail::Started) -> Result<(), String> {
        if let Some(plan) = self.audit_plan.take() {
            let mut session = audit_bridge::AuditSession::start(
                &plan.path,
                self.run_id.clone(),
                plan.started,
                started.at,
                plan.code.as_deref(),
                &plan.profile_text,
                self.redactor.clone(),
            )?;
            for incident in plan.notes {
                session.note(incident)?;
            }
            self.audit = Some(session);
        }
        Ok(())
    }

    fn tick_after(&self) -> Option<std::time::Duration> {
        match (&self.audit, &self.stage_watch) {
            (Some(_), _) => Some(audit_bridge::START_COMMIT_DELAY),
            (None, Some(w)) => Some(w.every),
            (None, None) => None,
        }
    }

    /// A run still going after the delay: its start goes to the store now.
    /// A staged run over its size cap is stopped.
    fn tick(&mut self) -> Result<(), String> {
        if let (Some(session), false) = (&mut self.audit, self.start_committed) {
            session.commit_start()?;
            self.start_committed = true;
        }
        match &mut self.stage_watch {
            Some(w) => w.check(),
            None => Ok(()),
        }
    }

    fn tick_again(&self) -> Option<std::time::Duration> {
        self.stage_watch.as_ref().map(|w| w.every)
    }

    fn proxy_listener(&mut self, listener: std::net::TcpListener) -> Result<(), String> {
        let mut config = self.egress.take().ok_or("no egress configuration")?;
        // With a policy every connection the deny rules let through is the
        // policy's to decide (the allow rules become its default).
        let approver = self.policy.as_ref().map(|p| {
            config.allow.clear();
            config.on_unlisted = cordon_egress::Unlisted::Ask;
            Arc::new(run_policy::PolicyApprover(Arc::clone(p))) as Arc<dyn cordon_egress::Approver>
        });
        self.proxy = Some(
            egress::start(
                config,
                listener,
                Arc::clone(&self.recorder),
                self.identity.clone(),
                approver,
            )
            .map_err(|e| e.to_string())?,
        );
        Ok(())
    }
}

/// One line for people: how many incidents, of which kinds, and the refused
/// system calls by name.
fn incident_summary(incidents: &[cordon_audit::Incident], outcome: &Outcome) -> Option<String> {
    if incidents.is_empty() {
        return None;
    }
    let count = |k: cordon_audit::IncidentKind| incidents.iter().filter(|i| i.kind == k).count();
    let mut parts = Vec::new();
    let syscalls = count(cordon_audit::IncidentKind::Syscall);
    if syscalls > 0 {
        let mut names: Vec<&str> = outcome
            .denied_calls
            .iter()
            .map(|c| c.syscall.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            parts.push(format!("{syscalls} syscall"));
        } else {
            parts.push(format!("{syscalls} syscall ({})", names.join(", ")));
        }
    }
    for (kind, word) in [
        (cordon_audit::IncidentKind::Secret, "secret"),
        (cordon_audit::IncidentKind::Scan, "scan"),
        (cordon_audit::IncidentKind::Mcp, "mcp"),
        (cordon_audit::IncidentKind::Egress, "egress denied"),
        (cordon_audit::IncidentKind::Limit, "limit"),
        (cordon_audit::IncidentKind::Landlock, "landlock"),
        (cordon_audit::IncidentKind::Other, "other"),
    ] {
        let n = count(kind);
        if n > 0 {
            parts.push(format!("{n} {word}"));
        }
    }
    Some(format!(
        "cordon: {} incident(s): {} (details: --report, or `cordon audit incidents`)",
        incidents.len(),
        parts.join(", ")
    ))
}

/// Redact every string in a JSON document in place (redacting the encoded
/// text instead could cut an escape sequence in half).
fn redact_strings(value: &mut serde_json::Value, redactor: &cordon_scan::Redactor) {
    match value {
        serde_json::Value::String(s) => {
            if let std::borrow::Cow::Owned(r) = redactor.redact(s) {
                *s = r;
            }
        }
        serde_json::Value::Array(items) => {
            items.iter_mut().for_each(|v| redact_strings(v, redactor))
        }
        serde_json::Value::Object(map) => {
            map.values_mut().for_each(|v| redact_strings(v, redactor))
        }
        _ => {}
    }
}

/// /tmp itself as a declared path (a working directory of /tmp, or
/// `--ro /tmp`) is bound over the sandbox's private /tmp: the workload sees
/// the host's files there, and has no writable /tmp unless it was declared
/// with `--rw`. Said before the run, since tools that write temporary files
/// fail in a way that does not name the cause.
fn note_a_declared_tmp(spec: &cordon_jail::Spec) {
    if spec.isolation.level != cordon_jail::IsolationLevel::Namespaces {
        return;
    }
    if let Some(bind) = spec
        .binds
        .iter()
        .find(|b| b.path == std::path::Path::new("/tmp"))
    {
        let access = if bind.writable {
            "writable: the workload writes the host's /tmp"
        } else {
            "read-only: the workload has no writable /tmp"
        };
        eprintln!(
            "cordon: note: /tmp is a declared path (or the working directory), so the sandbox sees the host's /tmp there, {access}; run from another directory for a private /tmp"
        );
    }
}

/// A debug build with layers turned off for a test says so on every run
/// (release builds refuse the variable; the jail checks it).
fn warn_of_layers_turned_off() {
    use cordon_jail::test_switch;
    if let Ok(off) = test_switch::check() {
        if !off.is_empty() {
            let names: Vec<&str> = off.iter().map(|s| s.name()).collect();
            eprintln!(
                "cordon: test build: layers turned off by {}: {}",
                test_switch::VAR,
                names.join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_egress::{Decision, EgressEvent, Protocol};

    fn refused(host: &str) -> EgressEvent {
        EgressEvent {
            time: std::time::SystemTime::UNIX_EPOCH,
            sandbox_id: "run".into(),
            protocol: Protocol::Connect,
            method: "CONNECT".into(),
            host: host.into(),
            port: 443,
            path: None,
            bytes_up: 0,
            bytes_down: 0,
            duration: std::time::Duration::ZERO,
            decision: Decision::Deny,
            rule: "unlisted".into(),
            status: Some(403),
            secret_leak: None,
            refusal: Some(format!("cordon: egress to {host}:443 denied")),
        }
    }

    #[test]
    fn refused_destinations_are_told_once_each_and_the_rest_counted() {
        let mut events: Vec<EgressEvent> = ["a", "b", "a", "c", "d", "e"].map(refused).into();
        let mut allowed = refused("ok");
        allowed.decision = Decision::Allow;
        allowed.refusal = None;
        events.push(allowed);
        let lines = egress_refusals(&events, 3);
        assert_eq!(
            lines,
            [
                "cordon: egress to a:443 denied",
                "cordon: egress to b:443 denied",
                "cordon: egress to c:443 denied",
                "cordon: and 2 more refused destination(s) (all of them: --net-log FILE, or `cordon audit incidents`)",
            ]
        );
        assert_eq!(egress_refusals(&events[..2], 3).len(), 2);
        assert!(egress_refusals(&[], 3).is_empty());
    }
}
