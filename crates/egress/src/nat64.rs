//! The NAT64 prefixes of the host's own network.
//!
//! A NAT64 translator turns an IPv6 address under its prefix into the IPv4
//! address the address carries (RFC 6052). The well-known prefix and the
//! local-use block are fixed and judged in `addr`; a network may use a
//! prefix of its own instead (a network-specific prefix), from its global
//! space. Under such a prefix, `PREFIX::a9fe:a9fe` is the metadata service
//! although the address itself looks public, so the address guard must
//! know the prefix to judge the address by the IPv4 address it carries.
//!
//! A host learns its network's prefix the way RFC 7050 says: it asks for
//! the AAAA records of `ipv4only.arpa`, a name that has only the A records
//! 192.0.0.170 and 192.0.0.171. A DNS64 resolver synthesizes AAAA answers
//! from them with its prefix, and where in an answer the well-known IPv4
//! address sits gives the prefix and its length.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The name whose synthesized AAAA answers reveal the prefix (RFC 7050).
pub(crate) const DISCOVERY_NAME: &str = "ipv4only.arpa";

/// The A records of `ipv4only.arpa` (RFC 7050, section 2.2).
const WELL_KNOWN_V4: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 0, 170), Ipv4Addr::new(192, 0, 0, 171)];

/// The prefix lengths RFC 6052 defines.
const LENGTHS: [u8; 6] = [32, 40, 48, 56, 64, 96];

/// One NAT64 prefix: an IPv6 prefix and the RFC 6052 layout its length gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nat64Prefix {
    /// The prefix, every bit past `len` zero.
    prefix: Ipv6Addr,
    len: u8,
}

impl Nat64Prefix {
    /// The IPv4 address `ip` carries when it lies under this prefix.
    pub fn carried(&self, ip: Ipv6Addr) -> Option<Ipv4Addr> {
        (masked(ip, self.len) == self.prefix).then(|| carried_v4(ip, self.len))
    }
}

impl fmt::Display for Nat64Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.prefix, self.len)
    }
}

/// The prefixes that `answers` (the addresses `ipv4only.arpa` resolved to)
/// were synthesized with: each IPv6 answer that carries 192.0.0.170 or
/// .171 at the place of some RFC 6052 length names a prefix of that length.
/// IPv4 answers name none (no DNS64 on the way). An answer that fits more
/// than one length gives each: a prefix too many only refuses more.
pub fn prefixes_in(answers: impl IntoIterator<Item = IpAddr>) -> Vec<Nat64Prefix> {
    let mut found: Vec<Nat64Prefix> = Vec::new();
    for answer in answers {
        let IpAddr::V6(ip) = answer else { continue };
        for len in LENGTHS {
            // Bits 64-71 (the "u" octet) are zero in every layout but /96's.
            let u_octet_clear = len == 96 || ip.octets()[8] == 0;
            if u_octet_clear && WELL_KNOWN_V4.contains(&carried_v4(ip, len)) {
                let p = Nat64Prefix {
                    prefix: masked(ip, len),
                    len,
                };
                if !found.contains(&p) {
                    found.push(p);
                }
            }
        }
    }
    found
}

/// The IPv4 address an RFC 6052 layout of prefix length `len` puts in `ip`
/// (the octets after the prefix, skipping bits 64-71).
pub(crate) fn carried_v4(ip: Ipv6Addr, len: u8) -> Ipv4Addr {
    let b = ip.octets();
    let at = |i: [usize; 4]| Ipv4Addr::new(b[i[0]], b[i[1]], b[i[2]], b[i[3]]);
    match len {
        32 => at([4, 5, 6, 7]),
        40 => at([5, 6, 7, 9]),
        48 => at([6, 7, 9, 10]),
        56 => at([7, 9, 10, 11]),
        64 => at([9, 10, 11, 12]),
        _ => at([12, 13, 14, 15]),
    }
}

fn masked(ip: Ipv6Addr, len: u8) -> Ipv6Addr {
    let bits = u128::from(ip);
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    Ipv6Addr::from(bits & mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `prefix` (a /len) with `v4` placed by RFC 6052's layout for `len`
    /// (written by hand per length, not by `carried_v4`).
    fn synthesize(prefix: &str, len: u8, v4: Ipv4Addr) -> Ipv6Addr {
        let mut b = prefix.parse::<Ipv6Addr>().unwrap().octets();
        let v = v4.octets();
        let places: &[usize] = match len {
            32 => &[4, 5, 6, 7],
            40 => &[5, 6, 7, 9],
            48 => &[6, 7, 9, 10],
            56 => &[7, 9, 10, 11],
            64 => &[9, 10, 11, 12],
            96 => &[12, 13, 14, 15],
            _ => unreachable!(),
        };
        for (i, p) in places.iter().enumerate() {
            b[*p] = v[i];
        }
        Ipv6Addr::from(b)
    }

    const CASES: [(&str, u8); 6] = [
        ("2602:fe00::", 32),
        ("2602:fe00:6400::", 40),
        ("2602:fe00:64::", 48),
        ("2602:fe00:64:6400::", 56),
        ("2602:fe00:64:64::", 64),
        ("2602:fe00:64:64:0:64::", 96),
    ];

    /// Every RFC 6052 length: the prefix is found from either well-known
    /// answer, and an address under it gives back what it carries; an
    /// address outside it gives nothing.
    #[test]
    fn every_rfc6052_length_is_found_and_read_back() {
        let metadata = Ipv4Addr::new(169, 254, 169, 254);
        for (prefix, len) in CASES {
            for wk in WELL_KNOWN_V4 {
                let found = prefixes_in([IpAddr::V6(synthesize(prefix, len, wk))]);
                let expected = Nat64Prefix {
                    prefix: prefix.parse().unwrap(),
                    len,
                };
                assert!(found.contains(&expected), "/{len} from {wk}: {found:?}");
                let p = found.iter().find(|p| **p == expected).unwrap();
                assert_eq!(
                    p.carried(synthesize(prefix, len, metadata)),
                    Some(metadata),
                    "/{len}"
                );
                assert_eq!(
                    p.carried("2a00:1450::1".parse().unwrap()),
                    None,
                    "/{len}: outside the prefix"
                );
            }
        }
    }

    #[test]
    fn answers_without_a_synthesized_address_give_no_prefix() {
        let answers: Vec<IpAddr> = vec![
            "192.0.0.170".parse().unwrap(),
            "192.0.0.171".parse().unwrap(),
            "2a00:1450:4001:82b::200e".parse().unwrap(),
        ];
        assert_eq!(prefixes_in(answers), Vec::new());
        // A set u octet is no RFC 6052 layout below /96.
        let mut b = synthesize("2602:fe00:64:64::", 64, WELL_KNOWN_V4[0]).octets();
        b[8] = 1;
        assert_eq!(prefixes_in([IpAddr::V6(Ipv6Addr::from(b))]), Vec::new());
    }

    #[test]
    fn a_prefix_shows_as_address_and_length() {
        let found = prefixes_in(["2602:fe00:64::c000:aa".parse().unwrap()]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].to_string(), "2602:fe00:64::/96");
    }
}
