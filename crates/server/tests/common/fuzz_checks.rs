//! Invariants of request decoding on arbitrary bytes, shared by the
//! cargo-fuzz target `request_body` (fuzz/) and the stable randomized test
//! (tests/fuzz_requests.rs): decoding and checking a body never panics; a
//! refusal is a 4xx with a message; what a token is granted stays within
//! its ceiling.
#![allow(dead_code)]

use cordon_policy::TrustLevel;
use cordon_server::extract::decode_json;
use cordon_server::planning::plan;
use cordon_server::routes::exec::exec_request;
use cordon_server::tokens::Ceiling;
use cordon_server::wire::{CreateSandbox, ExecBody, SignalBody};
use cordon_server::{ApiError, Caller};

const TOKEN_MEMORY: u64 = 256 << 20;

fn refused(e: &ApiError) {
    assert!(e.status.is_client_error(), "a refusal is 4xx: {e}");
    assert!(!e.message.is_empty(), "a refusal says why");
}

fn token() -> Caller {
    Caller::token(
        "fuzz".into(),
        Ceiling {
            preset: TrustLevel::Low,
            memory: Some(TOKEN_MEMORY),
            pids: Some(64),
            allow_net: vec!["pypi.org".into()],
            max_sandboxes: 1,
        },
    )
}

pub fn request_bodies(data: &[u8]) {
    match decode_json::<CreateSandbox>(data) {
        Err(e) => refused(&e),
        Ok(req) => {
            match plan(&req, &token()) {
                Err(e) => refused(&e),
                Ok(p) => {
                    assert!(
                        p.profile.extends <= TrustLevel::Low,
                        "preset within the ceiling"
                    );
                    assert!(
                        p.spec.limits.memory.is_some_and(|m| m <= TOKEN_MEMORY),
                        "memory within the ceiling"
                    );
                    assert!(
                        p.spec.limits.pids.is_some_and(|n| n <= 64),
                        "pids within the ceiling"
                    );
                    assert!(
                        req.rw.is_empty()
                            && req.ro.is_empty()
                            && req.profile.is_none()
                            && req.secrets.is_empty()
                    );
                    for h in &p.profile.network.allow {
                        assert_eq!(h.to_string(), "pypi.org", "hosts within the ceiling");
                    }
                }
            }
            if let Err(e) = plan(&req, &Caller::owner()) {
                assert!(e.status.is_client_error(), "{e}");
            }
        }
    }
    match decode_json::<ExecBody>(data) {
        Err(e) => refused(&e),
        Ok(body) => match exec_request(&body) {
            Err(e) => refused(&e),
            Ok(r) => {
                assert!(!r.argv.is_empty() && !r.argv[0].is_empty());
                assert!(r.argv.iter().all(|a| !a.contains('\0')));
                assert!(r.cwd.as_ref().is_none_or(|c| c.is_absolute()));
            }
        },
    }
    match decode_json::<SignalBody>(data) {
        Err(e) => refused(&e),
        Ok(b) => match b.signal.number() {
            Err(e) => refused(&e),
            Ok(n) => assert!((1..=64).contains(&n)),
        },
    }
}
