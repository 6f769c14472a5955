#!/usr/bin/env bash
# Two or more cordon builds against bwrap in the same run: the one-shot
# start's median (hyperfine, interleaved rounds) and the throughput of
# parallel loops, with and without the audit record.
#
# Usage: benches/startup/compare.sh [--rounds N] [--runs N] [--loops N] BINARY...
#   --rounds N  rounds of the whole comparison (default 2)
#   --runs N    hyperfine runs per command and round (default 300)
#   --loops N   runs per parallel loop, two loops at once (default 300)
#   BINARY      cordon binaries, e.g. the release builds of two commits:
#               git worktree add /tmp/before HEAD~1 &&
#               (cd /tmp/before && cargo build --release -p cordon)
#               benches/startup/compare.sh /tmp/before/target/release/cordon target/release/cordon
set -euo pipefail

rounds=2 runs=300 loops=300 bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --loops) loops="$2"; shift 2 ;;
    -*) echo "usage: $0 [--rounds N] [--runs N] [--loops N] BINARY..." >&2; exit 2 ;;
    *) bins+=("$(realpath "$1")"); shift ;;
  esac
done
[ ${#bins[@]} -ge 1 ] || { echo "usage: $0 [--rounds N] [--runs N] [--loops N] BINARY..." >&2; exit 2; }
for tool in hyperfine bwrap python3; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (Debian: apt-get install $tool bubblewrap python3)" >&2; exit 1; }
done

. "$(cd "$(dirname "$0")" && pwd)/../lib/bwrap.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
bwrap_baseline --cwd "$PWD"
bw=("${BWRAP[@]}")

# Runs per second of two loops of `$loops` runs at once.
throughput() {
  local start end
  start=$(date +%s.%N)
  for _ in 1 2; do (for _ in $(seq "$loops"); do "$@" >/dev/null 2>&1; done) & done
  wait
  end=$(date +%s.%N)
  python3 -c "print(f'{2 * $loops / ($end - $start):.0f}')"
}

printf 'load average before: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  cmds=("${bw[*]} /bin/true")
  for b in "${bins[@]}"; do
    cmds+=("$b run --no-audit -- /bin/true" "$b run --audit $work/audit.db -- /bin/true")
  done
  hyperfine -N -w 30 -r "$runs" --export-json "$work/r$r.json" "${cmds[@]}" >/dev/null 2>&1
  echo "round $r: median ms (hyperfine -N -w 30 -r $runs)"
  python3 - "$work/r$r.json" <<'EOF'
import json, sys
for x in json.load(open(sys.argv[1]))["results"]:
    name = "bwrap /bin/true" if x["command"].startswith("bwrap") else x["command"]
    print(f"  {x['median'] * 1000:6.2f}  {name}")
EOF
  echo "round $r: runs/s, two loops of $loops at once"
  for b in "${bins[@]}"; do
    echo "  $(throughput "$b" run --no-audit -- /bin/true)  $b run --no-audit"
    echo "  $(throughput "$b" run --audit "$work/audit.db" -- /bin/true)  $b run --audit DB"
  done
done
printf 'load average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
