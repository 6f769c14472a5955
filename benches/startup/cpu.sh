#!/usr/bin/env bash
# CPU per one-shot run (all processes of the run, `perf stat` task-clock),
# interleaved rounds of bwrap and cordon in the same run. On a shared
# machine wall-clock medians swing with the other tenants' load; the CPU a
# run consumes moves far less, so this is the steadier comparison with
# bubblewrap.
#
# Usage: benches/startup/cpu.sh [--rounds N] [--runs N] [CORDON_BINARY...]
#   --rounds N   interleaved rounds (default 3)
#   --runs N     perf stat repetitions per command and round (default 60)
#   CORDON_BINARY  cordon binaries to compare (default: target/release/cordon,
#                built first); e.g. an older build next to the current one
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"

rounds=3
runs=60
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -*) echo "usage: $0 [--rounds N] [--runs N] [CORDON_BINARY...]" >&2; exit 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
for tool in perf bwrap; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (Debian: apt-get install linux-perf bubblewrap)" >&2; exit 1; }
done
if [ ${#bins[@]} -eq 0 ]; then
  (cd "$root" && cargo build --release -q -p cordon)
  bins=("${CARGO_TARGET_DIR:-$root/target}/release/cordon")
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

# The bwrap command of benches/startup/run.sh (cordon's default mounts).
. "$root/benches/lib/bwrap.sh"
bwrap_baseline --etc
bw=("${BWRAP[@]}")
bw+=(--tmpfs /tmp --proc /proc --dev /dev --ro-bind "$PWD" "$PWD" --chdir "$PWD")

cpu() { # prints the mean task-clock in ms
  perf stat -x, -r "$runs" -e task-clock "$@" 2>&1 >/dev/null | awk -F, '/task-clock/ {printf "%.2f", $1}'
}

printf 'load average before: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
header="round bwrap"
for i in "${!bins[@]}"; do header+=" cordon#$i cordon#$i/bwrap no-audit#$i"; done
echo "$header"
for r in $(seq "$rounds"); do
  line="$r $(cpu "${bw[@]}" /bin/true)"
  b="${line#* }"
  for i in "${!bins[@]}"; do
    c="$(cpu "${bins[$i]}" run --audit "audit$i.db" -- /bin/true)"
    n="$(cpu "${bins[$i]}" run --no-audit -- /bin/true)"
    line+=" $c $(awk -v c="$c" -v b="$b" 'BEGIN {printf "%.2fx", c / b}') $n"
  done
  echo "$line"
done
printf 'load average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
for i in "${!bins[@]}"; do echo "cordon#$i = ${bins[$i]}"; done
