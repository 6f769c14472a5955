//! Finding placeholders and swapping them for real values: whole header
//! values and request targets, and bodies as they stream past (a carry of
//! at most the longest placeholder minus one byte is held back between
//! pieces, so a placeholder split across reads is still found; nothing is
//! buffered beyond that).

use std::collections::BTreeSet;
use std::time::Instant;

use aho_corasick::{AhoCorasick, MatchKind};

use super::SecretBinding;
use crate::error::EgressError;

/// Where in a request a placeholder was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Loc {
    Header,
    /// The request target (path and query string).
    Target,
    Body,
}

impl Loc {
    fn text(self) -> &'static str {
        match self {
            Self::Header => "headers",
            Self::Target => "the query string",
            Self::Body => "the body",
        }
    }
}

/// Why a placeholder went out unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Why {
    /// The secret is not bound to this host (an incident).
    NotBound,
    /// Plain HTTP: never injected over cleartext (an incident).
    Cleartext,
    /// The secret's TTL is over.
    Expired,
    /// The binding does not allow injection at this place.
    NotEnabled(Loc),
}

impl Why {
    fn is_leak(self) -> bool {
        matches!(self, Self::NotBound | Self::Cleartext)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Inject,
    Keep(Why),
}

/// What one request may do with each secret, per place.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Per binding: header, target, body.
    actions: Vec<[Action; 3]>,
}

fn slot(loc: Loc) -> usize {
    match loc {
        Loc::Header => 0,
        Loc::Target => 1,
        Loc::Body => 2,
    }
}

impl Plan {
    /// A request inside a terminated TLS tunnel to `host:port`.
    pub(crate) fn tls(bindings: &[SecretBinding], host: &str, port: u16, now: Instant) -> Self {
        let actions = bindings
            .iter()
            .map(|b| {
                if !b.is_bound_to(host, port) {
                    return [Action::Keep(Why::NotBound); 3];
                }
                if b.expires_at.is_some_and(|t| now >= t) {
                    return [Action::Keep(Why::Expired); 3];
                }
                let pick = |on: bool, loc| {
                    if on {
                        Action::Inject
                    } else {
                        Action::Keep(Why::NotEnabled(loc))
                    }
                };
                [
                    pick(b.inject.headers, Loc::Header),
                    pick(b.inject.query, Loc::Target),
                    pick(b.inject.body, Loc::Body),
                ]
            })
            .collect();
        Self { actions }
    }

    /// A plain-HTTP request to `host:port`: nothing is injected.
    pub(crate) fn cleartext(bindings: &[SecretBinding], host: &str, port: u16) -> Self {
        let actions = bindings
            .iter()
            .map(|b| {
                let why = if b.is_bound_to(host, port) {
                    Why::Cleartext
                } else {
                    Why::NotBound
                };
                [Action::Keep(why); 3]
            })
            .collect();
        Self { actions }
    }

    /// Whether any secret may be injected at `loc`.
    pub(crate) fn injects(&self, loc: Loc) -> bool {
        self.actions.iter().any(|a| a[slot(loc)] == Action::Inject)
    }

    /// Whether injecting at `loc` can change the length (a placeholder and
    /// its value differ in length).
    pub(crate) fn changes_length(&self, bindings: &[SecretBinding], loc: Loc) -> bool {
        self.actions
            .iter()
            .zip(bindings)
            .any(|(a, b)| a[slot(loc)] == Action::Inject && b.placeholder.len() != b.value.len())
    }
}

/// What happened to placeholders in one request.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) injected: BTreeSet<usize>,
    pub(crate) kept: BTreeSet<(usize, Why)>,
}

impl Outcome {
    /// The text appended to the event's rule, e.g. `(secret A injected)`,
    /// and the names of leaked secrets.
    pub(crate) fn note(&self, bindings: &[SecretBinding], host: &str) -> (String, Vec<String>) {
        let mut parts = Vec::new();
        for &i in &self.injected {
            parts.push(format!("secret {} injected", bindings[i].name));
        }
        let mut leaked = BTreeSet::new();
        for &(i, why) in &self.kept {
            let name = &bindings[i].name;
            parts.push(match why {
                Why::NotBound => {
                    format!("secret {name} placeholder to {host}, a host it is not bound to")
                }
                Why::Cleartext => {
                    format!("secret {name} placeholder over cleartext HTTP, not injected")
                }
                Why::Expired => format!("secret {name} expired, not injected"),
                Why::NotEnabled(loc) => format!(
                    "secret {name} placeholder in {}, where injection is not enabled",
                    loc.text()
                ),
            });
            if why.is_leak() {
                leaked.insert(name.clone());
            }
        }
        let note = if parts.is_empty() {
            String::new()
        } else {
            format!("({})", parts.join("; "))
        };
        (note, leaked.into_iter().collect())
    }
}

/// All placeholders in one automaton (pattern index = binding index).
#[derive(Debug)]
pub(crate) struct Matcher {
    ac: AhoCorasick,
    max_len: usize,
}

impl Matcher {
    pub(crate) fn new(bindings: &[SecretBinding]) -> Result<Self, EgressError> {
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(bindings.iter().map(|b| b.placeholder.as_bytes()))
            .map_err(|e| EgressError::Identity(format!("placeholder matcher: {e}")))?;
        let max_len = bindings
            .iter()
            .map(|b| b.placeholder.len())
            .max()
            .unwrap_or(1);
        Ok(Self { ac, max_len })
    }

    /// Copies `input` to `out` with every injectable placeholder replaced.
    pub(crate) fn replace_all(
        &self,
        bindings: &[SecretBinding],
        plan: &Plan,
        loc: Loc,
        input: &[u8],
        out: &mut Vec<u8>,
        outcome: &mut Outcome,
    ) {
        let mut last = 0;
        for m in self.ac.find_iter(input) {
            out.extend_from_slice(&input[last..m.start()]);
            apply(
                bindings,
                plan,
                loc,
                m.pattern().as_usize(),
                &input[m.range()],
                out,
                outcome,
            );
            last = m.end();
        }
        out.extend_from_slice(&input[last..]);
    }

    /// One piece of a streamed body: appends to `out` what can be sent now
    /// and keeps in `carry` the tail that may be the start of a placeholder.
    /// With `last` everything is flushed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stream(
        &self,
        bindings: &[SecretBinding],
        plan: &Plan,
        loc: Loc,
        carry: &mut Vec<u8>,
        piece: &[u8],
        last: bool,
        out: &mut Vec<u8>,
        outcome: &mut Outcome,
    ) {
        carry.extend_from_slice(piece);
        let buf = &carry[..];
        // A placeholder starting before `limit` lies wholly inside `buf`.
        let limit = if last {
            buf.len()
        } else {
            buf.len().saturating_sub(self.max_len - 1)
        };
        let mut emitted = 0;
        for m in self.ac.find_iter(buf) {
            if m.start() >= limit {
                break;
            }
            out.extend_from_slice(&buf[emitted..m.start()]);
            apply(
                bindings,
                plan,
                loc,
                m.pattern().as_usize(),
                &buf[m.range()],
                out,
                outcome,
            );
            emitted = m.end();
        }
        let cut = emitted.max(limit);
        out.extend_from_slice(&buf[emitted..cut]);
        carry.drain(..cut);
    }

    /// Only notes placeholders (plain HTTP): nothing is changed.
    pub(crate) fn scan(
        &self,
        plan: &Plan,
        carry: &mut Vec<u8>,
        piece: &[u8],
        outcome: &mut Outcome,
    ) {
        let keep = self.max_len - 1;
        let mut note = |pattern: usize| {
            if let Some(Action::Keep(why)) = plan.actions.get(pattern).map(|a| a[slot(Loc::Body)]) {
                outcome.kept.insert((pattern, why));
            }
        };
        // The seam between the carry and this piece, then the piece itself.
        let mut seam = std::mem::take(carry);
        seam.extend_from_slice(&piece[..piece.len().min(keep)]);
        for m in self.ac.find_iter(&seam) {
            note(m.pattern().as_usize());
        }
        for m in self.ac.find_iter(piece) {
            note(m.pattern().as_usize());
        }
        if piece.len() >= keep {
            seam.clear();
            seam.extend_from_slice(&piece[piece.len() - keep..]);
        } else {
            seam.drain(..seam.len().saturating_sub(keep));
        }
        *carry = seam;
    }
}

fn apply(
    bindings: &[SecretBinding],
    plan: &Plan,
    loc: Loc,
    i: usize,
    found: &[u8],
    out: &mut Vec<u8>,
    outcome: &mut Outcome,
) {
    match plan.actions.get(i).map(|a| a[slot(loc)]) {
        Some(Action::Inject) => {
            let value = bindings[i].value.as_bytes();
            if loc == Loc::Target {
                percent_encode(value, out);
            } else {
                out.extend_from_slice(value);
            }
            outcome.injected.insert(i);
        }
        Some(Action::Keep(why)) => {
            out.extend_from_slice(found);
            outcome.kept.insert((i, why));
        }
        None => out.extend_from_slice(found),
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters, as a
/// client would have encoded the value in a query string.
fn percent_encode(value: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
    }
}

/// Decodes a chunked body into its data (trailers are dropped), so
/// placeholders split by the client's chunk boundaries are still found.
#[derive(Debug, Default)]
pub(crate) struct ChunkedDecoder {
    state: DecState,
    size: u64,
    digits: u8,
    line: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum DecState {
    #[default]
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
    Done,
}

const MAX_LINE: usize = 4096;

impl ChunkedDecoder {
    pub(crate) fn is_done(&self) -> bool {
        self.state == DecState::Done
    }

    /// Consumes framing and data from `input`, appending the data to
    /// `out`; returns how many bytes of `input` belong to the body.
    pub(crate) fn decode(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<usize, &'static str> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                DecState::Done => return Ok(i),
                DecState::Data => {
                    let take =
                        (input.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[i..i + take]);
                    self.size -= take as u64;
                    i += take;
                    if self.size == 0 {
                        self.state = DecState::DataCr;
                    }
                    continue;
                }
                DecState::Size => {
                    if let Some(d) = (b as char).to_digit(16) {
                        if self.digits >= 15 {
                            return Err("chunk size too large");
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                    } else if self.digits == 0 {
                        return Err("invalid chunk size");
                    } else if b == b';' || b == b' ' || b == b'\t' {
                        self.state = DecState::Ext;
                        self.line = 0;
                    } else if b == b'\r' {
                        self.state = DecState::SizeLf;
                    } else {
                        return Err("invalid chunk size");
                    }
                }
                DecState::Ext => {
                    self.line += 1;
                    if self.line > MAX_LINE {
                        return Err("chunk extension too long");
                    }
                    if b == b'\r' {
                        self.state = DecState::SizeLf;
                    } else if b == b'\n' || b == 0 {
                        return Err("invalid chunk extension");
                    }
                }
                DecState::SizeLf => {
                    if b != b'\n' {
                        return Err("bare CR in chunk size line");
                    }
                    self.digits = 0;
                    self.state = if self.size == 0 {
                        DecState::TrailerStart
                    } else {
                        DecState::Data
                    };
                }
                DecState::DataCr => {
                    if b != b'\r' {
                        return Err("chunk data not followed by CRLF");
                    }
                    self.state = DecState::DataLf;
                }
                DecState::DataLf => {
                    if b != b'\n' {
                        return Err("chunk data not followed by CRLF");
                    }
                    self.state = DecState::Size;
                    self.size = 0;
                }
                DecState::TrailerStart => {
                    if b == b'\r' {
                        self.state = DecState::EndLf;
                    } else if b == b'\n' || b == 0 {
                        return Err("invalid trailer");
                    } else {
                        self.state = DecState::TrailerLine;
                        self.line = 1;
                    }
                }
                DecState::TrailerLine => {
                    self.line += 1;
                    if self.line > MAX_LINE {
                        return Err("trailer too long");
                    }
                    if b == b'\r' {
                        self.state = DecState::TrailerLf;
                    } else if b == b'\n' || b == 0 {
                        return Err("invalid trailer");
                    }
                }
                DecState::TrailerLf => {
                    if b != b'\n' {
                        return Err("bare CR in trailer");
                    }
                    self.state = DecState::TrailerStart;
                }
                DecState::EndLf => {
                    if b != b'\n' {
                        return Err("bare CR after the last chunk");
                    }
                    self.state = DecState::Done;
                    return Ok(i + 1);
                }
            }
            i += 1;
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::InjectWhere;
    use zeroize::Zeroizing;

    fn binding(
        name: &str,
        ph: &str,
        value: &str,
        host: &str,
        inject: InjectWhere,
    ) -> SecretBinding {
        SecretBinding {
            name: name.into(),
            placeholder: ph.into(),
            value: Zeroizing::new(value.into()),
            hosts: vec![host.parse().unwrap()],
            inject,
            expires_at: None,
        }
    }

    fn all() -> InjectWhere {
        InjectWhere {
            headers: true,
            query: true,
            body: true,
        }
    }

    #[test]
    fn streams_across_every_split() {
        let b = vec![
            binding("A", "PH_AAAAAAAA", "value-a", "a.test", all()),
            binding("B", "PH_BBBBBBBBBBBB", "vb", "b.test", all()),
        ];
        let m = Matcher::new(&b).unwrap();
        let plan = Plan::tls(&b, "a.test", 443, Instant::now());
        let input = b"xxPH_AAAAAAAAyyPH_BBBBBBBBBBBBzzPH_AAAAAAAA";
        let want = b"xxvalue-ayyPH_BBBBBBBBBBBBzzvalue-a";
        for split in 0..=input.len() {
            for split2 in split..=input.len() {
                let mut out = Vec::new();
                let mut carry = Vec::new();
                let mut oc = Outcome::default();
                m.stream(
                    &b,
                    &plan,
                    Loc::Body,
                    &mut carry,
                    &input[..split],
                    false,
                    &mut out,
                    &mut oc,
                );
                m.stream(
                    &b,
                    &plan,
                    Loc::Body,
                    &mut carry,
                    &input[split..split2],
                    false,
                    &mut out,
                    &mut oc,
                );
                m.stream(
                    &b,
                    &plan,
                    Loc::Body,
                    &mut carry,
                    &input[split2..],
                    true,
                    &mut out,
                    &mut oc,
                );
                assert_eq!(out, want, "split {split} {split2}");
                assert!(carry.is_empty());
                assert!(oc.injected.contains(&0));
                assert!(oc.kept.contains(&(1, Why::NotBound)));
            }
        }
    }

    #[test]
    fn scan_finds_split_placeholders() {
        let b = vec![binding("A", "PH_AAAAAAAA", "v", "a.test", all())];
        let m = Matcher::new(&b).unwrap();
        let plan = Plan::cleartext(&b, "b.test", 80);
        let input = b"....PH_AAAAAAAA....";
        for split in 0..=input.len() {
            let mut carry = Vec::new();
            let mut oc = Outcome::default();
            m.scan(&plan, &mut carry, &input[..split], &mut oc);
            m.scan(&plan, &mut carry, &input[split..], &mut oc);
            assert!(oc.kept.contains(&(0, Why::NotBound)), "split {split}");
        }
        // Byte by byte.
        let mut carry = Vec::new();
        let mut oc = Outcome::default();
        for b in input.iter() {
            m.scan(&plan, &mut carry, std::slice::from_ref(b), &mut oc);
        }
        assert!(oc.kept.contains(&(0, Why::NotBound)));
    }

    #[test]
    fn query_values_are_percent_encoded_and_places_respected() {
        let mut only_headers = all();
        only_headers.query = false;
        let b = vec![
            binding("A", "PH_AAAAAAAA", "a b&c", "a.test", all()),
            binding("B", "PH_BBBBBBBB", "vb", "a.test", only_headers),
        ];
        let m = Matcher::new(&b).unwrap();
        let plan = Plan::tls(&b, "a.test", 443, Instant::now());
        let mut out = Vec::new();
        let mut oc = Outcome::default();
        m.replace_all(
            &b,
            &plan,
            Loc::Target,
            b"/p?k=PH_AAAAAAAA&j=PH_BBBBBBBB",
            &mut out,
            &mut oc,
        );
        assert_eq!(out, b"/p?k=a%20b%26c&j=PH_BBBBBBBB");
        let (note, leaked) = oc.note(&b, "a.test");
        assert!(note.contains("secret A injected"), "{note}");
        assert!(
            note.contains("secret B placeholder in the query string"),
            "{note}"
        );
        assert!(leaked.is_empty());
    }

    #[test]
    fn expired_is_not_injected() {
        let mut a = binding("A", "PH_AAAAAAAA", "v", "a.test", all());
        a.expires_at = Some(Instant::now());
        let b = vec![a];
        let m = Matcher::new(&b).unwrap();
        let plan = Plan::tls(&b, "a.test", 443, Instant::now());
        let mut out = Vec::new();
        let mut oc = Outcome::default();
        m.replace_all(
            &b,
            &plan,
            Loc::Header,
            b"Bearer PH_AAAAAAAA",
            &mut out,
            &mut oc,
        );
        assert_eq!(out, b"Bearer PH_AAAAAAAA");
        assert!(oc.note(&b, "a.test").0.contains("expired"));
    }

    #[test]
    fn chunked_decoder() {
        let body = b"5\r\nhello\r\n3;x=1\r\nabc\r\n0\r\nT: 1\r\n\r\nNEXT";
        let mut d = ChunkedDecoder::default();
        let mut out = Vec::new();
        let mut used = 0;
        for b in body.iter() {
            used += d.decode(std::slice::from_ref(b), &mut out).unwrap();
            if d.is_done() {
                break;
            }
        }
        assert_eq!(used, body.len() - 4);
        assert_eq!(out, b"helloabc");
        assert!(ChunkedDecoder::default()
            .decode(b"x\r\n", &mut out)
            .is_err());
    }
}
