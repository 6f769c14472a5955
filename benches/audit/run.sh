#!/usr/bin/env bash
# Audit store throughput: AuditWriter (hash chain, redaction, durable group
# commits) against plain SQLite insert loops, in the same run, on the same disk.
# Usage: benches/audit/run.sh [EVENTS] [DIR]   (DIR defaults to a fresh temp dir)
set -euo pipefail
cd "$(dirname "$0")/../.."
EVENTS="${1:-200000}"
DIR="${2:-$(mktemp -d "${TMPDIR:-/tmp}/cordon-audit-bench.XXXXXX")}"
cargo build --release -q -p cordon-audit --example audit_bench
BIN="${CARGO_TARGET_DIR:-target}/release/examples/audit_bench"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores, $(uname -r), store in $DIR ($(df --output=fstype "$DIR" | tail -1))"
"$BIN" "$EVENTS" "$DIR"
rm -rf "$DIR"
