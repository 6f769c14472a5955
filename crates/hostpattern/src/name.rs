//! What a host name is: the checks shared by patterns and by the hosts that
//! requests name, and the canonical form hosts are compared in.

use std::borrow::Cow;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::error::PatternError;

/// The hint for a pattern that is not a host at all.
pub(crate) const HOST_HINT: &str =
    "write a host such as api.example.com, a domain wildcard such as *.example.com, optionally with :port";

/// A reason a name is not a well-formed host name: what is wrong (to follow
/// the quoted input) and what to write instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) what: &'static str,
    pub(crate) hint: &'static str,
}

impl Fault {
    /// The error for `input`, which the message quotes.
    pub(crate) fn error(self, input: &str) -> PatternError {
        PatternError::new(format!("'{input}' {}", self.what), self.hint)
    }
}

/// Why `name` (lower case, without a trailing dot) is not a host name, if it
/// is not: empty, over 253 characters, an empty label or one over 63
/// characters, a character other than a letter, digit, `-` or `_`, a label
/// that starts or ends with `-`, or a last label that is a number (decimal,
/// or hexadecimal with `0x`), which resolvers and URL parsers may read as an
/// IPv4 address (`127.1`, `2130706433`, `a.0x7f`).
pub(crate) fn name_fault(name: &str) -> Option<Fault> {
    if name.is_empty() {
        return Some(Fault {
            what: "has no host",
            hint: HOST_HINT,
        });
    }
    if name.len() > 253 {
        return Some(Fault {
            what: "is longer than 253 characters",
            hint: "a host name has at most 253 characters",
        });
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Some(Fault {
                what: "has an empty label ('..' or a leading or extra trailing '.')",
                hint: HOST_HINT,
            });
        }
        if label.len() > 63 {
            return Some(Fault {
                what: "has a label longer than 63 characters",
                hint: "each dot-separated part of a host name has at most 63 characters",
            });
        }
        if !label.bytes().all(is_name_byte) {
            return Some(Fault {
                what: "has a character not allowed in a host name",
                hint: "host names use letters, digits, '-' and '_' between dots",
            });
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some(Fault {
                what: "has a label that starts or ends with '-'",
                hint: HOST_HINT,
            });
        }
    }
    if ends_in_number(name) {
        return Some(Fault {
            what: "is neither a host name nor an IPv4 address",
            hint: "a host name does not end in a number (such as 123 or 0x7f); an IPv4 address has four numbers 0-255",
        });
    }
    None
}

/// Checks a host name as a request or a resolver sees it, already in lower
/// case and without a trailing dot, by the same rules a pattern's name
/// follows (see the crate documentation). IP addresses are not names: parse
/// them first.
pub fn check_host_name(name: &str) -> Result<(), PatternError> {
    match name_fault(name) {
        Some(f) => Err(f.error(name)),
        None => Ok(()),
    }
}

/// `true` when the last label is a decimal number or `0x` and hex digits.
fn ends_in_number(name: &str) -> bool {
    name.rsplit('.').next().is_some_and(|last| {
        is_digits(last)
            || last
                .strip_prefix("0x")
                .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
    })
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

pub(crate) fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The form a host from a connection is compared in: lower case, one
/// trailing dot and IPv6 brackets removed, IP addresses in their canonical
/// text form. `None` when it is not a well-formed name or address (such a
/// host matches no pattern). Borrows when the host is already canonical.
pub(crate) fn canonical_host(host: &str) -> Option<Cow<'_, str>> {
    if let Some(inner) = host.strip_prefix('[') {
        let v6 = inner.strip_suffix(']')?;
        return v6.parse::<Ipv6Addr>().ok().map(|a| a.to_string().into());
    }
    if host.contains(':') {
        return host.parse::<Ipv6Addr>().ok().map(|a| a.to_string().into());
    }
    let h = host.strip_suffix('.').unwrap_or(host);
    if h.is_empty() || h.len() > 253 {
        return None;
    }
    let labels_ok = h
        .split('.')
        .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(is_name_byte));
    if !labels_ok {
        return None;
    }
    if h.split('.').all(is_digits) {
        return h.parse::<Ipv4Addr>().ok().map(|a| a.to_string().into());
    }
    if h.bytes().any(|b| b.is_ascii_uppercase()) {
        Some(h.to_ascii_lowercase().into())
    } else {
        Some(h.into())
    }
}

/// `true` when `name` lies strictly below `domain` (`a.example.com` and
/// `a.b.example.com` below `example.com`; not `example.com` itself, and not
/// `aexample.com`).
pub(crate) fn is_below(name: &str, domain: &str) -> bool {
    name.strip_suffix(domain)
        .and_then(|rest| rest.strip_suffix('.'))
        .is_some_and(|label| !label.is_empty())
}
