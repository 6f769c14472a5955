#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS (default 30) with cargo-fuzz on
# nightly. Exits non-zero on the first crash.
#
# FUZZ_BUILD=release (default) builds the targets as `cargo fuzz` does by
# default: optimized, with debug assertions and AddressSanitizer.
# FUZZ_BUILD=dev builds them unoptimized (still instrumented and
# sanitized): CI's short smoke run uses it, since optimizing the whole
# dependency tree with coverage instrumentation took longer than every
# test suite together on a 2-core machine, for a run of seconds.
set -euo pipefail
cd "$(dirname "$0")"
secs="${FUZZ_SECONDS:-30}"
case "${FUZZ_BUILD:-release}" in
release) build=-O ;;
dev) build=-D ;;
*)
  echo "FUZZ_BUILD must be release or dev, not '$FUZZ_BUILD'" >&2
  exit 2
  ;;
esac
skip() {
  if [ -n "${CORDON_TESTS_REQUIRE_ALL:-}" ]; then
    echo "required: fuzz: $1" >&2
    exit 1
  fi
  echo "SKIPPED fuzz: $1"
  exit 0
}
if ! cargo +nightly --version >/dev/null 2>&1; then
  skip "no nightly toolchain (rustup toolchain install nightly; the stable randomized test crates/egress/tests/fuzz_parsers.rs still runs in cargo test)"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  skip "cargo-fuzz is not installed (cargo install cargo-fuzz)"
fi
for t in request_head client_hello late_hello chunked request_body; do
  mkdir -p "corpus/$t"
  echo "fuzzing $t for ${secs}s ($build)"
  cargo +nightly fuzz run "$build" "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1
done
