//! A path as the API names it, checked before anything is opened.

use super::FilesError;

/// Longest path accepted (PATH_MAX).
const MAX_PATH: usize = 4096;

/// An absolute path inside a sandbox: no NUL byte, no `..`, normal names
/// only (`.` and empty components are dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPath {
    names: Vec<String>,
}

impl SandboxPath {
    /// Check a path the client sent. The route's wildcard comes without
    /// its leading `/`, so a relative form is taken from the root; what
    /// could climb out (`..`) or cut the string short (NUL) is refused.
    pub fn parse(raw: &str) -> Result<SandboxPath, FilesError> {
        if raw.contains('\0') {
            return Err(FilesError::bad_path("the path holds a NUL byte"));
        }
        if raw.len() > MAX_PATH {
            return Err(FilesError::bad_path(format!(
                "the path is {} bytes long (at most {MAX_PATH})",
                raw.len()
            )));
        }
        let mut names = Vec::new();
        for name in raw.split('/') {
            match name {
                "" | "." => {}
                ".." => {
                    return Err(FilesError::bad_path(format!(
                        "{raw:?} has a '..' component; name the file by its absolute path inside the sandbox"
                    )))
                }
                _ => names.push(name.to_owned()),
            }
        }
        Ok(SandboxPath { names })
    }

    pub fn is_root(&self) -> bool {
        self.names.is_empty()
    }

    /// Relative to the sandbox's root (`"."` for the root itself).
    pub(crate) fn relative(&self) -> String {
        if self.names.is_empty() {
            ".".into()
        } else {
            self.names.join("/")
        }
    }

    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The last name, when there is one.
    pub fn file_name(&self) -> Option<&str> {
        self.names.last().map(String::as_str)
    }

    /// The directory holding this path (the root for `/x`).
    pub fn parent(&self) -> Option<SandboxPath> {
        let (_, parent) = self.names.split_last()?;
        Some(SandboxPath {
            names: parent.to_vec(),
        })
    }
}

impl std::fmt::Display for SandboxPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{}", self.names.join("/"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn absolute_relative_and_redundant_forms_name_the_same_file() {
        for raw in [
            "/workspace/a.py",
            "workspace/a.py",
            "//workspace/./a.py/",
            "workspace//a.py",
        ] {
            let p = SandboxPath::parse(raw).unwrap();
            assert_eq!(p.to_string(), "/workspace/a.py", "{raw}");
            assert_eq!(p.relative(), "workspace/a.py");
        }
        assert!(SandboxPath::parse("/").unwrap().is_root());
        assert_eq!(SandboxPath::parse("").unwrap().relative(), ".");
    }

    #[test]
    fn dot_dot_nul_and_overlong_paths_are_refused() {
        for raw in [
            "../etc/passwd",
            "/workspace/../../etc",
            "a/..",
            "..",
            "/a/b/..",
        ] {
            let e = SandboxPath::parse(raw).unwrap_err();
            assert_eq!(e.kind, super::super::FilesErrorKind::BadPath, "{raw}");
            assert!(e.message.contains(".."), "{e}");
        }
        let e = SandboxPath::parse("/workspace/a\0.py").unwrap_err();
        assert!(e.message.contains("NUL"), "{e}");
        assert!(SandboxPath::parse(&"a/".repeat(3000)).is_err());
        // `..` inside a name is just a name.
        assert_eq!(
            SandboxPath::parse("/a..b/..c").unwrap().to_string(),
            "/a..b/..c"
        );
    }
}
