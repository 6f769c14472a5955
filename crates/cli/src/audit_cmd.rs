//! `cordon audit ...`: read, check and export the audit store.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use cordon_audit::{AuditStore, Head, Record};
use serde_json::Value;

const EXAMPLES: &str = "\
Examples:
  cordon audit tail                  the last 20 records
  cordon audit tail -n 100 --follow  then keep printing new records
  cordon audit show 0194f3a2         everything about one run (an id prefix is enough)
  cordon audit incidents --since 1h  boundary violations of the last hour
  cordon audit verify                check the chain; exit 1 naming the first bad record
  cordon audit export -o audit.jsonl every record as JSON lines, for a SIEM

  Anchor the head where the store's owner cannot write, check it later:
  cordon audit head >> /mnt/worm/cordon-anchors.txt
  cordon audit verify --anchor \"$(tail -1 /mnt/worm/cordon-anchors.txt)\"

The store is $XDG_STATE_HOME/cordon/audit.db (or ~/.local/state/cordon/audit.db)
unless --store or CORDON_AUDIT names another.";

// The arguments of `cordon audit` (its description is the subcommand's,
// in main.rs).
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct AuditArgs {
    /// Audit store to read [default: $XDG_STATE_HOME/cordon/audit.db]
    #[arg(long, global = true, env = "CORDON_AUDIT", value_name = "PATH")]
    pub store: Option<PathBuf>,

    #[command(subcommand)]
    pub command: AuditCommand,
}

// `cordon audit` subcommands (a plain comment: see `AuditArgs`).
#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Print the most recent records, oldest first
    #[command(
        after_help = "Examples:\n  cordon audit tail -n 50\n  cordon audit tail --follow --json | jq .kind"
    )]
    Tail {
        /// How many records
        #[arg(short = 'n', long = "lines", default_value_t = 20)]
        n: usize,
        /// Keep printing new records as they are written (Ctrl-C stops)
        #[arg(short, long)]
        follow: bool,
        /// One JSON object per line
        #[arg(long)]
        json: bool,
    },
    /// Everything about one run: start, egress, incidents, end, output, profile, code
    #[command(
        after_help = "Examples:\n  cordon audit show last\n  cordon audit show 0194f3a2c1d0\n  cordon audit show 0194f3a2c1d0 --json"
    )]
    Show {
        /// Run id, a unique prefix of one, or `last` (the newest run)
        run_id: String,
        /// One JSON document
        #[arg(long)]
        json: bool,
    },
    /// Incidents (boundary violations, limit breaches), newest first
    #[command(
        after_help = "Examples:\n  cordon audit incidents --since 1h\n  cordon audit incidents -n 5\n  cordon audit incidents --since 2d --json"
    )]
    Incidents {
        /// Only those younger than this: 90s, 30m, 1h, 2d, 1w, 1h30m
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// Only the newest N (default: all)
        #[arg(short = 'n', long = "lines", value_name = "N")]
        n: Option<usize>,
        /// One JSON object per line
        #[arg(long)]
        json: bool,
    },
    /// Check the hash chain, the head file and the stored blobs; exit 1 naming the first bad record
    #[command(
        after_help = "Examples:\n  cordon audit verify\n  cordon audit verify --anchor 1042:3f5a...  (from an earlier `cordon audit head`)"
    )]
    Verify {
        /// Also check that the store still holds this record (from `cordon audit head`)
        #[arg(long, value_name = "SEQ:HASH")]
        anchor: Option<String>,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
    /// Write every record, oldest first
    #[command(
        after_help = "Examples:\n  cordon audit export --format jsonl > audit.jsonl\n  cordon audit export -o /var/log/cordon/audit.jsonl\n  cordon audit export --format otlp-json -o traces.json   # for the OpenTelemetry Collector"
    )]
    Export {
        /// Output format
        #[arg(long, value_enum, default_value_t = ExportFormat::Jsonl)]
        format: ExportFormat,
        /// Write here (created 0600) instead of standard output
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Print the store's last record as SEQ:HASH, to keep somewhere safe as an anchor
    #[command(after_help = "Examples:\n  cordon audit head >> /mnt/worm/cordon-anchors.txt")]
    Head {
        /// Print {\"seq\":…,\"hash\":…}
        #[arg(long)]
        json: bool,
    },
}

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// One JSON object per line
    Jsonl,
    /// OpenTelemetry traces (OTLP/JSON): a span per run, span events for
    /// egress decisions and incidents (for the Collector's otlpjsonfile receiver)
    OtlpJson,
}

/// Runs `cordon audit ...`; returns the process exit code.
pub fn run(args: AuditArgs) -> anyhow::Result<i32> {
    let path = match args.store {
        Some(p) => p,
        None => cordon_audit::default_path()?,
    };
    let store = AuditStore::open(&path)?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let out = &mut out;
    match args.command {
        AuditCommand::Tail { n, follow, json } => tail(&store, out, n, follow, json)?,
        AuditCommand::Show { run_id, json } => show(&store, out, &run_id, json)?,
        AuditCommand::Incidents { since, n, json } => incidents(&store, out, since, n, json)?,
        AuditCommand::Verify { anchor, json } => {
            if !verify(&store, &path, out, anchor, json)? {
                return Ok(1);
            }
        }
        AuditCommand::Export { format, output } => export(&store, out, format, output)?,
        AuditCommand::Head { json } => head(&store, out, json)?,
    }
    out.flush()?;
    Ok(0)
}

type Out<'a> = io::BufWriter<io::StdoutLock<'a>>;

/// `cordon audit tail`: the last records, then new ones as they come.
fn tail(
    store: &AuditStore,
    out: &mut Out<'_>,
    n: usize,
    follow: bool,
    json: bool,
) -> anyhow::Result<()> {
    let recs = store.tail(n)?;
    let mut last = recs.last().map_or(0, |r| r.seq);
    for r in &recs {
        print_record(out, r, json)?;
    }
    out.flush()?;
    if follow {
        if recs.is_empty() {
            last = store.head()?.seq;
        }
        store.follow(last, Duration::from_millis(500), |r| {
            print_record(out, r, json).is_ok() && out.flush().is_ok()
        })?;
    }
    Ok(())
}

/// `cordon audit show`: one run, with its code and profile.
fn show(store: &AuditStore, out: &mut Out<'_>, run_id: &str, json: bool) -> anyhow::Result<()> {
    // `last` is no run id's prefix: ids are hexadecimal.
    let newest;
    let run_id = if run_id == "last" {
        newest = store
            .runs(1)?
            .into_iter()
            .next()
            .map(|r| r.run_id)
            .ok_or_else(|| anyhow::anyhow!("the audit store holds no run yet"))?;
        newest.as_str()
    } else {
        run_id
    };
    let view = store.show(run_id)?;
    if json {
        let blob = |b: &Option<cordon_audit::Blob>| {
            b.as_ref().map(|b| {
                serde_json::json!({
                    "hash": b.hash,
                    "text": String::from_utf8_lossy(&b.data),
                })
            })
        };
        let doc = serde_json::json!({
            "run_id": view.run_id,
            "records": view.records,
            "code": blob(&view.code),
            "profile": blob(&view.profile),
        });
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
    } else {
        show_text(out, &view)?;
    }
    Ok(())
}

/// `cordon audit incidents`: every incident, or those since a span ago.
fn incidents(
    store: &AuditStore,
    out: &mut Out<'_>,
    since: Option<String>,
    newest: Option<usize>,
    json: bool,
) -> anyhow::Result<()> {
    let since = match since {
        Some(s) => Some(cordon_audit::time::parse_duration(&s).with_context(|| {
            format!("invalid --since {s:?}: use a span like 90s, 30m, 1h, 2d or 1w")
        })?),
        None => None,
    };
    let recs = store.incidents(since)?;
    if recs.is_empty() && !json {
        writeln!(out, "no incidents")?;
    }
    // Newest first, so the newest N are the first N.
    for r in recs.iter().take(newest.unwrap_or(usize::MAX)) {
        print_record(out, r, json)?;
    }
    Ok(())
}

/// `cordon audit verify`: the report; false when something is wrong
/// (named on stderr unless `json`).
fn verify(
    store: &AuditStore,
    path: &std::path::Path,
    out: &mut Out<'_>,
    anchor: Option<String>,
    json: bool,
) -> anyhow::Result<bool> {
    let anchor: Option<Head> = match anchor {
        Some(a) => Some(a.parse()?),
        None => None,
    };
    let report = store.verify_with_anchor(anchor.as_ref())?;
    if json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else if report.ok {
        writeln!(
            out,
            "ok: {} records and {} blobs verified; head {}{}",
            report.records,
            report.blobs,
            report.head,
            if anchor.is_some() {
                "; anchor found"
            } else {
                ""
            }
        )?;
    }
    out.flush()?;
    if !report.ok {
        if !json {
            let mut err = io::stderr().lock();
            writeln!(err, "verify FAILED for {}:", path.display())?;
            for p in &report.problems {
                writeln!(err, "  {p}")?;
            }
        }
        return Ok(false);
    }
    Ok(true)
}

/// `cordon audit export`: every record, to a file (0600) or stdout.
fn export(
    store: &AuditStore,
    out: &mut Out<'_>,
    format: ExportFormat,
    output: Option<PathBuf>,
) -> anyhow::Result<()> {
    let export = |w: &mut dyn Write| match format {
        ExportFormat::Jsonl => store.export_jsonl(w),
        ExportFormat::OtlpJson => store.export_otlp_json(w),
    };
    match output {
        Some(file) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&file)
                .with_context(|| format!("cannot create {}", file.display()))?;
            let n = export(&mut io::BufWriter::new(f))?;
            eprintln!("exported {n} records to {}", file.display());
        }
        None => {
            export(out)?;
        }
    }
    Ok(())
}

/// `cordon audit head`: the store's last record, to anchor elsewhere.
fn head(store: &AuditStore, out: &mut Out<'_>, json: bool) -> anyhow::Result<()> {
    let head = store.head()?;
    if json {
        serde_json::to_writer(&mut *out, &head)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{head}")?;
    }
    Ok(())
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut f = n as f64;
    let mut u = 0;
    while f >= 1024.0 && u + 1 < UNITS.len() {
        f /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}B")
    } else {
        format!("{f:.1}{}", UNITS[u])
    }
}

/// One line for people describing a record's body.
fn summary(r: &Record) -> String {
    let b = &r.body;
    match r.kind.as_str() {
        "run_started" => {
            let argv: Vec<&str> = b
                .get("argv")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut s = argv.join(" ");
            if let Some(src) = b.get("code_source").and_then(Value::as_str) {
                s.push_str(&format!("  code={src}"));
            }
            if let Some(p) = b.get("profile_name").and_then(Value::as_str) {
                s.push_str(&format!("  profile={p}"));
            }
            s
        }
        "run_ended" => {
            let mut s = str_of(b, "reason").to_string();
            if let Some(c) = b.get("exit_code").and_then(Value::as_i64) {
                s.push_str(&format!(" code={c}"));
            }
            if let Some(sig) = b.get("signal").and_then(Value::as_i64) {
                s.push_str(&format!(" signal={sig}"));
            }
            s.push_str(&format!(
                "  wall={}ms user={}ms sys={}ms",
                u64_of(b, "wall_ms"),
                u64_of(b, "user_ms"),
                u64_of(b, "sys_ms")
            ));
            if let Some(m) = b.get("peak_memory_bytes").and_then(Value::as_u64) {
                s.push_str(&format!(" mem={}", bytes(m)));
            }
            for stream in ["stdout", "stderr"] {
                if let Some(o) = b.get(stream) {
                    let dropped = u64_of(o, "dropped_bytes");
                    s.push_str(&format!(" {stream}={}", bytes(u64_of(o, "kept_bytes"))));
                    if dropped > 0 {
                        s.push_str(&format!("(+{} dropped)", bytes(dropped)));
                    }
                }
            }
            s
        }
        "egress" => {
            let mut s = format!(
                "{} {} {}:{}{}",
                str_of(b, "decision").to_uppercase(),
                str_of(b, "method"),
                str_of(b, "host"),
                u64_of(b, "port"),
                str_of(b, "path")
            );
            if let Some(rule) = b.get("rule").and_then(Value::as_str) {
                s.push_str(&format!("  rule={rule}"));
            }
            if let Some(reason) = b.get("reason").and_then(Value::as_str) {
                s.push_str(&format!("  ({reason})"));
            }
            s
        }
        "mcp_call" => {
            let mut s = format!(
                "{} {} {}  {}ms {}",
                str_of(b, "decision").to_uppercase(),
                str_of(b, "method"),
                str_of(b, "tool"),
                u64_of(b, "duration_ms"),
                bytes(u64_of(b, "result_bytes"))
            );
            if let Some(rule) = b.get("rule").and_then(Value::as_str) {
                s.push_str(&format!("  rule={rule}"));
            }
            if u64_of(b, "redacted") > 0 {
                s.push_str(&format!("  redacted={}", u64_of(b, "redacted")));
            }
            s
        }
        "incident" => format!(
            "{} {}: {}",
            str_of(b, "severity").to_uppercase(),
            str_of(b, "kind"),
            str_of(b, "summary")
        ),
        "head_mismatch" => format!("store did not match its head file before this write: {b}"),
        _ => b.to_string(),
    }
}

fn print_record(out: &mut impl Write, r: &Record, json: bool) -> io::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, r)?;
        return writeln!(out);
    }
    writeln!(
        out,
        "#{:<6} {}  {:<12}  {:<11}  {}",
        r.seq,
        r.time,
        short(&r.run_id),
        r.kind,
        summary(r)
    )
}

fn show_text(out: &mut impl Write, view: &cordon_audit::RunView) -> io::Result<()> {
    writeln!(out, "run {}", view.run_id)?;
    for r in &view.records {
        writeln!(
            out,
            "  #{:<6} {}  {:<11}  {}",
            r.seq,
            r.time,
            r.kind,
            summary(r)
        )?;
        match r.kind.as_str() {
            "run_started" => {
                if let Some(cwd) = r.body.get("cwd").and_then(Value::as_str) {
                    writeln!(out, "      cwd: {cwd}")?;
                }
                if let Some(v) = r.body.get("cordon_version").and_then(Value::as_str) {
                    writeln!(out, "      cordon: {v}")?;
                }
                if let Some(e) = r.body.get("enforcement").filter(|e| !e.is_null()) {
                    writeln!(out, "      enforcement: {e}")?;
                }
            }
            "incident" => {
                if let Some(e) = r.body.get("evidence").filter(|e| !e.is_null()) {
                    writeln!(out, "      evidence: {e}")?;
                }
            }
            _ => {}
        }
    }
    for r in view.records.iter().filter(|r| r.kind == "run_ended") {
        for stream in ["stdout", "stderr"] {
            let text = r
                .body
                .get(stream)
                .map(|o| str_of(o, "excerpt"))
                .unwrap_or("");
            if !text.is_empty() {
                writeln!(out, "--- {stream} (redacted excerpt) ---")?;
                write!(out, "{text}")?;
                if !text.ends_with('\n') {
                    writeln!(out)?;
                }
            }
        }
    }
    if let Some(p) = &view.profile {
        writeln!(out, "--- profile (sha256 {}) ---", short(&p.hash))?;
        write!(out, "{}", String::from_utf8_lossy(&p.data))?;
        if !p.data.ends_with(b"\n") {
            writeln!(out)?;
        }
    }
    if let Some(c) = &view.code {
        writeln!(out, "--- code (sha256 {}, redacted) ---", short(&c.hash))?;
        write!(out, "{}", String::from_utf8_lossy(&c.data))?;
        if !c.data.ends_with(b"\n") {
            writeln!(out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Top,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Top {
        Audit(AuditArgs),
    }

    #[test]
    fn parses() {
        let Top::Audit(a) = Cli::try_parse_from([
            "cordon", "audit", "tail", "-n", "5", "--follow", "--store", "/x.db",
        ])
        .unwrap()
        .cmd;
        assert_eq!(a.store, Some(PathBuf::from("/x.db")));
        assert!(matches!(
            a.command,
            AuditCommand::Tail {
                n: 5,
                follow: true,
                json: false
            }
        ));
        let Top::Audit(a) = Cli::try_parse_from(["cordon", "audit", "incidents", "--since", "1h"])
            .unwrap()
            .cmd;
        assert!(matches!(
            a.command,
            AuditCommand::Incidents { since: Some(_), .. }
        ));
    }

    #[test]
    fn verify_failure_exits_1() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let w = cordon_audit::AuditWriter::open(&path).unwrap();
        w.append(
            "r1",
            cordon_audit::Incident {
                kind: cordon_audit::IncidentKind::Syscall,
                severity: cordon_audit::Severity::High,
                summary: "ptrace denied".into(),
                evidence: Value::Null,
            },
        )
        .unwrap();
        w.close().unwrap();
        let args = |command| AuditArgs {
            store: Some(path.clone()),
            command,
        };
        assert_eq!(
            run(args(AuditCommand::Verify {
                anchor: None,
                json: false
            }))
            .unwrap(),
            0
        );
        // Without its head file, cut-off records could not be detected.
        std::fs::remove_file(cordon_audit::chain::head_file_path(&path)).unwrap();
        assert_eq!(
            run(args(AuditCommand::Verify {
                anchor: None,
                json: true
            }))
            .unwrap(),
            1
        );
    }
}
