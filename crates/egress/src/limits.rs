//! Rate limits (token buckets) and the total byte cap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::RateLimit;

/// Which limit stopped traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LimitHit {
    /// A rate limit: the rule and when a request would fit again.
    Rate { rule: String, retry_after: Duration },
    /// The total byte cap.
    Cap { max: u64 },
}

#[derive(Debug)]
struct BucketState {
    requests: f64,
    bytes: f64,
    last: Instant,
}

#[derive(Debug)]
struct Bucket {
    limit: RateLimit,
    state: Mutex<BucketState>,
}

impl Bucket {
    fn refill(&self, st: &mut BucketState, now: Instant) {
        let per = self.limit.per.as_secs_f64();
        let frac = now.saturating_duration_since(st.last).as_secs_f64() / per;
        st.last = now;
        if let Some(r) = self.limit.requests {
            st.requests = (st.requests + frac * r as f64).min(r as f64);
        }
        if let Some(b) = self.limit.bytes {
            st.bytes = (st.bytes + frac * b as f64).min(b as f64);
        }
    }
}

/// All limits of one proxy. Each rate-limit rule has one bucket, shared by
/// every host the rule matches.
#[derive(Debug)]
pub(crate) struct Limiter {
    buckets: Vec<Bucket>,
    total: AtomicU64,
    max_bytes: Option<u64>,
}

/// The buckets that apply to one attempt (indices into the limiter).
pub(crate) type Applicable = Vec<usize>;

impl Limiter {
    pub(crate) fn new(limits: &[RateLimit], max_bytes: Option<u64>) -> Self {
        let now = Instant::now();
        Self {
            buckets: limits
                .iter()
                .map(|l| Bucket {
                    limit: l.clone(),
                    state: Mutex::new(BucketState {
                        requests: l.requests.unwrap_or(0) as f64,
                        bytes: l.bytes.unwrap_or(0) as f64,
                        last: now,
                    }),
                })
                .collect(),
            total: AtomicU64::new(0),
            max_bytes,
        }
    }

    /// Admits one request or tunnel to `host:port`, taking a request token
    /// from every matching bucket. Nothing is taken when it is refused.
    pub(crate) fn admit(&self, host: &str, port: u16) -> Result<Applicable, LimitHit> {
        if let Some(max) = self.max_bytes {
            if self.total.load(Ordering::Relaxed) >= max {
                return Err(LimitHit::Cap { max });
            }
        }
        let applicable: Applicable = self
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.limit.host.matches(host, port))
            .map(|(i, _)| i)
            .collect();
        let now = Instant::now();
        let mut guards = Vec::with_capacity(applicable.len());
        for &i in &applicable {
            let b = &self.buckets[i];
            let mut st = match b.state.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            b.refill(&mut st, now);
            let per = b.limit.per.as_secs_f64();
            if let Some(r) = b.limit.requests {
                if st.requests < 1.0 {
                    let wait = (1.0 - st.requests) / r as f64 * per;
                    return Err(LimitHit::Rate {
                        rule: b.limit.host.to_string(),
                        retry_after: Duration::from_secs_f64(wait.max(0.001)),
                    });
                }
            }
            if let Some(bytes) = b.limit.bytes {
                if st.bytes <= 0.0 {
                    let wait = (1.0 - st.bytes) / bytes as f64 * per;
                    return Err(LimitHit::Rate {
                        rule: b.limit.host.to_string(),
                        retry_after: Duration::from_secs_f64(wait.max(0.001)),
                    });
                }
            }
            guards.push((b, st));
        }
        for (b, st) in &mut guards {
            if b.limit.requests.is_some() {
                st.requests -= 1.0;
            }
        }
        Ok(applicable)
    }

    /// Takes up to `n` bytes from the byte cap, atomically, so concurrent
    /// connections together never pass it. Returns how many were taken.
    fn take_cap(&self, n: u64) -> u64 {
        let Some(max) = self.max_bytes else {
            self.total.fetch_add(n, Ordering::Relaxed);
            return n;
        };
        let mut cur = self.total.load(Ordering::Relaxed);
        loop {
            let grant = n.min(max.saturating_sub(cur));
            match self.total.compare_exchange_weak(
                cur,
                cur + grant,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(now) => cur = now,
            }
        }
    }

    /// Gives back bytes granted but not delivered (a short write).
    pub(crate) fn refund(&self, n: usize) {
        if n > 0 {
            self.total.fetch_sub(n as u64, Ordering::Relaxed);
        }
    }

    /// Grants delivery of up to `n` bytes of an admitted attempt, before
    /// they are delivered: all of them until the byte cap, never a byte
    /// past it. Returns how many may go and, when the traffic must then be
    /// cut, why: fewer than `n` granted (the cap), or a byte rate limit
    /// overdrawn (those bytes still go; rate limits cut after the piece
    /// that exceeds them).
    pub(crate) fn grant(&self, applicable: &Applicable, n: usize) -> (usize, Option<LimitHit>) {
        let granted = self.take_cap(n as u64) as usize;
        let mut hit = None;
        if granted < n {
            hit = self.max_bytes.map(|max| LimitHit::Cap { max });
        }
        if applicable.is_empty() || granted == 0 {
            return (granted, hit);
        }
        let now = Instant::now();
        for &i in applicable {
            let b = &self.buckets[i];
            let Some(limit) = b.limit.bytes else { continue };
            let mut st = match b.state.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            b.refill(&mut st, now);
            st.bytes -= granted as f64;
            if st.bytes < 0.0 && hit.is_none() {
                let wait = -st.bytes / limit as f64 * b.limit.per.as_secs_f64();
                hit = Some(LimitHit::Rate {
                    rule: b.limit.host.to_string(),
                    retry_after: Duration::from_secs_f64(wait.max(0.001)),
                });
            }
        }
        (granted, hit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rl(requests: Option<u64>, bytes: Option<u64>) -> RateLimit {
        RateLimit {
            host: "*.example.com".parse().unwrap(),
            requests,
            bytes,
            per: Duration::from_secs(3600),
        }
    }

    #[test]
    fn request_bucket() {
        let l = Limiter::new(&[rl(Some(2), None)], None);
        assert!(l.admit("a.example.com", 443).is_ok());
        assert!(l.admit("b.example.com", 443).is_ok());
        assert!(matches!(
            l.admit("a.example.com", 443),
            Err(LimitHit::Rate { .. })
        ));
        // Other hosts are not limited.
        assert_eq!(l.admit("other.test", 443), Ok(vec![]));
    }

    #[test]
    fn byte_bucket_and_cap() {
        let l = Limiter::new(&[rl(None, Some(100))], Some(1000));
        let a = l.admit("a.example.com", 80).unwrap();
        assert_eq!(l.grant(&a, 60), (60, None));
        assert!(matches!(l.grant(&a, 60), (60, Some(LimitHit::Rate { .. }))));
        assert!(l.admit("a.example.com", 80).is_err());
        let other = l.admit("x.test", 80).unwrap();
        assert_eq!(l.grant(&other, 800), (800, None));
        // 120 + 800 used: 80 left of the cap, and not a byte more.
        assert_eq!(
            l.grant(&other, 100),
            (80, Some(LimitHit::Cap { max: 1000 }))
        );
        assert_eq!(l.grant(&other, 1), (0, Some(LimitHit::Cap { max: 1000 })));
        assert_eq!(l.admit("x.test", 80), Err(LimitHit::Cap { max: 1000 }));
        l.refund(30);
        assert_eq!(
            l.grant(&other, 100),
            (30, Some(LimitHit::Cap { max: 1000 }))
        );
    }

    #[test]
    fn concurrent_grants_never_pass_the_cap() {
        let l = std::sync::Arc::new(Limiter::new(&[], Some(100_003)));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    let mut got = 0;
                    loop {
                        let (g, hit) = l.grant(&vec![], 997);
                        got += g;
                        if hit.is_some() {
                            return got;
                        }
                    }
                })
            })
            .collect();
        let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(total, 100_003);
    }

    #[test]
    fn refills() {
        let mut r = rl(Some(1), None);
        r.per = Duration::from_millis(20);
        let l = Limiter::new(&[r], None);
        assert!(l.admit("a.example.com", 1).is_ok());
        assert!(l.admit("a.example.com", 1).is_err());
        std::thread::sleep(Duration::from_millis(30));
        assert!(l.admit("a.example.com", 1).is_ok());
    }
}
