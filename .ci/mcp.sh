#!/usr/bin/env bash
# `cordon mcp` driven by the official MCP Python SDK (`mcp` from PyPI), one
# virtual environment per major release under target/ (the host's Python
# stays untouched): the 1.x line (the initialize handshake) and the 2.x
# line (the stateless 2026-07-28 revision).
#
#   bash .ci/mcp.sh install   # make the venvs: mcp 1.x / 2.x and pytest (PyPI)
#   bash .ci/mcp.sh test      # build the binary (or take $CORDON_BIN), run the tests under each
#
# Without a venv `test` prints SKIPPED, and fails in CI
# (CORDON_TESTS_REQUIRE_ALL=1).
set -euo pipefail
cd "$(dirname "$0")/.."
majors=(1 2)
spec() { echo "mcp>=$1,<$(($1 + 1))"; }

case "${1:-test}" in
install)
    for m in "${majors[@]}"; do
        venv="target/mcp-venv-$m"
        [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$(spec "$m")" pytest
    done
    ;;
test)
    . .ci/cordon-bin.sh
    bin=$(cordon_bin)
    for m in "${majors[@]}"; do
        venv="target/mcp-venv-$m"
        if [ ! -x "$venv/bin/pytest" ]; then
            reason="MCP SDK $m.x tests (no $venv: run 'bash .ci/mcp.sh install')"
            if [ -n "${CORDON_TESTS_REQUIRE_ALL:-}" ]; then
                echo "required: $reason" >&2
                exit 1
            fi
            echo "SKIPPED: $reason"
            continue
        fi
        echo "== cordon mcp with the MCP Python SDK $("$venv/bin/python" -c 'from importlib.metadata import version; print(version("mcp"))')"
        CORDON_BIN="$bin" \
            "$venv/bin/python" -m pytest -rs -p no:cacheprovider crates/mcp/tests/python
    done
    ;;
*)
    echo "usage: $0 install|test" >&2
    exit 2
    ;;
esac
