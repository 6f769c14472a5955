#!/usr/bin/env bash
# Run the integration tests of the `cordon` and `cordon-session` packages
# as a non-root user.
#
# As root: builds the test binaries, creates the user if it is missing
# ($CORDON_TEST_USER, default "cordontest"), makes the binaries reachable
# by it, and runs every integration test binary as that user with
# CORDON_TESTS_REQUIRE_ALL=1 (a test that would skip fails instead).
# Prints one line per binary and a final "N passed, N failed, N ignored"
# line; exits non-zero if any test failed or a binary could not run.
#
#   sudo .ci/rootless.sh                 # all integration tests
#   sudo .ci/rootless.sh hostile_net     # only binaries whose name matches
#
# The user gets a supplementary group ($user-extra), a range in
# /etc/subgid if it has none, and a file only that group may read.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
user=${CORDON_TEST_USER:-cordontest}
filter=${1:-}

if [ "$(id -u)" != 0 ]; then
    echo "rootless.sh: run as root; it switches to the user '$user' itself" >&2
    exit 2
fi
if ! id "$user" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/sh "$user"
    echo "created user $user"
fi
home=$(getent passwd "$user" | cut -d: -f6)

# The user's supplementary group and a file only that group may read
# (tests/hostile_identity.rs, rootless_only_*): newgidmap must drop the
# group, which needs a range of the user in /etc/subgid.
extra="$user-extra"
getent group "$extra" >/dev/null || groupadd "$extra"
id -nG "$user" | tr ' ' '\n' | grep -qx "$extra" || usermod -aG "$extra" "$user"
grep -q "^$user:" /etc/subgid || usermod --add-subgids 200000-265535 "$user"
group_dir=/var/tmp/cordon-test-group-only
rm -rf "$group_dir"
mkdir "$group_dir"
echo group-secret >"$group_dir/secret"
chown -R "root:$extra" "$group_dir"
chmod 0040 "$group_dir/secret"
chmod 0050 "$group_dir"

# Build as root (cargo and the registry cache live here); collect the
# integration test executables of the two packages from cargo's own JSON
# messages. The whole workspace is named so that features resolve as in
# .ci/test.sh's `cargo test --workspace`, whose build is then reused as it
# is (naming only the two packages would compile much of it again).
mapfile -t bins < <(
    cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
packages = ("crates/cli/Cargo.toml", "crates/session/Cargo.toml")
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and t.get("kind") == ["test"] \
            and m.get("manifest_path", "").endswith(packages):
        print(t["name"] + " " + m["executable"])
'
)
if [ "${#bins[@]}" -eq 0 ]; then
    echo "rootless.sh: no integration test binaries (does 'cargo test --workspace --no-run' build?)" >&2
    exit 1
fi

# The test binaries run the cordon binary at the path compiled into them:
# every directory on the way to both must be searchable by the user.
cordon_bin="$repo/target/debug/cordon"
open_path() {
    local p=$1
    while [ "$p" != / ]; do
        if ! runuser -u "$user" -- test -x "$p"; then
            chmod o+x "$p"
            echo "made $p searchable for $user"
        fi
        p=$(dirname "$p")
    done
}
open_path "$cordon_bin"
# The static build, when .ci/test.sh made one (tests/static_binary.rs).
static_env=()
if [ -n "${CORDON_STATIC_BIN:-}" ]; then
    open_path "$CORDON_STATIC_BIN"
    static_env=(CORDON_STATIC_BIN="$CORDON_STATIC_BIN")
fi
for entry in "${bins[@]}"; do
    open_path "${entry#* }"
done
runuser -u "$user" -- test -r "$repo/crates/cli" || chmod o+rx "$repo/crates/cli"
# policy_cli reads the example policy and its cases from the repository.
runuser -u "$user" -- test -r "$repo/examples/policy/agents.cedar" || chmod -R o+rX "$repo/examples"

passed=0 failed=0 ignored=0 broken=0
logdir=$(mktemp -d /tmp/cordon-rootless-logs.XXXXXX)
chmod 755 "$logdir"
# The user's default state directory (audit store, staged runs) for this
# run only, not the one in its home.
user_state=$(mktemp -d /tmp/cordon-rootless-state.XXXXXX)
chown "$user:" "$user_state"
chmod 700 "$user_state"
trap 'rm -rf "$user_state"' EXIT
for entry in "${bins[@]}"; do
    name=${entry%% *}
    exe=${entry#* }
    if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then
        continue
    fi
    if [ "$name" = static_binary ] && [ -z "${CORDON_STATIC_BIN:-}" ]; then
        echo "$name: not run (CORDON_STATIC_BIN is unset; .ci/test.sh builds the static binary and sets it)"
        continue
    fi
    # Two packages have a binary named engine: one log each, by its file.
    log="$logdir/$(basename "$exe").log"
    # Tests named root_only_* need root by the kernel's design (reading its
    # audit log); they ran in the root pass. Name them, then leave them out.
    root_only=$("$exe" --list 2>/dev/null | sed -nE 's/^(root_only_[A-Za-z0-9_]*): test$/\1/p')
    for t in $root_only; do
        echo "$name: skipped as $user (needs root by design): $t"
    done
    # Same working directory as `cargo test` (the package root).
    set +e
    (cd "$repo/crates/cli" && runuser -u "$user" -- env -i \
        HOME="$home" USER="$user" LOGNAME="$user" PATH=/usr/local/bin:/usr/bin:/bin \
        XDG_STATE_HOME="$user_state" CORDON_STATE_DIR="$user_state/cordon" \
        TMPDIR=/tmp CORDON_TESTS_REQUIRE_ALL=1 CARGO_BIN_EXE_cordon="$cordon_bin" "${static_env[@]}" \
        CORDON_TEST_GROUP_FILE="$group_dir/secret" \
        RUST_BACKTRACE=1 "$exe" --test-threads=2 --skip root_only_) >"$log" 2>&1
    rc=$?
    set -e
    result=$(grep -E '^test result:' "$log" | tail -1 || true)
    p=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$result")
    f=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$result")
    i=$(sed -nE 's/.* ([0-9]+) ignored.*/\1/p' <<<"$result")
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    ignored=$((ignored + ${i:-0}))
    if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
        broken=$((broken + 1))
        echo "$name: exited $rc without a test summary (see $log)"
        tail -5 "$log"
    else
        echo "$name: ${p:-0} passed, ${f:-0} failed, ${i:-0} ignored"
    fi
    if [ "${f:-0}" -ne 0 ]; then
        grep -E '^test .* FAILED$|panicked at' "$log" | sed 's/^/    /'
        echo "    full log: $log"
    fi
done

echo "rootless ($user): $passed passed, $failed failed, $ignored ignored"
if [ "$failed" -ne 0 ] || [ "$broken" -ne 0 ]; then
    exit 1
fi
