//! Landlock denials, read from the kernel's audit log.
//!
//! Landlock (ABI 7+) reports a denied access only to the kernel's audit
//! subsystem, and only while audit is enabled on the host (`auditctl -e 1`
//! or `audit=1` on the kernel command line); the workload's domain asks for
//! it with `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`. Any process holding
//! `CAP_AUDIT_READ` in the initial user namespace can subscribe to the
//! read-only multicast group and see every record, so observation is
//! root-only by the kernel's design; without it the outcome says so.
//!
//! Each denial is an event of several records sharing a serial number:
//!
//! ```text
//! 1423 LANDLOCK_ACCESS  domain=1bca9c452 blockers=scope.signal opid=27557 ocomm="cordon"
//! 1424 LANDLOCK_DOMAIN  domain=1bca9c452 status=allocated mode=enforcing pid=27558 ...
//! 1300 SYSCALL          arch=c000003e syscall=62 success=no ... pid=27558 ...
//! ```
//!
//! The `allocated` record comes with the first denial of a domain and names
//! the host pid that created it; the supervisor learns the workload's host
//! pid from the kernel (`SCM_CREDENTIALS` on the message that hands over the
//! seccomp listener), so a domain is ours when those two agree. Every
//! process on the host gets the same records; the rest are ignored.
//!
//! Written by hand: the audit crates on crates.io speak the whole audit
//! protocol over an async runtime; this needs one status request and the
//! text of three record types.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use serde::{Deserialize, Serialize};

const AUDIT_GET: u16 = 1000;
const AUDIT_SYSCALL: u16 = 1300;
const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
/// The read-only multicast group (AUDIT_NLGRP_READLOG), as a bind mask.
const READLOG_GROUP_MASK: u32 = 1;
/// Records kept while their domain is not known to be ours yet.
const MAX_PENDING: usize = 256;
/// Denials kept in the outcome (all are counted).
pub(crate) const MAX_DENIALS: usize = 256;

/// One access Landlock refused to the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockDenial {
    /// What was refused, e.g. `fs.write_file`, `net.connect_tcp`,
    /// `scope.signal` (several when more than one right was missing).
    pub blockers: Vec<String>,
    /// The object, as the kernel names it (`path`, `dev`, `ino`, `daddr`,
    /// `dest`, `opid`, `ocomm`, ...).
    pub object: BTreeMap<String, String>,
    /// Host pid of the process that was refused, when the kernel said.
    pub pid: Option<u32>,
    /// The system call it was refused in, when the kernel said.
    pub syscall: Option<i64>,
    /// Milliseconds since the sandbox started, when the record arrived.
    pub at_ms: u64,
    #[serde(skip)]
    serial: u64,
}

/// Whether Landlock denials could be observed for a run, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LandlockLogState {
    /// Denials were being read from the kernel's audit log.
    pub observed: bool,
    /// What was read, or why nothing could be, with the fix.
    pub detail: String,
    /// The kernel's own count of denials in the sandbox's domain, when it
    /// reported the domain's end before the run was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_count: Option<u64>,
}

/// What the host allows: can this process read Landlock denials?
pub fn probe() -> LandlockLogState {
    match LandlockLog::open() {
        Ok(log) => LandlockLogState {
            observed: true,
            detail: log.describe(),
            kernel_count: None,
        },
        Err(why) => LandlockLogState {
            observed: false,
            detail: why,
            kernel_count: None,
        },
    }
}

/// The kernel's audit status (the fields used here).
struct Status {
    enabled: u32,
    lost: u32,
    backlog: u32,
}

/// A status request sent to the kernel, its reply not read yet.
pub(crate) struct StatusAsked {
    control: OwnedFd,
}

/// A subscription to the kernel's audit records for one run.
pub(crate) struct LandlockLog {
    records: OwnedFd,
    control: OwnedFd,
    lost_at_start: u32,
    workload: Option<u32>,
    /// Domain id -> host pid that created it, from `allocated` records.
    allocations: VecDeque<(u64, u32)>,
    ours: Vec<u64>,
    pending: VecDeque<(u64, LandlockDenial)>,
    denials: Vec<LandlockDenial>,
    total: u64,
    kernel_count: Option<u64>,
    overflowed: bool,
    buf: Vec<u8>,
}

fn socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        Some(netlink::AUDIT),
    )?)
}

impl LandlockLog {
    /// Subscribes to the audit log; `Err` says why denials cannot be
    /// observed on this host and how to change that.
    pub(crate) fn open() -> Result<LandlockLog, String> {
        LandlockLog::open_asked(LandlockLog::ask())
    }

    /// The first half of [`LandlockLog::open`]: ask for the kernel's audit
    /// status. The caller does other work while the kernel answers, then
    /// calls [`LandlockLog::open_asked`].
    pub(crate) fn ask() -> Result<StatusAsked, String> {
        let control = socket().map_err(|e| format!("no kernel audit support here ({e})"))?;
        rustix::net::bind(&control, &SocketAddrNetlink::new(0, 0))
            .map_err(|e| format!("cannot talk to the kernel's audit subsystem ({e})"))?;
        ask_status(control.as_fd()).map_err(|e| {
            format!(
                "cannot read the kernel's audit status ({e}): reading Landlock denials needs root (CAP_AUDIT_CONTROL and CAP_AUDIT_READ)"
            )
        })?;
        Ok(StatusAsked { control })
    }

    /// The second half of [`LandlockLog::open`]: read the status and
    /// subscribe.
    pub(crate) fn open_asked(asked: Result<StatusAsked, String>) -> Result<LandlockLog, String> {
        let control = asked?.control;
        let status = read_status(control.as_fd()).map_err(|e| {
            format!(
                "cannot read the kernel's audit status ({e}): reading Landlock denials needs root (CAP_AUDIT_CONTROL and CAP_AUDIT_READ)"
            )
        })?;
        if status.enabled == 0 {
            return Err(
                "kernel audit is disabled, so Landlock does not report denials: enable it with `auditctl -e 1` (package auditd) or boot with audit=1".into(),
            );
        }
        let records = socket().map_err(|e| format!("no kernel audit support here ({e})"))?;
        rustix::net::bind(&records, &SocketAddrNetlink::new(0, READLOG_GROUP_MASK)).map_err(
            |e| format!("cannot subscribe to the kernel's audit records ({e}): that needs root (CAP_AUDIT_READ)"),
        )?;
        // Bursts of denials arrive faster than a busy supervisor reads.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size_force(&records, 4 << 20)
            .or_else(|_| rustix::net::sockopt::set_socket_recv_buffer_size(&records, 4 << 20));
        Ok(LandlockLog::with_sockets(records, control, status.lost))
    }

    fn with_sockets(records: OwnedFd, control: OwnedFd, lost_at_start: u32) -> LandlockLog {
        LandlockLog {
            records,
            control,
            lost_at_start,
            workload: None,
            allocations: VecDeque::new(),
            ours: Vec::new(),
            pending: VecDeque::new(),
            denials: Vec::new(),
            total: 0,
            kernel_count: None,
            overflowed: false,
            buf: vec![0u8; 64 * 1024],
        }
    }

    fn describe(&self) -> String {
        "read from the kernel's audit log (audit enabled; CAP_AUDIT_READ)".into()
    }

    /// The descriptor to poll for records.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.records.as_fd()
    }

    /// The host pid that created the workload's Landlock domain.
    pub(crate) fn set_workload(&mut self, pid: u32) {
        self.workload = Some(pid);
        self.resolve();
    }

    /// Reads every record waiting on the socket.
    pub(crate) fn drain(&mut self, started: Instant) {
        loop {
            let n = match rustix::net::recv(&self.records, &mut self.buf[..], RecvFlags::DONTWAIT) {
                Ok((n, _)) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::NOBUFS) => {
                    // Records arrived faster than they were read and the
                    // kernel dropped some; reading goes on.
                    self.overflowed = true;
                    continue;
                }
                Err(_) => break, // EAGAIN: nothing more for now
            };
            let at_ms = started.elapsed().as_millis() as u64;
            let data = self.buf[..n].to_vec();
            for (kind, text) in messages(&data) {
                self.record(kind, text, at_ms);
            }
        }
        self.resolve();
    }

    /// Waits (at most `limit`) until the kernel has delivered every record
    /// queued so far, reading them; then says what was observed.
    pub(crate) fn finish(
        mut self,
        started: Instant,
        limit: Duration,
    ) -> (LandlockLogState, Vec<LandlockDenial>, u64) {
        let until = Instant::now() + limit;
        let mut lost = 0;
        loop {
            self.drain(started);
            match query_status(self.control.as_fd()) {
                Ok(s) => {
                    lost = s.lost.wrapping_sub(self.lost_at_start);
                    if s.backlog == 0 {
                        // The last record may be between the kernel's queue
                        // and our socket: one more look.
                        std::thread::sleep(Duration::from_micros(200));
                        self.drain(started);
                        break;
                    }
                }
                Err(_) => break,
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut detail = self.describe();
        if let Some(counted) = self.kernel_count.filter(|k| *k > self.total) {
            detail.push_str(&format!(
                "; the kernel counted {counted} denials in the sandbox's domain, {} were read",
                self.total
            ));
        }
        if self.overflowed {
            detail.push_str(
                "; audit records arrived faster than they were read and some were dropped, so some denials may be missing",
            );
        }
        if lost > 0 {
            detail.push_str(&format!(
                "; the kernel dropped {lost} audit record(s) host-wide during the run (backlog limit or rate limit), so some denials may be missing"
            ));
        }
        let state = LandlockLogState {
            observed: true,
            detail,
            kernel_count: self.kernel_count,
        };
        (state, self.denials, self.total)
    }

    fn record(&mut self, kind: u16, text: &str, at_ms: u64) {
        let Some((serial, body)) = split_header(text) else {
            return;
        };
        match kind {
            AUDIT_LANDLOCK_ACCESS => {
                let mut domain = None;
                let mut blockers = Vec::new();
                let mut object = BTreeMap::new();
                for (k, v) in fields(body) {
                    match k {
                        "domain" => domain = u64::from_str_radix(v, 16).ok(),
                        "blockers" => blockers = v.split(',').map(str::to_owned).collect(),
                        _ => {
                            object.insert(k.to_owned(), v.to_owned());
                        }
                    }
                }
                let Some(domain) = domain else { return };
                let denial = LandlockDenial {
                    blockers,
                    object,
                    pid: None,
                    syscall: None,
                    at_ms,
                    serial,
                };
                if self.pending.len() == MAX_PENDING {
                    self.pending.pop_front();
                }
                self.pending.push_back((domain, denial));
            }
            AUDIT_LANDLOCK_DOMAIN => {
                let f: BTreeMap<&str, &str> = fields(body).collect();
                let Some(domain) = f
                    .get("domain")
                    .and_then(|d| u64::from_str_radix(d, 16).ok())
                else {
                    return;
                };
                match f.get("status").copied() {
                    Some("allocated") => {
                        if let Some(pid) = f.get("pid").and_then(|p| p.parse().ok()) {
                            if self.allocations.len() == MAX_PENDING {
                                self.allocations.pop_front();
                            }
                            self.allocations.push_back((domain, pid));
                        }
                    }
                    Some("deallocated") if self.ours.contains(&domain) => {
                        self.kernel_count = f.get("denials").and_then(|d| d.parse().ok());
                    }
                    _ => {}
                }
            }
            AUDIT_SYSCALL => {
                let denied = self.denials.iter_mut().rev().take(16);
                let pending = self.pending.iter_mut().rev().take(16).map(|(_, d)| d);
                let mut hits = denied
                    .chain(pending)
                    .filter(|d| d.serial == serial)
                    .peekable();
                if hits.peek().is_none() {
                    return;
                }
                let f: BTreeMap<&str, &str> = fields(body).collect();
                let pid = f.get("pid").and_then(|p| p.parse().ok());
                let syscall = f.get("syscall").and_then(|s| s.parse().ok());
                for d in hits {
                    d.pid = pid;
                    d.syscall = syscall;
                }
            }
            _ => {}
        }
    }

    /// Moves pending denials whose domain the workload created into the
    /// outcome.
    fn resolve(&mut self) {
        let Some(workload) = self.workload else {
            return;
        };
        for (domain, pid) in &self.allocations {
            if *pid == workload && !self.ours.contains(domain) {
                self.ours.push(*domain);
            }
        }
        let mut keep = VecDeque::with_capacity(self.pending.len());
        for (domain, denial) in self.pending.drain(..) {
            if self.ours.contains(&domain) {
                self.total += 1;
                if self.denials.len() < MAX_DENIALS {
                    self.denials.push(denial);
                }
            } else {
                keep.push_back((domain, denial));
            }
        }
        self.pending = keep;
    }
}

/// Wait until `fd` is readable or `until` has passed.
fn wait_readable(fd: BorrowedFd<'_>, until: Instant) {
    let left = until.saturating_duration_since(Instant::now());
    let timeout = rustix::event::Timespec {
        tv_sec: left.as_secs() as i64,
        tv_nsec: i64::from(left.subsec_nanos()),
    };
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let _ = rustix::event::poll(&mut fds, Some(&timeout));
}

/// Asks the kernel for its audit status on a unicast socket.
fn query_status(fd: BorrowedFd<'_>) -> io::Result<Status> {
    ask_status(fd)?;
    read_status(fd)
}

/// Sends the status request; the kernel answers from a thread of its own,
/// so the reply comes later ([`read_status`]).
fn ask_status(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut req = Vec::with_capacity(16);
    req.extend_from_slice(&16u32.to_ne_bytes());
    req.extend_from_slice(&AUDIT_GET.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
    rustix::net::sendto(fd, &req, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))?;
    Ok(())
}

/// Reads the reply to [`ask_status`] (waiting at most 500 ms for it).
fn read_status(fd: BorrowedFd<'_>) -> io::Result<Status> {
    let mut buf = [0u8; 512];
    let until = Instant::now() + Duration::from_millis(500);
    loop {
        let n = match rustix::net::recv(fd, &mut buf[..], RecvFlags::DONTWAIT) {
            Ok((n, _)) => n,
            Err(rustix::io::Errno::AGAIN) if Instant::now() < until => {
                // The kernel sends the reply from a thread of its own:
                // wake when it arrives rather than on a timer.
                wait_readable(fd, until);
                continue;
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for (kind, payload) in raw_messages(&buf[..n]) {
            match kind {
                AUDIT_GET => {
                    let word = |i: usize| {
                        payload
                            .get(i * 4..i * 4 + 4)
                            .and_then(|b| b.try_into().ok())
                            .map(u32::from_ne_bytes)
                            .unwrap_or(0)
                    };
                    return Ok(Status {
                        enabled: word(1),
                        lost: word(6),
                        backlog: word(7),
                    });
                }
                NLMSG_ERROR => {
                    let errno = payload
                        .get(0..4)
                        .and_then(|b| b.try_into().ok())
                        .map(i32::from_ne_bytes)
                        .unwrap_or(0);
                    if errno != 0 {
                        return Err(io::Error::from_raw_os_error(-errno));
                    }
                }
                _ => {}
            }
        }
    }
}

/// The netlink messages in one datagram: (type, payload).
fn raw_messages(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if data.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(data[0..4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(data[4..6].try_into().ok()?);
        if len < 16 || len > data.len() {
            // Audit records do not always count their header; the payload
            // is then the rest of the datagram.
            let payload = &data[16..];
            data = &[];
            return Some((kind, payload));
        }
        let payload = &data[16..len];
        let next = (len + 3) & !3;
        data = data.get(next..).unwrap_or_default();
        Some((kind, payload))
    })
}

/// Audit records as text: (type, text without trailing NULs).
fn messages(data: &[u8]) -> impl Iterator<Item = (u16, &str)> {
    raw_messages(data).filter_map(|(kind, payload)| {
        let end = payload
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(payload.len());
        std::str::from_utf8(&payload[..end]).ok().map(|t| (kind, t))
    })
}

/// `audit(1795333575.971:62): rest` -> (62, "rest").
fn split_header(text: &str) -> Option<(u64, &str)> {
    let rest = text.strip_prefix("audit(")?;
    let (stamp, body) = rest.split_once("):")?;
    let serial = stamp.rsplit_once(':')?.1.parse().ok()?;
    Some((serial, body.trim_start()))
}

/// `key=value` pairs; values may be double-quoted (quotes removed).
fn fields(body: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = body;
    std::iter::from_fn(move || {
        rest = rest.trim_start();
        if rest.is_empty() {
            return None;
        }
        let (key, after) = rest.split_once('=')?;
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.split_once('"') {
                Some((v, n)) => (v, n),
                None => (quoted, ""),
            }
        } else {
            match after.split_once(' ') {
                Some((v, n)) => (v, n),
                None => (after, ""),
            }
        };
        rest = next;
        Some((key, value))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn datagram(kind: u16, text: &str) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&((16 + text.len()) as u32).to_ne_bytes());
        d.extend_from_slice(&kind.to_ne_bytes());
        d.extend_from_slice(&0u16.to_ne_bytes());
        d.extend_from_slice(&0u32.to_ne_bytes());
        d.extend_from_slice(&0u32.to_ne_bytes());
        d.extend_from_slice(text.as_bytes());
        d
    }

    fn log() -> LandlockLog {
        LandlockLog::with_sockets(socket().unwrap(), socket().unwrap(), 0)
    }

    fn feed(l: &mut LandlockLog, kind: u16, text: &str) {
        let d = datagram(kind, text);
        for (k, t) in messages(&d) {
            l.record(k, t, 5);
        }
        l.resolve();
    }

    #[test]
    fn fields_handle_quotes_and_bare_values() {
        let f: Vec<_> =
            fields(r#"domain=1bca9c452 blockers=fs.write_file,fs.make_reg path="/tmp/a b" dev="vda" ino=12"#)
                .collect();
        assert_eq!(
            f,
            vec![
                ("domain", "1bca9c452"),
                ("blockers", "fs.write_file,fs.make_reg"),
                ("path", "/tmp/a b"),
                ("dev", "vda"),
                ("ino", "12")
            ]
        );
    }

    #[test]
    fn header_gives_the_serial() {
        assert_eq!(
            split_header("audit(1795333575.971:62): domain=1"),
            Some((62, "domain=1"))
        );
        assert_eq!(split_header("garbage"), None);
    }

    #[test]
    fn only_the_workloads_domain_counts_whatever_the_order() {
        let mut l = log();
        // Another sandbox on the host, then ours; the pid arrives last.
        feed(
            &mut l,
            AUDIT_LANDLOCK_ACCESS,
            "audit(1.0:7): domain=aa blockers=fs.read_file path=\"/x\"",
        );
        feed(
            &mut l,
            AUDIT_LANDLOCK_DOMAIN,
            "audit(1.0:7): domain=aa status=allocated mode=enforcing pid=900 uid=0",
        );
        feed(
            &mut l,
            AUDIT_LANDLOCK_ACCESS,
            "audit(1.0:8): domain=bb blockers=scope.signal opid=1 ocomm=\"init\"",
        );
        feed(
            &mut l,
            AUDIT_LANDLOCK_DOMAIN,
            "audit(1.0:8): domain=bb status=allocated mode=enforcing pid=4242 uid=0",
        );
        feed(
            &mut l,
            AUDIT_SYSCALL,
            "audit(1.0:8): arch=c000003e syscall=62 success=no exit=-1 pid=4243",
        );
        assert!(l.denials.is_empty());
        l.set_workload(4242);
        feed(
            &mut l,
            AUDIT_LANDLOCK_ACCESS,
            "audit(1.0:9): domain=bb blockers=net.connect_tcp daddr=127.0.0.1 dest=22",
        );
        feed(
            &mut l,
            AUDIT_SYSCALL,
            "audit(1.0:9): arch=c000003e syscall=42 success=no exit=-13 pid=4250",
        );
        feed(
            &mut l,
            AUDIT_LANDLOCK_DOMAIN,
            "audit(1.0:10): domain=bb status=deallocated denials=2",
        );
        assert_eq!(l.total, 2);
        assert_eq!(l.denials[0].blockers, vec!["scope.signal"]);
        assert_eq!(l.denials[0].pid, Some(4243));
        assert_eq!(l.denials[0].syscall, Some(62));
        assert_eq!(
            l.denials[1].object.get("dest").map(String::as_str),
            Some("22")
        );
        assert_eq!(l.denials[1].pid, Some(4250));
        assert_eq!(l.kernel_count, Some(2));
    }

    #[test]
    fn malformed_records_are_ignored() {
        let mut l = log();
        l.set_workload(1);
        for text in [
            "",
            "audit(",
            "audit(1.0:x): domain=zz",
            "audit(1.0:3): blockers=fs.read_file",
        ] {
            feed(&mut l, AUDIT_LANDLOCK_ACCESS, text);
            feed(&mut l, AUDIT_LANDLOCK_DOMAIN, text);
        }
        assert_eq!(l.total, 0);
        let short = [0u8; 7];
        assert_eq!(messages(&short).count(), 0);
    }
}
