#![no_main]
//! cargo fuzz target: the same invariants as crates/egress/tests/fuzz_parsers.rs.

#[path = "../../crates/egress/tests/common/fuzz_checks.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::late_hello(data);
});
