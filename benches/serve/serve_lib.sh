# Sourced by the scripts in benches/serve: a release build of cordon and a
# server on a unix socket in a scratch directory, torn down on exit.
#   serve_start [FLAGS...]   sets $work, $socket, $server_pid; exits with
#                            the server's stderr if it does not start
work="$(mktemp -d)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
export PYTHONPATH="$root/benches/serve${PYTHONPATH:+:$PYTHONPATH}"

serve_start() {
  (cd "$root" && cargo build --release -q -p cordon) 2>"$work/build.log" ||
    { cat "$work/build.log" >&2; exit 1; }
  socket="$work/cordon.sock"
  CORDON_STATE_DIR="$work/state" "$CARGO_TARGET_DIR/release/cordon" serve --socket "$socket" "$@" \
    >"$work/serve.out" 2>"$work/serve.err" &
  server_pid=$!
  for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
  [ -S "$socket" ] || { echo "the server did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
}
