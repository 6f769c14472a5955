//! The proxy's configuration: plain values, filled in by the caller from a
//! profile and CLI flags.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use crate::error::EgressError;
use crate::rules::{normalize_host, DestHost, HostRule};

/// What happens to a host that no allow rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unlisted {
    /// Refuse it (the default).
    #[default]
    Deny,
    /// Ask the [`crate::Approver`]; the default approver refuses and says how
    /// to allow the host.
    Ask,
}

/// A rate limit for the hosts a rule covers: at most `requests` requests
/// (plain HTTP requests, tunnels) and `bytes` bytes (both directions) per
/// `per`, as a token bucket that holds one interval's worth and refills
/// continuously. One bucket per rule, shared by every host the rule matches
/// (so `*.example.com` limits the whole domain; list hosts separately for
/// separate budgets). Over the request budget: HTTP 429 (SOCKS5: refused);
/// over the byte budget: the transfer is cut and later requests get 429.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    pub host: HostRule,
    pub requests: Option<u64>,
    pub bytes: Option<u64>,
    pub per: Duration,
}

/// Where a `resolve_overrides` entry points: an IP (the request's port is
/// kept) or a full socket address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OverrideAddr {
    Ip(IpAddr),
    Socket(SocketAddr),
}

impl OverrideAddr {
    pub(crate) fn with_port(self, port: u16) -> SocketAddr {
        match self {
            Self::Ip(ip) => SocketAddr::new(ip, port),
            Self::Socket(sa) => sa,
        }
    }
}

impl FromStr for OverrideAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Self::Ip(ip));
        }
        s.parse::<SocketAddr>()
            .map(Self::Socket)
            .map_err(|_| format!("{s:?} is neither an IP address nor IP:PORT"))
    }
}

impl From<IpAddr> for OverrideAddr {
    fn from(ip: IpAddr) -> Self {
        Self::Ip(ip)
    }
}

impl From<SocketAddr> for OverrideAddr {
    fn from(sa: SocketAddr) -> Self {
        Self::Socket(sa)
    }
}

impl fmt::Display for OverrideAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip(ip) => ip.fmt(f),
            Self::Socket(sa) => sa.fmt(f),
        }
    }
}

/// Everything the proxy needs to decide about a sandbox's traffic.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    /// Names the sandbox in every event.
    pub sandbox_id: String,
    /// Hosts the sandbox may reach.
    pub allow: Vec<HostRule>,
    /// Hosts it may never reach; a deny rule wins over any allow rule.
    pub deny: Vec<HostRule>,
    /// Refuse plain HTTP, and require a TLS ClientHello whose SNI names the
    /// host on every tunnel (not only on port 443).
    pub https_only: bool,
    /// HTTP methods allowed for plain HTTP requests (upper case); empty
    /// allows any. Tunnels are not affected.
    pub methods: Vec<String>,
    /// Allow private, loopback, link-local and metadata addresses.
    pub allow_private: bool,
    /// Let a tunnel whose first bytes are a TLS ClientHello go on when the
    /// ClientHello names no server (no SNI); by default it is refused
    /// (`sni-missing`), since a front end would pick its default virtual
    /// host. Never for tunnels a [`crate::TlsInterceptor`] takes over.
    pub allow_missing_sni: bool,
    pub on_unlisted: Unlisted,
    /// Total bytes (both directions, all hosts) before traffic is cut.
    pub max_bytes: Option<u64>,
    pub rate_limits: Vec<RateLimit>,
    /// `host` or `host:port` -> addresses to use instead of DNS, like curl's
    /// `--resolve`, for the proxy only. These addresses are declared by the
    /// operator and are trusted: they are NOT subject to the private-address
    /// check (this is how tests reach servers on loopback). The allow/deny
    /// rules still apply to the host name.
    pub resolve_overrides: HashMap<String, Vec<OverrideAddr>>,
}

/// The configuration after validation, in the shape the proxy uses.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub(crate) cfg: EgressConfig,
    pub(crate) overrides: HashMap<(String, Option<u16>), Vec<OverrideAddr>>,
}

impl EgressConfig {
    /// Checks what `HostRule::parse` cannot: rate limits, methods, overrides.
    pub(crate) fn compile(mut self) -> Result<Compiled, EgressError> {
        for rl in &self.rate_limits {
            let bad = |reason: &str| EgressError::RateLimit {
                rule: rl.host.to_string(),
                reason: reason.to_string(),
            };
            if rl.per.is_zero() {
                return Err(bad("the interval must be longer than zero"));
            }
            if rl.requests.is_none() && rl.bytes.is_none() {
                return Err(bad("set requests, bytes or both"));
            }
            if rl.requests == Some(0) || rl.bytes == Some(0) {
                return Err(bad(
                    "a limit of 0 would refuse everything; use a deny rule instead",
                ));
            }
        }
        for m in &mut self.methods {
            if m.is_empty()
                || !m
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
            {
                return Err(EgressError::Method(m.clone()));
            }
            *m = m.to_ascii_uppercase();
        }
        let mut overrides = HashMap::new();
        for (key, addrs) in &self.resolve_overrides {
            let bad = |reason: &str| EgressError::Override {
                key: key.clone(),
                reason: reason.to_string(),
            };
            let (host, port) = match key.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') => (
                    h,
                    Some(
                        p.parse::<u16>()
                            .map_err(|_| bad("the port is not a number"))?,
                    ),
                ),
                _ => (key.as_str(), None),
            };
            let host = match DestHost::parse(host.trim_start_matches('[').trim_end_matches(']')) {
                Ok(h) => h.as_text(),
                Err(e) => return Err(bad(&e)),
            };
            if addrs.is_empty() {
                return Err(bad("no addresses"));
            }
            overrides.insert((normalize_host(&host), port), addrs.clone());
        }
        Ok(Compiled {
            cfg: self,
            overrides,
        })
    }
}

impl Compiled {
    pub(crate) fn override_for(&self, host: &str, port: u16) -> Option<Vec<SocketAddr>> {
        let addrs = self
            .overrides
            .get(&(host.to_string(), Some(port)))
            .or_else(|| self.overrides.get(&(host.to_string(), None)))?;
        Some(addrs.iter().map(|a| a.with_port(port)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_and_checks() {
        let mut cfg = EgressConfig::default();
        cfg.resolve_overrides.insert(
            "Allowed.Test:80".into(),
            vec!["127.0.0.1:9999".parse().unwrap()],
        );
        cfg.resolve_overrides
            .insert("other.test".into(), vec!["127.0.0.2".parse().unwrap()]);
        cfg.methods = vec!["get".into()];
        let c = cfg.compile().unwrap();
        assert_eq!(
            c.override_for("allowed.test", 80),
            Some(vec!["127.0.0.1:9999".parse().unwrap()])
        );
        assert_eq!(c.override_for("allowed.test", 81), None);
        assert_eq!(
            c.override_for("other.test", 81),
            Some(vec!["127.0.0.2:81".parse().unwrap()])
        );
        assert_eq!(c.cfg.methods, vec!["GET".to_string()]);

        let cfg = EgressConfig {
            rate_limits: vec![RateLimit {
                host: "a.test".parse().unwrap(),
                requests: Some(0),
                bytes: None,
                per: Duration::from_secs(1),
            }],
            ..Default::default()
        };
        assert!(cfg.compile().is_err());
        let cfg = EgressConfig {
            methods: vec!["GE T".into()],
            ..Default::default()
        };
        assert!(cfg.compile().is_err());
    }
}
