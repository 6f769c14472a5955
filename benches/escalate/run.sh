#!/usr/bin/env bash
# Live escalation: how long an approved widening takes to be in effect in
# a running sandbox, and its narrowing to be out of effect.
#
# `POST /v1/sandboxes/{id}/grants` answers only once the change is in
# effect inside the sandbox (the proxy's rule set changed; the bind is
# mounted in the sandbox's mount namespace and the init told, so the next
# exec's Landlock covers it), so the time from sending the decision to
# the answer bounds "in effect within N ms of the decision". Measured on
# a keep-alive client over the unix socket, N rounds of widen + narrow for
# an egress host and for a bind mount, interleaved; then a few rounds are
# checked from inside (an exec reads the bound file; the proxy lets the
# granted host through) so the numbers are of changes that work.
#
# Usage: benches/escalate/run.sh [--runs N] [--debug]
#   --debug   use the debug build (default: release)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
runs=200 profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --debug) profile=debug; shift ;;
    *) echo "usage: $0 [--runs N] [--debug]" >&2; exit 2 ;;
  esac
done

work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
if [ "$profile" = release ]; then
  cargo build --release -q -p cordon 2>"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
else
  cargo build -q -p cordon 2>"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
fi
cordon="$CARGO_TARGET_DIR/$profile/cordon"

socket="$work/cordon.sock"
CORDON_STATE_DIR="$work/state" "$cordon" serve --socket "$socket" --audit "$work/audit.db" \
  >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
[ -s "$work/serve.out" ] || { echo "the server did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
mkdir "$work/host" && echo bound-data >"$work/host/data.txt"
chmod -R a+rX "$work"

python3 - "$socket" "$runs" "$work/host" "$profile" <<'PY'
import http.client, json, os, socket, statistics, sys, threading, time

sock_path, runs, host_dir, profile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sock_path)

conn = Unix("cordon")

def call(method, path, body=None):
    data = json.dumps(body) if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    text = r.read()
    return r.status, (json.loads(text) if text else None)

# A local origin the sandbox reaches only when granted.
origin = socket.socket()
origin.bind(("127.0.0.1", 0))
origin.listen(64)
port = origin.getsockname()[1]
def serve_origin():
    while True:
        c, _ = origin.accept()
        try:
            c.recv(4096)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\norigin\n")
        finally:
            c.close()
threading.Thread(target=serve_origin, daemon=True).start()

status, sb = call("POST", "/v1/sandboxes", {"profile": {"extends": "untrusted",
                  "network": {"mode": "proxy", "allow_private": True}}})
assert status == 201, sb
base = f"/v1/sandboxes/{sb['id']}"

def sh(script):
    s, r = call("POST", base + "/exec", {"argv": ["sh", "-c", script]})
    assert s == 200, r
    return r["exit_code"], r["stdout"] + r["stderr"]

grants = {
    "egress": {"kind": "egress", "host": "127.0.0.1", "port": port},
    "bind": {"kind": "bind", "host_path": host_dir, "path": "/mnt/bench"},
}
times = {k: {"widen": [], "narrow": []} for k in grants}
for i in range(runs):
    for kind, body in grants.items():
        t0 = time.perf_counter()
        s, g = call("POST", base + "/grants", body)
        t1 = time.perf_counter()
        assert s == 201, g
        check = i < 3
        if check and kind == "bind":
            code, out = sh("cat /mnt/bench/data.txt")
            assert code == 0 and "bound-data" in out, out
        if check and kind == "egress":
            code, out = sh(f"curl -sS -m 5 http://127.0.0.1:{port}/")
            assert "origin" in out, out
        t2 = time.perf_counter()
        s, _ = call("DELETE", f"{base}/grants/{g['id']}")
        t3 = time.perf_counter()
        assert s == 204
        if check and kind == "bind":
            code, out = sh("cat /mnt/bench/data.txt")
            assert code != 0, out
        if check and kind == "egress":
            code, out = sh(f"curl -sS -m 5 http://127.0.0.1:{port}/")
            assert "denied" in out, out
        times[kind]["widen"].append((t1 - t0) * 1000)
        times[kind]["narrow"].append((t3 - t2) * 1000)

def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

print(f"build: {profile}, runs: {runs}, load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")
print("| grant | step | median | p90 | p99 | max |")
print("|---|---|---:|---:|---:|---:|")
for kind in grants:
    for step in ("widen", "narrow"):
        xs = times[kind][step]
        print(f"| {kind} | {step} | {statistics.median(xs):.2f} ms | {q(xs, 90):.2f} ms | {q(xs, 99):.2f} ms | {max(xs):.2f} ms |")
call("DELETE", base)
PY
