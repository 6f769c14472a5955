#!/usr/bin/env bash
# The kernel's cost of installing a seccomp filter, by the length of its
# per-number walk (see install_cost.c). Usage: benches/seccomp/run.sh [N]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
command -v cc >/dev/null || { echo "missing: a C compiler (apt-get install gcc)" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cc -O2 -Wall -o "$out/install_cost" "$here/install_cost.c"
"$out/install_cost" "${1:-82}"
