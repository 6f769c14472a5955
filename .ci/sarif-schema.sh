#!/usr/bin/env bash
# The SARIF 2.1.0 JSON schema that the `cordon scan --format sarif` test
# validates against. It comes from the npm registry (@microsoft/jest-sarif,
# MIT, ships the OASIS schema as lib/schemas/sarif-2.1.0-rtm.5.json) and is
# kept under target/, not in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/test-data/sarif-schema-2.1.0.json
[ -s "$out" ] && exit 0
if ! command -v npm >/dev/null; then
    apt-get update -q && apt-get install -y -q --no-install-recommends npm
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @microsoft/jest-sarif@1.0.0-beta.0 >/dev/null)
tar -xzf "$tmp"/microsoft-jest-sarif-1.0.0-beta.0.tgz -C "$tmp" package/lib/schemas/sarif-2.1.0-rtm.5.json
mkdir -p "$(dirname "$out")"
mv "$tmp"/package/lib/schemas/sarif-2.1.0-rtm.5.json "$out"
echo "SARIF schema: $out"
