//! Lexical path resolution: `~` expansion, relative to absolute, `.`/`..`
//! removed. Nothing touches the disk; following symlinks safely is the
//! jail's job.

use std::path::{Component, Path, PathBuf};

/// Expands a leading `~` or `~/` to `home`, makes a relative path absolute
/// against `cwd`, and removes `.` and `..` lexically (`..` never climbs above
/// `/`). `~user` is not expanded (validation refuses it in profiles).
pub fn resolve_path(raw: &Path, cwd: &Path, home: &Path) -> PathBuf {
    let joined = match raw.strip_prefix("~") {
        Ok(rest) => home.join(rest),
        _ if raw.is_absolute() => raw.to_path_buf(),
        _ => cwd.join(raw),
    };
    normalize(&joined)
}

/// Removes `.` and `..` lexically; keeps the path absolute if it was.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth > 0 {
                    out.pop();
                    depth -= 1;
                } else if !path.is_absolute() {
                    out.push("..");
                }
            }
            Component::Normal(n) => {
                out.push(n);
                depth += 1;
            }
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// `true` when `raw` starts with `~user` (a form profiles do not accept).
pub(crate) fn is_tilde_user(raw: &Path) -> bool {
    let b = raw.as_os_str().as_encoded_bytes();
    b.first() == Some(&b'~') && b.len() > 1 && b[1] != b'/'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(raw: &str) -> PathBuf {
        resolve_path(
            Path::new(raw),
            Path::new("/work/proj"),
            Path::new("/home/u"),
        )
    }

    #[test]
    fn resolves() {
        assert_eq!(r("./out"), PathBuf::from("/work/proj/out"));
        assert_eq!(r("out/"), PathBuf::from("/work/proj/out"));
        assert_eq!(r("."), PathBuf::from("/work/proj"));
        assert_eq!(r(".."), PathBuf::from("/work"));
        assert_eq!(r("../../../.."), PathBuf::from("/"));
        assert_eq!(r("~"), PathBuf::from("/home/u"));
        assert_eq!(r("~/"), PathBuf::from("/home/u"));
        assert_eq!(r("~/.cache/pip"), PathBuf::from("/home/u/.cache/pip"));
        assert_eq!(r("~/../../etc"), PathBuf::from("/etc"));
        assert_eq!(r("/a/./b/../c"), PathBuf::from("/a/c"));
        assert_eq!(r("/../a"), PathBuf::from("/a"));
        assert_eq!(r("a//b"), PathBuf::from("/work/proj/a/b"));
        // Not a home reference: a directory whose name starts with '~'.
        assert_eq!(r("~user/x"), PathBuf::from("/work/proj/~user/x"));
        assert!(is_tilde_user(Path::new("~user/x")));
        assert!(!is_tilde_user(Path::new("~/x")));
        assert!(!is_tilde_user(Path::new("~")));
    }

    #[test]
    fn normalizes_relative() {
        assert_eq!(normalize(Path::new("a/../..")), PathBuf::from(".."));
        assert_eq!(normalize(Path::new("./")), PathBuf::from("."));
    }
}
