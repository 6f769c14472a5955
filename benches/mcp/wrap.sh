#!/usr/bin/env bash
# Gateway overhead per tools/call over stdio (`cordon mcp wrap`): the same
# server called directly and through the gateway, in the same run. Servers:
# npm's reference everything server (when .ci/mcp-servers.sh installed it)
# and the Python server of the tests.
# Usage: benches/mcp/wrap.sh [CALLS]
set -euo pipefail
cd "$(dirname "$0")/../.."
CALLS="${1:-2000}"
cargo build --release -q -p cordon
BIN="${CARGO_TARGET_DIR:-target}/release/cordon"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores, $(uname -r), $CALLS calls each"
fixtures=crates/cli/tests/fixtures
echo "## python3 hostile_mcp.py (echo)"
python3 benches/mcp/wrap_overhead.py "$BIN" "$CALLS" --ro "$PWD/$fixtures" -- /usr/bin/python3 "$PWD/$fixtures/hostile_mcp.py"
modules="$PWD/target/test-data/mcp-servers/node_modules"
if [ -f "$modules/@modelcontextprotocol/server-everything/dist/index.js" ]; then
    echo "## node server-everything (echo)"
    python3 benches/mcp/wrap_overhead.py "$BIN" "$CALLS" --memory 2GiB --ro "$modules" -- \
        node "$modules/@modelcontextprotocol/server-everything/dist/index.js" stdio
else
    echo "SKIPPED: server-everything (run .ci/mcp-servers.sh)"
fi
