#!/usr/bin/env bash
# `cordon serve` against baselines measured in the same run:
#   bare     /bin/true
#   bwrap    bwrap --unshare-all /bin/true (the issue's yardstick)
#   cordon   a warm pool's create + exec /bin/true + delete over the unix
#            socket with a keep-alive client, the pool full before each
#            cycle, then at the pool's refill rate (a build beside each
#            cycle); exec /bin/true in an existing session, back to back
#            and 5 ms apart (bare exec also paced);
#            a code-context cell `1+1`; N clients at once doing
#            create + exec + delete (p99, errors, pool hit ratio); host
#            memory per idle session and the server's RSS.
#
# Usage: benches/serve/run.sh [--runs N] [--idle N] [--clients N] [--warm N] [--write]
#   --write   also write the results into BENCHMARKS.md (this section only)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
runs=300 idle=1000 clients=100 per_client=1 warm="" write=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --idle) idle="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --per-client) per_client="$2"; shift 2 ;;
    --warm) warm="$2"; shift 2 ;;
    --write) write=1; shift ;;
    *) echo "usage: $0 [--runs N] [--idle N] [--clients N] [--per-client N] [--warm N] [--write]" >&2; exit 2 ;;
  esac
done
# The pool holds a burst of every client at once (the issue's 100 clients).
[ -n "$warm" ] || warm=$((clients + 8))
command -v bwrap >/dev/null || { echo "missing: bwrap (install it with: sudo apt-get install bubblewrap)" >&2; exit 1; }

work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
{ cargo build --release -q -p cordon && cargo build --release -q -p cordon-server --example serve_bench; } 2>"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
cordon="$CARGO_TARGET_DIR/release/cordon"
bench="$CARGO_TARGET_DIR/release/examples/serve_bench"

socket="$work/cordon.sock"
CORDON_STATE_DIR="$work/state" "$cordon" serve --socket "$socket" --audit "$work/audit.db" \
  --warm "$warm" --max-sandboxes $((idle + clients + 16)) --max-connections $((clients + 64)) \
  >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
[ -s "$work/serve.out" ] || { echo "the server did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }

"$bench" "$socket" --runs "$runs" --idle "$idle" --clients "$clients" --per-client "$per_client" \
  --server-pid "$server_pid" | tee "$work/results.jsonl"

python3 - "$work/results.jsonl" "$write" "$root" "$runs" "$warm" "$idle" "$clients" "$per_client" <<'PY'
import json, os, sys
path, write, root, runs, warm, idle, clients, per_client = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.strip()]
by = {r["measure"]: r for r in rows}
out = ["## cordon serve (`benches/serve/run.sh`)", ""]
out.append(f"`benches/serve/run.sh --runs {runs} --idle {idle} --clients {clients} --per-client {per_client} --warm {warm}`: "
           "release build, the server on a unix socket with its audit store on, a keep-alive client "
           "(`crates/server/examples/serve_bench.rs`), baselines in the same run.")
out.append("")
out.append("| measure | median ms | p99 ms | notes |")
out.append("|---|---:|---:|---|")
for r in rows:
    if "median_ms" not in r:
        continue
    notes = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("measure", "median_ms", "p99_ms"))
    out.append(f"| {r['measure']} | {r['median_ms']} | {r['p99_ms']} | {notes} |")
for r in rows:
    if "host_mib_per_session" in r:
        out.append("")
        out.append(f"{r['measure']}: {r['host_mib_per_session']} MiB of host memory each (MemAvailable before and after), "
                   f"server RSS {r['server_rss_mib']} MiB.")
text = "\n".join(out) + "\n"
print(text)
if write == "1":
    bm = os.path.join(root, "BENCHMARKS.md")
    old = open(bm).read()
    start = old.find("## cordon serve (`benches/serve/run.sh`)")
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        import re
        m = re.search(r"^## ", old[start + 3:], re.M)
        end = start + 3 + m.start() if m else len(old)
        new = old[:start] + text + ("\n" + old[end:] if m else "")
    open(bm, "w").write(new)
    print(f"(written into {bm})")
PY
