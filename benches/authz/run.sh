#!/usr/bin/env bash
# Policy decision latency (issue 12: 100 rules, median <= 50 us).
# Builds the example in release and prints median/p90/p99 of single
# decisions for the builtin authorizer, an empty Cedar policy and two
# policies of 100 rules, all in one run.
#   benches/authz/run.sh [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "commit $(git rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%F %H:%M UTC')"
cargo run --quiet --release -p cordon-authz --example decide_bench -- "${1:-20000}"
