#!/usr/bin/env bash
# What protecting host-tool files costs a run with a writable directory
# (`filesystem.protect_host_tools`, on by default): the search for git
# repositories below the writable path before the run, the extra binds, and
# the check after the run. Three trees, each run with the protection on and
# off in the same hyperfine run:
#   plain  a directory with no repository (200 directories, 400 files)
#   repo   a git work tree with a submodule and a linked worktree
#   wide   the repository inside a tree of 2,000 directories (the search
#          visits at most 1,024 directories, 4 levels deep, and says so)
#
# Usage: benches/host_tools/run.sh [--runs N]   (default 200)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
runs=200
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    *) echo "usage: $0 [--runs N]" >&2; exit 2 ;;
  esac
done
for c in hyperfine git cargo; do
  command -v "$c" >/dev/null || { echo "missing: $c" >&2; exit 1; }
done
cargo build --release -q -p cordon
cordon="$root/target/release/cordon"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export HOME="$work/home" GIT_CONFIG_NOSYSTEM=1
mkdir -p "$HOME"
g() { git -c user.name=b -c user.email=b@b -c protocol.file.allow=always "$@"; }

mkdir -p "$work/plain"
for i in $(seq 1 200); do mkdir -p "$work/plain/d$i"; echo x > "$work/plain/d$i/a"; echo y > "$work/plain/d$i/b"; done

mkdir -p "$work/lib" && (cd "$work/lib" && g init -q && echo l > l && g add . && g commit -qm l)
mkdir -p "$work/repo" && (cd "$work/repo" && g init -q && echo a > a && g add . && g commit -qm a \
  && g submodule add -q "$work/lib" sub && g commit -qm sub && g worktree add -q wt)

mkdir -p "$work/wide"
for i in $(seq 1 40); do for j in $(seq 1 50); do mkdir -p "$work/wide/d$i/e$j"; done; done
cp -a "$work/repo" "$work/wide/d1/repo"

off="$work/off.toml"
printf '[filesystem]\nprotect_host_tools = false\n' > "$off"
on="$work/on.toml"
printf '[filesystem]\nprotect_host_tools = true\n' > "$on"

cmds=()
names=()
for tree in plain repo wide; do
  for mode in off on; do
    profile="$work/$mode.toml"
    cmds+=("cd $work/$tree && $cordon run --no-audit --profile $profile --cwd rw -- /bin/true")
    names+=("-n" "$tree $mode")
  done
done
hyperfine --warmup 20 --runs "$runs" --export-json "$work/h.json" "${names[@]}" "${cmds[@]}" >/dev/null

python3 - "$work/h.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
print("| tree | protection off (median) | on (median) | added |")
print("|---|---:|---:|---:|")
for tree in ["plain", "repo", "wide"]:
    off = r[f"{tree} off"]["median"] * 1000
    on = r[f"{tree} on"]["median"] * 1000
    print(f"| {tree} | {off:.2f} ms | {on:.2f} ms | {on - off:+.2f} ms |")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git -C "$root" rev-parse --short HEAD)"
