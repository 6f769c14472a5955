"""`cordon mcp` driven by the official MCP Python SDK, over stdio and
Streamable HTTP: the tools, their annotations, errors, output cutting,
and what is left when the client goes away (nothing)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List

import anyio
import pytest

from mcpclient import MCP_MAJOR, HttpServer, ServeServer, over_http, over_stdio, stdio_params

TOOLS = {
    "sandbox_create",
    "sandbox_exec",
    "sandbox_run_code",
    "sandbox_write_file",
    "sandbox_read_file",
    "sandbox_list_files",
    "sandbox_destroy",
}


@pytest.fixture(params=["stdio", "http", "stdio-server"])
def connect(request: pytest.FixtureRequest, binary: Path, state: Path) -> Callable[[], Any]:
    """stdio and HTTP with the engine in process; stdio with the
    sandboxes of a running `cordon serve` (--server SOCKET)."""
    if request.param == "stdio":
        return lambda: over_stdio(binary, state)
    if request.param == "stdio-server":
        serve: ServeServer = request.getfixturevalue("serve_server")
        return lambda: over_stdio(binary, state, "--server", serve.socket)
    server: HttpServer = request.getfixturevalue("http_server")
    return lambda: over_http(server.url, server.tokens["alice"])


def test_protocol_revision(connect: Callable[[], Any]) -> None:
    """2.x speaks the stateless 2026-07-28 revision, 1.x the handshake of 2025-11-25."""

    async def main() -> None:
        async with connect() as t:
            expected = "2026-07-28" if MCP_MAJOR >= 2 else "2025-11-25"
            assert t.protocol == expected

    anyio.run(main)


def test_the_seven_tools_with_honest_annotations(connect: Callable[[], Any]) -> None:
    async def main() -> None:
        async with connect() as t:
            tools = {tool["name"]: tool for tool in await t.list_tools()}
        assert set(tools) == TOOLS
        hints = {name: tool["annotations"] for name, tool in tools.items()}
        for name in ("sandbox_read_file", "sandbox_list_files"):
            assert hints[name]["readOnlyHint"] is True, name
            assert hints[name]["openWorldHint"] is False, name
        for name in ("sandbox_exec", "sandbox_run_code"):
            # Commands can delete files and, with allowed hosts, reach out.
            assert hints[name]["readOnlyHint"] is False, name
            assert hints[name]["destructiveHint"] is True, name
            assert hints[name]["idempotentHint"] is False, name
            assert hints[name]["openWorldHint"] is True, name
        assert hints["sandbox_create"]["destructiveHint"] is False
        assert hints["sandbox_create"]["idempotentHint"] is False
        assert hints["sandbox_write_file"]["destructiveHint"] is True  # replaces a file
        assert hints["sandbox_write_file"]["idempotentHint"] is True
        assert hints["sandbox_destroy"]["destructiveHint"] is True
        for tool in tools.values():
            assert tool["description"], tool["name"]
        assert "sandbox_id" in tools["sandbox_exec"]["inputSchema"]["properties"]

    anyio.run(main)


def test_create_exec_files_code_destroy(connect: Callable[[], Any]) -> None:
    async def main() -> None:
        async with connect() as t:
            created = await t.ok("sandbox_create", preset="low")
            sb = created["sandbox_id"]
            assert sb.startswith("sb-") and created["network"] == "none"

            r = await t.ok("sandbox_exec", sandbox_id=sb, argv=["sh", "-c", "echo out; echo err >&2; exit 3"])
            assert (r["exit_code"], r["stdout"], r["stderr"], r["timed_out"]) == (3, "out\n", "err\n", False)

            r = await t.ok(
                "sandbox_exec", sandbox_id=sb, script='cd .. && pwd; echo "$GREETING"; tr a-z A-Z',
                cwd="/tmp", env={"GREETING": "hello"}, stdin="shout",
            )  # fmt: skip
            assert r["stdout"] == "/\nhello\nSHOUT", r

            w = await t.ok("sandbox_write_file", sandbox_id=sb, path="/tmp/work/data.txt", content="line 1\nline 2\n")
            assert w["bytes_written"] == 14
            r = await t.ok("sandbox_exec", sandbox_id=sb, argv=["wc", "-l", "/tmp/work/data.txt"])
            assert r["stdout"].split()[0] == "2"
            await t.ok("sandbox_exec", sandbox_id=sb, script="printf made > /tmp/work/from-exec")
            listing = await t.ok("sandbox_list_files", sandbox_id=sb, path="/tmp/work")
            names = {e["name"]: e for e in listing["entries"]}
            assert names["data.txt"]["type"] == "file" and names["data.txt"]["size"] == 14
            assert "from-exec" in names
            read = await t.ok("sandbox_read_file", sandbox_id=sb, path="/tmp/work/from-exec")
            assert (read["content"], read["encoding"], read["size"]) == ("made", "utf8", 4)
            part = await t.ok("sandbox_read_file", sandbox_id=sb, path="/tmp/work/data.txt", offset=2, max_bytes=4)
            assert part["content"] == "ne 1" and part["next_offset"] == 6

            binary = await t.ok(
                "sandbox_write_file", sandbox_id=sb, path="/tmp/b.bin", content="AAEC/w==", encoding="base64"
            )
            assert binary["bytes_written"] == 4
            back = await t.ok("sandbox_read_file", sandbox_id=sb, path="/tmp/b.bin")
            assert (back["encoding"], back["content"]) == ("base64", "AAEC/w==")

            c = await t.ok("sandbox_run_code", sandbox_id=sb, language="python", code="x = 41\nprint('set')")
            assert c["stdout"] == "set\n" and c["error"] is None
            c = await t.ok("sandbox_run_code", sandbox_id=sb, language="python", code="x + 1")
            assert c["value"] == "42", "the context keeps its state across calls"
            c = await t.ok("sandbox_run_code", sandbox_id=sb, language="python", code="1/0")
            assert c["error"]["name"] == "ZeroDivisionError"
            c = await t.ok("sandbox_run_code", sandbox_id=sb, code="open('/tmp/work/data.txt').read()")
            assert c["value"] == repr("line 1\nline 2\n"), "the context runs in the same sandbox"

            done = await t.ok("sandbox_destroy", sandbox_id=sb)
            assert done["destroyed"] is True
            gone = await t.error("sandbox_exec", sandbox_id=sb, argv=["true"])
            assert f"no sandbox '{sb}'" in gone and "sandbox_create" in gone

    anyio.run(main)


# Takes 300 MiB and writes every page, or exits 3 on MemoryError.
TAKE_300_MIB = """
import sys
try:
    block = bytearray(300 << 20)
    block[::4096] = b"\\x01" * len(block[::4096])
except MemoryError:
    print("MemoryError", file=sys.stderr)
    sys.exit(3)
print("took it")
"""


def test_a_sandbox_gets_the_memory_it_asks_for_within_the_ceiling(connect: Callable[[], Any]) -> None:
    """`memory` replaces the preset's limit, enforced as `cordon run
    --memory` is (the memory cgroup kills; under RLIMIT_AS the allocation
    fails); beyond the server's ceiling (stdio: the --max-preset's memory;
    HTTP: the token's) it is refused."""

    async def main() -> None:
        async with connect() as t:
            small = await t.ok("sandbox_create", memory="200MiB")
            assert small["memory_bytes"] == 200 << 20, small
            r = await t.ok("sandbox_exec", sandbox_id=small["sandbox_id"], argv=["python3", "-c", TAKE_300_MIB])
            assert r["exit_code"] in (3, 137) and "took it" not in r["stdout"], r
            if r["exit_code"] == 3:  # RLIMIT_AS: Python's MemoryError, and a note on what to do
                assert "sandbox_create takes a larger memory" in r["note"], r
            # The same program in a sandbox given room for it.
            large = await t.ok("sandbox_create", memory=1 << 30)
            assert large["memory_bytes"] == 1 << 30, large
            r = await t.ok("sandbox_exec", sandbox_id=large["sandbox_id"], argv=["python3", "-c", TAKE_300_MIB])
            assert (r["exit_code"], r["stdout"]) == (0, "took it\n"), r
            for sb in (small, large):
                await t.ok("sandbox_destroy", sandbox_id=sb["sandbox_id"])

            beyond = await t.error("sandbox_create", memory="64GiB")
            assert "beyond the ceiling" in beyond, beyond
            assert "memory" in await t.error("sandbox_create", memory="lots")
            # Neither bytes nor text: the error says what is expected.
            for bad in ({"memory": 1.5}, {"ttl": True}):
                text = await t.error("sandbox_create", **bad)
                assert "a whole number of bytes" in text or "a number of seconds" in text, (bad, text)

    anyio.run(main)


def test_a_read_only_write_and_a_failed_lookup_come_with_a_note(connect: Callable[[], Any]) -> None:
    """The model reads the command's own message ("Read-only file system",
    "Name or service not known") with a note on what a sandbox allows:
    where it may write, and that hosts come only from allow_net."""

    async def main() -> None:
        async with connect() as t:
            sb = (await t.ok("sandbox_create"))["sandbox_id"]
            r = await t.ok("sandbox_exec", sandbox_id=sb, script="echo x > /usr/x")
            assert r["exit_code"] != 0 and "Read-only file system" in r["stderr"], r
            assert "only /workspace (the default working directory), /tmp and /dev/shm are writable" in r["note"], r
            lookup = "import socket; socket.getaddrinfo('pkg.example', 443)"
            r = await t.ok("sandbox_exec", sandbox_id=sb, argv=["python3", "-c", lookup])
            assert r["exit_code"] == 1 and "gaierror" in r["stderr"], r
            assert "reach only the hosts given to sandbox_create as allow_net" in r["note"], r
            assert "read-only" not in r["note"], r
            r = await t.ok("sandbox_exec", sandbox_id=sb, script="echo x > /workspace/x && echo x > /tmp/x && echo fine")
            assert (r["exit_code"], r["stdout"]) == (0, "fine\n") and "note" not in r, r
            await t.ok("sandbox_destroy", sandbox_id=sb)

    anyio.run(main)


@pytest.fixture(params=["stdio", "http", "stdio-server"])
def connect_with_pypi(request: pytest.FixtureRequest, binary: Path, state: Path) -> Callable[[], Any]:
    """As ``connect``, where sandbox_create may allow pypi.org."""
    if request.param == "stdio":
        return lambda: over_stdio(binary, state, "--allow-net", "pypi.org")
    if request.param == "stdio-server":
        serve: ServeServer = request.getfixturevalue("serve_server")
        return lambda: over_stdio(binary, state, "--server", serve.socket, "--allow-net", "pypi.org")
    server: HttpServer = request.getfixturevalue("http_server")
    return lambda: over_http(server.url, server.tokens["alice"])


def test_a_refused_connection_is_said_again_in_the_note(connect_with_pypi: Callable[[], Any]) -> None:
    """curl shows only "response 403"; the note says what the proxy
    answered (the host is not in the allowlist) and the argument that
    allows one."""

    async def main() -> None:
        async with connect_with_pypi() as t:
            sb = (await t.ok("sandbox_create", allow_net=["pypi.org"]))["sandbox_id"]
            curl = ["curl", "-sS", "--max-time", "20", "https://denied.example/"]
            r = await t.ok("sandbox_exec", sandbox_id=sb, argv=curl)
            assert r["exit_code"] != 0 and "403" in r["stderr"], r
            assert "egress to denied.example:443 denied (not in the allowlist)" in r["note"], r
            assert '"allow_net"' in r["note"], r
            r = await t.ok("sandbox_exec", sandbox_id=sb, argv=["true"])
            assert "note" not in r, r
            await t.ok("sandbox_destroy", sandbox_id=sb)

    anyio.run(main)


def test_errors_are_tool_errors_and_the_server_stays_up(connect: Callable[[], Any]) -> None:
    async def main() -> None:
        async with connect() as t:
            for tool, args in [
                ("sandbox_exec", {"argv": ["true"]}),
                ("sandbox_run_code", {"code": "1"}),
                ("sandbox_write_file", {"path": "/tmp/x", "content": ""}),
                ("sandbox_read_file", {"path": "/tmp/x"}),
                ("sandbox_list_files", {}),
                ("sandbox_destroy", {}),
            ]:
                text = await t.error(tool, sandbox_id="sb-0000000000000000", **args)
                assert "no sandbox 'sb-0000000000000000'" in text, (tool, text)
            assert "preset" in await t.error("sandbox_create", preset="nonsense")
            # A misspelt or invented argument is refused, never ignored: a
            # sandbox made without the setting the caller thought it asked
            # for, or a command run with the default timeout, is worse.
            unknown = await t.error("sandbox_create", network="full")
            assert "unknown field `network`" in unknown and "allow_net" in unknown, unknown
            sb = (await t.ok("sandbox_create"))["sandbox_id"]
            assert "argv" in await t.error("sandbox_exec", sandbox_id=sb)
            assert "argv" in await t.error("sandbox_exec", sandbox_id=sb, argv=["a"], script="b")
            unknown = await t.error("sandbox_exec", sandbox_id=sb, command="ls", timeout_seconds=5)
            assert "unknown field" in unknown and "script" in unknown, unknown
            assert "'..'" in await t.error("sandbox_read_file", sandbox_id=sb, path="/tmp/../etc/passwd")
            assert "no such file" in await t.error("sandbox_read_file", sandbox_id=sb, path="/nope")
            assert "language" in await t.error("sandbox_run_code", sandbox_id=sb, language="cobol", code="x")
            r = await t.ok("sandbox_exec", sandbox_id=sb, argv=["no-such-command"])
            assert r["exit_code"] == 127 and "not found" in r["note"]
            # Still serving after all that.
            assert len(await t.list_tools()) == 7
            await t.ok("sandbox_destroy", sandbox_id=sb)

    anyio.run(main)


def _audit_records(binary: Path, state: Path) -> List[Dict[str, Any]]:
    """Every record of the test's store, as `cordon audit export` gives them."""
    out = subprocess.run(
        [str(binary), "audit", "--store", str(state / "audit.db"), "export"],
        capture_output=True, check=True, text=True,
    )  # fmt: skip
    return [json.loads(line) for line in out.stdout.splitlines() if line]


def test_every_files_call_is_in_the_audit_store(binary: Path, state: Path) -> None:
    """Reads and listings are recorded as writes are, and a call that
    failed is recorded with its error: what a model read out of a sandbox
    is in the record too."""

    async def main() -> None:
        async with over_stdio(binary, state) as t:
            sb = (await t.ok("sandbox_create"))["sandbox_id"]
            await t.ok("sandbox_write_file", sandbox_id=sb, path="/tmp/a.txt", content="hello")
            await t.ok("sandbox_read_file", sandbox_id=sb, path="/tmp/a.txt")
            await t.ok("sandbox_list_files", sandbox_id=sb, path="/tmp")
            await t.error("sandbox_read_file", sandbox_id=sb, path="/nope")
            await t.ok("sandbox_destroy", sandbox_id=sb)

    anyio.run(main)
    records = _audit_records(binary, state)
    files = [
        (r["body"]["action"], r["body"]["detail"]["path"], r["body"]["detail"]["outcome"])
        for r in records
        if r["kind"] == "api_action" and r["body"]["action"].startswith("file_")
    ]
    assert files[:3] == [
        ("file_write", "/tmp/a.txt", {"ok": 5}),
        ("file_read", "/tmp/a.txt", {"ok": 5}),
        ("file_read", "/tmp", {"ok": 1}),
    ], files
    assert files[3][:2] == ("file_read", "/nope") and "no such file" in files[3][2]["error"], files


def test_calls_the_audit_store_cannot_record_are_refused(binary: Path, state: Path) -> None:
    """Layer: the audit store's commit, fail-closed, as in `cordon serve`.
    While the store cannot take a commit (its head file replaced by a
    directory), no sandbox is handed out and nothing runs in one; once it
    can, calls work again and the refusals are in the store."""
    head = state / "audit.db.head"

    async def main() -> None:
        async with over_stdio(binary, state) as t:
            sb = (await t.ok("sandbox_create"))["sandbox_id"]
            await t.ok("sandbox_exec", sandbox_id=sb, argv=["true"])
            head.unlink()
            head.mkdir()
            text = await t.error("sandbox_create")
            assert "audit store cannot be written" in text, text
            for tool, args in [
                ("sandbox_exec", {"argv": ["true"]}),
                ("sandbox_write_file", {"path": "/tmp/x", "content": "x"}),
                ("sandbox_read_file", {"path": "/etc/hostname"}),
                ("sandbox_run_code", {"code": "1"}),
            ]:
                text = await t.error(tool, sandbox_id=sb, **args)
                assert "audit store cannot be written" in text, (tool, text)
            head.rmdir()
            deadline = time.monotonic() + 20
            while True:
                try:
                    await t.ok("sandbox_exec", sandbox_id=sb, argv=["true"])
                    break
                except AssertionError:
                    assert time.monotonic() < deadline, "calls never resumed"
                    await anyio.sleep(0.1)
            await t.ok("sandbox_destroy", sandbox_id=sb)

    anyio.run(main)
    records = _audit_records(binary, state)
    actions = [r["body"].get("action") for r in records if r["kind"] == "api_action"]
    assert actions.count("refused_unrecorded") >= 4, actions


def test_a_connection_the_audit_store_cannot_record_is_refused(binary: Path, state: Path) -> None:
    """Layer: the audit check of `cordon mcp`'s own proxies, which have
    no Gate. A command already running connects to a host its sandbox may
    reach while the store cannot take a commit: the proxy refuses it
    (403); before, it lets the same connection through."""
    head = state / "audit.db.head"
    # allowed.example does not resolve here: the proxy lets the
    # connection through, then answers 502.
    curl = "curl -s -o /dev/null -w 'code=%{http_code}\\n' --max-time 20 http://allowed.example/"

    async def main() -> None:
        async with over_stdio(binary, state, "--allow-net", "allowed.example") as t:
            sb = (await t.ok("sandbox_create", allow_net=["allowed.example"]))["sandbox_id"]
            r0 = await t.ok("sandbox_exec", sandbox_id=sb, argv=["sh", "-c", curl])
            before = r0["stdout"]
            assert before == "code=502\n", r0
            later: Dict[str, Any] = {}

            async def connect_later() -> None:
                argv = ["sh", "-c", f"sleep 3; {curl}"]
                later.update(await t.ok("sandbox_exec", sandbox_id=sb, argv=argv))

            async with anyio.create_task_group() as tg:
                tg.start_soon(connect_later)
                await anyio.sleep(0.5)
                head.unlink()
                head.mkdir()
                # The create waits for its record's commit: it finds the
                # store broken before the command connects.
                assert "audit store cannot be written" in await t.error("sandbox_create")
            assert later["stdout"] == "code=403\n", later
            head.rmdir()
            deadline = time.monotonic() + 20
            while True:
                try:
                    await t.ok("sandbox_destroy", sandbox_id=sb)
                    break
                except AssertionError:
                    assert time.monotonic() < deadline, "destroy never went through"
                    await anyio.sleep(0.1)

    anyio.run(main)
    refused = [
        r for r in _audit_records(binary, state) if r["kind"] == "egress" and r["body"].get("rule") == "builtin:audit-unavailable"
    ]
    assert refused, "the refused connection is not in the store"


def test_timeout_kills_the_command(connect: Callable[[], Any]) -> None:
    async def main() -> None:
        async with connect() as t:
            sb = (await t.ok("sandbox_create"))["sandbox_id"]
            started = time.monotonic()
            r = await t.ok("sandbox_exec", sandbox_id=sb, script="echo before; sleep 60", timeout=1)
            assert time.monotonic() - started < 30
            assert r["timed_out"] is True and r["exit_code"] == 124 and r["stdout"] == "before\n"
            r = await t.ok("sandbox_exec", sandbox_id=sb, argv=["echo", "after"], timeout="5s")
            assert r["stdout"] == "after\n", "the sandbox lives on after a timeout"

    anyio.run(main)


def test_long_output_is_cut_with_a_note_and_kept_whole_in_the_sandbox(connect: Callable[[], Any]) -> None:
    async def main() -> None:
        async with connect() as t:
            sb = (await t.ok("sandbox_create"))["sandbox_id"]
            script = "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done"
            r = await t.ok("sandbox_exec", sandbox_id=sb, script=script)
            total = sum(len(f"line-{i}\n") for i in range(20000))
            assert len(r["stdout"].encode()) < 17 * 1024, "at most 16 KiB of a stream is shown"
            assert r["stdout"].startswith("line-0\nline-1\n") and r["stdout"].endswith("line-19999\n")
            assert "bytes cut" in r["stdout"]
            note = r["note"]
            assert f"stdout was {total} bytes" in note
            path = next(w for w in note.split() if w.startswith("/tmp/cordon-mcp/")).rstrip(":.,")
            kept = await t.ok("sandbox_read_file", sandbox_id=sb, path=path, offset=total - 11)
            assert kept["size"] == total and kept["content"] == "line-19999\n"
            r = await t.ok("sandbox_exec", sandbox_id=sb, argv=["grep", "-c", "^line-", path])
            assert r["stdout"] == "20000\n", "the whole output is in the file the note names"

    anyio.run(main)


def _processes_with(marker: str) -> List[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


@pytest.mark.parametrize("engine", ["in-process", "server"])
def test_client_gone_leaves_nothing_running(
    binary: Path, state: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    """stdin EOF: every sandbox, its interpreter and what it started die
    (with --server: deleted on the server)."""
    marker = f"cordon-mcp-marker-{uuid.uuid4().hex[:12]}"
    args = ["--server", request.getfixturevalue("serve_server").socket] if engine == "server" else []

    async def main() -> None:
        async with over_stdio(binary, state, *args) as t:
            for _ in range(2):
                sb = (await t.ok("sandbox_create"))["sandbox_id"]
                code = f"import subprocess\np = subprocess.Popen(['sh', '-c', 'sleep 600; : {marker}'])"
                ran = await t.ok("sandbox_run_code", sandbox_id=sb, code=code)
                assert ran["error"] is None, ran
            assert len(_processes_with(marker)) >= 2, "the sandboxes' processes are visible from the host"

    anyio.run(main)
    deadline = time.monotonic() + 20
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == [], "a sandbox outlived its MCP client"


def test_stdin_eof_ends_the_server(binary: Path, state: Path) -> None:
    params = stdio_params(binary, state)
    proc = subprocess.Popen(
        [params.command, *params.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=params.env
    )
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


# --- Streamable HTTP: the guards in front of the tools -------------------


def _post(url: str, headers: Dict[str, str], method: str = "POST") -> int:
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}' if method == "POST" else None
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Content-Type", "application/json")
    req.add_header("Accept", "application/json, text/event-stream")
    req.add_header("MCP-Protocol-Version", "2025-11-25")
    for k, v in headers.items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_http_requires_a_bearer_token(http_server: HttpServer) -> None:
    """Layer: the token check of `cordon mcp --http`."""
    url, good = http_server.url, http_server.tokens["alice"]
    assert _post(url, {}) == 401
    assert _post(url, {"Authorization": "Bearer not-a-token"}) == 401
    assert _post(url, {"Authorization": f"Bearer {good}"}) == 200

    async def main() -> None:
        with pytest.raises(Exception):
            async with over_http(url, None) as t:
                await t.list_tools()

    anyio.run(main)


def test_http_refuses_foreign_origins(http_server: HttpServer) -> None:
    """Layer: the Origin check (a web page the user visits cannot drive the tools)."""
    url, auth = http_server.url, {"Authorization": f"Bearer {http_server.tokens['alice']}"}
    for origin in ["https://evil.example", "http://localhost.evil.example", "null", "http://10.1.2.3:7701"]:
        assert _post(url, {**auth, "Origin": origin}) == 403, origin
    for origin in ["http://localhost:3000", "http://127.0.0.1:7701", "http://[::1]"]:
        assert _post(url, {**auth, "Origin": origin}) == 200, origin


def test_http_refuses_a_foreign_host(http_server: HttpServer) -> None:
    """Layer: rmcp's Host check (a DNS-rebound name reaches 127.0.0.1 with its own Host)."""
    auth = {"Authorization": f"Bearer {http_server.tokens['alice']}"}
    port = http_server.url.split(":")[2].split("/")[0]
    assert _post(http_server.url, {**auth, "Host": f"rebound.evil.example:{port}"}) in (400, 403, 421)
    assert _post(http_server.url, {**auth, "Host": f"localhost:{port}"}) == 200


def test_http_is_post_only(http_server: HttpServer) -> None:
    auth = {"Authorization": f"Bearer {http_server.tokens['alice']}"}
    for method in ["GET", "DELETE", "PUT"]:
        assert _post(http_server.url, auth, method) == 405, method


def test_http_listens_on_loopback_only_unless_told(binary: Path, state: Path) -> None:
    """Layer: the bind check of `cordon mcp --http`."""
    out = subprocess.run(
        [str(binary), "mcp", "--no-audit", "--http", "0.0.0.0:0"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0
    assert "loopback" in out.stderr and "--allow-remote" in out.stderr


def test_http_tokens_see_only_their_own_sandboxes_within_their_ceiling(http_server: HttpServer) -> None:
    """Layer: each token is its own caller (owner check, the token's ceiling)."""

    async def main() -> None:
        async with over_http(http_server.url, http_server.tokens["alice"]) as alice:
            sb = (await alice.ok("sandbox_create", preset="medium", allow_net=["pypi.org"]))["sandbox_id"]
            async with over_http(http_server.url, http_server.tokens["bob"]) as bob:
                for tool, args in [
                    ("sandbox_exec", {"argv": ["true"]}),
                    ("sandbox_read_file", {"path": "/etc/hostname"}),
                    ("sandbox_destroy", {}),
                ]:
                    assert f"no sandbox '{sb}'" in await bob.error(tool, sandbox_id=sb, **args)
                assert "ceiling" in await bob.error("sandbox_create", preset="medium")
                assert "pypi.org" in await bob.error("sandbox_create", preset="low", allow_net=["pypi.org"])
                mine = [(await bob.ok("sandbox_create", preset="low"))["sandbox_id"] for _ in range(2)]
                assert "most" in await bob.error("sandbox_create", preset="low")
                for b in mine:
                    await bob.ok("sandbox_destroy", sandbox_id=b)
            assert "evil.example" in await alice.error("sandbox_create", preset="medium", allow_net=["evil.example"])
            r = await alice.ok("sandbox_exec", sandbox_id=sb, argv=["echo", "still mine"])
            assert r["stdout"] == "still mine\n"
            await alice.ok("sandbox_destroy", sandbox_id=sb)

    anyio.run(main)


def test_http_server_stop_tears_every_sandbox_down(binary: Path, state: Path) -> None:
    marker = f"cordon-mcp-marker-{uuid.uuid4().hex[:12]}"
    server = HttpServer(binary, state, {"t": ["--preset", "low"]})
    try:

        async def main() -> None:
            async with over_http(server.url, server.tokens["t"]) as t:
                sb = (await t.ok("sandbox_create"))["sandbox_id"]
                code = f"import subprocess\np = subprocess.Popen(['sh', '-c', 'sleep 600; : {marker}'])"
                ran = await t.ok("sandbox_run_code", sandbox_id=sb, code=code)
                assert ran["error"] is None, ran

        anyio.run(main)
        ps = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
        ps = "\n".join(line for line in ps.splitlines() if not line.split(None, 2)[-1].startswith("["))
        assert _processes_with(marker), f"the sandbox's process is visible from the host:\n{ps}\n{server.log.read_text()}"
    finally:
        assert server.stop() == 0
    deadline = time.monotonic() + 20
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []
