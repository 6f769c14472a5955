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

/// Real values back to their placeholders (responses): every secret's
/// value, wherever it is bound, so no value reaches the sandbox.
///
/// Values are searched with `memmem` over the bindings' own (zeroized)
/// strings; no other long-lived copy of them is made.
pub(crate) struct Scrub<'a> {
    bindings: &'a [SecretBinding],
    max_len: usize,
}

impl<'a> Scrub<'a> {
    pub(crate) fn new(bindings: &'a [SecretBinding]) -> Self {
        let max_len = bindings
            .iter()
            .map(|b| b.value.len())
            .max()
            .unwrap_or(1)
            .max(1);
        Self { bindings, max_len }
    }

    /// Whether scrubbing can change a body's length (a value and its
    /// placeholder differ in length).
    pub(crate) fn changes_length(&self) -> bool {
        self.bindings
            .iter()
            .any(|b| b.value.len() != b.placeholder.len())
    }
}

impl Rewrite for Scrub<'_> {
    fn max_len(&self) -> usize {
        self.max_len
    }

    fn matches(&self, hay: &[u8]) -> Vec<(usize, Range<usize>)> {
        // Every occurrence of every value (overlapping ones too), then the
        // leftmost-longest ones that do not overlap.
        let mut all = Vec::new();
        for (i, b) in self.bindings.iter().enumerate() {
            let v = b.value.as_bytes();
            if v.is_empty() {
                continue;
            }
            let finder = memchr::memmem::Finder::new(v);
            let mut from = 0;
            while let Some(p) = finder.find(&hay[from..]) {
                all.push((i, from + p..from + p + v.len()));
                from += p + 1;
            }
        }
        all.sort_by(|a, b| (a.1.start, b.1.end).cmp(&(b.1.start, a.1.end)));
        let mut end = 0;
        all.retain(|(_, r)| {
            if r.start < end {
                return false;
            }
            end = r.end;
            true
        });
        all
    }

    fn apply(&self, i: usize, _found: &[u8], out: &mut Vec<u8>, outcome: &mut Outcome) {
        out.extend_from_slice(self.bindings[i].placeholder.as_bytes());
        outcome.scrubbed.insert(i);
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
        let scrub = Scrub::new(&b);
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
}
