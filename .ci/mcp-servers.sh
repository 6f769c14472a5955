#!/usr/bin/env bash
# The MCP servers the `cordon mcp wrap` tests run (npm registry): the
# reference filesystem and everything servers, at pinned versions, installed
# under target/test-data/mcp-servers (not in the repository).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/test-data/mcp-servers
fs_version=2026.8.31
everything_version=2026.8.31
marker="$out/.installed-$fs_version-$everything_version"
[ -f "$marker" ] && exit 0
if ! command -v npm >/dev/null; then
    apt-get update -q && apt-get install -y -q --no-install-recommends npm
fi
mkdir -p "$out"
(cd "$out" && npm install --silent --no-audit --no-fund --prefix . \
    "@modelcontextprotocol/server-filesystem@$fs_version" \
    "@modelcontextprotocol/server-everything@$everything_version" >/dev/null)
touch "$marker"
echo "MCP servers: $out"
