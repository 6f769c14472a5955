//! The warm pool: sandboxes built ahead of time from a base spec, each
//! claimed by exactly one session and destroyed with it.
//!
//! What a request may change at claim time: its declared paths (attached
//! into the built root), memory and process limits (the cgroup), the rest
//! of the limits (rlimits, set per exec), the environment and working
//! directory (per exec), and the egress rules and secrets' placeholders
//! (the proxy runs outside the sandbox). Everything else was fixed when
//! the sandbox was built (network mode, scratch sizes, hostname, kernel
//! budgets, overlay files such as a secret's CA bundle): a request that
//! differs there is built fresh, a miss.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::Parts;

/// How the pool is kept.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The shape pooled sandboxes are built from.
    pub base: cordon_jail::Spec,
    /// How many are kept ready (the most, when `auto`).
    pub size: usize,
    /// Size the pool from the claim rate: enough to cover the claims that
    /// arrive while one sandbox is built, twice over, at least one.
    pub auto: bool,
}

/// A pool's counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PoolStats {
    pub enabled: bool,
    pub ready: usize,
    pub target: usize,
    pub hits: u64,
    pub misses: u64,
    /// Pooled sandboxes thrown away because their init had died.
    pub discarded: u64,
}

impl PoolStats {
    /// Several pools' counters added up.
    pub fn sum(all: Vec<PoolStats>) -> PoolStats {
        all.into_iter()
            .fold(PoolStats::default(), |a, b| PoolStats {
                enabled: a.enabled || b.enabled,
                ready: a.ready + b.ready,
                target: a.target + b.target,
                hits: a.hits + b.hits,
                misses: a.misses + b.misses,
                discarded: a.discarded + b.discarded,
            })
    }
}

#[derive(Debug)]
pub(crate) struct Pool {
    config: PoolConfig,
    /// The base spec without what a claim can give (see [`shape`]),
    /// computed once rather than on every claim.
    base_shape: Option<serde_json::Value>,
    ready: Mutex<VecDeque<Parts>>,
    hits: AtomicU64,
    misses: AtomicU64,
    discarded: AtomicU64,
    claimed: tokio::sync::Notify,
    /// Work of the sessions (an exec started, a session ended): a refill
    /// waiting for a pause starts over.
    active: std::sync::Arc<tokio::sync::Notify>,
    /// When recent claims happened (for `auto`).
    claims: Mutex<VecDeque<Instant>>,
    /// Mean build time in microseconds (for `auto`).
    build_us: AtomicU64,
}

/// A pause in claims long enough to build in.
const QUIET: Duration = Duration::from_millis(5);

/// The longest a refill waits for a pause while sandboxes are ready.
const QUIET_MAX: Duration = Duration::from_millis(250);

/// The window the claim rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(10);

impl Pool {
    pub(crate) fn new(config: PoolConfig, active: std::sync::Arc<tokio::sync::Notify>) -> Pool {
        Pool {
            base_shape: shape(&config.base),
            config,
            ready: Mutex::new(VecDeque::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            discarded: AtomicU64::new(0),
            claimed: tokio::sync::Notify::new(),
            active,
            claims: Mutex::new(VecDeque::new()),
            build_us: AtomicU64::new(10_000),
        }
    }

    pub(crate) fn base_spec(&self) -> cordon_jail::Spec {
        self.config.base.clone()
    }

    /// How many should be ready now.
    fn target(&self) -> usize {
        let config = &self.config;
        if !config.auto {
            return config.size;
        }
        let now = Instant::now();
        let recent = self.claims.lock().map_or(0, |mut c| {
            while c
                .front()
                .is_some_and(|t| now.duration_since(*t) > RATE_WINDOW)
            {
                c.pop_front();
            }
            c.len()
        });
        let per_second = recent as f64 / RATE_WINDOW.as_secs_f64();
        let build = self.build_us.load(Ordering::Relaxed) as f64 / 1e6;
        let wanted = (per_second * build * 2.0).ceil() as usize + 1;
        wanted.clamp(1, config.size)
    }

    pub(crate) fn short(&self) -> bool {
        self.ready.lock().map_or(0, |r| r.len()) < self.target()
    }

    /// Add a sandbox just built (it took `took`).
    pub(crate) fn put(&self, parts: Parts, took: Duration) {
        let us = took.as_micros() as u64;
        let old = self.build_us.load(Ordering::Relaxed);
        self.build_us.store((old * 7 + us) / 8, Ordering::Relaxed);
        if let Ok(mut ready) = self.ready.lock() {
            ready.push_back(parts);
        }
    }

    /// Whether a request for `spec` can be served by this pool.
    pub(crate) fn fits(&self, spec: &cordon_jail::Spec) -> bool {
        fits_shape(self.base_shape.as_ref(), spec)
    }

    /// A create no pool could serve.
    pub(crate) fn count_miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    /// A ready sandbox (the caller checked [`Pool::fits`]). Sandboxes
    /// whose init died are handed back in `dead` for disposal.
    pub(crate) fn take(&self, dead: &mut Vec<Parts>) -> Option<Parts> {
        if let Ok(mut c) = self.claims.lock() {
            c.push_back(Instant::now());
        }
        let mut found = None;
        if let Ok(mut ready) = self.ready.lock() {
            while let Some(parts) = ready.pop_front() {
                if exited(&parts) {
                    self.discarded.fetch_add(1, Ordering::Relaxed);
                    dead.push(parts);
                } else {
                    found = Some(parts);
                    break;
                }
            }
        }
        match found {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        self.claimed.notify_one();
        found
    }

    /// Resolves after the next claim (time to refill).
    pub(crate) async fn wait_for_claim(&self) {
        tokio::select! {
            _ = self.claimed.notified() => {}
            // The target of an `auto` pool falls as claims age.
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }

    /// Before a refill: while sandboxes are still ready, wait until claims,
    /// execs and teardowns pause for [`QUIET`] (at most [`QUIET_MAX`]), so
    /// that a build does not compete for the CPU with the sessions just
    /// claimed and their work; with none ready, go at once.
    pub(crate) async fn wait_for_quiet(&self) {
        let deadline = tokio::time::Instant::now() + QUIET_MAX;
        while self.ready.lock().map_or(0, |r| r.len()) > 0 {
            tokio::select! {
                _ = self.claimed.notified() => {}
                _ = self.active.notified() => {}
                _ = tokio::time::sleep(QUIET) => return,
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
        }
    }

    pub(crate) fn drain(&self) -> Vec<Parts> {
        self.ready
            .lock()
            .map(|mut r| r.drain(..).collect())
            .unwrap_or_default()
    }

    pub(crate) fn stats(&self) -> PoolStats {
        PoolStats {
            enabled: true,
            ready: self.ready.lock().map_or(0, |r| r.len()),
            target: self.target(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            discarded: self.discarded.load(Ordering::Relaxed),
        }
    }
}

/// Whether the init of a pooled sandbox has exited.
fn exited(parts: &Parts) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &parts.pidfd,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    !matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(0))
}

/// Whether `spec` differs from `base` only in what a claim can give.
#[cfg(test)]
pub(crate) fn same_shape(base: &cordon_jail::Spec, spec: &cordon_jail::Spec) -> bool {
    fits_shape(shape(base).as_ref(), spec)
}

/// Whether `spec` has the pool's shape (`base_shape`, see [`shape`]). A
/// spec whose sandbox is built around it (staged paths, an observed run)
/// never does.
fn fits_shape(base_shape: Option<&serde_json::Value>, spec: &cordon_jail::Spec) -> bool {
    if !spec.staged.is_empty() || spec.observe {
        return false;
    }
    base_shape.is_some_and(|base| shape(spec).as_ref() == Some(base))
}

/// A spec without what a claim can give: every field left counts.
fn shape(spec: &cordon_jail::Spec) -> Option<serde_json::Value> {
    let mut s = spec.clone();
    s.argv.clear();
    s.env.clear();
    s.cwd = "/".into();
    s.binds.clear();
    s.files.clear();
    let kernel = s.limits.kernel;
    s.limits = cordon_jail::Limits {
        kernel,
        ..cordon_jail::Limits::default()
    };
    serde_json::to_value(&s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_fields_keep_the_shape_and_built_ones_do_not() {
        let base = cordon_jail::Spec::new(Vec::new(), "/tmp".into());
        let mut late = base.clone();
        late.binds.push(cordon_jail::Bind {
            path: "/srv".into(),
            writable: true,
        });
        late.env.push(("K".into(), "V".into()));
        late.limits.memory = Some(1 << 30);
        late.limits.pids = Some(7);
        late.cwd = "/srv".into();
        assert!(same_shape(&base, &late));

        let mut net = base.clone();
        net.network = cordon_jail::NetworkMode::Proxy;
        assert!(!same_shape(&base, &net), "the network mode is built in");
        let mut tmp = base.clone();
        tmp.tmp_size *= 2;
        assert!(!same_shape(&base, &tmp), "scratch sizes are built in");
        let mut files = base.clone();
        files.files.push(cordon_jail::FileOverlay {
            path: "/etc/ssl/certs/ca-certificates.crt".into(),
            contents: b"x".to_vec(),
        });
        assert!(
            same_shape(&base, &files),
            "overlay files are placed at claim time"
        );
        let mut staged = base.clone();
        staged.staged.push(cordon_jail::StagedBind {
            lower: "/srv".into(),
            upper: "/u".into(),
            work: "/w".into(),
            mode: Default::default(),
        });
        assert!(!same_shape(&base, &staged), "staged paths are built in");
    }
}
