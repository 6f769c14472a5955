#!/usr/bin/env bash
# N clients at once doing create + exec /bin/true + delete against a
# server whose warm pool holds them all, several bursts in a row, with
# the option of a system-wide profile of the last one; then the same
# bursts of bare /bin/true and of bwrap, spawned at once (burst_baseline.py).
#
# Usage: benches/serve/burst.sh [--clients N] [--bursts N] [--perf FILE]
#   --perf FILE   record the last burst with `perf record -a -g` into FILE
#                 (the whole serve_bench call; `perf script -F comm,time`
#                 finds the burst's window)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
clients=100 bursts=3 perf_out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) clients="$2"; shift 2 ;;
    --bursts) bursts="$2"; shift 2 ;;
    --perf) perf_out="$2"; shift 2 ;;
    *) echo "usage: $0 [--clients N] [--bursts N] [--perf FILE]" >&2; exit 2 ;;
  esac
done
command -v bwrap >/dev/null || { echo "missing: bwrap (apt-get install bubblewrap)" >&2; exit 1; }
[ -z "$perf_out" ] || command -v perf >/dev/null || { echo "missing: perf (apt-get install linux-perf)" >&2; exit 1; }

. "$root/benches/serve/serve_lib.sh"
(cargo build --release -q -p cordon-server --example serve_bench) 2>"$work/build.log" ||
  { cat "$work/build.log" >&2; exit 1; }
bench="$CARGO_TARGET_DIR/release/examples/serve_bench"
serve_start --audit "$work/audit.db" --warm $((clients + 8)) \
  --max-sandboxes $((clients + 64)) --max-connections $((clients + 64))

for i in $(seq "$bursts"); do
  # serve_bench waits for the pool to be full before it measures.
  run=("$bench" "$socket" --runs 1 --idle 1 --clients "$clients" --per-client 1 --server-pid "$server_pid")
  if [ -n "$perf_out" ] && [ "$i" = "$bursts" ]; then
    run=(perf record -q -a -g -o "$perf_out" -- "${run[@]}")
  fi
  "${run[@]}" | grep 'clients at once'
  sleep 3
done

# The same burst without cordon, in the same run: N bare /bin/true and N
# `bwrap --unshare-all /bin/true` (the yardstick of run.sh) spawned at once.
. "$root/benches/lib/bwrap.sh"
bwrap_baseline
bw="${BWRAP[*]}"
python3 "$root/benches/serve/burst_baseline.py" --clients "$clients" --bursts "$bursts" \
  bare=/bin/true "bwrap=$bw /bin/true"
