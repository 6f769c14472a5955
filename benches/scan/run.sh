#!/usr/bin/env bash
# Pre-execution scanning speed: `Scanner::scan` on 50-line snippets
# (Python, shell, JavaScript), the same repeated to 1,000 lines, and the
# first 1,000 lines of a real file of the host's Python library; the
# tree-sitter parse alone is the baseline, measured in the same run.
# Targets (issue 13): 50 lines median <= 1 ms; 1,000 lines <= 5 ms.
#
#   benches/scan/run.sh [--iters N]
set -euo pipefail
cd "$(dirname "$0")/../.."
extra=()
py=$(ls /usr/lib/python3.*/argparse.py 2>/dev/null | head -1 || true)
if [ -n "$py" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    head -1000 "$py" > "$tmp/argparse-1000.py"
    extra+=("$tmp/argparse-1000.py")
fi
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Commit: $(git rev-parse --short HEAD). Load: $(cut -d' ' -f1-3 /proc/loadavg). CPUs: $(nproc)."
cargo run -q --release -p cordon-codescan --example scanbench -- "$@" \
    benches/scan/inputs/snippet50.py benches/scan/inputs/snippet50.sh benches/scan/inputs/snippet50.js "${extra[@]}"
