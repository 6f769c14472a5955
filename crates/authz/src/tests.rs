use super::*;

fn req(default: DefaultVerdict) -> Request {
    Request::new(
        Principal::named("ci"),
        Action::Exec {
            argv: vec!["git".into(), "status".into()],
        },
        default,
    )
}

#[test]
fn builtin_gives_the_default_verdict_and_names_it() {
    let a = Authorizer::builtin();
    let d = a.decide(&req(DefaultVerdict::Allow {
        rule: "builtin:profile-default".into(),
    }));
    assert_eq!(d.effect, Effect::Allow);
    assert_eq!(d.rule.id, "builtin:profile-default");
    assert_eq!(d.rule.file, PROFILE_FILE);
    assert!(!d.grantable());
    let d = a.decide(&req(DefaultVerdict::Ask {
        rule: "profile:on_unlisted".into(),
    }));
    assert_eq!(d.effect, Effect::Ask);
    assert_eq!(d.offers, ScopeKind::default_offers());
    assert!(d.grantable());
    let d = a.decide(&req(DefaultVerdict::Deny {
        rule: "profile:on_unlisted".into(),
    }));
    assert_eq!(d.effect, Effect::Deny);
    assert!(d.grantable(), "a default deny may be granted");
}

#[test]
fn builtin_ceiling_beats_an_allowing_default_and_is_not_grantable() {
    let mut r = req(DefaultVerdict::Allow {
        rule: "builtin:profile-default".into(),
    });
    r.ceiling = Some("token max_memory 1GiB".into());
    let d = Authorizer::builtin().decide(&r);
    assert_eq!(d.effect, Effect::Deny);
    assert_eq!(d.rule.id, "ceiling:token max_memory 1GiB");
    assert_eq!(d.source, DecisionSource::Ceiling);
    assert!(!d.grantable());
}

#[test]
fn actions_serialize_with_snake_case_kinds() {
    let a = Action::RaiseLimits {
        memory: Some(1 << 30),
        pids: None,
    };
    let v = serde_json::to_value(&a).unwrap();
    assert_eq!(v["kind"], "raise_limits");
    let back: Action = serde_json::from_value(v).unwrap();
    assert_eq!(back, a);
    let e: Action = serde_json::from_str(r#"{"kind":"exec","argv":["ls"]}"#).unwrap();
    assert_eq!(e.kind(), "exec");
}

#[test]
fn authorizer_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Authorizer>();
}

const ALLOW: fn() -> DefaultVerdict = || DefaultVerdict::Allow {
    rule: "profile:default".into(),
};
const DENY: fn() -> DefaultVerdict = || DefaultVerdict::Deny {
    rule: "profile:default".into(),
};

fn exec(argv: &[&str], default: DefaultVerdict) -> Request {
    Request::new(
        Principal::named("ci"),
        Action::Exec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
        },
        default,
    )
}

fn policy(src: &str) -> Authorizer {
    match Authorizer::parse(src, "p.cedar") {
        Ok(a) => a,
        Err(e) => panic!("{e}"),
    }
}

const ORDER: &str = r#"
@id("git-any")
permit(principal, action == Action::"exec", resource)
when { context.program == "git" };

@id("git-push-asks")
@ask
@offer("once,session")
permit(principal, action == Action::"exec", resource)
when { context.command like "git push*" };

@id("no-force")
forbid(principal, action == Action::"exec", resource)
when { context.argv.contains("--force") };

@id("cargo-limited")
@limit_memory("512MiB")
@limit_pids("64")
permit(principal, action == Action::"exec", resource == Program::"cargo");

@id("cargo-tighter")
@limit_memory("256MiB")
@limit_timeout("30s")
permit(principal, action == Action::"exec", resource == Program::"cargo")
when { context.argv.contains("test") };
"#;

#[test]
fn permit_allows_and_names_its_rule_and_line() {
    let d = policy(ORDER).decide(&exec(&["git", "status"], DENY()));
    assert_eq!(d.effect, Effect::Allow);
    assert_eq!(
        d.rule,
        RuleRef {
            id: "git-any".into(),
            file: "p.cedar".into(),
            line: 2
        }
    );
    assert_eq!(d.source, DecisionSource::Permit);
    assert!(!d.grantable());
}

#[test]
fn ask_beats_permit() {
    let d = policy(ORDER).decide(&exec(&["git", "push", "origin"], DENY()));
    assert_eq!(d.effect, Effect::Ask);
    assert_eq!(d.rule.id, "git-push-asks");
    assert_eq!(d.rule.line, 6);
    assert_eq!(d.offers, vec![ScopeKind::Once, ScopeKind::Session]);
    assert!(d.grantable());
}

#[test]
fn forbid_beats_ask_and_permit_and_is_not_grantable() {
    let d = policy(ORDER).decide(&exec(&["git", "push", "--force"], ALLOW()));
    assert_eq!(d.effect, Effect::Deny);
    assert_eq!(d.rule.id, "no-force");
    assert_eq!(d.rule.line, 12);
    assert_eq!(d.source, DecisionSource::Forbid);
    assert!(!d.grantable());
}

#[test]
fn ceiling_beats_every_rule() {
    let mut r = exec(&["git", "status"], ALLOW());
    r.ceiling = Some("preset untrusted runs no git".into());
    let d = policy(ORDER).decide(&r);
    assert_eq!(d.effect, Effect::Deny);
    assert_eq!(d.source, DecisionSource::Ceiling);
    assert_eq!(d.rule.file, PROFILE_FILE);
    assert!(!d.grantable());
}

#[test]
fn nothing_matched_gives_the_default() {
    let a = policy(ORDER);
    let d = a.decide(&exec(&["ls"], DENY()));
    assert_eq!(d.effect, Effect::Deny);
    assert_eq!(d.source, DecisionSource::Default);
    assert!(d.grantable());
    let d = a.decide(&exec(&["ls"], ALLOW()));
    assert_eq!(d.effect, Effect::Allow);
    assert_eq!(d.rule.id, "profile:default");
}

#[test]
fn limits_of_every_matching_permit_apply_tightest_wins() {
    let a = policy(ORDER);
    let d = a.decide(&exec(&["cargo", "build"], DENY()));
    assert_eq!(
        d.effect,
        Effect::AllowWithLimits {
            memory: Some(512 << 20),
            pids: Some(64),
            timeout_ms: None
        }
    );
    assert_eq!(d.rule.id, "cargo-limited");
    let d = a.decide(&exec(&["cargo", "test"], DENY()));
    assert_eq!(
        d.effect,
        Effect::AllowWithLimits {
            memory: Some(256 << 20),
            pids: Some(64),
            timeout_ms: Some(30_000)
        }
    );
}

#[test]
fn ask_without_offer_offers_all_but_persistent() {
    let a = policy("@ask permit(principal, action == Action::\"egress\", resource);");
    let d = a.decide(&Request::new(
        Principal::named("ci"),
        Action::Egress {
            host: "example.com".into(),
            port: 443,
        },
        DENY(),
    ));
    assert_eq!(d.effect, Effect::Ask);
    assert_eq!(d.rule.id, "policy0");
    assert_eq!(d.rule.line, 1);
    assert_eq!(d.offers, ScopeKind::default_offers());
}

#[test]
fn a_forbid_that_errors_denies() {
    // `context.time * 10000000000` overflows a Cedar Long: an evaluation
    // error. Cedar skips an erroring policy; cordon denies when it is a forbid.
    let src = r#"permit(principal, action, resource);
           @id("overflowing-guard")
           forbid(principal, action, resource) when { context.time * 10000000000 > 0 };"#;
    let d = policy(src).decide(&exec(&["ls"], ALLOW()));
    assert_eq!(d.effect, Effect::Deny, "{d:?}");
    assert_eq!(d.rule.id, "overflowing-guard");
    assert!(d.reason.contains("could not be evaluated"), "{}", d.reason);
    assert!(!d.grantable());
    // An erroring permit is skipped: the default decides.
    let src = r#"permit(principal, action, resource) when { context.time * 10000000000 > 0 };"#;
    let d = policy(src).decide(&exec(&["ls"], DENY()));
    assert_eq!(d.source, DecisionSource::Default);
}

#[test]
fn errors_name_file_line_and_fix() {
    let err = Authorizer::parse(
        "permit(principal, action, resource);\n\nforbid(principal, action == Action::\"exek\", resource);\n",
        "bad.cedar",
    )
    .unwrap_err();
    let d = &err.diagnostics()[0];
    assert_eq!(d.file, "bad.cedar");
    assert_eq!(d.line, 3, "{d}");
    assert!(d.message.contains("exek"), "{d}");
    assert!(d.help.is_some());

    let err = Authorizer::parse("permit(principal, action resource);", "syn.cedar").unwrap_err();
    assert_eq!(err.diagnostics()[0].line, 1);

    let err =
        Authorizer::parse("@asq permit(principal, action, resource);", "typo.cedar").unwrap_err();
    assert!(err.diagnostics()[0].message.contains("@asq"), "{err}");

    let err =
        Authorizer::parse("@ask forbid(principal, action, resource);", "f.cedar").unwrap_err();
    assert!(err.diagnostics()[0].message.contains("forbid"), "{err}");

    let err = Authorizer::parse(
        "@id(\"a\") permit(principal, action, resource);\n@id(\"a\") forbid(principal, action, resource);",
        "dup.cedar",
    )
    .unwrap_err();
    assert_eq!(err.diagnostics()[0].line, 2);
}

/// Every action kind's Cedar request matches the schema.
#[test]
fn every_action_kind_fits_the_schema() {
    let schema = engine::schema().unwrap();
    let names = context::Names::new().unwrap();
    let actions = vec![
        Action::CreateSandbox {
            profile: "python".into(),
        },
        Action::Exec {
            argv: vec!["git".into(), "push".into()],
        },
        Action::Exec { argv: vec![] },
        Action::Egress {
            host: "example.com".into(),
            port: 443,
        },
        Action::FileRead {
            path: "/work/a".into(),
        },
        Action::FileWrite {
            path: "/work/a".into(),
        },
        Action::Bind {
            host_path: "/data".into(),
            writable: true,
        },
        Action::RaiseLimits {
            memory: Some(1 << 30),
            pids: None,
        },
        Action::RaiseLimits {
            memory: None,
            pids: Some(u64::MAX),
        },
        Action::UseSecret { name: "GH".into() },
        Action::ToolCall {
            server: "gh".into(),
            tool: "create_issue".into(),
            args_digest: "ab".into(),
        },
        Action::Promote {
            run: "r1".into(),
            paths: vec!["out/a".into()],
        },
    ];
    let mut kinds = std::collections::HashSet::new();
    for action in actions {
        kinds.insert(action.kind());
        let mut r = Request::new(
            Principal {
                name: "ci".into(),
                preset: Some("trusted".into()),
            },
            action,
            DENY(),
        );
        r.session = Some("sb_1".into());
        r.findings = vec!["secret/aws".into()];
        let p = context::build(&names, &r).unwrap();
        if let Err(e) =
            cedar_policy::Request::new(p.principal, p.action, p.resource, p.context, Some(&schema))
        {
            panic!("{}: {e}", r.action.kind());
        }
    }
    assert_eq!(kinds.len(), ACTION_KINDS.len());
}

/// Policies are indexed by the actions and tokens their scope names; a rule
/// with no action constraint still applies to every kind, `action in [..]`
/// to each listed kind and to no other; a rule naming a token (==, in, is
/// .. in) applies to that token, and a rule for any token to every token.
#[test]
fn the_index_by_action_keeps_every_rule_that_may_apply() {
    let a = policy(
        r#"@id("banned") forbid(principal == Token::"banned", action, resource);
           @id("files") permit(principal, action in [Action::"file_read", Action::"file_write"], resource);
           @id("banned-too") forbid(principal in Token::"banned-too", action, resource);
           @id("banned-also") forbid(principal is Token in Token::"banned-also", action, resource);"#,
    );
    let actions = [
        Action::CreateSandbox {
            profile: "p".into(),
        },
        Action::Exec {
            argv: vec!["ls".into()],
        },
        Action::Egress {
            host: "h".into(),
            port: 1,
        },
        Action::FileRead { path: "/a".into() },
        Action::FileWrite { path: "/a".into() },
        Action::Bind {
            host_path: "/a".into(),
            writable: false,
        },
        Action::RaiseLimits {
            memory: None,
            pids: Some(1),
        },
        Action::UseSecret { name: "S".into() },
        Action::ToolCall {
            server: "s".into(),
            tool: "t".into(),
            args_digest: String::new(),
        },
        Action::Promote {
            run: "r".into(),
            paths: vec![],
        },
    ];
    for action in actions {
        let kind = action.kind();
        let banned = Request::new(Principal::named("banned"), action.clone(), ALLOW());
        assert_eq!(a.decide(&banned).rule.id, "banned", "{kind}");
        for name in ["banned-too", "banned-also"] {
            let r = Request::new(Principal::named(name), action.clone(), ALLOW());
            assert_eq!(a.decide(&r).rule.id, name, "{kind}");
        }
        let d = a.decide(&Request::new(Principal::named("ci"), action, DENY()));
        let expected = if kind.starts_with("file_") {
            "files"
        } else {
            "profile:default"
        };
        assert_eq!(d.rule.id, expected, "{kind}");
    }
}

/// Every request decided by the engine (rules prebuilt, evaluated in
/// cordon's order, stopping early, skipping scopes that name another
/// token or resource) and by Cedar's own authorizer over every rule, then
/// combined: the same decision, rule and reason. Requests: the example
/// policy's whole case table, and a policy with forbids, asks, limited and
/// plain permits, errors and scopes of every shape, against requests of
/// every action kind, several tokens and resources.
#[test]
fn decisions_match_cedars_authorizer() {
    let compare = |a: &Authorizer, r: &Request, what: &str| {
        let engine = a.engine.as_ref().expect("a policy");
        let fast = engine.decide(r);
        let reference = engine.decide_with_cedars_authorizer(r);
        assert_eq!(
            fast.as_ref()
                .map(|d| (&d.effect, &d.rule, &d.reason, &d.offers)),
            reference
                .as_ref()
                .map(|d| (&d.effect, &d.rule, &d.reason, &d.offers)),
            "{what}: {r:?}"
        );
        fast.is_some()
    };

    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/policy");
    let src = std::fs::read_to_string(format!("{root}/agents.cedar")).expect("example policy");
    let a = policy(&src);
    let table = std::fs::read_to_string(format!("{root}/agents.cases.toml")).expect("cases");
    let cases = crate::cases::parse_cases(&table, "agents.cases.toml").expect("cases parse");
    assert!(cases.len() >= 100, "{} cases", cases.len());
    let mut decided_by_a_rule = 0;
    for c in &cases {
        decided_by_a_rule += usize::from(compare(&a, &c.request, &c.name));
    }
    assert!(
        decided_by_a_rule > 50,
        "{decided_by_a_rule} cases decided by a rule"
    );

    let mixed = policy(
        r#"@id("f-finding") forbid(principal, action == Action::"exec", resource)
             when { context.findings.contains("bad") };
           @id("f-overflow") forbid(principal, action == Action::"exec", resource)
             when { context.argc * 9223372036854775807 > 0 && context.program == "boom" };
           @id("f-token") forbid(principal == Token::"banned", action, resource);
           @id("f-host") forbid(principal, action == Action::"egress", resource == Host::"169.254.169.254");
           @id("a-push") @ask @offer("once,session") permit(principal, action == Action::"exec", resource == Program::"git")
             when { context.argv.contains("push") };
           @id("a-any-host") @ask permit(principal, action == Action::"egress", resource)
             when { context.port != 443 };
           @id("l-cargo") @limit_memory("512MiB") @limit_pids("64") permit(principal, action == Action::"exec", resource == Program::"cargo");
           @id("l-cargo-test") @limit_memory("256MiB") @limit_timeout("30s") permit(principal, action == Action::"exec", resource in Program::"cargo")
             when { context.argv.contains("test") };
           @id("l-ci") @limit_pids("32") permit(principal in Token::"ci", action, resource);
           @id("p-git") permit(principal, action == Action::"exec", resource is Program in Program::"git");
           @id("p-any-exec") permit(principal is Token, action in [Action::"exec", Action::"file_read"], resource)
             when { context has program && context.program like "tool*" };
           @id("p-error") permit(principal, action == Action::"exec", resource)
             when { context.argc * 9223372036854775807 > 1 };
           @id("p-hosts") permit(principal, action == Action::"egress", resource)
             when { context.host like "*.example.com" };"#,
    );
    let argvs: [&[&str]; 9] = [
        &["git", "status"],
        &["git", "push", "origin"],
        &["cargo", "build"],
        &["cargo", "test"],
        &["tool7", "x"],
        &["boom", "a", "b"],
        &["ls"],
        &["rm", "-rf", "/"],
        &["sh", "-c", "true"],
    ];
    let mut n = 0;
    for token in ["ci", "agent", "banned"] {
        for argv in argvs {
            for findings in [vec![], vec!["bad".to_string()]] {
                let mut r = Request::new(
                    Principal::named(token),
                    Action::Exec {
                        argv: argv.iter().map(|s| s.to_string()).collect(),
                    },
                    DENY(),
                );
                r.findings = findings;
                compare(&mixed, &r, "exec");
                n += 1;
            }
        }
        for (host, port) in [
            ("169.254.169.254", 80),
            ("api.example.com", 443),
            ("x.org", 8080),
        ] {
            let r = Request::new(
                Principal::named(token),
                Action::Egress {
                    host: host.into(),
                    port,
                },
                DENY(),
            );
            compare(&mixed, &r, "egress");
            n += 1;
        }
        let r = Request::new(
            Principal::named(token),
            Action::FileRead {
                path: "tool-data".into(),
            },
            DENY(),
        );
        compare(&mixed, &r, "file_read");
        n += 1;
    }
    assert_eq!(n, 3 * (9 * 2 + 3 + 1));
}
