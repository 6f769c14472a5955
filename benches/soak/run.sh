#!/usr/bin/env bash
# Soak: many sandboxes, one after another and in parallel, then check that
# nothing was left behind, and that the supervisor library's memory stays
# flat over a long loop in one process.
#
#   1. sequential: N `cordon run` (every layer, the audit record on) in a row
#   2. parallel:   P shell loops of M `cordon run` each, at once
#   3. library:    one process calling `cordon_jail::run` L times
#                  (crates/jail/examples/soak_loop.rs), RSS, descriptors and
#                  children printed every K runs
#
# After 1 and 2 it checks: no process left (the workload carries a marker,
# the cordon binary is this checkout's own), no cgroup `cordon-<pid>-*`
# of a supervisor that is gone, no mount left in this (the host's) mount
# namespace, no file left in the runs' TMPDIR, and the audit store's
# directory holding only the store's own files. Every run must exit 0.
#
# Usage: benches/soak/run.sh [--sequential N] [--parallel P] [--per-loop M]
#                            [--library L] [--every K] [--write]
# Full soak (the defaults): 10000 sequential, 8 x 1000 parallel, 10000 in
# the library loop. --write puts the results into BENCHMARKS.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

sequential=10000
parallel=8
per_loop=1000
library=10000
every=1000
write=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sequential) sequential="$2"; shift 2 ;;
    --parallel) parallel="$2"; shift 2 ;;
    --per-loop) per_loop="$2"; shift 2 ;;
    --library) library="$2"; shift 2 ;;
    --every) every="$2"; shift 2 ;;
    --write) write=1; shift ;;
    *) echo "usage: $0 [--sequential N] [--parallel P] [--per-loop M] [--library L] [--every K] [--write]" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "missing: python3" >&2; exit 1; }

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release -q -p cordon
cargo build --release -q -p cordon-jail --example soak_loop
cordon="$CARGO_TARGET_DIR/release/cordon"
soak_loop="$CARGO_TARGET_DIR/release/examples/soak_loop"

work="$(mktemp -d /tmp/cordon-soak.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/tmp" "$work/audit"
export TMPDIR="$work/tmp"
audit="$work/audit/audit.db"
marker="cordon-soak-$$"
# The workload: a shell that starts a background child and exits, so every
# run also has an orphan to clean up.
cmd=(/bin/sh -c 'sleep 0.01 & echo out; true' "$marker")

cgroups_of_dead_supervisors() {
  find /sys/fs/cgroup -maxdepth 6 -type d -regextype posix-extended -regex '.*/cordon-[0-9]+-[0-9a-f]+' 2>/dev/null | while read -r d; do
    pid="${d##*/cordon-}"; pid="${pid%%-*}"
    [ -d "/proc/$pid" ] || echo "$d"
  done
}
host_mounts() { wc -l </proc/self/mountinfo; }
left_processes() { pgrep -f -- "$marker" | grep -v "^$$\$" || true; pgrep -x -f "$cordon.*" || true; }

# Loop helpers write one line per failed run to $work/failures.
loop() { # count
  local i code
  for ((i = 0; i < $1; i++)); do
    code=0
    "$cordon" run -q --audit "$audit" -- "${cmd[@]}" >/dev/null 2>"$work/last.err" || code=$?
    if [ "$code" != 0 ]; then echo "exit $code: $(head -c 300 "$work/last.err")" >>"$work/failures"; fi
  done
}

: >"$work/failures"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
mounts_before="$(host_mounts)"
cgroups_of_dead_supervisors | sort >"$work/stale.before"

t0="$(date +%s.%N)"
loop "$sequential"
t1="$(date +%s.%N)"
for ((p = 0; p < parallel; p++)); do loop "$per_loop" & done
wait
t2="$(date +%s.%N)"

# Give the last runs' janitors and the kernel a moment, then look.
sleep 1
procs_left="$(left_processes | wc -l)"
mounts_after="$(host_mounts)"
cgroups_of_dead_supervisors | sort >"$work/stale.after"
stale_before="$(wc -l <"$work/stale.before")"
stale_new="$(comm -13 "$work/stale.before" "$work/stale.after" | wc -l)"
tmp_left="$(find "$work/tmp" -mindepth 1 | wc -l)"
audit_files="$(ls -A "$work/audit" | tr '\n' ' ')"
failures="$(wc -l <"$work/failures")"
"$cordon" audit --store "$audit" verify >"$work/verify.txt" 2>&1 && verify=ok || verify="FAILED: $(head -c 300 "$work/verify.txt")"

"$soak_loop" "$library" "$every" "${cmd[@]}" >"$work/library.txt" 2>"$work/library.err" || true
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work" "$sequential" "$parallel" "$per_loop" "$library" "$every" "$t0" "$t1" "$t2" \
  "$procs_left" "$mounts_before" "$mounts_after" "$stale_before" "$stale_new" "$tmp_left" \
  "$audit_files" "$failures" "$verify" "$load_before" "$load_after" "$write" "$root" <<'PY'
import datetime, os, subprocess, sys
(work, seq, par, per, lib, every, t0, t1, t2, procs, mb, ma, sb, sa, tmp_left,
 audit_files, failures, verify, lb, la, write, root) = sys.argv[1:]
seq, par, per, lib = int(seq), int(par), int(per), int(lib)
t0, t1, t2 = float(t0), float(t1), float(t2)
rows = []
for line in open(f"{work}/library.txt"):
    f = line.split()
    if f and f[0] == "run":
        rows.append({"run": int(f[1]), "rss": int(f[3]), "fds": int(f[5]), "children": int(f[7]), "failed": int(f[9])})
lib_err = open(f"{work}/library.err").read().strip().splitlines()[:3]
commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
ok = lambda b: "yes" if b else "NO"
first = rows[1] if len(rows) > 1 else (rows[0] if rows else None)
last = rows[-1] if rows else None
out = ["## Soak (`benches/soak/run.sh`)", ""]
out.append(f"Command: `benches/soak/run.sh --sequential {seq} --parallel {par} --per-loop {per} --library {lib} --every {every}`. "
           f"Date: {now}. Commit: {commit}. Machine: {os.cpu_count()} cores, shared; load average before/after {lb} / {la}.")
out.append("Each run: `cordon run --audit DB -- /bin/sh -c 'sleep 0.01 & echo out; true'` (every layer, the audit record on, an orphan left to clean up).")
out.append("")
out.append("| phase | runs | failed | wall | runs/s |")
out.append("|---|---:|---:|---:|---:|")
out.append(f"| sequential | {seq} | - | {t1 - t0:.0f} s | {seq / (t1 - t0):.1f} |")
out.append(f"| {par} parallel loops | {par * per} | - | {t2 - t1:.0f} s | {par * per / (t2 - t1):.1f} |")
out.append(f"| all CLI runs | {seq + par * per} | {failures} | | |")
out.append("")
out.append("| left behind after the CLI runs | found | clean |")
out.append("|---|---:|---|")
out.append(f"| processes (workload marker, the cordon binary) | {procs} | {ok(procs == '0')} |")
out.append(f"| cgroups of supervisors that are gone, new since the start ({sb} older ones from other runs on the host before) | {sa} | {ok(sa == '0')} |")
out.append(f"| mounts in the host's mount namespace | {mb} before, {ma} after | {ok(mb == ma)} |")
out.append(f"| files in the runs' TMPDIR | {tmp_left} | {ok(tmp_left == '0')} |")
out.append(f"| files next to the audit store | `{audit_files.strip()}` | |")
out.append(f"| `cordon audit verify` | {verify} | {ok(verify == 'ok')} |")
out.append("")
if rows:
    out.append(f"Library loop (`soak_loop {lib} {every}`, one process, `cordon_jail::run` each time):")
    out.append("")
    out.append("| after run | RSS (KiB) | open fds | children | failed |")
    out.append("|---:|---:|---:|---:|---:|")
    for r in rows:
        out.append(f"| {r['run']} | {r['rss']} | {r['fds']} | {r['children']} | {r['failed']} |")
    if first and last:
        out.append("")
        out.append(f"RSS from run {first['run']} to run {last['run']}: {last['rss'] - first['rss']:+d} KiB; "
                   f"descriptors {first['fds']} -> {last['fds']}; children {last['children']} at the end.")
    if lib_err:
        out.append("First library errors: " + " / ".join(lib_err))
text = "\n".join(out) + "\n"
print(text)
if write == "1":
    path = os.path.join(root, "BENCHMARKS.md")
    old = open(path).read()
    start = old.find("## Soak (`benches/soak/run.sh`)")
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        import re
        m = re.search(r"^## ", old[start + 3:], re.M)
        end = start + 3 + m.start() if m else len(old)
        new = old[:start] + text + ("\n" + old[end:] if m else "")
    open(path, "w").write(new)
    print(f"(written into {path})")
PY
