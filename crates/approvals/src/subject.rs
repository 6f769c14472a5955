//! What an approval is about, and what a grant covers.
//!
//! An action becomes a [`Subject`] twice: exactly (what a `once` grant is
//! bound to) and narrowed (what a longer grant covers). Narrowing is
//! automatic: an egress grant names one host and port, never a domain; an
//! exec grant an argv prefix (the program and its arguments up to the first
//! operand), never the program alone; a file grant a subtree at least two
//! levels deep, never a root.

use cordon_authz::Action;
use serde::{Deserialize, Serialize};

/// The thing an approval asks about (JSON: `{"kind": "exec", "argv_prefix": [..]}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Subject {
    Exec {
        argv_prefix: Vec<String>,
    },
    Egress {
        host: String,
        port: u16,
    },
    Path {
        path: String,
        writable: bool,
    },
    Bind {
        host_path: String,
        writable: bool,
    },
    Limits {
        memory: Option<u64>,
        pids: Option<u64>,
    },
    Secret {
        name: String,
    },
    Tool {
        server: String,
        tool: String,
        /// `*` in a narrowed grant: any arguments of that tool.
        args_digest: String,
    },
    Create {
        profile: String,
    },
    Promote {
        run: String,
    },
}

/// Any arguments (a narrowed tool grant).
const ANY_ARGS: &str = "*";

impl Subject {
    /// The subject exactly as the action asks for it.
    pub fn exact(action: &Action) -> Subject {
        match action {
            Action::CreateSandbox { profile } => Subject::Create {
                profile: profile.clone(),
            },
            Action::Exec { argv } => Subject::Exec {
                argv_prefix: argv.clone(),
            },
            Action::Egress { host, port } => Subject::Egress {
                host: host.to_ascii_lowercase(),
                port: *port,
            },
            Action::FileRead { path } => Subject::Path {
                path: clean_path(path),
                writable: false,
            },
            Action::FileWrite { path } => Subject::Path {
                path: clean_path(path),
                writable: true,
            },
            Action::Bind {
                host_path,
                writable,
            } => Subject::Bind {
                host_path: clean_path(host_path),
                writable: *writable,
            },
            Action::RaiseLimits { memory, pids } => Subject::Limits {
                memory: *memory,
                pids: *pids,
            },
            Action::UseSecret { name } => Subject::Secret { name: name.clone() },
            Action::ToolCall {
                server,
                tool,
                args_digest,
            } => Subject::Tool {
                server: server.clone(),
                tool: tool.clone(),
                args_digest: args_digest.clone(),
            },
            Action::Promote { run, .. } => Subject::Promote { run: run.clone() },
        }
    }

    /// The subject a grant longer than `once` covers: narrowed.
    pub fn narrowed(action: &Action) -> Subject {
        match Subject::exact(action) {
            Subject::Exec { argv_prefix } => Subject::Exec {
                argv_prefix: argv_prefix_of(&argv_prefix),
            },
            Subject::Path { path, writable } => Subject::Path {
                path: subtree_of(&path),
                writable,
            },
            Subject::Tool { server, tool, .. } => Subject::Tool {
                server,
                tool,
                args_digest: ANY_ARGS.into(),
            },
            other => other,
        }
    }

    /// Does a `once` grant of this subject cover `action`? Only the very
    /// same action.
    pub fn is_exactly(&self, action: &Action) -> bool {
        *self == Subject::exact(action)
    }

    /// Does a narrowed grant of this subject cover `action`?
    pub fn covers(&self, action: &Action) -> bool {
        match (self, Subject::exact(action)) {
            (Subject::Exec { argv_prefix: p }, Subject::Exec { argv_prefix: argv }) => {
                // A one-word prefix covers only that exact command: a grant
                // is never the program with any arguments.
                argv.starts_with(p) && (p.len() >= 2 || argv.len() == p.len())
            }
            (
                Subject::Path { path, writable },
                Subject::Path {
                    path: want,
                    writable: w,
                },
            ) => within(&want, path) && (*writable || !w),
            (
                Subject::Bind {
                    host_path,
                    writable,
                },
                Subject::Bind {
                    host_path: want,
                    writable: w,
                },
            ) => within(&want, host_path) && (*writable || !w),
            (Subject::Limits { memory, pids }, Subject::Limits { memory: m, pids: p }) => {
                at_most(m, *memory) && at_most(p, *pids)
            }
            (
                Subject::Tool {
                    server,
                    tool,
                    args_digest,
                },
                Subject::Tool {
                    server: s,
                    tool: t,
                    args_digest: d,
                },
            ) => *server == s && *tool == t && (args_digest == ANY_ARGS || *args_digest == d),
            (mine, theirs) => *mine == theirs,
        }
    }

    /// The kind word (`exec`, `egress`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Subject::Exec { .. } => "exec",
            Subject::Egress { .. } => "egress",
            Subject::Path { .. } => "path",
            Subject::Bind { .. } => "bind",
            Subject::Limits { .. } => "limits",
            Subject::Secret { .. } => "secret",
            Subject::Tool { .. } => "tool",
            Subject::Create { .. } => "create",
            Subject::Promote { .. } => "promote",
        }
    }

    /// For people: `exec of git push`, `egress to pypi.org:443`, ...
    pub fn describe(&self) -> String {
        match self {
            Subject::Exec { argv_prefix } => format!("exec of `{}`", argv_prefix.join(" ")),
            Subject::Egress { host, port } => format!("egress to {host}:{port}"),
            Subject::Path { path, writable } => {
                format!("{} {path}", if *writable { "writing" } else { "reading" })
            }
            Subject::Bind {
                host_path,
                writable,
            } => format!(
                "binding host path {host_path} {}",
                if *writable { "writable" } else { "read-only" }
            ),
            Subject::Limits { memory, pids } => format!(
                "raising limits to memory {} pids {}",
                memory.map_or("-".into(), |m| m.to_string()),
                pids.map_or("-".into(), |p| p.to_string())
            ),
            Subject::Secret { name } => format!("use of secret {name}"),
            Subject::Tool { server, tool, .. } => format!("tool call {server}/{tool}"),
            Subject::Create { profile } => format!("a sandbox with profile {profile}"),
            Subject::Promote { run } => format!("promotion of run {run}'s outputs"),
        }
    }
}

/// The program and its arguments up to and including the first operand
/// (`git push origin main` -> `git push`; `python3 -m pip install x` ->
/// `python3 -m pip`; `rm -rf /` -> `rm -rf /`).
fn argv_prefix_of(argv: &[String]) -> Vec<String> {
    let mut out: Vec<String> = argv.iter().take(1).cloned().collect();
    for a in argv.iter().skip(1) {
        out.push(a.clone());
        if !a.starts_with('-') {
            break;
        }
    }
    out
}

/// A path without `.` components, doubled or trailing slashes.
fn clean_path(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

/// The directory of `path` when it is at least two levels deep
/// (`/workspace/src/a.py` -> `/workspace/src`); otherwise the path itself:
/// a grant is never `/` or a top-level directory.
fn subtree_of(path: &str) -> String {
    match path.rsplit_once('/') {
        Some((dir, _)) if dir.matches('/').count() >= 2 => dir.to_owned(),
        _ => path.to_owned(),
    }
}

/// Is `path` `root` or below it? A root less than two levels deep
/// (`/`, `/etc`) covers only itself.
fn within(path: &str, root: &str) -> bool {
    path == root
        || (root.matches('/').count() >= 2
            && path.starts_with(root)
            && path.as_bytes().get(root.len()) == Some(&b'/'))
}

fn at_most(want: Option<u64>, granted: Option<u64>) -> bool {
    match (want, granted) {
        (None, _) => true,
        (Some(w), Some(g)) => w <= g,
        (Some(_), None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(argv: &[&str]) -> Action {
        Action::Exec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn exec_grants_are_an_argv_prefix_never_the_program() {
        let g = Subject::narrowed(&exec(&["git", "push", "origin", "main"]));
        assert_eq!(
            g,
            Subject::Exec {
                argv_prefix: vec!["git".into(), "push".into()]
            }
        );
        assert!(g.covers(&exec(&["git", "push", "origin", "dev"])));
        assert!(!g.covers(&exec(&["git", "pull"])));
        assert!(!g.covers(&exec(&["git"])));
        let lone = Subject::narrowed(&exec(&["ls"]));
        assert!(lone.covers(&exec(&["ls"])));
        assert!(!lone.covers(&exec(&["ls", "/etc"])), "never the program");
        let flags = Subject::narrowed(&exec(&["rm", "-rf", "/tmp/x", "/"]));
        assert!(!flags.covers(&exec(&["rm", "-rf", "/"])));
    }

    #[test]
    fn once_is_the_exact_subject() {
        let s = Subject::exact(&exec(&["git", "push", "origin", "main"]));
        assert!(s.is_exactly(&exec(&["git", "push", "origin", "main"])));
        assert!(!s.is_exactly(&exec(&["git", "push", "origin", "dev"])));
    }

    #[test]
    fn paths_are_a_subtree_never_a_root() {
        let w = Action::FileWrite {
            path: "/workspace/src/a.py".into(),
        };
        let g = Subject::narrowed(&w);
        assert!(g.covers(&Action::FileWrite {
            path: "/workspace/src/b/c.py".into()
        }));
        assert!(g.covers(&Action::FileRead {
            path: "/workspace/src/x".into()
        }));
        assert!(!g.covers(&Action::FileWrite {
            path: "/workspace/srcx".into()
        }));
        assert!(!g.covers(&Action::FileWrite {
            path: "/workspace/other".into()
        }));
        let top = Subject::narrowed(&Action::FileRead {
            path: "/etc".into(),
        });
        assert!(!top.covers(&Action::FileRead {
            path: "/etc/shadow".into()
        }));
        let read = Subject::narrowed(&Action::FileRead {
            path: "/workspace/src/a".into(),
        });
        assert!(!read.covers(&Action::FileWrite {
            path: "/workspace/src/a".into()
        }));
    }

    #[test]
    fn egress_is_host_and_port() {
        let g = Subject::narrowed(&Action::Egress {
            host: "API.example.com".into(),
            port: 443,
        });
        assert!(g.covers(&Action::Egress {
            host: "api.example.com".into(),
            port: 443
        }));
        assert!(!g.covers(&Action::Egress {
            host: "api.example.com".into(),
            port: 80
        }));
        assert!(!g.covers(&Action::Egress {
            host: "x.api.example.com".into(),
            port: 443
        }));
    }

    #[test]
    fn limits_and_tools() {
        let g = Subject::narrowed(&Action::RaiseLimits {
            memory: Some(1 << 30),
            pids: None,
        });
        assert!(g.covers(&Action::RaiseLimits {
            memory: Some(1 << 29),
            pids: None
        }));
        assert!(!g.covers(&Action::RaiseLimits {
            memory: Some(2 << 30),
            pids: None
        }));
        assert!(!g.covers(&Action::RaiseLimits {
            memory: None,
            pids: Some(5)
        }));
        let t = |d: &str| Action::ToolCall {
            server: "gh".into(),
            tool: "create_issue".into(),
            args_digest: d.into(),
        };
        assert!(Subject::narrowed(&t("a")).covers(&t("b")));
        assert!(!Subject::exact(&t("a")).is_exactly(&t("b")));
    }
}
