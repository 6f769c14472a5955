#!/usr/bin/env bash
# One long session: N execs of /bin/true in one sandbox through the API
# (keep-alive client over the unix socket), medians per fifth of the run.
# An exec's cost must not grow with the number of execs the session ran
# before it.
#
# Usage: benches/serve/long_session.sh [N]     (N default 3000)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
n="${1:-3000}"
. "$root/benches/serve/serve_lib.sh"
serve_start --audit "$work/audit.db"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$socket" "$n" <<'PY'
import json, sys, time
from unix_http import Client

path, n = sys.argv[1], int(sys.argv[2])
call = Client(path).ok
sid = json.loads(call("POST", "/v1/sandboxes", {}))["id"]
times = []
for _ in range(n):
    t = time.perf_counter()
    call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["/bin/true"]})
    times.append((time.perf_counter() - t) * 1000)
step = max(n // 5, 1)
for a in range(0, n, step):
    part = sorted(times[a:a + step])
    print(f"execs {a + 1}-{a + len(part)}: median {part[len(part) // 2]:.3f} ms")
call("DELETE", f"/v1/sandboxes/{sid}")
PY
