#!/bin/sh
# Build, test and package a small project; stop at the first failure.
set -eu

root=$(cd "$(dirname "$0")" && pwd)
out="$root/out"
jobs=${JOBS:-2}

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

clean() {
    rm -rf "$out/build" "$out/dist"
    mkdir -p "$out/build" "$out/dist"
}

configure() {
    log "configure"
    cd "$out/build"
    cmake -DCMAKE_BUILD_TYPE=Release "$root" > configure.log 2>&1 || {
        tail -20 configure.log
        return 1
    }
}

build() {
    log "build with $jobs jobs"
    make -C "$out/build" -j "$jobs" 2>&1 | tee "$out/build/make.log" | grep -E 'error|warning' || true
}

run_tests() {
    log "tests"
    for t in "$out"/build/tests/test_*; do
        [ -x "$t" ] || continue
        if ! "$t" > "$t.log" 2>&1; then
            log "FAILED: $(basename "$t")"
            tail -5 "$t.log"
            return 1
        fi
    done
}

package() {
    version=$(git -C "$root" describe --tags --always 2>/dev/null || echo dev)
    tar -C "$out/build" -czf "$out/dist/tool-$version.tar.gz" bin lib
    sha256sum "$out/dist/tool-$version.tar.gz" > "$out/dist/SHA256SUMS"
    log "packaged tool-$version"
}

clean
configure
build
run_tests
package
