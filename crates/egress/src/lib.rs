//! cordon-egress: the only way out of a sandbox.
//!
//! An HTTP/1.1 forward proxy (absolute-form requests and CONNECT) and a
//! SOCKS5 server (no-auth, CONNECT only) on one port: the first byte of a
//! connection decides (0x05 is SOCKS5). Every attempt is decided against the
//! sandbox's rules before any name is resolved; names are then resolved on
//! the host side and refused when any address is private, loopback,
//! link-local, multicast, reserved or a cloud metadata address (unless
//! `allow_private`), also when an IPv6 address carries such an IPv4
//! address, the host network's own NAT64 prefix included; the checked
//! address is the one connected to. Tunnels to port 443 (to every port
//! under `https_only`) must start with a TLS ClientHello whose SNI names
//! the requested host; on any tunnel, every ClientHello the sandbox sends,
//! first or after a plaintext start (STARTTLS), must name it. Each attempt produces
//! exactly one [`EgressEvent`], with secrets in URLs redacted.
//!
//! ```no_run
//! use std::sync::Arc;
//! use cordon_egress::{Egress, EgressConfig, HostRule};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = EgressConfig {
//!     sandbox_id: "sb-1".into(),
//!     allow: vec![HostRule::parse("pypi.org")?, HostRule::parse("*.pythonhosted.org")?],
//!     ..Default::default()
//! };
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let proxy = Egress::new(config)?
//!     .with_sink(Arc::new(|ev: cordon_egress::EgressEvent| println!("{}", ev.to_json_line())))
//!     .spawn(listener)?;
//! // ... run the sandbox with HTTP_PROXY=http://<proxy.local_addr()> ...
//! let totals = proxy.shutdown();
//! # let _ = totals; Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod addr;
mod config;
mod error;
mod event;
pub mod http1;
mod identity;
pub mod late_tls;
mod limits;
mod live;
mod nat64;
mod proxy;
mod rules;
pub mod sni;
mod splice;
mod stream;

use std::future::Future;
use std::sync::Arc;

pub use addr::{classify as classify_address, classify_on_network, AddrClass, Translated};
pub use config::{EgressConfig, OverrideAddr, RateLimit, Unlisted};
pub use error::{EgressError, RuleError};
pub use event::{
    is_secret_header, redact_header, redact_url, ChannelSink, Decision, EgressEvent, EventSink,
    NullSink, Protocol, REDACTED,
};
pub use identity::{Identity, InjectWhere, SecretBinding};
pub use live::LiveGrants;
pub use nat64::Nat64Prefix;
pub use proxy::{
    Approver, BoxFuture, DenyApprover, Egress, EgressSummary, EventWriter, InterceptedTunnel,
    LimitRefusal, PlainHttpWatch, ProxyHandle, RequestGate, Ruling, SecretNote, TlsInterceptor,
};
pub use rules::{normalize_host, HostPattern, HostRule};
pub use stream::{Metered, TunnelStream};

/// Starts a proxy for `config` on `listener` on its own thread; events go
/// to `sink`. See [`Egress`] for the approver and interceptor hooks.
pub fn spawn(
    config: EgressConfig,
    listener: std::net::TcpListener,
    sink: Arc<dyn EventSink>,
) -> Result<ProxyHandle, EgressError> {
    Egress::new(config)?.with_sink(sink).spawn(listener)
}

/// Serves `listener` on the current tokio runtime until `shutdown`
/// completes; returns the totals.
pub async fn serve(
    config: EgressConfig,
    listener: tokio::net::TcpListener,
    sink: Arc<dyn EventSink>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<EgressSummary, EgressError> {
    Ok(Egress::new(config)?
        .with_sink(sink)
        .serve(listener, shutdown)
        .await)
}
