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

work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release -q -p cordon 2>"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
cordon="$CARGO_TARGET_DIR/release/cordon"

CORDON_STATE_DIR="$work/state" "$cordon" serve --socket "$work/s.sock" --warm 8 \
  >"$work/out" 2>"$work/err" &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/out" ] && break; sleep 0.1; done
[ -S "$work/s.sock" ] || { cat "$work/err" >&2; exit 1; }
sleep 2 # the pool is built

cat >"$work/cycle.py" <<'EOF'
import http.client, json, socket, sys, time

class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)

conn = Unix(sys.argv[1])
cycles, pause = int(sys.argv[2]), float(sys.argv[3])

def call(method, url, body=None):
    conn.request(method, url, body=None if body is None else json.dumps(body),
                 headers={"content-type": "application/json"})
    r = conn.getresponse()
    return r.read()

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
  python3 "$work/cycle.py" "$work/s.sock" "$cycles" "$pause" >"$work/cycle.out" 2>/dev/null
head -1 "$work/cycle.out"
read -r _ from to < <(grep '^window' "$work/cycle.out")
echo
echo "the median cycle, as the scheduler saw it (time, cpu, task, [wait, sch delay, run time ms] or wakeup):"
perf sched timehist -i "$work/sched.data" -w 2>/dev/null |
  awk -v from="$from" -v to="$to" '$1 + 0 >= from - 0.00005 && $1 + 0 <= to + 0.00005'
