"""`sandbox_exec` of `true` in an existing sandbox through `cordon mcp`,
timed from the official MCP Python SDK, beside the client's own floor.

cordon has no no-op tool, so the floor is `tools/list` (answered by the
server without touching a sandbox) and, where the revision has it, the
protocol's own no-op `ping` (2026-07-28 dropped it). Every call is one round trip over the transport; the numbers
are per call, measured with time.perf_counter around the SDK call.

    python bench.py --bin target/release/cordon --calls 300 [--http]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "crates" / "mcp" / "tests" / "python"))
from mcpclient import MCP_VERSION, HttpServer, over_http, over_stdio  # noqa: E402


async def timed(n: int, call: Callable[[], Awaitable[Any]]) -> List[float]:
    for _ in range(min(20, n)):
        await call()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t) * 1000)
    return out


def summary(ms: List[float]) -> Dict[str, float]:
    ms = sorted(ms)
    return {
        "median_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[int(len(ms) * 0.9)], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


async def measure(t: Any, calls: int) -> Dict[str, Dict[str, float]]:
    sb = (await t.ok("sandbox_create"))["sandbox_id"]
    session = t.session.session if hasattr(t.session, "session") else t.session
    results: Dict[str, List[float]] = {"ping": [], "tools/list": [], "sandbox_exec true": []}
    try:
        await session.send_ping()
    except Exception:  # the 2026-07-28 revision has no ping
        del results["ping"]

    async def exec_true() -> None:
        r = await t.ok("sandbox_exec", sandbox_id=sb, argv=["true"])
        assert r["exit_code"] == 0

    # Interleaved rounds, so load on the shared machine hits all alike.
    rounds = 5
    for _ in range(rounds):
        if "ping" in results:
            results["ping"] += await timed(calls // rounds, session.send_ping)
        # The session's own call: a 2.x Client would answer from its cache.
        results["tools/list"] += await timed(calls // rounds, session.list_tools)
        results["sandbox_exec true"] += await timed(calls // rounds, exec_true)
    await t.ok("sandbox_destroy", sandbox_id=sb)
    return {k: summary(v) for k, v in results.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(Path(__file__).resolve().parents[2] / "target" / "release" / "cordon"))
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--http", action="store_true", help="Streamable HTTP instead of stdio")
    args = ap.parse_args()
    binary = Path(args.bin)
    with tempfile.TemporaryDirectory(prefix="cordon-mcp-bench-") as tmp:
        state = Path(tmp)
        if args.http:
            server = HttpServer(binary, state, {"bench": ["--preset", "low"]})
            try:
                out = anyio.run(lambda: _over(over_http(server.url, server.tokens["bench"]), args.calls))
            finally:
                server.stop()
        else:
            out = anyio.run(lambda: _over(over_stdio(binary, state), args.calls))
    print(json.dumps({
        "transport": "http" if args.http else "stdio",
        "mcp_sdk": MCP_VERSION,
        "calls": args.calls,
        "load": os.getloadavg(),
        "results": out,
    }, indent=1))  # fmt: skip


async def _over(connect: Any, calls: int) -> Any:
    async with connect as t:
        return await measure(t, calls)


if __name__ == "__main__":
    main()
