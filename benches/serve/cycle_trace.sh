#!/usr/bin/env bash
# Where one warm-pool cycle (create + exec /bin/true + delete over the unix
# socket, keep-alive) spends its time: the scheduler's record of every
# process and thread taking part, step by step.
#
# Runs N cycles with a pause before each (as an agent's calls come) under
# `perf sched record -a`, prints the median of each step as the client saw
# it, then the scheduler's timeline of the median cycle: who ran, for how
# long, who woke whom (the server's tokio workers and audit writer, the
# sandbox's init, the exec's leader, `true`, kernel workers).
#
# Usage: benches/serve/cycle_trace.sh [--cycles N] [--pause SECONDS]
# Needs perf (linux-perf) and root for `perf sched record -a`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cycles=30 pause=0.02
while [ $# -gt 0 ]; do
  case "$1" in
    --cycles) cycles="$2"; shift 2 ;;
    --pause) pause="$2"; shift 2 ;;
    *) echo "usage: $0 [--cycles N] [--pause SECONDS]" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "missing: perf (install it with: sudo apt-get install linux-perf)" >&2; exit 1; }

. "$root/benches/serve/serve_lib.sh"
serve_start --warm 8

cat >"$work/cycle.py" <<'EOF'
import json, sys, time
from unix_http import Client

client = Client(sys.argv[1])
cycles, pause = int(sys.argv[2]), float(sys.argv[3])
client.wait_for_pool()

def call(method, url, body=None):
    return client.ok(method, url, body)

steps = []
for _ in range(cycles):
    time.sleep(pause)
    t0 = time.monotonic()
    sid = json.loads(call("POST", "/v1/sandboxes", {}))["id"]
    t1 = time.monotonic()
    call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["/bin/true"]})
    t2 = time.monotonic()
    call("DELETE", f"/v1/sandboxes/{sid}")
    t3 = time.monotonic()
    steps.append((t3 - t0, t1 - t0, t2 - t1, t3 - t2, t0, t3))
ordered = sorted(steps)
m = ordered[len(ordered) // 2]
print("median cycle %.3f ms: create %.3f, exec %.3f, delete %.3f"
      % tuple(x * 1e3 for x in m[:4]))
# The median cycle's bounds on CLOCK_MONOTONIC (perf's clock), for the timeline.
print("window %.6f %.6f" % (m[4], m[5]))
EOF

perf sched record -a -k CLOCK_MONOTONIC -o "$work/sched.data" -- \
  python3 "$work/cycle.py" "$socket" "$cycles" "$pause" >"$work/cycle.out" 2>/dev/null
head -1 "$work/cycle.out"
read -r _ from to < <(grep '^window' "$work/cycle.out")
echo
echo "the median cycle, as the scheduler saw it (time, cpu, task, [wait, sch delay, run time ms] or wakeup):"
perf sched timehist -i "$work/sched.data" -w 2>/dev/null |
  awk -v from="$from" -v to="$to" '$1 + 0 >= from - 0.00005 && $1 + 0 <= to + 0.00005'
