//! Files in writable paths that the caller's own tools run on their own
//! after the sandbox is gone: a git repository's config and hooks (the next
//! `git status` runs `core.fsmonitor`, `git commit` runs the hooks), editor
//! task and settings directories, hook-manager configs, and when the home
//! directory is writable, its shell, git, ssh and session start-up files.
//! cordon binds the ones that exist read-only and pins every directory on
//! the way to them (a mount point cannot be renamed or removed, so the
//! workload cannot move `.git` aside and put its own in its place). What
//! does not exist yet cannot be bound; it is watched and named after the
//! run.
//!
//! See docs/threat-model.md ("Writes the host acts on later") for the
//! decision on every file and what remains.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cordon_jail::Bind;

/// Inside a git directory: what git reads to decide what to run.
/// `commondir` redirects the whole repository (config and hooks included)
/// to another directory; `config.worktree` is read with
/// `extensions.worktreeConfig`.
const GIT_DIR_FILES: &[&str] = &["config", "hooks", "info", "commondir", "config.worktree"];

/// At the root of a work tree (and of every writable path): files that an
/// editor or a git hook manager runs without being asked.
const WORK_TREE_FILES: &[&str] = &[
    ".vscode",
    ".idea",
    ".pre-commit-config.yaml",
    ".husky",
    "lefthook.yml",
    ".lefthook.yml",
    "lefthook.yaml",
    ".lefthook.yaml",
    ".overcommit.yml",
];

/// In the caller's home, when a writable path holds it: what a shell,
/// git, ssh, an editor or the desktop session runs on its own next time
/// (`.local/bin` and `bin` come early on many PATHs, so a `git` dropped
/// there runs instead of the real one).
const HOME_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".config/fish",
    ".gitconfig",
    ".config/git",
    ".ssh",
    ".config/autostart",
    ".config/systemd",
    ".config/environment.d",
    ".pam_environment",
    ".xprofile",
    ".xsessionrc",
    ".xinitrc",
    ".vimrc",
    ".config/nvim",
    ".emacs",
    ".emacs.d",
    ".local/bin",
    "bin",
];

/// How deep below a writable path repositories are looked for, and how
/// many directories at most: a run must not start by walking a huge tree.
const MAX_DEPTH: usize = 4;
const MAX_DIRS: usize = 1024;

/// What was found in the writable paths, and what to do about it.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct HostTools {
    /// Existing files and directories bound read-only.
    pub read_only: Vec<PathBuf>,
    /// Directories bound onto themselves (writable) so they cannot be
    /// renamed or removed.
    pub pinned: Vec<PathBuf>,
    /// Paths that did not exist; a host tool would act on them if the run
    /// created them. Checked after the run.
    pub watched: Vec<PathBuf>,
    /// Git work trees and directories found.
    pub repositories: Vec<PathBuf>,
    /// What could not be protected, and why.
    pub unprotected: Vec<String>,
    /// What the run created among `watched`, and repositories it made
    /// (filled in after the run by [`HostTools::check_after`]).
    pub created: Vec<PathBuf>,
    #[serde(skip)]
    declared: Vec<Bind>,
    #[serde(skip)]
    home: PathBuf,
}

/// Look through the writable binds for files host tools run on their own.
pub fn find(binds: &[Bind], home: &Path) -> HostTools {
    let mut f = Finder {
        binds,
        home,
        out: HostTools {
            declared: binds.to_vec(),
            home: home.to_path_buf(),
            ..HostTools::default()
        },
        pins: BTreeSet::new(),
        ro: BTreeSet::new(),
        gitdirs: BTreeSet::new(),
        dirs_seen: 0,
    };
    for b in binds.iter().filter(|b| b.writable) {
        if f.owner(&b.path)
            .is_some_and(|o| o.path == b.path && o.writable)
        {
            f.walk(&b.path);
        }
    }
    if binds
        .iter()
        .any(|b| b.writable && home.starts_with(&b.path) && home != Path::new("/"))
        && f.writable(home)
    {
        for name in HOME_FILES {
            f.protect_or_watch(&home.join(name));
        }
        for config in [".gitconfig", ".config/git/config"] {
            f.config_file(&home.join(config), home, 0);
        }
    }
    f.out.pinned = f.pins.into_iter().collect();
    f.out.read_only = f.ro.into_iter().collect();
    f.out
}

impl HostTools {
    /// The binds that enforce this, to append to the spec's (after the
    /// declared ones; the jail mounts parents before children).
    pub fn binds(&self) -> Vec<Bind> {
        let pins = self.pinned.iter().map(|p| Bind {
            path: p.clone(),
            writable: true,
        });
        let ro = self.read_only.iter().map(|p| Bind {
            path: p.clone(),
            writable: false,
        });
        pins.chain(ro).collect()
    }

    /// After the run: note the watched paths that now exist, and
    /// repositories that were not there before (within the same search
    /// limits); `isolation_process` when the run had no mount namespace, so
    /// nothing was bound.
    pub fn check_after(&mut self, isolation_process: bool) {
        if isolation_process {
            self.unprotected.push(
                "process isolation level: without a mount namespace nothing is bound read-only inside writable paths (Landlock cannot refuse a path below a writable one)"
                    .into(),
            );
        }
        self.created = self.created_now();
    }

    fn created_now(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .watched
            .iter()
            .filter(|p| std::fs::symlink_metadata(p).is_ok())
            .cloned()
            .collect();
        let now = find(&self.declared, &self.home);
        out.extend(
            now.repositories
                .into_iter()
                .filter(|r| !self.repositories.contains(r)),
        );
        out.sort();
        out.dedup();
        out
    }
}

struct Finder<'a> {
    binds: &'a [Bind],
    home: &'a Path,
    out: HostTools,
    pins: BTreeSet<PathBuf>,
    ro: BTreeSet<PathBuf>,
    gitdirs: BTreeSet<PathBuf>,
    dirs_seen: usize,
}

impl Finder<'_> {
    /// The declared bind a path is seen through (the deepest one holding it).
    fn owner(&self, path: &Path) -> Option<&Bind> {
        self.binds
            .iter()
            .filter(|b| path.starts_with(&b.path))
            .max_by_key(|b| b.path.components().count())
    }

    fn writable(&self, path: &Path) -> bool {
        self.owner(path).is_some_and(|b| b.writable)
    }

    /// Breadth-first below a writable bind, bounded in depth and count.
    fn walk(&mut self, root: &Path) {
        let mut level = vec![root.to_path_buf()];
        self.work_tree_files(root);
        for depth in 0..=MAX_DEPTH {
            let mut next = Vec::new();
            for dir in level {
                if self.dirs_seen >= MAX_DIRS {
                    self.out.unprotected.push(format!(
                        "{}: stopped looking for repositories after {MAX_DIRS} directories; deeper ones are not protected",
                        root.display()
                    ));
                    return;
                }
                self.dirs_seen += 1;
                // One read of the directory both lists its subdirectories
                // and tells whether it holds a `.git`.
                let entries = match std::fs::read_dir(&dir) {
                    Ok(entries) if depth < MAX_DEPTH => entries,
                    _ => {
                        self.visit(&dir);
                        continue;
                    }
                };
                let mut has_git = false;
                for e in entries.flatten() {
                    if e.file_name() == ".git" {
                        has_git = true;
                        continue;
                    }
                    let path = e.path();
                    if e.file_type().is_ok_and(|t| t.is_dir()) && self.writable(&path) {
                        next.push(path);
                    }
                }
                if has_git {
                    self.visit(&dir);
                }
            }
            next.sort();
            level = next;
        }
    }

    /// One directory: is it a work tree (`.git` directory or file)?
    fn visit(&mut self, dir: &Path) {
        let dot_git = dir.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            return;
        };
        self.out.repositories.push(dot_git.clone());
        if meta.is_dir() {
            self.git_dir(&dot_git, Some(dir));
        } else if meta.is_file() {
            // A worktree's or submodule's pointer: `gitdir: PATH`.
            self.protect(&dot_git);
            if let Some(target) = read_pointer(&dot_git, "gitdir:", dir) {
                self.git_dir(&target, Some(dir));
            }
        } else {
            self.unprotect(
                &dot_git,
                "a symlink; the directory it names is not protected",
            );
        }
        self.work_tree_files(dir);
    }

    fn work_tree_files(&mut self, dir: &Path) {
        for name in WORK_TREE_FILES {
            self.protect_or_watch(&dir.join(name));
        }
    }

    /// A git directory (also a submodule's or a linked worktree's).
    fn git_dir(&mut self, g: &Path, work_tree: Option<&Path>) {
        if !self.writable(g) || !self.gitdirs.insert(g.to_path_buf()) {
            return;
        }
        self.pin(g);
        for name in GIT_DIR_FILES {
            self.protect_or_watch(&g.join(name));
        }
        if let Some(common) = read_pointer(&g.join("commondir"), "", g) {
            self.git_dir(&common, None);
        }
        self.config_file(&g.join("config"), work_tree.unwrap_or(g), 0);
        // Submodules' git directories, possibly nested (modules/a/modules/b)
        // and with slashes in their names (modules/libs/x).
        let modules = g.join("modules");
        if modules.is_dir() {
            self.modules(&modules, 0);
        } else {
            self.watch(&modules);
        }
        // Linked worktrees: each redirects to the common directory.
        if let Ok(entries) = std::fs::read_dir(g.join("worktrees")) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let w = e.path();
                    self.pin(&w);
                    for name in ["commondir", "config.worktree", "gitdir"] {
                        self.protect_or_watch(&w.join(name));
                    }
                }
            }
        }
    }

    /// What a config file points at: its hooks directory and its
    /// includes (followed a few levels deep, as git does).
    fn config_file(&mut self, config: &Path, work_tree: &Path, depth: usize) {
        let refs = config_refs(config, work_tree, self.home);
        if let Some(hooks) = refs.hooks {
            self.protect_or_watch(&hooks);
        }
        for inc in refs.includes {
            self.protect_or_watch(&inc);
            if depth < 4 {
                self.config_file(&inc, work_tree, depth + 1);
            }
        }
    }

    fn modules(&mut self, dir: &Path, depth: usize) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let m = e.path();
            if m.join("HEAD").is_file() {
                self.git_dir(&m, None);
            } else if depth < MAX_DEPTH {
                self.modules(&m, depth + 1);
            }
        }
    }

    fn protect_or_watch(&mut self, path: &Path) {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => self.unprotect(
                path,
                "a symlink; it can be replaced, and what it names is protected only if it is found on its own",
            ),
            Ok(_) => self.protect(path),
            Err(_) => self.watch(path),
        }
    }

    fn protect(&mut self, path: &Path) {
        let declared = self.binds.iter().any(|b| b.path == path);
        if declared || !self.writable(path) {
            return;
        }
        self.ro.insert(path.to_path_buf());
        if let Some(parent) = path.parent() {
            self.pin(parent);
        }
    }

    fn watch(&mut self, path: &Path) {
        if self.writable(path) && !self.out.watched.iter().any(|w| w == path) {
            self.out.watched.push(path.to_path_buf());
        }
    }

    fn unprotect(&mut self, path: &Path, why: &str) {
        if self.writable(path) {
            self.out
                .unprotected
                .push(format!("{}: {why}", path.display()));
        }
    }

    /// Make `dir` and every directory between it and its writable bind
    /// mount points of their own.
    fn pin(&mut self, dir: &Path) {
        let Some(root) = self
            .owner(dir)
            .filter(|b| b.writable)
            .map(|b| b.path.clone())
        else {
            return;
        };
        let mut cur = dir;
        while cur != root && cur.starts_with(&root) {
            self.pins.insert(cur.to_path_buf());
            match cur.parent() {
                Some(p) => cur = p,
                None => break,
            }
        }
    }
}

/// `gitdir: PATH` of a `.git` file, or the whole of `commondir` (with
/// `prefix` empty), resolved against `base`.
fn read_pointer(file: &Path, prefix: &str, base: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().next()?.strip_prefix(prefix)?.trim();
    if line.is_empty() {
        return None;
    }
    std::fs::canonicalize(base.join(line)).ok()
}

/// What a git config file points at: `core.hooksPath` (resolved as git
/// does: `~/` is the home, a relative path is relative to the work tree)
/// and the files it includes (`include.path`, and `includeIf.*.path`
/// whatever the condition; relative to the including file). Only the plain
/// forms git writes are read.
#[derive(Debug, Default, PartialEq, Eq)]
struct ConfigRefs {
    hooks: Option<PathBuf>,
    includes: Vec<PathBuf>,
}

fn config_refs(config: &Path, work_tree: &Path, home: &Path) -> ConfigRefs {
    let mut out = ConfigRefs::default();
    let Ok(text) = std::fs::read_to_string(config) else {
        return out;
    };
    let expand = |value: &str, base: &Path| {
        let path = match value.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => base.join(value),
        };
        cordon_policy::normalize(&path)
    };
    let config_dir = config.parent().unwrap_or(Path::new("/"));
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let name = line.trim_start_matches('[').trim_end_matches(']').trim();
            section = name
                .split(|c: char| c.is_whitespace() || c == '"')
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let value = value.trim().trim_matches('"');
        match (section.as_str(), key.as_str()) {
            ("core", "hookspath") => out.hooks = Some(expand(value, work_tree)),
            ("include" | "includeif", "path") => out.includes.push(expand(value, config_dir)),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn rw(path: &Path) -> Bind {
        Bind {
            path: path.to_path_buf(),
            writable: true,
        }
    }

    #[test]
    fn a_nested_repository_is_pinned_up_to_its_writable_bind() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let git = root.join("a/b/.git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\n\thooksPath = .githooks\n").unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let t = find(&[rw(&root)], Path::new("/home/x"));
        assert_eq!(t.repositories, vec![git.clone()]);
        assert_eq!(
            t.pinned,
            vec![root.join("a"), root.join("a/b"), git.clone()]
        );
        assert!(t.read_only.contains(&git.join("config")));
        assert!(t.read_only.contains(&git.join("hooks")));
        for absent in ["commondir", "info", "modules"] {
            assert!(t.watched.contains(&git.join(absent)), "{absent}");
        }
        assert!(t.watched.contains(&root.join("a/b/.githooks")));
        assert!(t.watched.contains(&root.join(".vscode")));
    }

    #[test]
    fn config_refs_follow_hooks_path_and_every_include() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("config");
        std::fs::write(
            &cfg,
            "[Core]\n\thooksPath = ~/hooks\n[include]\n\tpath = ../shared.cfg\n\
             [includeIf \"gitdir:/x/\"]\n\tpath = \"/abs/other.cfg\"\n[user]\n\tpath = no\n",
        )
        .unwrap();
        let refs = config_refs(&cfg, Path::new("/wt"), Path::new("/home/u"));
        assert_eq!(refs.hooks, Some(PathBuf::from("/home/u/hooks")));
        assert_eq!(
            refs.includes,
            vec![
                cordon_policy::normalize(&d.path().join("../shared.cfg")),
                PathBuf::from("/abs/other.cfg")
            ]
        );
    }

    #[test]
    fn read_only_and_declared_paths_are_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir_all(root.join("ro/.git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("rw/.git/hooks")).unwrap();
        let binds = [
            rw(&root),
            Bind {
                path: root.join("ro"),
                writable: false,
            },
            rw(&root.join("rw/.git/hooks")),
        ];
        let t = find(&binds, Path::new("/home/x"));
        assert!(t.read_only.iter().all(|p| !p.starts_with(root.join("ro"))));
        assert!(!t.read_only.contains(&root.join("rw/.git/hooks")));
        assert!(t.pinned.contains(&root.join("rw/.git")));
    }
}
