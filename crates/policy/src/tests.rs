//! Loading profiles: the full example, presets, every error path, round trips.

use super::*;

/// Loads `text` expecting an error; returns its diagnostic.
fn err(text: &str) -> Diagnostic {
    match Profile::from_toml_str(text, "p.toml") {
        Ok(p) => panic!("expected an error for {text:?}, got {p:?}"),
        Err(e) => {
            let d = e.diagnostic().cloned().unwrap();
            // The Display shape: one line, then the hint.
            let s = e.to_string();
            let lines: Vec<&str> = s.lines().collect();
            assert_eq!(lines.len(), 2, "{s}");
            assert!(lines[1].starts_with("  hint: "), "{s}");
            d
        }
    }
}

/// Asserts where an error is and what it says.
#[track_caller]
fn check(
    text: &str,
    kind: ErrorKind,
    line: usize,
    col: usize,
    key: &str,
    message: &str,
    hint: &str,
) {
    let d = err(text);
    assert_eq!(d.kind, kind, "{d}");
    assert_eq!((d.line, d.column), (Some(line), Some(col)), "{d}");
    assert_eq!(d.key.as_deref(), Some(key), "{d}");
    assert!(
        d.message.contains(message),
        "message {:?} lacks {message:?}",
        d.message
    );
    let h = d.hint.clone().unwrap_or_default();
    assert!(h.contains(hint), "hint {h:?} lacks {hint:?}");
    assert!(
        d.to_string()
            .starts_with(&format!("p.toml:{line}:{col}: {key}: ")),
        "{d}"
    );
}

const FULL: &str = r#"
extends = "untrusted"
description = "everything at once"

[isolation]
level = "namespaces"
allow_weaker = false

[filesystem]
cwd = "ro"
read_only = ["./data", "~/.cache/pip"]
read_write = ["./out"]
tmp_size = "64MiB"
tmp_inodes = 16384

[limits]
timeout = "5m"
cpu_time = "4m"
memory = "1GiB"
pids = 256
open_files = 1024
file_size = "1GiB"
output = "8MiB"
on_output_limit = "kill"

[env]
pass = ["LANG", "TERM"]
set = { PYTHONDONTWRITEBYTECODE = "1" }

[syscalls]
unix_sockets = false

[network]
mode = "proxy"
allow = ["pypi.org", "*.pythonhosted.org", "api.example.com:443", "api.github.com"]
deny = ["evil.pythonhosted.org"]
https_only = true
methods = ["GET", "HEAD"]
allow_private = false
on_unlisted = "ask"
max_bytes = "1GiB"

[[network.rate_limit]]
host = "api.example.com"
requests = 60
bytes = "10MiB"
per = "1m"

[[secrets]]
name = "GITHUB_TOKEN"
from = { env = "GITHUB_TOKEN" }
hosts = ["api.github.com"]
inject = ["header"]
ttl = "15m"

[audit]
enabled = true
path = "~/.local/state/cordon/audit.db"
"#;

#[test]
fn full_example_loads() {
    let p = Profile::from_toml_str(FULL, "full.toml").unwrap();
    assert_eq!(p.origin, "full.toml");
    assert_eq!(p.extends, TrustLevel::Untrusted);
    assert_eq!(p.description.as_deref(), Some("everything at once"));
    assert_eq!(p.filesystem.read_only.len(), 2);
    assert_eq!(p.limits.memory, ByteSize::gib(1));
    assert_eq!(p.limits.cpu_time, DurationSpec::mins(4));
    assert_eq!(p.limits.on_output_limit, OnOutputLimit::Kill);
    assert_eq!(p.env.pass, vec!["LANG", "TERM"]);
    // env.set merges with the preset's PATH.
    assert_eq!(p.env.set["PYTHONDONTWRITEBYTECODE"], "1");
    assert!(p.env.set.contains_key("PATH"));
    assert_eq!(p.network.mode, NetworkMode::Proxy);
    assert_eq!(p.network.allow.len(), 4);
    assert_eq!(p.network.methods, vec![HttpMethod::Get, HttpMethod::Head]);
    assert_eq!(p.network.on_unlisted, OnUnlisted::Ask);
    assert_eq!(p.network.rate_limit[0].requests, Some(60));
    assert_eq!(p.network.rate_limit[0].per, DurationSpec::mins(1));
    assert_eq!(p.secrets[0].ttl, Some(DurationSpec::mins(15)));
    assert_eq!(p.secrets[0].from, SecretSource::Env("GITHUB_TOKEN".into()));
    assert_eq!(
        p.audit.path.as_deref(),
        Some(Path::new("~/.local/state/cordon/audit.db"))
    );
    assert!(matches!(
        p.network.decide("files.pythonhosted.org", 443),
        HostDecision::Allowed(_)
    ));
    assert!(matches!(
        p.network.decide("evil.pythonhosted.org", 443),
        HostDecision::Denied(_)
    ));
    assert_eq!(
        p.network.decide("api.example.com", 80),
        HostDecision::Unlisted
    );
}

#[test]
fn empty_file_is_the_untrusted_preset() {
    let p = Profile::from_toml_str("", "empty.toml").unwrap();
    assert_eq!(
        Profile {
            origin: "preset:untrusted".into(),
            ..p
        },
        Profile::default()
    );
}

#[test]
fn file_values_replace_preset_values() {
    let p = Profile::from_toml_str(
        "extends = \"high\"\n[limits]\nmemory = \"3GiB\"\n[env]\npass = []\n",
        "p.toml",
    )
    .unwrap();
    let high = Profile::preset(TrustLevel::High);
    assert_eq!(p.limits.memory, ByteSize::gib(3));
    assert_eq!(p.limits.pids, high.limits.pids);
    assert_eq!(p.filesystem.cwd, CwdAccess::Rw);
    assert!(p.env.pass.is_empty());
}

#[test]
fn round_trips_through_toml_and_json() {
    let p = Profile::from_toml_str(FULL, "full.toml").unwrap();
    let text = p.to_toml_string();
    let q = Profile::from_toml_str(&text, "full.toml").unwrap();
    assert_eq!(p, q, "{text}");
    for level in TrustLevel::ALL {
        let p = Profile::preset(*level);
        let q = Profile::from_toml_str(&p.to_toml_string(), &p.origin).unwrap();
        assert_eq!(p, q);
    }
    let json = serde_json::to_string(&p).unwrap();
    let r = Profile::from_json_str(&json, "full.toml").unwrap();
    assert_eq!(p, r);
}

#[test]
fn load_reads_files_and_reports_missing_ones() {
    let dir = std::env::temp_dir().join(format!("cordon-policy-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.toml");
    std::fs::write(&path, "[limits]\nmemory = \"1GiB\"\n").unwrap();
    assert_eq!(
        Profile::load(&path).unwrap().limits.memory,
        ByteSize::gib(1)
    );
    std::fs::write(&path, "[limits]\n\nmemory = \"1 gigabyte\"\n").unwrap();
    let e = Profile::load(&path).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{}:3:10: limits.memory: ", path.display())),
        "{e}"
    );
    let json = dir.join("p.json");
    std::fs::write(&json, r#"{"limits": {"pids": 64}}"#).unwrap();
    assert_eq!(Profile::load(&json).unwrap().limits.pids, 64);
    std::fs::remove_dir_all(&dir).unwrap();
    let e = Profile::load(&dir.join("missing.toml")).unwrap_err();
    assert!(matches!(e, PolicyError::Read { .. }));
    assert!(e.to_string().contains("cannot read the profile"), "{e}");
    assert!(e.diagnostic().is_none());
}

#[test]
fn syntax_errors_have_position_but_no_key() {
    let d = err("[limits\nmemory = 1\n");
    assert_eq!(d.kind, ErrorKind::Syntax);
    assert_eq!((d.line, d.column), (Some(1), Some(8)));
    assert_eq!(d.key, None);
    assert!(d.message.starts_with("not valid TOML: "), "{d}");

    let d = err("[limits]\nmemory = \"1GiB\"\nmemory = \"2GiB\"\n");
    assert_eq!(d.kind, ErrorKind::Syntax);
    assert_eq!(d.line, Some(3));
    assert!(d.message.contains("duplicate key"), "{d}");
    assert!(d.hint.unwrap().contains("only once"));

    let d = err("description = \"unterminated\n");
    assert_eq!((d.kind, d.line), (ErrorKind::Syntax, Some(1)));
}

#[test]
fn unknown_keys_suggest_the_closest() {
    check(
        "[limits]\nmemroy = \"512MiB\"\n",
        ErrorKind::UnknownKey,
        2,
        1,
        "limits.memroy",
        "unknown key 'memroy' in [limits]",
        "did you mean 'memory'?",
    );
    check(
        "[limit]\nmemory = \"512MiB\"\n",
        ErrorKind::UnknownKey,
        1,
        2,
        "limit",
        "unknown key 'limit' at the top level",
        "did you mean 'limits'?",
    );
    check(
        "\n\nmemory = \"512MiB\"\n",
        ErrorKind::UnknownKey,
        3,
        1,
        "memory",
        "unknown key 'memory' at the top level",
        "'memory' belongs in [limits]",
    );
    check(
        "[network]\nmode = \"proxy\"\n[[network.rate_limit]]\nhost = \"a.com\"\nrequest = 5\n",
        ErrorKind::UnknownKey,
        5,
        1,
        "network.rate_limit[0].request",
        "in [[network.rate_limit]]",
        "did you mean 'requests'?",
    );
    check(
        "[[secrets]]\nname = \"X\"\nfrom = { env = \"X\" }\nhost = [\"a.com\"]\n",
        ErrorKind::UnknownKey,
        4,
        1,
        "secrets[0].host",
        "in [[secrets]]",
        "did you mean 'hosts'?",
    );
    check(
        "[filesystem]\nread-only = [\"a\"]\n",
        ErrorKind::UnknownKey,
        2,
        1,
        "filesystem.read-only",
        "unknown key 'read-only'",
        "did you mean 'read_only'?",
    );
    // Nothing close: list the valid keys.
    check(
        "[syscalls]\nptrace = true\n",
        ErrorKind::UnknownKey,
        2,
        1,
        "syscalls.ptrace",
        "unknown key 'ptrace' in [syscalls]",
        "valid keys here: unix_sockets",
    );
    // Dotted keys are located too.
    check(
        "limits.memroy = 1\n",
        ErrorKind::UnknownKey,
        1,
        8,
        "limits.memroy",
        "unknown key 'memroy'",
        "did you mean 'memory'?",
    );
}

#[test]
fn unknown_preset() {
    check(
        "extends = \"hihg\"\n",
        ErrorKind::UnknownPreset,
        1,
        11,
        "extends",
        "'hihg' is not a preset",
        "expected one of: untrusted, low, medium, high",
    );
    check(
        "extends = \"paranoid\"\n",
        ErrorKind::UnknownPreset,
        1,
        11,
        "extends",
        "'paranoid' is not a preset",
        "expected one of: untrusted, low, medium, high",
    );
}

#[test]
fn bad_words() {
    check(
        "[filesystem]\ncwd = \"readonly\"\n",
        ErrorKind::InvalidValue,
        2,
        7,
        "filesystem.cwd",
        "'readonly' is not allowed here",
        "expected one of: ro, rw, none",
    );
    check(
        "[isolation]\nlevel = \"vm\"\n",
        ErrorKind::InvalidValue,
        2,
        9,
        "isolation.level",
        "'vm'",
        "expected one of: namespaces, process",
    );
    check(
        "[network]\nmode = \"proxy\"\nmethods = [\"GET\", \"get\"]\n",
        ErrorKind::InvalidValue,
        3,
        19,
        "network.methods[1]",
        "'get'",
        "did you mean 'GET'?",
    );
    check(
        "[network]\nmode = \"internet\"\n",
        ErrorKind::InvalidValue,
        2,
        8,
        "network.mode",
        "'internet'",
        "expected one of: none, loopback, proxy",
    );
    check(
        "[limits]\non_output_limit = \"drop\"\n",
        ErrorKind::InvalidValue,
        2,
        19,
        "limits.on_output_limit",
        "'drop'",
        "truncate, kill",
    );
    check(
        "[network]\nmode = \"proxy\"\non_unlisted = \"allow\"\n",
        ErrorKind::InvalidValue,
        3,
        15,
        "network.on_unlisted",
        "'allow'",
        "deny, ask",
    );
}

#[test]
fn bad_sizes_and_durations() {
    check(
        "[limits]\nmemory = \"512XB\"\n",
        ErrorKind::InvalidValue,
        2,
        10,
        "limits.memory",
        "'512XB' is not a size",
        "write a number with a unit such as 512MiB or 2GiB",
    );
    assert_eq!(
        err("[limits]\nmemory = \"512XB\"\n").to_string(),
        "p.toml:2:10: limits.memory: '512XB' is not a size\n  hint: write a number with a unit such as 512MiB or 2GiB"
    );
    check(
        "[filesystem]\ntmp_size = -5\n",
        ErrorKind::InvalidValue,
        2,
        12,
        "filesystem.tmp_size",
        "-5 is negative",
        "zero or more",
    );
    check(
        "[limits]\ntimeout = \"5 minutes\"\n",
        ErrorKind::InvalidValue,
        2,
        11,
        "limits.timeout",
        "'5 minutes' is not a duration",
        "250ms, 30s, 5m or 1h30m",
    );
    check(
        "[limits]\ncpu_time = \"1.5h\"\n",
        ErrorKind::InvalidValue,
        2,
        12,
        "limits.cpu_time",
        "'1.5h'",
        "1h30m",
    );
    check(
        "limits.output = \"lots\"\n",
        ErrorKind::InvalidValue,
        1,
        17,
        "limits.output",
        "'lots' is not a size",
        "512MiB",
    );
}

#[test]
fn wrong_types() {
    check(
        "[limits]\npids = \"many\"\n",
        ErrorKind::WrongType,
        2,
        8,
        "limits.pids",
        "wrong type: found string \"many\"",
        "a whole number",
    );
    check(
        "[limits]\npids = -1\n",
        ErrorKind::InvalidValue,
        2,
        8,
        "limits.pids",
        "-1 is not allowed",
        "a whole number",
    );
    check(
        "[limits]\ntimeout = true\n",
        ErrorKind::WrongType,
        2,
        11,
        "limits.timeout",
        "found boolean true",
        "a duration such as",
    );
    check(
        "[filesystem]\nread_only = \"./a\"\n",
        ErrorKind::WrongType,
        2,
        13,
        "filesystem.read_only",
        "found string",
        "a list of paths",
    );
    check(
        "[env]\nset = { A = 1 }\n",
        ErrorKind::WrongType,
        2,
        13,
        "env.set.A",
        "found integer 1",
        "write \"1\", not 1",
    );
    check(
        "[isolation]\nallow_weaker = \"yes\"\n",
        ErrorKind::WrongType,
        2,
        16,
        "isolation.allow_weaker",
        "found string",
        "true or false",
    );
    check(
        "limits = 5\n",
        ErrorKind::WrongType,
        1,
        10,
        "limits",
        "found integer",
        "[limits] with timeout",
    );
    check(
        "[network]\nmode = \"proxy\"\nallow = [\"a.com\", 5]\n",
        ErrorKind::WrongType,
        3,
        19,
        "network.allow[1]",
        "found integer",
        "host pattern",
    );
}

#[test]
fn bad_host_patterns() {
    check(
        "[network]\nmode = \"proxy\"\nallow = [\"pypi.org\", \"*.com\"]\n",
        ErrorKind::InvalidValue,
        3,
        22,
        "network.allow[1]",
        "'*.com' would allow every host under the top-level domain 'com'",
        "*.example.com",
    );
    check(
        "[network]\nmode = \"proxy\"\nallow = [\"*\"]\n",
        ErrorKind::InvalidValue,
        3,
        10,
        "network.allow[0]",
        "every host",
        "name the hosts",
    );
    check(
        "[network]\nmode = \"proxy\"\ndeny = [\"10.0.0.0/8\"]\n",
        ErrorKind::InvalidValue,
        3,
        9,
        "network.deny[0]",
        "IP range",
        "not supported",
    );
    check(
        "[network]\nmode = \"proxy\"\nallow = [\"https://pypi.org/simple\"]\n",
        ErrorKind::InvalidValue,
        3,
        10,
        "network.allow[0]",
        "scheme",
        "write the host only, e.g. pypi.org",
    );
    check(
        "[network]\nmode = \"proxy\"\n[[network.rate_limit]]\nhost = \"a..com\"\nrequests = 1\n",
        ErrorKind::InvalidValue,
        4,
        8,
        "network.rate_limit[0].host",
        "empty label",
        "api.example.com",
    );
    // Refused by the same parser the proxy uses, so a profile cannot hold a
    // pattern the proxy would reject.
    check(
        "[[secrets]]\nname = \"T\"\nfrom = { env = \"T\" }\nhosts = [\"*.co.uk\"]\n",
        ErrorKind::InvalidValue,
        4,
        10,
        "secrets[0].hosts[0]",
        "'*.co.uk' would allow every host under the public registry 'co.uk'",
        "*.example.co.uk",
    );
    check(
        "[network]\nmode = \"proxy\"\ndeny = [\"2001:db8::1\"]\n",
        ErrorKind::InvalidValue,
        3,
        9,
        "network.deny[0]",
        "more than one ':'",
        "brackets",
    );
}

#[test]
fn conflicting_paths() {
    check(
        "[filesystem]\nread_only = [\"./a\", \"b\"]\nread_write = [\"c\", \"a/\"]\n",
        ErrorKind::Conflict,
        3,
        20,
        "filesystem.read_write[1]",
        "'a/' is also in filesystem.read_only (as './a')",
        "list each path once",
    );
    check(
        "[filesystem]\nread_write = [\".\"]\n",
        ErrorKind::Conflict,
        2,
        15,
        "filesystem.read_write[0]",
        "is the current directory",
        "filesystem.cwd = \"rw\"",
    );
    check(
        "[filesystem]\nread_only = [\"/proc/1/root\"]\n",
        ErrorKind::InvalidValue,
        2,
        14,
        "filesystem.read_only[0]",
        "under /proc",
        "own /proc",
    );
    check(
        "[filesystem]\nread_only = [\"~bob/data\"]\n",
        ErrorKind::InvalidValue,
        2,
        14,
        "filesystem.read_only[0]",
        "~user",
        "~/...",
    );
    check(
        "[filesystem]\nread_only = [\"\"]\n",
        ErrorKind::InvalidValue,
        2,
        14,
        "filesystem.read_only[0]",
        "an empty path",
        "./data",
    );
}

#[test]
fn network_settings_need_the_proxy() {
    check(
        "[network]\nallow = [\"pypi.org\"]\n",
        ErrorKind::Conflict,
        2,
        1,
        "network.allow",
        "has no effect with network.mode = \"none\"",
        "set network.mode = \"proxy\"",
    );
    check(
        "[network]\nmode = \"loopback\"\nallow_private = true\n",
        ErrorKind::Conflict,
        3,
        1,
        "network.allow_private",
        "network.mode = \"loopback\"",
        "network.mode = \"proxy\"",
    );
    // The mode may come from the preset: medium has the proxy, so this is fine.
    assert!(Profile::from_toml_str(
        "extends = \"medium\"\n[network]\nallow = [\"pypi.org\"]\n",
        "p.toml"
    )
    .is_ok());
    // ... and a file that turns it off while listing hosts is not.
    check(
        "extends = \"medium\"\n[network]\nmode = \"none\"\nallow = [\"pypi.org\"]\n",
        ErrorKind::Conflict,
        4,
        1,
        "network.allow",
        "no effect",
        "proxy",
    );
    check(
        "[network]\nmode = \"proxy\"\nallow = [\"a.com\"]\ndeny = [\"a.com\"]\n",
        ErrorKind::Conflict,
        3,
        10,
        "network.allow[0]",
        "both allowed and denied",
        "deny wins",
    );
    check(
        "[network]\nmode = \"proxy\"\n[[network.rate_limit]]\nhost = \"a.com\"\n",
        ErrorKind::MissingKey,
        3,
        1,
        "network.rate_limit[0]",
        "neither requests nor bytes",
        "requests = 60",
    );
    check(
        "[network]\nmode = \"proxy\"\nmax_bytes = 0\n",
        ErrorKind::InvalidValue,
        3,
        13,
        "network.max_bytes",
        "too small",
        "network.mode = \"none\"",
    );
}

const SECRET: &str = "[[secrets]]\nname = \"GITHUB_TOKEN\"\nfrom = { env = \"GITHUB_TOKEN\" }\nhosts = [\"api.github.com\"]\n";

#[test]
fn secrets_need_the_proxy_and_allowed_hosts() {
    check(
        SECRET,
        ErrorKind::Conflict,
        1,
        1,
        "secrets[0]",
        "can't be used with network.mode = \"none\"",
        "set network.mode = \"proxy\"",
    );
    check(
        &format!("[network]\nmode = \"proxy\"\nallow = [\"github.com\"]\n{SECRET}"),
        ErrorKind::Conflict,
        7,
        10,
        "secrets[0].hosts[0]",
        "'api.github.com' is not allowed by network.allow",
        "add \"api.github.com\" to network.allow",
    );
    assert!(Profile::from_toml_str(
        &format!("[network]\nmode = \"proxy\"\nallow = [\"*.github.com\"]\n{SECRET}"),
        "p.toml"
    )
    .is_ok());
    check(
        &format!("[env]\npass = [\"LANG\", \"GITHUB_TOKEN\"]\n[network]\nmode = \"proxy\"\nallow = [\"api.github.com\"]\n{SECRET}"),
        ErrorKind::Conflict,
        2,
        17,
        "env.pass[1]",
        "would put the real value in the sandbox",
        "remove it from env.pass",
    );
    let net = "[network]\nmode = \"proxy\"\nallow = [\"api.github.com\"]\n";
    check(
        &format!("{net}{SECRET}{SECRET}"),
        ErrorKind::Conflict,
        9,
        1,
        "secrets[1].name",
        "declared twice",
        "own name",
    );
    check(
        &format!("{net}[[secrets]]\nname = \"X\"\nfrom = {{ vault = \"X\" }}\nhosts = [\"api.github.com\"]\n"),
        ErrorKind::InvalidValue,
        6,
        10,
        "secrets[0].from",
        "'vault' is not a secret source",
        "expected one of: env, file, command",
    );
    check(
        &format!("{net}[[secrets]]\nname = \"X\"\nfrom = {{ env = \"X\", file = \"y\" }}\nhosts = [\"api.github.com\"]\n"),
        ErrorKind::InvalidValue,
        6,
        8,
        "secrets[0].from",
        "exactly one key",
        "{ env = \"VAR\" }",
    );
    check(
        &format!("{net}[[secrets]]\nname = \"X\"\nfrom = {{ command = [] }}\nhosts = [\"api.github.com\"]\n"),
        ErrorKind::InvalidValue,
        6,
        20,
        "secrets[0].from.command",
        "the command is empty",
        "op",
    );
    check(
        &format!("{net}[[secrets]]\nname = \"X\"\nfrom = {{ env = \"X\" }}\n"),
        ErrorKind::MissingKey,
        4,
        1,
        "secrets[0]",
        "missing required key 'hosts'",
        "add hosts = ...",
    );
    check(
        &format!("{net}[[secrets]]\nname = \"MY-TOKEN\"\nfrom = {{ env = \"X\" }}\nhosts = [\"api.github.com\"]\n"),
        ErrorKind::InvalidValue,
        5,
        8,
        "secrets[0].name",
        "not an environment variable name",
        "GITHUB_TOKEN",
    );
    check(
        &format!("{net}[[secrets]]\nname = \"X\"\nfrom = {{ env = \"X\" }}\nhosts = [\"api.github.com\"]\ninject = [\"cookie\"]\n"),
        ErrorKind::InvalidValue,
        8,
        11,
        "secrets[0].inject[0]",
        "'cookie'",
        "header, query, body",
    );
}

#[test]
fn bad_limits_and_env() {
    check(
        "[limits]\npids = 0\n",
        ErrorKind::InvalidValue,
        2,
        8,
        "limits.pids",
        "0 is out of range",
        "from 1 to",
    );
    check(
        "[limits]\nmemory = \"1MiB\"\n",
        ErrorKind::InvalidValue,
        2,
        10,
        "limits.memory",
        "1MiB is too small",
        "at least 8MiB",
    );
    check(
        "[limits]\ntimeout = 0\n",
        ErrorKind::InvalidValue,
        2,
        11,
        "limits.timeout",
        "too short",
        "at least 1ms",
    );
    check(
        "[env]\npass = [\"LANG\", \"MY-VAR\"]\n",
        ErrorKind::InvalidValue,
        2,
        17,
        "env.pass[1]",
        "'MY-VAR' is not an environment variable name",
        "letters, digits",
    );
    check(
        "[env]\npass = [\"LANG\"]\nset = { LANG = \"C\" }\n",
        ErrorKind::Conflict,
        2,
        9,
        "env.pass[0]",
        "also set in env.set",
        "not both",
    );
    check(
        "[env]\nset = { \"A B\" = \"1\" }\n",
        ErrorKind::InvalidValue,
        2,
        9,
        "env.set.A B",
        "not an environment variable name",
        "letters",
    );
}

#[test]
fn json_profiles() {
    let p = Profile::from_json_str(
        r#"{"extends": "low", "limits": {"memory": "2GiB"}}"#,
        "p.json",
    )
    .unwrap();
    assert_eq!(p.extends, TrustLevel::Low);
    assert_eq!(p.limits.memory, ByteSize::gib(2));
    let e = Profile::from_json_str("{\n  \"limits\": {\"memroy\": 1}}", "p.json").unwrap_err();
    let d = e.diagnostic().unwrap();
    assert_eq!(d.kind, ErrorKind::UnknownKey);
    assert_eq!(d.line, Some(2));
    assert!(
        d.hint
            .as_deref()
            .unwrap()
            .contains("did you mean 'memory'?"),
        "{e}"
    );
    let e = Profile::from_json_str("{\"limits\": ", "p.json").unwrap_err();
    assert_eq!(e.diagnostic().unwrap().kind, ErrorKind::Syntax);
    let e = Profile::from_json_str(r#"{"network": {"allow": ["a.com"]}}"#, "p.json").unwrap_err();
    assert_eq!(
        e.diagnostic().unwrap().key.as_deref(),
        Some("network.allow")
    );
}

#[test]
fn mounts_resolve_paths() {
    let p = Profile::from_toml_str(
        "extends = \"medium\"\n[filesystem]\nread_only = [\"./data\", \"~/.cache/pip\"]\nread_write = [\"out\", \"/srv/x/../y\"]\n",
        "p.toml",
    )
    .unwrap();
    let m = p.mounts(Path::new("/work/proj"), Path::new("/home/u"));
    let want = [
        ("/work/proj", true),
        ("/work/proj/data", false),
        ("/home/u/.cache/pip", false),
        ("/work/proj/out", true),
        ("/srv/y", true),
    ];
    assert_eq!(m.len(), want.len());
    for (rule, (path, writable)) in m.iter().zip(want) {
        assert_eq!(rule.path, Path::new(path));
        assert_eq!(rule.writable, writable, "{path}");
    }
    let none = Profile::from_toml_str("[filesystem]\ncwd = \"none\"\n", "p.toml").unwrap();
    assert!(none.mounts(Path::new("/w"), Path::new("/h")).is_empty());
}

/// Every example in profiles/ loads, validates, round-trips and has a
/// description; the API client one binds a secret.
#[test]
fn example_profiles_validate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let p = Profile::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(p.description.is_some(), "{}", path.display());
            let danger: Vec<String> = p
                .lint()
                .iter()
                .filter(|w| w.severity == Severity::Danger)
                .map(|w| w.to_string())
                .collect();
            assert!(danger.is_empty(), "{}: {danger:?}", path.display());
            let again = Profile::from_toml_str(&p.to_toml_string(), &p.origin).unwrap();
            assert_eq!(p, again);
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    for want in [
        "api-client.toml",
        "data-analysis.toml",
        "node.toml",
        "python.toml",
        "shell-build.toml",
    ] {
        assert!(names.iter().any(|n| n == want), "missing profiles/{want}");
    }
    let api = Profile::load(&dir.join("api-client.toml")).unwrap();
    assert_eq!(api.network.mode, NetworkMode::Proxy);
    assert_eq!(api.secrets.len(), 1);
}

#[test]
fn keys_inside_inline_tables_and_later_entries() {
    check(
        "[network]\nmode = \"proxy\"\nrate_limit = [{ host = \"a.com\", requests = \"x\" }]\n",
        ErrorKind::WrongType,
        3,
        44,
        "network.rate_limit[0].requests",
        "found string",
        "a whole number",
    );
    let net = "[network]\nmode = \"proxy\"\nallow = [\"a.com\"]\n";
    let s = "[[secrets]]\nname = \"A\"\nfrom = { env = \"A\" }\nhosts = [\"a.com\"]\n";
    check(
        &format!("{net}{s}[[secrets]]\nname = \"B\"\nfrom = {{ env = \"B\" }}\nhosts = [\"a.com\"]\nttl = \"soon\"\n"),
        ErrorKind::InvalidValue,
        12,
        7,
        "secrets[1].ttl",
        "'soon' is not a duration",
        "30s",
    );
}

#[test]
fn crlf_and_unicode_positions() {
    let d = err("description = \"Überprüfung\"\r\n[limits]\r\nmemory = \"lots\"\r\n");
    assert_eq!((d.line, d.column), (Some(3), Some(10)));
    let d = err("description = \"ü\"; [limits]");
    assert_eq!(d.kind, ErrorKind::Syntax);
    assert_eq!(d.line, Some(1));
}

#[test]
fn numbers_too_large_for_toml() {
    let d = err("[limits]\npids = 99999999999999999999\n");
    assert_eq!(d.line, Some(2));
}

#[test]
fn scan_section() {
    let p = Profile::from_toml_str(
        "[scan]\nmode = \"block\"\nrules = [\"./rules.toml\"]\nignore = [\"tls-verify-off\"]\n",
        "p.toml",
    )
    .unwrap();
    assert_eq!(p.scan.mode, ScanMode::Block);
    assert_eq!(p.scan.rules, vec![PathBuf::from("./rules.toml")]);
    assert_eq!(p.scan.ignore, vec!["tls-verify-off".to_string()]);
    // Off unless a profile or flag says otherwise.
    assert_eq!(Profile::default().scan.mode, ScanMode::Off);
    // Round trip keeps the section.
    let back = Profile::from_toml_str(&p.to_toml_string(), "p.toml").unwrap();
    assert_eq!(back.scan, p.scan);

    check(
        "[scan]\nmode = \"loud\"\n",
        ErrorKind::InvalidValue,
        2,
        8,
        "scan.mode",
        "'loud' is not allowed here",
        "off, warn, ask, block",
    );
    check(
        "[scan]\nmdoe = \"warn\"\n",
        ErrorKind::UnknownKey,
        2,
        1,
        "scan.mdoe",
        "unknown key",
        "mode",
    );
    let d = err("[scan]\nignore = [\"no spaces\"]\n");
    assert_eq!(d.key.as_deref(), Some("scan.ignore[0]"), "{d}");

    let o = Overrides {
        scan_mode: Some(ScanMode::Warn),
        scan_rules: vec![PathBuf::from("/x.toml")],
        ..Overrides::default()
    };
    let q = p.with_overrides(&o).unwrap();
    assert_eq!(q.scan.mode, ScanMode::Warn);
    assert_eq!(q.scan.rules.len(), 2);
}
