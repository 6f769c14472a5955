//! Files a command writes only when it ends (`run --report`, `learn -o`):
//! checked before the sandbox is built, so a path that cannot be written
//! fails in a second instead of after a long run whose result would then
//! be lost.

use std::path::Path;

use anyhow::bail;
use rustix::fs::Access;

/// Whether `path` can be written as `flag` will write it: an existing
/// regular file this user may write, or a new name in a directory this
/// user may write. Nothing is created or changed.
pub fn check_writable(path: &Path, flag: &str) -> anyhow::Result<()> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            bail!("{flag} {shown}: is a directory; name a file")
        }
        Ok(_) => rustix::fs::access(path, Access::WRITE_OK).map_err(|e| {
            anyhow::anyhow!(
                "{flag} {shown}: cannot be written ({}); name a file you may write",
                std::io::Error::from(e)
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK).map_err(|e| {
                anyhow::anyhow!(
                    "{flag} {shown}: cannot be created in {} ({}); name a file in a directory you may write",
                    dir.display(),
                    std::io::Error::from(e)
                )
            })
        }
        Err(e) => bail!("{flag} {shown}: {e}; name a file you may write"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_new_file_in_a_writable_directory_passes_and_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        check_writable(&p, "--report").unwrap();
        assert!(!p.exists());
    }

    #[test]
    fn a_directory_or_a_missing_parent_is_refused_with_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_writable(dir.path(), "--report")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--report") && err.contains("is a directory"),
            "{err}"
        );
        let err = check_writable(&dir.path().join("no/such/r.json"), "-o")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be created"), "{err}");
    }
}
