//! The tool policy: which tools the client sees and may call, and what
//! their arguments may hold. From `--allow-tool`/`--deny-tool` and a TOML
//! file (`--policy`); see the crate docs for the file's format.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::rules::ArgRule;

/// What to do with a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
    /// A person decides: the client is asked (MCP elicitation) when it
    /// can be; otherwise the call is refused.
    Ask,
}

/// What to do with a tool whose description carries instructions aimed at
/// the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoisoningAction {
    /// Leave the tool out of `tools/list` and refuse its calls (default).
    #[default]
    Hide,
    /// Record an incident, keep the tool.
    Flag,
}

/// One tool's entry in the policy file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolPolicy {
    pub decision: Option<Decision>,
    /// Store the raw arguments of this tool's calls in the audit store.
    pub record_args: Option<bool>,
    #[serde(default)]
    pub args: Vec<ArgRule>,
}

/// The policy file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// For tools the policy does not name.
    pub default: Option<Decision>,
    #[serde(default)]
    pub record_args: bool,
    #[serde(default)]
    pub poisoning: PoisoningAction,
    /// Strings redacted from results wherever they appear.
    #[serde(default)]
    pub canaries: Vec<String>,
    #[serde(default)]
    pub tools: BTreeMap<String, ToolPolicy>,
}

/// The policy in force.
#[derive(Debug, Clone)]
pub struct Policy {
    default: Decision,
    default_rule: String,
    record_args: bool,
    pub poisoning: PoisoningAction,
    pub canaries: Vec<String>,
    tools: BTreeMap<String, ToolPolicy>,
    /// Where each tool's decision came from (a flag or the file).
    origin: BTreeMap<String, String>,
}

/// The verdict on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refused: the rule as written, and why in words.
    Deny {
        rule: String,
        message: String,
    },
    /// A person decides: the rule as written, and why in words.
    Ask {
        rule: String,
        message: String,
    },
}

impl Policy {
    /// Build the policy from a file (optional) and the flags. A deny flag
    /// wins over an allow flag, and flags win over the file. Without a
    /// `default` in the file, tools not named are allowed unless some tool
    /// is allowed by name (then the named ones are an allowlist).
    pub fn new(file: Option<PolicyFile>, allow: &[String], deny: &[String]) -> Policy {
        let file = file.unwrap_or_default();
        let mut origin = BTreeMap::new();
        let mut tools = file.tools;
        for (name, t) in &tools {
            if t.decision.is_some() {
                origin.insert(name.clone(), format!("tools.{name}.decision"));
            }
        }
        for name in allow {
            tools.entry(name.clone()).or_default().decision = Some(Decision::Allow);
            origin.insert(name.clone(), format!("--allow-tool {name}"));
        }
        for name in deny {
            tools.entry(name.clone()).or_default().decision = Some(Decision::Deny);
            origin.insert(name.clone(), format!("--deny-tool {name}"));
        }
        let allowlist = tools.values().any(|t| t.decision == Some(Decision::Allow));
        let (default, default_rule) = match file.default {
            Some(d) => (d, "default".to_owned()),
            None if allowlist => (
                Decision::Deny,
                "not an allowed tool (--allow-tool / decision = \"allow\")".to_owned(),
            ),
            None => (Decision::Allow, "default".to_owned()),
        };
        Policy {
            default,
            default_rule,
            record_args: file.record_args,
            poisoning: file.poisoning,
            canaries: file.canaries,
            tools,
            origin,
        }
    }

    /// Read a policy file (TOML).
    pub fn load(path: &Path) -> Result<PolicyFile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the policy {}: {e}", path.display()))?;
        let file: PolicyFile = toml::from_str(&text)
            .map_err(|e| format!("the policy {} is not valid: {e}", path.display()))?;
        for (name, tool) in &file.tools {
            for rule in &tool.args {
                rule.check()
                    .map_err(|e| format!("{}: tools.{name}.args: {e}", path.display()))?;
            }
        }
        Ok(file)
    }

    fn decision(&self, tool: &str) -> (Decision, String) {
        match self.tools.get(tool).and_then(|t| t.decision) {
            Some(d) => (
                d,
                self.origin
                    .get(tool)
                    .cloned()
                    .unwrap_or_else(|| format!("tools.{tool}")),
            ),
            None => (self.default, self.default_rule.clone()),
        }
    }

    /// Whether the client sees the tool in `tools/list` (a denied tool is
    /// absent; an "ask" tool is listed, its calls are asked about).
    pub fn visible(&self, tool: &str) -> bool {
        self.decision(tool).0 != Decision::Deny
    }

    /// Whether the raw arguments of this tool's calls are stored.
    pub fn record_args(&self, tool: &str) -> bool {
        self.tools
            .get(tool)
            .and_then(|t| t.record_args)
            .unwrap_or(self.record_args)
    }

    /// Whether a refusal with this rule is the default for tools the
    /// policy does not name (and not a rule written for the tool).
    pub fn is_default_rule(&self, rule: &str) -> bool {
        rule == self.default_rule
    }

    /// The rule behind an allowed call of `tool` (as written).
    pub fn allow_rule(&self, tool: &str) -> String {
        self.decision(tool).1
    }

    /// Decide one call: a denied tool is refused; then the argument
    /// rules; then an allowed tool passes and an "ask" tool is asked about.
    pub fn check(&self, tool: &str, arguments: &Value) -> Verdict {
        let (decision, rule) = self.decision(tool);
        if decision == Decision::Deny {
            return Verdict::Deny {
                message: format!("the tool {tool} is denied by the gateway's policy"),
                rule,
            };
        }
        for arg in self
            .tools
            .get(tool)
            .map(|t| t.args.as_slice())
            .unwrap_or(&[])
        {
            if let Err(message) = arg.check_value(arguments.get(&arg.name)) {
                return Verdict::Deny {
                    rule: format!("tools.{tool}.args.{}.{}", arg.name, arg.kind()),
                    message,
                };
            }
        }
        match decision {
            Decision::Ask => Verdict::Ask {
                message: format!("the tool {tool} needs a person's approval"),
                rule,
            },
            _ => Verdict::Allow,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn allowlist_denies_the_rest_and_deny_wins() {
        let p = Policy::new(None, &["read".into(), "both".into()], &["both".into()]);
        assert!(p.visible("read"));
        assert!(!p.visible("write"));
        assert!(!p.visible("both"));
        match p.check("write", &json!({})) {
            Verdict::Deny { rule, .. } => assert!(rule.contains("not an allowed tool")),
            v => panic!("{v:?}"),
        }
        match p.check("both", &json!({})) {
            Verdict::Deny { rule, .. } => assert_eq!(rule, "--deny-tool both"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn no_policy_allows_everything() {
        let p = Policy::new(None, &[], &[]);
        assert_eq!(p.check("any", &json!({})), Verdict::Allow);
    }

    #[test]
    fn ask_is_asked_after_the_argument_rules() {
        let file: PolicyFile = toml::from_str(
            "[tools.rm]\ndecision = \"ask\"\n[[tools.rm.args]]\nname = \"path\"\nunder = [\"/tmp\"]\n",
        )
        .unwrap();
        let p = Policy::new(Some(file), &[], &[]);
        assert!(p.visible("rm"));
        match p.check("rm", &json!({"path": "/tmp/x"})) {
            Verdict::Ask { rule, .. } => assert_eq!(rule, "tools.rm.decision"),
            v => panic!("{v:?}"),
        }
        match p.check("rm", &json!({"path": "/etc/passwd"})) {
            Verdict::Deny { rule, .. } => assert!(rule.starts_with("tools.rm.args.path")),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn argument_rules_name_the_rule() {
        let file: PolicyFile = toml::from_str(
            r#"
            default = "deny"
            [tools.read_file]
            decision = "allow"
            [[tools.read_file.args]]
            name = "path"
            under = ["/srv/docs"]
            "#,
        )
        .unwrap();
        let p = Policy::new(Some(file), &[], &[]);
        assert_eq!(
            p.check("read_file", &json!({"path": "/srv/docs/a"})),
            Verdict::Allow
        );
        match p.check("read_file", &json!({"path": "/srv/docs/../../etc/passwd"})) {
            Verdict::Deny { rule, .. } => assert_eq!(rule, "tools.read_file.args.path.under"),
            v => panic!("{v:?}"),
        }
    }
}
