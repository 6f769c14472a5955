#!/usr/bin/env bash
# Egress proxy benchmark, all on 127.0.0.1, in one run:
#  - bulk throughput through a CONNECT tunnel vs a direct TCP connection,
#    downloads and uploads (an upload on a tunnel that starts in plaintext
#    passes the proxy's watch for a late TLS ClientHello)
#  - request rate and median added latency of small plain-HTTP requests:
#    direct vs cordon's proxy vs tinyproxy (same one-host allowlist)
# Prints a Markdown table. Options are passed to the bench binary
# (--bulk-mb N, --requests N, --conns N).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release -q -p cordon-egress --example egress_bench
bench="$CARGO_TARGET_DIR/release/examples/egress_bench"

peer_args=()
tmp="$(mktemp -d)"
tp_pid=""
cleanup() {
  if [ -n "$tp_pid" ]; then kill "$tp_pid" 2>/dev/null || true; wait "$tp_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if command -v tinyproxy >/dev/null 2>&1; then
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  # The same allowlist as cordon's: one host (tinyproxy sees the origin by
  # its address, as it has no per-proxy resolve override), default deny.
  printf '^127\\.0\\.0\\.1$\n' > "$tmp/filter"
  cat > "$tmp/tinyproxy.conf" <<CONF
Port $port
Listen 127.0.0.1
Timeout 600
MaxClients 256
LogLevel Critical
LogFile "$tmp/tinyproxy.log"
PidFile "$tmp/tinyproxy.pid"
Allow 127.0.0.1
DisableViaHeader Yes
Filter "$tmp/filter"
FilterExtended On
FilterDefaultDeny Yes
CONF
  tinyproxy -d -c "$tmp/tinyproxy.conf" >"$tmp/tinyproxy.out" 2>&1 &
  tp_pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.05
  done
  peer_args=(--peer "127.0.0.1:$port" --peer-name "tinyproxy $(tinyproxy -v | awk '{print $2}')")
else
  echo "NOTE: tinyproxy is not installed (apt-get install tinyproxy); the peer row is left out" >&2
fi

echo "## cordon egress benchmark ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(uname -r))"
echo
"$bench" "${peer_args[@]}" "$@"
