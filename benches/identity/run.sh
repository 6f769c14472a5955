#!/usr/bin/env bash
# Identity-layer benchmark, all on 127.0.0.1, in one run: small HTTPS
# requests to one local origin (its own CA)
#  - direct (no proxy),
#  - through cordon's proxy as an opaque CONNECT tunnel,
#  - through cordon's proxy with TLS interception and placeholder
#    substitution in the Authorization header,
#  - through mitmproxy (mitmdump) with an addon that does the same rewrite.
# mitmproxy comes from PyPI: set MITMDUMP=/path/to/mitmdump, or it is
# installed into a venv under $TMPDIR on first use. Options go to the
# bench binary (--requests N, --conns C, --fresh N).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release -q -p cordon-egress --example identity_bench
bench="$CARGO_TARGET_DIR/release/examples/identity_bench"

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# One origin for every route.
"$bench" --serve-origin "$tmp/origin" & pids+=($!)
for _ in $(seq 200); do [ -s "$tmp/origin" ] && [ -s "$tmp/origin.ca" ] && break; sleep 0.05; done
origin="$(cat "$tmp/origin")"

mitmdump="${MITMDUMP:-}"
if [ -z "$mitmdump" ]; then
  if command -v mitmdump >/dev/null 2>&1; then
    mitmdump="$(command -v mitmdump)"
  else
    venv="${TMPDIR:-/tmp}/cordon-bench-mitmproxy"
    [ -x "$venv/bin/mitmdump" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q mitmproxy; }
    mitmdump="$venv/bin/mitmdump"
  fi
fi
peer_args=()
if [ -x "$mitmdump" ]; then
  port="$(free_port)"
  BENCH_ORIGIN="$origin" \
  BENCH_PH="cordon-bench_token-0123456789abcdef0123456789abcdef" \
  BENCH_VALUE="real-secret-value-for-the-benchmark" \
  "$mitmdump" -q --listen-host 127.0.0.1 --listen-port "$port" \
    --set confdir="$tmp/mitm" \
    --set ssl_verify_upstream_trusted_ca="$tmp/origin.ca" \
    -s "$root/benches/identity/mitm_addon.py" >"$tmp/mitm.log" 2>&1 & pids+=($!)
  wait_port "$port"
  for _ in $(seq 200); do [ -s "$tmp/mitm/mitmproxy-ca-cert.pem" ] && break; sleep 0.05; done
  peer_args=(--peer "127.0.0.1:$port" --peer-ca "$tmp/mitm/mitmproxy-ca-cert.pem"
             --peer-name "mitmproxy $("$mitmdump" --version | awk '/^Mitmproxy/{print $2}')")
else
  echo "NOTE: mitmproxy is not available; the peer row is left out" >&2
fi

echo "## cordon identity benchmark ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -r))"
echo
"$bench" --origin "$tmp/origin" "${peer_args[@]}" "$@"
