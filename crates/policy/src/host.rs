//! Host patterns for network rules and secret bindings.
//!
//! A pattern is an exact host (`api.example.com`, `203.0.113.7`, `[2001:db8::1]`)
//! or `*.` followed by a domain (`*.example.com`, which matches every name
//! *below* `example.com` but not `example.com` itself), with an optional
//! `:port` (no port means any port). Matching is case-insensitive and
//! tolerates one trailing dot. Internationalized names must be written in
//! their punycode form (`xn--...`); they are compared as written.
//!
//! Refused as mistakes: a bare `*`, a wildcard over a top-level domain
//! (`*.com`), a `*` anywhere else than as the whole first label, empty labels,
//! IP ranges (`10.0.0.0/8`, `10.*`, `*.0.0.10`), schemes, paths, user info and
//! port 0.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::units::ValueError;

const HOST_HINT: &str =
    "write a host such as api.example.com, a domain wildcard such as *.example.com, optionally with :port";

/// One host pattern, parsed and normalized (lower case, no trailing dot).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPattern {
    /// For an exact pattern the host; for a wildcard the domain after `*.`.
    /// IPv6 addresses are kept without brackets.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl HostPattern {
    /// Parses a pattern; see the module documentation for the grammar.
    pub fn parse(text: &str) -> Result<HostPattern, ValueError> {
        let s = text.trim();
        let err = |msg: String, hint: &str| Err(ValueError::new(msg, hint));
        if s.is_empty() {
            return err("an empty host pattern".into(), HOST_HINT);
        }
        if s == "*" || s == "*.*" || s.starts_with("*:") {
            return err(
                format!("'{text}' would allow every host"),
                "name the hosts the workload needs, e.g. pypi.org or *.pythonhosted.org",
            );
        }
        if let Some((scheme, rest)) = s.split_once("://") {
            let host = rest.split(['/', '?', '#']).next().unwrap_or("");
            return err(
                format!("'{text}' has a scheme ('{scheme}://')"),
                &format!("write the host only, e.g. {host}"),
            );
        }
        if s.contains('@') {
            return err(
                format!("'{text}' has user information ('@')"),
                "write the host only, e.g. api.example.com",
            );
        }
        if let Some((before, _)) = s.split_once('/') {
            let ip_like = before
                .chars()
                .all(|c| c.is_ascii_hexdigit() || ".:*[]".contains(c));
            if ip_like {
                return err(
                    format!("'{text}' is an IP range"),
                    "IP ranges are not supported as patterns: name hosts, or list single addresses",
                );
            }
            return err(
                format!("'{text}' has a path"),
                &format!("patterns match hosts, not URLs: write {before}"),
            );
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return err(format!("'{text}' contains whitespace"), HOST_HINT);
        }

        // Split off the port.
        let (host_part, port_part) = if let Some(rest) = s.strip_prefix('[') {
            let Some((v6, after)) = rest.split_once(']') else {
                return err(
                    format!("'{text}' has an unclosed '['"),
                    "write IPv6 addresses in brackets, e.g. [2001:db8::1]:443",
                );
            };
            if v6.contains('*') {
                return err(
                    format!("'{text}' is an IP range"),
                    "IP ranges are not supported as patterns: list single addresses",
                );
            }
            let Ok(addr) = v6.parse::<Ipv6Addr>() else {
                return err(
                    format!("'{text}' is not a valid IPv6 address"),
                    "write IPv6 addresses in brackets, e.g. [2001:db8::1]:443",
                );
            };
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => {
                        return err(
                            format!("'{text}' has text after the address"),
                            "write IPv6 addresses in brackets, e.g. [2001:db8::1]:443",
                        )
                    }
                },
            };
            let port = match port {
                Some(p) => Some(parse_port(text, p)?),
                None => None,
            };
            return Ok(HostPattern {
                host: addr.to_string(),
                wildcard: false,
                port,
            });
        } else {
            match s.matches(':').count() {
                0 => (s, None),
                1 => {
                    let (h, p) = s.split_at(s.find(':').unwrap_or(s.len()));
                    (h, Some(&p[1..]))
                }
                _ => {
                    return err(
                        format!("'{text}' has more than one ':'"),
                        "write IPv6 addresses in brackets, e.g. [2001:db8::1]:443",
                    )
                }
            }
        };
        let port = match port_part {
            Some(p) => Some(parse_port(text, p)?),
            None => None,
        };

        if !host_part.is_ascii() {
            return err(
                format!("'{text}' has non-ASCII characters"),
                "write internationalized names in their punycode form (xn--...)",
            );
        }
        let mut host = host_part.to_ascii_lowercase();
        if host.ends_with('.') {
            host.pop();
        }
        if host == "*" {
            return err(
                format!("'{text}' would allow every host"),
                "name the hosts the workload needs, e.g. pypi.org or *.pythonhosted.org",
            );
        }
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, host.clone()),
        };
        if name.contains('*') {
            return if name.split('.').all(|l| l == "*" || is_digits(l)) {
                err(
                    format!("'{text}' is an IP range"),
                    "IP ranges are not supported as patterns: list single addresses",
                )
            } else {
                err(
                    format!("'{text}' has a '*' that is not the whole first label"),
                    "a wildcard is written *.example.com and matches every name below example.com",
                )
            };
        }
        if name.is_empty() {
            return err(format!("'{text}' has no host"), HOST_HINT);
        }
        let labels: Vec<&str> = name.split('.').collect();
        if labels.iter().all(|l| is_digits(l)) {
            if wildcard {
                return err(
                    format!("'{text}' is an IP range"),
                    "IP ranges are not supported as patterns: list single addresses",
                );
            }
            return match name.parse::<Ipv4Addr>() {
                Ok(a) => Ok(HostPattern {
                    host: a.to_string(),
                    wildcard: false,
                    port,
                }),
                Err(_) => err(
                    format!("'{text}' is not a valid IPv4 address"),
                    "write four numbers 0-255 such as 203.0.113.7, or a host name",
                ),
            };
        }
        if name.len() > 253 {
            return err(
                format!("'{text}' is longer than 253 characters"),
                "a host name has at most 253 characters",
            );
        }
        for label in &labels {
            if label.is_empty() {
                return err(
                    format!(
                        "'{text}' has an empty label ('..' or a leading or extra trailing '.')"
                    ),
                    HOST_HINT,
                );
            }
            if label.len() > 63 {
                return err(
                    format!("'{text}' has a label longer than 63 characters"),
                    "each dot-separated part of a host name has at most 63 characters",
                );
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return err(
                    format!("'{text}' has a character not allowed in a host name"),
                    "host names use letters, digits, '-' and '_' between dots",
                );
            }
            if label.starts_with('-') || label.ends_with('-') {
                return err(
                    format!("'{text}' has a label that starts or ends with '-'"),
                    HOST_HINT,
                );
            }
        }
        if labels.last().is_some_and(|l| is_digits(l)) {
            return err(
                format!("'{text}' is neither a host name nor an IPv4 address"),
                "a host name does not end in a number; an IPv4 address has four numbers",
            );
        }
        if wildcard && labels.len() == 1 {
            return err(
                format!("'{text}' would allow every host under the top-level domain '{name}'"),
                "name the domain, e.g. *.example.com",
            );
        }
        Ok(HostPattern {
            host: name,
            wildcard,
            port,
        })
    }

    /// Whether a connection to `host`:`port` matches. `host` is compared
    /// case-insensitively, with one trailing dot ignored; IPv6 addresses may
    /// be given with or without brackets. A malformed host never matches.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let Some(h) = normalize_host(host) else {
            return false;
        };
        if self.wildcard {
            h.len() > self.host.len() + 1
                && h.ends_with(self.host.as_str())
                && h.as_bytes()[h.len() - self.host.len() - 1] == b'.'
        } else {
            h == self.host
        }
    }

    /// Whether every connection `other` matches is also matched by `self`.
    pub fn covers(&self, other: &HostPattern) -> bool {
        if let Some(p) = self.port {
            if other.port != Some(p) {
                return false;
            }
        }
        if !self.wildcard {
            return !other.wildcard && other.host == self.host;
        }
        let below = |name: &str| {
            name.len() > self.host.len() + 1
                && name.ends_with(self.host.as_str())
                && name.as_bytes()[name.len() - self.host.len() - 1] == b'.'
        };
        if other.wildcard {
            other.host == self.host || below(&other.host)
        } else {
            below(&other.host)
        }
    }

    /// `true` for `*.domain` patterns.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The host of an exact pattern, or the domain of a wildcard (without `*.`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, if the pattern names one.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn parse_port(text: &str, p: &str) -> Result<u16, ValueError> {
    if p == "*" {
        return Err(ValueError::new(
            format!("'{text}' has a port wildcard"),
            "leave out the port to allow any port",
        ));
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(ValueError::new(
            format!("'{text}' has an invalid port '{p}'"),
            "a port is a number from 1 to 65535, e.g. api.example.com:443",
        )),
        Ok(n) => Ok(n),
    }
}

/// Lower-cases a host from a request, strips one trailing dot and IPv6
/// brackets; `None` when it is not a well-formed name or address.
fn normalize_host(host: &str) -> Option<String> {
    if let Some(inner) = host.strip_prefix('[') {
        let v6 = inner.strip_suffix(']')?;
        return v6.parse::<Ipv6Addr>().ok().map(|a| a.to_string());
    }
    if host.contains(':') {
        return host.parse::<Ipv6Addr>().ok().map(|a| a.to_string());
    }
    let h = host.strip_suffix('.').unwrap_or(host);
    if h.is_empty() || h.len() > 253 {
        return None;
    }
    let ok = h.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if !ok {
        return None;
    }
    if h.split('.').all(is_digits) {
        return h.parse::<Ipv4Addr>().ok().map(|a| a.to_string());
    }
    Some(h.to_ascii_lowercase())
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

impl FromStr for HostPattern {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HostPattern::parse(s)
    }
}

impl Serialize for HostPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HostPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = HostPattern;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a host pattern such as \"api.example.com\" or \"*.example.com:443\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HostPattern, E> {
                HostPattern::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

impl JsonSchema for HostPattern {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HostPattern".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "An exact host (api.example.com, 203.0.113.7, [2001:db8::1]) or *.domain (every name below domain, not domain itself), optionally with :port. A bare * or *.tld is refused.",
            "minLength": 1
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap()
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
        assert!(pat.matches("A.EXAMPLE.COM.", 1));
        assert!(!pat.matches("example.com", 443));
        assert!(!pat.matches(".example.com", 443));
        assert!(!pat.matches("aexample.com", 443));
        assert!(!pat.matches("a.example.com.evil.net", 443));
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
        let w = p("*.example.com:8443");
        assert!(w.matches("a.example.com", 8443));
        assert!(!w.matches("a.example.com", 443));
        assert_eq!(w.to_string(), "*.example.com:8443");
        for bad in [
            "a.com:0",
            "a.com:65536",
            "a.com:",
            "a.com:x",
            "a.com:*",
            "a.com:-1",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
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
        let v6 = p("[2001:DB8::1]:443");
        assert_eq!(v6.to_string(), "[2001:db8::1]:443");
        assert!(v6.matches("[2001:db8:0::1]", 443));
        assert!(v6.matches("2001:db8::1", 443));
        assert!(!v6.matches("2001:db8::1", 80));
        assert!(!p("*.example.com").matches("2001:db8::1", 443));
    }

    #[test]
    fn mistakes_are_refused() {
        let cases: &[(&str, &str)] = &[
            ("*", "every host"),
            ("*.*", "every host"),
            ("*:443", "every host"),
            ("*.com", "top-level domain 'com'"),
            ("*.COM.", "top-level domain 'com'"),
            ("*.internal", "top-level domain"),
            ("", "empty"),
            ("a..b.com", "empty label"),
            (".example.com", "empty label"),
            ("example.com..", "empty label"),
            ("*.", "every host"),
            ("*..", "no host"),
            ("10.0.0.0/8", "IP range"),
            ("10.*", "IP range"),
            ("10.0.*.*", "IP range"),
            ("*.0.0.10", "IP range"),
            ("[2001:db8::*]", "IP range"),
            ("[fe80::]/10", "IP range"),
            ("300.1.1.1", "not a valid IPv4"),
            ("10.0.0", "not a valid IPv4"),
            ("example.123", "neither a host name"),
            ("a*.example.com", "not the whole first label"),
            ("a.*.example.com", "not the whole first label"),
            ("*example.com", "not the whole first label"),
            ("**.example.com", "not the whole first label"),
            ("https://api.example.com/v1", "scheme"),
            ("api.example.com/v1", "path"),
            ("user@api.example.com", "user information"),
            ("2001:db8::1", "more than one ':'"),
            ("[2001:db8::1", "unclosed"),
            ("[nonsense]", "not a valid IPv6"),
            ("exa mple.com", "whitespace"),
            ("exa$mple.com", "not allowed"),
            ("-a.example.com", "starts or ends with '-'"),
        ];
        for (text, want) in cases {
            let e = HostPattern::parse(text).unwrap_err();
            assert!(
                e.message.contains(want),
                "{text:?}: got {:?}, wanted {want:?}",
                e.message
            );
            assert!(!e.hint.is_empty());
        }
        let long = format!("{}.com", "a".repeat(64));
        assert!(HostPattern::parse(&long).is_err());
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
    }
}
