//! The pattern type: parsing, matching, coverage and the text form.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::error::PatternError;
use crate::name::{canonical_host, is_below, is_digits, name_fault, HOST_HINT};

const EVERY_HOST_HINT: &str =
    "name the hosts the workload needs, e.g. pypi.org or *.pythonhosted.org";
const IPV6_HINT: &str = "write IPv6 addresses in brackets, e.g. [2001:db8::1]:443";
const RANGE_HINT: &str = "IP ranges are not supported as patterns: list single addresses";

/// Second-level labels under which anyone may register a name (a small list
/// of the common ones), so `*.co.uk` is refused like `*.com`.
const PUBLIC_SECOND_LEVEL: &[&str] = &[
    "co.uk", "org.uk", "ac.uk", "gov.uk", "me.uk", "ltd.uk", "plc.uk", "com.au", "net.au",
    "org.au", "edu.au", "gov.au", "co.jp", "ne.jp", "or.jp", "co.nz", "org.nz", "com.br", "com.cn",
    "net.cn", "org.cn", "co.in", "co.za", "com.mx", "com.tr", "co.kr", "com.tw", "com.hk",
    "com.sg",
];

/// One host pattern, parsed and normalized (lower case, no trailing dot, IP
/// addresses in canonical form). See the crate documentation for the
/// grammar.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPattern {
    /// For an exact pattern the host; for a wildcard the domain after `*.`.
    /// IPv6 addresses are kept without brackets.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

/// Refuse what is no host pattern at all, before a host is looked for:
/// nothing, every host (`*`, `*.*`, `*:443`), a URL (a scheme, user
/// information, a path), an IP range, whitespace.
fn refuse_what_is_not_a_host(text: &str, s: &str) -> Result<(), PatternError> {
    let err = |msg: String, hint: &str| Err(PatternError::new(msg, hint));
    if s.is_empty() {
        return err("an empty host pattern".into(), HOST_HINT);
    }
    if s == "*" {
        return err("a bare '*' would allow every host".into(), EVERY_HOST_HINT);
    }
    if s == "*.*" || s.starts_with("*:") {
        return err(format!("'{text}' would allow every host"), EVERY_HOST_HINT);
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
    Ok(())
}

/// The host part of a pattern without brackets: a name (with `*.` for
/// every name below it) or an IPv4 address; never a wildcard over a
/// top-level domain or a public registry.
fn named_host(text: &str, host_part: &str, port: Option<u16>) -> Result<HostPattern, PatternError> {
    let err = |msg: String, hint: &str| Err(PatternError::new(msg, hint));
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
        return err(format!("'{text}' would allow every host"), EVERY_HOST_HINT);
    }
    let (wildcard, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest.to_string()),
        None => (false, host),
    };
    if name.contains('*') {
        return if name.split('.').all(|l| l == "*" || is_digits(l)) {
            err(format!("'{text}' is an IP range"), RANGE_HINT)
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
    if name.split('.').all(is_digits) {
        if wildcard {
            return err(format!("'{text}' is an IP range"), RANGE_HINT);
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
    if let Some(fault) = name_fault(&name) {
        return Err(fault.error(text));
    }
    if wildcard && !name.contains('.') {
        return err(
            format!("'{text}' would allow every host under the top-level domain '{name}'"),
            "name the domain, e.g. *.example.com",
        );
    }
    if wildcard && PUBLIC_SECOND_LEVEL.contains(&name.as_str()) {
        return err(
            format!("'{text}' would allow every host under the public registry '{name}'"),
            &format!("name the domain under it, e.g. *.example.{name}"),
        );
    }
    Ok(HostPattern {
        host: name,
        wildcard,
        port,
    })
}

impl HostPattern {
    /// Parses a pattern such as `api.example.com`, `*.example.com:443`,
    /// `203.0.113.7:8080` or `[2001:db8::1]:443`. Surrounding white space is
    /// ignored. The error names the input, what is wrong and what to write.
    pub fn parse(text: &str) -> Result<HostPattern, PatternError> {
        let s = text.trim();
        refuse_what_is_not_a_host(text, s)?;
        if let Some(rest) = s.strip_prefix('[') {
            return parse_bracketed(text, rest);
        }
        // Split off the port. More than one ':' is an IPv6 address without
        // brackets, which is refused: in `2001:db8::1:443` the last group
        // could be part of the address or a port.
        let (host_part, port) = match s.split_once(':') {
            None => (s, None),
            Some((_, p)) if p.contains(':') => {
                return Err(PatternError::new(
                    format!("'{text}' has more than one ':'"),
                    IPV6_HINT,
                ))
            }
            Some((h, p)) => (h, Some(parse_port(text, p)?)),
        };
        named_host(text, host_part, port)
    }

    /// Whether a connection to `host`:`port` matches. `host` is compared
    /// case-insensitively, with one trailing dot ignored; IPv6 addresses may
    /// be given with or without brackets and in any valid spelling. A
    /// malformed host never matches.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let Some(h) = canonical_host(host) else {
            return false;
        };
        if self.wildcard {
            is_below(&h, &self.host)
        } else {
            *h == self.host
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
        (other.wildcard && other.host == self.host) || is_below(&other.host, &self.host)
    }

    /// `true` for `*.domain` patterns.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The host of an exact pattern (an IPv6 address without brackets), or
    /// the domain of a wildcard (without `*.`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, if the pattern names one (`None` matches every port).
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

/// `[v6]` or `[v6]:port`; `rest` is what follows the `[`.
fn parse_bracketed(text: &str, rest: &str) -> Result<HostPattern, PatternError> {
    let Some((v6, after)) = rest.split_once(']') else {
        return Err(PatternError::new(
            format!("'{text}' has an unclosed '['"),
            IPV6_HINT,
        ));
    };
    if v6.contains('*') {
        return Err(PatternError::new(
            format!("'{text}' is an IP range"),
            RANGE_HINT,
        ));
    }
    let Ok(addr) = v6.parse::<Ipv6Addr>() else {
        return Err(PatternError::new(
            format!("'{text}' is not a valid IPv6 address"),
            IPV6_HINT,
        ));
    };
    let port = match after {
        "" => None,
        p => match p.strip_prefix(':') {
            Some(p) => Some(parse_port(text, p)?),
            None => {
                return Err(PatternError::new(
                    format!("'{text}' has text after the address"),
                    IPV6_HINT,
                ))
            }
        },
    };
    Ok(HostPattern {
        host: addr.to_string(),
        wildcard: false,
        port,
    })
}

/// A port: digits only (no sign), 1 to 65535.
fn parse_port(text: &str, p: &str) -> Result<u16, PatternError> {
    if p == "*" {
        return Err(PatternError::new(
            format!("'{text}' has a port wildcard"),
            "leave out the port to allow any port",
        ));
    }
    let digits = !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match p.parse::<u16>() {
        Ok(n) if digits && n != 0 => Ok(n),
        _ => Err(PatternError::new(
            format!("'{text}' has an invalid port '{p}'"),
            "a port is a number from 1 to 65535, e.g. api.example.com:443",
        )),
    }
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
    type Err = PatternError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HostPattern::parse(s)
    }
}
