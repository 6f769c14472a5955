"""The official MCP Python SDK (`mcp` from PyPI, 1.x or 2.x) driving the
real `cordon mcp`, over stdio or Streamable HTTP.

1.x: `ClientSession` with the initialize handshake (2025-11-25 and older).
2.x: `mcp.Client`, which first probes `server/discover` (2026-07-28,
stateless) and falls back to the handshake.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List, Optional

import pytest
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REPO = Path(__file__).resolve().parents[4]
MCP_VERSION = version("mcp")
MCP_MAJOR = int(MCP_VERSION.split(".")[0])


def skip_or_fail(reason: str) -> None:
    """Skip with `SKIPPED: reason`, or fail when every test must run (CI)."""
    if os.environ.get("CORDON_TESTS_REQUIRE_ALL"):
        pytest.fail(f"required host feature missing: {reason}", pytrace=False)
    print(f"SKIPPED: {reason}", file=sys.stderr)
    pytest.skip(reason)


def cordon_bin() -> Path:
    return Path(os.environ.get("CORDON_BIN") or REPO / "target" / "debug" / "cordon")


def check_host() -> Path:
    binary = cordon_bin()
    if not binary.exists():
        skip_or_fail(f"no cordon binary at {binary} (cargo build -p cordon, or set CORDON_BIN)")
    if subprocess.run([str(binary), "mcp", "--help"], capture_output=True).returncode != 0:
        skip_or_fail(f"{binary} has no `mcp` command (an older build?)")
    out = subprocess.run([str(binary), "doctor", "--json"], capture_output=True, timeout=60)
    try:
        ok = json.loads(out.stdout)["user_namespaces"]["ok"] is True
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        skip_or_fail("user namespaces are not available here (`cordon doctor`)")
    return binary


class Tools:
    """One connected client: tool calls as plain dicts (camelCase keys, as
    on the wire, whichever SDK major)."""

    def __init__(self, session: Any, protocol: str) -> None:
        self.session = session
        self.protocol = protocol  # the negotiated protocol revision

    async def list_tools(self) -> List[Dict[str, Any]]:
        listed = await self.session.list_tools()
        return [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]

    async def call(self, name: str, **arguments: Any) -> Dict[str, Any]:
        result = await self.session.call_tool(name, arguments)
        return result.model_dump(by_alias=True, exclude_none=True)

    async def ok(self, name: str, **arguments: Any) -> Dict[str, Any]:
        """A call that must succeed: its structured result."""
        r = await self.call(name, **arguments)
        assert not r.get("isError"), f"{name} failed: {text_of(r)}"
        return r["structuredContent"]

    async def error(self, name: str, **arguments: Any) -> str:
        """A call that must be a tool error: its text."""
        r = await self.call(name, **arguments)
        assert r.get("isError") is True, f"{name} should have failed: {r}"
        return text_of(r)


def text_of(result: Dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


@asynccontextmanager
async def _session(transport: Any, elicitation: Any = None) -> AsyncIterator[Tools]:
    """`elicitation`: the SDK's elicitation callback; with one, the client
    declares the elicitation capability."""
    extra = {"elicitation_callback": elicitation} if elicitation else {}
    if MCP_MAJOR >= 2:
        from mcp import Client

        async with Client(transport, **extra) as client:
            yield Tools(client, client.protocol_version)
    else:
        from mcp import ClientSession

        async with transport as streams:
            async with ClientSession(streams[0], streams[1], **extra) as session:
                init = await session.initialize()
                yield Tools(session, str(init.protocolVersion))


def stdio_params(binary: Path, state: Path, *args: str) -> StdioServerParameters:
    env = dict(os.environ, CORDON_STATE_DIR=str(state), XDG_STATE_HOME=str(state))
    return StdioServerParameters(
        command=str(binary), args=["mcp", "--audit", str(state / "audit.db"), *args], env=env
    )


@asynccontextmanager
async def over_stdio(
    binary: Path, state: Path, *args: str, elicitation: Any = None
) -> AsyncIterator[Tools]:
    async with _session(stdio_client(stdio_params(binary, state, *args)), elicitation) as tools:
        yield tools


@asynccontextmanager
async def wrapped(
    binary: Path, state: Path, *args: str, elicitation: Any = None
) -> AsyncIterator[Tools]:
    """`cordon mcp wrap ARGS` (ARGS end with `-- SERVER...`)."""
    env = dict(os.environ, CORDON_STATE_DIR=str(state), XDG_STATE_HOME=str(state))
    params = StdioServerParameters(command=str(binary), args=["mcp", "wrap", *args], env=env)
    async with _session(stdio_client(params), elicitation) as tools:
        yield tools


@asynccontextmanager
async def over_http(url: str, token: Optional[str]) -> AsyncIterator[Tools]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http:
        async with _session(streamable_http_client(url, http_client=http)) as tools:
            yield tools


class HttpServer:
    """`cordon mcp --http 127.0.0.1:0` with tokens in its own state directory."""

    def __init__(self, binary: Path, state: Path, tokens: Dict[str, List[str]]) -> None:
        self.binary = binary
        self.state = state
        self.env = dict(os.environ, CORDON_STATE_DIR=str(state), XDG_STATE_HOME=str(state))
        self.tokens: Dict[str, str] = {}
        for name, extra in tokens.items():
            out = subprocess.run(
                [str(binary), "token", "create", "--json", "--name", name, *extra],
                capture_output=True, env=self.env, check=True,
            )  # fmt: skip
            self.tokens[name] = json.loads(out.stdout)["token"]
        self.log = state / "mcp-http.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(binary), "mcp", "--http", "127.0.0.1:0", "--audit", str(state / "audit.db")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
            )  # fmt: skip
        self.url = self._started()["url"]

    def _started(self) -> Dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"cordon mcp --http exited with {self.proc.returncode}:\n{self.log.read_text()}")
            for line in self.log.read_text(errors="replace").splitlines():
                if line.startswith("{") and '"url"' in line:
                    return json.loads(line)
            time.sleep(0.02)
        pytest.fail(f"cordon mcp --http printed no start line:\n{self.log.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class ServeServer:
    """`cordon serve` on a socket in its own state directory, for
    `cordon mcp --server SOCKET`."""

    def __init__(self, binary: Path, state: Path, *args: str) -> None:
        self.socket = str(state / "cordon.sock")
        env = dict(os.environ, CORDON_STATE_DIR=str(state), XDG_STATE_HOME=str(state))
        self.log = state / "serve.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(binary), "serve", "--socket", self.socket, "--audit", str(state / "serve-audit.db"), *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while '"socket"' not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"cordon serve did not start:\n{self.log.read_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
