//! A TLS ClientHello reader that finds the SNI host name.
//!
//! Written here rather than taken from a crate: the proxy needs only the
//! `server_name` extension of one message, must work on a partially
//! received buffer (answering "need more bytes"), must reassemble a
//! ClientHello that spans several records, and must never allocate more than
//! the bytes it was given. `tls-parser` pulls in nom and several macro
//! crates for the whole protocol; `rustls::server::Acceptor` would bring a
//! full TLS stack and its crypto provider into every build of the proxy.

use std::fmt;

/// Largest ClientHello (all records together) the proxy will buffer.
pub const MAX_CLIENT_HELLO: usize = 32 * 1024;

pub(crate) const CONTENT_HANDSHAKE: u8 = 22;
pub(crate) const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
pub(crate) const MAX_RECORD: usize = 16384 + 2048;

/// What the ClientHello says, once complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The `host_name` of the server_name extension, lower case, without a
    /// trailing dot. `None` when the extension is absent.
    pub sni: Option<String>,
    /// Where the message ends in the bytes parsed: its last byte's offset
    /// plus one (record headers included, whatever follows excluded).
    pub end: usize,
}

/// Why bytes are not an acceptable ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloError {
    /// The first byte is not a TLS handshake record.
    NotTls,
    /// A structural error, with what was wrong.
    Malformed(&'static str),
    /// Larger than [`MAX_CLIENT_HELLO`].
    TooLarge,
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotTls => f.write_str("not a TLS handshake"),
            Self::Malformed(why) => write!(f, "malformed ClientHello: {why}"),
            Self::TooLarge => f.write_str("ClientHello too large"),
        }
    }
}

/// Parses the start of a TLS connection. `Ok(None)` means more bytes are
/// needed; `buf` must hold everything received so far.
pub fn parse_client_hello(buf: &[u8]) -> Result<Option<ClientHello>, HelloError> {
    // Reassemble the handshake message from consecutive handshake records,
    // without copying: first find out how many records it needs.
    let mut pos = 0;
    let mut fragments: [(usize, usize); 8] = [(0, 0); 8];
    let mut nfrag = 0;
    let mut have = 0usize;
    let mut needed: Option<usize> = None;
    loop {
        if let Some(n) = needed {
            if have >= n {
                break;
            }
        }
        if buf.len() < pos + 5 {
            if pos == 0 && !buf.is_empty() && buf[0] != CONTENT_HANDSHAKE {
                return Err(HelloError::NotTls);
            }
            return Ok(None);
        }
        let hdr = &buf[pos..pos + 5];
        if hdr[0] != CONTENT_HANDSHAKE {
            return Err(if pos == 0 {
                HelloError::NotTls
            } else {
                HelloError::Malformed("ClientHello interrupted by another record type")
            });
        }
        if hdr[1] != 3 {
            return Err(if pos == 0 {
                HelloError::NotTls
            } else {
                HelloError::Malformed("record version")
            });
        }
        let len = u16::from_be_bytes([hdr[3], hdr[4]]) as usize;
        if len == 0 {
            return Err(HelloError::Malformed("empty handshake record"));
        }
        if len > MAX_RECORD {
            return Err(HelloError::Malformed("record longer than TLS allows"));
        }
        if pos + 5 + len > MAX_CLIENT_HELLO {
            return Err(HelloError::TooLarge);
        }
        if nfrag == fragments.len() {
            return Err(HelloError::Malformed(
                "ClientHello split into too many records",
            ));
        }
        let start = pos + 5;
        let avail = buf.len().saturating_sub(start).min(len);
        fragments[nfrag] = (start, avail);
        nfrag += 1;
        have += avail;
        if needed.is_none() && have >= 4 {
            let mut h = [0u8; 4];
            copy_out(buf, &fragments[..nfrag], 0, &mut h);
            if h[0] != HANDSHAKE_CLIENT_HELLO {
                return Err(HelloError::Malformed(
                    "first handshake message is not a ClientHello",
                ));
            }
            let body = u32::from_be_bytes([0, h[1], h[2], h[3]]) as usize;
            if body + 4 > MAX_CLIENT_HELLO {
                return Err(HelloError::TooLarge);
            }
            needed = Some(body + 4);
        }
        if avail < len {
            // The record itself is not complete yet.
            if let Some(n) = needed {
                if have >= n {
                    break;
                }
            }
            return Ok(None);
        }
        pos = start + len;
    }
    let total = needed.unwrap_or(0);
    // The last fragment holds the message's final `total - (have - avail)` bytes.
    let (last_start, last_avail) = fragments[nfrag - 1];
    let end = last_start + (total + last_avail - have);
    // Contiguous fast path: one record holds the whole message.
    let mut owned = Vec::new();
    let msg: &[u8] = if fragments[0].1 >= total {
        &buf[fragments[0].0..fragments[0].0 + total]
    } else {
        owned.resize(total, 0);
        copy_out(buf, &fragments[..nfrag], 0, &mut owned);
        &owned
    };
    parse_hello_body(&msg[4..]).map(|sni| Some(ClientHello { sni, end }))
}

fn copy_out(buf: &[u8], frags: &[(usize, usize)], mut skip: usize, out: &mut [u8]) {
    let mut w = 0;
    for &(start, len) in frags {
        if w == out.len() {
            break;
        }
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = (len - skip).min(out.len() - w);
        out[w..w + take].copy_from_slice(&buf[start + skip..start + skip + take]);
        w += take;
        skip = 0;
    }
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        if self.b.len() < n {
            return Err(HelloError::Malformed(what));
        }
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(a)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, HelloError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let n = self.u8(what)? as usize;
        self.take(n, what)
    }
    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let n = self.u16(what)? as usize;
        self.take(n, what)
    }
}

/// The SNI of a ClientHello's body (after the handshake header).
fn parse_hello_body(body: &[u8]) -> Result<Option<String>, HelloError> {
    let mut r = Reader { b: body };
    let version = r.u16("legacy_version")?;
    if version >> 8 != 3 {
        return Err(HelloError::Malformed("legacy_version"));
    }
    r.take(32, "random")?;
    let sid = r.vec8("session_id")?;
    if sid.len() > 32 {
        return Err(HelloError::Malformed("session_id longer than 32 bytes"));
    }
    let suites = r.vec16("cipher_suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(HelloError::Malformed("cipher_suites"));
    }
    let comp = r.vec8("compression_methods")?;
    if comp.is_empty() {
        return Err(HelloError::Malformed("compression_methods"));
    }
    if r.b.is_empty() {
        return Ok(None);
    }
    let exts = r.vec16("extensions")?;
    if !r.b.is_empty() {
        return Err(HelloError::Malformed("bytes after extensions"));
    }
    let mut e = Reader { b: exts };
    let mut sni = None;
    let mut seen_sni = false;
    while !e.b.is_empty() {
        let ty = e.u16("extension type")?;
        let data = e.vec16("extension data")?;
        if ty != EXT_SERVER_NAME {
            continue;
        }
        if seen_sni {
            return Err(HelloError::Malformed("two server_name extensions"));
        }
        seen_sni = true;
        sni = parse_server_name(data)?;
    }
    Ok(sni)
}

fn parse_server_name(data: &[u8]) -> Result<Option<String>, HelloError> {
    let mut r = Reader { b: data };
    let list = r.vec16("server_name list")?;
    if !r.b.is_empty() || list.is_empty() {
        return Err(HelloError::Malformed("server_name list"));
    }
    let mut l = Reader { b: list };
    let mut host = None;
    while !l.b.is_empty() {
        let ty = l.u8("server_name type")?;
        let name = l.vec16("server_name")?;
        if ty != 0 {
            continue;
        }
        if host.is_some() {
            return Err(HelloError::Malformed("two host_name entries"));
        }
        if name.is_empty() || name.len() > 255 {
            return Err(HelloError::Malformed("host_name length"));
        }
        if !name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return Err(HelloError::Malformed(
                "host_name holds characters a DNS name cannot",
            ));
        }
        let s = String::from_utf8_lossy(name).to_ascii_lowercase();
        let s = s.strip_suffix('.').unwrap_or(&s);
        // "." (the root) or names with empty labels name no host.
        if s.is_empty() || s.split('.').any(str::is_empty) {
            return Err(HelloError::Malformed("host_name has an empty label"));
        }
        host = Some(s.to_string());
    }
    Ok(host)
}

/// Builds a minimal, well-formed ClientHello record with the given SNI (or
/// none). For tests and fuzz seeds.
#[doc(hidden)]
pub fn build_client_hello(sni: Option<&str>) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[3, 3]);
    body.extend_from_slice(&[7u8; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    body.extend_from_slice(&[1, 0]); // null compression
    let mut exts = Vec::new();
    if let Some(name) = sni {
        let n = name.as_bytes();
        let mut sn = Vec::new();
        sn.push(0);
        sn.extend_from_slice(&(n.len() as u16).to_be_bytes());
        sn.extend_from_slice(n);
        exts.extend_from_slice(&0u16.to_be_bytes());
        exts.extend_from_slice(&((sn.len() + 2) as u16).to_be_bytes());
        exts.extend_from_slice(&(sn.len() as u16).to_be_bytes());
        exts.extend_from_slice(&sn);
    }
    // supported_versions: TLS 1.3
    exts.extend_from_slice(&[0, 43, 0, 3, 2, 3, 4]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![HANDSHAKE_CLIENT_HELLO];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![CONTENT_HANDSHAKE, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
mod tests {

    /// Found by cargo-fuzz: a host_name of "." used to come back as an empty
    /// SNI (which matches no CONNECT host, but must be refused as malformed).
    #[test]
    fn a_root_or_empty_label_host_name_is_malformed() {
        let crash: &[u8] = &[
            22, 3, 201, 1, 1, 1, 0, 0, 63, 3, 143, 59, 59, 59, 59, 0, 11, 0, 0, 0, 0, 0, 0, 1, 0,
            0, 0, 0, 0, 0, 0, 2, 37, 0, 0, 255, 255, 122, 126, 252, 0, 0, 1, 0, 0, 6, 0, 74, 91, 0,
            7, 7, 7, 59, 59, 59, 253, 127, 0, 0, 0, 10, 0, 0, 0, 6, 0, 4, 0, 0, 1, 46, 0,
        ];
        assert!(!matches!(
            parse_client_hello(crash),
            Ok(Some(ClientHello { sni: Some(_), .. }))
        ));
        for bad in [".", "a..b", ".a.b"] {
            let hello = build_client_hello(Some(bad));
            assert!(parse_client_hello(&hello).is_err(), "{bad} accepted");
        }
        let ok = build_client_hello(Some("Api.Example.COM."));
        let ch = parse_client_hello(&ok).expect("parses").expect("complete");
        assert_eq!(ch.sni.as_deref(), Some("api.example.com"));
    }

    use super::*;

    #[test]
    fn finds_sni() {
        let rec = build_client_hello(Some("Allowed.Test."));
        assert_eq!(
            parse_client_hello(&rec).unwrap(),
            Some(ClientHello {
                sni: Some("allowed.test".into()),
                end: rec.len(),
            })
        );
        let rec = build_client_hello(None);
        assert_eq!(
            parse_client_hello(&rec).unwrap(),
            Some(ClientHello {
                sni: None,
                end: rec.len()
            })
        );
    }

    #[test]
    fn incremental() {
        let rec = build_client_hello(Some("a.test"));
        for cut in 0..rec.len() {
            assert_eq!(parse_client_hello(&rec[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn split_records() {
        let rec = build_client_hello(Some("split.test"));
        let hs = &rec[5..];
        let mut two = Vec::new();
        for chunk in [&hs[..10], &hs[10..]] {
            two.extend_from_slice(&[22, 3, 1]);
            two.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            two.extend_from_slice(chunk);
        }
        assert_eq!(
            parse_client_hello(&two).unwrap().unwrap().sni.as_deref(),
            Some("split.test")
        );
        // The end is the message's, also when more bytes follow it in its
        // last record or after it.
        assert_eq!(parse_client_hello(&two).unwrap().unwrap().end, two.len());
        let mut longer = two.clone();
        let last = two.len() - (hs.len() - 10) - 5;
        let grown = (hs.len() - 10 + 4) as u16;
        longer[last + 3..last + 5].copy_from_slice(&grown.to_be_bytes());
        longer.extend_from_slice(&[0x14, 0, 0, 0, 0x17, 3, 3, 0, 1, 0]);
        assert_eq!(parse_client_hello(&longer).unwrap().unwrap().end, two.len());
        for cut in 0..two.len() {
            assert_eq!(parse_client_hello(&two[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn refuses_garbage() {
        assert_eq!(
            parse_client_hello(b"GET / HTTP/1.1\r\n"),
            Err(HelloError::NotTls)
        );
        assert_eq!(parse_client_hello(b"S"), Err(HelloError::NotTls));
        let mut rec = build_client_hello(Some("a.test"));
        rec[5] = 2; // ServerHello
        assert!(matches!(
            parse_client_hello(&rec),
            Err(HelloError::Malformed(_))
        ));
        let mut rec = build_client_hello(Some("a.test"));
        let n = rec.len();
        rec[n - 10] = b'/'; // bad char inside the name
        assert!(parse_client_hello(&rec).is_err());
    }
}
