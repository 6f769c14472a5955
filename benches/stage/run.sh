#!/usr/bin/env bash
# Staged workspaces: overhead of --stage, listing and promoting 1,000 changes.
# Usage: benches/stage/run.sh [RUNS] [FILES]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python3 benches/stage/bench.py "$@"
