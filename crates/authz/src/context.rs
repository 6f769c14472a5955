//! A cordon request as Cedar sees it: principal, action, resource, context
//! and the one entity (the token) its attributes come from. The shape is the
//! schema's (cordon.cedarschema); a test validates every action kind against it.

use crate::types::{Action, Request};
use cedar_policy::{
    Context, Entities, Entity, EntityId, EntityTypeName, EntityUid, RestrictedExpression,
};
use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::time::UNIX_EPOCH;

/// Entity type names, parsed once.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    token: EntityTypeName,
    action: EntityTypeName,
    resources: HashMap<&'static str, EntityTypeName>,
}

/// The resource entity type of each action kind.
const RESOURCE_TYPES: [(&str, &str); 10] = [
    ("create_sandbox", "Profile"),
    ("exec", "Program"),
    ("egress", "Host"),
    ("file_read", "File"),
    ("file_write", "File"),
    ("bind", "HostPath"),
    ("raise_limits", "Limits"),
    ("use_secret", "Secret"),
    ("tool_call", "Tool"),
    ("promote", "Run"),
];

impl Names {
    pub fn new() -> Result<Names, String> {
        let parse = |s: &str| EntityTypeName::from_str(s).map_err(|e| format!("{s}: {e}"));
        let mut resources = HashMap::new();
        for (kind, ty) in RESOURCE_TYPES {
            resources.insert(kind, parse(ty)?);
        }
        Ok(Names {
            token: parse("Token")?,
            action: parse("Action")?,
            resources,
        })
    }
}

/// The parts of a Cedar request.
pub(crate) struct CedarRequest {
    pub principal: EntityUid,
    pub action: EntityUid,
    pub resource: EntityUid,
    pub context: Context,
    pub entities: Entities,
}

fn s(v: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(v.to_string())
}

fn long(v: u64) -> RestrictedExpression {
    RestrictedExpression::new_long(i64::try_from(v).unwrap_or(i64::MAX))
}

fn set<'a>(items: impl IntoIterator<Item = &'a String>) -> RestrictedExpression {
    RestrictedExpression::new_set(items.into_iter().map(|v| s(v)))
}

/// The resource id and the action's own context attributes.
fn subject(action: &Action) -> (String, Vec<(&'static str, RestrictedExpression)>) {
    match action {
        Action::CreateSandbox { profile } => (profile.clone(), vec![("profile", s(profile))]),
        Action::Exec { argv } => {
            let program = argv.first().cloned().unwrap_or_default();
            let attrs = vec![
                ("program", s(&program)),
                ("argv", set(argv)),
                ("command", s(&argv.join(" "))),
                ("argc", long(argv.len() as u64)),
            ];
            (program, attrs)
        }
        Action::Egress { host, port } => (
            host.clone(),
            vec![("host", s(host)), ("port", long(u64::from(*port)))],
        ),
        Action::FileRead { path } | Action::FileWrite { path } => {
            (path.clone(), vec![("path", s(path))])
        }
        Action::Bind {
            host_path,
            writable,
        } => (
            host_path.clone(),
            vec![
                ("path", s(host_path)),
                ("writable", RestrictedExpression::new_bool(*writable)),
            ],
        ),
        Action::RaiseLimits { memory, pids } => {
            let mut attrs = Vec::new();
            if let Some(m) = memory {
                attrs.push(("memory", long(*m)));
            }
            if let Some(p) = pids {
                attrs.push(("pids", long(*p)));
            }
            ("limits".to_string(), attrs)
        }
        Action::UseSecret { name } => (name.clone(), vec![("name", s(name))]),
        Action::ToolCall {
            server,
            tool,
            args_digest,
        } => (
            format!("{server}/{tool}"),
            vec![
                ("server", s(server)),
                ("tool", s(tool)),
                ("args_digest", s(args_digest)),
            ],
        ),
        Action::Promote { run, paths } => {
            (run.clone(), vec![("run", s(run)), ("paths", set(paths))])
        }
    }
}

/// Builds the Cedar request for a cordon request.
pub(crate) fn build(names: &Names, req: &Request) -> Result<CedarRequest, String> {
    let kind = req.action.kind();
    let (mut resource_id, attrs) = subject(&req.action);
    if let (Action::RaiseLimits { .. }, Some(session)) = (&req.action, &req.session) {
        resource_id = session.clone();
    }
    let resource_type = names
        .resources
        .get(kind)
        .ok_or_else(|| format!("no resource type for action {kind}"))?;
    let principal =
        EntityUid::from_type_name_and_id(names.token.clone(), EntityId::new(&req.principal.name));
    let action = EntityUid::from_type_name_and_id(names.action.clone(), EntityId::new(kind));
    let resource =
        EntityUid::from_type_name_and_id(resource_type.clone(), EntityId::new(&resource_id));

    let secs = req
        .time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let mut pairs: Vec<(String, RestrictedExpression)> = vec![
        ("findings".into(), set(&req.findings)),
        ("hour".into(), long(secs % 86_400 / 3600)),
        // 1970-01-01 was a Thursday (4).
        ("weekday".into(), long((days + 4) % 7)),
        ("time".into(), long(secs)),
    ];
    if let Some(session) = &req.session {
        pairs.push(("session".into(), s(session)));
    }
    pairs.extend(attrs.into_iter().map(|(k, v)| (k.to_string(), v)));
    let context = Context::from_pairs(pairs).map_err(|e| e.to_string())?;

    let mut token_attrs = HashMap::new();
    if let Some(preset) = &req.principal.preset {
        token_attrs.insert("preset".to_string(), s(preset));
    }
    let token =
        Entity::new(principal.clone(), token_attrs, HashSet::new()).map_err(|e| e.to_string())?;
    let entities = Entities::from_entities([token], None).map_err(|e| e.to_string())?;
    Ok(CedarRequest {
        principal,
        action,
        resource,
        context,
        entities,
    })
}
