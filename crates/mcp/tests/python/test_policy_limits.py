"""A policy's "allow with limits" on `sandbox_exec`: with `cordon mcp
--policy FILE` (the local engine) the exec gets the permit's timeout and
its memory and process limits as rlimits of its own; with `--server` the
server's policy decides and applies them. Each payload (a fork loop, an
allocation of 256 MiB, a long sleep) is stopped under the rule and not
without it, and the result names the limits applied.

Layer proven: the limits carried from the decision to the exec (the
order's rlimits, set by the workload started on order or started ahead;
the exec's timeout).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, List

import anyio
import pytest

from mcpclient import REPO, ServeServer, over_stdio

FIXTURES = REPO / "crates" / "cli" / "tests" / "fixtures" / "policy_limits"
# Shared with crates/cli/tests/policy_limits.rs: the rules, a fork loop
# (up to 32 children) and an allocation of 256 MiB (exit 3 on MemoryError).
POLICY = (FIXTURES / "policy.cedar").read_text()
FORKS = (FIXTURES / "forks.py").read_text()
MEMORY = (FIXTURES / "memory.py").read_text()


def forked(stdout: str) -> int | None:
    line = stdout.strip()
    if line.endswith("and never refused"):
        return None
    return int(line.split()[1])


@pytest.mark.parametrize("engine", ["local", "server"])
def test_each_limit_stops_its_payload_and_only_under_the_rule(
    binary: Path, state: Path, engine: str
) -> None:
    policy = state / "policy.cedar"
    policy.write_text(POLICY)
    serve = None
    args: List[str] = ["--policy", str(policy)]
    if engine == "server":
        serve_dir = state / "serve"
        serve_dir.mkdir()
        serve = ServeServer(binary, serve_dir, "--policy", str(policy))
        args = ["--server", serve.socket]

    async def main() -> None:
        async with over_stdio(binary, state, *args) as t:
            sid = (await t.ok("sandbox_create"))["sandbox_id"]

            async def run(*argv: str) -> Any:
                return await t.ok("sandbox_exec", sandbox_id=sid, argv=list(argv), timeout="60s")

            # The first exec is started on order; from the second on the
            # session keeps the next one started ahead.
            r = await run("python3", "-c", FORKS, "forks", "free")
            assert forked(r["stdout"]) is None, r
            assert "limits" not in r, r
            for _ in range(2):
                r = await run("python3", "-c", FORKS, "forks", "limited")
                n = forked(r["stdout"])
                assert n is not None and n < 8, r
                assert r["limits"] == {"pids": 8}, r
            r = await run("python3", "-c", FORKS, "forks", "free")
            assert forked(r["stdout"]) is None, r

            r = await run("python3", "-c", MEMORY, "memory", "limited")
            assert r["exit_code"] == 3 and r["stdout"].startswith("MemoryError"), r
            assert r["limits"] == {"memory": 64 << 20}, r
            r = await run("python3", "-c", MEMORY, "memory", "free")
            assert r["exit_code"] == 0 and "allocated 256MiB" in r["stdout"], r

            started = time.monotonic()
            r = await run("sh", "-c", "sleep 10", "time", "limited")
            assert r["timed_out"] is True, r
            assert time.monotonic() - started < 8
            assert r["limits"] == {"timeout_ms": 1000}, r
            started = time.monotonic()
            r = await run("sh", "-c", "sleep 2", "time", "free")
            assert r["exit_code"] == 0 and r["timed_out"] is False, r
            assert time.monotonic() - started >= 2

    try:
        anyio.run(main)
    finally:
        if serve is not None:
            serve.stop()
