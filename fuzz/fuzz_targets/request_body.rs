#![no_main]
//! cargo fuzz target: the same invariants as crates/server/tests/fuzz_requests.rs.

#[path = "../../crates/server/tests/common/fuzz_checks.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::request_bodies(data);
});
