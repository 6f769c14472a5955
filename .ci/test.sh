#!/usr/bin/env bash
# The test command (README): the whole workspace's tests, then, when run as
# root, the sandbox's integration tests again as an unprivileged user to
# prove rootless mode.
set -euo pipefail
cd "$(dirname "$0")/.."

# In CI every host feature the tests need is present: a test that would
# skip must fail instead.
if [ "${CI:-}" = "true" ]; then
    export CORDON_TESTS_REQUIRE_ALL=1
fi

cargo test --workspace --locked

# The proxy's parsers under cargo-fuzz for a short, fixed time (nightly
# only; the stable randomized parser test above always runs).
if cargo +nightly --version >/dev/null 2>&1; then
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
    FUZZ_SECONDS="${FUZZ_SECONDS:-20}" bash fuzz/run.sh
else
    echo "SKIPPED: cargo-fuzz run (no nightly toolchain on this machine)"
fi

if [ "$(id -u)" = "0" ] && [ -f .ci/rootless.sh ]; then
    bash .ci/rootless.sh
else
    echo "SKIPPED: rootless run (needs root to create the unprivileged test user)"
fi
