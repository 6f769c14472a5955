//! Console sessions: what a browser's cookie stands for on the server.
//!
//! A login makes a session with two random secrets: the session id (the
//! cookie's value, HttpOnly so the page's script never sees it) and the
//! CSRF token (the page reads it from `GET /ui/session` and sends it as
//! `X-CSRF-Token` on every request that changes something). The table is
//! keyed by the SHA-256 of the id, so a lookup's timing says nothing about
//! the ids it holds, and the CSRF comparison is constant-time. Sessions end
//! at logout, after [`ConsoleConfig::idle`] without a request, after
//! [`ConsoleConfig::lifetime`] whatever happens, and when the token they
//! were made with is revoked (the server checks the token on every request
//! and calls [`ConsoleSessions::end_token`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The console's bounds.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// A session unused this long ends.
    pub idle: Duration,
    /// A session ends this long after its login, used or not.
    pub lifetime: Duration,
    /// Sessions at once; a login beyond ends the oldest.
    pub max_sessions: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            idle: Duration::from_secs(30 * 60),
            lifetime: Duration::from_secs(8 * 3600),
            max_sessions: 256,
        }
    }
}

/// Who logged in, and through which listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    /// The token's name, or the owner's.
    pub name: String,
    /// The SHA-256 (hex) of the token logged in with; `None` for the owner
    /// of the unix socket.
    pub token_digest: Option<String>,
    /// Made on the unix socket (the session is good only there).
    pub unix: bool,
}

/// A session just made: what goes into the cookie, and its CSRF token.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The cookie's value (never stored: the table keeps its digest).
    pub cookie: String,
    pub csrf: String,
    /// Seconds until the session ends at the latest (the cookie's Max-Age).
    pub max_age_secs: u64,
}

/// A live session, as a request sees it.
#[derive(Debug, Clone)]
pub struct Active {
    pub login: Login,
    csrf: String,
    /// When the session ends at the latest.
    pub expires_at: SystemTime,
}

impl Active {
    /// The CSRF token (for `GET /ui/session`).
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Does `presented` (the `X-CSRF-Token` header) match, in constant time?
    pub fn csrf_matches(&self, presented: Option<&str>) -> bool {
        match presented {
            Some(p) => bool::from(p.as_bytes().ct_eq(self.csrf.as_bytes())),
            None => false,
        }
    }
}

#[derive(Debug)]
struct Entry {
    login: Login,
    csrf: String,
    created: Instant,
    last_used: Instant,
    expires_at: SystemTime,
}

/// Errors of the console sessions.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("cannot read random bytes for a console session: {0}")]
    Random(String),
}

fn random_hex() -> Result<String, ConsoleError> {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| ConsoleError::Random(e.to_string()))?;
    Ok(hex::encode(raw))
}

fn key(cookie: &str) -> [u8; 32] {
    Sha256::digest(cookie.as_bytes()).into()
}

/// The server's console sessions (in memory: a restart logs everyone out).
#[derive(Debug)]
pub struct ConsoleSessions {
    config: ConsoleConfig,
    table: Mutex<HashMap<[u8; 32], Entry>>,
}

impl Default for ConsoleSessions {
    fn default() -> Self {
        ConsoleSessions::new(ConsoleConfig::default())
    }
}

impl ConsoleSessions {
    pub fn new(config: ConsoleConfig) -> ConsoleSessions {
        ConsoleSessions {
            config,
            table: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &ConsoleConfig {
        &self.config
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        // A panic while holding the lock leaves a table that is still
        // consistent (each operation is one insert or remove).
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make a session for `login`.
    pub fn login(&self, login: Login) -> Result<Issued, ConsoleError> {
        self.login_at(login, Instant::now())
    }

    /// [`ConsoleSessions::login`] at a given instant (tests).
    pub fn login_at(&self, login: Login, now: Instant) -> Result<Issued, ConsoleError> {
        let cookie = random_hex()?;
        let csrf = random_hex()?;
        let mut table = self.table();
        table.retain(|_, e| self.alive(e, now));
        while table.len() >= self.config.max_sessions.max(1) {
            let oldest = table.iter().min_by_key(|(_, e)| e.created).map(|(k, _)| *k);
            match oldest {
                Some(k) => table.remove(&k),
                None => break,
            };
        }
        table.insert(
            key(&cookie),
            Entry {
                login,
                csrf: csrf.clone(),
                created: now,
                last_used: now,
                expires_at: SystemTime::now() + self.config.lifetime,
            },
        );
        Ok(Issued {
            cookie,
            csrf,
            max_age_secs: self.config.lifetime.as_secs(),
        })
    }

    fn alive(&self, e: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(e.created) < self.config.lifetime
            && now.saturating_duration_since(e.last_used) < self.config.idle
    }

    /// The live session this cookie value names (its idle clock starts
    /// again); an expired one is removed and answers `None`.
    pub fn check(&self, cookie: &str) -> Option<Active> {
        self.check_at(cookie, Instant::now())
    }

    /// [`ConsoleSessions::check`] at a given instant (tests).
    pub fn check_at(&self, cookie: &str, now: Instant) -> Option<Active> {
        let k = key(cookie);
        let mut table = self.table();
        let alive = self.alive(table.get(&k)?, now);
        if !alive {
            table.remove(&k);
            return None;
        }
        let e = table.get_mut(&k)?;
        e.last_used = now;
        Some(Active {
            login: e.login.clone(),
            csrf: e.csrf.clone(),
            expires_at: e.expires_at,
        })
    }

    /// End the session this cookie value names (logout).
    pub fn logout(&self, cookie: &str) {
        self.table().remove(&key(cookie));
    }

    /// End every session made with the token of this digest; returns how
    /// many ended.
    pub fn end_token(&self, token_digest: &str) -> usize {
        let mut table = self.table();
        let before = table.len();
        table.retain(|_, e| e.login.token_digest.as_deref() != Some(token_digest));
        before - table.len()
    }

    /// Sessions alive now.
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.table().values().filter(|e| self.alive(e, now)).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn token(name: &str) -> Login {
        Login {
            name: name.into(),
            token_digest: Some(format!("digest-{name}")),
            unix: false,
        }
    }

    fn small() -> ConsoleSessions {
        ConsoleSessions::new(ConsoleConfig {
            idle: Duration::from_secs(60),
            lifetime: Duration::from_secs(600),
            max_sessions: 3,
        })
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_checks_its_csrf() {
        let s = small();
        let issued = s.login(token("ci")).unwrap();
        assert_ne!(issued.cookie, issued.csrf);
        let active = s.check(&issued.cookie).unwrap();
        assert_eq!(active.login.name, "ci");
        assert!(active.csrf_matches(Some(&issued.csrf)));
        assert!(!active.csrf_matches(None));
        assert!(!active.csrf_matches(Some("")));
        assert!(!active.csrf_matches(Some(&issued.cookie)));
        assert!(
            s.check(&issued.csrf).is_none(),
            "the CSRF token is not a session id"
        );
        assert!(s.check("").is_none());
    }

    #[test]
    fn sessions_expire_when_idle_and_after_their_lifetime() {
        let s = small();
        let t0 = Instant::now();
        let idle = s.login_at(token("a"), t0).unwrap();
        assert!(s
            .check_at(&idle.cookie, t0 + Duration::from_secs(59))
            .is_some());
        // Used at 59 s: idle again from there.
        assert!(s
            .check_at(&idle.cookie, t0 + Duration::from_secs(118))
            .is_some());
        assert!(s
            .check_at(&idle.cookie, t0 + Duration::from_secs(179))
            .is_none());
        assert!(
            s.check_at(&idle.cookie, t0 + Duration::from_secs(180))
                .is_none(),
            "an expired session is gone for good"
        );
        let busy = s.login_at(token("b"), t0).unwrap();
        for i in 1..=19 {
            let t = t0 + Duration::from_secs(30 * i);
            assert!(s.check_at(&busy.cookie, t).is_some());
        }
        assert!(
            s.check_at(&busy.cookie, t0 + Duration::from_secs(600))
                .is_none(),
            "a session in use still ends at its lifetime"
        );
    }

    #[test]
    fn logout_and_revocation_end_sessions() {
        let s = small();
        let a1 = s.login(token("a")).unwrap();
        let a2 = s.login(token("a")).unwrap();
        let b = s.login(token("b")).unwrap();
        s.logout(&a1.cookie);
        assert!(s.check(&a1.cookie).is_none());
        assert_eq!(s.end_token("digest-a"), 1);
        assert!(s.check(&a2.cookie).is_none());
        assert!(s.check(&b.cookie).is_some());
    }

    #[test]
    fn the_table_is_bounded_and_drops_the_oldest() {
        let s = small();
        let t0 = Instant::now();
        let first = s.login_at(token("a"), t0).unwrap();
        for i in 1..=3 {
            s.login_at(token("b"), t0 + Duration::from_secs(i)).unwrap();
        }
        assert_eq!(s.len(), 3);
        assert!(s
            .check_at(&first.cookie, t0 + Duration::from_secs(4))
            .is_none());
    }
}
