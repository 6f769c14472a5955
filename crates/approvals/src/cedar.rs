//! A subject as Cedar: the action scope and the condition on its context,
//! in the names of cordon's schema (crates/authz, `cordon.cedarschema`).

use crate::subject::Subject;

/// A Cedar string literal (`*` needs no escape outside a `like` pattern).
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A quoted Cedar `like` pattern: `prefix` literally (its `*` escaped),
/// then any text.
fn starts_with(prefix: &str) -> String {
    let quoted = string(prefix);
    let inner = &quoted[1..quoted.len() - 1];
    format!("\"{}*\"", inner.replace('*', "\\*"))
}

/// `context.F == "X" || context.F like "X<sep>*"`: X itself or below it.
fn itself_or_below(field: &str, x: &str, sep: &str) -> String {
    format!(
        "context.{field} == {} || context.{field} like {}",
        string(x),
        starts_with(&format!("{x}{sep}"))
    )
}

/// The Cedar action scope of a permit for a subject (`action ==
/// Action::"exec"`) and the condition that narrows it to the subject (the
/// context attributes of cordon's schema, `cordon policy schema`).
pub fn condition(s: &Subject) -> (String, Option<String>) {
    let one = |a: &str| format!("action == Action::{}", string(a));
    match s {
        Subject::Exec { argv_prefix } => {
            let command = argv_prefix.join(" ");
            let cond = if argv_prefix.len() >= 2 {
                itself_or_below("command", &command, " ")
            } else {
                format!("context.command == {}", string(&command))
            };
            (one("exec"), Some(cond))
        }
        Subject::Egress { host, port } => (
            one("egress"),
            Some(format!(
                "context.host == {} && context.port == {port}",
                string(host)
            )),
        ),
        Subject::Path { path, writable } => (
            if *writable {
                "action in [Action::\"file_read\", Action::\"file_write\"]".to_owned()
            } else {
                one("file_read")
            },
            Some(if path.matches('/').count() >= 2 {
                itself_or_below("path", path, "/")
            } else {
                format!("context.path == {}", string(path))
            }),
        ),
        Subject::Bind {
            host_path,
            writable,
        } => (
            one("bind"),
            Some(format!(
                "({}){}",
                itself_or_below("path", host_path, "/"),
                if *writable {
                    ""
                } else {
                    " && !context.writable"
                }
            )),
        ),
        Subject::Limits { memory, pids } => {
            let mut parts = Vec::new();
            parts.push(match memory {
                Some(m) => format!("(!(context has memory) || context.memory <= {m})"),
                None => "!(context has memory)".to_owned(),
            });
            parts.push(match pids {
                Some(p) => format!("(!(context has pids) || context.pids <= {p})"),
                None => "!(context has pids)".to_owned(),
            });
            (one("raise_limits"), Some(parts.join(" && ")))
        }
        Subject::Secret { name } => (
            one("use_secret"),
            Some(format!("context.name == {}", string(name))),
        ),
        Subject::Tool { server, tool, .. } => (
            one("tool_call"),
            Some(format!(
                "context.server == {} && context.tool == {}",
                string(server),
                string(tool)
            )),
        ),
        Subject::Create { profile } => (
            one("create_sandbox"),
            Some(format!("context.profile == {}", string(profile))),
        ),
        Subject::Promote { run } => (
            one("promote"),
            Some(format!("context.run == {}", string(run))),
        ),
    }
}
