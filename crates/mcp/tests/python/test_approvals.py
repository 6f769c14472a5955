"""Policy asks through MCP, with the official Python SDK as the client:
`cordon mcp --policy FILE` puts an exec the policy asks about to the
client as an elicitation (approve/deny, once/session), and `cordon mcp
wrap --cedar FILE` decides each tool call of a wrapped server (a denied
tool is refused naming the rule; an ask is an elicitation too).

Layer proven: the policy gate of both MCP surfaces. Each refusal checks
that the command or tool did not run, and the same call approved (or
allowed) shows that it would have.

Elicitation is a server-to-client request; the stateless 2026-07-28
revision (SDK 2.x against `cordon mcp`) has none, so there an ask is
refused with the structured error, which the tests check instead.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List

import anyio
from mcp import types

from mcpclient import MCP_MAJOR, REPO, ServeServer, over_stdio, text_of, wrapped

EXEC_POLICY = """
@id("echo-asks")
@ask
permit(principal, action == Action::"exec", resource == Program::"echo");

@id("no-rm")
forbid(principal, action == Action::"exec", resource == Program::"rm");
"""


class Person:
    """An elicitation callback that answers with `content` (or declines)
    and keeps every question it was asked."""

    def __init__(self, action: str = "accept", content: Dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = content
        self.asked: List[Any] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params)
        if self.action != "accept":
            return types.ElicitResult(action=self.action)
        return types.ElicitResult(action="accept", content=self.content)


def policy_file(state: Path, text: str) -> str:
    path = state / "policy.cedar"
    path.write_text(text)
    return str(path)


async def exec_in_new_sandbox(t: Any, *argv: str) -> tuple[str, Dict[str, Any]]:
    sid = (await t.ok("sandbox_create"))["sandbox_id"]
    return sid, await t.call("sandbox_exec", sandbox_id=sid, argv=list(argv))


def stateless(t: Any) -> bool:
    return t.protocol >= "2026-07-28"


def decisions(binary: Path, state: Path) -> List[Dict[str, Any]]:
    """The policy decisions in the audit store (`decision` actions)."""
    out = subprocess.run(
        [str(binary), "audit", "--store", str(state / "audit.db"), "export"],
        capture_output=True, check=True, text=True,
    )  # fmt: skip
    records = [json.loads(line) for line in out.stdout.splitlines() if line]
    return [
        r["body"]["detail"]
        for r in records
        if r["kind"] == "api_action" and r["body"]["action"] == "decision"
    ]


def test_an_approved_exec_runs_and_once_asks_again(binary: Path, state: Path) -> None:
    person = Person(content={"decision": "approve", "scope": "once"})

    async def main() -> None:
        policy = policy_file(state, EXEC_POLICY)
        async with over_stdio(binary, state, "--policy", policy, elicitation=person) as t:
            sid, r = await exec_in_new_sandbox(t, "echo", "approved")
            if stateless(t):
                assert r.get("isError") is True
                assert r["structuredContent"]["error"] == "approval_required", r
                return
            assert not r.get("isError"), text_of(r)
            assert r["structuredContent"]["stdout"] == "approved\n"
            assert len(person.asked) == 1
            q = person.asked[0]
            assert "echo approved" in q.message and "echo-asks" in q.message
            assert "policy.cedar:2" in q.message
            schema = q.requestedSchema
            assert schema["properties"]["decision"]["enum"] == ["approve", "deny"]
            assert schema["properties"]["scope"]["enum"] == ["once", "session"]
            # Once covers one call: the next is asked about again.
            r = await t.call("sandbox_exec", sandbox_id=sid, argv=["echo", "again"])
            assert not r.get("isError"), text_of(r)
            assert len(person.asked) == 2
            # A command the policy does not ask about is not asked about.
            await t.ok("sandbox_exec", sandbox_id=sid, argv=["true"])
            assert len(person.asked) == 2

    anyio.run(main)
    if MCP_MAJOR < 2:
        d = decisions(binary, state)
        assert [x["answer"] for x in d] == ["approved once", "approved once", None], d
        assert [x["rule"]["id"] for x in d] == ["echo-asks", "echo-asks", "profile:exec"], d
        assert all(x["outcome"] == "allowed" for x in d), d


def test_session_scope_covers_the_next_call(binary: Path, state: Path) -> None:
    person = Person(content={"decision": "approve", "scope": "session"})

    async def main() -> None:
        policy = policy_file(state, EXEC_POLICY)
        async with over_stdio(binary, state, "--policy", policy, elicitation=person) as t:
            if stateless(t):
                return
            sid, r = await exec_in_new_sandbox(t, "echo", "one")
            assert not r.get("isError"), text_of(r)
            r = await t.call("sandbox_exec", sandbox_id=sid, argv=["echo", "one"])
            assert not r.get("isError"), text_of(r)
            assert len(person.asked) == 1

    anyio.run(main)


def test_declined_gets_the_structured_refusal_and_nothing_runs(binary: Path, state: Path) -> None:
    for person in [Person(action="decline"), Person(content={"decision": "deny"})]:

        async def main() -> None:
            policy = policy_file(state, EXEC_POLICY)
            async with over_stdio(binary, state, "--policy", policy, elicitation=person) as t:
                sid, r = await exec_in_new_sandbox(t, "echo", "x")
                assert r.get("isError") is True, r
                refusal = r["structuredContent"]
                expected = "approval_required" if stateless(t) else "approval_denied"
                assert refusal["error"] == expected, refusal
                assert refusal["rule"]["id"] == "echo-asks"
                assert refusal["rule"]["line"] == 2
                assert refusal["subject"] == {"kind": "exec", "argv": ["echo", "x"], "sandbox_id": sid}
                assert "echo x" in refusal["would_allow"]
                # The command did not run: it would have left a file.
                r = await t.call(
                    "sandbox_exec", sandbox_id=sid, argv=["sh", "-c", "echo x > /tmp/ran"]
                )
                assert not r.get("isError"), text_of(r)
                listing = await t.ok("sandbox_list_files", sandbox_id=sid, path="/tmp")
                assert [e["name"] for e in listing["entries"]] == ["ran"]

        anyio.run(main)


def test_no_elicitation_capability_is_refused_naming_the_grant(binary: Path, state: Path) -> None:
    async def main() -> None:
        policy = policy_file(state, EXEC_POLICY)
        async with over_stdio(binary, state, "--policy", policy) as t:
            _, r = await exec_in_new_sandbox(t, "echo", "x")
            assert r.get("isError") is True, r
            refusal = r["structuredContent"]
            assert refusal["error"] == "approval_required"
            assert "cannot be asked" in refusal["message"]
            assert "an approval of exec `echo x`" in refusal["would_allow"]
            # A forbid is a deny: nobody is asked, the rule is named.
            _, r = await exec_in_new_sandbox(t, "rm", "-rf", "/tmp")
            assert r["structuredContent"]["error"] == "policy_denied"
            assert r["structuredContent"]["rule"]["id"] == "no-rm"

    anyio.run(main)


WRAP_POLICY = """
@id("no-host-reads")
forbid(principal, action == Action::"tool_call", resource)
when { context.tool == "read_host_file" };

@id("leak-asks")
@ask
permit(principal, action == Action::"tool_call", resource)
when { context.tool == "leak" };
"""


def wrap_args(state: Path) -> List[str]:
    fixtures = REPO / "crates" / "cli" / "tests" / "fixtures"
    return [
        "--no-audit",
        "--pins", str(state / "pins.json"),
        "--cedar", policy_file(state, WRAP_POLICY),
        "--ro", str(fixtures),
        "--",
        "/usr/bin/python3",
        str(fixtures / "hostile_mcp.py"),
    ]  # fmt: skip


def test_wrapped_tools_denied_by_policy_are_refused_and_allowed_ones_work(
    binary: Path, state: Path
) -> None:
    async def main() -> None:
        async with wrapped(binary, state, *wrap_args(state)) as t:
            names = {tool["name"] for tool in await t.list_tools()}
            assert {"echo", "read_host_file", "leak"} <= names
            r = await t.call("echo", text="hello")
            assert not r.get("isError"), text_of(r)
            assert "hello" in text_of(r)
            text = await t.error("read_host_file", path="/etc/hostname")
            assert "no-host-reads" in text and "policy.cedar:2" in text, text
            # An ask without the elicitation capability is refused too.
            text = await t.error("leak")
            assert "leak-asks" in text and "cannot be asked" in text, text

    anyio.run(main)


def test_wrapped_ask_goes_to_the_client(binary: Path, state: Path) -> None:
    approve = Person(content={"decision": "approve", "scope": "once"})
    decline = Person(action="decline")

    async def main() -> None:
        async with wrapped(binary, state, *wrap_args(state), elicitation=approve) as t:
            await t.list_tools()
            r = await t.call("leak")
            assert not r.get("isError"), text_of(r)
            assert len(approve.asked) == 1
            q = approve.asked[0]
            assert "leak" in q.message and "leak-asks" in q.message
        async with wrapped(binary, state, *wrap_args(state), elicitation=decline) as t:
            await t.list_tools()
            text = await t.error("leak")
            assert "approval_denied" in text and "leak-asks" in text, text
            assert len(decline.asked) == 1

    anyio.run(main)


def _pending_approval(binary: Path, socket: str) -> Dict[str, Any]:
    """The first approval the server holds (waits up to 20 s)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        out = subprocess.run(
            [str(binary), "approvals", "list", "--json", "--socket", socket],
            capture_output=True, check=True, text=True,
        )  # fmt: skip
        pending = json.loads(out.stdout)["approvals"]
        if pending:
            return pending[0]
        time.sleep(0.05)
    raise AssertionError("no approval became pending on the server")


def _approve(binary: Path, socket: str, approval_id: str) -> None:
    """A person approves `approval_id` on the server."""
    subprocess.run(
        [str(binary), "approvals", "approve", approval_id, "--socket", socket],
        check=True, capture_output=True,
    )  # fmt: skip


def test_a_call_the_servers_policy_holds_names_the_approval_it_waits_on(
    binary: Path, state: Path
) -> None:
    """`cordon mcp --server`: the server's policy puts `echo` to a person,
    and the call waits at the server's API. While it waits, the call's
    progress messages name the pending approval (once) and the command that
    answers it; approved, the call returns the command's output."""
    policy = policy_file(state, EXEC_POLICY)
    serve = ServeServer(binary, state, "--policy", policy, "--approval-timeout", "60s")

    async def main() -> None:
        async with over_stdio(binary, state, "--server", serve.socket) as t:
            sid = (await t.ok("sandbox_create"))["sandbox_id"]
            said: List[str] = []

            async def progress(_progress: float, _total: Any, message: Any) -> None:
                said.append(str(message))

            result: Dict[str, Any] = {}

            async def call() -> None:
                args = {"sandbox_id": sid, "argv": ["echo", "held"]}
                r = await t.session.call_tool("sandbox_exec", args, progress_callback=progress)
                result["r"] = r.model_dump(by_alias=True, exclude_none=True)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                a = await anyio.to_thread.run_sync(_pending_approval, binary, serve.socket)
                with anyio.fail_after(20):
                    while not any(a["id"] in m for m in said):
                        await anyio.sleep(0.05)
                await anyio.sleep(1.5)  # past another look: still told once
                _approve(binary, serve.socket, a["id"])
            r = result["r"]
            assert not r.get("isError"), text_of(r)
            assert r["structuredContent"]["stdout"] == "held\n"
            rule = a["rule"]
            assert [m for m in said if a["id"] in m] == [
                f"waiting for approval {a['id']}: exec of `echo held` (rule {rule['id']}, "
                f"{rule['file']}:{rule['line']}); a person answers with `cordon approvals approve "
                f"{a['id']}` or `cordon approvals deny {a['id']}`, or in the web console"
            ]
            assert rule["id"] == "echo-asks"

    try:
        anyio.run(main)
    finally:
        serve.stop()


CREATE_POLICY = """
@id("low-asks")
@ask
permit(principal, action == Action::"create_sandbox", resource == Profile::"low");
"""


def test_a_held_create_is_not_named_since_the_servers_pending_creates_are_everyones(
    binary: Path, state: Path
) -> None:
    """Boundary: one MCP tenant must not learn of another's pending
    approvals. Through `--server` every request reaches the server as its
    owner, so its pending creates are every client's (and may name a
    secret or a profile): a held `sandbox_create` waits without being told
    of any of them, and still runs once approved."""
    policy = policy_file(state, CREATE_POLICY)
    serve = ServeServer(binary, state, "--policy", policy, "--approval-timeout", "60s")

    async def main() -> None:
        async with over_stdio(binary, state, "--server", serve.socket) as t:
            said: List[str] = []

            async def progress(_progress: float, _total: Any, message: Any) -> None:
                said.append(str(message))

            result: Dict[str, Any] = {}

            async def call() -> None:
                r = await t.session.call_tool(
                    "sandbox_create", {"preset": "low"}, progress_callback=progress
                )
                result["r"] = r.model_dump(by_alias=True, exclude_none=True)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                a = await anyio.to_thread.run_sync(_pending_approval, binary, serve.socket)
                assert a["kind"] == "create", a
                await anyio.sleep(2.5)  # past the first two looks of a held call
                assert said == []
                _approve(binary, serve.socket, a["id"])
            r = result["r"]
            assert not r.get("isError"), text_of(r)
            assert r["structuredContent"]["sandbox_id"]
            assert said == []

    try:
        anyio.run(main)
    finally:
        serve.stop()
