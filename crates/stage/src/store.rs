//! Where staged runs live: `<state>/cordon/stage/<run id>/` holding
//! `meta.json` (what was staged, when, under which policy), `upper/` and
//! `work/` (the overlay's layers), `changes.json` (the change set captured
//! when the run ended) and `promoted.json` (entries already promoted).

use std::collections::BTreeSet;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::change::{ChangeSet, Op};
use crate::error::{Result, StageError};
use crate::policy::Policy;

/// The staging mode that mounts overlayfs over the host directory.
pub const MODE_OVERLAY: &str = "overlay";
/// The fallback that binds a copy of the host directory (`crate::copy`).
pub const MODE_COPY: &str = "copy";

/// What a staged run was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub run_id: String,
    /// The staged host directory (canonical).
    pub target: PathBuf,
    pub mode: String,
    /// `CLOCK_REALTIME_COARSE` when the run started, in ns: a host entry
    /// whose ctime is not before this changed while the run could see it.
    pub started_ns: i64,
    /// Seconds since the epoch when the stage was created.
    pub created_unix: u64,
    pub command: Vec<String>,
    /// The promotion policy of the run's profile.
    pub policy: Policy,
}

/// The stage directory of all runs of one user.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// One staged run.
#[derive(Debug, Clone)]
pub struct Stage {
    pub dir: PathBuf,
    pub meta: Meta,
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Now on the coarse realtime clock: never later than a timestamp the
/// kernel gives a file changed after this call.
pub fn coarse_now_ns() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    ts.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec)
}

impl Store {
    pub fn new(root: PathBuf) -> Store {
        Store { root }
    }

    /// `$XDG_STATE_HOME/cordon/stage`, else `~/.local/state/cordon/stage`.
    pub fn default_root() -> Option<PathBuf> {
        if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
            let p = PathBuf::from(x);
            if p.is_absolute() {
                return Some(p.join("cordon").join("stage"));
            }
        }
        let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
        Some(PathBuf::from(home).join(".local/state/cordon/stage"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A new stage for `run_id` over `target` in `mode` ([`MODE_OVERLAY`]
    /// or [`MODE_COPY`]): private directories, start time taken now. It is
    /// listed once [`Stage::keep`] wrote its meta.
    pub fn create(
        &self,
        run_id: &str,
        target: &Path,
        mode: &str,
        command: Vec<String>,
        policy: Policy,
    ) -> Result<Stage> {
        if mode != MODE_OVERLAY && mode != MODE_COPY {
            return Err(StageError::Invalid(format!("{mode}: not a staging mode")));
        }
        if !valid_id(run_id) {
            return Err(StageError::Invalid(format!("{run_id}: not a run id")));
        }
        self.ensure_root()?;
        let dir = self.root.join(run_id);
        for d in [dir.clone(), dir.join("upper"), dir.join("work")] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&d)
                .map_err(|e| StageError::io(&d, e))?;
        }
        let meta = Meta {
            run_id: run_id.to_owned(),
            target: target.to_path_buf(),
            mode: mode.to_owned(),
            started_ns: coarse_now_ns(),
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            command,
            policy,
        };
        // meta.json is written when the stage is kept (Stage::keep): a run
        // that changes nothing writes no file.
        Ok(Stage { dir, meta })
    }

    /// Create the store's directory (private) if it is not there.
    pub fn ensure_root(&self) -> Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(|e| StageError::io(&self.root, e))
    }

    pub fn open(&self, run_id: &str) -> Result<Stage> {
        if !valid_id(run_id) {
            return Err(StageError::NoSuchRun(run_id.to_owned()));
        }
        let dir = self.root.join(run_id);
        let meta_path = dir.join("meta.json");
        let text = match std::fs::read(&meta_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StageError::NoSuchRun(run_id.to_owned()))
            }
            Err(e) => return Err(StageError::io(&meta_path, e)),
        };
        let meta: Meta = serde_json::from_slice(&text).map_err(|source| StageError::Json {
            path: meta_path,
            source,
        })?;
        Ok(Stage { dir, meta })
    }

    /// Every staged run, oldest first.
    pub fn list(&self) -> Result<Vec<Stage>> {
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(StageError::io(&self.root, e)),
        };
        for entry in entries.flatten() {
            if let Some(id) = entry.file_name().to_str() {
                if let Ok(stage) = self.open(id) {
                    out.push(stage);
                }
            }
        }
        out.sort_by(|a, b| a.meta.run_id.cmp(&b.meta.run_id));
        Ok(out)
    }

    /// Delete what [`Stage::remove_later`] set aside (by any process);
    /// nothing when another process is at it already.
    pub fn reap(&self) {
        let Ok(lock) = std::fs::File::create(self.root.join(".reap.lock")) else {
            return;
        };
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(REAPED) {
                let _ = remove_tree(&e.path());
            }
        }
    }

    /// Remove staged runs older than `max_age`; returns their ids.
    pub fn prune(&self, max_age: Duration) -> Result<Vec<String>> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut removed = Vec::new();
        for stage in self.list()? {
            if now.saturating_sub(stage.meta.created_unix) > max_age.as_secs() {
                stage.remove()?;
                removed.push(stage.meta.run_id);
            }
        }
        // A stage whose run never ended (cordon was killed) has no meta.
        let entries = std::fs::read_dir(&self.root).map_err(|e| StageError::io(&self.root, e))?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > max_age);
            if valid_id(&name) && old && !e.path().join("meta.json").exists() {
                remove_tree(&e.path()).map_err(|err| StageError::io(e.path(), err))?;
                removed.push(name);
            }
        }
        Ok(removed)
    }

    /// How many set-aside stages and graveyards wait for [`Store::reap`].
    pub fn reap_backlog(&self) -> usize {
        std::fs::read_dir(&self.root).map_or(0, |entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(REAPED))
                .count()
        })
    }
}

impl Stage {
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// What the copy fallback copied (`crate::copy`).
    pub(crate) fn manifest_path(&self) -> PathBuf {
        self.dir.join("copy.json")
    }

    fn changes_path(&self) -> PathBuf {
        self.dir.join("changes.json")
    }

    fn promoted_path(&self) -> PathBuf {
        self.dir.join("promoted.json")
    }

    /// Write the stage's meta: from now on it is listed, opened and pruned.
    pub fn keep(&self) -> Result<()> {
        write_json(&self.dir.join("meta.json"), &self.meta)
    }

    /// Keep the change set captured when the run ended.
    pub fn save_changes(&self, set: &ChangeSet) -> Result<()> {
        write_json(&self.changes_path(), set)
    }

    /// The change set as captured when the run ended (captured now if it
    /// was not), without the entries already promoted.
    pub fn changes(&self) -> Result<ChangeSet> {
        let path = self.changes_path();
        let set = match std::fs::read(&path) {
            Ok(text) => {
                serde_json::from_slice(&text).map_err(|source| StageError::Json { path, source })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let set = crate::capture(self)?;
                self.save_changes(&set)?;
                set
            }
            Err(e) => return Err(StageError::io(&path, e)),
        };
        let done = self.promoted()?;
        Ok(if done.is_empty() {
            set
        } else {
            set.without(&done)
        })
    }

    /// The hash of the whole change set as captured (promoted entries
    /// included): what the audit record names.
    pub fn changes_hash(&self) -> Result<String> {
        let path = self.changes_path();
        let text = std::fs::read(&path).map_err(|e| StageError::io(&path, e))?;
        let set: ChangeSet =
            serde_json::from_slice(&text).map_err(|source| StageError::Json { path, source })?;
        Ok(set.hash)
    }

    /// Entries promoted so far.
    pub fn promoted(&self) -> Result<BTreeSet<(String, Op)>> {
        let path = self.promoted_path();
        match std::fs::read(&path) {
            Ok(text) => {
                serde_json::from_slice(&text).map_err(|source| StageError::Json { path, source })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeSet::new()),
            Err(e) => Err(StageError::io(&path, e)),
        }
    }

    pub fn mark_promoted(&self, done: impl IntoIterator<Item = (String, Op)>) -> Result<()> {
        let mut all = self.promoted()?;
        all.extend(done);
        write_json(&self.promoted_path(), &all)
    }

    /// Bytes held by the upper layer (in the copy fallback: the copy).
    pub fn upper_bytes(&self) -> u64 {
        bytes_under(&self.upper())
    }

    /// Delete the stage (its upper layer included).
    pub fn remove(&self) -> Result<()> {
        remove_tree(&self.dir).map_err(|e| StageError::io(&self.dir, e))
    }

    /// The directory promotion moves replaced host files into (created
    /// now if it is not there), opened.
    pub(crate) fn graveyard(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        let path = self.dir.join(GRAVEYARD);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        crate::fsutil::open_root(&path)
    }

    /// Take the stage (`whole`) or its graveyard out of the store's view
    /// with one rename, for [`Store::reap`] to delete; the caller starts
    /// that. Returns whether anything waits to be reaped.
    pub fn remove_later(&self, whole: bool) -> Result<bool> {
        let from = if whole {
            self.dir.clone()
        } else {
            self.dir.join(GRAVEYARD)
        };
        let Some(root) = self.dir.parent() else {
            return Ok(false);
        };
        let to = root.join(format!(
            "{REAPED}{}-{}-{}",
            self.meta.run_id,
            std::process::id(),
            coarse_now_ns()
        ));
        match std::fs::rename(&from, &to) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StageError::io(&from, e)),
        }
    }
}

/// Where promotion puts the host files it replaced or deleted.
const GRAVEYARD: &str = "graveyard";
/// The name prefix of what waits in the store to be deleted.
const REAPED: &str = ".reap-";

/// The bytes of the files under `path` plus 4 KiB per directory (what a
/// stage holds; entries that vanish while it is read count nothing).
pub fn bytes_under(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => 4096 + bytes_under(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// `rm -rf` that first makes directories writable: the run may have left
/// read-only directories in its upper layer, and overlayfs leaves a
/// mode-0 `work/work`. A directory its owner can already read, write and
/// search is left as it is (a chmod is a journaled write).
fn remove_tree(path: &Path) -> std::io::Result<()> {
    fn open_up(p: &Path) {
        if let Ok(m) = std::fs::symlink_metadata(p) {
            if m.is_dir() {
                if m.permissions().mode() & 0o700 != 0o700 {
                    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
                }
                if let Ok(entries) = std::fs::read_dir(p) {
                    for e in entries.flatten() {
                        open_up(&e.path());
                    }
                }
            }
        }
    }
    open_up(path);
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Write JSON to a temporary file and rename it into place.
pub(crate) fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_vec(value).map_err(|source| StageError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(|e| StageError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| StageError::io(path, e))
}
