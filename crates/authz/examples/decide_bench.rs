//! Policy decision latency: a policy of 100 rules against the builtin
//! authorizer and an empty policy, in the same run.
//!
//! cargo run --release -p cordon-authz --example decide_bench [-- ITERATIONS]
//!
//! Prints the median, p90 and p99 of single decisions, each timed on its own.

use cordon_authz::{Action, Authorizer, DefaultVerdict, Principal, Request};
use std::time::Instant;

/// 100 rules over every action kind: forbids, asks, permits, limits.
/// Each template is repeated `count` times with `{i}` replaced.
const TEMPLATES: [(usize, &str); 7] = [
    (20, "@id(\"exec-{i}\")\npermit(principal == Token::\"agent-{i}\", action == Action::\"exec\", resource)\nwhen { context.command like \"tool{i} *\" && context.argc < 20 };"),
    (20, "@id(\"egress-{i}\")\npermit(principal, action == Action::\"egress\", resource)\nwhen { context.host like \"*.service{i}.example\" && context.port == 443 };"),
    (15, "@id(\"no-secret-{i}\")\nforbid(principal, action == Action::\"exec\", resource)\nwhen { context.findings.contains(\"rule-{i}\") };"),
    (15, "@id(\"ask-write-{i}\")\n@ask\npermit(principal, action == Action::\"file_write\", resource)\nwhen { context.path like \"/work/area{i}/*\" };"),
    (10, "@id(\"limits-{i}\")\n@limit_memory(\"{i}GiB\")\npermit(principal, action == Action::\"raise_limits\", resource)\nwhen { context has memory && context.memory <= {i}000000000 };"),
    (10, "@id(\"tool-{i}\")\npermit(principal, action == Action::\"tool_call\", resource == Tool::\"server{i}/read\");"),
    (10, "@id(\"night-{i}\")\nforbid(principal == Token::\"night-{i}\", action, resource)\nwhen { context.hour < 6 };"),
];

fn hundred_rules() -> String {
    let mut src = String::new();
    for (count, template) in TEMPLATES {
        for i in 0..count {
            src.push_str(&template.replace("{i}", &(i + 1).to_string()));
            src.push_str("\n\n");
        }
    }
    src
}

/// The worst case for the index by action: 100 rules that all apply to
/// exec, for any principal (forbids on findings, asks, permits on commands).
fn hundred_exec_rules() -> String {
    let mut src = String::new();
    for i in 1..=100 {
        let rule = match i % 4 {
            0 => format!("@id(\"f{i}\")\nforbid(principal, action == Action::\"exec\", resource)\nwhen {{ context.findings.contains(\"rule-{i}\") }};"),
            1 => format!("@id(\"a{i}\")\n@ask\npermit(principal, action == Action::\"exec\", resource == Program::\"prog{i}\");"),
            _ => format!("@id(\"p{i}\")\npermit(principal, action == Action::\"exec\", resource)\nwhen {{ context.command like \"tool{i} *\" && context.argc < 20 }};"),
        };
        src.push_str(&rule);
        src.push_str("\n\n");
    }
    src
}

/// The worst case for every index: 100 rules on exec for any principal
/// and any resource, each evaluated (half forbids on findings, half permits
/// on the command line), of which none matches the request measured.
fn hundred_unscoped_exec_rules() -> String {
    let mut src = String::new();
    for i in 1..=100 {
        let rule = if i % 2 == 0 {
            format!("@id(\"f{i}\")\nforbid(principal, action == Action::\"exec\", resource)\nwhen {{ context.findings.contains(\"rule-{i}\") }};")
        } else {
            format!("@id(\"p{i}\")\npermit(principal, action == Action::\"exec\", resource)\nwhen {{ context.command like \"tool{i} *\" && context.argc < 20 }};")
        };
        src.push_str(&rule);
        src.push_str("\n\n");
    }
    src
}

fn request() -> Request {
    let mut r = Request::new(
        Principal {
            name: "agent-7".into(),
            preset: Some("trusted".into()),
        },
        Action::Exec {
            argv: ["tool7", "build", "--release", "-j", "2"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        },
        DefaultVerdict::Deny {
            rule: "profile:on_unlisted".into(),
        },
    );
    r.session = Some("sb_0123".into());
    r.findings = vec!["rule-99".into()];
    r
}

fn measure(name: &str, a: &Authorizer, req: &Request, n: usize) -> f64 {
    let expect = a.decide(req);
    for _ in 0..n / 10 {
        std::hint::black_box(a.decide(std::hint::black_box(req)));
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let d = a.decide(std::hint::black_box(req));
        samples.push(t.elapsed().as_nanos() as f64 / 1000.0);
        assert_eq!(d, expect);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "{name:<34} rules {:>3}  median {:>7.2} us  p90 {:>7.2} us  p99 {:>7.2} us  -> {} by {}",
        a.rule_count(),
        at(0.5),
        at(0.9),
        at(0.99),
        expect.effect.name(),
        expect.rule
    );
    at(0.5)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let src = hundred_rules();
    let policy = Authorizer::parse(&src, "bench.cedar")?;
    assert_eq!(policy.rule_count(), 100);
    let empty = Authorizer::parse("", "empty.cedar")?;
    let req = request();
    println!("{n} decisions each, one request: exec of a 5-word argv by a token with a preset");
    measure("builtin (no policy)", &Authorizer::builtin(), &req, n);
    measure("empty policy (Cedar, 0 rules)", &empty, &req, n);
    let median = measure("100 rules over every action", &policy, &req, n);
    let mut miss = req.clone();
    miss.principal.name = "nobody".into();
    miss.action = Action::Exec {
        argv: vec!["untouched".into(), "--flag".into()],
    };
    let miss_median = measure("100 rules over every action, no match", &policy, &miss, n);
    let exec_only = Authorizer::parse(&hundred_exec_rules(), "exec.cedar")?;
    assert_eq!(exec_only.rule_count(), 100);
    let on_exec = measure("100 rules all on exec", &exec_only, &req, n);
    let on_exec_miss = measure("100 rules all on exec, no match", &exec_only, &miss, n);
    let unscoped = Authorizer::parse(&hundred_unscoped_exec_rules(), "unscoped.cedar")?;
    assert_eq!(unscoped.rule_count(), 100);
    let worst = measure(
        "100 unscoped rules on exec, all evaluated, no match",
        &unscoped,
        &miss,
        n,
    );
    let verdict = |m: f64| if m <= 50.0 { "met" } else { "NOT met" };
    println!(
        "target: median <= 50 us with 100 rules: {} (over every action), {} (all on exec), {} (worst case: all 100 evaluated)",
        verdict(median.max(miss_median)),
        verdict(on_exec.max(on_exec_miss)),
        verdict(worst)
    );
    Ok(())
}
