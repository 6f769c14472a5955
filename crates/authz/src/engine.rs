//! The Cedar engine: a validated policy set with what cordon reads from each
//! policy, and the first three steps of the combination order
//! (forbid → ask → permit).

use crate::context::{self, Names};
use crate::error::Diagnostic;
use crate::locate;
use crate::rules::{self, Limits, Rule, RuleKind};
use crate::types::{Decision, DecisionSource, Effect, Request, RuleRef};
use cedar_policy::{
    ActionConstraint, AuthorizationError, Policy, PolicySet, PrincipalConstraint, Schema,
    ValidationMode, Validator,
};
use std::collections::HashMap;
use std::str::FromStr;

/// cordon's Cedar schema (also printed by `cordon policy schema`).
pub const SCHEMA: &str = include_str!("cordon.cedarschema");

/// The schema, parsed.
pub(crate) fn schema() -> Result<Schema, String> {
    Schema::from_cedarschema_str(SCHEMA)
        .map(|(s, _warnings)| s)
        .map_err(|e| format!("cordon's own Cedar schema does not parse: {e}"))
}

/// The schema in Cedar's JSON schema format.
pub fn schema_json() -> Result<serde_json::Value, String> {
    let (fragment, _warnings) = cedar_policy::SchemaFragment::from_cedarschema_str(SCHEMA)
        .map_err(|e| format!("cordon's own Cedar schema does not parse: {e}"))?;
    fragment.to_json_value().map_err(|e| e.to_string())
}

#[derive(Debug)]
pub(crate) struct Engine {
    /// The policies that may apply, by action kind and principal (see `by_action`).
    policies: HashMap<&'static str, ByPrincipal>,
    rules: HashMap<String, Rule>,
    names: Names,
    cedar: cedar_policy::Authorizer,
    pub warnings: Vec<Diagnostic>,
}

impl Engine {
    /// Parses, validates against the schema and reads every rule.
    pub fn parse(src: &str, file: &str) -> Result<Engine, Vec<Diagnostic>> {
        let one = |line: u32, message: String, help: Option<String>| Diagnostic {
            file: file.to_string(),
            line,
            column: if line == 0 { 0 } else { 1 },
            message,
            help,
        };
        let policies = PolicySet::from_str(src).map_err(|errs| {
            errs.iter()
                .map(|e| locate::diagnostic(src, file, e, Some(SYNTAX_HELP)))
                .collect::<Vec<_>>()
        })?;
        let lines = locate::policy_lines(src);
        if let Some(t) = policies.templates().next() {
            let line = lines.get(&t.id().to_string()).copied().unwrap_or(0);
            return Err(vec![one(
                line,
                "templates (?principal, ?resource) are not supported".into(),
                Some("name the principal or resource: principal == Token::\"ci\"".into()),
            )]);
        }
        let schema = schema().map_err(|e| vec![one(0, e, None)])?;
        let result = Validator::new(schema.clone()).validate(&policies, ValidationMode::Strict);
        let mut errors: Vec<Diagnostic> = result
            .validation_errors()
            .map(|e| locate::diagnostic(src, file, e, Some(SCHEMA_HELP)))
            .collect();
        let warnings = result
            .validation_warnings()
            .map(|w| locate::diagnostic(src, file, w, None))
            .collect();

        let mut rules = HashMap::new();
        let mut seen: HashMap<String, u32> = HashMap::new();
        let mut ordered: Vec<_> = policies.policies().collect();
        ordered.sort_by_key(|p| lines.get(&p.id().to_string()).copied().unwrap_or(0));
        for (order, p) in ordered.into_iter().enumerate() {
            let cedar_id = p.id().to_string();
            let line = lines.get(&cedar_id).copied().unwrap_or(0);
            let id = p.annotation("id").map_or(cedar_id.clone(), str::to_string);
            if let Some(first) = seen.insert(id.clone(), line) {
                errors.push(one(
                    line,
                    format!("@id(\"{id}\") is used twice (first on line {first})"),
                    Some("give every rule its own @id".into()),
                ));
            }
            let rule = RuleRef {
                id,
                file: file.to_string(),
                line,
            };
            let forbid = p.effect() == cedar_policy::Effect::Forbid;
            match rules::read_rule(forbid, p.annotations(), rule, order) {
                Ok(r) => {
                    rules.insert(cedar_id, r);
                }
                Err((message, help)) => errors.push(one(line, message, Some(help))),
            }
        }
        if !errors.is_empty() {
            errors.sort_by_key(|d| d.line);
            return Err(errors);
        }
        let names = Names::new().map_err(|e| vec![one(0, e, None)])?;
        let policies = by_action(&policies).map_err(|e| vec![one(0, e, None)])?;
        Ok(Engine {
            policies,
            rules,
            names,
            cedar: cedar_policy::Authorizer::new(),
            warnings,
        })
    }

    /// How many rules the file holds.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Forbid → ask → permit; `None` when no rule matched.
    pub fn decide(&self, req: &Request) -> Option<Decision> {
        let parts = match context::build(&self.names, req) {
            Ok(p) => p,
            Err(e) => return Some(internal_error(&e)),
        };
        let request = match cedar_policy::Request::new(
            parts.principal,
            parts.action,
            parts.resource,
            parts.context,
            None,
        ) {
            Ok(r) => r,
            Err(e) => return Some(internal_error(&e.to_string())),
        };
        let Some(policies) = self.policies.get(req.action.kind()) else {
            return Some(internal_error("no policy set for this action"));
        };
        let policies = policies.for_principal(&req.principal.name);
        let response = self
            .cedar
            .is_authorized(&request, policies, &parts.entities);
        let diags = response.diagnostics();
        // A forbid that fails to evaluate denies: a deny rule never fails open.
        let failed_forbid = diags
            .errors()
            .filter_map(|e| {
                let AuthorizationError::PolicyEvaluationError(e) = e;
                let rule = self.rules.get(&e.policy_id().to_string())?;
                (rule.kind == RuleKind::Forbid).then(|| (rule, e.to_string()))
            })
            .min_by_key(|(r, _)| r.order);
        let matched: Vec<&Rule> = diags
            .reason()
            .filter_map(|id| self.rules.get(&id.to_string()))
            .collect();
        combine(&matched, failed_forbid)
    }
}

/// The policies that may apply to one action kind, by the token their scope
/// names.
#[derive(Debug)]
struct ByPrincipal {
    /// Policies for any principal.
    any: PolicySet,
    /// For each token a scope names: its policies and those for any principal.
    named: HashMap<String, PolicySet>,
}

impl ByPrincipal {
    fn for_principal(&self, name: &str) -> &PolicySet {
        self.named.get(name).unwrap_or(&self.any)
    }
}

/// Cedar evaluates every policy of a set on each request. A policy whose
/// scope names another action or another token can never match: cordon's
/// actions have no groups (`action in [..]` is a list of alternatives) and
/// its tokens no parents (`principal in Token::"x"` is `principal ==
/// Token::"x"`). So each action kind, and within it each token a scope
/// names, gets only the policies that may apply: the same decisions for a
/// fraction of the work.
fn by_action(all: &PolicySet) -> Result<HashMap<&'static str, ByPrincipal>, String> {
    let mut out = HashMap::new();
    for kind in crate::ACTION_KINDS {
        let is_kind = |uid: &cedar_policy::EntityUid| {
            uid.type_name().to_string() == "Action" && uid.id().unescaped() == kind
        };
        let applies = |p: &&Policy| match p.action_constraint() {
            ActionConstraint::Any => true,
            ActionConstraint::Eq(uid) => is_kind(&uid),
            ActionConstraint::In(uids) => uids.iter().any(is_kind),
        };
        let mut any = PolicySet::new();
        let mut only: HashMap<String, Vec<Policy>> = HashMap::new();
        for p in all.policies().filter(applies) {
            match p.principal_constraint() {
                PrincipalConstraint::Any | PrincipalConstraint::Is(_) => {
                    any.add(p.clone()).map_err(|e| e.to_string())?;
                }
                PrincipalConstraint::Eq(uid)
                | PrincipalConstraint::In(uid)
                | PrincipalConstraint::IsIn(_, uid) => {
                    let name = uid.id().unescaped().to_string();
                    only.entry(name).or_default().push(p.clone());
                }
            }
        }
        let mut named = HashMap::new();
        for (name, policies) in only {
            let mut set = any.clone();
            for p in policies {
                set.add(p).map_err(|e| e.to_string())?;
            }
            named.insert(name, set);
        }
        out.insert(kind, ByPrincipal { any, named });
    }
    Ok(out)
}

/// Combines the rules that matched, in cordon's order.
fn combine(matched: &[&Rule], failed_forbid: Option<(&Rule, String)>) -> Option<Decision> {
    let first = |pred: &dyn Fn(&RuleKind) -> bool| {
        matched
            .iter()
            .copied()
            .filter(|r| pred(&r.kind))
            .min_by_key(|r| r.order)
    };
    if let Some(r) = first(&|k| *k == RuleKind::Forbid) {
        return Some(decision(
            r,
            Effect::Deny,
            DecisionSource::Forbid,
            "forbidden by",
        ));
    }
    if let Some((r, err)) = failed_forbid {
        let mut d = decision(r, Effect::Deny, DecisionSource::Forbid, "forbidden by");
        d.reason = format!(
            "forbid rule {} could not be evaluated, so it denies: {err}",
            r.rule.id
        );
        return Some(d);
    }
    if let Some(r) = first(&|k| matches!(k, RuleKind::Ask { .. })) {
        let mut d = decision(r, Effect::Ask, DecisionSource::AskRule, "asked by");
        if let RuleKind::Ask { offers } = &r.kind {
            d.offers = offers.clone();
        }
        return Some(d);
    }
    let permits: Vec<&Rule> = matched
        .iter()
        .copied()
        .filter(|r| matches!(r.kind, RuleKind::Permit { .. }))
        .collect();
    let limited = permits
        .iter()
        .copied()
        .filter(|r| matches!(&r.kind, RuleKind::Permit { limits } if !limits.is_empty()))
        .min_by_key(|r| r.order);
    if let Some(r) = limited {
        // Every matching permit's limits apply; the tightest of each wins.
        let limits = permits
            .iter()
            .fold(Limits::default(), |acc, p| match &p.kind {
                RuleKind::Permit { limits } => acc.tightest(*limits),
                _ => acc,
            });
        let effect = Effect::AllowWithLimits {
            memory: limits.memory,
            pids: limits.pids,
            timeout_ms: limits.timeout_ms,
        };
        return Some(decision(
            r,
            effect,
            DecisionSource::Permit,
            "allowed with limits by",
        ));
    }
    let r = permits.iter().copied().min_by_key(|r| r.order)?;
    Some(decision(
        r,
        Effect::Allow,
        DecisionSource::Permit,
        "allowed by",
    ))
}

fn decision(r: &Rule, effect: Effect, source: DecisionSource, verb: &str) -> Decision {
    let reason = match &r.reason {
        Some(reason) => reason.clone(),
        None => format!("{verb} rule {}", r.rule.id),
    };
    Decision {
        effect,
        rule: r.rule.clone(),
        reason,
        offers: Vec::new(),
        source,
    }
}

/// A request cordon could not put to Cedar: deny (fail closed).
fn internal_error(err: &str) -> Decision {
    Decision {
        effect: Effect::Deny,
        rule: RuleRef::synthetic("authz:internal-error", "<authz>"),
        reason: format!("the request could not be evaluated, so it is denied: {err}"),
        offers: Vec::new(),
        source: DecisionSource::Forbid,
    }
}

const SYNTAX_HELP: &str = "a rule reads: @id(\"name\") permit|forbid (principal, action == Action::\"exec\", resource) when { ... };";
const SCHEMA_HELP: &str =
    "`cordon policy schema` prints the entity types, actions and context attributes a rule may use";
