#!/usr/bin/env bash
# A code-context cell `1+1` through `cordon serve` (issue 10: median at
# most 2 ms), with what the HTTP round trip alone costs in the same run
# (`GET /v1/health` on the same keep-alive connection) and a file PUT+GET
# of 4 KiB through the files API. One keep-alive client over the unix
# socket (Python's http.client: no third-party package).
#
#   cargo build --release -p cordon
#   benches/contexts/run.sh [--runs 1000] [--bin target/release/cordon]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=1000
bin=target/release/cordon
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
dir=$(mktemp -d)
"$bin" serve --socket "$dir/s.sock" --no-audit >"$dir/ready" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -s "$dir/ready" ] && break; sleep 0.05; done
echo "date: $(date -u '+%F %H:%M UTC'); load: $(cut -d' ' -f1-3 /proc/loadavg); $("$bin" --version 2>/dev/null || true)"
python3 - "$dir/s.sock" "$runs" <<'PY'
import http.client, json, socket, statistics, sys, time

path, runs = sys.argv[1], int(sys.argv[2])

class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)

c = Unix("x")

def call(method, url, body=None, ctype="application/json"):
    headers = {"Content-Type": ctype} if body is not None else {}
    c.request(method, url, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    return r.status, data

def timed(label, fn):
    for _ in range(min(50, runs)):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1000)
    ts.sort()
    print(f"{label:32} median {statistics.median(ts):6.3f} ms  p99 {ts[int(len(ts) * 0.99) - 1]:6.3f} ms  (n={runs})")
    return statistics.median(ts)

st, body = call("POST", "/v1/sandboxes", b"{}")
assert st == 201, body
sb = json.loads(body)["id"]
st, body = call("POST", f"/v1/sandboxes/{sb}/contexts", json.dumps({"language": "python"}).encode())
assert st == 201, body
ctx = json.loads(body)["id"]
cell = json.dumps({"code": "1+1"}).encode()

def run_cell():
    st, body = call("POST", f"/v1/sandboxes/{sb}/contexts/{ctx}/run", cell)
    assert st == 200 and json.loads(body)["value"] == "2", body

blob = b"x" * 4096
def put_get():
    st, _ = call("PUT", f"/v1/sandboxes/{sb}/files/tmp/bench.txt", blob, "application/octet-stream")
    assert st == 204
    st, data = call("GET", f"/v1/sandboxes/{sb}/files/tmp/bench.txt")
    assert st == 200 and data == blob

health = timed("GET /v1/health (round trip)", lambda: call("GET", "/v1/health"))
cell_ms = timed("context cell 1+1", run_cell)
timed("files PUT+GET 4 KiB", put_get)
print(f"cell over the round trip: +{cell_ms - health:.3f} ms; target: cell median <= 2 ms: {'met' if cell_ms <= 2 else 'NOT met'}")
call("DELETE", f"/v1/sandboxes/{sb}")
PY
