//! Which addresses a sandbox may never reach unless `allow_private` is set:
//! everything that is not a plain public unicast address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::nat64::{carried_v4, Nat64Prefix};

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
    /// A cloud metadata service (169.254.169.254, fd00:ec2::254, 100.100.100.200).
    Metadata,
    /// Loopback, private, CGNAT, link-local, unique-local, multicast,
    /// unspecified, broadcast, documentation, benchmarking or reserved.
    NotPublic(&'static str),
}

/// Cloud metadata endpoints (AWS/GCP/Azure/OpenStack, AWS IPv6, Alibaba).
const METADATA_V4: &[Ipv4Addr] = &[
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
];
const METADATA_V6: &[Ipv6Addr] = &[Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)];

/// `None` for a public unicast address, else the reason it is refused.
///
/// The rule: an address is public when the IANA special-purpose registries
/// (IPv4 and IPv6) mark its block "globally reachable", or list no block
/// for it, and (IPv6) it lies in the global unicast space 2000::/3. Stricter
/// than IANA in two places: the anycast addresses a local router answers
/// (PCP, TURN, DNS-SD SRP) are refused, and so is the whole IETF block
/// 192.0.0.0/24. An IPv6 address that carries an IPv4 address is judged by
/// the IPv4 address (see `embedded_v4`).
pub fn classify(ip: IpAddr) -> Option<AddrClass> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// [`classify`] on a network that translates the IPv6 addresses under the
/// NAT64 prefixes `nat64` (its own, see `crate::nat64`): an address the
/// rest find public but that lies under one of them is judged by the IPv4
/// address it carries, returned with the prefix.
pub fn classify_on_network(
    ip: IpAddr,
    nat64: &[Nat64Prefix],
) -> Option<(AddrClass, Option<Translated>)> {
    if let Some(class) = classify(ip) {
        return Some((class, None));
    }
    let IpAddr::V6(v6) = ip else { return None };
    nat64.iter().find_map(|prefix| {
        let carried = prefix.carried(v6)?;
        let class = classify_v4(carried)?;
        Some((
            class,
            Some(Translated {
                prefix: *prefix,
                carried,
            }),
        ))
    })
}

/// Where a refused IPv6 address goes through the network's NAT64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translated {
    pub prefix: Nat64Prefix,
    pub carried: Ipv4Addr,
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddrClass> {
    if METADATA_V4.contains(&ip) {
        return Some(AddrClass::Metadata);
    }
    let o = ip.octets();
    let reason = match o {
        [0, ..] => "this-network (0.0.0.0/8)",
        [10, ..] => "private (10.0.0.0/8)",
        [100, b, ..] if (64..128).contains(&b) => "shared CGNAT (100.64.0.0/10)",
        [127, ..] => "loopback (127.0.0.0/8)",
        [169, 254, ..] => "link-local (169.254.0.0/16)",
        [172, b, ..] if (16..32).contains(&b) => "private (172.16.0.0/12)",
        // Includes the PCP and TURN anycast addresses (192.0.0.9, .10),
        // which the local network's router answers.
        [192, 0, 0, _] => "IETF protocol assignments (192.0.0.0/24)",
        [192, 0, 2, _] => "documentation (192.0.2.0/24)",
        [192, 88, 99, _] => "6to4 relay anycast (192.88.99.0/24)",
        [192, 168, ..] => "private (192.168.0.0/16)",
        [198, b, ..] if b == 18 || b == 19 => "benchmarking (198.18.0.0/15)",
        [198, 51, 100, _] => "documentation (198.51.100.0/24)",
        [203, 0, 113, _] => "documentation (203.0.113.0/24)",
        [255, 255, 255, 255] => "broadcast",
        [a, ..] if (224..240).contains(&a) => "multicast (224.0.0.0/4)",
        [a, ..] if a >= 240 => "reserved (240.0.0.0/4)",
        _ => return None,
    };
    Some(AddrClass::NotPublic(reason))
}

/// The IPv6 forms that carry an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum V4Form {
    /// `::ffff:a.b.c.d` (::ffff:0:0/96).
    Mapped,
    /// `::ffff:0:a.b.c.d` (SIIT, RFC 7915: ::ffff:0:0:0/96).
    Translated,
    /// `::a.b.c.d` (deprecated, ::/96 but :: and ::1).
    Compatible,
    /// NAT64 well-known prefix 64:ff9b::/96 (RFC 6052).
    Nat64,
    /// NAT64 local-use prefix 64:ff9b:1::/48 (RFC 8215); the network picks
    /// the prefix length inside it, so every RFC 6052 layout that fits
    /// (/48, /56, /64, /96) is a candidate.
    Nat64Local,
    /// 6to4, 2002:AABB:CCDD::/48 (RFC 3056).
    SixToFour,
    /// Teredo, 2001:0:SSSS:SSSS:flags:port:CCCC:CCCC (RFC 4380): the
    /// server, and the client with every bit inverted.
    Teredo,
}

impl V4Form {
    /// Whether the form is refused even when every IPv4 address it carries
    /// is public: no resolver hands out mapped, translated or compatible
    /// addresses for a real name, so refusing them all leaves no way to
    /// smuggle an address past the checks.
    fn refused_anyway(self) -> Option<&'static str> {
        match self {
            Self::Mapped => Some("IPv4-mapped IPv6 (::ffff:0:0/96)"),
            Self::Translated => Some("IPv4-translated IPv6 (::ffff:0:0:0/96)"),
            Self::Compatible => Some("IPv4-compatible IPv6 (::/96)"),
            Self::Nat64 | Self::Nat64Local | Self::SixToFour | Self::Teredo => None,
        }
    }
}

/// The IPv4 addresses an IPv6 address carries, by form; `None` when it is
/// none of the forms.
fn embedded_v4(ip: Ipv6Addr) -> Option<(V4Form, Vec<Ipv4Addr>)> {
    let b = ip.octets();
    let s = ip.segments();
    let v4 = |i: [usize; 4]| Ipv4Addr::new(b[i[0]], b[i[1]], b[i[2]], b[i[3]]);
    let last = v4([12, 13, 14, 15]);
    Some(match s {
        [0, 0, 0, 0, 0, 0xffff, ..] => (V4Form::Mapped, vec![last]),
        [0, 0, 0, 0, 0xffff, 0, ..] => (V4Form::Translated, vec![last]),
        [0, 0, 0, 0, 0, 0, ..] if ip != Ipv6Addr::UNSPECIFIED && ip != Ipv6Addr::LOCALHOST => {
            (V4Form::Compatible, vec![last])
        }
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => (V4Form::Nat64, vec![last]),
        [0x64, 0xff9b, 1, ..] => (
            V4Form::Nat64Local,
            [48, 56, 64, 96]
                .into_iter()
                .map(|len| carried_v4(ip, len))
                .collect(),
        ),
        [0x2002, ..] => (V4Form::SixToFour, vec![v4([2, 3, 4, 5])]),
        [0x2001, 0, ..] => (
            V4Form::Teredo,
            vec![v4([4, 5, 6, 7]), Ipv4Addr::from(!u32::from(last))],
        ),
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<AddrClass> {
    if METADATA_V6.contains(&ip) {
        return Some(AddrClass::Metadata);
    }
    if let Some((form, v4s)) = embedded_v4(ip) {
        // The first refused carried address decides (metadata first).
        let classes: Vec<AddrClass> = v4s.into_iter().filter_map(classify_v4).collect();
        if let Some(c) = classes.iter().find(|c| **c == AddrClass::Metadata) {
            return Some(*c);
        }
        if let Some(c) = classes.first() {
            return Some(*c);
        }
        return form.refused_anyway().map(AddrClass::NotPublic);
    }
    special_v6(ip).map(AddrClass::NotPublic)
}

/// The IPv6 special-purpose blocks that are not globally reachable, and
/// everything outside the global unicast space 2000::/3.
fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip == Ipv6Addr::UNSPECIFIED {
        return Some("unspecified (::)");
    }
    if ip == Ipv6Addr::LOCALHOST {
        return Some("loopback (::1)");
    }
    Some(match s {
        [0x0100, 0, 0, 0, ..] => "discard-only (100::/64)",
        [0x0100, 0, 0, 1, ..] => "dummy prefix (100:0:0:1::/64)",
        // The anycast addresses a local router answers: PCP, TURN, DNS-SD SRP.
        [0x2001, 1, 0, 0, 0, 0, 0, 1..=3] => "local-service anycast (2001:1::1-3)",
        [0x2001, 2, 0, ..] => "benchmarking (2001:2::/48)",
        [0x2001, b, ..] if (0x10..0x20).contains(&b) => "deprecated ORCHID (2001:10::/28)",
        // Globally reachable inside the IETF block: AMT, AS112-v6,
        // ORCHIDv2, drone remote ID tags.
        [0x2001, 3, ..] | [0x2001, 4, 0x112, ..] => return None,
        [0x2001, b, ..] if (0x20..0x40).contains(&b) => return None,
        [0x2001, b, ..] if b < 0x200 => "IETF protocol assignments (2001::/23)",
        [0x2001, 0x0db8, ..] => "documentation (2001:db8::/32)",
        [0x3fff, b, ..] if b < 0x1000 => "documentation (3fff::/20)",
        [0x5f00, ..] => "segment routing SIDs (5f00::/16)",
        [a, ..] if (a & 0xfe00) == 0xfc00 => "unique-local (fc00::/7)",
        [a, ..] if (a & 0xffc0) == 0xfe80 => "link-local (fe80::/10)",
        [a, ..] if (a & 0xffc0) == 0xfec0 => "site-local (fec0::/10)",
        [a, ..] if (a & 0xff00) == 0xff00 => "multicast (ff00::/8)",
        [a, ..] if (a & 0xe000) != 0x2000 => "reserved (outside global unicast 2000::/3)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> bool {
        classify(s.parse().unwrap()).is_some()
    }

    /// The IANA IPv4 Special-Purpose Address Registry, entry by entry
    /// (https://www.iana.org/assignments/iana-ipv4-special-registry, as of
    /// 2025), plus multicast: the first and last address of each block and
    /// whether it is refused. Blocks IANA marks globally reachable are
    /// allowed, except the local-router anycast addresses 192.0.0.9 / .10.
    const IANA_V4: &[(&str, &[&str], bool)] = &[
        (
            "0.0.0.0/8 this network",
            &["0.0.0.0", "0.255.255.255"],
            true,
        ),
        ("0.0.0.0/32 this host", &["0.0.0.0"], true),
        ("10.0.0.0/8 private", &["10.0.0.0", "10.255.255.255"], true),
        (
            "100.64.0.0/10 shared",
            &["100.64.0.0", "100.127.255.255"],
            true,
        ),
        (
            "127.0.0.0/8 loopback",
            &["127.0.0.0", "127.255.255.255"],
            true,
        ),
        (
            "169.254.0.0/16 link local",
            &["169.254.0.0", "169.254.255.255"],
            true,
        ),
        (
            "172.16.0.0/12 private",
            &["172.16.0.0", "172.31.255.255"],
            true,
        ),
        ("192.0.0.0/24 IETF", &["192.0.0.0", "192.0.0.255"], true),
        (
            "192.0.0.0/29 service continuity",
            &["192.0.0.0", "192.0.0.7"],
            true,
        ),
        ("192.0.0.8/32 dummy", &["192.0.0.8"], true),
        ("192.0.0.9/32 PCP anycast", &["192.0.0.9"], true),
        ("192.0.0.10/32 TURN anycast", &["192.0.0.10"], true),
        ("192.0.0.170/32 NAT64 discovery", &["192.0.0.170"], true),
        ("192.0.0.171/32 NAT64 discovery", &["192.0.0.171"], true),
        (
            "192.0.2.0/24 TEST-NET-1",
            &["192.0.2.0", "192.0.2.255"],
            true,
        ),
        (
            "192.31.196.0/24 AS112-v4",
            &["192.31.196.0", "192.31.196.255"],
            false,
        ),
        (
            "192.52.193.0/24 AMT",
            &["192.52.193.0", "192.52.193.255"],
            false,
        ),
        (
            "192.88.99.0/24 6to4 relay",
            &["192.88.99.0", "192.88.99.255"],
            true,
        ),
        (
            "192.168.0.0/16 private",
            &["192.168.0.0", "192.168.255.255"],
            true,
        ),
        (
            "192.175.48.0/24 AS112",
            &["192.175.48.0", "192.175.48.255"],
            false,
        ),
        (
            "198.18.0.0/15 benchmarking",
            &["198.18.0.0", "198.19.255.255"],
            true,
        ),
        (
            "198.51.100.0/24 TEST-NET-2",
            &["198.51.100.0", "198.51.100.255"],
            true,
        ),
        (
            "203.0.113.0/24 TEST-NET-3",
            &["203.0.113.0", "203.0.113.255"],
            true,
        ),
        (
            "240.0.0.0/4 reserved",
            &["240.0.0.0", "255.255.255.254"],
            true,
        ),
        ("255.255.255.255/32 broadcast", &["255.255.255.255"], true),
        (
            "224.0.0.0/4 multicast",
            &["224.0.0.0", "239.255.255.255"],
            true,
        ),
    ];

    /// The IANA IPv6 Special-Purpose Address Registry, entry by entry
    /// (https://www.iana.org/assignments/iana-ipv6-special-registry, as of
    /// 2025), plus the rest of the address space. Forms that carry an IPv4
    /// address have a sample with a public and one with a refused address.
    const IANA_V6: &[(&str, &[&str], bool)] = &[
        ("::1/128 loopback", &["::1"], true),
        ("::/128 unspecified", &["::"], true),
        (
            "::ffff:0:0/96 mapped",
            &["::ffff:0.0.0.0", "::ffff:8.8.8.8", "::ffff:127.0.0.1"],
            true,
        ),
        (
            "64:ff9b::/96 NAT64",
            &[
                "64:ff9b::127.0.0.1",
                "64:ff9b::a9fe:a9fe",
                "64:ff9b::10.0.0.1",
            ],
            true,
        ),
        (
            "64:ff9b::/96 NAT64 public",
            &["64:ff9b::8.8.8.8", "64:ff9b::808:808"],
            false,
        ),
        (
            "64:ff9b:1::/48 NAT64 local",
            &["64:ff9b:1::", "64:ff9b:1::a00:1", "64:ff9b:1:7f00:0:1::"],
            true,
        ),
        (
            "64:ff9b:1::/48 NAT64 local public",
            &["64:ff9b:1:808:8:808:808:808"],
            false,
        ),
        (
            "100::/64 discard",
            &["100::", "100::ffff:ffff:ffff:ffff"],
            true,
        ),
        (
            "100:0:0:1::/64 dummy",
            &["100:0:0:1::", "100::1:ffff:ffff:ffff:ffff"],
            true,
        ),
        (
            "2001::/23 IETF",
            &["2001:100::1", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff"],
            true,
        ),
        (
            "2001::/32 Teredo, private client",
            &["2001:0:808:808::80ff:fffe", "2001:0:808:808::5601:5601"],
            true,
        ),
        (
            "2001::/32 Teredo, private server",
            &["2001:0:a00:1::f7f7:f7f7", "2001::f7f7:f7f7"],
            true,
        ),
        (
            "2001::/32 Teredo, public",
            &["2001:0:808:808:8000:f227:fefe:fefe"],
            false,
        ),
        ("2001:1::1/128 PCP anycast", &["2001:1::1"], true),
        ("2001:1::2/128 TURN anycast", &["2001:1::2"], true),
        ("2001:1::3/128 DNS-SD SRP anycast", &["2001:1::3"], true),
        (
            "2001:2::/48 benchmarking",
            &["2001:2::", "2001:2:0:ffff:ffff:ffff:ffff:ffff"],
            true,
        ),
        ("2001:3::/32 AMT", &["2001:3::", "2001:3:ffff::1"], false),
        (
            "2001:4:112::/48 AS112-v6",
            &["2001:4:112::", "2001:4:112:ffff::1"],
            false,
        ),
        (
            "2001:10::/28 ORCHID",
            &["2001:10::", "2001:1f:ffff::1"],
            true,
        ),
        (
            "2001:20::/28 ORCHIDv2",
            &["2001:20::", "2001:2f:ffff::1"],
            false,
        ),
        (
            "2001:30::/28 DETs",
            &["2001:30::", "2001:3f:ffff::1"],
            false,
        ),
        (
            "2001:db8::/32 documentation",
            &["2001:db8::", "2001:db8:ffff::1"],
            true,
        ),
        (
            "2002::/16 6to4",
            &["2002:7f00:1::1", "2002:a9fe:a9fe::", "2002::1"],
            true,
        ),
        ("2002::/16 6to4 public", &["2002:808:808::1"], false),
        (
            "2620:4f:8000::/48 AS112",
            &["2620:4f:8000::", "2620:4f:8000:ffff::1"],
            false,
        ),
        (
            "3fff::/20 documentation",
            &["3fff::", "3fff:fff:ffff::1"],
            true,
        ),
        ("5f00::/16 SRv6 SIDs", &["5f00::", "5f00:ffff::1"], true),
        ("fc00::/7 unique local", &["fc00::", "fdff:ffff::1"], true),
        ("fe80::/10 link local", &["fe80::", "febf:ffff::1"], true),
        ("fec0::/10 site local", &["fec0::1"], true),
        ("ff00::/8 multicast", &["ff02::1", "ff0e::1"], true),
        (
            "outside 2000::/3",
            &["::2:0:0:1", "4000::1", "8000::1", "e000::1", "1::1"],
            true,
        ),
        (
            "global unicast",
            &["2606:4700:4700::1111", "2a00:1450:4001::200e", "3ffe::1"],
            false,
        ),
    ];

    #[test]
    fn every_iana_special_purpose_entry_is_judged() {
        let mut wrong = Vec::new();
        for (entry, samples, want) in IANA_V4.iter().chain(IANA_V6) {
            for a in *samples {
                if refused(a) != *want {
                    wrong.push(format!("{entry}: {a} refused={}", refused(a)));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// The IPv4 addresses of the registry that are refused, and two public
    /// ones.
    fn v4_samples() -> (Vec<Ipv4Addr>, Vec<Ipv4Addr>) {
        let mut bad = Vec::new();
        for (_, samples, refuse) in IANA_V4 {
            if *refuse {
                bad.extend(samples.iter().map(|a| a.parse::<Ipv4Addr>().unwrap()));
            }
        }
        bad.extend(METADATA_V4);
        (
            bad,
            vec![Ipv4Addr::new(8, 8, 8, 8), Ipv4Addr::new(1, 1, 1, 1)],
        )
    }

    fn v6(b: [u8; 16]) -> Ipv6Addr {
        Ipv6Addr::from(b)
    }

    /// Puts `v4` at byte positions `at` of `base`.
    fn put(mut base: [u8; 16], at: [usize; 4], v4: Ipv4Addr) -> Ipv6Addr {
        for (i, o) in at.iter().zip(v4.octets()) {
            base[*i] = o;
        }
        v6(base)
    }

    /// Every form that carries an IPv4 address, as (name, builder, refused
    /// even when the carried address is public, carries one address only).
    type Builder = fn(Ipv4Addr) -> Ipv6Addr;
    fn forms() -> Vec<(&'static str, Builder, bool, bool)> {
        const PUBLIC: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);
        vec![
            ("mapped", |a| a.to_ipv6_mapped(), true, true),
            (
                "translated (SIIT)",
                |a| {
                    put(
                        [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0],
                        [12, 13, 14, 15],
                        a,
                    )
                },
                true,
                true,
            ),
            (
                "compatible",
                |a| put([0; 16], [12, 13, 14, 15], a),
                true,
                true,
            ),
            (
                "NAT64 64:ff9b::/96",
                |a| {
                    put(
                        [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        [12, 13, 14, 15],
                        a,
                    )
                },
                false,
                true,
            ),
            (
                "NAT64 local /48",
                |a| {
                    put(
                        [0, 0x64, 0xff, 0x9b, 0, 1, 8, 8, 0, 8, 8, 8, 8, 8, 8, 8],
                        [6, 7, 9, 10],
                        a,
                    )
                },
                false,
                false,
            ),
            (
                "NAT64 local /56",
                |a| {
                    put(
                        [0, 0x64, 0xff, 0x9b, 0, 1, 8, 8, 0, 8, 8, 8, 8, 8, 8, 8],
                        [7, 9, 10, 11],
                        a,
                    )
                },
                false,
                false,
            ),
            (
                "NAT64 local /64",
                |a| {
                    put(
                        [0, 0x64, 0xff, 0x9b, 0, 1, 8, 8, 0, 8, 8, 8, 8, 8, 8, 8],
                        [9, 10, 11, 12],
                        a,
                    )
                },
                false,
                false,
            ),
            (
                "NAT64 local /96",
                |a| {
                    put(
                        [0, 0x64, 0xff, 0x9b, 0, 1, 8, 8, 0, 8, 8, 8, 8, 8, 8, 8],
                        [12, 13, 14, 15],
                        a,
                    )
                },
                false,
                false,
            ),
            (
                "6to4",
                |a| {
                    put(
                        [0x20, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                        [2, 3, 4, 5],
                        a,
                    )
                },
                false,
                true,
            ),
            (
                "Teredo client",
                |a| {
                    let c = Ipv4Addr::from(!u32::from(a));
                    put(
                        put(
                            [0x20, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                            [4, 5, 6, 7],
                            PUBLIC,
                        )
                        .octets(),
                        [12, 13, 14, 15],
                        c,
                    )
                },
                false,
                false,
            ),
            (
                "Teredo server",
                |a| {
                    let c = Ipv4Addr::from(!u32::from(PUBLIC));
                    put(
                        put(
                            [0x20, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                            [4, 5, 6, 7],
                            a,
                        )
                        .octets(),
                        [12, 13, 14, 15],
                        c,
                    )
                },
                false,
                false,
            ),
        ]
    }

    #[test]
    fn every_ipv6_form_that_carries_an_ipv4_address_is_judged_by_it() {
        let (bad, public) = v4_samples();
        let mut wrong = Vec::new();
        for (form, build, refused_anyway, single) in forms() {
            for a in &bad {
                let ip = build(*a);
                let got = classify_v6(ip);
                let want = classify_v4(*a);
                // :: and ::1 are the compatible forms of 0.0.0.0 and
                // 0.0.0.1: refused under their own names.
                let same = !single || got == want || ip == Ipv6Addr::UNSPECIFIED;
                if got.is_none() || !same {
                    wrong.push(format!(
                        "{form}: {ip} (carries {a}) gives {got:?}, want {want:?}"
                    ));
                }
            }
            for a in &public {
                let ip = build(*a);
                if classify_v6(ip).is_some() != refused_anyway {
                    wrong.push(format!(
                        "{form}: {ip} (carries public {a}) refused={}",
                        !refused_anyway
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn metadata() {
        for a in [
            "169.254.169.254",
            "fd00:ec2::254",
            "100.100.100.200",
            "::ffff:169.254.169.254",
            "::ffff:0:169.254.169.254",
            "64:ff9b::169.254.169.254",
            "2002:a9fe:a9fe::1",
        ] {
            assert_eq!(
                classify(a.parse().unwrap()),
                Some(AddrClass::Metadata),
                "{a}"
            );
        }
    }

    #[test]
    fn public_is_allowed() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "64:ff9b::808:808",
        ] {
            assert!(!refused(a), "{a} must be allowed");
        }
    }
}
