//! Hosts granted while a sandbox runs: a rule set its operator widens and
//! narrows without restarting the proxy.
//!
//! The proxy consults the grants for every attempt the static rules do not
//! allow (deny rules still win: a grant never lifts one). A connection that
//! a grant let through is remembered under that grant; revoking the grant
//! cuts every such connection that is still open (tunnels and keep-alive
//! connections alike), so nothing the grant opened outlives it.

use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use crate::rules::HostRule;

/// The per-connection signal that ends it (see [`LiveGrants::revoke`]).
#[derive(Debug, Default)]
pub(crate) struct Cut(Notify);

impl Cut {
    /// Resolves once the connection is to be cut.
    pub(crate) async fn wait(&self) {
        self.0.notified().await;
    }

    fn fire(&self) {
        // `notify_one` keeps a permit when nobody waits yet, so a cut
        // between the decision and the wait is not lost.
        self.0.notify_one();
    }
}

tokio::task_local! {
    /// The connection being served by this task, for [`LiveGrants::admit`].
    pub(crate) static CONNECTION: Arc<Cut>;
}

#[derive(Debug)]
struct Entry {
    id: String,
    rule: HostRule,
    /// Connections this grant admitted (dead ones pruned on the way).
    connections: Vec<Weak<Cut>>,
}

/// A live, shared set of granted hosts. Cheap to clone; every clone is the
/// same set. Give one to [`crate::Egress::with_live_grants`] and change it
/// from anywhere while the proxy runs: a grant applies to the next
/// attempt.
#[derive(Debug, Clone, Default)]
pub struct LiveGrants {
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl LiveGrants {
    pub fn new() -> LiveGrants {
        LiveGrants::default()
    }

    /// Allow `rule` under the name `id` (a second grant with the same id
    /// replaces the first, cutting what the first admitted).
    pub fn grant(&self, id: &str, rule: HostRule) {
        self.revoke(id);
        if let Ok(mut entries) = self.entries.lock() {
            entries.push(Entry {
                id: id.to_owned(),
                rule,
                connections: Vec::new(),
            });
        }
    }

    /// Withdraw grant `id` and cut every open connection it admitted.
    /// Returns how many were cut (`None`: no such grant).
    pub fn revoke(&self, id: &str) -> Option<usize> {
        let removed = {
            let mut entries = self.entries.lock().ok()?;
            let at = entries.iter().position(|e| e.id == id)?;
            entries.remove(at)
        };
        let live: Vec<Arc<Cut>> = removed
            .connections
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for cut in &live {
            cut.fire();
        }
        Some(live.len())
    }

    /// The grants in force: (id, rule).
    pub fn list(&self) -> Vec<(String, HostRule)> {
        self.entries
            .lock()
            .map(|e| e.iter().map(|e| (e.id.clone(), e.rule.clone())).collect())
            .unwrap_or_default()
    }

    /// How many connections admitted by grant `id` are open now.
    pub fn open_connections(&self, id: &str) -> usize {
        self.entries
            .lock()
            .ok()
            .and_then(|e| {
                e.iter().find(|e| e.id == id).map(|e| {
                    e.connections
                        .iter()
                        .filter(|c| c.strong_count() > 0)
                        .count()
                })
            })
            .unwrap_or(0)
    }

    /// The grant that allows `host:port`, if any; the connection being
    /// served (when there is one) is remembered under it.
    pub(crate) fn admit(&self, host: &str, port: u16) -> Option<String> {
        let mut entries = self.entries.lock().ok()?;
        let entry = entries.iter_mut().find(|e| e.rule.matches(host, port))?;
        entry.connections.retain(|c| c.strong_count() > 0);
        if let Ok(cut) = CONNECTION.try_with(Arc::downgrade) {
            entry.connections.push(cut);
        }
        Some(entry.id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_admit_revoke() {
        let g = LiveGrants::new();
        assert_eq!(g.admit("a.test", 443), None);
        g.grant("g1", HostRule::parse("a.test:443").unwrap());
        assert_eq!(g.admit("a.test", 443).as_deref(), Some("g1"));
        assert_eq!(g.admit("a.test", 80), None, "the port is part of the grant");
        assert_eq!(g.list().len(), 1);
        assert_eq!(g.revoke("g1"), Some(0));
        assert_eq!(g.admit("a.test", 443), None);
        assert_eq!(g.revoke("g1"), None);
    }

    #[tokio::test]
    async fn revoke_fires_the_connections_it_admitted() {
        let g = LiveGrants::new();
        g.grant("g1", HostRule::parse("a.test:443").unwrap());
        let cut = Arc::new(Cut::default());
        let admitted = CONNECTION
            .scope(cut.clone(), async { g.admit("a.test", 443) })
            .await;
        assert_eq!(admitted.as_deref(), Some("g1"));
        assert_eq!(g.open_connections("g1"), 1);
        assert_eq!(g.revoke("g1"), Some(1));
        // The permit is kept: the wait returns at once.
        tokio::time::timeout(std::time::Duration::from_secs(1), cut.wait())
            .await
            .unwrap();
    }
}
