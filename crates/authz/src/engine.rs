//! The Cedar engine: a validated policy set with what cordon reads from each
//! policy, and the first three steps of the combination order
//! (forbid → ask → permit).

use crate::context::{self, Names};
use crate::error::Diagnostic;
use crate::locate;
use crate::rules::{self, Limits, Rule, RuleKind};
use crate::types::{Decision, DecisionSource, Effect, Request, RuleRef};
use cedar_policy::{
    ActionConstraint, Policy, PolicySet, PrincipalConstraint, ResourceConstraint, Schema,
    ValidationMode, Validator,
};
use cedar_policy_core::ast::{Expr, Literal, SlotEnv, ValueKind};
use cedar_policy_core::evaluator::Evaluator;
use cedar_policy_core::extensions::Extensions;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

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
    /// The policies that may apply, by action kind (see `by_action`).
    policies: HashMap<&'static str, ForAction>,
    /// Every policy, as parsed (the reference evaluation in tests).
    #[cfg_attr(not(test), allow(dead_code))]
    all: PolicySet,
    rules: HashMap<String, Rule>,
    names: Names,
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
        let by_kind = by_action(&policies, &rules).map_err(|e| vec![one(0, e, None)])?;
        Ok(Engine {
            policies: by_kind,
            all: policies,
            rules,
            names,
            warnings,
        })
    }

    /// How many rules the file holds.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Forbid → ask → permit; `None` when no rule matched.
    ///
    /// Evaluated in that order, each kind in file order, stopping as soon
    /// as the decision is known: the first forbid that matches denies; else
    /// a forbid that could not be evaluated denies; else the first `@ask`
    /// that matches asks; else every permit with limits that matches
    /// allows with the tightest of them; else the first plain permit
    /// allows. The same decisions as evaluating every rule and combining
    /// (`tests::decisions_match_cedars_authorizer`).
    pub fn decide(&self, req: &Request) -> Option<Decision> {
        let parts = match context::build(&self.names, req) {
            Ok(p) => p,
            Err(e) => return Some(internal_error(&e)),
        };
        let Some(rules) = self.policies.get(req.action.kind()) else {
            return Some(internal_error("no policy set for this action"));
        };
        let resource_id = parts.resource.id().unescaped().to_owned();
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
        let eval = Evaluator::new(
            request.as_ref().clone(),
            parts.entities.as_ref(),
            Extensions::all_available(),
        );
        let may_apply = |c: &&Arc<Compiled>| c.may_apply(&req.principal.name, &resource_id);
        let matches = |c: &&Arc<Compiled>| matches!(c.satisfied(&eval), Ok(true));

        let mut failed_forbid: Option<(&Rule, String)> = None;
        for c in rules.forbids.iter().filter(may_apply) {
            match c.satisfied(&eval) {
                Ok(true) => return Some(forbidden(&c.rule)),
                Ok(false) => {}
                Err(e) => {
                    failed_forbid.get_or_insert((&c.rule, e));
                }
            }
        }
        if let Some((r, err)) = failed_forbid {
            return Some(forbid_failed(r, &err));
        }
        if let Some(c) = rules.asks.iter().filter(may_apply).find(matches) {
            return Some(asked(&c.rule));
        }
        let limited = rules.limited.iter().filter(may_apply).filter(matches).fold(
            None,
            |acc: Option<(&Rule, Limits)>, c| {
                let limits = c.rule.limits();
                Some(match acc {
                    None => (&c.rule, limits),
                    Some((first, tightest)) => (first, tightest.tightest(limits)),
                })
            },
        );
        if let Some((r, limits)) = limited {
            return Some(allowed_with(r, limits));
        }
        let c = rules.permits.iter().filter(may_apply).find(matches)?;
        Some(allowed(&c.rule))
    }

    /// The reference for [`Engine::decide`]: every rule that may apply
    /// evaluated by Cedar's own authorizer, then combined.
    #[cfg(test)]
    pub fn decide_with_cedars_authorizer(&self, req: &Request) -> Option<Decision> {
        let parts = match context::build(&self.names, req) {
            Ok(p) => p,
            Err(e) => return Some(internal_error(&e)),
        };
        let request = cedar_policy::Request::new(
            parts.principal,
            parts.action,
            parts.resource,
            parts.context,
            None,
        )
        .ok()?;
        let response =
            cedar_policy::Authorizer::new().is_authorized(&request, &self.all, &parts.entities);
        let rule_of = |id: String| self.rules.get(&id);
        let failed_forbid = response
            .diagnostics()
            .errors()
            .filter_map(|e| {
                let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = e;
                let rule = rule_of(e.policy_id().to_string())?;
                let message = format!(
                    "error while evaluating policy `{}`: {}",
                    rule.rule.id,
                    e.inner()
                );
                (rule.kind == RuleKind::Forbid).then_some((rule, message))
            })
            .min_by_key(|(r, _)| r.order);
        let matched: Vec<&Rule> = response
            .diagnostics()
            .reason()
            .filter_map(|id| rule_of(id.to_string()))
            .collect();
        combine(&matched, failed_forbid)
    }
}

/// One policy ready to evaluate: its whole condition (scope and `when` /
/// `unless` clauses), built once when the file is read, its rule, and the
/// token and resource its scope names, if any.
///
/// Cedar's `Authorizer::is_authorized` rebuilds every policy's condition
/// expression, and drops it again, on every request, and evaluates every
/// policy of the set: most of a decision's time when many rules apply
/// (BENCHMARKS.md, Policy decisions). Cedar's own evaluator on the
/// prebuilt conditions gives the same answers without that.
#[derive(Debug)]
struct Compiled {
    condition: Expr,
    slots: SlotEnv,
    rule: Rule,
    /// `principal == Token::"x"` (or `in`): only requests of token x.
    principal: Option<String>,
    /// `resource == T::"x"` (or `in`): only requests whose resource is x.
    resource: Option<String>,
}

impl Compiled {
    fn new(policy: &Policy, rule: Rule) -> Compiled {
        let core: &cedar_policy_core::ast::Policy = policy.as_ref();
        // cordon's tokens and resources have no parents (the request's
        // entities hold the token alone), so `in` is `==`: a scope naming
        // another entity id can never match.
        let principal = match policy.principal_constraint() {
            PrincipalConstraint::Any | PrincipalConstraint::Is(_) => None,
            PrincipalConstraint::Eq(uid)
            | PrincipalConstraint::In(uid)
            | PrincipalConstraint::IsIn(_, uid) => Some(uid.id().unescaped().to_owned()),
        };
        let resource = match policy.resource_constraint() {
            ResourceConstraint::Any | ResourceConstraint::Is(_) => None,
            ResourceConstraint::Eq(uid)
            | ResourceConstraint::In(uid)
            | ResourceConstraint::IsIn(_, uid) => Some(uid.id().unescaped().to_owned()),
        };
        // Cedar's condition is `principal && action && resource && body`.
        // The action conjunct is left out: a policy is only listed for the
        // action kinds its scope names, where it holds (and never fails).
        let template = core.template();
        let condition = Expr::and(
            template.principal_constraint().as_expr(),
            Expr::and(
                template.resource_constraint().as_expr(),
                template
                    .non_scope_constraints()
                    .cloned()
                    .unwrap_or_else(|| Expr::val(true)),
            ),
        );
        Compiled {
            condition,
            slots: core.env().clone(),
            rule,
            principal,
            resource,
        }
    }

    /// False only when the scope names another token or resource (the
    /// condition, which also checks them, could not hold).
    fn may_apply(&self, principal: &str, resource: &str) -> bool {
        self.principal.as_deref().is_none_or(|p| p == principal)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }

    /// Whether the policy applies to the evaluator's request; an error
    /// (a failed evaluation, or a condition that is not a boolean) as its
    /// message.
    fn satisfied(&self, eval: &Evaluator<'_>) -> Result<bool, String> {
        match eval.interpret(&self.condition, &self.slots) {
            Ok(v) => match v.value {
                ValueKind::Lit(Literal::Bool(b)) => Ok(b),
                _ => Err(format!(
                    "error while evaluating policy `{}`: the condition is not a boolean",
                    self.rule.rule.id
                )),
            },
            Err(e) => Err(format!(
                "error while evaluating policy `{}`: {e}",
                self.rule.rule.id
            )),
        }
    }
}

/// The rules that may apply to one action kind, by kind, each in file
/// order.
#[derive(Debug, Default)]
struct ForAction {
    forbids: Vec<Arc<Compiled>>,
    asks: Vec<Arc<Compiled>>,
    /// Permits with `@limit_*`.
    limited: Vec<Arc<Compiled>>,
    /// Permits without.
    permits: Vec<Arc<Compiled>>,
}

/// Cedar evaluates every policy of a set on each request. A policy whose
/// scope names another action can never match: cordon's actions have no
/// groups (`action in [..]` is a list of alternatives). So each action
/// kind gets only the policies that may apply, and within it
/// [`Compiled::may_apply`] skips those naming another token or resource:
/// the same decisions for a fraction of the work.
fn by_action(
    all: &PolicySet,
    rules: &HashMap<String, Rule>,
) -> Result<HashMap<&'static str, ForAction>, String> {
    let mut compiled: Vec<(Arc<Compiled>, ActionConstraint)> = all
        .policies()
        .map(|p| {
            let id = p.id().to_string();
            let rule = rules
                .get(&id)
                .cloned()
                .ok_or_else(|| format!("policy {id} has no rule"))?;
            Ok((Arc::new(Compiled::new(p, rule)), p.action_constraint()))
        })
        .collect::<Result<_, String>>()?;
    compiled.sort_by_key(|(c, _)| c.rule.order);
    let mut out = HashMap::new();
    for kind in crate::ACTION_KINDS {
        let is_kind = |uid: &cedar_policy::EntityUid| {
            uid.type_name().to_string() == "Action" && uid.id().unescaped() == kind
        };
        let mut set = ForAction::default();
        for (c, actions) in &compiled {
            let applies = match actions {
                ActionConstraint::Any => true,
                ActionConstraint::Eq(uid) => is_kind(uid),
                ActionConstraint::In(uids) => uids.iter().any(is_kind),
            };
            if !applies {
                continue;
            }
            let list = match &c.rule.kind {
                RuleKind::Forbid => &mut set.forbids,
                RuleKind::Ask { .. } => &mut set.asks,
                RuleKind::Permit { limits } if !limits.is_empty() => &mut set.limited,
                RuleKind::Permit { .. } => &mut set.permits,
            };
            list.push(c.clone());
        }
        out.insert(kind, set);
    }
    Ok(out)
}

fn forbidden(r: &Rule) -> Decision {
    decision(r, Effect::Deny, DecisionSource::Forbid, "forbidden by")
}

fn forbid_failed(r: &Rule, err: &str) -> Decision {
    let mut d = forbidden(r);
    d.reason = format!(
        "forbid rule {} could not be evaluated, so it denies: {err}",
        r.rule.id
    );
    d
}

fn asked(r: &Rule) -> Decision {
    let mut d = decision(r, Effect::Ask, DecisionSource::AskRule, "asked by");
    if let RuleKind::Ask { offers } = &r.kind {
        d.offers = offers.clone();
    }
    d
}

fn allowed_with(r: &Rule, limits: Limits) -> Decision {
    let effect = Effect::AllowWithLimits {
        memory: limits.memory,
        pids: limits.pids,
        timeout_ms: limits.timeout_ms,
    };
    decision(r, effect, DecisionSource::Permit, "allowed with limits by")
}

fn allowed(r: &Rule) -> Decision {
    decision(r, Effect::Allow, DecisionSource::Permit, "allowed by")
}

/// Combines every rule that matched, in cordon's order: what
/// [`Engine::decide`] computes by stopping early, kept as its reference.
#[cfg(test)]
fn combine(matched: &[&Rule], failed_forbid: Option<(&Rule, String)>) -> Option<Decision> {
    let first = |pred: &dyn Fn(&RuleKind) -> bool| {
        matched
            .iter()
            .copied()
            .filter(|r| pred(&r.kind))
            .min_by_key(|r| r.order)
    };
    if let Some(r) = first(&|k| *k == RuleKind::Forbid) {
        return Some(forbidden(r));
    }
    if let Some((r, err)) = failed_forbid {
        return Some(forbid_failed(r, &err));
    }
    if let Some(r) = first(&|k| matches!(k, RuleKind::Ask { .. })) {
        return Some(asked(r));
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
        let limits = permits
            .iter()
            .fold(Limits::default(), |acc, p| acc.tightest(p.limits()));
        return Some(allowed_with(r, limits));
    }
    let r = permits.iter().copied().min_by_key(|r| r.order)?;
    Some(allowed(r))
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
