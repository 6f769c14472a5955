//! Host rules: `host`, `*.suffix`, each with an optional `:port`.
//!
//! Matching is case-insensitive and ignores one trailing dot, so `EVIL.com.`
//! is the same host as `evil.com`. `*.example.com` matches every name below
//! `example.com` (`a.example.com`, `a.b.example.com`) but not `example.com`
//! itself; list both when both are meant.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use crate::error::RuleError;

/// Second-level labels under which registrations are public (a small list of
/// the common ones), so `*.co.uk` is refused like `*.com`.
const PUBLIC_SECOND_LEVEL: &[&str] = &[
    "co.uk", "org.uk", "ac.uk", "gov.uk", "me.uk", "ltd.uk", "plc.uk", "com.au", "net.au",
    "org.au", "edu.au", "gov.au", "co.jp", "ne.jp", "or.jp", "co.nz", "org.nz", "com.br", "com.cn",
    "net.cn", "org.cn", "co.in", "co.za", "com.mx", "com.tr", "co.kr", "com.tw", "com.hk",
    "com.sg",
];

/// What a rule's host part matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this host (lower case, no trailing dot), a name or an IP literal.
    Exact(String),
    /// Any name strictly below this suffix (`*.suffix`; stored without `*.`).
    Subdomains(String),
}

/// One allow / deny / rate-limit rule: a host pattern and an optional port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostRule {
    pub pattern: HostPattern,
    /// `None` matches every port.
    pub port: Option<u16>,
}

impl HostRule {
    /// Parses `host`, `*.suffix`, `host:port`, `*.suffix:port`, `1.2.3.4:80`,
    /// `[2001:db8::1]:443` or `2001:db8::1`.
    ///
    /// Refused as mistakes: empty input, a bare `*`, a wildcard that covers a
    /// whole top-level or public second-level domain (`*.com`, `*.co.uk`),
    /// wildcards anywhere but the leading label, a wildcard over an IP
    /// address, characters that cannot be in a host name, and port 0.
    pub fn parse(input: &str) -> Result<Self, RuleError> {
        let err = |reason: &str| RuleError {
            rule: input.to_string(),
            reason: reason.to_string(),
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty rule"));
        }
        // Split off the port, minding bracketed and bare IPv6 literals.
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let end = rest
                .find(']')
                .ok_or_else(|| err("unclosed '[' in an IPv6 address"))?;
            let host = &rest[..end];
            let after = &rest[end + 1..];
            let port = match after {
                "" => None,
                p => Some(parse_port(
                    p.strip_prefix(':')
                        .ok_or_else(|| err("expected ':port' after ']'"))?,
                    &err,
                )?),
            };
            if host.parse::<Ipv6Addr>().is_err() {
                return Err(err("brackets hold something that is not an IPv6 address"));
            }
            (host.to_string(), port)
        } else if s.matches(':').count() > 1 {
            if s.parse::<Ipv6Addr>().is_err() {
                return Err(err(
                    "too many ':' (write IPv6 addresses with a port as [addr]:port)",
                ));
            }
            (s.to_string(), None)
        } else if let Some((h, p)) = s.rsplit_once(':') {
            (h.to_string(), Some(parse_port(p, &err)?))
        } else {
            (s.to_string(), None)
        };

        let host = normalize_host(&host);
        if host == "*" || host == "*." {
            return Err(err(
                "a bare '*' allows every host; list the hosts that are needed",
            ));
        }
        if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err(err("only the leading label may be '*'"));
            }
            if suffix.parse::<IpAddr>().is_ok() || all_numeric_labels(suffix) {
                return Err(err("a wildcard cannot be applied to an IP address"));
            }
            validate_name(suffix).map_err(|r| err(&r))?;
            if !suffix.contains('.') {
                return Err(err(&format!(
                    "'*.{suffix}' matches a whole top-level domain; name the domain (e.g. '*.example.{suffix}')"
                )));
            }
            if PUBLIC_SECOND_LEVEL.contains(&suffix) {
                return Err(err(&format!(
                    "'*.{suffix}' matches a whole public registry; name the domain under it"
                )));
            }
            return Ok(Self {
                pattern: HostPattern::Subdomains(suffix.to_string()),
                port,
            });
        }
        if host.contains('*') {
            return Err(err(
                "'*' is only allowed as the whole leading label ('*.example.com')",
            ));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Self {
                pattern: HostPattern::Exact(ip.to_string()),
                port,
            });
        }
        validate_name(&host).map_err(|r| err(&r))?;
        if all_numeric_labels(&host) {
            return Err(err("not a valid IPv4 address or host name"));
        }
        Ok(Self {
            pattern: HostPattern::Exact(host),
            port,
        })
    }

    /// Whether this rule covers `host:port`. `host` must already be
    /// normalized ([`normalize_host`]).
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if let Some(p) = self.port {
            if p != port {
                return false;
            }
        }
        match &self.pattern {
            HostPattern::Exact(h) => h == host,
            HostPattern::Subdomains(suffix) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
        }
    }
}

impl FromStr for HostRule {
    type Err = RuleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = match &self.pattern {
            HostPattern::Exact(h) => h.clone(),
            HostPattern::Subdomains(s) => format!("*.{s}"),
        };
        let bracket = host.contains(':');
        match (self.port, bracket) {
            (Some(p), true) => write!(f, "[{host}]:{p}"),
            (Some(p), false) => write!(f, "{host}:{p}"),
            (None, _) => f.write_str(&host),
        }
    }
}

fn parse_port(p: &str, err: &dyn Fn(&str) -> RuleError) -> Result<u16, RuleError> {
    match p.parse::<u16>() {
        Ok(0) => Err(err("port 0 is not a port")),
        Ok(n) if !p.starts_with('+') => Ok(n),
        _ => Err(err("the port must be a number from 1 to 65535")),
    }
}

/// Lower-cases a host and drops one trailing dot.
pub fn normalize_host(host: &str) -> String {
    let h = host.strip_suffix('.').unwrap_or(host);
    h.to_ascii_lowercase()
}

fn all_numeric_labels(name: &str) -> bool {
    // `127.1`, `2130706433` and `0x7f.1` would be read by resolvers as IPv4
    // addresses; refusing them keeps rules and requests unambiguous.
    name.rsplit('.').next().is_some_and(|last| {
        !last.is_empty()
            && (last.bytes().all(|b| b.is_ascii_digit())
                || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit())))
    })
}

/// Checks a DNS name (already lower case): labels of `[a-z0-9_-]`, 1..=63
/// bytes each, 253 in all, no leading or trailing hyphen.
pub(crate) fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty host name".into());
    }
    if name.len() > 253 {
        return Err("host name longer than 253 bytes".into());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("empty label in host name ('..' or a leading dot)".into());
        }
        if label.len() > 63 {
            return Err("a label longer than 63 bytes".into());
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!("character {c:?} cannot be in a host name"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label starts or ends with '-'".into());
        }
    }
    Ok(())
}

/// A destination host as the proxy understands it after parsing a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DestHost {
    Name(String),
    Ip(IpAddr),
}

impl DestHost {
    /// Parses a host from a request (URL authority, CONNECT target, SOCKS5
    /// domain). Brackets around IPv6 must already be removed.
    pub(crate) fn parse(raw: &str) -> Result<Self, String> {
        if let Ok(ip) = raw.parse::<IpAddr>() {
            return Ok(Self::Ip(ip));
        }
        let host = normalize_host(raw);
        validate_name(&host)?;
        if all_numeric_labels(&host) {
            return Err(format!("ambiguous numeric host {raw:?}"));
        }
        Ok(Self::Name(host))
    }

    /// The canonical text form used for rule matching and events.
    pub(crate) fn as_text(&self) -> String {
        match self {
            Self::Name(n) => n.clone(),
            Self::Ip(ip) => ip.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms() {
        let r = HostRule::parse("API.GitHub.com:443").unwrap();
        assert_eq!(r.pattern, HostPattern::Exact("api.github.com".into()));
        assert_eq!(r.port, Some(443));
        let r = HostRule::parse("*.pythonhosted.org").unwrap();
        assert_eq!(
            r.pattern,
            HostPattern::Subdomains("pythonhosted.org".into())
        );
        assert_eq!(r.port, None);
        let r = HostRule::parse("[2001:db8::1]:443").unwrap();
        assert_eq!(r.pattern, HostPattern::Exact("2001:db8::1".into()));
        assert_eq!(r.port, Some(443));
        assert_eq!(r.to_string(), "[2001:db8::1]:443");
        let r = HostRule::parse("2001:db8::1").unwrap();
        assert_eq!(r.port, None);
        let r = HostRule::parse("10.0.0.1:8080").unwrap();
        assert_eq!(r.to_string(), "10.0.0.1:8080");
        assert_eq!(
            HostRule::parse("example.com.").unwrap().to_string(),
            "example.com"
        );
    }

    #[test]
    fn refuses_mistakes() {
        for bad in [
            "",
            "*",
            "*.",
            "*.com",
            "*.CO.UK",
            "a.*.com",
            "*x.com",
            "**.example.com",
            "*.*.example.com",
            "exa mple.com",
            "example.com:0",
            "example.com:99999",
            "example.com:",
            "example.com:+80",
            "*.10.0.0.1",
            "a..b",
            "-a.com",
            "ex%61mple.com",
            "127.1",
            "2130706433",
            "[::1",
            "[nothost]:80",
            "a:b:c",
        ] {
            let e = HostRule::parse(bad);
            assert!(e.is_err(), "{bad:?} should be refused, got {e:?}");
        }
        let e = HostRule::parse("*.com").unwrap_err().to_string();
        assert!(e.contains("*.com"), "{e}");
    }

    #[test]
    fn matching() {
        let r = HostRule::parse("*.example.com").unwrap();
        assert!(r.matches("a.example.com", 443));
        assert!(r.matches("a.b.example.com", 80));
        assert!(!r.matches("example.com", 443));
        assert!(!r.matches("badexample.com", 443));
        assert!(!r.matches("example.com.evil", 443));
        let r = HostRule::parse("example.com:443").unwrap();
        assert!(r.matches("example.com", 443));
        assert!(!r.matches("example.com", 80));
        assert!(!r.matches("www.example.com", 443));
    }

    #[test]
    fn dest_host() {
        assert_eq!(
            DestHost::parse("Example.COM.").unwrap(),
            DestHost::Name("example.com".into())
        );
        assert!(matches!(DestHost::parse("::1").unwrap(), DestHost::Ip(_)));
        assert!(DestHost::parse("0x7f.1").is_err());
        assert!(DestHost::parse("127.1").is_err());
        assert!(DestHost::parse("a/b").is_err());
        assert!(DestHost::parse("").is_err());
    }
}
