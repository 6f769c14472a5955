//! Staged workspaces: `run --stage DIR` (writes go to an upper layer, the
//! host tree is untouched), `changes`, `discard` (and `promote`, in
//! promote_cmd.rs).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use cordon_stage::{ChangeSet, Kind, Op, Policy, Stage, Store};
use serde::Serialize;

/// The stage store of this user.
pub fn store() -> anyhow::Result<Store> {
    let root = Store::default_root().context(
        "cannot find a place for staged runs: set HOME or XDG_STATE_HOME to an absolute path",
    )?;
    Ok(Store::new(root))
}

/// A staged run being prepared or running.
#[derive(Debug)]
pub struct Staging {
    pub stage: Stage,
    size_cap: u64,
    /// Where auto-promotions are recorded.
    audit: Option<PathBuf>,
    /// Why the run is staged as a copy, when it is.
    fallback: Option<String>,
}

/// Where successful overlay probes are remembered, a line each: the
/// kernel release, the store's device and the staged directory's device
/// they held for (a new kernel, or a store or directory on another
/// filesystem, probes again). A failed probe is not remembered.
const PROBED: &str = ".overlay-ok";

fn probe_key(root: &Path, lower: Option<&Path>) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(root).ok()?.dev();
    let lower_dev = match lower {
        Some(l) => std::fs::metadata(l).ok()?.dev().to_string(),
        None => "-".into(),
    };
    let uname = rustix::system::uname();
    Some(format!(
        "{} {dev} {lower_dev}",
        uname.release().to_string_lossy()
    ))
}

/// How runs stage `target` here (none: a directory of no particular
/// filesystem): overlayfs when it can be mounted in a user namespace over
/// it with its upper layer in the store, else a copy of the directory
/// (with the reason). `fresh`: probe even when a success is remembered.
pub fn staging_mode(
    store: &Store,
    fresh: bool,
    target: Option<&Path>,
) -> anyhow::Result<(cordon_jail::StageMode, Option<String>)> {
    let root = store.root();
    store
        .ensure_root()
        .map_err(|e| anyhow::anyhow!("cannot create the stage store: {e}"))?;
    let key = probe_key(root, target);
    let remembered = root.join(PROBED);
    let known = std::fs::read_to_string(&remembered).unwrap_or_default();
    // The test switch is read by the probe itself: a remembered success
    // must not hide it.
    let switched_off = cordon_jail::overlay_probe_switched_off();
    if !fresh && !switched_off {
        if let Some(k) = &key {
            if known.lines().any(|l| l == k) {
                return Ok((cordon_jail::StageMode::Overlay, None));
            }
        }
    }
    match cordon_jail::overlay_probe_over(root, target) {
        Ok(()) => {
            if let Some(k) = key.filter(|k| !known.lines().any(|l| l == k)) {
                let _ = std::fs::write(&remembered, format!("{known}{k}\n"));
            }
            Ok((cordon_jail::StageMode::Overlay, None))
        }
        Err(why) => Ok((cordon_jail::StageMode::Copy, Some(why))),
    }
}

/// What the report and stderr say about a staged run.
#[derive(Debug, Serialize)]
pub struct StageReport {
    pub run_id: String,
    pub path: PathBuf,
    /// `overlay`, or `copy` where overlayfs cannot be used.
    pub mode: String,
    /// Why the directory was staged as a copy, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Changes captured (0 when the run was discarded).
    pub changes: usize,
    /// The change set's hash.
    pub hash: String,
    /// Where the upper layer is kept.
    pub upper: PathBuf,
    /// Why the changes were not kept, if they were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<String>,
    /// Changes promoted when the run ended (`[stage] auto` globs).
    pub auto_promoted: usize,
    /// Why the auto-promotion did not happen, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_error: Option<String>,
    /// The command that shows the changes.
    pub review: String,
}

/// Set up the stage for `dir` and add the staged bind to `spec`.
pub fn prepare(
    dir: &Path,
    run_id: &str,
    command: &[String],
    spec: &mut cordon_jail::Spec,
    profile: &cordon_policy::Profile,
    audit: Option<PathBuf>,
) -> anyhow::Result<Staging> {
    if spec.isolation.level != cordon_jail::IsolationLevel::Namespaces {
        bail!("--stage needs the namespaces isolation level (an overlay in the sandbox's own mount namespace); the process level cannot stage writes");
    }
    let canonical = std::fs::canonicalize(dir)
        .with_context(|| format!("--stage {}: cannot use this directory", dir.display()))?;
    if canonical != cordon_policy::normalize(&std::env::current_dir()?.join(dir)) {
        bail!(
            "--stage {}: this path goes through a symlink (it resolves to {}); name the real directory",
            dir.display(),
            canonical.display()
        );
    }
    if !canonical.is_dir() {
        bail!("--stage {}: not a directory", dir.display());
    }
    let store = store()?;
    if store.root().starts_with(&canonical) {
        bail!(
            "--stage {}: the stage store {} is inside this directory; stage a project directory, not one that holds cordon's state",
            dir.display(),
            store.root().display()
        );
    }
    let policy = policy_of(&profile.stage)?;
    // Bounded: old stages go when a new one starts.
    let _ = store.prune(profile.stage.keep.as_duration());
    let (mode, fallback) = staging_mode(&store, false, Some(&canonical))?;
    let mode_name = match mode {
        cordon_jail::StageMode::Overlay => cordon_stage::MODE_OVERLAY,
        cordon_jail::StageMode::Copy => cordon_stage::MODE_COPY,
    };
    let stage = store
        .create(run_id, &canonical, mode_name, command.to_vec(), policy)
        .map_err(|e| anyhow::anyhow!("cannot create the stage: {e}"))?;
    if mode == cordon_jail::StageMode::Copy {
        if let Err(e) = cordon_stage::make_copy(&stage, profile.stage.max_size.0) {
            let _ = stage.remove();
            bail!(
                "--stage {}: overlayfs cannot be used here ({}), and the copy fallback is refused: {e}",
                dir.display(),
                fallback.as_deref().unwrap_or("")
            );
        }
    }
    // No single file may pass the cap (a run that writes one fast would
    // otherwise overshoot it most between two checks of the watch).
    let cap = profile.stage.max_size.0;
    spec.limits.file_size = Some(spec.limits.file_size.map_or(cap, |l| l.min(cap)));
    spec.staged.push(cordon_jail::StagedBind {
        lower: canonical,
        upper: stage.upper(),
        work: stage.work(),
        mode,
    });
    Ok(Staging {
        stage,
        size_cap: profile.stage.max_size.0,
        audit,
        fallback,
    })
}

/// The built-in promotion rules plus the profile's `[stage]` globs.
fn policy_of(s: &cordon_policy::Stage) -> anyhow::Result<Policy> {
    for (key, list) in [("refuse", &s.refuse), ("ask", &s.ask), ("auto", &s.auto)] {
        if let Some(bad) = list.iter().find(|g| !cordon_stage::valid_glob(g)) {
            bail!("stage.{key}: '{bad}' is not a valid glob (use * within a name, ** across directories)");
        }
    }
    Ok(Policy::with_globs(
        &s.refuse,
        &s.ask,
        &s.auto,
        Some(s.max_file_size.0),
    ))
}

/// The shortest time between two checks of a staged run's size.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// The size cap of a staged run, enforced while it goes: the supervisor
/// measures the stage every [`Watch::every`] and stops the run once it
/// holds more than the cap. Between two checks a run can write past the
/// cap by what it writes in that time (each file is bounded by the cap
/// through RLIMIT_FSIZE); the stage is then discarded whole.
#[derive(Debug)]
pub struct Watch {
    upper: PathBuf,
    cap: u64,
    /// Until the next check: [`WATCH_EVERY`], or ten times what the last
    /// measurement took, so a large stage costs at most a tenth of a core.
    pub every: std::time::Duration,
    /// Why the run was stopped, when it was.
    pub tripped: Option<String>,
}

impl Watch {
    pub fn check(&mut self) -> Result<(), String> {
        let started = std::time::Instant::now();
        let size = cordon_stage::bytes_under(&self.upper);
        self.every = WATCH_EVERY.max(started.elapsed() * 10);
        if size <= self.cap {
            return Ok(());
        }
        let why = format!(
            "the staged changes passed the [stage] max_size cap of {} bytes during the run ({size} bytes)",
            self.cap
        );
        self.tripped = Some(why.clone());
        Err(why)
    }
}

impl Staging {
    /// The watch that enforces the size cap while the run goes.
    pub fn watch(&self) -> Watch {
        Watch {
            upper: self.stage.upper(),
            cap: self.size_cap,
            every: WATCH_EVERY,
            tripped: None,
        }
    }

    /// The sandbox could not be built: nothing was staged.
    pub fn abandon(self) {
        remove_soon(&self.stage, false);
    }

    /// The run ended: capture its change set and keep it (or discard it
    /// when it is over the size cap).
    pub fn finish(self) -> anyhow::Result<StageReport> {
        let id = self.stage.meta.run_id.clone();
        let mut report = StageReport {
            run_id: id.clone(),
            path: self.stage.meta.target.clone(),
            mode: self.stage.meta.mode.clone(),
            fallback: self.fallback.clone(),
            changes: 0,
            hash: String::new(),
            upper: self.stage.upper(),
            discarded: None,
            auto_promoted: 0,
            auto_error: None,
            review: format!("cordon changes {id}"),
        };
        let size = self.stage.upper_bytes();
        if size > self.size_cap {
            remove_soon(&self.stage, false);
            report.discarded = Some(format!(
                "the staged changes hold {size} bytes, over the cap of {} bytes",
                self.size_cap
            ));
            return Ok(report);
        }
        let set = cordon_stage::capture(&self.stage)
            .map_err(|e| anyhow::anyhow!("cannot read the staged changes: {e}"))?;
        if set.entries.is_empty() {
            // Nothing to keep: no change set written, the stage goes now.
            report.hash = set.hash;
            remove_soon(&self.stage, false);
            return Ok(report);
        }
        self.stage.keep()?;
        self.stage.save_changes(&set)?;
        report.changes = set.entries.len();
        report.hash = set.hash.clone();
        match self.auto_promote(&set) {
            Ok(n) => report.auto_promoted = n,
            Err(e) => report.auto_error = Some(format!("{e:#}")),
        }
        report.changes -= report.auto_promoted;
        if report.changes == 0 {
            // Nothing left to review: the stage goes now.
            remove_soon(&self.stage, false);
        }
        Ok(report)
    }

    /// Promote the entries only `auto` rules match (with the new
    /// directories above them), all or nothing.
    fn auto_promote(&self, set: &ChangeSet) -> anyhow::Result<usize> {
        let policy = &self.stage.meta.policy;
        let paths: Vec<String> = set
            .entries
            .iter()
            .filter(|e| {
                e.unsafe_reason.is_none()
                    && policy.decide(e).action == Some(cordon_stage::Action::Auto)
            })
            .map(|e| e.path.clone())
            .collect();
        if paths.is_empty() {
            return Ok(0);
        }
        let sel = cordon_stage::Selection {
            paths,
            allow: Vec::new(),
            scanner: Some(scan_file),
        };
        let (chosen, allowed) = cordon_stage::choose(&self.stage, set, &sel, &mut |_, _| false)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let done = cordon_stage::promote(&self.stage, chosen, allowed)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(path) = &self.audit {
            record(path, &self.stage, &set.hash, &done)?;
        }
        Ok(done.entries.len())
    }
}

impl StageReport {
    /// The lines for stderr.
    pub fn lines(&self) -> String {
        let copy = match &self.fallback {
            Some(why) => format!(
                "cordon: {} was staged as a copy (overlayfs cannot be used here: {why})\n",
                self.path.display()
            ),
            None => String::new(),
        };
        copy + &self.outcome_lines()
    }

    fn outcome_lines(&self) -> String {
        if let Some(why) = &self.discarded {
            return format!(
                "cordon: staged run {} of {} discarded: {why}",
                self.run_id,
                self.path.display()
            );
        }
        let auto = match (&self.auto_error, self.auto_promoted) {
            (Some(e), _) => format!("cordon: auto-promotion of {} refused: {e}\n", self.run_id),
            (None, 0) => String::new(),
            (None, n) => format!(
                "cordon: {n} change(s) promoted to {} by the profile's [stage] auto rules\n",
                self.path.display()
            ),
        };
        auto + &self.summary()
    }

    fn summary(&self) -> String {
        if self.changes == 0 {
            return format!(
                "cordon: staged run {}: no changes left to review in {}",
                self.run_id,
                self.path.display(),
            );
        }
        format!(
            "cordon: staged run {}: {} change(s) to {} kept aside; review: {}; apply: cordon promote {}; drop: cordon discard {}",
            self.run_id,
            self.changes,
            self.path.display(),
            self.review,
            self.run_id,
            self.run_id
        )
    }
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  cordon changes                     # every staged run\n  \
cordon changes RUN_ID\n  cordon changes RUN_ID --diff\n  cordon changes RUN_ID --json | jq '.entries[].path'"
)]
pub struct ChangesArgs {
    /// The staged run (as printed by `cordon run --stage`); none lists them all.
    run_id: Option<String>,
    /// Show a unified diff of text files (sizes and hashes for the rest).
    #[arg(long, conflicts_with = "json")]
    diff: bool,
    /// Print the change set as JSON.
    #[arg(long)]
    json: bool,
}

pub fn changes(args: ChangesArgs) -> anyhow::Result<u8> {
    let store = store()?;
    let Some(id) = args.run_id else {
        return list(&store, args.json);
    };
    let stage = store.open(&id).map_err(|e| anyhow::anyhow!("{e}"))?;
    let set = stage.changes().map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&set)?);
    } else if args.diff {
        let text =
            cordon_stage::render_diff(&stage, &set.entries).map_err(|e| anyhow::anyhow!("{e}"))?;
        print!("{text}");
    } else {
        print_listing(&stage, &set);
    }
    Ok(0)
}

fn print_listing(stage: &Stage, set: &ChangeSet) {
    use std::io::Write;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let _ = writeln!(
        out,
        "staged run {} of {} ({}): {} change(s), change set {}",
        set.run_id,
        set.target.display(),
        stage.meta.mode,
        set.entries.len(),
        &set.hash[..set.hash.len().min(16)]
    );
    for e in &set.entries {
        let mut line = format!("{} {:<7} {}", e.op.letter(), e.kind.as_str(), e.path);
        if e.kind == Kind::Symlink && e.op != Op::Deleted {
            line.push_str(&format!(" -> {}", e.link.as_deref().unwrap_or("")));
        }
        match (e.op, &e.base, e.mode) {
            (Op::Mode, Some(b), Some(m)) => line.push_str(&format!("  {:o} -> {m:o}", b.mode)),
            (Op::Added, _, Some(m)) if e.kind == Kind::File => {
                line.push_str(&format!("  {} bytes, mode {m:o}", e.size.unwrap_or(0)))
            }
            (Op::Modified, Some(b), _) if e.kind == Kind::File => {
                line.push_str(&format!("  {} -> {} bytes", b.size, e.size.unwrap_or(0)))
            }
            _ => {}
        }
        if let Some(why) = &e.unsafe_reason {
            line.push_str(&format!("  [never promoted: {why}]"));
        } else if e.base.as_ref().is_some_and(|b| b.changed_during_run) {
            line.push_str("  [conflict: the host file changed during the run]");
        } else {
            let d = stage.meta.policy.decide(e);
            if let Some(a) = d.action {
                line.push_str(&format!("  [{}: {}]", action_word(a), d.rules.join(", ")));
            }
        }
        let _ = writeln!(out, "{line}");
    }
}

pub fn action_word(a: cordon_stage::Action) -> &'static str {
    match a {
        cordon_stage::Action::Auto => "auto",
        cordon_stage::Action::Ask => "ask",
        cordon_stage::Action::Refuse => "refused",
    }
}

#[derive(Debug, Serialize)]
struct Listed {
    run_id: String,
    path: PathBuf,
    mode: String,
    created_unix: u64,
    command: Vec<String>,
}

fn list(store: &Store, json: bool) -> anyhow::Result<u8> {
    let stages = store.list().map_err(|e| anyhow::anyhow!("{e}"))?;
    let listed: Vec<Listed> = stages
        .into_iter()
        .map(|s| Listed {
            run_id: s.meta.run_id,
            path: s.meta.target,
            mode: s.meta.mode,
            created_unix: s.meta.created_unix,
            command: s.meta.command,
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&listed)?);
    } else if listed.is_empty() {
        println!("no staged runs in {}", store.root().display());
    } else {
        let now = std::time::SystemTime::UNIX_EPOCH
            .elapsed()
            .map_or(0, |d| d.as_secs());
        for l in &listed {
            println!(
                "{}  {:>8}  {}  {}",
                l.run_id,
                age(now.saturating_sub(l.created_unix)),
                l.path.display(),
                l.command.join(" ")
            );
        }
    }
    Ok(0)
}

/// "45s ago", "12m ago", "3h ago", "2d ago": how long a staged run has
/// waited for review.
fn age(secs: u64) -> String {
    let (n, unit) = match secs {
        0..=59 => (secs, "s"),
        60..=3599 => (secs / 60, "m"),
        3600..=86_399 => (secs / 3600, "h"),
        _ => (secs / 86_400, "d"),
    };
    format!("{n}{unit} ago")
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  cordon discard 019a...")]
pub struct DiscardArgs {
    /// The staged run to drop (its changes are deleted; the host tree is not touched).
    run_id: String,
}

pub fn discard(args: DiscardArgs) -> anyhow::Result<u8> {
    let store = store()?;
    let stage = store
        .open(&args.run_id)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    remove_soon(&stage, true);
    eprintln!(
        "cordon: discarded the staged changes of {} ({})",
        args.run_id,
        stage.meta.target.display()
    );
    Ok(0)
}

#[derive(Debug, Args)]
#[command(
    after_help = "Every entry is checked before anything is written: an entry that can never \
be promoted (a device, a setuid/setgid bit, a symlink out of the tree), one the policy refuses or \
asks about (without a yes on a terminal or --allow RULE), or one whose host side changed since the \
run started (a conflict) stops the whole promotion. Then all chosen entries are applied, or none.\n\n\
Examples:\n  cordon promote RUN_ID                       # everything\n  \
cordon promote RUN_ID src/main.rs docs/      # these host paths (relative to the current directory or the staged one)\n  \
cordon promote RUN_ID --allow new-executable # also the files that became executable"
)]
pub struct PromoteArgs {
    /// The staged run (as printed by `cordon run --stage`).
    run_id: String,
    /// Host paths to promote (a directory: everything under it); none: all.
    paths: Vec<PathBuf>,
    /// Promote entries held back by this policy rule (repeatable): git-hooks,
    /// git-config, git-internals, git-repository, host-tools, ci, shell-rc,
    /// new-executable, large-file, scanner, profile-refuse, profile-ask.
    #[arg(long, value_name = "RULE")]
    allow: Vec<String>,
    /// Audit store to record the promotion in (default: ~/.local/state/cordon/audit.db).
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Print what was promoted as JSON.
    #[arg(long)]
    json: bool,
}

/// The promotion's `scanner` rule: a secret in a known format (the audit
/// store's redactor), or a warn/block finding of cordon's scan rules in a
/// file of a language the scanner knows (by extension or shebang).
fn scan_file(path: &str, content: &[u8]) -> Vec<String> {
    use cordon_codescan::{Language, Scanner, Severity};
    static SCANNER: std::sync::OnceLock<Option<Scanner>> = std::sync::OnceLock::new();
    static SECRETS: std::sync::OnceLock<cordon_scan::Redactor> = std::sync::OnceLock::new();
    let mut out = Vec::new();
    let redactor = SECRETS.get_or_init(cordon_scan::Redactor::new);
    if let std::borrow::Cow::Owned(_) = redactor.redact_bytes(content) {
        out.push(format!("{path}: holds a secret in a known format"));
    }
    let (Some(lang), Ok(text)) = (
        Language::detect(Path::new(path), content),
        std::str::from_utf8(content),
    ) else {
        return out;
    };
    let Some(scanner) = SCANNER.get_or_init(|| Scanner::builtin().ok()) else {
        out.push("cordon's scan rules did not compile".into());
        return out;
    };
    match scanner.scan(path, lang, text) {
        Ok(r) => out.extend(
            r.findings
                .iter()
                .filter(|f| f.severity >= Severity::Warn)
                .map(|f| f.to_string()),
        ),
        Err(e) => out.push(format!("{path}: cannot be scanned: {e}")),
    }
    out
}

/// A host path named on the command line, relative to the staged directory.
fn relative_to(target: &Path, p: &Path) -> anyhow::Result<String> {
    let cwd = std::env::current_dir()?;
    let full = cordon_policy::normalize(&cwd.join(p));
    let rel = match full.strip_prefix(target) {
        Ok(r) => r.to_path_buf(),
        Err(_) if p.is_relative() => cordon_policy::normalize(&target.join(p))
            .strip_prefix(target)
            .map(Path::to_path_buf)
            .map_err(|_| anyhow::anyhow!("{}: not inside {}", p.display(), target.display()))?,
        Err(_) => bail!(
            "{}: not inside the staged directory {}",
            p.display(),
            target.display()
        ),
    };
    rel.to_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("{}: not UTF-8", p.display()))
}

/// Ask on the terminal, when there is one.
fn ask_terminal(change: &cordon_stage::Change, d: &cordon_stage::Decision) -> bool {
    use std::io::{BufRead, IsTerminal, Write};
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return false;
    }
    eprint!(
        "cordon: promote {} {} (rule {} asks)? [y/N] ",
        change.op.as_str(),
        change.path,
        d.rules.join(", ")
    );
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes")
}

#[derive(Debug, Serialize)]
struct PromoteReport<'a> {
    run_id: &'a str,
    target: &'a Path,
    change_set: &'a str,
    applied: &'a str,
    entries: &'a [cordon_stage::Change],
    allowed_rules: &'a [String],
    remaining: usize,
}

pub fn promote(args: PromoteArgs) -> anyhow::Result<u8> {
    let store = store()?;
    let stage = store
        .open(&args.run_id)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let set = stage.changes().map_err(|e| anyhow::anyhow!("{e}"))?;
    let paths = args
        .paths
        .iter()
        .map(|p| relative_to(&stage.meta.target, p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let sel = cordon_stage::Selection {
        paths,
        allow: args.allow.clone(),
        scanner: Some(scan_file),
    };
    let (chosen, allowed) = cordon_stage::choose(&stage, &set, &sel, &mut ask_terminal)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if chosen.is_empty() {
        eprintln!("cordon: nothing to promote in {}", args.run_id);
        return Ok(0);
    }
    let full_hash = stage.changes_hash().map_err(|e| anyhow::anyhow!("{e}"))?;
    let done =
        cordon_stage::promote(&stage, chosen, allowed).map_err(|e| anyhow::anyhow!("{e}"))?;
    let audit_path = match &args.audit {
        Some(p) => Some(p.clone()),
        None => cordon_audit::default_path().ok(),
    };
    if let Some(path) = audit_path {
        record(&path, &stage, &full_hash, &done).with_context(|| {
            format!(
                "the promotion was applied but not recorded in {}",
                path.display()
            )
        })?;
    }
    let remaining = stage
        .changes()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .entries
        .len();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&PromoteReport {
                run_id: &args.run_id,
                target: &stage.meta.target,
                change_set: &full_hash,
                applied: &done.applied_hash,
                entries: &done.entries,
                allowed_rules: &done.allowed_rules,
                remaining,
            })?
        );
    }
    eprintln!(
        "cordon: promoted {} change(s) to {}{}",
        done.entries.len(),
        stage.meta.target.display(),
        if remaining == 0 {
            "; nothing left staged, the run's stage is removed".to_owned()
        } else {
            format!(
                "; {remaining} change(s) still staged (cordon changes {})",
                args.run_id
            )
        }
    );
    // The replaced host files (and, when nothing is left, the stage) are
    // deleted in the background: freeing their blocks is most of a large
    // promotion's time on a busy disk.
    match stage.remove_later(remaining == 0) {
        Ok(true) => reap_in_background(),
        Ok(false) => {}
        Err(_) if remaining == 0 => stage.remove().map_err(|e| anyhow::anyhow!("{e}"))?,
        Err(_) => {}
    }
    Ok(0)
}

/// Set-aside stages that make a staged run start the reaper (promote and
/// discard always start it): one empty stage is a few directories, and
/// starting a process is a cost on every run's path.
const REAP_BACKLOG: usize = 8;

/// Take a stage out of the store now (one rename) and delete it in the
/// background: removing the overlay's directories frees disk blocks, which
/// on a busy disk (or one mounted with `discard`) takes milliseconds each.
/// `eager`: start the reaper now, else once [`REAP_BACKLOG`] wait. Deleted
/// here when it cannot be set aside.
fn remove_soon(stage: &Stage, eager: bool) {
    match stage.remove_later(true) {
        Ok(true) => {
            // Each multiple of the backlog starts one (not every run while
            // a reaper is still at work).
            let backlog = || store().map_or(0, |s| s.reap_backlog());
            if eager || backlog() % REAP_BACKLOG == 0 {
                reap_in_background();
            }
        }
        Ok(false) => {}
        Err(_) => {
            let _ = stage.remove();
        }
    }
}

/// Start `cordon __reap-stages` on its own (not waited for, in its own
/// process group, so the terminal's signals do not reach it). If it cannot
/// start, what it would delete waits for the next one.
fn reap_in_background() {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let _ = std::process::Command::new(exe)
        .arg("__reap-stages")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
}

/// `cordon __reap-stages`.
pub fn reap() -> anyhow::Result<u8> {
    store()?.reap();
    Ok(0)
}

/// One `promotion` record under the staged run's id.
fn record(
    path: &Path,
    stage: &Stage,
    change_set: &str,
    done: &cordon_stage::Promoted,
) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut w =
        cordon_audit::InlineWriter::open_with(path, cordon_audit::WriterOptions::default())?;
    w.append(
        &stage.meta.run_id,
        cordon_audit::Promotion {
            target: stage.meta.target.display().to_string(),
            change_set: change_set.to_owned(),
            applied: done.applied_hash.clone(),
            entries: done
                .entries
                .iter()
                .map(|e| format!("{} {}", e.op.as_str(), e.path))
                .collect(),
            allowed_rules: done.allowed_rules.clone(),
        },
    )?;
    w.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_runs_age_is_said_in_its_largest_unit() {
        let said: Vec<String> = [0, 59, 60, 3599, 3600, 86_399, 86_400, 10 * 86_400]
            .into_iter()
            .map(age)
            .collect();
        assert_eq!(
            said,
            ["0s ago", "59s ago", "1m ago", "59m ago", "1h ago", "23h ago", "1d ago", "10d ago"]
        );
    }
}
