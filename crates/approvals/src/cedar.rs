//! A subject as Cedar: the action's name and the condition on its context
//! (the names cordon-authz gives them; see docs/policy.md).

use crate::subject::Subject;

/// A Cedar string literal.
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

/// The Cedar action name of a subject and the condition that narrows a
/// permit to it.
pub fn condition(s: &Subject) -> (&'static str, Option<String>) {
    match s {
        Subject::Exec { argv_prefix } => {
            let mut parts = vec![format!("context.argv.length() >= {}", argv_prefix.len())];
            for (i, a) in argv_prefix.iter().enumerate() {
                parts.push(format!("context.argv.get({i}) == {}", string(a)));
            }
            ("exec", Some(parts.join(" && ")))
        }
        Subject::Egress { host, port } => (
            "egress",
            Some(format!(
                "context.host == {} && context.port == {port}",
                string(host)
            )),
        ),
        Subject::Path { path, writable } => (
            if *writable { "file_write" } else { "file_read" },
            Some(format!(
                "context.path == {p} || context.path like {}",
                string(&format!("{}/*", path.replace('*', "\\*"))),
                p = string(path)
            )),
        ),
        Subject::Bind {
            host_path,
            writable,
        } => (
            "bind",
            Some(format!(
                "context.host_path == {}{}",
                string(host_path),
                if *writable {
                    ""
                } else {
                    " && !context.writable"
                }
            )),
        ),
        Subject::Limits { memory, pids } => {
            let mut parts = Vec::new();
            if let Some(m) = memory {
                parts.push(format!("context.memory <= {m}"));
            }
            if let Some(p) = pids {
                parts.push(format!("context.pids <= {p}"));
            }
            (
                "raise_limits",
                (!parts.is_empty()).then(|| parts.join(" && ")),
            )
        }
        Subject::Secret { name } => (
            "use_secret",
            Some(format!("context.name == {}", string(name))),
        ),
        Subject::Tool { server, tool, .. } => (
            "tool_call",
            Some(format!(
                "context.server == {} && context.tool == {}",
                string(server),
                string(tool)
            )),
        ),
        Subject::Create { profile } => (
            "create_sandbox",
            Some(format!("context.profile == {}", string(profile))),
        ),
        Subject::Promote { run } => ("promote", Some(format!("context.run == {}", string(run)))),
    }
}
