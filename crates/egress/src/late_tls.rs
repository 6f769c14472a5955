//! TLS that starts late in a tunnel: STARTTLS and its kin.
//!
//! A tunnel whose first bytes are not TLS may switch to TLS later: SMTP,
//! IMAP, POP3, FTP, XMPP, LDAP and NNTP after a command (`STARTTLS`,
//! `STLS`, `AUTH TLS`), PostgreSQL after an SSLRequest, MySQL after a flag
//! in its handshake, or any protocol a client and server agree on. The
//! SNI rule of a tunnel's first bytes (a ClientHello must name the
//! tunnel's host) must then hold wherever a ClientHello comes, so every
//! byte the sandbox sends on such a tunnel is watched.
//!
//! The watch holds nothing back. It keeps a copy of the bytes from the
//! earliest place a ClientHello may start and judges each chunk before the
//! chunk is written on, so the chunk that would complete a ClientHello
//! with another name never reaches the destination: a server answers a
//! ClientHello only once it has all of it, and the early data after it
//! comes later still.
//!
//! Where a ClientHello starts: a handshake record header (22, 3, a
//! version, a length of 1 to the largest record) whose handshake message,
//! reassembled across records, begins like a ClientHello (type 1, a body
//! of 41 bytes to 192 KiB, legacy version 3.x). Random bytes look like
//! that at about one place in 2^40, so a binary protocol is not
//! cut by chance; a place that does is judged as a tunnel's first
//! ClientHello is, failing closed: it must parse and name the host. Each
//! such place is judged on its own, also one inside another that is still
//! under way, and a second ClientHello on the tunnel (after a
//! HelloRetryRequest, or a new TLS session) as much as the first. A
//! ClientHello in the old SSLv2 format, which has no SNI, is not looked
//! for here.

use crate::sni::{parse_client_hello, CONTENT_HANDSHAKE, HANDSHAKE_CLIENT_HELLO, MAX_RECORD};

/// The shortest ClientHello body: version, random, an empty session id,
/// one cipher suite, one compression method.
const MIN_HELLO_BODY: usize = 2 + 32 + 1 + 2 + 2 + 1 + 1;

/// How many bytes of the handshake message decide that a place starts a
/// ClientHello: type, length, legacy version.
const HELLO_PREFIX: usize = 6;

/// How many ClientHellos may be under way at once (started, not yet
/// complete). A client sends one at a time; more is refused.
const MAX_PENDING: usize = 16;

/// Watches the bytes a sandbox sends on a tunnel that did not start with
/// TLS, for a ClientHello that does not name the tunnel's host.
///
/// Every place that starts a ClientHello is judged on its own, also one
/// that starts inside another that is not complete yet: which of them the
/// server reads as its ClientHello depends on the protocol before it (a
/// lookalike sent as a plaintext command, then STARTTLS and the real one).
#[derive(Debug)]
pub struct LateHelloWatch {
    host: String,
    sni_optional: bool,
    /// The bytes from the earliest place a ClientHello may still start or
    /// be under way.
    window: Vec<u8>,
    /// Where in `window` ClientHellos start that are not complete yet.
    pending: Vec<usize>,
    /// Where in `window` to look on for starts (every place before it was
    /// told apart already).
    resume: usize,
}

impl LateHelloWatch {
    /// A watch for a tunnel to `host`; `sni_optional` lets a ClientHello
    /// without SNI pass (`allow_missing_sni`).
    pub fn new(host: &str, sni_optional: bool) -> Self {
        Self {
            host: host.to_string(),
            sni_optional,
            window: Vec::new(),
            pending: Vec::new(),
            resume: 0,
        }
    }

    /// Judges the next chunk the sandbox sent, before it is written on.
    /// `Err` names the rule that refuses the tunnel: a ClientHello for
    /// another host, one without SNI, or one that does not parse.
    pub fn judge(&mut self, chunk: &[u8]) -> Result<(), String> {
        if self.window.is_empty() {
            // Nothing pending: scan the chunk where it is, keep what is left.
            let (keep_from, verdict) = self.scan(chunk, 0);
            self.window.extend_from_slice(&chunk[keep_from..]);
            return verdict;
        }
        let mut window = std::mem::take(&mut self.window);
        window.extend_from_slice(chunk);
        let (keep_from, verdict) = self.scan(&window, self.resume);
        window.drain(..keep_from);
        self.window = window;
        verdict
    }

    /// Scans `buf` (what was kept, then the new bytes) for starts from
    /// `from` on, then judges every ClientHello under way. Returns where
    /// the bytes to keep begin (the places in `pending` and `resume` are
    /// made relative to that) and the verdict.
    fn scan(&mut self, buf: &[u8], from: usize) -> (usize, Result<(), String>) {
        let mut undecided = None;
        let mut pos = from;
        while let Some(i) = memchr::memchr(CONTENT_HANDSHAKE, &buf[pos..]) {
            let start = pos + i;
            match starts_a_client_hello(&buf[start..]) {
                None => {
                    undecided = Some(start);
                    break;
                }
                Some(true) => self.pending.push(start),
                Some(false) => {}
            }
            pos = start + 1;
        }
        if self.pending.len() > MAX_PENDING {
            return (
                0,
                Err("too many ClientHellos under way (TLS after a plaintext start)".into()),
            );
        }
        let mut under_way = Vec::with_capacity(self.pending.len());
        for &start in &self.pending {
            match parse_client_hello(&buf[start..]) {
                Ok(None) => under_way.push(start),
                Ok(Some(hello)) => {
                    if let Err(rule) = self.judge_sni(hello.sni) {
                        return (0, Err(rule));
                    }
                }
                Err(e) => {
                    return (
                        0,
                        Err(format!("malformed: {e} (TLS after a plaintext start)")),
                    )
                }
            }
        }
        let resume = undecided.unwrap_or(buf.len());
        let keep_from = under_way.first().copied().unwrap_or(resume).min(resume);
        self.pending = under_way.into_iter().map(|p| p - keep_from).collect();
        self.resume = resume - keep_from;
        (keep_from, Ok(()))
    }

    fn judge_sni(&self, sni: Option<String>) -> Result<(), String> {
        match sni {
            Some(sni) if sni == self.host => Ok(()),
            Some(sni) => Err(format!("sni-mismatch {sni} (TLS after a plaintext start)")),
            None if self.sni_optional => Ok(()),
            None => Err("sni-missing (TLS after a plaintext start)".to_string()),
        }
    }
}

/// Whether `buf` starts with a ClientHello by the module's rule: `None`
/// until enough bytes have come to tell.
fn starts_a_client_hello(buf: &[u8]) -> Option<bool> {
    let mut prefix = [0u8; HELLO_PREFIX];
    let mut have = 0;
    let mut pos = 0;
    while have < HELLO_PREFIX {
        let header = &buf[pos.min(buf.len())..buf.len().min(pos + 5)];
        if header.first().is_some_and(|&b| b != CONTENT_HANDSHAKE)
            || header.get(1).is_some_and(|&b| b != 3)
        {
            return Some(false);
        }
        if header.len() < 5 {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_RECORD {
            return Some(false);
        }
        let body = &buf[pos + 5..buf.len().min(pos + 5 + len)];
        let take = body.len().min(HELLO_PREFIX - have);
        prefix[have..have + take].copy_from_slice(&body[..take]);
        have += take;
        if !hello_prefix_fits(&prefix[..have]) {
            return Some(false);
        }
        if body.len() < len {
            // The record goes on past what has come.
            return (have == HELLO_PREFIX).then_some(true);
        }
        pos += 5 + len;
    }
    Some(true)
}

/// Whether the first bytes of a handshake message fit a ClientHello that
/// some server takes: type 1, a body of at least [`MIN_HELLO_BODY`] bytes
/// and below 3 x 64 KiB (OpenSSL takes up to 128 KiB), legacy version 3.x.
/// A longer body than [`crate::sni::MAX_CLIENT_HELLO`] still starts one: it is then
/// refused as too large, as at a tunnel's start.
fn hello_prefix_fits(prefix: &[u8]) -> bool {
    let fixed = prefix.iter().enumerate().all(|(i, &b)| match i {
        0 => b == HANDSHAKE_CLIENT_HELLO,
        1 => b <= 2,
        4 => b == 3,
        _ => true,
    });
    let long_enough = match prefix {
        [_, a, b, c, ..] => u32::from_be_bytes([0, *a, *b, *c]) as usize >= MIN_HELLO_BODY,
        _ => true,
    };
    fixed && long_enough
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sni::build_client_hello;

    /// `hello` split into records of `size` bytes of handshake message each.
    fn in_records(hello: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in hello[5..].chunks(size) {
            out.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1]);
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    /// Feeds `stream` to a watch for `a.test` in chunks of `size` bytes;
    /// the offset of the chunk refused and why, or `None`.
    fn refused_at(stream: &[u8], size: usize) -> Option<(usize, String)> {
        let mut w = LateHelloWatch::new("a.test", false);
        for (i, chunk) in stream.chunks(size).enumerate() {
            if let Err(rule) = w.judge(chunk) {
                return Some((i * size, rule));
            }
        }
        None
    }

    fn smtp_then(hello: &[u8]) -> Vec<u8> {
        let mut s = b"EHLO sandbox\r\nSTARTTLS\r\n".to_vec();
        s.extend_from_slice(hello);
        s
    }

    /// A ClientHello for another host after a plaintext start is refused
    /// however the stream is cut into chunks and the hello into records,
    /// and always at the chunk that completes it, never later: every byte
    /// before that chunk may go on, none from it.
    #[test]
    fn a_late_client_hello_for_another_host_is_refused_at_the_chunk_that_completes_it() {
        let bad = build_client_hello(Some("b.test"));
        for records in [bad.len(), 100, 20, 7, 1] {
            let hello = in_records(&bad, records);
            // The reader takes a ClientHello in at most 8 records (as at a
            // tunnel's start); one in more is refused as malformed.
            let expected = if (bad.len() - 5).div_ceil(records) <= 8 {
                "sni-mismatch b.test (TLS after a plaintext start)"
            } else {
                "malformed: malformed ClientHello: ClientHello split into too many records (TLS after a plaintext start)"
            };
            let stream = smtp_then(&hello);
            for size in [1, 2, 3, 5, 13, 64, stream.len()] {
                let (at, rule) = refused_at(&stream, size)
                    .unwrap_or_else(|| panic!("records of {records}, chunks of {size}: passed"));
                assert_eq!(rule, expected, "records of {records}, chunks of {size}");
                if expected.starts_with("malformed") {
                    continue;
                }
                assert!(
                    at < stream.len() && stream.len() <= at + size,
                    "records of {records}, chunks of {size}: refused at {at}"
                );
            }
        }
    }

    #[test]
    fn a_late_client_hello_for_the_host_passes_and_the_next_one_is_judged_too() {
        let good = build_client_hello(Some("a.test"));
        let mut stream = smtp_then(&good);
        for size in [1, 7, stream.len()] {
            assert_eq!(refused_at(&stream, size), None, "chunks of {size}");
        }
        // Application data after it, then a second hello (as after a
        // HelloRetryRequest) for another host.
        stream.extend_from_slice(&[0x17, 3, 3, 0, 4, 0x16, 3, 1, 0]);
        let after = stream.len();
        stream.extend_from_slice(&build_client_hello(Some("b.test")));
        let (at, rule) = refused_at(&stream, 1).expect("the second hello is judged");
        assert_eq!(at, stream.len() - 1);
        assert!(at > after);
        assert!(rule.starts_with("sni-mismatch b.test"), "{rule}");
    }

    /// A lookalike of a ClientHello's start sent as a plaintext command
    /// (its record claims 16 KiB) must not shield the real ClientHello that
    /// comes inside its span after STARTTLS: that one is judged when it
    /// completes, not when the lookalike would.
    #[test]
    fn a_client_hello_inside_an_unfinished_lookalike_is_judged_when_it_completes() {
        let mut stream = b"EHLO sandbox\r\nNOOP ".to_vec();
        stream.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1, 0x40, 0, 1, 0, 0x3f, 0xf0, 3, 3]);
        stream.extend_from_slice(b"\r\nSTARTTLS\r\n");
        let hello = build_client_hello(Some("b.test"));
        stream.extend_from_slice(&hello);
        let complete = stream.len();
        // The TLS session the server would have begun with that hello.
        for _ in 0..64 {
            stream.extend_from_slice(&[0x17, 3, 3, 0, 200]);
            stream.extend_from_slice(&[0xab; 200]);
        }
        for size in [1, 9, 100, 1000] {
            let (at, rule) = refused_at(&stream, size).expect("refused");
            assert_eq!(rule, "sni-mismatch b.test (TLS after a plaintext start)");
            assert!(
                at < complete && complete <= at + size,
                "chunks of {size}: refused at {at}, the hello completes at {complete}"
            );
        }
    }

    /// A ClientHello larger than the proxy reads (a server may take one up
    /// to 128 KiB) is refused as too large, not passed as no ClientHello.
    #[test]
    fn a_late_client_hello_larger_than_the_proxy_reads_is_refused() {
        let body = 40 * 1024u32;
        let mut stream = b"STARTTLS\r\n".to_vec();
        stream.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1, 0x40, 0]);
        stream.push(HANDSHAKE_CLIENT_HELLO);
        stream.extend_from_slice(&body.to_be_bytes()[1..]);
        stream.extend_from_slice(&[3, 3]);
        stream.extend_from_slice(&vec![0; 0x4000 - 6]);
        let (_, rule) = refused_at(&stream, 512).expect("refused");
        assert!(rule.contains("too large"), "{rule}");
    }

    /// More ClientHello starts under way at once than a client sends is
    /// refused, so the kept bytes stay bounded.
    #[test]
    fn too_many_client_hellos_under_way_are_refused() {
        let mut stream = Vec::new();
        for _ in 0..=MAX_PENDING {
            stream.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1, 0x40, 0, 1, 0, 0x3f, 0xf0, 3, 3]);
        }
        let (_, rule) = refused_at(&stream, stream.len()).expect("refused");
        assert!(
            rule.starts_with("too many ClientHellos under way"),
            "{rule}"
        );
    }

    #[test]
    fn a_late_client_hello_without_sni_passes_only_when_allowed() {
        let stream = smtp_then(&build_client_hello(None));
        let (_, rule) = refused_at(&stream, 16).expect("refused");
        assert_eq!(rule, "sni-missing (TLS after a plaintext start)");
        let mut w = LateHelloWatch::new("a.test", true);
        assert_eq!(w.judge(&stream), Ok(()));
    }

    /// A place that starts like a ClientHello must be one: a record and
    /// handshake header of a ClientHello with a body that does not parse
    /// is refused.
    #[test]
    fn a_late_client_hello_that_does_not_parse_is_refused() {
        let mut bad = build_client_hello(Some("a.test"));
        let n = bad.len();
        bad[n - 10] = b'/'; // a bad character inside the name
        let (_, rule) = refused_at(&smtp_then(&bad), 5).expect("refused");
        assert!(rule.starts_with("malformed: "), "{rule}");
    }

    /// Bytes that hold the record type 22 here and there, and even a record
    /// header, but no ClientHello's start, pass; so do a few MiB of
    /// pseudo-random bytes (as an SSH or database session carries), and the
    /// window never holds more than a few bytes meanwhile.
    #[test]
    fn plaintext_and_binary_streams_pass() {
        let mut w = LateHelloWatch::new("a.test", false);
        for chunk in [
            &b"\x16\x16\x16"[..],
            b"\x16\x03",
            b"\x01\x00\x30\x02",
            b"x\x16\x03\x03\x00\x10\x10\x00\x00\x0c",
            b"SELECT 1;\x16",
        ] {
            assert_eq!(w.judge(chunk), Ok(()));
        }
        let mut rng = fastrand::Rng::with_seed(7);
        let mut chunk = vec![0u8; 64 * 1024];
        for _ in 0..64 {
            rng.fill(&mut chunk);
            assert_eq!(w.judge(&chunk), Ok(()));
            assert!(w.window.len() < 64, "{}", w.window.len());
        }
    }
}
