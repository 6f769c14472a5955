//! Secret redaction for text and bytes.
//!
//! A [`Redactor`] replaces well-known secret formats with
//! `[REDACTED:<kind>]`, plus any exact values registered at run time (for
//! example the real values of the secrets a sandbox is bound to).
//!
//! Built-in kinds:
//!
//! | kind | what |
//! |---|---|
//! | `private_key` | PEM / PGP private key blocks (also a block cut off before its END line) |
//! | `aws_access_key_id` | `AKIA…`, `ASIA…` and the other AWS key id prefixes |
//! | `aws_secret_access_key` | 40-character value assigned to `aws_secret_access_key` and spellings of it |
//! | `github_token` | `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_` |
//! | `gitlab_token` | `glpat-`, `gldt-`, `glrt-`, … |
//! | `slack_token`, `slack_webhook` | `xoxb-`/`xoxp-`/… tokens and `hooks.slack.com` URLs |
//! | `stripe_key` | `sk_live_`, `sk_test_`, `rk_live_`, `rk_test_` |
//! | `anthropic_key`, `openai_key` | `sk-ant-…`, `sk-…`, `sk-proj-…` |
//! | `google_api_key` | `AIza…` |
//! | `jwt` | three base64url segments starting with `eyJ` |
//! | `url_credentials` | the userinfo of `scheme://user:pass@host` (and long token-only userinfo) |
//! | `authorization` | the value of an `Authorization:` / `Proxy-Authorization:` header |
//! | `bearer_token` | `Bearer <token>` outside a header |
//! | `password` | the value in `password=`, `passwd:`, `passphrase=` … |
//! | `credential` | the value in `secret=`, `token=`, `api_key=`, `client_secret:` … |
//! | `value` (or a name) | exact values registered with [`Redactor::with_values`] / [`Redactor::add_value`] |
//!
//! Cost: one pass of a [`regex::bytes::RegexSet`] over the input decides
//! which patterns occur at all; only those run again to find positions, and
//! registered values are found in one Aho-Corasick pass. Input without
//! secrets is returned borrowed, without copying.
//!
//! Redaction never panics. If the built-in patterns could not be compiled
//! (a bug that the tests rule out), it fails closed: the whole input is
//! replaced by `[REDACTED:unavailable]`.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::bytes::Regex;

/// Registered values shorter than this are ignored: redacting every
/// occurrence of a one- to three-byte string would destroy the output
/// without protecting anything.
pub const MIN_VALUE_LEN: usize = 4;

/// Built-in patterns: (kind, regex). When a regex has a capture group, only
/// group 1 is replaced and the rest of the match (a key name, a scheme) is
/// kept; otherwise the whole match is replaced. Every pattern is ASCII-only
/// (`(?-u)`) so the lazy DFA handles any input, including invalid UTF-8.
const PATTERNS: &[(&str, &str)] = &[
    (
        "private_key",
        r"(?-u)-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?s:.)*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\z)",
    ),
    (
        "aws_access_key_id",
        r"(?-u)\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b",
    ),
    (
        "aws_secret_access_key",
        r#"(?-u)(?i:aws)[_\-.]?(?i:secret)[_\-.]?(?i:access)?[_\-.]?(?i:key)["']?[ \t]*(?:[:=]|=>)[ \t]*["']?([A-Za-z0-9/+]{40})"#,
    ),
    (
        "github_token",
        r"(?-u)\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
    ),
    (
        "gitlab_token",
        r"(?-u)\b(?:glpat|gloas|gldt|glrt|glcbt|glptt|glft|glimt|glagent|glsoat)-[A-Za-z0-9_\-]{20,}",
    ),
    ("slack_token", r"(?-u)\bxox[abposre]-[A-Za-z0-9\-]{10,}"),
    (
        "slack_webhook",
        r"(?-u)https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]+",
    ),
    ("stripe_key", r"(?-u)\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("anthropic_key", r"(?-u)\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    (
        "openai_key",
        r"(?-u)\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    ),
    ("google_api_key", r"(?-u)\bAIza[0-9A-Za-z_\-]{35}"),
    (
        "jwt",
        r"(?-u)\beyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*",
    ),
    (
        "url_credentials",
        r"(?-u)\b[A-Za-z][A-Za-z0-9+.\-]*://([^\s/?#@:]*:[^\s/?#@]+)@",
    ),
    (
        "url_credentials",
        r"(?-u)\b[A-Za-z][A-Za-z0-9+.\-]*://([A-Za-z0-9_\-.~%]{16,})@",
    ),
    (
        "authorization",
        r#"(?-u)(?i)\b(?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?(?:(?:bearer|basic|token|digest|negotiate|aws4-hmac-sha256)[ \t]+)?([^\s"',;]+)"#,
    ),
    (
        "bearer_token",
        r"(?-u)(?i)\bbearer[ \t]+([A-Za-z0-9\-._~+/]{4,}[0-9\-._~+/][A-Za-z0-9\-._~+/]{3,}=*)",
    ),
    (
        "password",
        r#"(?-u)(?i)(?:password|passwd|passphrase)["']?[ \t]*[:=][ \t]*["']?([^\s"'&,;<>]+)"#,
    ),
    (
        "credential",
        r#"(?-u)(?i)(?:secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key|client[_\-]?secret|auth|session(?:[_\-]?(?:id|token))?|sig|signature|x-amz-signature|x-goog-signature)(?:[_\-]?key)?["']?[ \t]*[:=][ \t]*["']?([^\s"'&,;<>]+)"#,
    ),
    (
        "cookie",
        r#"(?-u)(?i)\b(?:set-)?cookie["']?[ \t]*:[ \t]*([^\r\n"']+)"#,
    ),
];

/// Literal anchors of each pattern in `PATTERNS` (same order), matched
/// ASCII-case-insensitively: every match of a pattern contains one of its
/// anchors. A cheap Aho-Corasick pass over all anchors finds the patterns
/// that can match at all; only those regexes run, and each is compiled the
/// first time it is needed. Text without any anchor (most output) costs one
/// linear scan and no regex compilation.
const ANCHORS: &[&[&str]] = &[
    &["private key"],
    &[
        "akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "apka",
    ],
    &["aws"],
    &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
    &[
        "glpat-", "gloas-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "glagent-",
        "glsoat-",
    ],
    &["xox"],
    &["hooks.slack.com"],
    &["sk_live_", "sk_test_", "rk_live_", "rk_test_"],
    &["sk-ant-"],
    &["sk-"],
    &["aiza"],
    &["eyj"],
    &["://"],
    &["://"],
    &["authorization"],
    &["bearer"],
    &["password", "passwd", "passphrase"],
    &[
        "secret",
        "token",
        "apikey",
        "api_key",
        "api-key",
        "accesskey",
        "access_key",
        "access-key",
        "privatekey",
        "private_key",
        "private-key",
        "auth",
        "session",
        "sig",
    ],
    &["cookie"],
];

/// Patterns that only match a keyword followed by an assignment (`:` or
/// `=`, after at most a short name suffix, a quote and blanks). Their
/// anchors are common words ("sig" in "signal", "auth", "session"), so an
/// anchor hit counts only when such an assignment follows it; otherwise
/// ordinary prose would compile and run the largest regexes.
const ASSIGNMENT_PATTERNS: &[&str] = &["password", "credential"];

/// Longest name suffix an assignment pattern allows after its anchor
/// (`session` + `_token_key`), with room to spare.
const MAX_SUFFIX: usize = 16;

/// Every byte an assignment pattern allows between an anchor and its
/// `:` or `=`, ASCII-case-insensitively: the letters of the name suffixes
/// the patterns spell after their anchors (`sig` + `nature`, `session` +
/// `_id`/`_token`, any name + `_key`) and the separators. A name that goes
/// on with another letter (`queued_signals = 256` in every profile, which
/// would compile the largest regex on every audited run) is no match.
const SUFFIX_BYTES: &[u8] = b"natureidokey_-";

/// Whether `input[at..]` can continue an assignment pattern: up to
/// [`MAX_SUFFIX`] name bytes from [`SUFFIX_BYTES`], an optional quote,
/// blanks, then `:` or `=`. Every match of those patterns passes this
/// check (it is looser than they are), so skipping the regex when it fails
/// loses nothing.
fn assignment_follows(input: &[u8], at: usize) -> bool {
    let rest = input.get(at..).unwrap_or_default();
    let mut i = 0;
    while i < rest.len() && i < MAX_SUFFIX && SUFFIX_BYTES.contains(&rest[i].to_ascii_lowercase()) {
        i += 1;
    }
    if matches!(rest.get(i), Some(b'"' | b'\'')) {
        i += 1;
    }
    while matches!(rest.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    matches!(rest.get(i), Some(b':' | b'='))
}

struct Builtin {
    prefilter: AhoCorasick,
    /// Anchor number -> pattern number.
    anchor_pattern: Vec<usize>,
    /// Pattern number -> whether it is one of [`ASSIGNMENT_PATTERNS`].
    assignment: Vec<bool>,
    /// Each pattern, compiled on first use (`None`: it failed to compile).
    regexes: Vec<OnceLock<Option<Regex>>>,
}

impl Builtin {
    /// Which patterns can match `input` at all, by their anchors.
    fn candidates(&self, input: &[u8]) -> Vec<bool> {
        let mut candidate = vec![false; PATTERNS.len()];
        for m in self.prefilter.find_overlapping_iter(input) {
            if let Some(&p) = self.anchor_pattern.get(m.pattern().as_usize()) {
                if self.assignment.get(p) == Some(&true) && !assignment_follows(input, m.end()) {
                    continue;
                }
                if let Some(c) = candidate.get_mut(p) {
                    *c = true;
                }
            }
        }
        candidate
    }

    fn regex(&self, i: usize) -> Option<&Regex> {
        let (_, source) = PATTERNS.get(i)?;
        self.regexes
            .get(i)?
            .get_or_init(|| Regex::new(source).ok())
            .as_ref()
    }
}

fn builtin() -> Option<&'static Builtin> {
    static BUILTIN: OnceLock<Option<Builtin>> = OnceLock::new();
    BUILTIN
        .get_or_init(|| {
            if ANCHORS.len() != PATTERNS.len() {
                return None;
            }
            let mut anchors = Vec::new();
            let mut anchor_pattern = Vec::new();
            for (i, list) in ANCHORS.iter().enumerate() {
                for a in *list {
                    anchors.push(*a);
                    anchor_pattern.push(i);
                }
            }
            // A contiguous NFA builds in microseconds (a DFA would take
            // longer to build than most inputs take to scan).
            let prefilter = AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
                .build(&anchors)
                .ok()?;
            let regexes = PATTERNS.iter().map(|_| OnceLock::new()).collect();
            let assignment = PATTERNS
                .iter()
                .map(|(kind, _)| ASSIGNMENT_PATTERNS.contains(kind))
                .collect();
            Some(Builtin {
                prefilter,
                anchor_pattern,
                assignment,
                regexes,
            })
        })
        .as_ref()
}

/// The kinds of the built-in patterns, in order, without duplicates.
pub fn builtin_kinds() -> Vec<&'static str> {
    let mut kinds: Vec<&'static str> = Vec::new();
    for (kind, _) in PATTERNS {
        if !kinds.contains(kind) {
            kinds.push(kind);
        }
    }
    kinds
}

/// One secret found in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Kind of secret, as it appears in the `[REDACTED:<kind>]` marker.
    pub kind: String,
    /// Byte offset where the redacted span starts.
    pub start: usize,
    /// Byte offset one past the end of the redacted span.
    pub end: usize,
}

#[derive(Clone, Copy)]
enum Kind {
    Builtin(usize),
    Value(usize),
}

#[derive(Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    kind: Kind,
}

#[derive(Default)]
struct Values {
    labels: Vec<String>,
    values: Vec<Vec<u8>>,
    /// `None` with values present means the automaton could not be built;
    /// redaction then fails closed.
    matcher: Option<AhoCorasick>,
}

/// Replaces secrets in text and bytes with `[REDACTED:<kind>]`.
///
/// Cheap to clone (the compiled patterns are shared).
#[derive(Clone, Default)]
pub struct Redactor {
    values: Arc<Values>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the registered values themselves.
        f.debug_struct("Redactor")
            .field("builtin_patterns", &PATTERNS.len())
            .field("registered_values", &self.values.values.len())
            .finish()
    }
}

const UNAVAILABLE: &str = "[REDACTED:unavailable]";

impl Redactor {
    /// A redactor with the built-in patterns only.
    pub fn new() -> Self {
        Self::default()
    }

    /// A redactor with the built-in patterns and these exact values, each
    /// reported as `[REDACTED:value]`. Values shorter than
    /// [`MIN_VALUE_LEN`] bytes are ignored.
    pub fn with_values<V: AsRef<[u8]>>(values: &[V]) -> Self {
        let mut r = Self::new();
        for v in values {
            r.add_value("value", v.as_ref());
        }
        r
    }

    /// Registers one more exact value, reported as `[REDACTED:<name>]`
    /// (the name is reduced to `[A-Za-z0-9_.-]`; empty becomes `value`).
    /// Values shorter than [`MIN_VALUE_LEN`] bytes are ignored.
    pub fn add_value(&mut self, name: &str, value: impl AsRef<[u8]>) -> &mut Self {
        let value = value.as_ref();
        if value.len() < MIN_VALUE_LEN {
            return self;
        }
        let mut label: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
            .take(64)
            .collect();
        if label.is_empty() {
            label = "value".to_string();
        }
        let mut labels = self.values.labels.clone();
        let mut values = self.values.values.clone();
        if values.iter().any(|v| v.as_slice() == value) {
            return self;
        }
        labels.push(label);
        values.push(value.to_vec());
        let matcher = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&values)
            .ok();
        self.values = Arc::new(Values {
            labels,
            values,
            matcher,
        });
        self
    }

    /// Number of registered exact values.
    pub fn value_count(&self) -> usize {
        self.values.values.len()
    }

    fn healthy(&self) -> Option<&'static Builtin> {
        let b = builtin()?;
        if !self.values.values.is_empty() && self.values.matcher.is_none() {
            return None;
        }
        Some(b)
    }

    fn spans(&self, b: &Builtin, input: &[u8]) -> Vec<Span> {
        let mut spans = Vec::new();
        let candidate = b.candidates(input);
        for (i, _) in candidate.iter().enumerate().filter(|(_, c)| **c) {
            let Some(re) = b.regex(i) else {
                // Fail closed: a pattern that cannot be compiled redacts
                // everything it might have covered.
                spans.push(Span {
                    start: 0,
                    end: input.len(),
                    kind: Kind::Builtin(i),
                });
                continue;
            };
            if re.captures_len() > 1 {
                for caps in re.captures_iter(input) {
                    if let Some(m) = caps.get(1).or_else(|| caps.get(0)) {
                        if m.end() > m.start() {
                            spans.push(Span {
                                start: m.start(),
                                end: m.end(),
                                kind: Kind::Builtin(i),
                            });
                        }
                    }
                }
            } else {
                for m in re.find_iter(input) {
                    if m.end() > m.start() {
                        spans.push(Span {
                            start: m.start(),
                            end: m.end(),
                            kind: Kind::Builtin(i),
                        });
                    }
                }
            }
        }
        if let Some(ac) = &self.values.matcher {
            for m in ac.find_iter(input) {
                spans.push(Span {
                    start: m.start(),
                    end: m.end(),
                    kind: Kind::Value(m.pattern().as_usize()),
                });
            }
        }
        // Redaction is idempotent: a marker left by an earlier pass (say,
        // `token: [REDACTED:github_token]`) is not redacted again.
        spans.retain(|s| !input[s.start..].starts_with(b"[REDACTED"));
        if spans.len() > 1 {
            // Earliest first; at the same start, the longest first; merge
            // overlaps into the first span's kind.
            spans.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
            let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
            for s in spans {
                match merged.last_mut() {
                    Some(last) if s.start < last.end => {
                        last.end = last.end.max(s.end);
                    }
                    _ => merged.push(s),
                }
            }
            spans = merged;
        }
        spans
    }

    fn label(&self, kind: Kind) -> &str {
        match kind {
            Kind::Builtin(i) => PATTERNS.get(i).map(|(k, _)| *k).unwrap_or("secret"),
            Kind::Value(i) => self
                .values
                .labels
                .get(i)
                .map(String::as_str)
                .unwrap_or("value"),
        }
    }

    /// Where the secrets in `input` are (merged, in order, non-overlapping).
    /// If the redactor is unusable, one finding of kind `unavailable`
    /// covers the whole input.
    pub fn find(&self, input: &[u8]) -> Vec<Finding> {
        let Some(b) = self.healthy() else {
            return vec![Finding {
                kind: "unavailable".to_string(),
                start: 0,
                end: input.len(),
            }];
        };
        self.spans(b, input)
            .into_iter()
            .map(|s| Finding {
                kind: self.label(s.kind).to_string(),
                start: s.start,
                end: s.end,
            })
            .collect()
    }

    /// Whether `input` contains anything this redactor would replace.
    pub fn contains_secret(&self, input: &[u8]) -> bool {
        match self.healthy() {
            None => !input.is_empty(),
            Some(b) => {
                let quick = b.prefilter.is_match(input)
                    || self
                        .values
                        .matcher
                        .as_ref()
                        .is_some_and(|ac| ac.is_match(input));
                quick && !self.spans(b, input).is_empty()
            }
        }
    }

    /// Redacts bytes. Returns the input borrowed when nothing was found.
    pub fn redact_bytes<'a>(&self, input: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(b) = self.healthy() else {
            if input.is_empty() {
                return Cow::Borrowed(input);
            }
            return Cow::Owned(UNAVAILABLE.as_bytes().to_vec());
        };
        let spans = self.spans(b, input);
        if spans.is_empty() {
            return Cow::Borrowed(input);
        }
        let mut out = Vec::with_capacity(input.len());
        let mut at = 0;
        for s in spans {
            out.extend_from_slice(input.get(at..s.start).unwrap_or_default());
            out.extend_from_slice(b"[REDACTED:");
            out.extend_from_slice(self.label(s.kind).as_bytes());
            out.push(b']');
            at = s.end;
        }
        out.extend_from_slice(input.get(at..).unwrap_or_default());
        Cow::Owned(out)
    }

    /// Redacts text. Returns the input borrowed when nothing was found.
    pub fn redact<'a>(&self, input: &'a str) -> Cow<'a, str> {
        match self.redact_bytes(input.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(input),
            Cow::Owned(bytes) => match String::from_utf8(bytes) {
                Ok(s) => Cow::Owned(s),
                // A span ended inside a multi-byte character (only possible
                // with a registered value cut mid-character): keep what is
                // valid, never the secret.
                Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn r(s: &str) -> String {
        Redactor::new().redact(s).into_owned()
    }

    #[test]
    fn builtin_patterns_compile() {
        assert!(builtin().is_some());
        assert!(builtin_kinds().contains(&"jwt"));
    }

    #[test]
    fn clean_text_is_borrowed() {
        let text = "hello world, nothing to see: tokens: 1500, passwords are good, sk-learn";
        assert!(matches!(Redactor::new().redact(text), Cow::Borrowed(_)));
    }

    #[test]
    fn aws() {
        let out = r("key AKIAIOSFODNN7EXAMPLE here");
        assert_eq!(out, "key [REDACTED:aws_access_key_id] here");
        let out = r("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n");
        assert_eq!(
            out,
            "aws_secret_access_key = [REDACTED:aws_secret_access_key]\n"
        );
        let out = r("export AWS_SECRET_ACCESS_KEY=\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"");
        assert!(!out.contains("wJalr"), "{out}");
        // near-miss: too short, lowercase
        assert_eq!(r("AKIA1234"), "AKIA1234");
        assert_eq!(r("akiaiosfodnn7example"), "akiaiosfodnn7example");
    }

    #[test]
    fn github_gitlab_slack_stripe() {
        let gh = format!("ghp_{}", "a1B2".repeat(9));
        assert_eq!(
            r(&format!("token={gh} x")),
            "token=[REDACTED:github_token] x"
        );
        assert_eq!(
            r(&format!("use {gh} now")),
            "use [REDACTED:github_token] now"
        );
        for p in ["gho_", "ghu_", "ghs_", "ghr_"] {
            let t = format!("{p}{}", "Z9".repeat(18));
            assert_eq!(r(&t), "[REDACTED:github_token]", "{p}");
        }
        let pat = format!("github_pat_11AAAAAAA0{}", "x_Y".repeat(20));
        assert_eq!(r(&pat), "[REDACTED:github_token]");
        assert_eq!(r("glpat-abcdefghij0123456789"), "[REDACTED:gitlab_token]");
        assert_eq!(r("xoxb-1234567890-abcdefghij"), "[REDACTED:slack_token]");
        assert_eq!(
            r("post to https://hooks.slack.com/services/T000/B000/XXXXXXXX ok"),
            "post to [REDACTED:slack_webhook] ok"
        );
        assert_eq!(
            r("sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
            "[REDACTED:stripe_key]"
        );
        // near-misses
        assert_eq!(r("ghp_short"), "ghp_short");
        assert_eq!(r("glpat-short"), "glpat-short");
        assert_eq!(r("xox-nothing"), "xox-nothing");
        assert_eq!(r("sk_live_"), "sk_live_");
    }

    #[test]
    fn sk_keys_google_jwt() {
        assert_eq!(
            r("k sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123 k"),
            "k [REDACTED:anthropic_key] k"
        );
        assert_eq!(
            r("sk-proj-abcdefghijklmnopqrstuvwxyz"),
            "[REDACTED:openai_key]"
        );
        assert_eq!(
            r("sk-abcdefghijklmnopqrstuvwxyz012345"),
            "[REDACTED:openai_key]"
        );
        assert_eq!(
            r("AIzaSyA-1234567890abcdefghijklmnopqrstu"),
            "[REDACTED:google_api_key]"
        );
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(r(&format!("jwt: {jwt};")), "jwt: [REDACTED:jwt];");
        // near-misses
        assert_eq!(
            r("task-abcdefghijklmnopqrstuvwxyz"),
            "task-abcdefghijklmnopqrstuvwxyz"
        );
        assert_eq!(r("sk-learn"), "sk-learn");
        assert_eq!(r("AIza short"), "AIza short");
        assert_eq!(r("eyJ.eyJ.x"), "eyJ.eyJ.x");
    }

    #[test]
    fn pem_blocks() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc+/=\n-----END RSA PRIVATE KEY-----";
        assert_eq!(r(&format!("a\n{pem}\nb")), "a\n[REDACTED:private_key]\nb");
        let cut = "x -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA";
        assert_eq!(r(cut), "x [REDACTED:private_key]");
        let pgp =
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----";
        assert_eq!(r(pgp), "[REDACTED:private_key]");
        // public keys and certificates are not secrets
        let public = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----";
        assert_eq!(r(public), public);
    }

    #[test]
    fn assignments() {
        assert_eq!(r("password=hunter2"), "password=[REDACTED:password]");
        assert_eq!(
            r("DB_PASSWORD=hunter2 next"),
            "DB_PASSWORD=[REDACTED:password] next"
        );
        assert_eq!(r("passwd: hunter2"), "passwd: [REDACTED:password]");
        assert_eq!(
            r(r#"{"password": "hunter2"}"#),
            r#"{"password": "[REDACTED:password]"}"#
        );
        assert_eq!(r("secret=abc123"), "secret=[REDACTED:credential]");
        assert_eq!(r("?token=abc123&x=1"), "?token=[REDACTED:credential]&x=1");
        assert_eq!(r("api_key: 'zzz'"), "api_key: '[REDACTED:credential]'");
        // near-misses: no value, other words, not an assignment
        assert_eq!(r("password:\nnext line"), "password:\nnext line");
        assert_eq!(r("max tokens: 1500"), "max tokens: 1500");
        assert_eq!(r("the password is long"), "the password is long");
        assert_eq!(r("tokenizer=gpt2"), "tokenizer=gpt2");
    }

    #[test]
    fn urls_and_auth_headers() {
        assert_eq!(
            r("git clone https://user:s3cr3t@example.com/repo.git"),
            "git clone https://[REDACTED:url_credentials]@example.com/repo.git"
        );
        assert_eq!(
            r("postgres://app:pw@db:5432/x"),
            "postgres://[REDACTED:url_credentials]@db:5432/x"
        );
        assert_eq!(
            r("https://x0123456789abcdefghij@github.com/o/r"),
            "https://[REDACTED:url_credentials]@github.com/o/r"
        );
        assert_eq!(
            r("Authorization: Bearer abcdefghij"),
            "Authorization: Bearer [REDACTED:authorization]"
        );
        assert_eq!(
            r("-H 'authorization: Basic dXNlcjpwYXNz'"),
            "-H 'authorization: Basic [REDACTED:authorization]'"
        );
        assert_eq!(
            r("sent bearer abc123.def456 upstream"),
            "sent bearer [REDACTED:bearer_token] upstream"
        );
        // near-misses
        assert_eq!(r("ssh://git@github.com/o/r"), "ssh://git@github.com/o/r");
        assert_eq!(r("https://example.com/a@b"), "https://example.com/a@b");
        assert_eq!(
            r("bearer tokens are described in RFC 6750."),
            "bearer tokens are described in RFC 6750."
        );
    }

    #[test]
    fn registered_values() {
        let red = Redactor::with_values(&["opensesame-42", "xy"]);
        assert_eq!(red.value_count(), 1, "short value ignored");
        assert_eq!(
            red.redact("the value opensesame-42 leaked, xy stays"),
            "the value [REDACTED:value] leaked, xy stays"
        );
        let mut named = Redactor::new();
        named.add_value("GH TOKEN!", "plainvalue");
        assert_eq!(named.redact("aplainvalueb"), "a[REDACTED:GHTOKEN]b");
        assert!(!format!("{named:?}").contains("plainvalue"));
    }

    #[test]
    fn overlapping_spans_merge() {
        let red = Redactor::with_values(&["AKIAIOSFODNN7EXAMPLE and more"]);
        assert_eq!(
            red.redact("x AKIAIOSFODNN7EXAMPLE and more y"),
            "x [REDACTED:value] y"
        );
    }

    #[test]
    fn bytes_and_non_utf8() {
        let mut input = vec![0xff, 0xfe, b' '];
        input.extend_from_slice(b"password=\xffhunter2 tail \xc3\xa9");
        let out = Redactor::new().redact_bytes(&input).into_owned();
        assert_eq!(
            out,
            b"\xff\xfe password=[REDACTED:password] tail \xc3\xa9".to_vec()
        );
        assert_eq!(
            r("é password=pässwörd é"),
            "é password=[REDACTED:password] é"
        );
    }

    #[test]
    fn find_reports_positions() {
        let text = b"a AKIAIOSFODNN7EXAMPLE b";
        let f = Redactor::new().find(text);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, "aws_access_key_id");
        assert_eq!(&text[f[0].start..f[0].end], b"AKIAIOSFODNN7EXAMPLE");
        assert!(Redactor::new().contains_secret(text));
        assert!(!Redactor::new().contains_secret(b"nothing"));
    }

    #[test]
    fn large_input_with_few_secrets() {
        let line = "INFO request handled in 12ms path=/api/v1/items status=200 user=alice\n";
        let mut big = line.repeat(40_000); // ~2.8 MiB
        big.push_str("leak: ghp_abcdefghijklmnopqrstuvwxyz0123456789\n");
        big.push_str(&line.repeat(1000));
        let out = Redactor::with_values(&["alice-secret"]).redact(&big);
        assert!(!out.contains("ghp_abcdef"));
        assert!(out.contains("[REDACTED:github_token]"));
        assert_eq!(out.len(), big.len() - 40 + "[REDACTED:github_token]".len());
    }

    #[test]
    fn never_panics_on_odd_input() {
        let red = Redactor::with_values(&["\u{e9}\u{e9}"]);
        for s in [
            "",
            "-----BEGIN PRIVATE KEY-----",
            "password=",
            "://:@",
            "\u{e9}\u{e9}\u{e9}",
        ] {
            let _ = red.redact(s);
            let _ = red.find(s.as_bytes());
        }
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let _ = red.redact_bytes(&bytes);
    }
}

#[cfg(test)]
mod session_and_signature_tests {
    use super::*;

    #[test]
    fn session_cookies_and_url_signatures_are_redacted() {
        let r = Redactor::new();
        for (input, secret) in [
            (
                "curl -H 'Cookie: session=S3cretCookieValue'",
                "S3cretCookieValue",
            ),
            ("GET /x?sig=AbCdEf0123456789 HTTP/1.1", "AbCdEf0123456789"),
            (
                "https://b.example/o?X-Amz-Signature=deadbeefcafe1234",
                "deadbeefcafe1234",
            ),
            ("sessionid=abcdef123456", "abcdef123456"),
        ] {
            let out = r.redact(input);
            assert!(!out.contains(secret), "{input} -> {out}");
        }
        assert_eq!(r.redact("a signed letter"), "a signed letter");
    }
}

#[cfg(test)]
mod idempotence_tests {
    use super::*;

    #[test]
    fn redacting_twice_changes_nothing() {
        let r = Redactor::new();
        let once = r
            .redact("token: ghp_Zq7Rt2Lm9Xw4Zq7Rt2Lm9Xw4Zq7Rt2Lm9Xw4 password=hunter2xyz")
            .into_owned();
        assert_eq!(
            once,
            "token: [REDACTED:github_token] password=[REDACTED:password]"
        );
        assert_eq!(r.redact(&once), once);
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod prefilter_tests {
    use super::*;

    fn candidate_kinds(text: &str) -> Vec<&'static str> {
        let b = builtin().expect("builtin patterns");
        b.candidates(text.as_bytes())
            .iter()
            .zip(PATTERNS)
            .filter(|(c, _)| **c)
            .map(|(_, (kind, _))| *kind)
            .collect()
    }

    #[test]
    fn assignment_patterns_exist() {
        for kind in ASSIGNMENT_PATTERNS {
            assert!(PATTERNS.iter().any(|(k, _)| k == kind), "{kind}");
        }
    }

    #[test]
    fn common_words_do_not_wake_the_assignment_patterns() {
        for prose in [
            "own PID namespace with an init that reaps and forwards signals",
            "authentication failed for the session; the token expired",
            "see the design notes on secrets",
            "password reset link sent",
            "queued_signals = 256",
            "pending_signals: 3",
            "tokens_used=12",
        ] {
            let kinds = candidate_kinds(prose);
            assert!(
                !kinds.contains(&"credential") && !kinds.contains(&"password"),
                "{prose}: {kinds:?}"
            );
        }
        for (assignment, kind) in [
            ("session_token = abc123def", "credential"),
            ("\"api_key\": \"abc123def\"", "credential"),
            ("client_secret:abc", "credential"),
            ("X-Amz-Signature=abcdef", "credential"),
            ("x-goog-signature: abcdef", "credential"),
            ("SIGNATURE_KEY=abcdef", "credential"),
            ("sessionid=abc123def", "credential"),
            ("session-id: abc123def", "credential"),
            ("access-key=abc123def", "credential"),
            ("auth_key = abc123def", "credential"),
            ("private_key: abc123def", "credential"),
            ("PASSWORD\t: hunter2", "password"),
            ("passphrase='x y'", "password"),
        ] {
            assert!(
                candidate_kinds(assignment).contains(&kind),
                "{assignment} should wake {kind}"
            );
            assert_ne!(
                Redactor::new().redact(assignment),
                assignment,
                "{assignment} should be redacted"
            );
        }
    }

    #[test]
    fn every_pattern_compiles_and_has_anchors() {
        let b = builtin().expect("builtin patterns");
        assert_eq!(ANCHORS.len(), PATTERNS.len());
        for (i, (kind, _)) in PATTERNS.iter().enumerate() {
            assert!(b.regex(i).is_some(), "pattern {kind} does not compile");
            assert!(!ANCHORS[i].is_empty(), "pattern {kind} has no anchor");
        }
    }

    #[test]
    fn clean_text_is_returned_borrowed() {
        let r = Redactor::new();
        let text = "plain build output: compiling 42 crates, 0 warnings\n".repeat(1000);
        assert!(matches!(r.redact(&text), std::borrow::Cow::Borrowed(_)));
    }
}
