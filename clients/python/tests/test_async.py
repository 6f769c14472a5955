"""The asyncio client against the real `cordon serve` (see conftest.py).

Each test runs its coroutine with asyncio.run (no plugin needed)."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

from cordon_client import AsyncClient, AsyncSandbox, Event, NotFound

from conftest import Server

WORK = "/workspace"  # the sandbox's scratch space and working directory


def test_async_sandbox_end_to_end(server: Server) -> None:
    async def main() -> str:
        async with AsyncClient(socket=server.socket) as client:
            async with AsyncSandbox.create(preset="low", client=client) as sb:
                await sb.files.write(f"{WORK}/a.py", "print(6*7)")
                r = await sb.exec(["python3", f"{WORK}/a.py"], timeout=30)
                assert (r.exit_code, r.stdout) == (0, "42\n"), r.stderr
                assert (await sb.files.read(f"{WORK}/a.py")) == b"print(6*7)"
                assert "a.py" in [e.name for e in await sb.files.list(WORK)]

                events: List[Event] = [e async for e in sb.exec_stream(["sh", "-c", "echo s; exit 2"])]
                assert [e.kind for e in events][0] == "started"
                end = events[-1].result
                assert end is not None and end.exit_code == 2
                assert "s\n" in [e.text for e in events if e.kind == "stdout"]

                ctx = await sb.code_context("python")
                await ctx.run("x = 41")
                assert (await ctx.run("x + 1")).value == "42"

                p = await sb.exec_background(["sh", "-c", "echo bg"])
                result = await p.wait()
                assert (result.exit_code, result.stdout) == (0, "bg\n")
                later = await sb.process(p.pid).output(after_seq=0)
                assert later.done and later.stdout == "bg\n"
                assert sb.id in [s.id for s in await AsyncSandbox.list(client=client)]
                gone = sb.id
            with pytest.raises(NotFound):
                await AsyncSandbox.connect(gone, client=client)
            return gone

    assert asyncio.run(main()).startswith("sb")


def test_async_create_awaited_and_concurrent_execs(server: Server) -> None:
    async def main() -> None:
        sb = await AsyncSandbox.create(preset="low", socket=server.socket)
        try:
            results = await asyncio.gather(*(sb.exec(["sh", "-c", f"echo {i}"]) for i in range(8)))
            assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
        finally:
            await sb.delete()
            await sb.close()

    asyncio.run(main())
