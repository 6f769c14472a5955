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
