"""Approvals through the client against a real `cordon serve --policy`
(see conftest.py): an exec that a Cedar rule asks about waits until
``client.approve`` answers it; ``client.deny`` makes it fail with
:class:`PolicyRefused` naming the subject, the rule and what would allow it.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from cordon_client import AsyncClient, AsyncSandbox, Client, Conflict, PolicyRefused, Sandbox

from conftest import Server, running_server

POLICY = """
@id("ask-deploy")
@ask
@offer("once,session,duration,persistent")
permit(principal, action == Action::"exec", resource)
when { context.program == "echo" && context.argv.contains("deploy") };
"""


@pytest.fixture(scope="module")
def policy_server() -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="cordon-pyclient-policy-") as tmp:
        policy = Path(tmp) / "policy.cedar"
        policy.write_text(POLICY)
        with running_server("--policy", str(policy), "--approval-timeout", "20s") as srv:
            yield srv


@pytest.fixture(scope="module")
def asking_server() -> Iterator[Server]:
    """A server of its own: the persistent answer above widens the other's
    policy to every `echo deploy`."""
    with tempfile.TemporaryDirectory(prefix="cordon-pyclient-asks-") as tmp:
        policy = Path(tmp) / "policy.cedar"
        policy.write_text(POLICY)
        with running_server("--policy", str(policy), "--approval-timeout", "20s") as srv:
            yield srv


def _next_pending(client: Client, seen: List[str]) -> Dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for a in client.approvals():
            if a["id"] not in seen:
                return a
        time.sleep(0.05)
    raise AssertionError("no approval became pending")


def _exec_in_thread(sb: Sandbox, argv: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = sb.exec(argv)
        except Exception as e:  # noqa: BLE001 (handed to the test)
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    out["thread"] = t
    return out


def test_approve_lets_the_waiting_exec_run_and_deny_refuses_it(policy_server: Server) -> None:
    with Client(socket=policy_server.socket) as client, Sandbox.create(preset="low", client=client) as sb:
        waiting = _exec_in_thread(sb, ["echo", "deploy", "1"])
        a = _next_pending(client, [])
        assert a["kind"] == "exec" and a["subject"]["argv_prefix"] == ["echo", "deploy", "1"]
        assert a["rule"]["id"] == "ask-deploy" and a["session"] == sb.id
        assert client.approval(a["id"])["state"] == "pending"
        answered = client.approve(a["id"], "session")
        assert answered["state"] == "approved" and answered["scope"] == {"kind": "session"}
        waiting["thread"].join(30)
        assert waiting["result"].stdout == "deploy 1\n"
        # The session grant covers `echo deploy ...` in this sandbox.
        assert sb.exec(["echo", "deploy", "2"]).stdout == "deploy 2\n"

        with Sandbox.create(preset="low", client=client) as other:
            waiting = _exec_in_thread(other, ["echo", "deploy", "3"])
            b = _next_pending(client, [a["id"]])
            assert client.deny(b["id"])["state"] == "denied"
            waiting["thread"].join(30)
            err = waiting["error"]
            assert isinstance(err, PolicyRefused) and err.status == 403
            assert err.code == "approval_denied" and err.approval == b["id"]
            assert err.subject == {"kind": "exec", "argv_prefix": ["echo", "deploy", "3"]}
            assert err.rule and err.rule["id"] == "ask-deploy"
            assert err.would_allow and "echo deploy" in err.would_allow


def test_a_persistent_answer_needs_confirm(policy_server: Server) -> None:
    with Client(socket=policy_server.socket) as client, Sandbox.create(preset="low", client=client) as sb:
        seen = [a["id"] for a in client.approvals(None)]
        waiting = _exec_in_thread(sb, ["echo", "deploy", "p"])
        a = _next_pending(client, seen)
        with pytest.raises(Conflict) as err:
            client.approve(a["id"], "persistent")
        assert f"grant-{a['id']}" in err.value.body["rule"]
        assert client.approval(a["id"])["state"] == "pending"
        assert client.approve(a["id"], "persistent", confirm=True)["state"] == "approved"
        waiting["thread"].join(30)
        assert waiting["result"].stdout == "deploy p\n"
        with pytest.raises(ValueError):
            client.approve(a["id"], "duration")


def test_a_call_that_waits_on_an_approval_names_it(asking_server: Server, caplog: pytest.LogCaptureFixture) -> None:
    # By default: one warning of the `cordon_client` logger, naming the
    # approval, what was asked and the command that answers it.
    caplog.set_level(logging.WARNING, logger="cordon_client")
    with Client(socket=asking_server.socket) as client, Sandbox.create(preset="low", client=client) as sb:
        seen = [a["id"] for a in client.approvals(None)]
        waiting = _exec_in_thread(sb, ["echo", "deploy", "told"])
        a = _next_pending(client, seen)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and a["id"] not in caplog.text:
            time.sleep(0.05)
        time.sleep(1.5)  # past another look: still told once
        client.approve(a["id"])
        waiting["thread"].join(30)
        assert waiting["result"].stdout == "deploy told\n"
    told = [r.getMessage() for r in caplog.records if a["id"] in r.getMessage()]
    assert told == [
        f"waiting for approval {a['id']}: exec `echo deploy told` (rule ask-deploy, "
        f"{a['rule']['file']}:{a['rule']['line']}); a human answers with "
        f"`cordon approvals approve {a['id']}` or `cordon approvals deny {a['id']}`"
    ], caplog.text
    # A call that is not held says nothing.
    caplog.clear()
    with Client(socket=asking_server.socket) as client, Sandbox.create(preset="low", client=client) as sb:
        assert sb.exec(["sh", "-c", "sleep 1.5; echo quiet"]).stdout == "quiet\n"
    assert not [r for r in caplog.records if r.name == "cordon_client"], caplog.text


def test_on_approval_receives_the_approval_sync_and_async(asking_server: Server) -> None:
    got: List[Dict[str, Any]] = []
    with Client(socket=asking_server.socket, on_approval=got.append) as client:
        with Sandbox.create(preset="low", client=client) as sb:
            waiting = _exec_in_thread(sb, ["echo", "deploy", "callback"])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not got:
                time.sleep(0.05)
            assert [g["subject"]["argv_prefix"] for g in got] == [["echo", "deploy", "callback"]]
            assert got[0]["session"] == sb.id
            client.deny(got[0]["id"])
            waiting["thread"].join(30)
            assert isinstance(waiting["error"], PolicyRefused)

    async def held_async() -> List[Dict[str, Any]]:
        told: List[Dict[str, Any]] = []
        async with AsyncClient(socket=asking_server.socket, on_approval=told.append) as client:
            async with await AsyncSandbox.create(preset="low", client=client) as sb:
                call = asyncio.ensure_future(sb.exec(["echo", "deploy", "async"]))
                for _ in range(400):
                    if told:
                        break
                    await asyncio.sleep(0.05)
                assert told, "the async client named no approval"
                await client.approve(told[0]["id"])
                assert (await call).stdout == "deploy async\n"
        return told

    told = asyncio.run(held_async())
    assert [t["subject"]["argv_prefix"] for t in told] == [["echo", "deploy", "async"]]
