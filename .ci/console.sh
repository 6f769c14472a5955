#!/usr/bin/env bash
# The web console (`cordon serve` at /ui) in headless Chromium: the Debian
# packages chromium and chromium-driver, driven by playwright-core (npm,
# pinned in crates/console/browser/package-lock.json, installed under
# target/, not in the repository).
#
#   bash .ci/console.sh install   # apt: chromium chromium-driver; npm ci playwright-core
#   bash .ci/console.sh test      # build the binary (or take $CORDON_BIN), run crates/console/browser/console.test.cjs
#
# The test keeps a screenshot under target/console-test/ and prints its
# path. Without Chromium or playwright-core `test` prints SKIPPED, and fails
# in CI (CORDON_TESTS_REQUIRE_ALL=1).
set -euo pipefail
cd "$(dirname "$0")/.."
modules=target/console-browser
chromium=/usr/bin/chromium

case "${1:-test}" in
install)
    missing=()
    for p in chromium chromium-driver; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    command -v npm >/dev/null || missing+=(npm)
    if [ "${#missing[@]}" -gt 0 ]; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
    mkdir -p "$modules"
    cp crates/console/browser/package.json crates/console/browser/package-lock.json "$modules/"
    (cd "$modules" && npm ci --silent --no-audit --no-fund >/dev/null)
    echo "console test: playwright-core in $modules, $($chromium --version 2>/dev/null || echo 'no chromium')"
    ;;
test)
    reason=""
    if [ ! -x "$chromium" ]; then
        reason="console browser test (no $chromium: run 'bash .ci/console.sh install')"
    elif [ ! -d "$modules/node_modules/playwright-core" ]; then
        reason="console browser test (no playwright-core in $modules: run 'bash .ci/console.sh install')"
    fi
    if [ -n "$reason" ]; then
        if [ -n "${CORDON_TESTS_REQUIRE_ALL:-}" ]; then
            echo "required: $reason" >&2
            exit 1
        fi
        echo "SKIPPED: $reason"
        exit 0
    fi
    . .ci/cordon-bin.sh
    bin=$(cordon_bin)
    CORDON_BIN="$bin" \
        CHROMIUM="$chromium" \
        PLAYWRIGHT_CORE="$(realpath "$modules/node_modules/playwright-core")" \
        CONSOLE_ARTIFACTS="$(realpath -m target/console-test)" \
        node crates/console/browser/console.test.cjs
    ;;
*)
    echo "usage: $0 install|test" >&2
    exit 2
    ;;
esac
