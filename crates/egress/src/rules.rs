//! Host rules: the host-pattern language shared with the profile (see
//! [`cordon_hostpattern`]), and the destination hosts that requests name.
//!
//! A rule is `host`, `*.suffix`, each with an optional `:port`. Matching is
//! case-insensitive and ignores one trailing dot, so `EVIL.com.` is the same
//! host as `evil.com`. `*.example.com` matches every name below
//! `example.com` (`a.example.com`, `a.b.example.com`) but not `example.com`
//! itself; list both when both are meant.

use std::net::IpAddr;

use cordon_hostpattern::check_host_name;
pub use cordon_hostpattern::HostPattern;

/// One allow / deny / rate-limit rule, or a host a secret is bound to: a
/// [`HostPattern`], parsed by the same parser as the profile's patterns.
pub type HostRule = HostPattern;

/// Lower-cases a host and drops one trailing dot.
pub fn normalize_host(host: &str) -> String {
    let h = host.strip_suffix('.').unwrap_or(host);
    h.to_ascii_lowercase()
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
        // The same name rules as a pattern's, numbers that resolvers would
        // read as IPv4 addresses (`127.1`, `0x7f.1`) included.
        let host = normalize_host(raw);
        check_host_name(&host).map_err(|e| e.message)?;
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
    fn dest_host() {
        assert_eq!(
            DestHost::parse("Example.COM.").unwrap(),
            DestHost::Name("example.com".into())
        );
        assert!(matches!(DestHost::parse("::1").unwrap(), DestHost::Ip(_)));
        assert!(DestHost::parse("0x7f.1").is_err());
        assert!(DestHost::parse("127.1").is_err());
        assert!(DestHost::parse("2130706433").is_err());
        assert!(DestHost::parse("a/b").is_err());
        assert!(DestHost::parse("a..b").is_err());
        assert!(DestHost::parse("-a.com").is_err());
        assert!(DestHost::parse("").is_err());
        let e = DestHost::parse("a/b").unwrap_err();
        assert!(e.contains("'a/b'"), "{e}");
    }

    #[test]
    fn rules_are_the_shared_patterns() {
        // The proxy matches hosts in the form `DestHost::as_text` gives.
        let r = HostRule::parse("*.Example.com:443").unwrap();
        let dest = DestHost::parse("API.example.COM.").unwrap();
        assert!(r.matches(&dest.as_text(), 443));
        assert!(!r.matches(&dest.as_text(), 80));
        let v6 = HostRule::parse("[2001:db8::1]").unwrap();
        let dest = DestHost::parse("2001:DB8:0::1").unwrap();
        assert!(v6.matches(&dest.as_text(), 443));
        // Errors say what to write, as they do in a profile.
        let e = HostRule::parse("*").unwrap_err().to_string();
        assert!(
            e.contains("bare '*'") && e.contains("name the hosts"),
            "{e}"
        );
    }
}
