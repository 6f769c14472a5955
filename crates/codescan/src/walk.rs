//! Finding the files to scan under a directory.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::lang::Language;

/// Directories never entered when walking a tree (version control and
/// dependency caches; name them as paths to scan them).
const SKIP_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "__pycache__",
    ".venv",
    ".tox",
];

/// A file to scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// The path.
    pub path: PathBuf,
    /// Its language.
    pub language: Language,
}

/// The files to scan for `path`: the file itself (its language from
/// `lang`, its name or its `#!` line, else an error), or every file under a
/// directory whose language can be told (others are skipped). Symbolic links
/// are not followed below the top.
pub fn files_under(path: &Path, lang: Option<Language>) -> Result<Vec<SourceFile>, Error> {
    let meta = std::fs::metadata(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        let language = match lang {
            Some(l) => l,
            None => Language::detect(path, &head(path)?).ok_or_else(|| Error::UnknownLanguage {
                path: path.to_path_buf(),
            })?,
        };
        return Ok(vec![SourceFile {
            path: path.to_path_buf(),
            language,
        }]);
    }
    let mut out = Vec::new();
    let walker = walkdir::WalkDir::new(path)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            e.depth() == 0
                || !(e.file_type().is_dir()
                    && SKIP_DIRS.contains(&e.file_name().to_str().unwrap_or("")))
        });
    for entry in walker {
        let entry = entry.map_err(|e| Error::Read {
            path: e
                .path()
                .map_or_else(|| path.to_path_buf(), Path::to_path_buf),
            source: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("walk error")),
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let p = entry.path();
        let found = match lang {
            Some(l) => Some(l),
            None => Language::detect(p, &head(p).unwrap_or_default()),
        };
        if let Some(language) = found {
            out.push(SourceFile {
                path: p.to_path_buf(),
                language,
            });
        }
    }
    Ok(out)
}

/// The first bytes of a file, for its `#!` line; nothing for files with an
/// extension the scanner knows anyway.
fn head(path: &Path) -> Result<Vec<u8>, Error> {
    use std::io::Read;
    let mut buf = vec![0; 128];
    let mut f = std::fs::File::open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let n = f.read(&mut buf).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    buf.truncate(n);
    Ok(buf)
}
