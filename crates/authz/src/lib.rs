//! Policy decisions for every action an agent asks cordon for.
//!
//! A request names who asks (a token), what (an [`Action`]), with context
//! (session, scanner findings, time), what the profile alone says (its
//! [`DefaultVerdict`]) and whether a profile or token ceiling forbids it.
//! The [`Authorizer`] combines these with a Cedar policy file in a fixed
//! order: ceiling, then `forbid`, then `permit` annotated `@ask`, then
//! `permit`, then the default. Every [`Decision`] names the rule that
//! decided with its file and line.

pub mod cases;
mod context;
mod engine;
mod error;
mod locate;
mod rules;
mod types;

pub use error::{AuthzError, Diagnostic};
pub use types::{
    Action, Decision, DecisionSource, DefaultVerdict, Effect, Principal, Request, RuleRef,
    ScopeKind, ACTION_KINDS,
};

pub use engine::{schema_json, SCHEMA};
pub use rules::KNOWN_ANNOTATIONS;

use std::path::Path;
use std::sync::Arc;

/// The synthetic file named by decisions that come from the profile or token.
pub const PROFILE_FILE: &str = "<profile>";

/// Decides requests. Cheap to share in an `Arc`; `Send + Sync`.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    engine: Option<Arc<engine::Engine>>,
}

impl Authorizer {
    /// No policy file: every action gets its ceiling or its default verdict.
    pub fn builtin() -> Authorizer {
        Authorizer { engine: None }
    }

    /// Reads and parses a policy file.
    pub fn load(path: &Path) -> Result<Authorizer, AuthzError> {
        let src = std::fs::read_to_string(path).map_err(|source| AuthzError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Authorizer::parse(&src, &path.display().to_string())
    }

    /// Parses policy text and validates it against cordon's schema
    /// ([`SCHEMA`]); `file_name` is what decisions and errors name.
    pub fn parse(src: &str, file_name: &str) -> Result<Authorizer, AuthzError> {
        let engine = engine::Engine::parse(src, file_name).map_err(AuthzError::Invalid)?;
        Ok(Authorizer {
            engine: Some(Arc::new(engine)),
        })
    }

    /// How many rules the policy holds (0 for the builtin authorizer).
    pub fn rule_count(&self) -> usize {
        self.engine.as_ref().map_or(0, |e| e.len())
    }

    /// Warnings from validation (the policy still loads).
    pub fn warnings(&self) -> &[Diagnostic] {
        self.engine.as_ref().map_or(&[], |e| &e.warnings)
    }

    /// Decides one request.
    pub fn decide(&self, req: &Request) -> Decision {
        if let Some(reason) = &req.ceiling {
            return ceiling_decision(reason);
        }
        if let Some(d) = self.engine.as_ref().and_then(|e| e.decide(req)) {
            return d;
        }
        default_decision(&req.default)
    }
}

/// A ceiling forbids the action: deny, and no grant lifts it.
fn ceiling_decision(reason: &str) -> Decision {
    Decision {
        effect: Effect::Deny,
        rule: RuleRef::synthetic(format!("ceiling:{reason}"), PROFILE_FILE),
        reason: format!("a ceiling forbids it: {reason}"),
        offers: Vec::new(),
        source: DecisionSource::Ceiling,
    }
}

/// No rule matched: the profile's default verdict.
fn default_decision(default: &DefaultVerdict) -> Decision {
    let rule = RuleRef::synthetic(default.rule(), PROFILE_FILE);
    let (effect, offers, what) = match default {
        DefaultVerdict::Allow { .. } => (Effect::Allow, Vec::new(), "allows"),
        DefaultVerdict::Deny { .. } => (Effect::Deny, Vec::new(), "denies"),
        DefaultVerdict::Ask { .. } => (Effect::Ask, ScopeKind::default_offers(), "asks"),
    };
    Decision {
        effect,
        reason: format!(
            "no policy rule matched; the profile {what} ({})",
            default.rule()
        ),
        rule,
        offers,
        source: DecisionSource::Default,
    }
}

#[cfg(test)]
mod tests;
