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

impl LimitHit {
    pub(crate) fn rule(&self) -> &'static str {
        match self {
            Self::Rate { .. } => "rate-limit",
            Self::Cap { .. } => "byte-cap",
        }
    }
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

    /// Counts `n` bytes of an admitted attempt. Errors once the byte cap or
    /// a byte rate limit is exceeded; the caller then cuts the traffic.
    pub(crate) fn charge(&self, applicable: &Applicable, n: usize) -> Result<(), LimitHit> {
        let n = n as u64;
        let before = self.total.fetch_add(n, Ordering::Relaxed);
        if let Some(max) = self.max_bytes {
            if before + n > max {
                return Err(LimitHit::Cap { max });
            }
        }
        if applicable.is_empty() {
            return Ok(());
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
            st.bytes -= n as f64;
            if st.bytes < 0.0 {
                let wait = -st.bytes / limit as f64 * b.limit.per.as_secs_f64();
                return Err(LimitHit::Rate {
                    rule: b.limit.host.to_string(),
                    retry_after: Duration::from_secs_f64(wait.max(0.001)),
                });
            }
        }
        Ok(())
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
        assert!(l.charge(&a, 60).is_ok());
        assert!(l.charge(&a, 60).is_err());
        assert!(l.admit("a.example.com", 80).is_err());
        let other = l.admit("x.test", 80).unwrap();
        assert!(l.charge(&other, 800).is_ok());
        assert_eq!(l.charge(&other, 100), Err(LimitHit::Cap { max: 1000 }));
        assert_eq!(l.admit("x.test", 80), Err(LimitHit::Cap { max: 1000 }));
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
