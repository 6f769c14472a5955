//! Serving a sandbox's egress: the profile's `[network]` rules become the
//! proxy's configuration; events go to a JSON-lines log (`--net-log`) as
//! they happen and are kept for the report.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cordon_egress::{
    EgressConfig, EgressEvent, EventSink, OverrideAddr, ProxyHandle, RateLimit, Unlisted,
};
use cordon_policy::{OnUnlisted, Profile};

use crate::PlanError;

/// Events kept for the report, and the live `--net-log` file.
#[derive(Debug, Default)]
pub struct Recorder {
    events: Mutex<Vec<EgressEvent>>,
    log: Option<Mutex<std::fs::File>>,
}

impl EventSink for Recorder {
    fn record(&self, event: EgressEvent) {
        if let Some(log) = &self.log {
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "{}", event.to_json_line());
            }
        }
        if let Ok(mut v) = self.events.lock() {
            v.push(event);
        }
    }
}

impl Recorder {
    /// A recorder that also writes each event, as one JSON line, to
    /// `net_log` (created or truncated now).
    pub fn new(net_log: Option<&Path>) -> Result<Recorder, PlanError> {
        let log = match net_log {
            Some(p) => Some(Mutex::new(std::fs::File::create(p).map_err(|source| {
                PlanError::NetLog {
                    path: p.to_path_buf(),
                    source,
                }
            })?)),
            None => None,
        };
        Ok(Recorder {
            events: Mutex::new(Vec::new()),
            log,
        })
    }

    /// Every event so far, in the order the attempts started. Events are
    /// recorded when an attempt ends, so a long tunnel opened first is
    /// recorded after a short request that came later; the report and the
    /// audit store list attempts as the workload made them.
    pub fn events(&self) -> Vec<EgressEvent> {
        let mut events = self.events.lock().map(|v| v.clone()).unwrap_or_default();
        events.sort_by_key(|e| e.time);
        events
    }
}

/// Parse `--resolve HOST[:PORT]=ADDR`.
pub fn parse_resolve(text: &str) -> Result<(String, OverrideAddr), String> {
    let (host, addr) = text.split_once('=').ok_or_else(|| {
        format!("'{text}' is not HOST[:PORT]=ADDRESS (e.g. pypi.org:443=127.0.0.1:8443)")
    })?;
    let addr: OverrideAddr = addr.parse()?;
    Ok((host.to_ascii_lowercase(), addr))
}

/// The proxy configuration for a profile. The profile's host patterns are
/// the proxy's rules (one type, parsed once when the profile was loaded).
/// `sandbox_id` names the sandbox in every event; `resolve` are operator
/// overrides of DNS for the proxy only (see [`parse_resolve`]).
pub fn config(
    profile: &Profile,
    sandbox_id: &str,
    resolve: &[(String, OverrideAddr)],
) -> EgressConfig {
    let n = &profile.network;
    let mut overrides: HashMap<String, Vec<OverrideAddr>> = HashMap::new();
    for (host, addr) in resolve {
        overrides.entry(host.clone()).or_default().push(*addr);
    }
    EgressConfig {
        sandbox_id: sandbox_id.to_owned(),
        allow: n.allow.clone(),
        deny: n.deny.clone(),
        https_only: n.https_only,
        methods: n
            .methods
            .iter()
            .map(|m| m.to_string().to_ascii_uppercase())
            .collect(),
        allow_private: n.allow_private,
        allow_missing_sni: n.allow_missing_sni,
        on_unlisted: match n.on_unlisted {
            OnUnlisted::Deny => Unlisted::Deny,
            // Without an approver (`cordon run` has nobody to ask) the
            // default one refuses with a message that says how to allow
            // the host.
            OnUnlisted::Ask => Unlisted::Ask,
        },
        max_bytes: (n.max_bytes.0 > 0).then_some(n.max_bytes.0),
        rate_limits: n
            .rate_limit
            .iter()
            .map(|r| RateLimit {
                host: r.host.clone(),
                requests: r.requests,
                bytes: r.bytes.map(|b| b.0),
                per: r.per.as_duration(),
            })
            .collect(),
        resolve_overrides: overrides,
    }
}

/// Start the proxy on the listener the sandbox handed over; with an
/// identity, TLS to hosts with a bound secret is intercepted; with an
/// approver, it decides hosts the rules leave unlisted (`on_unlisted =
/// "ask"`).
pub fn start(
    config: EgressConfig,
    listener: std::net::TcpListener,
    recorder: Arc<Recorder>,
    identity: Option<cordon_egress::Identity>,
    approver: Option<Arc<dyn cordon_egress::Approver>>,
) -> Result<ProxyHandle, PlanError> {
    let mut egress = cordon_egress::Egress::new(config)
        .map_err(PlanError::Proxy)?
        .with_sink(recorder);
    if let Some(a) = approver {
        egress = egress.with_approver(a);
    }
    if let Some(id) = identity {
        egress = egress.with_tls_interceptor(Arc::new(id));
    }
    egress.spawn(listener).map_err(PlanError::Proxy)
}
