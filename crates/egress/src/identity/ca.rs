//! The per-run certificate authority: generated in memory when the
//! [`super::Identity`] is built, never written anywhere. Leaf certificates
//! for intercepted hosts are signed on demand and cached; they all share
//! one leaf key (generated with the CA), so a new host costs one signature.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints, PublicKeyData,
    SerialNumber, SignatureAlgorithm,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::error::EgressError;
use crate::rules::HostRule;

/// How long the CA and its leaves are valid (from an hour ago, to allow
/// for clock skew). A run that outlives it needs a new identity.
const VALIDITY: Duration = Duration::from_secs(30 * 24 * 3600);
const BACKDATE: Duration = Duration::from_secs(3600);

/// The leaf key's public half, as rcgen needs it to sign leaves.
struct LeafPublic {
    der: Vec<u8>,
    alg: &'static SignatureAlgorithm,
}

impl PublicKeyData for LeafPublic {
    fn der_bytes(&self) -> &[u8] {
        &self.der
    }
    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.alg
    }
}

pub(crate) struct CertAuthority {
    issuer: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
    ca_pem: String,
    leaf_public: LeafPublic,
    leaf_key: Arc<dyn rustls::sign::SigningKey>,
    provider: Arc<CryptoProvider>,
    cache: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAuthority")
            .field("ca_cert_pem", &self.ca_pem)
            .finish_non_exhaustive()
    }
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> EgressError {
    EgressError::Identity(format!("{what}: {e}"))
}

impl CertAuthority {
    /// A fresh CA whose certificate may only vouch for the names the
    /// bindings cover (X.509 name constraints on DNS names).
    pub(crate) fn new(
        provider: Arc<CryptoProvider>,
        hosts: &[&HostRule],
    ) -> Result<Self, EgressError> {
        let now = time::OffsetDateTime::now_utc();
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "cordon per-run CA");
        dn.push(DnType::OrganizationName, "cordon");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = now - BACKDATE;
        params.not_after = now + VALIDITY;
        params.serial_number = Some(random_serial(&provider)?);
        let mut permitted: Vec<GeneralSubtree> = Vec::new();
        let mut only_names = true;
        for h in hosts {
            // The host of an exact rule, or the domain of a wildcard: a DNS
            // name constraint covers the name and every name below it.
            let name = h.host();
            if name.parse::<IpAddr>().is_ok() {
                only_names = false;
            } else if !permitted
                .iter()
                .any(|p| matches!(p, GeneralSubtree::DnsName(n) if n == name))
            {
                permitted.push(GeneralSubtree::DnsName(name.to_string()));
            }
        }
        // With an IP address among the hosts the constraints would have to
        // list IP ranges too; leave them off in that (rare) case.
        if only_names && !permitted.is_empty() {
            params.name_constraints = Some(NameConstraints {
                permitted_subtrees: permitted,
                excluded_subtrees: Vec::new(),
            });
        }
        let ca_key = KeyPair::generate().map_err(|e| tls_err("generating the CA key", e))?;
        let ca_cert = params
            .self_signed(&ca_key)
            .map_err(|e| tls_err("signing the CA certificate", e))?;
        let ca_pem = ca_cert.pem();
        let ca_der = ca_cert.der().clone();
        let issuer = Issuer::new(params, ca_key);

        let leaf = KeyPair::generate().map_err(|e| tls_err("generating the leaf key", e))?;
        let leaf_public = LeafPublic {
            der: leaf.public_key_raw().to_vec(),
            alg: leaf.algorithm(),
        };
        // rustls takes the DER by value and drops it after parsing.
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.serialize_der()));
        drop(leaf);
        let leaf_key = provider
            .key_provider
            .load_private_key(key_der)
            .map_err(|e| tls_err("loading the leaf key", e))?;
        Ok(Self {
            issuer,
            ca_der,
            ca_pem,
            leaf_public,
            leaf_key,
            provider,
            cache: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub(crate) fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// The TLS server configuration presented to the sandbox for `host`
    /// (leaf signed on first use, then cached). ALPN: `http/1.1` only.
    pub(crate) fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, EgressError> {
        if let Ok(cache) = self.cache.lock() {
            if let Some(c) = cache.get(host) {
                return Ok(c.clone());
            }
        }
        let leaf = self.sign_leaf(host)?;
        let certified = Arc::new(CertifiedKey::new(
            vec![leaf, self.ca_der.clone()],
            self.leaf_key.clone(),
        ));
        let mut cfg = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err("TLS server configuration", e))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OneCert(certified)));
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(host.to_string(), cfg.clone());
        }
        Ok(cfg)
    }

    fn sign_leaf(&self, host: &str) -> Result<CertificateDer<'static>, EgressError> {
        let now = time::OffsetDateTime::now_utc();
        let mut params = CertificateParams::new(vec![host.to_string()])
            .map_err(|e| tls_err("leaf certificate name", e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = now - BACKDATE;
        params.not_after = now + VALIDITY - Duration::from_secs(60);
        params.serial_number = Some(random_serial(&self.provider)?);
        let cert = params
            .signed_by(&self.leaf_public, &self.issuer)
            .map_err(|e| tls_err("signing a leaf certificate", e))?;
        Ok(cert.der().clone())
    }
}

fn random_serial(provider: &CryptoProvider) -> Result<SerialNumber, EgressError> {
    let mut b = [0u8; 16];
    provider
        .secure_random
        .fill(&mut b)
        .map_err(|_| tls_err("random serial number", "no system randomness"))?;
    b[0] &= 0x7f;
    b[0] |= 0x01;
    Ok(SerialNumber::from_slice(&b))
}

/// Presents one certificate chain whatever the ClientHello says (the proxy
/// has already checked that its SNI names the host).
#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}
