# Sourced by the .ci scripts whose tests drive the cordon binary.
#
# cordon_bin prints the path of the binary to test: $CORDON_BIN when the
# caller built it (.ci/test.sh passes the one `cargo test --workspace` just
# built: a `cargo build -p cordon` would resolve features differently and
# compile much of the workspace again), else a debug build made here.
cordon_bin() {
    if [ -n "${CORDON_BIN:-}" ]; then
        if [ ! -x "$CORDON_BIN" ]; then
            echo "CORDON_BIN=$CORDON_BIN is not an executable file" >&2
            return 1
        fi
        echo "$CORDON_BIN"
        return
    fi
    cargo build --locked -p cordon >&2
    echo "$(realpath "${CARGO_TARGET_DIR:-target}")/debug/cordon"
}
