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

if [ "$(id -u)" = "0" ] && [ -f .ci/rootless.sh ]; then
    bash .ci/rootless.sh
else
    echo "SKIPPED: rootless run (needs root to create the unprivileged test user)"
fi
