//! Recording a `cordon run` in the audit store: the run's start (command,
//! code, resolved profile, enforcement), every egress decision, incidents
//! (refused system calls, denied egress, limit breaches) and its end.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;
use cordon_audit::{
    Decision, Egress, EndReason, Incident, IncidentKind, InlineWriter, RunEnded, RunStarted,
    Severity, StreamSummary,
};
use cordon_egress::EgressEvent;
use cordon_jail::{Outcome, Stream};
use serde_json::json;

/// Bytes of each output stream kept as an excerpt in the store.
pub const EXCERPT_BYTES: usize = 16 * 1024;
/// Extra bytes captured past the excerpt so that a secret straddling its
/// end is still recognised (and redacted) before the excerpt is cut.
const EXCERPT_MARGIN: usize = 8 * 1024;

/// Where the store is, or why there is none.
pub fn store_path(
    flag: Option<&Path>,
    disabled: bool,
    profile: &cordon_policy::Profile,
) -> anyhow::Result<Option<PathBuf>> {
    if disabled {
        return Ok(None);
    }
    // An explicit --audit PATH wins over a profile that turns auditing off.
    if let Some(p) = flag {
        return Ok(Some(p.to_path_buf()));
    }
    if !profile.audit.enabled {
        return Ok(None);
    }
    if let Some(p) = &profile.audit.path {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        return Ok(Some(cordon_policy::resolve_path(p, &cwd, &home)));
    }
    cordon_audit::default_path()
        .map(Some)
        .context("cannot find a place for the audit store; name one with --audit PATH, or turn auditing off with --no-audit")
}

/// The code a run executes when it is given inline or as a script file:
/// `sh -c CODE`, `python3 -c CODE`, `node -e CODE`, `python3 script.py`.
pub fn code_of(argv: &[String], cwd: &Path) -> Option<Vec<u8>> {
    let program = Path::new(argv.first()?).file_name()?.to_str()?;
    let interpreter = [
        "sh", "bash", "dash", "zsh", "ksh", "node", "perl", "ruby", "php", "deno", "bun",
    ]
    .contains(&program)
        || program.starts_with("python");
    if !interpreter {
        return None;
    }
    let mut args = argv[1..].iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-c" | "-e" | "--eval" => return args.next().map(|c| c.as_bytes().to_vec()),
            s if s.starts_with('-') => continue,
            file => {
                let path = cwd.join(file);
                let meta = std::fs::metadata(&path).ok()?;
                if meta.is_file() && meta.len() <= 1 << 20 {
                    return std::fs::read(path).ok();
                }
                return None;
            }
        }
    }
    None
}

/// An open store for one run.
/// How long the start of a run waits in memory before it is committed on
/// its own (see [`AuditSession::commit_start`]); a run that ends sooner is
/// committed once, start and end together.
pub const START_COMMIT_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// One run's records, written on the supervisor's thread (no writer
/// thread): the start waits in memory, then goes to the store with the end,
/// or on its own after [`START_COMMIT_DELAY`].
pub struct AuditSession {
    pub run_id: String,
    writer: InlineWriter,
}

impl AuditSession {
    /// Open the store and note the start (not yet committed). Called once
    /// the sandbox runs.
    pub fn start(
        path: &Path,
        run_id: String,
        started: RunStarted,
        at: SystemTime,
        code: Option<&[u8]>,
        profile_text: &str,
        redactor: cordon_scan::Redactor,
    ) -> Result<AuditSession, String> {
        let options = cordon_audit::WriterOptions {
            redactor,
            // One run appends to the spool instead of opening SQLite;
            // readers fold it in.
            spool: true,
            ..Default::default()
        };
        let mut writer = InlineWriter::open_with(path, options).map_err(|e| {
            format!(
                "cannot open the audit store {}: {e} (name another with --audit PATH, or run with --no-audit)",
                path.display()
            )
        })?;
        let mut started = started;
        if let Some(code) = code {
            started.code_hash = Some(writer.put_blob(code).map_err(|e| e.to_string())?);
            started.code_source = Some("script".into());
        }
        started.profile_hash = Some(
            writer
                .put_blob(profile_text.as_bytes())
                .map_err(|e| e.to_string())?,
        );
        writer
            .append_at(at, &run_id, started)
            .map_err(|e| e.to_string())?;
        Ok(AuditSession { run_id, writer })
    }

    /// Commit the start of a run that is still going.
    pub fn commit_start(&mut self) -> Result<(), String> {
        self.writer
            .commit()
            .map(|_| ())
            .map_err(|e| format!("cannot commit the start of the run to the audit store: {e}"))
    }

    /// Add any record to the run (e.g. an MCP call) at the time it
    /// happened; committed with the
    /// next [`AuditSession::commit`] or the end.
    pub fn record(
        &mut self,
        at: SystemTime,
        event: impl Into<cordon_audit::Event>,
    ) -> Result<(), String> {
        self.writer
            .append_at(at, &self.run_id, event)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Commit what was recorded so far.
    pub fn commit(&mut self) -> Result<(), String> {
        self.writer
            .commit()
            .map(|_| ())
            .map_err(|e| format!("cannot commit to the audit store: {e}"))
    }

    /// Add one record (e.g. a scan incident) to the run.
    pub fn note(&mut self, incident: Incident) -> Result<(), String> {
        self.writer
            .append(&self.run_id, incident)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Record that cordon refused to start the run (`incident` says why)
    /// and commit.
    pub fn refused(mut self, incident: Incident) -> anyhow::Result<()> {
        self.writer.append(&self.run_id, incident)?;
        self.writer
            .append(&self.run_id, never_ran(EndReason::Refused))?;
        self.writer
            .commit()
            .context("cannot commit the audit records")?;
        Ok(())
    }

    /// Record that the sandbox could not be built after the run was
    /// recorded as started.
    pub fn failed(mut self, message: &str) -> anyhow::Result<()> {
        self.writer.append(
            &self.run_id,
            Incident {
                kind: IncidentKind::Other,
                severity: Severity::Medium,
                summary: format!("the sandbox could not be built: {message}"),
                evidence: json!({ "error": message }),
            },
        )?;
        self.writer
            .append(&self.run_id, never_ran(EndReason::SpawnFailed))?;
        self.writer
            .commit()
            .context("cannot commit the audit records")?;
        Ok(())
    }

    /// Record the egress decisions, the incidents and the end; wait until
    /// all of it is durable.
    pub fn finish(
        mut self,
        outcome: &Outcome,
        egress: &[EgressEvent],
        output: &Excerpts,
    ) -> anyhow::Result<Vec<Incident>> {
        for e in egress {
            let event = Egress {
                method: e.method.clone(),
                host: e.host.clone(),
                port: e.port,
                path: e.path.clone(),
                bytes_sent: e.bytes_up,
                bytes_received: e.bytes_down,
                duration_ms: e.duration.as_millis() as u64,
                decision: match e.decision {
                    cordon_egress::Decision::Allow => Decision::Allow,
                    cordon_egress::Decision::Deny => Decision::Deny,
                },
                rule: Some(e.rule.clone()),
                reason: e.status.map(|s| format!("status {s}")),
            };
            self.writer.append_at(e.time, &self.run_id, event)?;
        }
        let incidents = incidents(outcome, egress);
        for i in &incidents {
            self.writer.append(&self.run_id, i.clone())?;
        }
        let redactor = self.writer.redactor();
        let excerpts = [
            excerpt(redactor, &output.stdout),
            excerpt(redactor, &output.stderr),
        ];
        self.writer
            .append(&self.run_id, run_ended(outcome, excerpts))?;
        self.writer
            .commit()
            .context("cannot commit the audit records")?;
        Ok(incidents)
    }
}

/// The end of a run whose workload never started (exit 125).
fn never_ran(reason: EndReason) -> RunEnded {
    RunEnded {
        reason,
        exit_code: Some(125),
        signal: None,
        wall_ms: 0,
        user_ms: 0,
        sys_ms: 0,
        peak_memory_bytes: None,
        stdout: StreamSummary::default(),
        stderr: StreamSummary::default(),
        enforcement: serde_json::Value::Null,
    }
}

/// Redact the captured bytes (excerpt plus margin) first, then cut at a
/// whitespace boundary near the excerpt's size, so that no secret is split
/// into a prefix that no longer matches its pattern.
fn excerpt(redactor: &cordon_scan::Redactor, captured: &[u8]) -> String {
    let redacted = redactor.redact_bytes(captured);
    let text = String::from_utf8_lossy(&redacted);
    if text.len() <= EXCERPT_BYTES {
        return text.into_owned();
    }
    let mut cut = EXCERPT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    // Back up to the last whitespace: a token has none inside.
    let head = &text[..cut];
    let cut = head.rfind(char::is_whitespace).map_or(0, |i| i + 1);
    text[..cut].to_owned()
}

fn run_ended(o: &Outcome, output: [String; 2]) -> RunEnded {
    let [stdout_excerpt, stderr_excerpt] = output;
    use cordon_jail::EndReason as J;
    let reason = match o.reason {
        J::Exited => EndReason::Exited,
        J::Signal => EndReason::Signal,
        J::Timeout => EndReason::Timeout,
        J::MemoryLimit => EndReason::MemoryLimit,
        J::PidsLimit => EndReason::PidsLimit,
        J::CpuLimit => EndReason::CpuLimit,
        J::FileSizeLimit => EndReason::FileSizeLimit,
        J::OutputLimit => EndReason::OutputLimit,
        J::Interrupted => EndReason::Killed,
        J::SetupFailed => EndReason::SpawnFailed,
        J::ExecFailed => EndReason::ExecFailed,
    };
    let (exit_code, signal) = match o.status {
        Some(cordon_jail::WaitStatus::Exited { code }) => (Some(code), None),
        Some(cordon_jail::WaitStatus::Signaled { signal, .. }) => (None, Some(signal)),
        None => (Some(o.exit_code), None),
    };
    RunEnded {
        reason,
        exit_code,
        signal,
        wall_ms: o.wall_time.as_millis() as u64,
        user_ms: o.user_time.as_millis() as u64,
        sys_ms: o.system_time.as_millis() as u64,
        peak_memory_bytes: o.peak_memory,
        stdout: StreamSummary {
            kept_bytes: o.stdout.kept,
            dropped_bytes: o.stdout.dropped,
            excerpt: stdout_excerpt,
        },
        stderr: StreamSummary {
            kept_bytes: o.stderr.kept,
            dropped_bytes: o.stderr.dropped,
            excerpt: stderr_excerpt,
        },
        enforcement: enforcement_record(o),
    }
}

/// The per-layer enforcement, plus whether Landlock denials were observed
/// (so a run without Landlock incidents can be told from one where they
/// could not be seen).
fn enforcement_record(o: &Outcome) -> serde_json::Value {
    let mut v = serde_json::to_value(&o.enforcement).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        map.insert(
            "landlock_log".into(),
            serde_json::to_value(&o.landlock_log).unwrap_or_default(),
        );
    }
    v
}

/// How bad a refused system call is: the ones that only make sense as an
/// escape attempt are critical.
fn syscall_severity(name: &str) -> Severity {
    const CRITICAL: &[&str] = &[
        "mount",
        "umount2",
        "pivot_root",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsmount",
        "fspick",
        "mount_setattr",
        "unshare",
        "setns",
        "clone",
        "ptrace",
        "process_vm_writev",
        "bpf",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
        "userfaultfd",
        "io_uring_setup",
    ];
    if CRITICAL.contains(&name) {
        Severity::Critical
    } else {
        Severity::High
    }
}

/// Landlock's refusals, as the kernel's audit log reported them. Reads are
/// medium (probing what is there); writes, creations, connections and
/// signals to processes outside the sandbox are high.
fn landlock_incidents(o: &Outcome, out: &mut Vec<Incident>) {
    for d in &o.landlock_denials {
        let severity = if d.blockers.iter().all(|b| {
            matches!(
                b.as_str(),
                "fs.read_file" | "fs.read_dir" | "fs.execute" | "fs.ioctl_dev"
            )
        }) {
            Severity::Medium
        } else {
            Severity::High
        };
        let object = ["path", "daddr", "dest", "ocomm", "opid"]
            .iter()
            .filter_map(|k| d.object.get(*k).map(|v| format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join(" ");
        let who = d.pid.map(|p| format!(" from pid {p}")).unwrap_or_default();
        out.push(Incident {
            kind: IncidentKind::Landlock,
            severity,
            summary: format!("Landlock refused {} {object}{who}", d.blockers.join(",")),
            evidence: json!({
                "blockers": d.blockers,
                "object": d.object,
                "pid": d.pid,
                "syscall": d.syscall,
                "at_ms": d.at_ms,
            }),
        });
    }
    let itemized = o.landlock_denials.len() as u64;
    if o.landlock_denials_total > itemized {
        out.push(Incident {
            kind: IncidentKind::Landlock,
            severity: Severity::High,
            summary: format!(
                "{} more Landlock refusals not itemized",
                o.landlock_denials_total - itemized
            ),
            evidence: json!({"total": o.landlock_denials_total}),
        });
    }
}

/// Every boundary attempt and limit breach of a run, classified.
pub fn incidents(o: &Outcome, egress: &[EgressEvent]) -> Vec<Incident> {
    let mut out = Vec::new();
    syscall_incidents(o, &mut out);
    landlock_incidents(o, &mut out);
    foreign_abi_incident(o, &mut out);
    egress_incidents(egress, &mut out);
    limit_incidents(o, &mut out);
    out
}

/// Each refused system call, and a count of those not itemized.
fn syscall_incidents(o: &Outcome, out: &mut Vec<Incident>) {
    for c in &o.denied_calls {
        out.push(Incident {
            kind: IncidentKind::Syscall,
            severity: syscall_severity(&c.syscall),
            summary: format!("refused {}(2) from pid {}", c.syscall, c.pid),
            evidence: json!({"syscall": c.syscall, "nr": c.nr, "args": c.args, "pid": c.pid, "at_ms": c.at_ms}),
        });
    }
    if o.denied_calls_total > o.denied_calls.len() as u64 {
        out.push(Incident {
            kind: IncidentKind::Syscall,
            severity: Severity::High,
            summary: format!(
                "{} more refused system calls not itemized",
                o.denied_calls_total - o.denied_calls.len() as u64
            ),
            evidence: json!({"total": o.denied_calls_total}),
        });
    }
}

/// A workload killed by the filter (a foreign ABI, a forbidden call).
fn foreign_abi_incident(o: &Outcome, out: &mut Vec<Incident>) {
    if let Some(cordon_jail::WaitStatus::Signaled { signal, .. }) = o.status {
        if signal == libc::SIGSYS {
            out.push(Incident {
                kind: IncidentKind::Syscall,
                severity: Severity::Critical,
                summary:
                    "killed for a system call from a foreign ABI (x32/i386) or a forbidden call"
                        .into(),
                evidence: json!({"signal": signal}),
            });
        }
    }
}

/// A secret's placeholder sent where it is not bound, and each denied
/// connection.
fn egress_incidents(egress: &[EgressEvent], out: &mut Vec<Incident>) {
    for e in egress.iter().filter(|e| e.secret_leak.is_some()) {
        out.push(Incident {
            kind: IncidentKind::Secret,
            severity: Severity::High,
            summary: if e.protocol == cordon_egress::Protocol::Http && e.rule.contains("cleartext") {
                format!(
                    "placeholder of secret {} sent to {}:{} over cleartext HTTP (never injected; sent unchanged)",
                    e.secret_leak.as_deref().unwrap_or("?"),
                    e.host,
                    e.port
                )
            } else {
                format!(
                    "placeholder of secret {} sent to {}:{}, which it is not bound to (sent unchanged)",
                    e.secret_leak.as_deref().unwrap_or("?"),
                    e.host,
                    e.port
                )
            },
            evidence: json!({"secrets": e.secret_leak, "host": e.host, "port": e.port, "method": e.method, "rule": e.rule}),
        });
    }
    for e in egress
        .iter()
        .filter(|e| e.decision == cordon_egress::Decision::Deny)
    {
        out.push(Incident {
            kind: IncidentKind::Egress,
            severity: Severity::Medium,
            summary: format!("egress to {}:{} denied ({})", e.host, e.port, e.rule),
            evidence: json!({"method": e.method, "host": e.host, "port": e.port, "rule": e.rule}),
        });
    }
}

/// Each limit the run reached: memory, processes, the deadline, CPU
/// time, file size, a full /tmp or /dev/shm, the output cap.
fn limit_incidents(o: &Outcome, out: &mut Vec<Incident>) {
    let limit = |severity, summary: String, evidence| Incident {
        kind: IncidentKind::Limit,
        severity,
        summary,
        evidence,
    };
    let b = &o.breaches;
    if let Some(kills) = b.oom_kills.filter(|&n| n > 0) {
        out.push(limit(
            Severity::Medium,
            format!("memory limit: {kills} OOM kill(s)"),
            json!({"oom_kills": kills, "limit": o.limits.memory}),
        ));
    }
    if let Some(hits) = b.pids_limit_hits.filter(|&n| n > 0) {
        out.push(limit(
            Severity::Medium,
            format!("process limit hit {hits} time(s)"),
            json!({"hits": hits, "limit": o.limits.pids}),
        ));
    }
    match o.reason {
        cordon_jail::EndReason::Timeout => out.push(limit(
            Severity::Low,
            "wall-clock deadline reached".into(),
            json!({"limit_seconds": o.limits.wall.map(|d| d.as_secs_f64())}),
        )),
        cordon_jail::EndReason::CpuLimit => out.push(limit(
            Severity::Low,
            "CPU time limit reached".into(),
            json!({}),
        )),
        cordon_jail::EndReason::FileSizeLimit => out.push(limit(
            Severity::Low,
            "file size limit reached".into(),
            json!({"limit": o.limits.file_size}),
        )),
        _ => {}
    }
    if b.file_at_size_limit && o.reason != cordon_jail::EndReason::FileSizeLimit {
        out.push(limit(
            Severity::Low,
            "file size limit reached by a process in the sandbox (a file in /tmp or /dev/shm stopped exactly at the limit)".into(),
            json!({"limit": o.limits.file_size}),
        ));
    }
    for (full, path, size) in [
        (b.tmp_full, "/tmp", serde_json::Value::Null),
        (b.shm_full, "/dev/shm", serde_json::Value::Null),
    ] {
        if full {
            out.push(limit(
                Severity::Low,
                format!("{path} is full (disk limit)"),
                json!({"path": path, "size": size}),
            ));
        }
    }
    if b.output_truncated {
        out.push(limit(
            Severity::Low,
            "output cut at its limit".into(),
            json!({"stdout_dropped": o.stdout.dropped, "stderr_dropped": o.stderr.dropped}),
        ));
    }
}

/// The first bytes of each stream, for the store.
#[derive(Debug, Default)]
pub struct Excerpts {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Passes output on to this process's stdout/stderr and keeps an excerpt.
#[derive(Debug, Default)]
pub struct TeeSink {
    pub excerpts: Excerpts,
    keep: bool,
    /// What the command said that calls for a hint at the end.
    pub said: cordon_plan::said::OutputWatch,
}

impl TeeSink {
    pub fn new(keep: bool) -> TeeSink {
        TeeSink {
            excerpts: Excerpts::default(),
            keep,
            said: Default::default(),
        }
    }
}

impl cordon_jail::OutputSink for TeeSink {
    fn write(&mut self, stream: Stream, data: &[u8]) {
        cordon_jail::StdioSink.write(stream, data);
        self.said.look(stream, data);
        if self.keep {
            let buf = match stream {
                Stream::Stdout => &mut self.excerpts.stdout,
                Stream::Stderr => &mut self.excerpts.stderr,
            };
            let room = (EXCERPT_BYTES + EXCERPT_MARGIN).saturating_sub(buf.len());
            buf.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
}
