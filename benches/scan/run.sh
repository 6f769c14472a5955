#!/usr/bin/env bash
# Pre-execution scanning speed: `Scanner::scan` on 50-line snippets
# (Python, shell, JavaScript), the same repeated to 1,000 lines, and the
# first 1,000 lines of a real file of the host's Python library; the
# tree-sitter parse alone is the baseline, measured in the same run.
# Targets (issue 13): 50 lines median <= 1 ms; 1,000 lines <= 5 ms.
#
#   benches/scan/run.sh [--iters N]
#   benches/scan/run.sh --instructions   # instructions per scan (callgrind):
#                                        # steadier than time on a shared machine
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
if [ "${1:-}" = --instructions ]; then
    cargo build -q --release -p cordon-codescan --example scanprof
    echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Commit: $(git rev-parse --short HEAD). Instructions per scan (callgrind, after a warm-up scan):"
    for f in benches/scan/inputs/snippet50.py benches/scan/inputs/snippet50.sh benches/scan/inputs/snippet50.js "${extra[@]}"; do
        for lines in 0 1000; do
            case "$f" in *argparse*) [ "$lines" = 0 ] || continue ;; esac
            n=$([ "$lines" = 0 ] && echo 40 || echo 5)
            out=$(mktemp)
            # On one core: one thread parses every piece, so the count does
            # not depend on which thread parsed what.
            taskset -c 0 valgrind --tool=callgrind --toggle-collect='scanprof::scans' --callgrind-out-file="$out" \
                target/release/examples/scanprof "$f" "$lines" "$n" >/dev/null 2>&1
            total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
            rm -f "$out"
            echo "$f (to $lines lines): $((total / n)) instructions per scan"
        done
    done
    exit 0
fi
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'). Commit: $(git rev-parse --short HEAD). Load: $(cut -d' ' -f1-3 /proc/loadavg). CPUs: $(nproc)."
cargo run -q --release -p cordon-codescan --example scanbench -- "$@" \
    benches/scan/inputs/snippet50.py benches/scan/inputs/snippet50.sh benches/scan/inputs/snippet50.js "${extra[@]}"
