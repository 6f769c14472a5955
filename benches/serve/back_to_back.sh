#!/usr/bin/env bash
# Commands run back to back in one session through the API (keep-alive
# client over the unix socket):
#   - at a tight process limit (3, 4, 5: the init, a leader, its command,
#     and room to spare), how many of N `/bin/true` exit 0, and how the
#     others end; a session's next exec, started ahead of its order, must
#     never take a process from the running command;
#   - without a limit, the median exec with no pause, 5 ms and 20 ms
#     before each (the time the init has to start the next exec ahead).
#
# Usage: benches/serve/back_to_back.sh [N]     (N default 300)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
n="${1:-300}"
. "$root/benches/serve/serve_lib.sh"
serve_start --warm 4
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$socket" "$n" <<'PY'
import collections, json, sys, time
from unix_http import Client

client = Client(sys.argv[1])
n = int(sys.argv[2])
client.wait_for_pool()

def session(body):
    return json.loads(client.ok("POST", "/v1/sandboxes", body))["id"]

for pids in (3, 4, 5):
    sid = session({"pids": pids})
    ends = collections.Counter()
    for _ in range(n):
        status, data = client.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["/bin/true"]})
        reply = json.loads(data)
        ends[f"exit {reply['exit_code']}" if status == 200 else f"HTTP {status}"] += 1
    client.ok("DELETE", f"/v1/sandboxes/{sid}")
    print(f"pids {pids}: " + ", ".join(f"{k}: {v}" for k, v in sorted(ends.items())))

sid = session({})
for pause in (0, 0.005, 0.02):
    times = []
    for _ in range(n):
        time.sleep(pause)
        t = time.perf_counter()
        client.ok("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["/bin/true"]})
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    print(f"no limit, {pause * 1000:.0f} ms before each: exec median {times[len(times) // 2]:.3f} ms")
client.ok("DELETE", f"/v1/sandboxes/{sid}")
PY
