#!/usr/bin/env bash
# What one exec of /bin/true in a live session costs the whole machine:
# page faults, context switches and CPU per exec (every process: the
# engine, the sandbox's init, leaders and workloads, `true`, the kernel's
# workers), measured for a few seconds in the middle of a back-to-back
# loop (crates/session/examples/exec_loop.rs). No HTTP: the engine alone.
#
# Usage: benches/serve/exec_cpu.sh [--rounds N] [--seconds S]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rounds=3 seconds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--seconds S]" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "missing: perf (apt-get install linux-perf)" >&2; exit 1; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build --release -q -p cordon-session --example exec_loop)
loop="$CARGO_TARGET_DIR/release/examples/exec_loop"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
marker="$work/go"
# Busy jiffies of the whole machine: user, nice, system, irq, softirq.
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
hz=$(getconf CLK_TCK)

for _ in $(seq "$rounds"); do
  # The loop runs until the marker is removed, after the measurement.
  "$loop" 1000000 "$marker" >"$work/loop.out" &
  pid=$!
  while [ ! -e "$marker" ]; do
    kill -0 "$pid" 2>/dev/null || { echo "exec_loop ended early" >&2; exit 1; }
    sleep 0.01
  done
  before=$(busy)
  perf stat -a -x, -e page-faults,context-switches -- sleep "$seconds" 2>"$work/stat"
  after=$(busy)
  rm -f "$marker"
  wait "$pid"
  each=$(awk '/ms each/{print $1}' "$work/loop.out")
  awk -F, -v each="$each" -v secs="$seconds" -v cpu_ms="$(( (after - before) * 1000 / hz ))" '
    { v[$3] = $1 }
    END {
      n = secs * 1000 / each
      printf "exec in a live session: %s ms each; per exec %.0f page faults, %.1f context switches, %.3f ms of CPU\n",
        each, v["page-faults"] / n, v["context-switches"] / n, cpu_ms / n
    }' "$work/stat"
done
