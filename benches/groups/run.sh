#!/usr/bin/env bash
# What dropping an unprivileged caller's supplementary groups costs a run:
# one exec of the setuid newgidmap (crates/jail/src/identity.rs), paid only
# by callers that have supplementary groups. Measures newgidmap against a
# held user namespace (it does every check, then the kernel refuses the
# second write of the map, so each call is the same work but the write)
# and, as the baseline in the same run, a plain exec of /bin/true.
#
# Run as an unprivileged user with a range in /etc/subgid, for example:
#   runuser -u cordontest -- benches/groups/run.sh [--runs 300]
set -euo pipefail
runs=300
[ "${1:-}" = --runs ] && runs=$2
if [ "$(id -u)" = 0 ]; then
    echo "run as an unprivileged user with a /etc/subgid range (root needs no newgidmap)" >&2
    exit 2
fi
user=$(id -un)
gid=$(id -g)
subgid=$(awk -F: -v u="$user" '$1 == u { print $2; exit }' /etc/subgid)
[ -n "$subgid" ] || { echo "$user has no range in /etc/subgid" >&2; exit 2; }
unshare -U sleep 600 &
holder=$!
trap 'kill $holder' EXIT
sleep 0.2
newgidmap "$holder" 1000 "$gid" 1 65533 "$subgid" 1
echo "date: $(date -u '+%F %H:%M UTC'); load: $(cut -d' ' -f1-3 /proc/loadavg); $(dpkg-query -W -f='uidmap ${Version}' uidmap 2>/dev/null || true)"
hyperfine -N -i --warmup 20 --runs "$runs" \
    "newgidmap $holder 1000 $gid 1 65533 $subgid 1" \
    /bin/true
