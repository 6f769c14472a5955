#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS (default 30) with cargo-fuzz on
# nightly. Exits non-zero on the first crash.
set -euo pipefail
cd "$(dirname "$0")"
secs="${FUZZ_SECONDS:-30}"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "SKIPPED fuzz: no nightly toolchain (the stable randomized test crates/egress/tests/fuzz_parsers.rs still runs in cargo test)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "SKIPPED fuzz: cargo-fuzz is not installed (cargo install cargo-fuzz)"
  exit 0
fi
for t in request_head client_hello chunked request_body; do
  mkdir -p "corpus/$t"
  echo "fuzzing $t for ${secs}s"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1
done
