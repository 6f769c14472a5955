#!/usr/bin/env bash
# The Python client's tests (clients/python/tests) against the real
# `cordon serve`, in a virtual environment under target/ (the host's Python
# stays untouched).
#
#   bash .ci/pyclient.sh install   # make the venv: httpx, pytest, hatchling, ./clients/python (PyPI)
#   bash .ci/pyclient.sh test      # build the binary (or take $CORDON_BIN), run pytest on this tree's client
#
# Without the venv `test` prints SKIPPED, and fails in CI
# (CORDON_TESTS_REQUIRE_ALL=1).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/pyclient-venv

case "${1:-test}" in
install)
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    # hatchling: the client's build backend, for the packaging test's
    # offline build (test_packaging.py).
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check httpx pytest 'hatchling>=1.27'
    # Installed as a user would, to prove `pip install ./clients/python` works.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./clients/python
    ;;
test)
    if [ ! -x "$venv/bin/pytest" ]; then
        reason="Python client tests (no $venv: run 'bash .ci/pyclient.sh install')"
        if [ -n "${CORDON_TESTS_REQUIRE_ALL:-}" ]; then
            echo "required: $reason" >&2
            exit 1
        fi
        echo "SKIPPED: $reason"
        exit 0
    fi
    . .ci/cordon-bin.sh
    bin=$(cordon_bin)
    # This tree's client first on the path (the venv's installed copy, made
    # by `install`, may be older); no network needed here.
    PYTHONPATH="$PWD/clients/python/src" CORDON_BIN="$bin" \
        "$venv/bin/python" -m pytest -rs clients/python/tests
    ;;
*)
    echo "usage: $0 install|test" >&2
    exit 2
    ;;
esac
