//! Which addresses a sandbox may never reach unless `allow_private` is set:
//! everything that is not a plain public unicast address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
pub fn classify(ip: IpAddr) -> Option<AddrClass> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
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

fn classify_v6(ip: Ipv6Addr) -> Option<AddrClass> {
    if METADATA_V6.contains(&ip) {
        return Some(AddrClass::Metadata);
    }
    let s = ip.segments();
    // Forms that carry an IPv4 address: judge the embedded one.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4).or(Some(AddrClass::NotPublic("IPv4-mapped IPv6")));
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    if s[0..6] == [0, 0, 0, 0, 0, 0] {
        // ::/96, the deprecated IPv4-compatible form (and :: and ::1).
        return Some(match ip {
            Ipv6Addr::UNSPECIFIED => AddrClass::NotPublic("unspecified (::)"),
            Ipv6Addr::LOCALHOST => AddrClass::NotPublic("loopback (::1)"),
            _ => classify_v4(embedded(s[6], s[7]))
                .unwrap_or(AddrClass::NotPublic("IPv4-compatible IPv6 (::/96)")),
        });
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        // NAT64 well-known prefix 64:ff9b::/96: the gateway would reach the
        // embedded IPv4 address.
        return classify_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        return Some(AddrClass::NotPublic("local-use NAT64 (64:ff9b:1::/48)"));
    }
    if s[0] == 0x2002 {
        // 6to4: 2002:AABB:CCDD::/48 carries AA.BB.CC.DD.
        if let Some(c) = classify_v4(embedded(s[1], s[2])) {
            return Some(c);
        }
    }
    let reason = match s[0] {
        0x2001 if s[1] == 0x0db8 => "documentation (2001:db8::/32)",
        0x2001 if s[1] == 0 => "Teredo (2001::/32)",
        0x2001 if s[1] == 0x0002 && s[2] == 0 => "benchmarking (2001:2::/48)",
        0x3fff if s[1] < 0x1000 => "documentation (3fff::/20)",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        a if (a & 0xfe00) == 0xfc00 => "unique-local (fc00::/7)",
        a if (a & 0xffc0) == 0xfe80 => "link-local (fe80::/10)",
        a if (a & 0xffc0) == 0xfec0 => "site-local (fec0::/10)",
        a if (a & 0xff00) == 0xff00 => "multicast (ff00::/8)",
        _ => return None,
    };
    Some(AddrClass::NotPublic(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> bool {
        classify(s.parse().unwrap()).is_some()
    }

    #[test]
    fn refuses_non_public() {
        for a in [
            "0.0.0.0",
            "10.0.0.5",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "127.255.0.1",
            "169.254.1.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "192.0.2.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "2002:0a00:0001::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
        ] {
            assert!(refused(a), "{a} must be refused");
        }
    }

    #[test]
    fn mapped_forms_are_refused_even_when_public() {
        // No resolver hands these out for a real name; refusing them all
        // leaves no way to smuggle an address past the checks.
        assert!(refused("::ffff:8.8.8.8"));
    }

    #[test]
    fn metadata() {
        for a in [
            "169.254.169.254",
            "fd00:ec2::254",
            "100.100.100.200",
            "::ffff:169.254.169.254",
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
