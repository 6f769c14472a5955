//! Persistent grants: a Cedar rule appended to the policy file, where a
//! person can review it, after a second confirmation. The file is only
//! replaced when the policy with the rule still parses.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::model::Approval;
use crate::store::ApprovalError;

/// The `@id` of the rule a persistent answer to approval `id` appends;
/// its grant holds while a rule with this id is in the policy file.
pub fn rule_id(approval: &str) -> String {
    format!("grant-{approval}")
}

/// The rule a persistent answer to `a` appends: a `permit` of the narrowed
/// subject for the principal who asked, named after the approval. While it
/// is in the file, the grant it records answers what an `@ask` rule would
/// ask; a reviewer who deletes it ends the grant.
pub fn rule_text(a: &Approval, by: &str) -> String {
    let (action, condition) = crate::cedar::condition(&a.grant_subject);
    let mut text = format!(
        "// {} for {}, approved persistently by {by} ({}).\n@id(\"{}\")\npermit (\n  principal == Token::{},\n  {action},\n  resource\n)",
        a.grant_subject.describe(),
        a.principal,
        a.id,
        rule_id(&a.id),
        crate::cedar::string(&a.principal),
    );
    if let Some(c) = condition {
        text.push_str(&format!("\nwhen {{ {c} }}"));
    }
    text.push_str(";\n");
    text
}

/// Append `rule` to the policy `file`: the new text must parse, then it
/// replaces the file atomically (a temporary file beside it, renamed).
pub fn append(file: &Path, rule: &str) -> Result<(), ApprovalError> {
    let err = |what: &str, e: &dyn std::fmt::Display| {
        ApprovalError::Policy(format!("{}: {what}: {e}", file.display()))
    };
    let old = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(err("read", &e)),
    };
    let mut text = old;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text.push_str(rule);
    cordon_authz::Authorizer::parse(&text, &file.display().to_string())
        .map_err(|e| err("the policy with the new rule does not parse", &e))?;
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("policy"),
        std::process::id()
    ));
    let mode = std::fs::metadata(file)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
        .unwrap_or(0o600);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err("write", &e)
    })
}
