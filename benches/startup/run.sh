#!/usr/bin/env bash
# Sandbox startup benchmark, in one run, against two baselines:
#   bare    /bin/true
#   bwrap   bwrap --unshare-all with mounts equivalent to cordon's default
#   cordon  target/release/cordon run -- /bin/true (every layer on: the default)
# plus `cordon run --no-audit` (the same sandbox without the audit store write),
# the same three around `/usr/bin/python3 -c pass` (the system interpreter by
# its full path: a version manager's `python3` shim on PATH costs far more
# than the sandbox),
# sustained runs per second with both cores busy, and cordon's own peak memory
# per sandbox.
#
# Usage: benches/startup/run.sh [--runs N] [--sustained N] [--write]
#   --runs N        hyperfine runs per command (default 300, at least 200)
#   --sustained N   runs per parallel loop in the throughput test (default 300)
#   --write         also write the results into BENCHMARKS.md (this section only)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

runs=300
sustained=300
write=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --sustained) sustained="$2"; shift 2 ;;
    --write) write=1; shift ;;
    *) echo "usage: $0 [--runs N] [--sustained N] [--write]" >&2; exit 2 ;;
  esac
done
if [ "$runs" -lt 200 ]; then
  echo "--runs must be at least 200" >&2
  exit 2
fi

missing=0
need() { # command, Debian package
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "missing: $1 (install it with: sudo apt-get install $2)" >&2
    missing=1
  fi
}
need hyperfine hyperfine
need bwrap bubblewrap
[ -x /usr/bin/python3 ] || { echo "missing: /usr/bin/python3 (install it with: sudo apt-get install python3)" >&2; missing=1; }
need cargo "rustup (https://rustup.rs)"
[ -x /usr/bin/time ] || { echo "missing: /usr/bin/time (install it with: sudo apt-get install time)" >&2; missing=1; }
[ "$missing" = 0 ] || exit 1

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release -q -p cordon 2>"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
cordon="$CARGO_TARGET_DIR/release/cordon"
# The audit store stays on (it is the default), in a scratch file on the
# same filesystem instead of the user's own store.
audit="$work/audit.db"

# bwrap with what cordon's default profile gives: /usr read-only, the
# /bin /sbin /lib* entries as the host has them (symlinks or directories),
# the /etc files cordon binds, a tmpfs /tmp, a fresh /proc and a minimal
# /dev, the working directory read-only, a new session, every namespace.
. "$root/benches/lib/bwrap.sh"
bwrap_baseline --etc --cwd "$PWD"
bw=("${BWRAP[@]}")

bare_cmd="/bin/true"
bwrap_cmd="${bw[*]} /bin/true"
cordon_cmd="$cordon run --audit $audit -- /bin/true"
noaudit_cmd="$cordon run --no-audit -- /bin/true"
py=/usr/bin/python3
pybare_cmd="$py -c pass"
pybwrap_cmd="${bw[*]} $py -c pass"
pycordon_cmd="$cordon run --audit $audit -- $py -c pass"

# Each command must work before it is timed.
for c in "$bare_cmd" "$bwrap_cmd" "$cordon_cmd" "$noaudit_cmd" "$pybare_cmd" "$pybwrap_cmd" "$pycordon_cmd"; do
  $c || { echo "this command fails here, cannot benchmark it: $c" >&2; exit 1; }
done

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
hyperfine -N --warmup 20 --runs "$runs" --style basic --export-json "$work/latency.json" \
  -n bare "$bare_cmd" -n bwrap "$bwrap_cmd" -n cordon "$cordon_cmd" -n cordon-no-audit "$noaudit_cmd" \
  -n py-bare "$pybare_cmd" -n py-bwrap "$pybwrap_cmd" -n py-cordon "$pycordon_cmd" \
  >"$work/hyperfine.txt" 2>&1 || { cat "$work/hyperfine.txt" >&2; exit 1; }

# Isolated runs: 50 ms idle before each one, as when an agent runs one
# command at a time (some kernel costs are hidden by back-to-back runs).
hyperfine -N --warmup 5 --runs 100 --prepare "sleep 0.05" --style basic --export-json "$work/isolated.json" \
  -n bare "$bare_cmd" -n bwrap "$bwrap_cmd" -n cordon "$cordon_cmd" -n cordon-no-audit "$noaudit_cmd" \
  >"$work/hyperfine-isolated.txt" 2>&1 || { cat "$work/hyperfine-isolated.txt" >&2; exit 1; }

# Sustained throughput: two loops in parallel (one per core), runs/s overall.
sustain() { # label, command...
  local label="$1"; shift
  local t0 t1
  t0="$(date +%s.%N)"
  for _ in 1 2; do
    ( for ((i = 0; i < sustained; i++)); do "$@" >/dev/null; done ) &
  done
  wait
  t1="$(date +%s.%N)"
  "$py" -c "print('$label', 2 * $sustained / ($t1 - $t0))" >>"$work/sustained.txt"
}
sustain bare $bare_cmd
sustain bwrap "${bw[@]}" /bin/true
sustain cordon "$cordon" run --audit "$audit" -- /bin/true
sustain cordon-no-audit "$cordon" run --no-audit -- /bin/true

# Peak memory: the cordon process itself (max RSS) and the sandbox (the
# cgroup's peak, from --report), median of 21 runs each.
for i in $(seq 21); do
  /usr/bin/time -f %M -o "$work/rss-cordon.$i" "$cordon" run --audit "$audit" --report "$work/report.$i.json" -- /bin/true
  /usr/bin/time -f %M -o "$work/rss-noaudit.$i" "$cordon" run --no-audit -- /bin/true
  /usr/bin/time -f %M -o "$work/rss-bwrap.$i" "${bw[@]}" /bin/true
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

"$py" - "$work" "$runs" "$sustained" "$load_before" "$load_after" "$bwrap_cmd" "$write" "$root" <<'PY'
import datetime, glob, json, os, platform, re, statistics, subprocess, sys
work, runs, sustained, load_before, load_after, bwrap_cmd, write, root = sys.argv[1:]
lat = {r["command"]: r for r in json.load(open(f"{work}/latency.json"))["results"]}
med = {k: statistics.median(v["times"]) * 1000 for k, v in lat.items()}
mean = {k: v["mean"] * 1000 for k, v in lat.items()}
p90 = {k: sorted(v["times"])[int(len(v["times"]) * 0.9)] * 1000 for k, v in lat.items()}
iso = {r["command"]: statistics.median(r["times"]) * 1000
       for r in json.load(open(f"{work}/isolated.json"))["results"]}
rps = dict(l.split() for l in open(f"{work}/sustained.txt"))
rps = {k: float(v) for k, v in rps.items()}
def median_file(pattern):
    return statistics.median(int(open(f).read().split()[-1]) for f in glob.glob(pattern))
rss_cordon = median_file(f"{work}/rss-cordon.*")
rss_noaudit = median_file(f"{work}/rss-noaudit.*")
rss_bwrap = median_file(f"{work}/rss-bwrap.*")
peaks = [json.load(open(f)) for f in glob.glob(f"{work}/report.*.json")]
sandbox_peak = statistics.median(p["peak_memory"] for p in peaks)
peak_source = peaks[0].get("peak_memory_source")
layers = ", ".join(l["layer"] for l in peaks[0]["enforcement"]["layers"] if l["enforced"])

def ratio(a, b):
    return med[a] / med[b]
# Issue 14's targets: at most bwrap's time with every layer and the audit
# record on, and on `python3 -c pass` at most bwrap's overhead.
ok_bwrap = ratio("cordon", "bwrap") <= 1.0
py_over = {k: med[f"py-{k}"] - med["py-bare"] for k in ("bwrap", "cordon")}
ok_py = py_over["cordon"] <= py_over["bwrap"]
cpu = ""
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
def ver(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[0]
    except Exception:
        return "?"
commit = ver(["git", "-C", root, "rev-parse", "--short", "HEAD"])
dirty = ver(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"])
out = []
out.append("## Sandbox startup (`benches/startup/run.sh`)")
out.append("")
out.append(f"Command: `benches/startup/run.sh --runs {runs} --sustained {sustained}` "
           f"(hyperfine -N, 20 warmup runs, {runs} runs per command, all seven commands interleaved in one run).")
out.append(f"Date: {now}. Commit: {commit}{' (with uncommitted changes)' if dirty != '?' and dirty else ''}. "
           f"Machine: {os.cpu_count()} cores ({cpu}), kernel {platform.release()}. "
           f"Load average before/after: {load_before} / {load_after} "
           f"(the machine is shared; other builds add noise).")
out.append(f"Versions: {ver(['hyperfine', '--version'])}, {ver(['bwrap', '--version'])}.")
out.append("")
out.append("| command | median | mean | p90 | cordon / this (median) | median, isolated runs | sustained runs/s (2 parallel loops) |")
out.append("|---|---:|---:|---:|---:|---:|---:|")
for k, label in [("bare", "`/bin/true`"), ("bwrap", "`bwrap --unshare-all ...` /bin/true"),
                 ("cordon", "`cordon run -- /bin/true` (default: all layers + audit store)"),
                 ("cordon-no-audit", "`cordon run --no-audit -- /bin/true` (all layers, no audit write)")]:
    r = f"{ratio('cordon', k):.2f}x" if k != "cordon" else "1.00x"
    out.append(f"| {label} | {med[k]:.2f} ms | {mean[k]:.2f} ms | {p90[k]:.2f} ms | {r} | {iso[k]:.2f} ms | {rps[k]:.0f} |")
out.append("")
out.append("| target (issue 14) | cordon (default) | cordon --no-audit | met |")
out.append("|---|---:|---:|---|")
out.append(f"| `/bin/true`: cordon <= 1.0x bwrap | {ratio('cordon','bwrap'):.2f}x | {ratio('cordon-no-audit','bwrap'):.2f}x | {'yes' if ok_bwrap else 'no'} |")
out.append(f"| `/usr/bin/python3 -c pass` (bare {med['py-bare']:.2f} ms): overhead <= bwrap's (+{py_over['bwrap']:.2f} ms) | +{py_over['cordon']:.2f} ms | | {'yes' if ok_py else 'no'} |")
out.append("")
out.append(f"Memory per sandbox (median of 21): cordon process max RSS {rss_cordon/1024:.1f} MiB "
           f"({rss_noaudit/1024:.1f} MiB with --no-audit; bwrap {rss_bwrap/1024:.1f} MiB); "
           f"sandbox peak {sandbox_peak/1024:.0f} KiB ({peak_source}, from --report).")
out.append(f"Layers enforced in these runs (from --report): {layers}.")
out.append("")
out.append("Isolated runs: 100 more runs per command with 50 ms idle before each "
           "(`--prepare 'sleep 0.05'`), as when an agent runs one command at a time.")
out.append(f"Sustained: {sustained} runs in each of 2 parallel shell loops, total runs / elapsed time.")
out.append("")
out.append(f"Raw medians (ms): bare {med['bare']:.3f}, bwrap {med['bwrap']:.3f}, "
           f"cordon {med['cordon']:.3f}, cordon --no-audit {med['cordon-no-audit']:.3f}, "
           f"python3 -c pass: bare {med['py-bare']:.3f}, bwrap {med['py-bwrap']:.3f}, cordon {med['py-cordon']:.3f}; "
           f"isolated: bare {iso['bare']:.3f}, bwrap {iso['bwrap']:.3f}, "
           f"cordon {iso['cordon']:.3f}, cordon --no-audit {iso['cordon-no-audit']:.3f}.")
out.append("")
out.append("bwrap command: `" + re.sub(r"\s+", " ", bwrap_cmd) + "`")
text = "\n".join(out) + "\n"
print(text)
if write == "1":
    path = os.path.join(root, "BENCHMARKS.md")
    old = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    start = old.find("## Sandbox startup (`benches/startup/run.sh`)")
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        # Our section runs until the next "## " heading; keep its
        # "### " subsections (the time breakdown) that follow the table.
        m = re.search(r"^## ", old[start + 3:], re.M)
        end = start + 3 + m.start() if m else len(old)
        section = old[start:end]
        sub = section.find("\n### ")
        keep = section[sub + 1:].rstrip("\n") + "\n" if sub >= 0 else ""
        body = text + ("\n" + keep if keep else "")
        new = old[:start] + body + ("\n" + old[end:] if m else "")
    open(path, "w").write(new)
    print(f"(written into {path})")
PY
