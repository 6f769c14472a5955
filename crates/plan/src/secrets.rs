//! Secrets on the host side: where each real value comes from, the
//! placeholder the sandbox sees instead, and the CA bundle that lets the
//! sandbox's TLS clients trust cordon's per-run certificate authority.
//!
//! Real values live only in this process's memory (zeroized on drop); they
//! never enter the sandbox, the report, the audit store or a log.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon_policy::{Secret, SecretSource};
use zeroize::Zeroizing;

use crate::PlanError;

/// A secret ready for the proxy.
pub struct Resolved {
    pub name: String,
    pub placeholder: String,
    pub value: Zeroizing<String>,
    pub policy: Secret,
    pub expires_at: Option<Instant>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("value", &"[REDACTED]")
            .finish()
    }
}

/// How long a secret command may take to print its value.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Shortest value accepted: a short value would be scrubbed from unrelated
/// text everywhere it happens to occur.
const MIN_VALUE_CHARS: usize = 8;
/// Largest value read from a file or a command.
const MAX_VALUE: u64 = 64 * 1024;

/// A placeholder that is random per run and useless anywhere else.
fn placeholder(name: &str) -> Result<String, PlanError> {
    cordon_egress::Identity::new_placeholder(name)
        .map_err(|e| PlanError::secret(name, e.to_string()))
}

fn read_value(source: &SecretSource, name: &str) -> Result<Zeroizing<String>, PlanError> {
    let mut value = Zeroizing::new(String::new());
    match source {
        SecretSource::Env(var) => {
            *value = std::env::var(var).map_err(|_| {
                PlanError::secret(name, format!("the host environment variable {var} is not set (export it before running cordon)"))
            })?;
        }
        SecretSource::File(path) => {
            let path = expand_home(path);
            let file = std::fs::File::open(&path).map_err(|e| {
                PlanError::secret_io(name, format!("cannot read {}", path.display()), e)
            })?;
            file.take(MAX_VALUE)
                .read_to_string(&mut value)
                .map_err(|e| {
                    PlanError::secret_io(name, format!("{} is not text", path.display()), e)
                })?;
        }
        SecretSource::Command(argv) => {
            let (program, args) = argv
                .split_first()
                .ok_or_else(|| PlanError::secret(name, "the command is empty"))?;
            let mut child = Command::new(program)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| PlanError::secret_io(name, format!("cannot run {program}"), e))?;
            let mut out = child
                .stdout
                .take()
                .ok_or_else(|| PlanError::secret(name, "no stdout"))?;
            let deadline = Instant::now() + COMMAND_TIMEOUT;
            let reader = std::thread::spawn(move || {
                let mut text = Zeroizing::new(String::new());
                let r = (&mut out).take(MAX_VALUE).read_to_string(&mut text);
                r.map(|_| text)
            });
            loop {
                let waited = child.try_wait().map_err(|e| {
                    PlanError::secret_io(name, format!("cannot wait for {program}"), e)
                })?;
                if let Some(status) = waited {
                    if !status.success() {
                        return Err(PlanError::secret(
                            name,
                            format!("{program} failed ({status})"),
                        ));
                    }
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(PlanError::secret(
                        name,
                        format!(
                            "{program} did not finish within {}s",
                            COMMAND_TIMEOUT.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            value = reader
                .join()
                .map_err(|_| PlanError::secret(name, "reading the command's output failed"))?
                .map_err(|e| {
                    PlanError::secret_io(name, format!("{program} did not print text"), e)
                })?;
        }
    }
    // One trailing newline is how files and commands end their output.
    while value.ends_with('\n') || value.ends_with('\r') {
        value.pop();
    }
    if value.chars().count() < MIN_VALUE_CHARS {
        return Err(PlanError::secret(
            name,
            format!("the value is shorter than {MIN_VALUE_CHARS} characters; cordon refuses it, because it replaces a secret's value wherever it appears in responses and stored output"),
        ));
    }
    Ok(value)
}

fn expand_home(path: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) => std::env::var_os("HOME")
            .map_or_else(|| path.to_path_buf(), |h| PathBuf::from(h).join(rest)),
        Err(_) => path.to_path_buf(),
    }
}

/// Read every secret's value (running commands that mint tokens now) and
/// make its placeholder.
pub fn resolve(secrets: &[Secret]) -> Result<Vec<Resolved>, PlanError> {
    secrets
        .iter()
        .map(|s| {
            let value = read_value(&s.from, &s.name)?;
            Ok(Resolved {
                name: s.name.clone(),
                placeholder: placeholder(&s.name)?,
                value,
                policy: s.clone(),
                expires_at: s.ttl.map(|t| Instant::now() + t.as_duration()),
            })
        })
        .collect()
}

/// The system CA bundles, in the order distributions use them.
const BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// The sandbox's CA bundle: the host's bundle plus the per-run CA, placed
/// over the host bundle's path inside; and the variables that point
/// clients at it.
pub fn ca_bundle_overlay(ca_pem: &str) -> (Vec<cordon_jail::FileOverlay>, Vec<(String, String)>) {
    let host = BUNDLES.iter().find(|p| Path::new(p).is_file());
    let path = host.copied().unwrap_or(BUNDLES[0]);
    let mut contents = host.and_then(|p| std::fs::read(p).ok()).unwrap_or_default();
    if !contents.is_empty() && !contents.ends_with(b"\n") {
        contents.push(b'\n');
    }
    contents.extend_from_slice(b"# cordon per-run certificate authority\n");
    contents.extend_from_slice(ca_pem.as_bytes());
    let files = vec![cordon_jail::FileOverlay {
        path: PathBuf::from(path),
        contents,
    }];
    let env = [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
    ]
    .iter()
    .map(|k| (k.to_string(), path.to_owned()))
    .collect();
    (files, env)
}

/// The proxy's view of the secrets: bindings with the real values, and the
/// identity that intercepts TLS for their hosts only.
pub fn identity(
    resolved: &[Resolved],
    extra_roots: Option<&[u8]>,
) -> Result<cordon_egress::Identity, PlanError> {
    let bindings = resolved
        .iter()
        .map(|r| {
            // The profile's patterns are the proxy's rules (one type).
            let hosts: Vec<cordon_egress::HostRule> = r.policy.hosts.clone();
            let inject = cordon_egress::InjectWhere {
                headers: r.policy.inject.contains(&cordon_policy::InjectAt::Header),
                query: r.policy.inject.contains(&cordon_policy::InjectAt::Query),
                body: r.policy.inject.contains(&cordon_policy::InjectAt::Body),
            };
            cordon_egress::SecretBinding {
                name: r.name.clone(),
                placeholder: r.placeholder.clone(),
                value: r.value.clone(),
                hosts,
                inject,
                expires_at: r.expires_at,
            }
        })
        .collect();
    cordon_egress::Identity::new(bindings, extra_roots).map_err(PlanError::Tls)
}

/// Give the sandbox its side of the secrets: the CA bundle that trusts the
/// per-sandbox authority (over the host bundle's path) and, in its
/// environment, each secret's placeholder under the secret's name and the
/// variables that point TLS clients at the bundle. Returns the identity
/// the proxy intercepts TLS with, or `None` without secrets.
/// `extra_roots`: PEM certificates the proxy also trusts upstream.
pub fn arm(
    spec: &mut cordon_jail::Spec,
    resolved: &[Resolved],
    extra_roots: Option<&[u8]>,
) -> Result<Option<cordon_egress::Identity>, PlanError> {
    if resolved.is_empty() {
        return Ok(None);
    }
    let id = identity(resolved, extra_roots)?;
    let (files, env) = ca_bundle_overlay(&id.ca_cert_pem());
    spec.files.extend(files);
    for (k, v) in env.into_iter().chain(id.placeholders()) {
        crate::spec::set_env(&mut spec.env, &k, v);
    }
    Ok(Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arming_puts_placeholders_and_the_bundle_in_the_spec() {
        std::env::set_var("CORDON_TEST_SECRET_ARM", "real-value-123");
        let r = resolve(&[secret(SecretSource::Env("CORDON_TEST_SECRET_ARM".into()))])
            .expect("resolve");
        let mut spec = cordon_jail::Spec::new(Vec::new(), PathBuf::from("/tmp"));
        assert!(arm(&mut spec, &[], None).expect("no secrets").is_none());
        assert!(spec.files.is_empty());
        let id = arm(&mut spec, &r, None).expect("arm");
        assert!(id.is_some());
        assert_eq!(spec.files.len(), 1);
        let token: Vec<&str> = spec
            .env
            .iter()
            .filter(|(k, _)| k == "TOKEN")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(token, [r[0].placeholder.as_str()]);
        assert!(spec.env.iter().all(|(_, v)| v != "real-value-123"));
        assert!(spec.env.iter().any(|(k, _)| k == "SSL_CERT_FILE"));
    }

    fn secret(from: SecretSource) -> Secret {
        let mut s = Secret::parse_flag("TOKEN@api.test").expect("flag");
        s.from = from;
        s
    }

    #[test]
    fn values_come_from_env_file_and_command_trimmed() {
        std::env::set_var("CORDON_TEST_SECRET_ENV", "from-env");
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tok");
        std::fs::write(&file, "from-file\n").expect("write");
        let r = resolve(&[
            secret(SecretSource::Env("CORDON_TEST_SECRET_ENV".into())),
            secret(SecretSource::File(file)),
            secret(SecretSource::Command(vec![
                "printf".into(),
                "from-command\\n".into(),
            ])),
        ])
        .expect("resolve");
        let values: Vec<&str> = r.iter().map(|s| s.value.as_str()).collect();
        assert_eq!(values, ["from-env", "from-file", "from-command"]);
        assert_ne!(r[0].placeholder, r[1].placeholder);
        assert!(r[0].placeholder.contains("token"), "{}", r[0].placeholder);
        assert!(
            !format!("{:?}", r[0]).contains("from-env"),
            "Debug leaks the value"
        );
    }

    #[test]
    fn missing_and_failing_sources_say_what_to_do() {
        let e = resolve(&[secret(SecretSource::Env("CORDON_SURELY_UNSET_VAR".into()))])
            .expect_err("unset");
        assert!(e.to_string().contains("export it"), "{e}");
        let e = resolve(&[secret(SecretSource::Command(vec!["false".into()]))]).expect_err("fails");
        assert!(e.to_string().contains("failed"), "{e}");
    }

    #[test]
    fn bundle_overlay_appends_the_ca() {
        let (files, env) =
            ca_bundle_overlay("-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n");
        assert_eq!(files.len(), 1);
        let text = String::from_utf8_lossy(&files[0].contents);
        assert!(text.ends_with("-----END CERTIFICATE-----\n"));
        assert!(env
            .iter()
            .any(|(k, v)| k == "SSL_CERT_FILE" && Path::new(v) == files[0].path));
    }
}
