//! Swapping placeholders and real values, both ways: placeholders for
//! values in requests ([`Inject`]), values back to placeholders in
//! responses ([`Scrub`]). One engine ([`Rewrite`]) does whole header values
//! and request targets, and bodies as they stream past (a carry of at most
//! the longest pattern minus one byte is held back between pieces, so a
//! pattern split across reads is still found; nothing is buffered beyond
//! that).

use std::collections::BTreeSet;
use std::ops::Range;
use std::time::Instant;

use aho_corasick::{AhoCorasick, MatchKind};

use zeroize::Zeroizing;

use super::{forms, SecretBinding};
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
    /// Secrets whose value came back from the origin and was replaced by
    /// the placeholder.
    pub(crate) scrubbed: BTreeSet<usize>,
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
        for &i in &self.scrubbed {
            parts.push(format!(
                "secret {} scrubbed from response",
                bindings[i].name
            ));
        }
        let note = if parts.is_empty() {
            String::new()
        } else {
            format!("({})", parts.join("; "))
        };
        (note, leaked.into_iter().collect())
    }
}

/// Rewrites patterns found in text: the leftmost-longest matches, not
/// overlapping. The provided methods are the one engine both directions
/// use.
pub(crate) trait Rewrite {
    /// The longest pattern (at least 1).
    fn max_len(&self) -> usize;
    /// Matches in `hay`, in order, as (pattern, range).
    fn matches(&self, hay: &[u8]) -> Vec<(usize, Range<usize>)>;
    /// Appends what replaces pattern `i` (found as `found`) to `out`.
    fn apply(&self, i: usize, found: &[u8], out: &mut Vec<u8>, outcome: &mut Outcome);

    /// Copies `input` to `out` with every match rewritten.
    fn replace_all(&self, input: &[u8], out: &mut Vec<u8>, outcome: &mut Outcome) {
        let mut last = 0;
        for (i, r) in self.matches(input) {
            out.extend_from_slice(&input[last..r.start]);
            self.apply(i, &input[r.clone()], out, outcome);
            last = r.end;
        }
        out.extend_from_slice(&input[last..]);
    }

    /// One piece of a streamed body: appends to `out` what can be sent now
    /// and keeps in `carry` the tail that may be the start of a pattern.
    /// With `last` everything is flushed.
    fn stream(
        &self,
        carry: &mut Vec<u8>,
        piece: &[u8],
        last: bool,
        out: &mut Vec<u8>,
        outcome: &mut Outcome,
    ) {
        carry.extend_from_slice(piece);
        let buf = &carry[..];
        // A pattern starting before `limit` lies wholly inside `buf`.
        let limit = if last {
            buf.len()
        } else {
            buf.len().saturating_sub(self.max_len() - 1)
        };
        let mut emitted = 0;
        for (i, r) in self.matches(buf) {
            if r.start >= limit {
                break;
            }
            out.extend_from_slice(&buf[emitted..r.start]);
            self.apply(i, &buf[r.clone()], out, outcome);
            emitted = r.end;
        }
        let cut = emitted.max(limit);
        out.extend_from_slice(&buf[emitted..cut]);
        carry.drain(..cut);
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

    /// Placeholders to values in a request, at `loc`, as `plan` allows.
    pub(crate) fn inject<'a>(
        &'a self,
        bindings: &'a [SecretBinding],
        plan: &'a Plan,
        loc: Loc,
    ) -> Inject<'a> {
        Inject {
            matcher: self,
            bindings,
            plan,
            loc,
        }
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

/// Placeholders to real values (requests).
pub(crate) struct Inject<'a> {
    matcher: &'a Matcher,
    bindings: &'a [SecretBinding],
    plan: &'a Plan,
    loc: Loc,
}

impl Rewrite for Inject<'_> {
    fn max_len(&self) -> usize {
        self.matcher.max_len
    }

    fn matches(&self, hay: &[u8]) -> Vec<(usize, Range<usize>)> {
        self.matcher
            .ac
            .find_iter(hay)
            .map(|m| (m.pattern().as_usize(), m.range()))
            .collect()
    }

    fn apply(&self, i: usize, found: &[u8], out: &mut Vec<u8>, outcome: &mut Outcome) {
        match self.plan.actions.get(i).map(|a| a[slot(self.loc)]) {
            Some(Action::Inject) => {
                let value = self.bindings[i].value.as_bytes();
                if self.loc == Loc::Target {
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
}

/// Every form of every secret's value (see [`super::forms`]) in one
/// automaton, with the placeholder in the same form to put back. Built once
/// per run.
///
/// The automaton holds the value's forms for the run (it cannot be
/// zeroized); the pattern strings it was built from are.
pub(crate) struct ScrubSet {
    ac: Option<AhoCorasick>,
    /// Per pattern: the binding, and its placeholder in the pattern's form.
    with: Vec<(usize, Vec<u8>)>,
    max_len: usize,
    changes_length: bool,
}

impl std::fmt::Debug for ScrubSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScrubSet")
            .field("patterns", &self.with.len())
            .finish_non_exhaustive()
    }
}

impl ScrubSet {
    pub(crate) fn new(bindings: &[SecretBinding]) -> Result<Self, EgressError> {
        let mut patterns: Vec<Zeroizing<Vec<u8>>> = Vec::new();
        let mut with = Vec::new();
        for (i, b) in bindings.iter().enumerate() {
            for form in forms::all() {
                let Some(p) = form.encode(&b.value).map(Zeroizing::new) else {
                    continue;
                };
                let Some(r) = form.encode(&b.placeholder) else {
                    continue;
                };
                if patterns.iter().any(|q| **q == *p) {
                    continue;
                }
                patterns.push(p);
                with.push((i, r));
            }
        }
        let max_len = patterns.iter().map(|p| p.len()).max().unwrap_or(1).max(1);
        let changes_length = patterns
            .iter()
            .zip(&with)
            .any(|(p, (_, r))| p.len() != r.len());
        let ac = if patterns.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(patterns.iter().map(|p| p.as_slice()))
                    .map_err(|e| EgressError::Identity(format!("value matcher: {e}")))?,
            )
        };
        Ok(Self {
            ac,
            with,
            max_len,
            changes_length,
        })
    }
}

/// Real values back to their placeholders (responses): every secret's
/// value in every form, wherever it is bound, so no value reaches the
/// sandbox.
pub(crate) struct Scrub<'a> {
    set: &'a ScrubSet,
}

impl<'a> Scrub<'a> {
    pub(crate) fn new(set: &'a ScrubSet) -> Self {
        Self { set }
    }

    /// Whether scrubbing can change a body's length (a form of a value and
    /// the placeholder in that form differ in length).
    pub(crate) fn changes_length(&self) -> bool {
        self.set.changes_length
    }
}

impl Rewrite for Scrub<'_> {
    fn max_len(&self) -> usize {
        self.set.max_len
    }

    fn matches(&self, hay: &[u8]) -> Vec<(usize, Range<usize>)> {
        match &self.set.ac {
            Some(ac) => ac
                .find_iter(hay)
                .map(|m| (m.pattern().as_usize(), m.range()))
                .collect(),
            None => Vec::new(),
        }
    }

    fn apply(&self, i: usize, _found: &[u8], out: &mut Vec<u8>, outcome: &mut Outcome) {
        let (binding, placeholder) = &self.set.with[i];
        out.extend_from_slice(placeholder);
        outcome.scrubbed.insert(*binding);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::InjectWhere;

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
        let inj = m.inject(&b, &plan, Loc::Body);
        let input = b"xxPH_AAAAAAAAyyPH_BBBBBBBBBBBBzzPH_AAAAAAAA";
        let want = b"xxvalue-ayyPH_BBBBBBBBBBBBzzvalue-a";
        for split in 0..=input.len() {
            for split2 in split..=input.len() {
                let mut out = Vec::new();
                let mut carry = Vec::new();
                let mut oc = Outcome::default();
                inj.stream(&mut carry, &input[..split], false, &mut out, &mut oc);
                inj.stream(&mut carry, &input[split..split2], false, &mut out, &mut oc);
                inj.stream(&mut carry, &input[split2..], true, &mut out, &mut oc);
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
        m.inject(&b, &plan, Loc::Target).replace_all(
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
        m.inject(&b, &plan, Loc::Header)
            .replace_all(b"Bearer PH_AAAAAAAA", &mut out, &mut oc);
        assert_eq!(out, b"Bearer PH_AAAAAAAA");
        assert!(oc.note(&b, "a.test").0.contains("expired"));
    }

    #[test]
    fn scrub_streams_values_back_to_placeholders_across_every_split() {
        let b = vec![
            binding("A", "PH_AAAAAAAA", "value-a", "a.test", all()),
            binding("B", "PH_BBBBBBBBBBBB", "value-a-longer", "b.test", all()),
        ];
        let set = ScrubSet::new(&b).unwrap();
        let scrub = Scrub::new(&set);
        assert!(scrub.changes_length());
        let input = b"value-value-a.value-a-longer|value-value-a";
        let want = b"value-PH_AAAAAAAA.PH_BBBBBBBBBBBB|value-PH_AAAAAAAA";
        for split in 0..=input.len() {
            for split2 in split..=input.len() {
                let mut out = Vec::new();
                let mut carry = Vec::new();
                let mut oc = Outcome::default();
                scrub.stream(&mut carry, &input[..split], false, &mut out, &mut oc);
                scrub.stream(&mut carry, &input[split..split2], false, &mut out, &mut oc);
                scrub.stream(&mut carry, &input[split2..], true, &mut out, &mut oc);
                assert_eq!(out, want, "split {split} {split2}");
                assert!(carry.is_empty());
                assert_eq!(oc.scrubbed.iter().copied().collect::<Vec<_>>(), [0, 1]);
            }
        }
        let mut out = Vec::new();
        let mut oc = Outcome::default();
        scrub.replace_all(b"Bearer value-a", &mut out, &mut oc);
        assert_eq!(out, b"Bearer PH_AAAAAAAA");
        let (note, leaked) = oc.note(&b, "a.test");
        assert_eq!(note, "(secret A scrubbed from response)");
        assert!(leaked.is_empty());
    }

    // ---- Response scrubbing: every form, every split -----------------

    /// What a reflecting origin may do with a value: (name, encode, decode
    /// what reached the sandbox). Encoders and decoders are independent of
    /// the scrubber's own (serde_json, the base64 crate, by hand).
    type Enc = fn(&str, &mut fastrand::Rng) -> String;
    type Dec = fn(&str) -> Vec<u8>;

    fn pct(v: &str, keep: &[u8], plus: bool, upper: bool) -> String {
        let mut o = String::new();
        for &b in v.as_bytes() {
            if b == b' ' && plus {
                o.push('+');
            } else if b.is_ascii_alphanumeric() || keep.contains(&b) {
                o.push(b as char);
            } else if upper {
                o.push_str(&format!("%{b:02X}"));
            } else {
                o.push_str(&format!("%{b:02x}"));
            }
        }
        o
    }

    fn unpct(s: &str) -> Vec<u8> {
        let b = s.as_bytes();
        let mut o = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            match b[i] {
                b'%' if i + 2 < b.len() && hex(b[i + 1]).is_some() && hex(b[i + 2]).is_some() => {
                    o.push((hex(b[i + 1]).unwrap() * 16 + hex(b[i + 2]).unwrap()) as u8);
                    i += 3;
                }
                b'+' => {
                    o.push(b' ');
                    i += 1;
                }
                c => {
                    o.push(c);
                    i += 1;
                }
            }
        }
        o
    }

    /// A JSON string's text between its quotes.
    fn json_body(v: &str) -> String {
        let s = serde_json::to_string(v).unwrap();
        s[1..s.len() - 1].to_string()
    }

    fn json_ascii(v: &str, upper: bool) -> String {
        let mut o = String::new();
        for c in json_body(v).chars() {
            if c.is_ascii() {
                o.push(c);
            } else {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    o.push_str(&if upper {
                        format!("\\u{u:04X}")
                    } else {
                        format!("\\u{u:04x}")
                    });
                }
            }
        }
        o
    }

    fn unjson(s: &str) -> Vec<u8> {
        serde_json::from_str::<String>(&format!("\"{s}\""))
            .expect("the scrubbed JSON string still parses")
            .into_bytes()
    }

    /// Every window of base64 characters decoded at each of the four
    /// character offsets.
    fn unb64(s: &str) -> Vec<u8> {
        use base64::Engine;
        let norm: String = s
            .chars()
            .map(|c| match c {
                '-' => '+',
                '_' => '/',
                c => c,
            })
            .collect();
        let mut o = Vec::new();
        for run in norm.split(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '/')) {
            for off in 0..4.min(run.len()) {
                let r = &run[off..];
                let r = &r[..r.len() / 4 * 4];
                if let Ok(d) = base64::engine::general_purpose::STANDARD_NO_PAD.decode(r) {
                    o.extend_from_slice(&d);
                    o.push(0);
                }
            }
        }
        o
    }

    fn b64_embedded(v: &str, rng: &mut fastrand::Rng, url: bool) -> String {
        use base64::Engine;
        // The value somewhere inside encoded data, at a random alignment:
        // `user:value` as in HTTP Basic, or random bytes around it.
        let mut data: Vec<u8> = if rng.bool() {
            b"user:".to_vec()
        } else {
            (0..rng.usize(0..5)).map(|_| rng.u8(..)).collect()
        };
        data.extend_from_slice(v.as_bytes());
        data.extend((0..rng.usize(0..4)).map(|_| rng.u8(..)));
        if url {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&data)
        } else {
            base64::engine::general_purpose::STANDARD.encode(&data)
        }
    }

    fn encodings() -> Vec<(&'static str, Enc, Dec)> {
        vec![
            ("raw", |v, _| v.to_string(), |s| s.as_bytes().to_vec()),
            ("json", |v, _| json_body(v), unjson),
            ("json \\/", |v, _| json_body(v).replace('/', "\\/"), unjson),
            ("json \\uxxxx", |v, _| json_ascii(v, false), unjson),
            ("json \\uXXXX", |v, _| json_ascii(v, true), unjson),
            ("percent upper", |v, _| pct(v, b"-._~", false, true), unpct),
            ("percent lower", |v, _| pct(v, b"-._~", false, false), unpct),
            ("form +", |v, _| pct(v, b"*-._", true, true), unpct),
            ("form + lower", |v, _| pct(v, b"*-._", true, false), unpct),
            ("base64", |v, r| b64_embedded(v, r, false), unb64),
            ("base64url", |v, r| b64_embedded(v, r, true), unb64),
        ]
    }

    fn random_value(rng: &mut fastrand::Rng, min: usize) -> String {
        const POOL: &[char] = &[
            'a', 'Z', '0', '9', '-', '_', '.', '~', '/', '"', '\\', '<', '>', '&', '\'', '+', ' ',
            '%', '=', ':', '?', '#', '@', '!', '\t', 'é', 'ß', '€', '😀',
        ];
        let n = rng.usize(min..48);
        (0..n)
            .map(|_| {
                if rng.u8(..) < 128 {
                    rng.alphanumeric()
                } else {
                    POOL[rng.usize(..POOL.len())]
                }
            })
            .collect()
    }

    #[test]
    fn scrub_property_random_values_every_form_random_splits() {
        let mut rng = fastrand::Rng::with_seed(0x5c12_b0b5);
        for round in 0..150 {
            // Base64 is looked for in values of 7 bytes or more; every
            // fourth round a shorter value, for the other forms.
            let short = round % 4 == 3;
            let value = random_value(&mut rng, if short { 1 } else { 7 });
            let value = if short {
                value.chars().take(6).collect()
            } else {
                value
            };
            let ph = format!("cordon-tok-{:032x}", rng.u128(..));
            let b = vec![binding("TOK", &ph, &value, "a.test", all())];
            let set = ScrubSet::new(&b).unwrap();
            let scrub = Scrub::new(&set);
            for (name, enc, dec) in encodings() {
                if short && name.starts_with("base64") {
                    continue;
                }
                let encoded = enc(&value, &mut rng);
                let doc = format!("{{\"error\":\n{encoded}\n}}");
                // Random split points, streamed as the relay would.
                let mut cuts: Vec<usize> = (0..rng.usize(0..5))
                    .map(|_| rng.usize(0..=doc.len()))
                    .collect();
                cuts.sort_unstable();
                let mut out = Vec::new();
                let mut carry = Vec::new();
                let mut oc = Outcome::default();
                let mut last = 0;
                for c in cuts {
                    scrub.stream(
                        &mut carry,
                        &doc.as_bytes()[last..c],
                        false,
                        &mut out,
                        &mut oc,
                    );
                    last = c;
                }
                scrub.stream(&mut carry, &doc.as_bytes()[last..], true, &mut out, &mut oc);
                let out = String::from_utf8_lossy(&out).into_owned();
                let ctx = || {
                    format!("round {round} {name}: value {value:?} sent {encoded:?} got {out:?}")
                };
                assert!(oc.scrubbed.contains(&0), "{}", ctx());
                // The part between the newlines, decoded as the sandbox would.
                // The placeholder may hold a short value's characters.
                let out = out.replace(&ph, "");
                let inner = out.split('\n').nth(1).unwrap_or("");
                let decoded = dec(inner);
                let v = value.as_bytes();
                assert!(
                    !decoded.windows(v.len()).any(|w| w == v) && !out.contains(&value),
                    "{}",
                    ctx()
                );
            }
        }
    }
}
