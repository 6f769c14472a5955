//! Where things are in a policy file: lines of policies and of errors.
//!
//! cedar-policy's public `Policy` carries no source location, so the start of
//! each policy comes from cedar-policy-core's parser (the very parser
//! cedar-policy runs, same version, so ids `policy0..N` agree); errors carry
//! byte offsets as miette labels. Both are turned into 1-based lines here.

use crate::error::Diagnostic;
use std::collections::HashMap;

/// Byte offset → 1-based (line, column).
pub(crate) fn line_col(src: &str, offset: usize) -> (u32, u32) {
    let offset = offset.min(src.len());
    let before = src.get(..offset).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (to_u32(line), to_u32(col))
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The 1-based line each policy starts on (its first annotation, or its
/// `permit`/`forbid`), by Cedar policy id.
pub(crate) fn policy_lines(src: &str) -> HashMap<String, u32> {
    let Ok(set) = cedar_policy_core::parser::parse_policyset(src) else {
        return HashMap::new();
    };
    set.policies()
        .filter_map(|p| {
            let loc = p.loc()?;
            Some((p.id().to_string(), line_col(src, loc.span.offset()).0))
        })
        .collect()
}

/// Turns any miette diagnostic from Cedar into ours, placed by its first label.
pub(crate) fn diagnostic(
    src: &str,
    file: &str,
    err: &dyn miette::Diagnostic,
    fallback_help: Option<&str>,
) -> Diagnostic {
    let offset = err
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|l| l.offset());
    let (line, column) = offset.map_or((0, 0), |o| line_col(src, o));
    let help = err
        .help()
        .map(|h| h.to_string())
        .or_else(|| fallback_help.map(str::to_string));
    Diagnostic {
        file: file.to_string(),
        line,
        column,
        message: flatten(err),
        help,
    }
}

/// The error's message with its causes, on one line.
fn flatten(err: &dyn miette::Diagnostic) -> String {
    let mut msg = err.to_string();
    let mut cur = std::error::Error::source(err);
    while let Some(e) = cur {
        let s = e.to_string();
        if !msg.contains(&s) {
            msg.push_str(": ");
            msg.push_str(&s);
        }
        cur = e.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_are_one_based() {
        let src = "ab\ncd\n\nef";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 1), (1, 2));
        assert_eq!(line_col(src, 3), (2, 1));
        assert_eq!(line_col(src, 7), (4, 1));
        assert_eq!(line_col(src, 999), (4, 3));
    }

    #[test]
    fn each_policy_gets_the_line_it_starts_on() {
        let src = "// head\n\n@id(\"a\")\npermit(principal, action, resource);\n\nforbid(principal,\n action, resource);\n";
        let lines = policy_lines(src);
        assert_eq!(lines.get("policy0"), Some(&3));
        assert_eq!(lines.get("policy1"), Some(&6));
    }
}
