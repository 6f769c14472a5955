//! `changes --diff`: a unified diff for text, sizes and hashes otherwise.

use std::io::Read;
use std::os::fd::AsFd;

use rustix::fs::OFlags;

use crate::change::{Change, Kind, Op};
use crate::error::{Result, StageError};
use crate::fsutil;
use crate::store::Stage;

/// Files larger than this are described, not diffed.
const DIFF_MAX: u64 = 1 << 20;

fn read_small(root: std::os::fd::BorrowedFd<'_>, rel: &str) -> Option<Vec<u8>> {
    let fd = fsutil::open_beneath(root, rel, OFlags::RDONLY).ok()?;
    let mut data = Vec::new();
    std::fs::File::from(fd)
        .take(DIFF_MAX + 1)
        .read_to_end(&mut data)
        .ok()?;
    (data.len() as u64 <= DIFF_MAX).then_some(data)
}

fn text(data: &[u8]) -> Option<&str> {
    if data.contains(&0) {
        return None;
    }
    std::str::from_utf8(data).ok()
}

fn short(hash: Option<&str>) -> &str {
    hash.map_or("-", |h| &h[..h.len().min(16)])
}

/// The diff of every entry of `entries`, one after another.
pub fn render_diff(stage: &Stage, entries: &[Change]) -> Result<String> {
    let upper = fsutil::open_root(&stage.upper()).map_err(|e| StageError::io(stage.upper(), e))?;
    let lower =
        fsutil::open_root(&stage.meta.target).map_err(|e| StageError::io(&stage.meta.target, e))?;
    let mut out = String::new();
    for c in entries {
        let (a, b) = (format!("a/{}", c.path), format!("b/{}", c.path));
        let old = match (&c.base, c.op) {
            (Some(base), _) if base.kind == Kind::File => read_small(lower.as_fd(), &c.path),
            _ => Some(Vec::new()),
        };
        let new = match c.op {
            Op::Deleted => Some(Vec::new()),
            _ if c.kind == Kind::File => read_small(upper.as_fd(), &c.path),
            _ => None,
        };
        out.push_str(&format!("diff --cordon {a} {b}\n"));
        if let Some(base) = &c.base {
            if c.op == Op::Mode || base.mode != c.mode.unwrap_or(base.mode) {
                out.push_str(&format!(
                    "old mode {:o}\nnew mode {:o}\n",
                    base.mode,
                    c.mode.unwrap_or(0)
                ));
            }
        } else if let Some(m) = c.mode {
            out.push_str(&format!("new {} mode {m:o}\n", c.kind.as_str()));
        }
        if c.op == Op::Deleted && c.kind != Kind::File {
            out.push_str(&format!("deleted {}\n", c.kind.as_str()));
            continue;
        }
        if c.kind == Kind::Symlink {
            out.push_str(&format!("symlink -> {}\n", c.link.as_deref().unwrap_or("")));
            continue;
        }
        if c.kind == Kind::Dir || c.op == Op::Mode {
            continue;
        }
        match (old.as_deref().and_then(text), new.as_deref().and_then(text)) {
            (Some(o), Some(n)) if c.kind == Kind::File || c.op == Op::Deleted => {
                let d = similar::TextDiff::from_lines(o, n);
                let (from, to) = match c.op {
                    Op::Added => ("/dev/null".to_owned(), b),
                    Op::Deleted => (a, "/dev/null".to_owned()),
                    _ => (a, b),
                };
                out.push_str(
                    &d.unified_diff()
                        .context_radius(3)
                        .header(&from, &to)
                        .to_string(),
                );
            }
            _ => {
                let base = c.base.as_ref();
                out.push_str(&format!(
                    "binary or large: {} bytes sha256 {} -> {} bytes sha256 {}\n",
                    base.map_or(0, |b| b.size),
                    short(base.and_then(|b| b.hash.as_deref())),
                    c.size.unwrap_or(0),
                    short(c.hash.as_deref()),
                ));
            }
        }
    }
    Ok(out)
}
