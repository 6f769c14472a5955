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

# A test's cordon that names no store or state directory of its own uses
# the defaults: they point into a directory made for this run, never the
# caller's own audit store, tokens or staged runs (~/.local/state/cordon).
own_state="${XDG_STATE_HOME:-$HOME/.local/state}/cordon"
[ -e "$own_state" ] && own_state_before=yes || own_state_before=no
test_state=$(mktemp -d "${TMPDIR:-/tmp}/cordon-test-state.XXXXXX")
trap 'rm -rf "$test_state"' EXIT
export XDG_STATE_HOME="$test_state" CORDON_STATE_DIR="$test_state/cordon"

# Each phase's wall time, printed as it ends and again at the end (CI is to
# stay well under 40 minutes; this says where the time goes).
timings=()
phase() {
    local name=$1 t0=$SECONDS
    shift
    echo "== $name"
    "$@"
    timings+=("$(printf '%5d s  %s' $((SECONDS - t0)) "$name")")
    echo "== $name: $((SECONDS - t0)) s"
}

# The static binary (musl; needs the rustup target and musl-gcc from
# musl-tools for the bundled SQLite and ring): built here, run by
# crates/cli/tests/static_binary.rs, which fails in CI when it is missing.
if [ "$(uname -m)" = x86_64 ] && command -v musl-gcc >/dev/null &&
    rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    phase "static binary (release, musl)" cargo build --release --locked --target x86_64-unknown-linux-musl
    export CORDON_STATIC_BIN="$PWD/target/x86_64-unknown-linux-musl/release/cordon"
else
    echo "SKIPPED: static build (needs x86_64, 'rustup target add x86_64-unknown-linux-musl' and musl-tools)"
fi

# Tests named rootless_only_* need an unprivileged caller with a
# supplementary group and a subgid range: .ci/rootless.sh runs them as its
# user; as root they are left out here.
if [ "$(id -u)" = "0" ]; then
    echo "left out as root (run by .ci/rootless.sh as its user): rootless_only_*"
    phase "cargo test (root)" cargo test --workspace --locked -- --skip rootless_only_
else
    phase "cargo test" cargo test --workspace --locked
fi
# The binary those tests ran: the suites below test the same one.
export CORDON_BIN="$(realpath "${CARGO_TARGET_DIR:-target}")/debug/cordon"

# The Python client against the real `cordon serve` (clients/python/tests).
phase "Python client" bash .ci/pyclient.sh test

# `cordon mcp` driven by the official MCP Python SDK, 1.x and 2.x (stdio
# and Streamable HTTP).
phase "MCP Python SDK" bash .ci/mcp.sh test

# The web console in headless Chromium against the real `cordon serve`
# (a screenshot is kept under target/console-test/).
phase "web console (Chromium)" bash .ci/console.sh test

# The proxy's parsers and the server's request decoding under cargo-fuzz
# for a short, fixed time, built unoptimized (see fuzz/run.sh); needs a
# nightly toolchain (the stable randomized tests above always run).
if cargo +nightly --version >/dev/null 2>&1; then
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
    phase "cargo-fuzz" env FUZZ_SECONDS="${FUZZ_SECONDS:-20}" FUZZ_BUILD="${FUZZ_BUILD:-dev}" bash fuzz/run.sh
elif [ -n "${CORDON_TESTS_REQUIRE_ALL:-}" ]; then
    echo "required: cargo-fuzz run (no nightly toolchain: rustup toolchain install nightly)" >&2
    exit 1
else
    echo "SKIPPED: cargo-fuzz run (no nightly toolchain on this machine)"
fi

if [ "$(id -u)" = "0" ] && [ -f .ci/rootless.sh ]; then
    phase "rootless" bash .ci/rootless.sh
else
    echo "SKIPPED: rootless run (needs root to create the unprivileged test user)"
fi

# Nothing of the tests is left in the caller's own state directory.
if [ "$own_state_before" = no ] && [ -e "$own_state" ]; then
    echo "FAILED: the tests wrote to $own_state (the caller's own state directory):" >&2
    ls -la "$own_state" >&2
    exit 1
fi

echo "== time per phase"
printf '%s\n' "${timings[@]}"
