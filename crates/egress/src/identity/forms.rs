//! The forms in which a bound host may reflect a secret's value back: the
//! value itself and its common encodings. Response scrubbing looks for
//! each form and puts the placeholder back in the same form, so a JSON
//! document stays JSON and a percent-encoded URL still decodes (to the
//! placeholder).
//!
//! Written here: the encoders are a few lines each, and the scrubber needs
//! every *variant* an encoder may produce (hex case, which characters are
//! left alone, the three base64 alignments), which general-purpose
//! encoding crates do not enumerate.

/// How a value is written in a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// As it is.
    Raw,
    /// Inside a JSON string.
    Json(JsonOpts),
    /// Percent-encoded (URLs, query strings, form bodies).
    Percent(PercentOpts),
    /// Inside base64 data starting `align` bytes before the value
    /// (0, 1 or 2): only the characters that depend on the value's bits
    /// alone, so the value is found wherever it sits in the encoded data
    /// (as in HTTP Basic's `user:password`).
    Base64 { url: bool, align: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JsonOpts {
    /// `/` as `\/`.
    slash: bool,
    /// Every non-ASCII character as `\uXXXX`.
    ascii: bool,
    /// `<`, `>`, `&`, `'` as `\u003c` ... (HTML-safe encoders).
    html: bool,
    /// Every character as `\uXXXX`.
    all: bool,
    upper: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PercentOpts {
    /// Bytes left as they are (besides ASCII letters and digits).
    keep: &'static [u8],
    /// Space as `+` (form encoding).
    plus: bool,
    upper: bool,
}

/// Shortest base64 core worth looking for: a shorter one would match
/// ordinary text. Every alignment of a value of 7 bytes or more has one.
pub(crate) const MIN_ENCODED: usize = 8;

/// Every form, each once.
pub(crate) fn all() -> Vec<Form> {
    let mut v = vec![Form::Raw];
    for upper in [false, true] {
        for slash in [false, true] {
            for ascii in [false, true] {
                for html in [false, true] {
                    v.push(Form::Json(JsonOpts {
                        slash,
                        ascii,
                        html,
                        all: false,
                        upper,
                    }));
                }
            }
        }
        v.push(Form::Json(JsonOpts {
            slash: false,
            ascii: false,
            html: false,
            all: true,
            upper,
        }));
        // RFC 3986 unreserved; Python quote (keeps '/'); form encoding
        // (WHATWG, and Python quote_plus which keeps '~'); JavaScript
        // encodeURIComponent; every byte encoded.
        for (keep, plus) in [
            (&b"-._~"[..], false),
            (&b"-._~/"[..], false),
            (&b"*-._"[..], true),
            (&b"-._~"[..], true),
            (&b"-_.!~*'()"[..], false),
            (&b""[..], false),
        ] {
            v.push(Form::Percent(PercentOpts { keep, plus, upper }));
        }
    }
    for url in [false, true] {
        for align in 0..3 {
            v.push(Form::Base64 { url, align });
        }
    }
    v
}

impl Form {
    /// `value` in this form; `None` for a base64 core too short to look
    /// for (a value under 7 bytes).
    pub(crate) fn encode(self, value: &str) -> Option<Vec<u8>> {
        match self {
            Self::Raw => Some(value.as_bytes().to_vec()),
            Self::Json(o) => Some(json(value, o)),
            Self::Percent(o) => Some(percent(value.as_bytes(), o)),
            Self::Base64 { url, align } => {
                let core = base64_core(value.as_bytes(), url, align);
                (core.len() >= MIN_ENCODED).then_some(core)
            }
        }
    }
}

fn hex4(out: &mut Vec<u8>, unit: u16, upper: bool) {
    let s = if upper {
        format!("\\u{unit:04X}")
    } else {
        format!("\\u{unit:04x}")
    };
    out.extend_from_slice(s.as_bytes());
}

fn json(value: &str, o: JsonOpts) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 8);
    for c in value.chars() {
        let escape_u = o.all
            || (o.ascii && !c.is_ascii())
            || (o.html && matches!(c, '<' | '>' | '&' | '\''))
            || ((c as u32) < 0x20 && !matches!(c, '\u{8}' | '\u{c}' | '\n' | '\r' | '\t'));
        if escape_u {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                hex4(&mut out, *unit, o.upper);
            }
            continue;
        }
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '/' if o.slash => out.extend_from_slice(b"\\/"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c => {
                let mut b = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    out
}

fn percent(value: &[u8], o: PercentOpts) -> Vec<u8> {
    let hex: &[u8; 16] = if o.upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = Vec::with_capacity(value.len() * 3);
    for &b in value {
        if b == b' ' && o.plus {
            out.push(b'+');
        } else if (b.is_ascii_alphanumeric() && !o.keep.is_empty()) || o.keep.contains(&b) {
            // (An empty `keep` is the encode-every-byte variant.)
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', hex[(b >> 4) as usize], hex[(b & 15) as usize]]);
        }
    }
    out
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The base64 characters of `value` preceded by `align` other bytes that
/// depend on the value's bits only: character k covers bits 6k..6k+6 of
/// the data, the value bits 8*align..8*(align+len).
pub(crate) fn base64_core(value: &[u8], url: bool, align: u8) -> Vec<u8> {
    let abc = if url { B64URL } else { B64 };
    let start_bit = 8 * align as usize;
    let end_bit = start_bit + 8 * value.len();
    let bit = |i: usize| -> u8 {
        let i = i - start_bit;
        (value[i / 8] >> (7 - i % 8)) & 1
    };
    let first = start_bit.div_ceil(6);
    let last = end_bit / 6; // exclusive
    let mut out = Vec::with_capacity(last.saturating_sub(first));
    for k in first..last {
        let mut six = 0u8;
        for i in 6 * k..6 * k + 6 {
            six = (six << 1) | bit(i);
        }
        out.push(abc[six as usize]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoders_match_known_outputs() {
        let o = |slash, ascii, html, all, upper| JsonOpts {
            slash,
            ascii,
            html,
            all,
            upper,
        };
        assert_eq!(
            json("a/b\"é<", o(false, false, false, false, false)),
            "a/b\\\"é<".as_bytes()
        );
        assert_eq!(json("a/b", o(true, false, false, false, false)), b"a\\/b");
        assert_eq!(
            json("é<", o(false, true, true, false, false)),
            b"\\u00e9\\u003c"
        );
        assert_eq!(json("é", o(false, true, false, false, true)), b"\\u00E9");
        assert_eq!(
            json("😀", o(false, true, false, false, false)),
            b"\\ud83d\\ude00"
        );
        assert_eq!(
            json("ab", o(false, false, false, true, false)),
            b"\\u0061\\u0062"
        );
        let p = |keep, plus, upper| PercentOpts { keep, plus, upper };
        assert_eq!(percent(b"a b/~", p(b"-._~", false, true)), b"a%20b%2F~");
        assert_eq!(percent(b"a b/~", p(b"*-._", true, false)), b"a+b%2f%7e");
        assert_eq!(percent(b"ab", p(b"", false, true)), b"%61%62");
        // Alignment 0 of "hello world" (aGVsbG8gd29ybGQ=) without the
        // characters that mix in what follows; the other alignments match
        // the encoding of a prefixed text.
        assert_eq!(base64_core(b"hello world", false, 0), b"aGVsbG8gd29ybG");
        // "x" + "hello world" = eGhlbGxvIHdvcmxk: skip 2 chars, drop the tail.
        assert_eq!(base64_core(b"hello world", false, 1), b"hlbGxvIHdvcmxk");
        // "xy" + ... = eHloZWxsbyB3b3JsZA==.
        assert_eq!(base64_core(b"hello world", false, 2), b"oZWxsbyB3b3JsZ");
        assert_eq!(base64_core(&[0xfb, 0xff, 0xbf], true, 0), b"-_-_");
    }
}
