//! The promotion policy: which changed paths are refused, which need a
//! person's yes, and which are promoted as soon as the run ends.

use globset::{Glob, GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

use crate::change::{Change, Op};

/// What a rule asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Promoted when the run ends, without a `promote` call.
    Auto,
    /// Promoted only after a yes on a terminal, or with `--allow RULE`.
    Ask,
    /// Promoted only with `--allow RULE`.
    Refuse,
}

/// What a rule looks at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "match", content = "value")]
pub enum Matcher {
    /// Paths relative to the staged directory (`*` stays within one name,
    /// `**` spans directories).
    Globs(Vec<String>),
    /// A regular file that is executable now and was not before.
    NewExecutable,
    /// A file larger than this many bytes.
    LargerThan(u64),
    /// A file in which the code scanner given to the promotion
    /// ([`crate::Selection::scanner`]) finds secrets or dangerous code.
    /// Matches nothing here: the promotion reads the content and asks.
    ScannerFindings,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Named in messages and in `--allow`.
    pub id: String,
    pub action: Action,
    #[serde(flatten)]
    pub matcher: Matcher,
}

/// The rules, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub rules: Vec<Rule>,
}

/// The policy's verdict on one change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The strongest action of the rules that matched (none: no rule did).
    pub action: Option<Action>,
    /// The rules that matched with that action.
    pub rules: Vec<String>,
}

fn globs(id: &str, action: Action, patterns: &[&str]) -> Rule {
    Rule {
        id: id.into(),
        action,
        matcher: Matcher::Globs(patterns.iter().map(|s| (*s).to_owned()).collect()),
    }
}

/// Files larger than this need a yes by default.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 10 << 20;

impl Default for Policy {
    /// Refuse git hooks, git config and the git files that redirect them;
    /// ask about new repositories, editor and hook-manager files, CI files,
    /// shell startup files, new executables and files over 10 MiB.
    fn default() -> Policy {
        Policy {
            rules: vec![
                globs(
                    "git-hooks",
                    Action::Refuse,
                    &[
                        ".git/hooks",
                        ".git/hooks/**",
                        "**/.git/hooks",
                        "**/.git/hooks/**",
                    ],
                ),
                globs(
                    "git-config",
                    Action::Refuse,
                    &[".git/config", "**/.git/config"],
                ),
                // What else git reads to decide what to run: `commondir`
                // moves the whole repository (config and hooks) elsewhere;
                // submodules' and linked worktrees' git directories.
                globs(
                    "git-internals",
                    Action::Refuse,
                    &[
                        "**/.git/commondir",
                        "**/.git/**/commondir",
                        "**/.git/config.worktree",
                        "**/.git/**/config.worktree",
                        "**/.git/info/**",
                        "**/.git/modules/**/config",
                        "**/.git/modules/**/hooks/**",
                        "**/.git/modules/**/info/**",
                        "**/.git/worktrees/*/gitdir",
                    ],
                ),
                // A `.git` added, removed or replaced: a new repository, or
                // a pointer (`gitdir: PATH`) to another git directory.
                globs("git-repository", Action::Ask, &["**/.git"]),
                // What editors, git hook managers and a home's tools run on
                // their own (see docs/threat-model.md).
                globs(
                    "host-tools",
                    Action::Ask,
                    &[
                        "**/.vscode/**",
                        "**/.idea/**",
                        "**/.pre-commit-config.yaml",
                        "**/.husky/**",
                        "**/lefthook.yml",
                        "**/.lefthook.yml",
                        "**/lefthook.yaml",
                        "**/.lefthook.yaml",
                        "**/.overcommit.yml",
                        "**/.gitconfig",
                        "**/.config/git/**",
                        "**/.ssh/**",
                        "**/.local/bin/**",
                        "**/.config/autostart/**",
                        "**/.config/systemd/**",
                        "**/.vimrc",
                        "**/.config/nvim/**",
                        "**/.emacs",
                        "**/.emacs.d/**",
                    ],
                ),
                globs(
                    "ci",
                    Action::Ask,
                    &[
                        ".github/workflows",
                        ".github/workflows/**",
                        ".gitlab-ci.yml",
                        ".gitlab-ci/**",
                        ".circleci/**",
                        ".travis.yml",
                        "Jenkinsfile",
                        ".buildkite/**",
                        "azure-pipelines.yml",
                    ],
                ),
                globs(
                    "shell-rc",
                    Action::Ask,
                    &[
                        "**/.bashrc",
                        "**/.bash_profile",
                        "**/.bash_login",
                        "**/.bash_logout",
                        "**/.profile",
                        "**/.zshrc",
                        "**/.zshenv",
                        "**/.zprofile",
                        "**/.zlogin",
                        "**/.cshrc",
                        "**/.tcshrc",
                        "**/.kshrc",
                        "**/.config/fish/config.fish",
                        "**/.envrc",
                    ],
                ),
                Rule {
                    id: "new-executable".into(),
                    action: Action::Ask,
                    matcher: Matcher::NewExecutable,
                },
                Rule {
                    id: "large-file".into(),
                    action: Action::Ask,
                    matcher: Matcher::LargerThan(DEFAULT_MAX_FILE_SIZE),
                },
                Rule {
                    id: "scanner".into(),
                    action: Action::Ask,
                    matcher: Matcher::ScannerFindings,
                },
            ],
        }
    }
}

fn compile(pattern: &str) -> Option<GlobMatcher> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    // Each glob is compiled once per process: a change set of thousands of
    // entries is checked against every rule.
    static CACHE: OnceLock<Mutex<HashMap<String, Option<GlobMatcher>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = match cache.lock() {
        Ok(c) => c,
        Err(poisoned) => poisoned.into_inner(),
    };
    cache
        .entry(pattern.to_owned())
        .or_insert_with(|| {
            GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .ok()
                .map(|g: Glob| g.compile_matcher())
        })
        .clone()
}

/// One rule's globs as a set, built once per process: a change set of
/// thousands of entries is checked against every rule.
fn glob_set(patterns: &[String]) -> std::sync::Arc<globset::GlobSet> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Cache = Mutex<HashMap<Vec<String>, Arc<globset::GlobSet>>>;
    static SETS: OnceLock<Cache> = OnceLock::new();
    let sets = SETS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut sets = match sets.lock() {
        Ok(s) => s,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(set) = sets.get(patterns) {
        return Arc::clone(set);
    }
    let mut builder = globset::GlobSetBuilder::new();
    for p in patterns {
        // An invalid glob matches nothing (profiles are checked with
        // `valid_glob` before a run).
        if let Ok(g) = GlobBuilder::new(p).literal_separator(true).build() {
            builder.add(g);
        }
    }
    let set = Arc::new(
        builder
            .build()
            .unwrap_or_else(|_| globset::GlobSet::empty()),
    );
    sets.insert(patterns.to_vec(), Arc::clone(&set));
    set
}

/// Whether `pattern` is a valid glob (for checking profiles).
pub fn valid_glob(pattern: &str) -> bool {
    compile(pattern).is_some()
}

impl Policy {
    /// The default rules plus the profile's globs.
    pub fn with_globs(
        refuse: &[String],
        ask: &[String],
        auto: &[String],
        max_file_size: Option<u64>,
    ) -> Policy {
        let mut p = Policy::default();
        if let Some(max) = max_file_size {
            for r in &mut p.rules {
                if let Matcher::LargerThan(n) = &mut r.matcher {
                    *n = max;
                }
            }
        }
        for (id, action, list) in [
            ("profile-refuse", Action::Refuse, refuse),
            ("profile-ask", Action::Ask, ask),
            ("profile-auto", Action::Auto, auto),
        ] {
            if !list.is_empty() {
                p.rules.push(Rule {
                    id: id.into(),
                    action,
                    matcher: Matcher::Globs(list.to_vec()),
                });
            }
        }
        p
    }

    /// The verdict on one change.
    pub fn decide(&self, change: &Change) -> Decision {
        let mut matched: Vec<(Action, &str)> = Vec::new();
        for rule in &self.rules {
            let hit = match &rule.matcher {
                Matcher::Globs(list) => glob_set(list).is_match(&change.path),
                Matcher::NewExecutable => change.newly_executable(),
                Matcher::LargerThan(n) => {
                    change.op != Op::Deleted && change.size.is_some_and(|s| s > *n)
                }
                Matcher::ScannerFindings => false,
            };
            if hit {
                matched.push((rule.action, &rule.id));
            }
        }
        let action = matched.iter().map(|(a, _)| *a).max();
        Decision {
            action,
            rules: matched
                .iter()
                .filter(|(a, _)| Some(*a) == action)
                .map(|(_, id)| (*id).to_owned())
                .collect(),
        }
    }

    /// The ids of every rule (for checking `--allow`).
    pub fn rule_ids(&self) -> Vec<&str> {
        self.rules.iter().map(|r| r.id.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::Kind;

    fn change(path: &str, mode: u32, base_mode: Option<u32>) -> Change {
        Change {
            path: path.into(),
            op: if base_mode.is_some() {
                Op::Modified
            } else {
                Op::Added
            },
            kind: Kind::File,
            size: Some(10),
            mode: Some(mode),
            hash: None,
            link: None,
            base: base_mode.map(|m| crate::change::Base {
                kind: Kind::File,
                size: 1,
                mode: m,
                hash: None,
                changed_during_run: false,
            }),
            unsafe_reason: None,
        }
    }

    #[test]
    fn default_rules() {
        let p = Policy::default();
        let d = p.decide(&change(".git/hooks/pre-commit", 0o644, None));
        assert_eq!(d.action, Some(Action::Refuse));
        assert_eq!(d.rules, vec!["git-hooks"]);
        assert_eq!(
            p.decide(&change(".git/config", 0o644, Some(0o644))).action,
            Some(Action::Refuse)
        );
        assert_eq!(
            p.decide(&change(".github/workflows/ci.yml", 0o644, None))
                .action,
            Some(Action::Ask)
        );
        assert_eq!(
            p.decide(&change("home/.bashrc", 0o644, None)).action,
            Some(Action::Ask)
        );
        assert_eq!(
            p.decide(&change(".bashrc", 0o644, None)).action,
            Some(Action::Ask)
        );
        assert_eq!(
            p.decide(&change("run.sh", 0o755, None)).rules,
            vec!["new-executable"]
        );
        assert_eq!(p.decide(&change("run.sh", 0o755, Some(0o755))).action, None);
        assert_eq!(
            p.decide(&change("src/main.rs", 0o644, Some(0o644))).action,
            None
        );
        assert_eq!(
            p.decide(&change(".git/objects/ab/cd", 0o444, None)).action,
            None
        );
    }

    #[test]
    fn what_host_tools_run_on_their_own_is_never_promoted_silently() {
        let p = Policy::default();
        for (path, rule) in [
            (".git/commondir", "git-internals"),
            ("sub/.git/commondir", "git-internals"),
            (".git/info/attributes", "git-internals"),
            (".git/modules/lib/config", "git-internals"),
            (".git/modules/a/modules/b/hooks/pre-commit", "git-internals"),
            (".git/worktrees/wt/commondir", "git-internals"),
            (".git/worktrees/wt/gitdir", "git-internals"),
            (".git/config.worktree", "git-internals"),
            ("sub/.git", "git-repository"),
            (".vscode/tasks.json", "host-tools"),
            (".idea/workspace.xml", "host-tools"),
            (".pre-commit-config.yaml", "host-tools"),
            (".husky/pre-commit", "host-tools"),
            ("home/.gitconfig", "host-tools"),
            (".ssh/authorized_keys", "host-tools"),
            (".local/bin/git", "host-tools"),
        ] {
            let d = p.decide(&change(path, 0o644, None));
            assert_eq!(d.rules, vec![rule], "{path}");
            assert!(d.action >= Some(Action::Ask), "{path}");
        }
        for path in [
            ".git/objects/ab/cd",
            ".git/index",
            ".git/refs/heads/main",
            "src/.gitattributes",
        ] {
            assert_eq!(
                p.decide(&change(path, 0o644, Some(0o644))).action,
                None,
                "{path}"
            );
        }
    }

    #[test]
    fn profile_globs_and_strongest_action() {
        let p = Policy::with_globs(&["secrets/**".into()], &[], &["docs/*.md".into()], Some(5));
        assert_eq!(
            p.decide(&change("secrets/a", 0o644, None)).action,
            Some(Action::Refuse)
        );
        assert_eq!(
            p.decide(&change("docs/a.md", 0o644, None)).action,
            Some(Action::Ask),
            "size 10 > 5 asks, stronger than auto"
        );
        let p = Policy::with_globs(&[], &[], &["docs/*.md".into()], None);
        assert_eq!(
            p.decide(&change("docs/a.md", 0o644, None)).action,
            Some(Action::Auto)
        );
        assert_eq!(
            p.decide(&change("docs/x/a.md", 0o644, None)).action,
            None,
            "* stays in one directory"
        );
    }
}
