//! What each sandbox's proxy refused lately (or could not complete), kept
//! briefly so that an exec's reply can say it again: a client inside
//! usually shows only the status ("CONNECT tunnel failed, response 403",
//! "Tunnel connection failed: 403 Forbidden"), and the proxy's answer says
//! why and how to allow the host. Which exec a connection belonged to is
//! not known (several may run at once): an exec is told of the refusals
//! made while it ran.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

/// Refusals kept per sandbox, newest last.
const KEPT: usize = 32;
/// Distinct refusals told to one exec.
pub const TOLD: usize = 3;

/// One answer of the proxy: the event's rule (`unlisted`, `private-address
/// IP`, `allow:HOST (resolve-failed)`, ...) and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub rule: String,
    pub message: String,
}

#[derive(Debug, Default)]
pub struct EgressNotes {
    by_sandbox: Mutex<HashMap<String, VecDeque<(Instant, Answer)>>>,
}

impl EgressNotes {
    /// The proxy of `sandbox` answered an attempt under `rule` with `message`.
    pub fn note(&self, sandbox: &str, rule: &str, message: &str) {
        let Ok(mut all) = self.by_sandbox.lock() else {
            return;
        };
        let kept = all.entry(sandbox.to_owned()).or_default();
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back((
            Instant::now(),
            Answer {
                rule: rule.to_owned(),
                message: message.to_owned(),
            },
        ));
    }

    /// The distinct answers given in `sandbox` from `from` to `to` (now
    /// when None), oldest first, at most [`TOLD`].
    pub fn between(&self, sandbox: &str, from: Instant, to: Option<Instant>) -> Vec<Answer> {
        let Ok(all) = self.by_sandbox.lock() else {
            return Vec::new();
        };
        let Some(kept) = all.get(sandbox) else {
            return Vec::new();
        };
        let mut told: Vec<Answer> = Vec::new();
        for (at, answer) in kept {
            let within = *at >= from && to.is_none_or(|to| *at <= to);
            if within && !told.contains(answer) && told.len() < TOLD {
                told.push(answer.clone());
            }
        }
        told
    }

    /// The sandbox is gone.
    pub fn forget(&self, sandbox: &str) {
        if let Ok(mut all) = self.by_sandbox.lock() {
            all.remove(sandbox);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_answers_within_the_span_of_the_sandbox_distinct_and_few() {
        let notes = EgressNotes::default();
        let said = |answers: Vec<Answer>| -> Vec<String> {
            answers.into_iter().map(|a| a.message).collect()
        };
        notes.note("sb-1", "unlisted", "before");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let from = Instant::now();
        for m in ["a", "a", "b", "c", "d"] {
            notes.note("sb-1", "unlisted", m);
        }
        notes.note("sb-2", "unlisted", "elsewhere");
        let to = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        notes.note("sb-1", "unlisted", "after");
        assert_eq!(said(notes.between("sb-1", from, Some(to))), ["a", "b", "c"]);
        assert_eq!(said(notes.between("sb-2", from, None)), ["elsewhere"]);
        notes.forget("sb-1");
        assert!(notes.between("sb-1", from, None).is_empty());
        for i in 0..(KEPT + 5) {
            notes.note("sb-3", "unlisted", &i.to_string());
        }
        assert_eq!(
            said(notes.between("sb-3", from, None))[0],
            "5",
            "the oldest go"
        );
    }
}
