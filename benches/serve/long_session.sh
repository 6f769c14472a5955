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
work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build --release -q -p cordon)
socket="$work/cordon.sock"
CORDON_STATE_DIR="$work/state" "$CARGO_TARGET_DIR/release/cordon" serve --socket "$socket" \
  --audit "$work/audit.db" >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { echo "the server did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$socket" "$n" <<'PY'
import http.client, json, socket, sys, time

class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)

path, n = sys.argv[1], int(sys.argv[2])
c = Unix(path)
def call(method, url, body=None):
    c.request(method, url, body=None if body is None else json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status >= 300:
        sys.exit(f"{method} {url}: {r.status} {data[:200]!r}")
    return data
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
