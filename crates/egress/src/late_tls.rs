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
//! of 41 bytes to [`MAX_CLIENT_HELLO`], legacy version 3.x). Random bytes
//! look like that at about one place in 2^40, so a binary protocol is not
//! cut by chance; a place that does is judged as a tunnel's first
//! ClientHello is, failing closed: it must parse and name the host. A
//! ClientHello in the old SSLv2 format, which has no SNI, is not looked
//! for here.

use crate::sni::{
    parse_client_hello, CONTENT_HANDSHAKE, HANDSHAKE_CLIENT_HELLO, MAX_CLIENT_HELLO, MAX_RECORD,
};

/// The shortest ClientHello body: version, random, an empty session id,
/// one cipher suite, one compression method.
const MIN_HELLO_BODY: usize = 2 + 32 + 1 + 2 + 2 + 1 + 1;

/// How many bytes of the handshake message decide that a place starts a
/// ClientHello: type, length, legacy version.
const HELLO_PREFIX: usize = 6;

/// Watches the bytes a sandbox sends on a tunnel that did not start with
/// TLS, for a ClientHello that does not name the tunnel's host.
#[derive(Debug)]
pub struct LateHelloWatch {
    host: String,
    sni_optional: bool,
    /// The bytes from the earliest place a ClientHello may still start.
    window: Vec<u8>,
    /// The window starts with a ClientHello (see the module's rule).
    sure: bool,
}

impl LateHelloWatch {
    /// A watch for a tunnel to `host`; `sni_optional` lets a ClientHello
    /// without SNI pass (`allow_missing_sni`).
    pub fn new(host: &str, sni_optional: bool) -> Self {
        Self {
            host: host.to_string(),
            sni_optional,
            window: Vec::new(),
            sure: false,
        }
    }

    /// Judges the next chunk the sandbox sent, before it is written on.
    /// `Err` names the rule that refuses the tunnel: a ClientHello for
    /// another host, one without SNI, or one that does not parse.
    pub fn judge(&mut self, chunk: &[u8]) -> Result<(), String> {
        if self.window.is_empty() {
            // Nothing pending: scan the chunk where it is, keep what is left.
            let (done, verdict) = self.scan(chunk);
            self.window.extend_from_slice(&chunk[done..]);
            return verdict;
        }
        let mut window = std::mem::take(&mut self.window);
        window.extend_from_slice(chunk);
        let (done, verdict) = self.scan(&window);
        window.drain(..done);
        self.window = window;
        verdict
    }

    /// Scans `buf` (what was pending, then the new bytes): returns how many
    /// of its first bytes can no longer start or complete a ClientHello,
    /// and the verdict on every ClientHello completed in it.
    fn scan(&mut self, buf: &[u8]) -> (usize, Result<(), String>) {
        let mut pos = 0;
        loop {
            let rest = &buf[pos..];
            if self.sure {
                let hello = match parse_client_hello(rest) {
                    Ok(None) => return (pos, Ok(())),
                    Ok(Some(hello)) => hello,
                    Err(e) => {
                        return (
                            pos,
                            Err(format!("malformed: {e} (TLS after a plaintext start)")),
                        )
                    }
                };
                if let Err(rule) = self.judge_sni(hello.sni) {
                    return (pos, Err(rule));
                }
                // A later ClientHello (after a HelloRetryRequest, or a new
                // TLS session on the same tunnel) starts after this one.
                pos += hello.end;
                self.sure = false;
                continue;
            }
            let Some(i) = memchr::memchr(CONTENT_HANDSHAKE, rest) else {
                return (buf.len(), Ok(()));
            };
            pos += i;
            match starts_a_client_hello(&buf[pos..]) {
                None => return (pos, Ok(())),
                Some(true) => self.sure = true,
                Some(false) => pos += 1,
            }
        }
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

/// Whether the first bytes of a handshake message fit a ClientHello.
fn hello_prefix_fits(prefix: &[u8]) -> bool {
    let fixed = prefix.iter().enumerate().all(|(i, &b)| match i {
        0 => b == HANDSHAKE_CLIENT_HELLO,
        // The body's length has three bytes; the largest accepted has
        // none in the first.
        1 => b == 0,
        4 => b == 3,
        _ => true,
    });
    let length_fits = match prefix {
        [_, a, b, c, ..] => {
            let body = u32::from_be_bytes([0, *a, *b, *c]) as usize;
            (MIN_HELLO_BODY..=MAX_CLIENT_HELLO - 4).contains(&body)
        }
        _ => true,
    };
    fixed && length_fits
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
