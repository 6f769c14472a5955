//! Loading profile files with precise errors.
//!
//! The text is parsed once into a span-preserving document; an index of every
//! key's position maps an error's byte offset to its dotted key (and a key
//! found wrong by validation back to its `line:col`). Serde's messages are
//! rewritten into "what was wrong" plus "what is allowed".

use std::ops::Range;

use toml_edit::{ImDocument, Item, TableLike, Value};

use crate::error::{Diagnostic, ErrorKind, PolicyError, Problem};
use crate::file::ProfileFile;
use crate::model::{Profile, TrustLevel};
use crate::presets::preset;
use crate::validate;

/// Where one key or array element is in the text.
#[derive(Debug, Clone)]
struct Entry {
    path: String,
    key: Option<Range<usize>>,
    value: Option<Range<usize>>,
}

/// Every key's position in a document.
#[derive(Debug, Default)]
pub(crate) struct SpanIndex {
    entries: Vec<Entry>,
}

impl SpanIndex {
    fn build<S: AsRef<str>>(doc: &ImDocument<S>) -> SpanIndex {
        let mut idx = SpanIndex::default();
        idx.table(doc.as_table(), "");
        idx
    }

    fn table(&mut self, t: &dyn TableLike, prefix: &str) {
        for (k, item) in t.iter() {
            let path = if prefix.is_empty() {
                k.to_string()
            } else {
                format!("{prefix}.{k}")
            };
            let key = t.key(k).and_then(|k| k.span());
            self.item(item, path, key);
        }
    }

    fn item(&mut self, item: &Item, path: String, key: Option<Range<usize>>) {
        match item {
            Item::None => {}
            Item::Value(v) => self.value(v, path, key),
            Item::Table(t) => {
                self.entries.push(Entry {
                    path: path.clone(),
                    key,
                    value: t.span(),
                });
                self.table(t, &path);
            }
            Item::ArrayOfTables(a) => {
                self.entries.push(Entry {
                    path: path.clone(),
                    key,
                    value: a.span(),
                });
                for (i, t) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    self.entries.push(Entry {
                        path: p.clone(),
                        key: None,
                        value: t.span(),
                    });
                    self.table(t, &p);
                }
            }
        }
    }

    fn value(&mut self, v: &Value, path: String, key: Option<Range<usize>>) {
        self.entries.push(Entry {
            path: path.clone(),
            key,
            value: v.span(),
        });
        match v {
            Value::Array(a) => {
                for (i, e) in a.iter().enumerate() {
                    self.value(e, format!("{path}[{i}]"), None);
                }
            }
            Value::InlineTable(t) => self.table(t, &path),
            _ => {}
        }
    }

    /// The dotted key at a byte offset: the entry with the smallest span
    /// (key or value) that contains it.
    fn key_at(&self, offset: usize) -> Option<&str> {
        let contains = |r: &Option<Range<usize>>| {
            r.as_ref()
                .filter(|r| r.start <= offset && (offset < r.end || r.start == r.end))
                .map(|r| r.end - r.start)
        };
        self.entries
            .iter()
            .filter_map(|e| {
                let k = contains(&e.key);
                let v = contains(&e.value);
                k.into_iter().chain(v).min().map(|len| (len, e))
            })
            .min_by_key(|(len, e)| (*len, std::cmp::Reverse(e.path.len())))
            .map(|(_, e)| e.path.as_str())
    }

    /// The position of a key (its name, or its value when `at_value`), or of
    /// the nearest enclosing key that is in the text.
    fn locate(&self, key: &str, at_value: bool) -> Option<Range<usize>> {
        let mut k = key;
        loop {
            if let Some(e) = self.entries.iter().find(|e| e.path == k) {
                let (first, second) = if at_value && k == key {
                    (&e.value, &e.key)
                } else {
                    (&e.key, &e.value)
                };
                if let Some(r) = first.clone().or_else(|| second.clone()) {
                    return Some(r);
                }
            }
            let cut = k.rfind(['.', '['])?;
            k = &k[..cut];
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

/// Parses and resolves a TOML profile. `origin` names the file in errors.
pub(crate) fn from_toml(text: &str, origin: &str) -> Result<Profile, PolicyError> {
    let at = |span: Option<Range<usize>>| match span {
        Some(r) => {
            let (l, c) = line_col(text, r.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    let doc = match ImDocument::parse(text.to_string()) {
        Ok(d) => d,
        Err(e) => {
            let (line, column) = at(e.span());
            let mut lines = e.message().lines().map(str::trim).filter(|l| !l.is_empty());
            let first = lines.next().unwrap_or("invalid TOML").to_string();
            let rest: Vec<&str> = lines.collect();
            let hint = if first.starts_with("duplicate key") {
                "remove one of them: a key may be set only once in a table".to_string()
            } else if rest.is_empty() {
                "fix the TOML syntax here (strings in double quotes, tables as [name], lists as [\"a\", \"b\"])".to_string()
            } else {
                rest.join("; ")
            };
            return Err(PolicyError::from(Diagnostic {
                kind: ErrorKind::Syntax,
                origin: origin.to_string(),
                line,
                column,
                key: None,
                message: format!("not valid TOML: {first}"),
                hint: Some(hint),
            }));
        }
    };
    let index = SpanIndex::build(&doc);
    let file: ProfileFile = match toml_edit::de::from_document(doc) {
        Ok(f) => f,
        Err(e) => {
            let span = e.span();
            let mut key = span.as_ref().and_then(|r| index.key_at(r.start));
            // An enum written as a table ({ vault = "x" }) is located at its
            // inner key; blame the enum's own key instead.
            if let Some(rest) = e.message().strip_prefix("unknown variant") {
                if let (Some(k), Some(word)) = (key, backticked(rest).first()) {
                    key = k.strip_suffix(&format!(".{word}")).or(key);
                }
            }
            let (line, column) = at(span);
            let (kind, message, hint) = explain(e.message(), key);
            return Err(PolicyError::from(Diagnostic {
                kind,
                origin: origin.to_string(),
                line,
                column,
                key: key.map(str::to_string),
                message,
                hint: Some(hint),
            }));
        }
    };
    resolve(file, origin).map_err(|p| {
        let (line, column) = at(index.locate(&p.key, p.at_value));
        PolicyError::from(Diagnostic {
            line,
            column,
            ..p.unlocated(origin)
        })
    })
}

/// Parses and resolves a JSON profile (same keys as TOML). Errors carry
/// line and column for syntax and type mistakes, and the key for the rest.
pub(crate) fn from_json(text: &str, origin: &str) -> Result<Profile, PolicyError> {
    let file: ProfileFile = match serde_json::from_str(text) {
        Ok(f) => f,
        Err(e) => {
            let full = e.to_string();
            let msg = match full.rsplit_once(" at line ") {
                Some((m, _)) => m.to_string(),
                None => full,
            };
            let (kind, message, hint) = if e.is_syntax() || e.is_eof() {
                (
                    ErrorKind::Syntax,
                    format!("not valid JSON: {msg}"),
                    "fix the JSON syntax here".to_string(),
                )
            } else {
                explain(&msg, None)
            };
            return Err(PolicyError::from(Diagnostic {
                kind,
                origin: origin.to_string(),
                line: Some(e.line()),
                column: Some(e.column()),
                key: None,
                message,
                hint: Some(hint),
            }));
        }
    };
    resolve(file, origin).map_err(|p| PolicyError::from(p.unlocated(origin)))
}

/// Applies a file over its preset and validates the result.
pub(crate) fn resolve(file: ProfileFile, origin: &str) -> Result<Profile, Problem> {
    let base = preset(file.extends.unwrap_or(TrustLevel::Untrusted));
    let mut p = file.apply_to(base);
    p.origin = origin.to_string();
    validate::check(&p)?;
    Ok(p)
}

/// The key with array indices removed and `env.set.NAME` folded to `env.set.*`.
fn key_pattern(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut in_idx = false;
    for c in key.chars() {
        match c {
            '[' => in_idx = true,
            ']' => in_idx = false,
            _ if !in_idx => out.push(c),
            _ => {}
        }
    }
    if let Some(rest) = out.strip_prefix("env.set.") {
        if !rest.is_empty() {
            return "env.set.*".to_string();
        }
    }
    out
}

const SIZE: &str = "a size such as \"512MiB\" or \"2GiB\" (K, M, G = KiB, MiB, GiB; KB, MB, GB = powers of 1000; a plain number is bytes)";
const DURATION: &str =
    "a duration such as \"30s\", \"5m\" or \"1h30m\" (a plain number is seconds)";
const BOOL: &str = "true or false";
const COUNT: &str = "a whole number such as 256";
const PATHS: &str = "a list of paths, e.g. [\"./data\", \"~/.cache/pip\"]";
const HOSTS: &str =
    "a list of host patterns, e.g. [\"pypi.org\", \"*.pythonhosted.org\", \"api.example.com:443\"]";

/// What a key accepts, for hints.
pub(crate) fn expected_for(key: &str) -> Option<String> {
    let s = match key_pattern(key).as_str() {
        "extends" => format!("expected one of: {}", TrustLevel::expected()),
        "description" => "a string".into(),
        "isolation" => "a table: [isolation] with level, allow_weaker".into(),
        "isolation.level" => "expected one of: namespaces, process".into(),
        "isolation.allow_weaker"
        | "syscalls.unix_sockets"
        | "network.https_only"
        | "network.allow_private"
        | "network.allow_missing_sni"
        | "audit.enabled"
        | "filesystem.protect_host_tools" => BOOL.into(),
        "filesystem" => {
            "a table: [filesystem] with cwd, read_only, read_write, tmp_size, tmp_inodes, protect_host_tools".into()
        }
        "filesystem.cwd" => "expected one of: ro, rw, none".into(),
        "filesystem.read_only" | "filesystem.read_write" => PATHS.into(),
        "filesystem.tmp_size"
        | "stage.max_file_size"
        | "stage.max_size"
        | "limits.memory"
        | "limits.file_size"
        | "limits.output"
        | "limits.mqueue_bytes"
        | "network.max_bytes"
        | "network.rate_limit.bytes" => SIZE.into(),
        "filesystem.tmp_inodes"
        | "limits.pids"
        | "limits.open_files"
        | "limits.inotify_instances"
        | "limits.inotify_watches"
        | "limits.queued_signals"
        | "network.rate_limit.requests" => COUNT.into(),
        "limits" => "a table: [limits] with timeout, cpu_time, memory, pids, open_files, file_size, output, on_output_limit, inotify_instances, inotify_watches, queued_signals, mqueue_bytes".into(),
        "stage" => "a table: [stage] with refuse, ask, auto, max_file_size, max_size, keep".into(),
        "stage.refuse" | "stage.ask" | "stage.auto" => {
            "a list of globs relative to the staged directory, e.g. [\".github/**\", \"*.lock\"]".into()
        }
        "limits.timeout" | "limits.cpu_time" | "network.rate_limit.per" | "secrets.ttl" | "stage.keep" => {
            DURATION.into()
        }
        "limits.on_output_limit" => "expected one of: truncate, kill".into(),
        "env" => "a table: [env] with pass, set".into(),
        "env.pass" => "a list of variable names, e.g. [\"LANG\", \"TERM\"]".into(),
        "env.set" => "a table of strings, e.g. set = { PYTHONDONTWRITEBYTECODE = \"1\" }".into(),
        "env.set.*" => "a string (write \"1\", not 1)".into(),
        "syscalls" => "a table: [syscalls] with unix_sockets".into(),
        "network" => "a table: [network] with mode, allow, deny, https_only, methods, allow_private, allow_missing_sni, on_unlisted, max_bytes, rate_limit".into(),
        "network.mode" => "expected one of: none, loopback, proxy".into(),
        "network.allow" | "network.deny" | "secrets.hosts" => HOSTS.into(),
        "network.methods" => {
            "a list of HTTP methods, e.g. [\"GET\", \"HEAD\"]; expected one of: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS".into()
        }
        "network.on_unlisted" => "expected one of: deny, ask".into(),
        "network.rate_limit" => "an array of tables: [[network.rate_limit]] with host, requests, bytes, per".into(),
        "network.rate_limit.host" => "a host pattern such as \"api.example.com\" or \"*.example.com:443\"".into(),
        "secrets" => "an array of tables: [[secrets]] with name, from, hosts, inject, ttl".into(),
        "secrets.name" => "an environment variable name such as GITHUB_TOKEN".into(),
        "secrets.from" => "one of { env = \"VAR\" }, { file = \"path\" }, { command = [\"prog\", \"arg\"] }".into(),
        "secrets.from.env" => "the name of a host environment variable, e.g. \"GITHUB_TOKEN\"".into(),
        "secrets.from.file" => "a path such as \"~/.config/token\"".into(),
        "secrets.from.command" => "a list: the program and its arguments, e.g. [\"op\", \"read\", \"op://vault/item\"]".into(),
        "secrets.inject" => "a list of: header, query, body".into(),
        "audit" => "a table: [audit] with enabled, path".into(),
        "audit.path" => "a path such as \"~/.local/state/cordon/audit.db\"".into(),
        "scan" => "a table: [scan] with mode, rules, ignore".into(),
        "scan.mode" => "expected one of: off, warn, ask, block".into(),
        "scan.rules" => PATHS.into(),
        "scan.ignore" => "a list of rule ids, e.g. [\"tls-verify-off\"] (see `cordon scan --list-rules`)".into(),
        _ => return None,
    };
    Some(s)
}

/// Every table a key can belong to, with its keys (for "did you mean").
const SECTIONS: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "extends",
            "description",
            "isolation",
            "filesystem",
            "limits",
            "env",
            "syscalls",
            "network",
            "audit",
            "stage",
            "scan",
            "secrets",
        ],
    ),
    ("isolation", &["level", "allow_weaker"]),
    (
        "filesystem",
        &[
            "cwd",
            "read_only",
            "read_write",
            "tmp_size",
            "tmp_inodes",
            "protect_host_tools",
        ],
    ),
    (
        "limits",
        &[
            "timeout",
            "cpu_time",
            "memory",
            "pids",
            "open_files",
            "file_size",
            "output",
            "on_output_limit",
            "inotify_instances",
            "inotify_watches",
            "queued_signals",
            "mqueue_bytes",
        ],
    ),
    ("env", &["pass", "set"]),
    ("syscalls", &["unix_sockets"]),
    (
        "network",
        &[
            "mode",
            "allow",
            "deny",
            "https_only",
            "methods",
            "allow_private",
            "allow_missing_sni",
            "on_unlisted",
            "max_bytes",
            "rate_limit",
        ],
    ),
    ("network.rate_limit", &["host", "requests", "bytes", "per"]),
    ("secrets", &["name", "from", "hosts", "inject", "ttl"]),
    ("audit", &["enabled", "path"]),
    (
        "stage",
        &["refuse", "ask", "auto", "max_file_size", "max_size", "keep"],
    ),
    ("scan", &["mode", "rules", "ignore"]),
];

/// Edit distance counting a swap of neighbours as one edit (optimal string
/// alignment), for suggestions.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

/// The candidate closest to `word`, if it is an obvious one.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let w = word.to_ascii_lowercase().replace('-', "_");
    if let Some(c) = candidates.iter().find(|c| c.eq_ignore_ascii_case(&w)) {
        return Some(c);
    }
    let (best, d) = candidates
        .iter()
        .map(|c| (*c, distance(&w, &c.to_ascii_lowercase())))
        .min_by_key(|(_, d)| *d)?;
    let limit = (best.chars().count().max(w.chars().count()) / 3).max(1);
    if d <= limit {
        return Some(best);
    }
    // A prefix ("mem" for "memory", "read_only_paths" for "read_only").
    candidates
        .iter()
        .find(|c| w.len() >= 3 && (c.starts_with(&w) || w.starts_with(**c)))
        .copied()
}

/// The words between backticks in a serde message (after `from`).
fn backticked(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// How a table is written, for messages.
fn table_name(parent: &str) -> String {
    let p = key_pattern(parent);
    match p.as_str() {
        "" => "at the top level".to_string(),
        "secrets" | "network.rate_limit" => format!("in [[{p}]]"),
        _ if parent.ends_with(']') || p.contains('.') && !SECTIONS.iter().any(|(s, _)| *s == p) => {
            format!("in {p}")
        }
        _ => format!("in [{p}]"),
    }
}

fn unknown_key(msg: &str, key: Option<&str>) -> (String, String) {
    let (field, expected) = match msg.split_once(", expected") {
        Some((head, tail)) => (
            backticked(head).first().copied().unwrap_or(""),
            backticked(tail),
        ),
        None => (backticked(msg).first().copied().unwrap_or(""), Vec::new()),
    };
    let parent = key
        .and_then(|k| k.rsplit_once('.').map(|(p, _)| p))
        .unwrap_or("");
    let message = format!("unknown key '{field}' {}", table_name(parent));
    let valid = if expected.is_empty() {
        "this table has no keys".to_string()
    } else {
        format!("valid keys here: {}", expected.join(", "))
    };
    if let Some(c) = closest(field, &expected) {
        return (message, format!("did you mean '{c}'? {valid}"));
    }
    // The key may belong to another table.
    let here = key_pattern(parent);
    for (section, keys) in SECTIONS {
        if *section != here && keys.contains(&field) {
            let place = match *section {
                "" => "at the top level".to_string(),
                "secrets" | "network.rate_limit" => format!("in [[{section}]]"),
                s => format!("in [{s}]"),
            };
            return (message, format!("'{field}' belongs {place}; {valid}"));
        }
    }
    (message, valid)
}

/// Turns a deserializer message into (kind, what was wrong, what is allowed).
pub(crate) fn explain(msg: &str, key: Option<&str>) -> (ErrorKind, String, String) {
    let msg = msg.trim();
    let expected = key.and_then(expected_for);
    if msg.starts_with("unknown field") {
        let (m, h) = unknown_key(msg, key);
        return (ErrorKind::UnknownKey, m, h);
    }
    if let Some(rest) = msg.strip_prefix("unknown variant") {
        let (head, tail) = rest.split_once(", expected").unwrap_or((rest, ""));
        let word = backticked(head).first().copied().unwrap_or("").to_string();
        let allowed = backticked(tail);
        let is_preset = key.is_some_and(|k| k == "extends");
        let is_source = key.is_some_and(|k| key_pattern(k) == "secrets.from");
        let message = if is_preset {
            format!("'{word}' is not a preset")
        } else if is_source {
            format!("'{word}' is not a secret source")
        } else {
            format!("'{word}' is not allowed here")
        };
        let mut hint = format!("expected one of: {}", allowed.join(", "));
        if let Some(c) = closest(&word, &allowed) {
            hint = format!("did you mean '{c}'? {hint}");
        }
        let kind = if is_preset {
            ErrorKind::UnknownPreset
        } else {
            ErrorKind::InvalidValue
        };
        return (kind, message, hint);
    }
    if let Some(rest) = msg.strip_prefix("missing field") {
        let field = backticked(rest).first().copied().unwrap_or("").to_string();
        let hint = key
            .map(|k| format!("{k}.{field}"))
            .and_then(|k| expected_for(&k))
            .map(|e| format!("add {field} = ...: {e}"))
            .unwrap_or_else(|| format!("add the key '{field}'"));
        return (
            ErrorKind::MissingKey,
            format!("missing required key '{field}'"),
            hint,
        );
    }
    for (prefix, kind) in [
        ("invalid type:", ErrorKind::WrongType),
        ("invalid value:", ErrorKind::InvalidValue),
        ("invalid length", ErrorKind::InvalidValue),
    ] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            let (found, want) = match rest.split_once(", expected ") {
                Some((f, w)) => (f.trim(), w.trim()),
                None => (rest.trim(), ""),
            };
            let found = found.replace('`', "");
            let message = match kind {
                ErrorKind::WrongType => format!("wrong type: found {found}"),
                _ if want == "u64" => format!("{found} is not allowed: expected zero or more"),
                _ => format!("{found} is not allowed"),
            };
            let hint = expected.unwrap_or_else(|| format!("expected {want}"));
            return (kind, message, hint);
        }
    }
    // toml_edit's own message for enums written as tables with several keys.
    if msg.contains("wanted exactly 1 element") {
        return (
            ErrorKind::InvalidValue,
            "exactly one key is needed in this table".to_string(),
            expected.unwrap_or_else(|| "keep a single key".to_string()),
        );
    }
    // Messages from this crate's own parsers: "what; hint".
    if let Some((m, h)) = msg.split_once("; ") {
        return (ErrorKind::InvalidValue, m.to_string(), h.to_string());
    }
    (
        ErrorKind::InvalidValue,
        msg.replace('\n', "; "),
        expected
            .unwrap_or_else(|| "see schema/profile.schema.json for what is allowed".to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_words() {
        let keys = &["timeout", "cpu_time", "memory", "pids", "open_files"];
        assert_eq!(closest("memroy", keys), Some("memory"));
        assert_eq!(closest("Memory", keys), Some("memory"));
        assert_eq!(closest("pid", keys), Some("pids"));
        assert_eq!(closest("open-files", keys), Some("open_files"));
        assert_eq!(closest("mem", keys), Some("memory"));
        assert_eq!(closest("zzzzzz", keys), None);
        assert_eq!(
            closest("hihg", &["untrusted", "low", "medium", "high"]),
            Some("high")
        );
    }

    #[test]
    fn positions() {
        assert_eq!(line_col("a\nbc\nd", 0), (1, 1));
        assert_eq!(line_col("a\nbc\nd", 3), (2, 2));
        assert_eq!(line_col("é\nx", 3), (2, 1));
        assert_eq!(line_col("éx", 2), (1, 2));
    }

    #[test]
    fn patterns() {
        assert_eq!(key_pattern("secrets[3].hosts[0]"), "secrets.hosts");
        assert_eq!(key_pattern("env.set.FOO"), "env.set.*");
        assert_eq!(key_pattern("env.set"), "env.set");
    }
}
