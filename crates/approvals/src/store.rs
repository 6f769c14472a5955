//! The approvals store: pending approvals and grants in SQLite (so both
//! survive a restart of the server), events on a broadcast channel, and the
//! waiters of this process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use cordon_authz::Action;
use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::{broadcast, watch};

use crate::model::{
    now_ms, Answer, Approval, ApprovalEvent, ApprovalState, Grant, GrantEnd, Scope,
};
use crate::persist;
use crate::subject::Subject;

/// The owner of the server (the unix socket's caller) may answer its own
/// approvals; a token never may.
pub const OWNER: &str = "owner";

/// Events kept for a slow subscriber before it misses some.
const EVENT_BUFFER: usize = 1024;

/// Why an answer or a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error("the approvals store: {0}")]
    Store(String),
    #[error("no approval '{0}'")]
    NotFound(String),
    #[error("approval {id} is already {state}; only a pending approval can be answered")]
    NotPending { id: String, state: &'static str },
    #[error("'{0}' asked for this approval and may not answer it; another approver must")]
    SelfApproval(String),
    #[error("the scope {0} is not on offer for this approval")]
    NotOffered(String),
    #[error("a session scope needs an approval made in a session; choose once or a duration")]
    NoSession,
    #[error("a duration scope needs a duration of at least one second, e.g. 10m")]
    NoDuration,
    #[error("a persistent grant is written to the policy file, and this server has none; start it with --policy FILE")]
    NoPolicyFile,
    /// The first answer of a persistent approval: send it again with this
    /// `confirm` token to have `rule` appended to the policy file.
    #[error("confirm the rule to be appended to the policy file by answering again with this confirm token")]
    ConfirmPersistent { confirm: String, rule: String },
    #[error("the confirm token does not match this approval's (ask for a new one by answering without it)")]
    BadConfirm,
    #[error("the policy file: {0}")]
    Policy(String),
}

fn db_err(e: rusqlite::Error) -> ApprovalError {
    ApprovalError::Store(e.to_string())
}

/// The approvals store (cheap to share in an `Arc`).
#[derive(Debug)]
pub struct Approvals {
    db: Mutex<Connection>,
    events: broadcast::Sender<ApprovalEvent>,
    /// Approvals someone in this process waits on.
    waiters: Mutex<HashMap<String, watch::Sender<Option<Approval>>>>,
    /// Persistent answers waiting for their confirmation: approval -> (token, by).
    confirms: Mutex<HashMap<String, (String, String)>>,
    policy_file: Option<PathBuf>,
    /// How long an approved once grant nobody waits for stays claimable.
    unclaimed_once: Duration,
}

/// Fresh ids: a prefix and 16 hex digits.
pub fn new_id(prefix: &str) -> String {
    let mut raw = [0u8; 8];
    if getrandom::fill(&mut raw).is_err() {
        raw = now_ms().to_le_bytes();
    }
    format!("{prefix}{}", hex::encode(raw))
}

fn lock<T>(m: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>, ApprovalError> {
    m.lock()
        .map_err(|_| ApprovalError::Store("a lock was poisoned".into()))
}

impl Approvals {
    /// Open (or make) the store at `path`.
    pub fn open(path: &Path) -> Result<Approvals, ApprovalError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| ApprovalError::Store(format!("{}: {e}", dir.display())))?;
        }
        let db = Connection::open(path).map_err(db_err)?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;
             CREATE TABLE IF NOT EXISTS approvals (
                id TEXT PRIMARY KEY, state TEXT NOT NULL, expires_ms INTEGER NOT NULL,
                json TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS grants (
                id TEXT PRIMARY KEY, approval TEXT NOT NULL, principal TEXT NOT NULL,
                session TEXT, until_ms INTEGER, ended INTEGER NOT NULL DEFAULT 0,
                json TEXT NOT NULL);",
        )
        .map_err(db_err)?;
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        Ok(Approvals {
            db: Mutex::new(db),
            events,
            waiters: Mutex::new(HashMap::new()),
            confirms: Mutex::new(HashMap::new()),
            policy_file: None,
            unclaimed_once: Duration::from_secs(120),
        })
    }

    /// Persistent grants are appended to this policy file.
    pub fn with_policy_file(mut self, path: Option<PathBuf>) -> Approvals {
        self.policy_file = path;
        self
    }

    /// How long an approved once grant that nobody waits for (its asker
    /// went away, or the server restarted) stays for a retry to claim.
    pub fn with_unclaimed_once(mut self, d: Duration) -> Approvals {
        self.unclaimed_once = d;
        self
    }

    pub fn policy_file(&self) -> Option<&Path> {
        self.policy_file.as_deref()
    }

    /// Created, decided, expired; grants started and ended.
    pub fn subscribe(&self) -> broadcast::Receiver<ApprovalEvent> {
        self.events.subscribe()
    }

    fn emit(&self, e: ApprovalEvent) {
        let _ = self.events.send(e);
    }

    fn put(&self, db: &Connection, a: &Approval) -> Result<(), ApprovalError> {
        let json = serde_json::to_string(a).map_err(|e| ApprovalError::Store(e.to_string()))?;
        db.execute(
            "INSERT OR REPLACE INTO approvals (id, state, expires_ms, json) VALUES (?1, ?2, ?3, ?4)",
            params![a.id, a.state.word(), a.expires_unix_ms as i64, json],
        )
        .map_err(db_err)?;
        Ok(())
    }

    fn load(db: &Connection, id: &str) -> Result<Option<Approval>, ApprovalError> {
        let json: Option<String> = db
            .query_row("SELECT json FROM approvals WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(db_err)?;
        json.map(|j| serde_json::from_str(&j).map_err(|e| ApprovalError::Store(e.to_string())))
            .transpose()
    }

    /// Record a new pending approval and tell the subscribers.
    pub fn create(&self, a: Approval) -> Result<Approval, ApprovalError> {
        {
            let db = lock(&self.db)?;
            self.put(&db, &a)?;
        }
        self.emit(ApprovalEvent::Created(a.clone()));
        Ok(a)
    }

    /// Every approval (newest first), or those in `state`.
    pub fn list(&self, state: Option<ApprovalState>) -> Vec<Approval> {
        let Ok(db) = lock(&self.db) else {
            return Vec::new();
        };
        let rows = (|| -> rusqlite::Result<Vec<String>> {
            let mut stmt = db.prepare_cached(
                "SELECT json FROM approvals WHERE ?1 IS NULL OR state = ?1 ORDER BY rowid DESC LIMIT 1000",
            )?;
            let rows = stmt.query_map([state.map(|s| s.word())], |r| r.get(0))?;
            rows.collect()
        })();
        rows.unwrap_or_default()
            .iter()
            .filter_map(|j| serde_json::from_str(j).ok())
            .collect()
    }

    pub fn get(&self, id: &str) -> Option<Approval> {
        let db = lock(&self.db).ok()?;
        Self::load(&db, id).ok().flatten()
    }

    /// Answer approval `id` as `by`. A token may not answer its own; the
    /// scope must be on offer; a persistent approval needs two answers
    /// (the first gives [`ApprovalError::ConfirmPersistent`]).
    pub fn decide(&self, id: &str, answer: Answer, by: &str) -> Result<Approval, ApprovalError> {
        let mut a = self
            .get(id)
            .ok_or_else(|| ApprovalError::NotFound(id.to_owned()))?;
        if a.state != ApprovalState::Pending {
            return Err(ApprovalError::NotPending {
                id: id.to_owned(),
                state: a.state.word(),
            });
        }
        if by != OWNER && by == a.principal {
            return Err(ApprovalError::SelfApproval(by.to_owned()));
        }
        let now = now_ms();
        let grant = match &answer {
            Answer::Deny => None,
            Answer::Approve { scope, confirm } => {
                self.check_scope(&a, scope)?;
                if *scope == Scope::Persistent {
                    self.persist(&a, confirm.as_deref(), by)?;
                }
                Some(self.grant_for(&a, *scope, now))
            }
        };
        a.decided_by = Some(by.to_owned());
        a.decided_unix_ms = Some(now);
        a.state = if grant.is_some() {
            ApprovalState::Approved
        } else {
            ApprovalState::Denied
        };
        if let Answer::Approve { scope, .. } = answer {
            a.scope = Some(scope);
        }
        a.grant = grant.as_ref().map(|g| g.id.clone());
        {
            let db = lock(&self.db)?;
            // Answered by someone else in the meantime: the first answer stands.
            if let Some(cur) = Self::load(&db, id)? {
                if cur.state != ApprovalState::Pending {
                    return Err(ApprovalError::NotPending {
                        id: id.to_owned(),
                        state: cur.state.word(),
                    });
                }
            }
            self.put(&db, &a)?;
            if let Some(g) = &grant {
                let json =
                    serde_json::to_string(g).map_err(|e| ApprovalError::Store(e.to_string()))?;
                db.execute(
                    "INSERT INTO grants (id, approval, principal, session, until_ms, json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![g.id, g.approval, g.principal, g.session, g.until_unix_ms.map(|u| u as i64), json],
                )
                .map_err(db_err)?;
            }
        }
        self.emit(ApprovalEvent::Decided(a.clone()));
        if let Some(g) = grant {
            self.emit(ApprovalEvent::GrantStarted(g));
        }
        self.wake(&a);
        Ok(a)
    }

    fn check_scope(&self, a: &Approval, scope: &Scope) -> Result<(), ApprovalError> {
        if !a.offers.contains(&scope.kind()) {
            return Err(ApprovalError::NotOffered(scope.describe()));
        }
        match scope {
            Scope::Session if a.session.is_none() => Err(ApprovalError::NoSession),
            Scope::For(d) if d.as_secs() == 0 => Err(ApprovalError::NoDuration),
            Scope::Persistent if self.policy_file.is_none() => Err(ApprovalError::NoPolicyFile),
            _ => Ok(()),
        }
    }

    /// The two steps of a persistent answer: the first hands out a confirm
    /// token and the rule's text; the second (with the token, by the same
    /// answerer) appends the rule to the policy file.
    fn persist(&self, a: &Approval, confirm: Option<&str>, by: &str) -> Result<(), ApprovalError> {
        let file = self
            .policy_file
            .as_deref()
            .ok_or(ApprovalError::NoPolicyFile)?;
        let rule = persist::rule_text(a, by);
        let mut confirms = lock(&self.confirms)?;
        match confirm {
            None => {
                let token = new_id("cf_");
                confirms.insert(a.id.clone(), (token.clone(), by.to_owned()));
                Err(ApprovalError::ConfirmPersistent {
                    confirm: token,
                    rule,
                })
            }
            Some(t) => match confirms.get(&a.id) {
                Some((want, who)) if want == t && who == by => {
                    persist::append(file, &rule)?;
                    confirms.remove(&a.id);
                    Ok(())
                }
                _ => Err(ApprovalError::BadConfirm),
            },
        }
    }

    fn grant_for(&self, a: &Approval, scope: Scope, now: u64) -> Grant {
        let ms = |d: Duration| now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        // A once grant is the exact subject, for the asker (or, when the
        // asker went away, a retry within a while); the others the narrowed
        // subject. A persistent grant holds in every session while its rule
        // is in the policy file.
        let (subject, until) = match scope {
            Scope::Once => (a.subject.clone(), Some(ms(self.unclaimed_once))),
            Scope::Session | Scope::Persistent => (a.grant_subject.clone(), None),
            Scope::For(d) => (a.grant_subject.clone(), Some(ms(d))),
        };
        Grant {
            id: new_id("gr_"),
            approval: a.id.clone(),
            principal: a.principal.clone(),
            session: if scope == Scope::Persistent {
                None
            } else {
                a.session.clone()
            },
            subject,
            scope,
            until_unix_ms: until,
        }
    }

    fn wake(&self, a: &Approval) {
        if let Ok(w) = lock(&self.waiters) {
            if let Some(tx) = w.get(&a.id) {
                let _ = tx.send(Some(a.clone()));
            }
        }
    }

    /// Wait on approval `id` from this process: the receiver sees it once
    /// it is answered or expired. The registration ends with the guard.
    pub fn wait(&self, id: &str) -> Result<Waiting<'_>, ApprovalError> {
        let (tx, rx) = watch::channel(None);
        lock(&self.waiters)?.insert(id.to_owned(), tx);
        Ok(Waiting {
            store: self,
            id: id.to_owned(),
            rx,
        })
    }

    /// Expire approval `id` if it is still pending; the approval as it is
    /// now either way.
    pub fn expire(&self, id: &str) -> Result<Approval, ApprovalError> {
        let mut a = self
            .get(id)
            .ok_or_else(|| ApprovalError::NotFound(id.to_owned()))?;
        if a.state != ApprovalState::Pending {
            return Ok(a);
        }
        a.state = ApprovalState::Expired;
        a.decided_unix_ms = Some(now_ms());
        {
            let db = lock(&self.db)?;
            match Self::load(&db, id)? {
                Some(cur) if cur.state != ApprovalState::Pending => return Ok(cur),
                _ => self.put(&db, &a)?,
            }
        }
        lock(&self.confirms)?.remove(id);
        self.emit(ApprovalEvent::Expired(a.clone()));
        self.wake(&a);
        Ok(a)
    }

    /// The grant of approval `id` for the one who waited on it: a once
    /// grant is used up now; a longer one is returned as is.
    pub fn claim(&self, approval: &str) -> Result<Option<Grant>, ApprovalError> {
        let g = {
            let db = lock(&self.db)?;
            let json: Option<String> = db
                .query_row(
                    "SELECT json FROM grants WHERE approval = ?1 AND ended = 0",
                    [approval],
                    |r| r.get(0),
                )
                .optional()
                .map_err(db_err)?;
            json.and_then(|j| serde_json::from_str::<Grant>(&j).ok())
        };
        if let Some(g) = &g {
            if g.scope == Scope::Once {
                self.end_grant(g, GrantEnd::Used)?;
            }
        }
        Ok(g)
    }

    /// A live grant of `principal` covering `action` in `session`; a once
    /// grant nobody waits for is used up by this call. A persistent grant
    /// counts only while `rule_in_force(its rule id)`.
    pub fn find_grant(
        &self,
        principal: &str,
        session: Option<&str>,
        action: &Action,
        rule_in_force: &dyn Fn(&str) -> bool,
    ) -> Result<Option<Grant>, ApprovalError> {
        let now = now_ms();
        let waiting: Vec<String> = lock(&self.waiters)?.keys().cloned().collect();
        let found = self
            .live_grants(Some(principal), None)?
            .into_iter()
            .filter(|g| g.session.is_none() || g.session.as_deref() == session)
            .filter(|g| g.until_unix_ms.is_none_or(|u| u > now))
            .find(|g| match g.scope {
                Scope::Once => !waiting.contains(&g.approval) && g.subject.is_exactly(action),
                Scope::Session | Scope::For(_) => g.subject.covers(action),
                Scope::Persistent => {
                    g.subject.covers(action) && rule_in_force(&persist::rule_id(&g.approval))
                }
            });
        if let Some(g) = &found {
            if g.scope == Scope::Once {
                self.end_grant(g, GrantEnd::Used)?;
            }
        }
        Ok(found)
    }

    /// The grants not yet ended, of one principal and/or session.
    pub fn live_grants(
        &self,
        principal: Option<&str>,
        session: Option<&str>,
    ) -> Result<Vec<Grant>, ApprovalError> {
        let db = lock(&self.db)?;
        let mut stmt = db
            .prepare_cached(
                "SELECT json FROM grants WHERE ended = 0 AND (?1 IS NULL OR principal = ?1) AND (?2 IS NULL OR session = ?2)",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![principal, session], |r| r.get::<_, String>(0))
            .map_err(db_err)?;
        Ok(rows
            .filter_map(|r| r.ok())
            .filter_map(|j| serde_json::from_str(&j).ok())
            .collect())
    }

    fn end_grant(&self, g: &Grant, why: GrantEnd) -> Result<bool, ApprovalError> {
        let changed = {
            let db = lock(&self.db)?;
            db.execute(
                "UPDATE grants SET ended = 1 WHERE id = ?1 AND ended = 0",
                [&g.id],
            )
            .map_err(db_err)?
        };
        if changed > 0 {
            self.emit(ApprovalEvent::GrantEnded {
                grant: g.clone(),
                why,
            });
        }
        Ok(changed > 0)
    }

    /// Take a grant back now.
    pub fn revoke(&self, grant: &str) -> Result<bool, ApprovalError> {
        let g = self
            .live_grants(None, None)?
            .into_iter()
            .find(|g| g.id == grant);
        match g {
            Some(g) => self.end_grant(&g, GrantEnd::Revoked),
            None => Ok(false),
        }
    }

    /// Session `id` ended: its grants end with it.
    pub fn session_ended(&self, id: &str) -> Result<(), ApprovalError> {
        for g in self.live_grants(None, Some(id))? {
            self.end_grant(&g, GrantEnd::SessionEnded)?;
        }
        Ok(())
    }

    /// Sandbox `session` was deleted or ended on its own: the approvals
    /// still pending for it are expired (their waiters answered), since
    /// nothing can be done in it any more and an approver should not be
    /// asked. Not for a server's shutdown: pending approvals outlive a
    /// restart. Returns how many were expired.
    pub fn expire_pending_of_session(&self, session: &str) -> Result<usize, ApprovalError> {
        let due: Vec<String> = {
            let db = lock(&self.db)?;
            let mut stmt = db
                .prepare_cached(
                    "SELECT id FROM approvals WHERE state = 'pending' \
                     AND json_extract(json, '$.session') = ?1",
                )
                .map_err(db_err)?;
            let rows = stmt
                .query_map([session], |r| r.get::<_, String>(0))
                .map_err(db_err)?;
            rows.filter_map(|r| r.ok()).collect()
        };
        for id in &due {
            self.expire(id)?;
        }
        Ok(due.len())
    }

    /// End what has run out: pending approvals past their expiry (their
    /// waiters, in this process or gone with a previous one, are answered
    /// by expiry) and grants past their time. Run every second or so.
    pub fn sweep(&self) -> Result<(), ApprovalError> {
        let now = now_ms();
        let due: Vec<String> = {
            let db = lock(&self.db)?;
            let mut stmt = db
                .prepare_cached(
                    "SELECT id FROM approvals WHERE state = 'pending' AND expires_ms <= ?1",
                )
                .map_err(db_err)?;
            let rows = stmt
                .query_map([now as i64], |r| r.get::<_, String>(0))
                .map_err(db_err)?;
            rows.filter_map(|r| r.ok()).collect()
        };
        for id in due {
            self.expire(&id)?;
        }
        for g in self.live_grants(None, None)? {
            if g.until_unix_ms.is_some_and(|u| u <= now) {
                let why = if matches!(g.scope, Scope::For(_)) {
                    GrantEnd::Expired
                } else {
                    GrantEnd::Used
                };
                self.end_grant(&g, why)?;
            }
        }
        Ok(())
    }

    /// Delete what is closed and older than `keep`: approvals answered or
    /// expired before then (by their answer's time, else their expiry)
    /// that no grant in force refers to, and the ended grants of approvals
    /// no longer kept. Pending approvals and grants in force are never
    /// deleted. Every approval, answer and grant stays in the audit store;
    /// this database only needs what is pending or in force, so without
    /// pruning it would grow with every ask. Returns the approvals deleted.
    pub fn prune(&self, keep: Duration) -> Result<usize, ApprovalError> {
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
        let cutoff = i64::try_from(now_ms().saturating_sub(keep_ms)).unwrap_or(i64::MAX);
        let db = lock(&self.db)?;
        let approvals = db
            .execute(
                "DELETE FROM approvals WHERE state != 'pending'
                   AND COALESCE(json_extract(json, '$.decided_unix_ms'), expires_ms) < ?1
                   AND id NOT IN (SELECT approval FROM grants WHERE ended = 0)",
                [cutoff],
            )
            .map_err(db_err)?;
        db.execute(
            "DELETE FROM grants WHERE ended != 0 AND approval NOT IN (SELECT id FROM approvals)",
            [],
        )
        .map_err(db_err)?;
        Ok(approvals)
    }

    /// The exact and narrowed subject of an action (see [`Subject`]).
    pub fn subjects(action: &Action) -> (Subject, Subject) {
        (Subject::exact(action), Subject::narrowed(action))
    }
}

/// A registration of a waiter (see [`Approvals::wait`]).
#[derive(Debug)]
pub struct Waiting<'a> {
    store: &'a Approvals,
    id: String,
    rx: watch::Receiver<Option<Approval>>,
}

impl Waiting<'_> {
    /// The approval once it is no longer pending.
    pub async fn answered(&mut self) -> Option<Approval> {
        let a = self.rx.wait_for(|a| a.is_some()).await.ok()?;
        a.clone()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Ok(mut w) = self.store.waiters.lock() {
            w.remove(&self.id);
        }
    }
}
