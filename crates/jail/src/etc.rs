//! The sandbox's `/etc`: a few synthesized files, plus read-only binds of
//! the host files that programs need to start (dynamic linker cache,
//! certificate bundles, time zone, Debian alternatives).

use crate::spec::{SANDBOX_GID, SANDBOX_UID};

/// Host entries under /etc bound read-only when they exist. Deliberately
/// short: no passwd/shadow/group, no ssh, no sudoers, no machine-id.
pub const HOST_ETC: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "localtime",
    "protocols",
    "services",
    "mime.types",
];

/// Files written into the sandbox's /etc.
pub fn synthesized(hostname: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\n\
                 sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:cordon sandbox:/tmp:/bin/sh\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        (
            "group",
            format!("root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n"),
        ),
        ("hostname", format!("{hostname}\n")),
        (
            "hosts",
            format!("127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost\n"),
        ),
        (
            "nsswitch.conf",
            "passwd: files\ngroup: files\nhosts: files\nservices: files\nprotocols: files\n".into(),
        ),
        ("resolv.conf", "# no DNS inside a cordon sandbox\n".into()),
    ]
}

/// Every name the sandbox's /etc holds (bound from the host or written).
pub fn provided_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = HOST_ETC.to_vec();
    v.extend(synthesized("cordon").into_iter().map(|(name, _)| name));
    v
}
