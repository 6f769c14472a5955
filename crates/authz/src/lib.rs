//! Policy decisions for every action an agent asks cordon for.
//!
//! A request names who asks (a token), what (an [`Action`]), with context
//! (session, scanner findings, time), what the profile alone says (its
//! [`DefaultVerdict`]) and whether a profile or token ceiling forbids it.
//! The [`Authorizer`] combines these with a Cedar policy file in a fixed
//! order: ceiling, then `forbid`, then `permit` annotated `@ask`, then
//! `permit`, then the default. Every [`Decision`] names the rule that
//! decided with its file and line.

mod error;
mod types;

pub use error::{AuthzError, Diagnostic};
pub use types::{
    Action, Decision, DecisionSource, DefaultVerdict, Effect, Principal, Request, RuleRef,
    ScopeKind, ACTION_KINDS,
};

use std::path::Path;

/// The synthetic file named by decisions that come from the profile or token.
pub const PROFILE_FILE: &str = "<profile>";

/// Decides requests. Cheap to share in an `Arc`; `Send + Sync`.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {}

impl Authorizer {
    /// No policy file: every action gets its ceiling or its default verdict.
    pub fn builtin() -> Authorizer {
        Authorizer {}
    }

    /// Reads and parses a policy file.
    pub fn load(path: &Path) -> Result<Authorizer, AuthzError> {
        let src = std::fs::read_to_string(path).map_err(|source| AuthzError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Authorizer::parse(&src, &path.display().to_string())
    }

    /// Parses policy text; `file_name` is what decisions and errors name.
    pub fn parse(_src: &str, file_name: &str) -> Result<Authorizer, AuthzError> {
        Err(AuthzError::Invalid(vec![Diagnostic {
            file: file_name.to_string(),
            line: 0,
            column: 0,
            message: "policy files are not supported by this build yet".into(),
            help: None,
        }]))
    }

    /// Decides one request.
    pub fn decide(&self, req: &Request) -> Decision {
        if let Some(reason) = &req.ceiling {
            return ceiling_decision(reason);
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
