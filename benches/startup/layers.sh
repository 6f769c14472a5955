#!/usr/bin/env bash
# How much of the one-shot gap to bwrap is the layers' own kernel work:
# plain `bwrap --unshare-all /bin/true` (the target's baseline), bwrap
# doing what cordon's layers do that bwrap can do, and cordon, timed in
# alternation (interleaved.py) in the same run.
#
# Usage: benches/startup/layers.sh [--runs N] [--command WORDS] [--parts] [--show] [--keep] [CORDON]
#   --runs N  runs of each command (default 300)
#   --command WORDS  what each sandbox runs, split on blanks (default
#             /bin/true; the target's other case: '/usr/bin/python3 -c pass'),
#             also timed bare
#   --parts   also time plain bwrap plus each part of the layers alone
#             (confinement: seccomp, capabilities, user namespaces, the
#             read-only root, hostname; /etc; the /proc masks; /dev/shm)
#   --show    print the bwrap commands instead (their files are removed
#             on exit: run them with --keep)
#   --keep    keep the work folder (its path is printed)
#   CORDON    the cordon binary (default target/release/cordon; a fresh
#             copy of it is timed, see interleaved.py)
#
# bwrap with cordon's layers, as far as bwrap has them: cordon's seccomp
# program (refusing in the kernel: bwrap has no user-notification
# supervisor), no capabilities, no nested user namespaces, a read-only
# root, the same /etc names (ten host entries bound read-only; the six
# small files cordon writes into its /etc tmpfs, bound here from a scratch
# folder; the localtime link), a tmpfs on /dev/shm, the nine /proc masks
# and read-only /proc/sys and /proc/fs. What bwrap has no counterpart for
# stays out of it and is cordon's alone: cgroups and their removal,
# Landlock, rlimits, the user-notification listener, the run's report and
# audit record.
set -euo pipefail

runs=300 cordon=target/release/cordon show=0 keep=0 parts=0 command=/bin/true
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --show) show=1; shift ;;
    --parts) parts=1; shift ;;
    --command) command="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -*) echo "usage: $0 [--runs N] [--command WORDS] [--parts] [--show] [--keep] [CORDON]" >&2; exit 2 ;;
    *) cordon="$1"; shift ;;
  esac
done
for tool in bwrap python3 cargo; do
  command -v "$tool" >/dev/null || { echo "missing: $tool (Debian: apt-get install bubblewrap python3)" >&2; exit 1; }
done
[ -x "$cordon" ] || { echo "no cordon binary at $cordon: cargo build --release -p cordon" >&2; exit 1; }

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
if [ "$keep" = 1 ]; then echo "work folder: $work"; else trap 'rm -rf "$work"' EXIT; fi
cp "$cordon" "$work/cordon"
(cd "$repo" && cargo run -q --release -p cordon-jail --example seccomp_dump -- "$work/seccomp.bpf") >/dev/null

# Small stand-ins for the files cordon writes into the sandbox's /etc.
mkdir "$work/etc"
printf 'sandbox\n' >"$work/etc/hostname"
printf '127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n' >"$work/etc/hosts"
printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$work/etc/passwd"
printf 'root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n' >"$work/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files\nservices: files\nprotocols: files\n' >"$work/etc/nsswitch.conf"
printf 'nameserver 127.0.0.1\noptions ndots:0\n' >"$work/etc/resolv.conf"

cd "$work"
. "$here/../lib/bwrap.sh"
bwrap_baseline --cwd "$PWD"
bw="${BWRAP[*]}"

# The layers in four parts, each also timed on its own with --parts.
confine="--unshare-user --disable-userns --cap-drop ALL --hostname sandbox --seccomp 3 3<$work/seccomp.bpf"
etc=""
for f in ld.so.cache ld.so.conf ld.so.conf.d alternatives ssl ca-certificates ca-certificates.conf protocols services mime.types; do
  [ -e "/etc/$f" ] && etc+=" --ro-bind /etc/$f /etc/$f"
done
for f in hostname hosts passwd group nsswitch.conf resolv.conf; do
  etc+=" --ro-bind $work/etc/$f /etc/$f"
done
[ -L /etc/localtime ] && etc+=" --symlink $(readlink /etc/localtime) /etc/localtime"
proc=""
for m in keys timer_list kpageflags kpagecount kpagecgroup slabinfo vmallocinfo pagetypeinfo kmsg; do
  [ -e "/proc/$m" ] && proc+=" --ro-bind /dev/null /proc/$m"
done
proc+=" --ro-bind /proc/sys /proc/sys --ro-bind /proc/fs /proc/fs"
shm="--tmpfs /dev/shm"
# Last: bwrap makes the root read-only in the order given.
layers="$bw $confine $shm $etc $proc --remount-ro /"

if [ "$show" = 1 ]; then
  printf 'bwrap: %s\nbwrap-layers: %s\n' "$bw" "$layers"
  exit 0
fi
printf 'load average before: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
part_cmds=()
if [ "$parts" = 1 ]; then
  part_cmds=("bwrap+confine=$bw $confine --remount-ro / $command" "bwrap+etc=$bw $etc $command"
    "bwrap+proc=$bw $proc $command" "bwrap+shm=$bw $shm $command")
fi
python3 "$here/interleaved.py" --runs "$runs" --warmup 20 \
  "bare=$command" \
  "bwrap=$bw $command" \
  "bwrap-layers=$layers $command" \
  "${part_cmds[@]}" \
  "cordon-no-audit=$work/cordon run --no-audit -- $command" \
  "cordon=$work/cordon run --audit $work/audit.db -- $command"
