//! The pattern language: every accepted form, every refused mistake, matching
//! and coverage.

use serde::{Deserialize, Serialize};

use crate::{check_host_name, HostPattern};

fn p(s: &str) -> HostPattern {
    HostPattern::parse(s).unwrap()
}

#[test]
fn parses_forms() {
    let r = p("API.GitHub.com:443");
    assert_eq!(r.host(), "api.github.com");
    assert!(!r.is_wildcard());
    assert_eq!(r.port(), Some(443));
    let r = p("*.pythonhosted.org");
    assert_eq!(r.host(), "pythonhosted.org");
    assert!(r.is_wildcard());
    assert_eq!(r.port(), None);
    let r = p("[2001:db8::1]:443");
    assert_eq!(r.host(), "2001:db8::1");
    assert_eq!(r.port(), Some(443));
    assert_eq!(r.to_string(), "[2001:db8::1]:443");
    let r = p("10.0.0.1:8080");
    assert_eq!(r.to_string(), "10.0.0.1:8080");
    assert_eq!(p("example.com.").to_string(), "example.com");
    assert_eq!(p("  pypi.org\t").to_string(), "pypi.org");
    assert_eq!("a.test".parse::<HostPattern>().unwrap(), p("a.test"));
}

#[test]
fn exact_hosts() {
    let pat = p("api.example.com");
    assert!(pat.matches("api.example.com", 443));
    assert!(pat.matches("API.Example.COM", 80));
    assert!(pat.matches("api.example.com.", 443));
    assert!(!pat.matches("api.example.com..", 443));
    assert!(!pat.matches("example.com", 443));
    assert!(!pat.matches("x.api.example.com", 443));
    assert!(!pat.matches("api.example.com.evil.net", 443));
    assert!(!pat.matches("", 443));
    assert!(!pat.matches("api.example.com\0", 443));
    assert!(!pat.matches("api example.com", 443));
    // Pattern normalization: case and one trailing dot.
    assert_eq!(p("API.Example.com."), pat);
    assert_eq!(p("API.Example.com.").to_string(), "api.example.com");
}

#[test]
fn wildcards() {
    let pat = p("*.example.com");
    assert!(pat.matches("a.example.com", 443));
    assert!(pat.matches("a.b.example.com", 443));
    assert!(pat.matches("a.b.example.com", 80));
    assert!(pat.matches("A.EXAMPLE.COM.", 1));
    assert!(!pat.matches("example.com", 443));
    assert!(!pat.matches(".example.com", 443));
    assert!(!pat.matches("aexample.com", 443));
    assert!(!pat.matches("badexample.com", 443));
    assert!(!pat.matches("a.example.com.evil.net", 443));
    assert!(!pat.matches("example.com.evil", 443));
    assert!(!pat.matches("example.com.a", 443));
    assert!(!pat.matches("a..example.com", 443));

    // A hostile-looking but valid pattern means what it says.
    let hostile = p("*.evil.com.good.com");
    assert!(hostile.matches("x.evil.com.good.com", 443));
    assert!(!hostile.matches("evil.com", 443));
    assert!(!hostile.matches("good.com", 443));
    assert!(!hostile.matches("x.good.com", 443));
    assert!(!hostile.matches("evil.com.good.com", 443));
}

#[test]
fn ports() {
    let pat = p("api.example.com:443");
    assert_eq!(pat.port(), Some(443));
    assert!(pat.matches("api.example.com", 443));
    assert!(!pat.matches("api.example.com", 80));
    assert!(!pat.matches("www.example.com", 443));
    let w = p("*.example.com:8443");
    assert!(w.matches("a.example.com", 8443));
    assert!(!w.matches("a.example.com", 443));
    assert_eq!(w.to_string(), "*.example.com:8443");
    assert_eq!(p("a.com:65535").port(), Some(65535));
    for bad in [
        "a.com:0",
        "a.com:65536",
        "a.com:99999",
        "a.com:",
        "a.com:x",
        "a.com:*",
        "a.com:-1",
        "a.com:+80",
        "a.com: 80",
        "[2001:db8::1]:0",
        "[2001:db8::1]:+443",
    ] {
        let e = HostPattern::parse(bad);
        assert!(e.is_err(), "{bad:?} should be refused, got {e:?}");
    }
    assert!(HostPattern::parse("a.com:*")
        .unwrap_err()
        .message
        .contains("port wildcard"));
    assert!(HostPattern::parse("a.com:0")
        .unwrap_err()
        .message
        .contains("invalid port '0'"));
}

#[test]
fn punycode_left_as_is() {
    let pat = p("xn--bcher-kva.example");
    assert!(pat.matches("XN--BCHER-KVA.example", 443));
    assert!(!pat.matches("bücher.example", 443));
    let e = HostPattern::parse("bücher.example").unwrap_err();
    assert!(e.hint.contains("punycode"), "{e}");
}

#[test]
fn ip_addresses() {
    let v4 = p("203.0.113.7");
    assert!(v4.matches("203.0.113.7", 443));
    assert!(!v4.matches("203.0.113.70", 443));
    assert_eq!(p("10.0.0.1.").to_string(), "10.0.0.1");
    let v6 = p("[2001:DB8::1]:443");
    assert_eq!(v6.to_string(), "[2001:db8::1]:443");
    assert!(v6.matches("[2001:db8:0::1]", 443));
    assert!(v6.matches("2001:db8::1", 443));
    assert!(!v6.matches("2001:db8::1", 80));
    assert!(!v6.matches("[2001:db8::1", 443));
    assert!(!p("*.example.com").matches("2001:db8::1", 443));
    let mapped = p("[::ffff:127.0.0.1]");
    assert!(mapped.matches("::ffff:127.0.0.1", 80));
    assert!(!mapped.matches("127.0.0.1", 80));
}

#[test]
fn mistakes_are_refused() {
    let cases: &[(&str, &str)] = &[
        ("*", "a bare '*' would allow every host"),
        ("*.*", "every host"),
        ("*:443", "every host"),
        ("*.", "every host"),
        ("*.com", "top-level domain 'com'"),
        ("*.COM.", "top-level domain 'com'"),
        ("*.internal", "top-level domain"),
        ("*.CO.UK", "public registry 'co.uk'"),
        ("*.com.au:443", "public registry 'com.au'"),
        ("", "empty"),
        ("a..b.com", "empty label"),
        ("a..b", "empty label"),
        (".example.com", "empty label"),
        ("example.com..", "empty label"),
        ("*..", "no host"),
        ("10.0.0.0/8", "IP range"),
        ("10.*", "IP range"),
        ("10.0.*.*", "IP range"),
        ("*.0.0.10", "IP range"),
        ("*.10.0.0.1", "IP range"),
        ("[2001:db8::*]", "IP range"),
        ("[fe80::]/10", "IP range"),
        ("300.1.1.1", "not a valid IPv4"),
        ("10.0.0", "not a valid IPv4"),
        ("127.1", "not a valid IPv4"),
        ("2130706433", "not a valid IPv4"),
        ("example.123", "neither a host name"),
        ("a.0x7f", "neither a host name"),
        ("a.*.example.com", "not the whole first label"),
        ("a.*.com", "not the whole first label"),
        ("a*.example.com", "not the whole first label"),
        ("*x.com", "not the whole first label"),
        ("*example.com", "not the whole first label"),
        ("**.example.com", "not the whole first label"),
        ("*.*.example.com", "not the whole first label"),
        ("https://api.example.com/v1", "scheme"),
        ("api.example.com/v1", "path"),
        ("user@api.example.com", "user information"),
        ("2001:db8::1", "more than one ':'"),
        ("a:b:c", "more than one ':'"),
        ("[2001:db8::1", "unclosed"),
        ("[::1", "unclosed"),
        ("[nonsense]", "not a valid IPv6"),
        ("[nothost]:80", "not a valid IPv6"),
        ("[2001:db8::1]443", "text after the address"),
        ("exa mple.com", "whitespace"),
        ("exa$mple.com", "not allowed"),
        ("ex%61mple.com", "not allowed"),
        ("-a.example.com", "starts or ends with '-'"),
        ("-a.com", "starts or ends with '-'"),
        ("a-.com", "starts or ends with '-'"),
    ];
    for (text, want) in cases {
        let e = HostPattern::parse(text).unwrap_err();
        assert!(
            e.message.contains(want),
            "{text:?}: got {:?}, wanted {want:?}",
            e.message
        );
        assert!(!e.hint.is_empty());
        // The message names the input (or is about an empty one), and never
        // holds the "; " that separates it from the hint.
        assert!(
            e.message.contains(text.trim()) || text.is_empty(),
            "{text:?}: {e}"
        );
        assert!(!e.message.contains("; "), "{text:?}: {e}");
        assert_eq!(e.to_string(), format!("{}; {}", e.message, e.hint));
    }
    let long_label = format!("{}.com", "a".repeat(64));
    assert!(HostPattern::parse(&long_label)
        .unwrap_err()
        .message
        .contains("label longer than 63"));
    let long_name = format!("{}.com", vec!["a".repeat(60); 5].join("."));
    assert!(HostPattern::parse(&long_name)
        .unwrap_err()
        .message
        .contains("longer than 253"));
    let e = HostPattern::parse("*.com").unwrap_err();
    assert_eq!(
        e.to_string(),
        "'*.com' would allow every host under the top-level domain 'com'; name the domain, e.g. *.example.com"
    );
}

/// The profile's patterns and the proxy's rules used to be parsed by two
/// parsers that disagreed; each case here is one disagreement, settled on
/// the stricter side.
#[test]
fn former_differences_settled_strictly() {
    // IPv6 without brackets: `2001:db8::1:443` reads as an address or as an
    // address and a port. Brackets only.
    for bare in ["2001:db8::1", "::1", "::ffff:127.0.0.1", "2001:db8::1:443"] {
        let e = HostPattern::parse(bare).unwrap_err();
        assert!(e.message.contains("more than one ':'"), "{bare}: {e}");
        assert!(e.hint.contains("brackets"), "{bare}: {e}");
        assert!(HostPattern::parse(&format!("[{bare}]")).is_ok(), "{bare}");
    }
    // A signed port is not a port.
    assert!(HostPattern::parse("example.com:+80").is_err());
    // A wildcard over a public second-level registry is as broad as one
    // over a top-level domain.
    for broad in ["*.co.uk", "*.com.au", "*.co.jp"] {
        let e = HostPattern::parse(broad).unwrap_err();
        assert!(e.message.contains("public registry"), "{broad}: {e}");
        assert!(e.message.contains(broad), "{broad}: {e}");
    }
    assert!(HostPattern::parse("*.example.co.uk").is_ok());
    // A name whose last label is a hexadecimal number reads as an IPv4
    // address to URL parsers (0x7f.0x0.0x0.0x1 is 127.0.0.1).
    for numeric in ["0x7f.0x0.0x0.0x1", "a.0x7f", "a.0x", "*.example.0x1f"] {
        let e = HostPattern::parse(numeric).unwrap_err();
        assert!(e.message.contains("neither a host name"), "{numeric}: {e}");
    }
    assert!(HostPattern::parse("0x7f.example").is_ok());
    // A host is compared in canonical form whatever the caller passes.
    assert!(p("example.com").matches("EXAMPLE.COM.", 443));
    assert!(p("*.example.com").matches("A.Example.COM", 443));
    assert!(p("[2001:db8::1]").matches("2001:DB8:0:0::1", 443));
    // An exact IPv6 pattern is written with brackets, so that its text
    // parses again.
    let v6 = p("[2001:db8::1]");
    assert_eq!(v6.to_string(), "[2001:db8::1]");
    assert_eq!(p(&v6.to_string()), v6);
}

#[test]
fn text_form_round_trips() {
    for text in [
        "api.example.com",
        "*.example.com:443",
        "203.0.113.7:8080",
        "[2001:db8::1]:443",
        "[::1]",
        "xn--bcher-kva.example",
        "under_score.example",
    ] {
        let pat = p(text);
        assert_eq!(pat.to_string(), text);
        assert_eq!(p(&pat.to_string()), pat);
    }
}

#[test]
fn coverage() {
    assert!(p("*.github.com").covers(&p("api.github.com")));
    assert!(p("*.github.com").covers(&p("*.api.github.com")));
    assert!(p("*.github.com").covers(&p("*.github.com:443")));
    assert!(!p("*.github.com").covers(&p("github.com")));
    assert!(!p("*.github.com:443").covers(&p("api.github.com")));
    assert!(p("*.github.com:443").covers(&p("api.github.com:443")));
    assert!(p("api.github.com").covers(&p("api.github.com:443")));
    assert!(!p("api.github.com").covers(&p("*.api.github.com")));
    assert!(!p("api.github.com:443").covers(&p("api.github.com")));
    assert!(!p("*.hub.com").covers(&p("api.github.com")));
}

#[test]
fn host_names() {
    for good in [
        "example.com",
        "a-b.c_d.example",
        "xn--bcher-kva.example",
        "x",
    ] {
        assert!(check_host_name(good).is_ok(), "{good}");
    }
    for (bad, want) in [
        ("", "no host"),
        ("a..b", "empty label"),
        (".a", "empty label"),
        ("a/b", "not allowed"),
        ("a b", "not allowed"),
        ("-a.com", "starts or ends with '-'"),
        ("127.1", "neither a host name"),
        ("2130706433", "neither a host name"),
        ("0x7f.1", "neither a host name"),
        ("a.0x7f", "neither a host name"),
    ] {
        let e = check_host_name(bad).unwrap_err();
        assert!(e.message.contains(want), "{bad:?}: {e}");
    }
    assert!(check_host_name(&"a".repeat(64)).is_err());
    assert!(check_host_name(&vec!["a".repeat(60); 5].join(".")).is_err());
}

#[test]
fn serde_round_trip() {
    #[derive(Deserialize, Serialize)]
    struct T {
        h: Vec<HostPattern>,
    }
    let t: T = toml::from_str("h = [\"*.Example.com:443\", \"pypi.org\"]").unwrap();
    assert_eq!(
        toml::to_string(&t).unwrap(),
        "h = [\"*.example.com:443\", \"pypi.org\"]\n"
    );
    assert!(toml::from_str::<T>("h = [\"*\"]").is_err());
    let e = toml::from_str::<T>("h = [\"*.co.uk\"]").err().unwrap();
    assert!(e.to_string().contains("public registry"), "{e}");
}
