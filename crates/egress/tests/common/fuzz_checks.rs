//! Invariants checked on arbitrary input, shared by the cargo-fuzz targets
//! (fuzz/) and the stable-Rust randomized test (tests/fuzz_parsers.rs).
#![allow(dead_code)]

use cordon_egress::http1::{self, BodyKind, ChunkedScanner, Target};
use cordon_egress::late_tls::LateHelloWatch;
use cordon_egress::sni;

/// The request-head parser must never panic; what it accepts must be safe to
/// forward: the head fits in the input, the upstream serialization has no
/// NUL and no bare CR or LF, and it parses again to the same request.
pub fn request_head(data: &[u8]) {
    match http1::parse_request_head(data) {
        Ok(None) => {}
        Err(e) => assert!((400..=505).contains(&e.status), "{e:?}"),
        Ok(Some(h)) => {
            assert!(h.head_len <= data.len());
            assert!(
                !(h.body == BodyKind::Chunked
                    && h.headers
                        .iter()
                        .any(|(n, _)| n.eq_ignore_ascii_case("content-length")))
            );
            let mut out = Vec::new();
            h.write_upstream(&mut out);
            assert!(!out.contains(&0), "NUL forwarded");
            for (i, b) in out.iter().enumerate() {
                if *b == b'\r' {
                    assert_eq!(out.get(i + 1), Some(&b'\n'), "bare CR forwarded");
                }
                if *b == b'\n' {
                    assert_eq!(
                        i.checked_sub(1).map(|j| out[j]),
                        Some(b'\r'),
                        "bare LF forwarded"
                    );
                }
            }
            let mut slots = [httparse::EMPTY_HEADER; 128];
            let mut req = httparse::Request::new(&mut slots);
            match req.parse(&out) {
                Ok(httparse::Status::Complete(n)) => assert_eq!(n, out.len()),
                other => panic!("forwarded head does not parse: {other:?}"),
            }
            assert_eq!(req.method, Some(h.method.as_str()));
            if let Target::Absolute { path, .. } = &h.target {
                assert_eq!(req.path, Some(path.as_str()));
                assert!(path.starts_with('/'));
            }
            let hosts = req
                .headers
                .iter()
                .filter(|x| x.name.eq_ignore_ascii_case("host"))
                .count();
            assert!(hosts <= 1, "more than one Host forwarded");
            for x in req.headers.iter() {
                let n = x.name.to_ascii_lowercase();
                assert!(!n.starts_with("proxy-"), "proxy header forwarded: {n}");
                // The proxy itself adds `Connection: close` for HTTP/1.0 clients.
                assert!(
                    n != "connection" || x.value == b"close",
                    "client's Connection forwarded"
                );
            }
        }
    }
}

/// The ClientHello reader must never panic, and a longer input must not
/// change a complete answer.
pub fn client_hello(data: &[u8]) {
    let r = sni::parse_client_hello(data);
    if let Ok(Some(ch)) = &r {
        if let Some(name) = &ch.sni {
            assert!(!name.is_empty());
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b)),
                "{name:?}"
            );
        }
        let mut longer = data.to_vec();
        longer.extend_from_slice(b"\x17\x03\x03\x00\x01x");
        assert_eq!(sni::parse_client_hello(&longer), r);
    }
}

/// The chunked scanner must never panic, never claim more bytes than it
/// was given, and give the same answer however the input is split.
pub fn chunked(data: &[u8]) {
    let mut whole = ChunkedScanner::new();
    let whole_r = whole.feed(data);
    if let Ok(n) = whole_r {
        assert!(n <= data.len());
    }
    let split = data.len() / 3;
    let mut parts = ChunkedScanner::new();
    let a = parts.feed(&data[..split]);
    let combined = match a {
        Err(e) => Err(e),
        Ok(n) if parts.is_done() => Ok(n),
        Ok(n) => parts.feed(&data[split..]).map(|m| n + m),
    };
    match (whole_r, combined) {
        (Ok(x), Ok(y)) => {
            assert_eq!(x, y);
            assert_eq!(whole.is_done(), parts.is_done());
        }
        (Err(_), Err(_)) => {}
        (x, y) => panic!("split changed the result: {x:?} vs {y:?}"),
    }
}

/// The late-ClientHello watch must never panic, and must judge a stream
/// the same however TCP cuts it: with one byte at a time it refuses (or
/// not) at some byte; cut anywhere else, it refuses in the chunk that
/// holds that byte, never earlier or later. (Where two ClientHellos fail
/// in one chunk, the rule names the first to start, which need not be
/// the first to fail.)
pub fn late_hello(data: &[u8]) {
    let refused_at = |cuts: &mut dyn Iterator<Item = usize>| -> Option<(usize, usize, String)> {
        let mut w = LateHelloWatch::new("a.test", false);
        let mut start = 0;
        for end in cuts.chain(std::iter::once(data.len())) {
            let end = end.clamp(start, data.len());
            if let Err(rule) = w.judge(&data[start..end]) {
                return Some((start, end, rule));
            }
            start = end;
        }
        None
    };
    let by_byte = refused_at(&mut (1..data.len()));
    let byte = by_byte.as_ref().map(|(at, _, _)| *at);
    let seed = data.first().copied().unwrap_or(1).max(1) as usize;
    for cuts in [
        vec![],
        (seed..data.len()).step_by(seed).collect::<Vec<_>>(),
        vec![data.len() / 2],
    ] {
        match (refused_at(&mut cuts.into_iter()), &byte) {
            (None, None) => {}
            (Some((start, end, _)), Some(at)) => {
                assert!(
                    start <= *at && *at < end,
                    "refused in {start}..{end}, byte {at}"
                );
            }
            (other, byte) => panic!("chunked: {other:?}, byte at a time: {byte:?}"),
        }
    }
}
