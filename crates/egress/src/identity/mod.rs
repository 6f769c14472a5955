//! The identity layer: secrets never enter the sandbox. The sandbox holds
//! placeholders; on requests to a host a secret is bound to, the proxy
//! terminates TLS with a per-run CA and replaces the placeholder with the
//! real value. See the crate README ("Identity") for what is and is not
//! covered.

mod ca;
mod forms;
mod intercept;
mod substitute;

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use zeroize::Zeroizing;

use crate::error::EgressError;
use crate::event::REDACTED;
use crate::proxy::{BoxFuture, InterceptedTunnel, PlainHttpWatch, SecretNote, TlsInterceptor};
use crate::rules::HostRule;

use ca::CertAuthority;
use substitute::{Matcher, Outcome, Plan, ScrubSet};

/// Where in a request a secret's placeholder is replaced. Headers only by
/// default; the query string (the whole request target) and the body only
/// when enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectWhere {
    /// Header values (`Authorization: Bearer PLACEHOLDER`, custom headers).
    pub headers: bool,
    /// The request target: path and query string (the value is
    /// percent-encoded there).
    pub query: bool,
    /// The request body, streamed (see the README on Content-Length).
    pub body: bool,
}

impl Default for InjectWhere {
    fn default() -> Self {
        Self {
            headers: true,
            query: false,
            body: false,
        }
    }
}

/// One secret: its name, the placeholder the sandbox sees, the real value
/// (held only here, zeroized on drop), the hosts it may be sent to, where
/// it may be injected, and when it stops being injected.
pub struct SecretBinding {
    /// Names the secret in events (e.g. `GITHUB_TOKEN`).
    pub name: String,
    /// What the sandbox sees instead of the value; random per run, at
    /// least 16 visible ASCII characters (see [`Identity::new_placeholder`]).
    pub placeholder: String,
    /// The real value. Never in events, logs, errors or `Debug` output.
    pub value: Zeroizing<String>,
    /// Hosts (patterns as in the egress rules) the value may be sent to.
    pub hosts: Vec<HostRule>,
    pub inject: InjectWhere,
    /// After this instant the placeholder is no longer replaced (it goes
    /// out unchanged and the event says `expired`).
    pub expires_at: Option<Instant>,
}

impl SecretBinding {
    fn is_bound_to(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|r| r.matches(host, port))
    }
}

impl fmt::Debug for SecretBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretBinding")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("value", &REDACTED)
            .field("hosts", &self.hosts)
            .field("inject", &self.inject)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// The secrets of one run, the per-run CA and the upstream trust store.
/// Cheap to clone (shared). Give it to the proxy with
/// [`crate::Egress::with_tls_interceptor`].
#[derive(Clone)]
pub struct Identity {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    bindings: Vec<SecretBinding>,
    matcher: Matcher,
    /// Values (in every form) back to placeholders, for responses.
    scrub: ScrubSet,
    ca: CertAuthority,
    upstream: Arc<ClientConfig>,
    /// How many roots the upstream side trusts (for Debug / doctor).
    roots: usize,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("bindings", &self.inner.bindings)
            .field("upstream_roots", &self.inner.roots)
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Shortest placeholder accepted: short ones could occur by chance.
pub const MIN_PLACEHOLDER_LEN: usize = 16;

impl Identity {
    /// Checks the bindings, generates the per-run CA (in memory) and loads
    /// the upstream trust store: the host's native roots (webpki-roots when
    /// none can be loaded) plus `extra_upstream_roots_pem` (PEM
    /// certificates, e.g. a test's own CA). Upstream certificates are always
    /// fully verified against that store.
    pub fn new(
        bindings: Vec<SecretBinding>,
        extra_upstream_roots_pem: Option<&[u8]>,
    ) -> Result<Identity, EgressError> {
        check_bindings(&bindings)?;
        let provider = provider();
        let hosts: Vec<&HostRule> = bindings.iter().flat_map(|b| b.hosts.iter()).collect();
        let ca = CertAuthority::new(provider.clone(), &hosts)?;
        let (roots, count) = upstream_roots(extra_upstream_roots_pem)?;
        let mut upstream = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| EgressError::Identity(format!("TLS client configuration: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        let matcher = Matcher::new(&bindings)?;
        let scrub = ScrubSet::new(&bindings)?;
        Ok(Identity {
            inner: Arc::new(Inner {
                bindings,
                matcher,
                scrub,
                ca,
                upstream: Arc::new(upstream),
                roots: count,
            }),
        })
    }

    /// The per-run CA certificate (PEM), to append to the sandbox's CA
    /// bundle. Its private key never leaves this process's memory.
    pub fn ca_cert_pem(&self) -> String {
        self.inner.ca.ca_pem().to_string()
    }

    /// The per-run CA certificate (DER).
    pub fn ca_cert_der(&self) -> Vec<u8> {
        self.inner.ca.ca_der().to_vec()
    }

    /// Names, placeholders and hosts of the bindings (no values), e.g. to
    /// put the placeholders into the sandbox's environment.
    pub fn placeholders(&self) -> Vec<(String, String)> {
        self.inner
            .bindings
            .iter()
            .map(|b| (b.name.clone(), b.placeholder.clone()))
            .collect()
    }

    /// A fresh random placeholder for the secret `name`:
    /// `cordon-NAME-` followed by 32 hex digits (lower-case name, characters
    /// other than letters, digits and `_` dropped).
    pub fn new_placeholder(name: &str) -> Result<String, EgressError> {
        let mut b = [0u8; 16];
        provider().secure_random.fill(&mut b).map_err(|_| {
            EgressError::Identity("random placeholder: no system randomness".into())
        })?;
        let clean: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        Ok(format!("cordon-{clean}-{hex}"))
    }
}

fn check_bindings(bindings: &[SecretBinding]) -> Result<(), EgressError> {
    let mut names = HashSet::new();
    let mut placeholders = HashSet::new();
    for b in bindings {
        let bad = |why: &str| EgressError::Identity(format!("secret {:?}: {why}", b.name));
        if b.name.is_empty()
            || !b
                .name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"_-.".contains(&c))
        {
            return Err(bad(
                "the name must be non-empty and use letters, digits, '_', '-' or '.'",
            ));
        }
        if !names.insert(b.name.as_str()) {
            return Err(bad("the name is used by more than one binding"));
        }
        if b.placeholder.len() < MIN_PLACEHOLDER_LEN
            || !b.placeholder.bytes().all(|c| (0x21..0x7f).contains(&c))
            || b.placeholder.contains(['"', '\\', '%'])
        {
            return Err(bad(&format!(
                "the placeholder must be at least {MIN_PLACEHOLDER_LEN} visible ASCII characters without quotes, backslashes or '%' (use Identity::new_placeholder)"
            )));
        }
        if !placeholders.insert(b.placeholder.as_str()) {
            return Err(bad("the placeholder is used by another secret too"));
        }
        if b.value.is_empty() {
            return Err(bad("the value is empty"));
        }
        if b.value.bytes().any(|c| c == b'\r' || c == b'\n' || c == 0) {
            // Said without the value: it would allow header injection.
            return Err(bad(
                "the value contains a line break or NUL byte, which cannot be sent in a header",
            ));
        }
        if b.value.contains(b.placeholder.as_str()) {
            return Err(bad("the value contains its own placeholder"));
        }
        if b.hosts.is_empty() {
            return Err(bad("no hosts: bind the secret to at least one host"));
        }
    }
    Ok(())
}

/// The host's trust store (webpki-roots when none is found) plus extra PEM
/// roots. Returns the store and how many roots it holds.
fn upstream_roots(extra_pem: Option<&[u8]>) -> Result<(RootCertStore, usize), EgressError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(pem) = extra_pem {
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| {
                EgressError::Identity(format!("extra upstream roots: invalid PEM: {e}"))
            })?;
            roots.add(cert).map_err(|e| {
                EgressError::Identity(format!("extra upstream roots: unusable certificate: {e}"))
            })?;
            n += 1;
        }
        if n == 0 {
            return Err(EgressError::Identity(
                "extra upstream roots: no PEM certificate found".into(),
            ));
        }
    }
    let count = roots.len();
    Ok((roots, count))
}

impl TlsInterceptor for Identity {
    /// Only hosts with a bound secret (expired ones too, so the event can
    /// say the placeholder went out unchanged); every other tunnel stays
    /// opaque.
    fn intercepts(&self, host: &str, port: u16) -> bool {
        self.inner
            .bindings
            .iter()
            .any(|b| b.is_bound_to(host, port))
    }

    fn intercept(&self, tunnel: InterceptedTunnel) -> BoxFuture<'static, io::Result<()>> {
        Box::pin(intercept::run(self.inner.clone(), tunnel))
    }

    fn watch_plain_http(&self, host: &str, port: u16) -> Option<Box<dyn PlainHttpWatch>> {
        if self.inner.bindings.is_empty() {
            return None;
        }
        let plan = Plan::cleartext(&self.inner.bindings, host, port);
        Some(Box::new(PlainWatch {
            inner: self.inner.clone(),
            host: host.to_string(),
            plan,
            carry: Vec::new(),
            outcome: Outcome::default(),
        }))
    }
}

/// Notes placeholders in a plain-HTTP request: never injected over
/// cleartext; a bound host is told in the event, an unbound one is a leak.
struct PlainWatch {
    inner: Arc<Inner>,
    host: String,
    plan: Plan,
    carry: Vec<u8>,
    outcome: Outcome,
}

impl PlainHttpWatch for PlainWatch {
    fn scan(&mut self, bytes: &[u8]) {
        self.inner
            .matcher
            .scan(&self.plan, &mut self.carry, bytes, &mut self.outcome);
    }

    fn finish(&mut self) -> Option<SecretNote> {
        let (note, leaked) = self.outcome.note(&self.inner.bindings, &self.host);
        if note.is_empty() {
            return None;
        }
        Some(SecretNote { note, leaked })
    }
}
