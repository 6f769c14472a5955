#!/usr/bin/env bash
# `sandbox_exec` of `true` through `cordon mcp` from the official MCP Python
# SDK, beside the client's floor (ping, tools/list), over stdio and HTTP,
# with each SDK major whose venv `.ci/mcp.sh install` made.
#
#   benches/mcp/run.sh [--calls N]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p cordon
for m in 1 2; do
    py="target/mcp-venv-$m/bin/python"
    [ -x "$py" ] || { echo "no $py: run 'bash .ci/mcp.sh install'" >&2; continue; }
    for transport in "" --http; do
        "$py" benches/mcp/bench.py --bin target/release/cordon $transport "$@"
    done
done
