//! Hostile suite, network: every way a payload could open a connection to
//! something on the host (TCP, UDP, IPv6, raw and packet sockets, netlink,
//! DNS, abstract and pathname unix sockets). With the default profile the
//! filter refuses every socket family (EPERM) and the sandbox has its own
//! network namespace with only loopback; with `--net loopback` sockets work
//! but only inside that namespace. Each test also checks, on the host, that
//! a listener the test opened saw nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;

fn ready() -> bool {
    skip_unless(
        userns_available(),
        "user namespaces are unavailable on this host",
    )
}

/// Python client: `python3 -c PROBE MARKER MODE ARGS...`. For each attempt
/// it prints `<label> socket: ok|ERRNO` and, when a socket was made,
/// `<label> send: ok|ERRNO` after connecting and sending MARKER.
const PROBE: &str = r#"
import errno, os, socket, struct, sys
MARK = sys.argv[1].encode()
mode = sys.argv[2]
args = sys.argv[3:]

def name(e):
    return errno.errorcode.get(e.errno, type(e).__name__)

def attempt(label, family, kind, addr, stream):
    try:
        s = socket.socket(family, kind)
    except OSError as e:
        print(f"{label} socket: {name(e)}")
        return
    print(f"{label} socket: ok")
    s.settimeout(2)
    try:
        if stream:
            s.connect(addr)
            s.sendall(MARK)
        else:
            s.sendto(MARK, addr)
        print(f"{label} send: ok")
    except OSError as e:
        print(f"{label} send: {name(e)}")
    s.close()

def dns_query(host):
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    for part in host.split("."):
        q += bytes([len(part)]) + part.encode()
    return q + b"\x00" + struct.pack(">HH", 1, 1)

if mode == "tcp4":
    attempt("tcp4", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int(args[0])), True)
elif mode == "udp4":
    attempt("udp4", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", int(args[0])), False)
elif mode == "tcp6":
    attempt("tcp6", socket.AF_INET6, socket.SOCK_STREAM, ("::1", int(args[0])), True)
elif mode == "udp6":
    attempt("udp6", socket.AF_INET6, socket.SOCK_DGRAM, ("::1", int(args[0])), False)
elif mode == "unix":
    path = args[0].replace("@", "\0", 1) if args[0].startswith("@") else args[0]
    attempt("unix", socket.AF_UNIX, socket.SOCK_STREAM, path, True)
elif mode == "dns":
    MARK = dns_query(MARK.decode() + ".example.com")
    servers = ["127.0.0.53", "127.0.0.1", "8.8.8.8", "1.1.1.1"]
    try:
        for line in open("/etc/resolv.conf"):
            f = line.split()
            if len(f) >= 2 and f[0] == "nameserver":
                servers.append(f[1])
    except OSError as e:
        print("resolv.conf:", name(e))
    for ip in servers:
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        attempt(f"dns-udp {ip}", fam, socket.SOCK_DGRAM, (ip, 53), False)
        attempt(f"dns-tcp {ip}", fam, socket.SOCK_STREAM, (ip, 53), True)
    attempt("dns-udp fake", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", int(args[0])), False)
    try:
        print("getaddrinfo: ok", socket.getaddrinfo(sys.argv[1] + ".example.com", 80))
    except socket.gaierror as e:
        print("getaddrinfo: gaierror")
elif mode == "interfaces":
    with open("/proc/net/dev") as f:
        names = [l.split(":")[0].strip() for l in f.readlines()[2:]]
    print("interfaces:", " ".join(sorted(names)))
"#;

/// The host side of a TCP listener: did anyone connect?
fn tcp_connections(l: &TcpListener) -> usize {
    l.set_nonblocking(true).expect("nonblocking");
    let mut n = 0;
    loop {
        match l.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

fn unix_connections(l: &UnixListener) -> usize {
    l.set_nonblocking(true).expect("nonblocking");
    let mut n = 0;
    loop {
        match l.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Datagrams a host UDP socket received.
fn udp_datagrams(s: &UdpSocket) -> Vec<Vec<u8>> {
    s.set_nonblocking(true).expect("nonblocking");
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        match s.recv(&mut buf) {
            Ok(n) => got.push(buf[..n].to_vec()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return got,
            Err(e) => panic!("recv: {e}"),
        }
    }
}

fn probe(w: &Workdir, flags: &[&str], mark: &str, mode: &str, args: &[&str]) -> Outcome {
    let mut cmd = vec!["python3", "-c", PROBE, mark, mode];
    cmd.extend_from_slice(args);
    let o = w.run(flags, &cmd);
    assert_eq!(o.code, 0, "probe failed: {}", o.stderr);
    assert_no_process_with(mark);
    o
}

/// A packet sniffer on the host (root only): every frame on every host
/// interface while it is open, so a packet that escaped the sandbox's
/// network namespace would be seen.
struct HostSniffer {
    fd: Option<std::os::fd::OwnedFd>,
}

impl HostSniffer {
    fn open() -> HostSniffer {
        if !is_root() {
            eprintln!("note: not root, host packet capture skipped (the in-sandbox result is still checked)");
            return HostSniffer { fd: None };
        }
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                (libc::ETH_P_ALL as u16).to_be() as i32,
            )
        };
        assert!(
            fd >= 0,
            "host AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let size: libc::c_int = 32 << 20;
        // SAFETY: valid fd, pointer to a c_int of the stated size.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        HostSniffer { fd: Some(fd) }
    }

    /// Whether any captured frame carries `needle`.
    fn saw(&self, needle: &[u8]) -> bool {
        let Some(fd) = &self.fd else { return false };
        let mut buf = vec![0u8; 65536];
        let mut seen = false;
        loop {
            // SAFETY: valid fd and buffer of the stated length.
            let n = unsafe {
                libc::recv(
                    std::os::fd::AsRawFd::as_raw_fd(fd),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                )
            };
            if n <= 0 {
                return seen;
            }
            let frame = &buf[..n as usize];
            if frame.windows(needle.len()).any(|w| w == needle) {
                seen = true;
            }
        }
    }
}

#[test]
fn tcp_connect_to_host_listener() {
    if ready() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("host listener");
    let port = listener.local_addr().expect("addr").port().to_string();
    let w = Workdir::new();
    let mark = marker("tcp");
    let o = probe(&w, &[], &mark, "tcp4", &[&port]);
    assert_eq!(o.stdout, "tcp4 socket: EPERM\n");
    assert_eq!(
        tcp_connections(&listener),
        0,
        "the host listener was reached"
    );
}

#[test]
fn udp_sendto_host_socket() {
    if ready() {
        return;
    }
    let host = UdpSocket::bind("127.0.0.1:0").expect("host udp");
    let port = host.local_addr().expect("addr").port().to_string();
    let w = Workdir::new();
    let mark = marker("udp");
    let o = probe(&w, &[], &mark, "udp4", &[&port]);
    assert_eq!(o.stdout, "udp4 socket: EPERM\n");
    assert!(
        udp_datagrams(&host).is_empty(),
        "the host socket got datagrams"
    );
}

#[test]
fn ipv6_connect_to_host_listener() {
    if ready() {
        return;
    }
    let listener = TcpListener::bind("[::1]:0");
    if skip_unless(
        listener.is_ok(),
        "IPv6 loopback (::1) is unavailable on this host",
    ) {
        return;
    }
    let listener = listener.expect("checked");
    let port = listener.local_addr().expect("addr").port().to_string();
    let udp = UdpSocket::bind(format!("[::1]:{port}")).expect("host udp6");
    let w = Workdir::new();
    let mark = marker("ipv6");
    let o = probe(&w, &[], &mark, "tcp6", &[&port]);
    assert_eq!(o.stdout, "tcp6 socket: EPERM\n");
    let o = probe(&w, &[], &mark, "udp6", &[&port]);
    assert_eq!(o.stdout, "udp6 socket: EPERM\n");
    assert_eq!(
        tcp_connections(&listener),
        0,
        "the host listener was reached"
    );
    assert!(
        udp_datagrams(&udp).is_empty(),
        "the host udp6 socket got datagrams"
    );
}

/// C client for the families Python makes awkward. Prints `<label>: ok`
/// or `<label>: <errno name>` per call; when a socket is made, it tries to
/// send a frame carrying the marker (argv[2]) to the host's loopback.
const RAW_PROBE: &str = r#"
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *mark;

static int show(const char *what, int r) {
    if (r < 0) printf("%s: %s\n", what, strerrorname_np(errno));
    else printf("%s: ok\n", what);
    fflush(stdout);
    return r;
}

static void icmp_echo(int fd, int family) {
    char pkt[128] = {0};
    struct icmphdr *h = (struct icmphdr *)pkt;
    h->type = family == AF_INET6 ? 128 : ICMP_ECHO;
    h->un.echo.id = htons(4242);
    strncpy(pkt + sizeof *h, mark, sizeof pkt - sizeof *h - 1);
    size_t len = sizeof *h + strlen(mark);
    if (family == AF_INET6) {
        struct sockaddr_in6 to = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
        show("  sendto ::1", sendto(fd, pkt, len, 0, (struct sockaddr *)&to, sizeof to));
    } else {
        struct sockaddr_in to = { .sin_family = AF_INET };
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        show("  sendto 127.0.0.1", sendto(fd, pkt, len, 0, (struct sockaddr *)&to, sizeof to));
    }
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    mark = argc > 2 ? argv[2] : "cordon";
    int fd;
    if (!strcmp(what, "raw")) {
        if ((fd = show("raw icmp", socket(AF_INET, SOCK_RAW, IPPROTO_ICMP))) >= 0) icmp_echo(fd, AF_INET);
        if ((fd = show("ping icmp", socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP))) >= 0) icmp_echo(fd, AF_INET);
        if ((fd = show("raw icmpv6", socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6))) >= 0) icmp_echo(fd, AF_INET6);
        if ((fd = show("raw ip", socket(AF_INET, SOCK_RAW, IPPROTO_RAW))) >= 0) icmp_echo(fd, AF_INET);
    } else if (!strcmp(what, "packet")) {
        char frame[128] = {0};
        memset(frame, 0xff, 6);
        frame[12] = 0x88; frame[13] = 0xb5; /* local experimental ethertype */
        strncpy(frame + 14, mark, sizeof frame - 15);
        struct sockaddr_ll to = { .sll_family = AF_PACKET, .sll_ifindex = 1, .sll_halen = 6 };
        memset(to.sll_addr, 0xff, 6);
        if ((fd = show("packet raw", socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)))) >= 0)
            show("  sendto lo", sendto(fd, frame, 14 + strlen(mark), 0, (struct sockaddr *)&to, sizeof to));
        if ((fd = show("packet dgram", socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_ALL)))) >= 0)
            show("  sendto lo", sendto(fd, frame + 14, strlen(mark), 0, (struct sockaddr *)&to, sizeof to));
        show("inet sock_packet", socket(AF_INET, SOCK_PACKET, htons(ETH_P_ALL)));
    } else if (!strcmp(what, "netlink")) {
        int protos[] = { NETLINK_ROUTE, NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT, NETLINK_NETFILTER, NETLINK_GENERIC };
        const char *names[] = { "route", "sock_diag", "audit", "uevent", "netfilter", "generic" };
        for (int i = 0; i < 6; i++) {
            char label[64];
            snprintf(label, sizeof label, "netlink %s", names[i]);
            fd = show(label, socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protos[i]));
            if (fd < 0 || protos[i] != NETLINK_ROUTE) continue;
            struct { struct nlmsghdr h; struct rtgenmsg g; } req = {
                .h = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETLINK,
                       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
                .g = { .rtgen_family = AF_UNSPEC },
            };
            if (show("  dump request", send(fd, &req, sizeof req, 0)) < 0) continue;
            char buf[32768];
            int done = 0;
            while (!done) {
                int n = recv(fd, buf, sizeof buf, 0);
                if (n <= 0) break;
                for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
                    if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) { done = 1; break; }
                    struct ifinfomsg *ifi = NLMSG_DATA(h);
                    int len = h->nlmsg_len - NLMSG_LENGTH(sizeof *ifi);
                    for (struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len))
                        if (a->rta_type == IFLA_IFNAME) printf("  link: %s\n", (char *)RTA_DATA(a));
                }
            }
        }
    } else if (!strcmp(what, "families")) {
        for (int family = 0; family < 64; family++) {
            if (family == AF_UNIX) continue;
            int types[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET };
            for (int t = 0; t < 4; t++) {
                errno = 0;
                int r = socket(family, types[t], 0);
                if (r >= 0 || errno != EPERM)
                    printf("family %d type %d: %s\n", family, types[t], r >= 0 ? "ok" : strerrorname_np(errno));
            }
        }
        printf("families checked\n");
    }
    return 0;
}
"#;

#[test]
fn raw_icmp_socket() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let bin = w.compile_c("rawprobe", RAW_PROBE);
    let mark = marker("rawicmp");
    let sniff = HostSniffer::open();
    let o = w.run(&[], &[bin.to_str().expect("utf8"), "raw", &mark]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "raw icmp: EPERM\nping icmp: EPERM\nraw icmpv6: EPERM\nraw ip: EPERM\n"
    );
    assert!(
        !sniff.saw(mark.as_bytes()),
        "an ICMP packet left the sandbox"
    );
    assert_no_process_with(&mark);
}

#[test]
fn af_packet_socket() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let bin = w.compile_c("rawprobe", RAW_PROBE);
    let mark = marker("afpacket");
    let sniff = HostSniffer::open();
    let o = w.run(&[], &[bin.to_str().expect("utf8"), "packet", &mark]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "packet raw: EPERM\npacket dgram: EPERM\ninet sock_packet: EPERM\n"
    );
    assert!(!sniff.saw(mark.as_bytes()), "a frame left the sandbox");
    assert_no_process_with(&mark);
}

#[test]
fn netlink_route_dump() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let bin = w.compile_c("rawprobe", RAW_PROBE);
    let mark = marker("netlink");
    let o = w.run(&[], &[bin.to_str().expect("utf8"), "netlink", &mark]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "netlink route: EPERM\nnetlink sock_diag: EPERM\nnetlink audit: EPERM\n\
         netlink uevent: EPERM\nnetlink netfilter: EPERM\nnetlink generic: EPERM\n"
    );
    // Without netlink, /proc/net is what is left to list interfaces: the
    // sandbox's own namespace holds only loopback, whatever the host has.
    let o = probe(&w, &[], &mark, "interfaces", &[]);
    assert_eq!(o.stdout, "interfaces: lo\n");
    let host_ifaces = std::fs::read_dir("/sys/class/net")
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(host_ifaces >= 1, "the host lists its interfaces");
}

#[test]
fn every_other_socket_family() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let bin = w.compile_c("rawprobe", RAW_PROBE);
    let mark = marker("families");
    let o = w.run(&[], &[bin.to_str().expect("utf8"), "families", &mark]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Every family but AF_UNIX (also refused, see the unix tests), every
    // type: EPERM from the filter, never a socket, never another errno.
    assert_eq!(o.stdout, "families checked\n");
    assert_no_process_with(&mark);
}

#[test]
fn dns_query_to_resolvers() {
    if ready() {
        return;
    }
    let fake = UdpSocket::bind("127.0.0.1:0").expect("fake resolver");
    let port = fake.local_addr().expect("addr").port().to_string();
    let fake_tcp = TcpListener::bind("127.0.0.1:0").expect("fake tcp resolver");
    let w = Workdir::new();
    let mark = marker("dns");
    let o = probe(&w, &[], &mark, "dns", &[&port]);
    let mut lines = o.stdout.lines().collect::<Vec<_>>();
    assert_eq!(lines.pop(), Some("getaddrinfo: gaierror"), "{}", o.stdout);
    assert!(lines.len() >= 9, "every resolver was tried: {}", o.stdout);
    for l in &lines {
        assert!(
            l.ends_with(" socket: EPERM") || l.starts_with("resolv.conf:"),
            "a DNS socket was opened: {l}\n{}",
            o.stdout
        );
    }
    // With sockets allowed (--net loopback) there is still no route out:
    // public resolvers are unreachable, loopback ones are the sandbox's own.
    let o = probe(&w, &["--net", "loopback"], &mark, "dns", &[&port]);
    for ip in ["8.8.8.8", "1.1.1.1"] {
        for proto in ["udp", "tcp"] {
            let line = format!("dns-{proto} {ip} send: ENETUNREACH");
            assert!(o.stdout.lines().any(|l| l == line), "{line}: {}", o.stdout);
        }
    }
    assert!(
        o.stdout
            .lines()
            .any(|l| l == "dns-tcp 127.0.0.53 send: ECONNREFUSED"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.ends_with("getaddrinfo: gaierror\n"),
        "{}",
        o.stdout
    );
    assert!(
        udp_datagrams(&fake).is_empty(),
        "the host resolver got a query"
    );
    assert_eq!(tcp_connections(&fake_tcp), 0);
}

/// An abstract unix socket bound on the host, named after the marker.
fn host_abstract_listener(name: &str) -> UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .expect("abstract address");
    UnixListener::bind_addr(&addr).expect("bind abstract socket on the host")
}

/// The probe with `layers` turned off (the test switch of debug builds).
fn probe_without(
    w: &Workdir,
    layers: &str,
    flags: &[&str],
    mark: &str,
    mode: &str,
    args: &[&str],
) -> Outcome {
    let mut cmd = vec!["python3", "-c", PROBE, mark, mode];
    cmd.extend_from_slice(args);
    let o = w.run_without(layers, flags, &cmd);
    assert_eq!(o.code, 0, "probe failed: {}", o.stderr);
    assert_no_process_with(mark);
    o
}

/// Layers: seccomp (no `socket(AF_UNIX)`), the network namespace (the
/// abstract namespace is per network namespace) and Landlock's abstract
/// socket scoping (ABI 6+). All on here; the next tests show each alone.
#[test]
fn abstract_unix_socket_to_host_listener() {
    if ready() {
        return;
    }
    let mark = marker("abstract");
    let listener = host_abstract_listener(&mark);
    let w = Workdir::new();
    let o = probe(&w, &[], &mark, "unix", &[&format!("@{mark}")]);
    assert_eq!(o.stdout, "unix socket: EPERM\n");
    assert_eq!(
        unix_connections(&listener),
        0,
        "the host listener was reached"
    );
}

/// Layer: seccomp alone. At the `process` level (no network namespace)
/// with Landlock off, the filter still refuses the socket.
#[test]
fn abstract_unix_socket_refused_by_seccomp_alone() {
    let mark = marker("abstractseccomp");
    let listener = host_abstract_listener(&mark);
    let w = Workdir::new();
    let o = probe_without(
        &w,
        "landlock",
        &["--isolation", "process"],
        &mark,
        "unix",
        &[&format!("@{mark}")],
    );
    assert_eq!(o.stdout, "unix socket: EPERM\n");
    assert_eq!(
        unix_connections(&listener),
        0,
        "the host listener was reached"
    );
}

/// Layer: the network namespace alone. With unix sockets allowed and
/// Landlock off, the host's abstract name does not exist inside.
#[test]
fn abstract_unix_socket_with_unix_sockets_allowed() {
    if ready() {
        return;
    }
    let mark = marker("abstractallowed");
    let listener = host_abstract_listener(&mark);
    let w = Workdir::new();
    let o = probe_without(
        &w,
        "landlock",
        &["--unix-sockets"],
        &mark,
        "unix",
        &[&format!("@{mark}")],
    );
    assert_eq!(
        o.stdout, "unix socket: ok\nunix send: ECONNREFUSED\n",
        "{}",
        o.stderr
    );
    assert_eq!(
        unix_connections(&listener),
        0,
        "the host listener was reached"
    );
}

/// Layer: Landlock's abstract unix socket scoping alone. At the `process`
/// level there is no network namespace, and `--unix-sockets` lets the
/// filter pass the socket: Landlock is the only layer, and with it off the
/// host listener is reached.
#[test]
fn abstract_unix_socket_at_process_level_is_stopped_by_landlock_scoping() {
    if skip_unless(
        landlock_abi() >= 6,
        "Landlock ABI 6 (abstract unix socket scoping) is unavailable",
    ) {
        return;
    }
    let mark = marker("abstractscope");
    let listener = host_abstract_listener(&mark);
    let w = Workdir::new();
    let flags = ["--isolation", "process", "--unix-sockets"];
    let addr = format!("@{mark}");
    let o = probe(&w, &flags, &mark, "unix", &[&addr]);
    assert_eq!(o.stdout, "unix socket: ok\nunix send: EPERM\n");
    assert_eq!(
        unix_connections(&listener),
        0,
        "the host listener was reached"
    );

    let o = probe_without(&w, "landlock", &flags, &mark, "unix", &[&addr]);
    assert_eq!(
        o.stdout, "unix socket: ok\nunix send: ok\n",
        "control: without Landlock the host listener must be reachable"
    );
    assert_eq!(unix_connections(&listener), 1);
}

#[test]
fn pathname_unix_socket_in_cwd() {
    if ready() {
        return;
    }
    let w = Workdir::new();
    let path = w.path().join("host.sock");
    let listener = UnixListener::bind(&path).expect("bind host socket");
    let mark = marker("pathunix");
    let o = probe(&w, &[], &mark, "unix", &[path.to_str().expect("utf8")]);
    assert_eq!(o.stdout, "unix socket: EPERM\n");
    // The socket file itself is visible (the cwd is bound), the way to it
    // is the filter.
    let o = w.sh(&[], "test -S host.sock && echo visible");
    assert_eq!(o.stdout, "visible\n", "{}", o.stderr);
    assert_eq!(
        unix_connections(&listener),
        0,
        "the host listener was reached"
    );
}

#[test]
fn loopback_mode_cannot_reach_host_listener() {
    if ready() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("host listener");
    let port = listener.local_addr().expect("addr").port().to_string();
    let udp = UdpSocket::bind(format!("127.0.0.1:{port}")).expect("host udp");
    let w = Workdir::new();
    let mark = marker("loopbackhost");
    let o = probe(&w, &["--net", "loopback"], &mark, "tcp4", &[&port]);
    assert_eq!(o.stdout, "tcp4 socket: ok\ntcp4 send: ECONNREFUSED\n");
    // UDP to the same port "succeeds" into the sandbox's own loopback.
    let o = probe(&w, &["--net", "loopback"], &mark, "udp4", &[&port]);
    assert_eq!(o.stdout, "udp4 socket: ok\nudp4 send: ok\n");
    assert_eq!(
        tcp_connections(&listener),
        0,
        "the host listener was reached"
    );
    assert!(
        udp_datagrams(&udp).is_empty(),
        "the host udp socket got datagrams"
    );
    let o = probe(&w, &["--net", "loopback"], &mark, "interfaces", &[]);
    assert_eq!(o.stdout, "interfaces: lo\n");
}

#[test]
fn loopback_mode_server_and_client_inside_work() {
    if ready() {
        return;
    }
    // The host holds the port; the sandbox binds the same number on its
    // own loopback, serves, and talks to itself.
    let listener = TcpListener::bind("127.0.0.1:0").expect("host listener");
    let port = listener.local_addr().expect("addr").port().to_string();
    let w = Workdir::new();
    let mark = marker("loopbackpair");
    let code = r#"
import socket, sys, threading
port, mark = int(sys.argv[1]), sys.argv[2].encode()
srv = socket.socket()
srv.bind(("127.0.0.1", port))
srv.listen(1)
def serve():
    c, _ = srv.accept()
    c.sendall(b"echo:" + c.recv(100))
    c.close()
t = threading.Thread(target=serve)
t.start()
cli = socket.create_connection(("127.0.0.1", port), timeout=5)
cli.sendall(mark)
print(cli.recv(200).decode())
t.join()
"#;
    let o = w.run(
        &["--net", "loopback"],
        &["python3", "-c", code, &port, &mark],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("echo:{mark}\n"));
    assert_eq!(
        tcp_connections(&listener),
        0,
        "the host listener was reached"
    );
    assert_no_process_with(&mark);
}
