"""The blocking client against the real `cordon serve` (see conftest.py)."""

from __future__ import annotations

import time
from typing import Callable, List

import pytest

from cordon_client import (
    BadRequest,
    Client,
    CordonError,
    Event,
    Hint,
    NotFound,
    Sandbox,
    Unprocessable,
)

from wheels import build_wheel

WORK = "/workspace"  # the sandbox's scratch space and working directory
WAIT_S = 60.0


def wait_until(what: str, check: Callable[[], bool]) -> None:
    """Poll ``check`` until true (bounded; this is not a speed assertion)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    pytest.fail(f"{what}: not within {WAIT_S:.0f} s")


def test_lifecycle_create_list_get_delete(client: Client) -> None:
    with Sandbox.create(preset="low", client=client) as sb:
        info = sb.info()
        assert info.id == sb.id and info.state == "running"
        assert sb.id in [s.id for s in Sandbox.list(client=client)]
        again = Sandbox.connect(sb.id, client=client)
        assert again.id == sb.id
        r = sb.exec(["echo", "hello"])
        assert (r.exit_code, r.reason, r.timed_out, r.stdout) == (0, "exited", False, "hello\n")
        gone = sb.id
    # leaving the block deleted it
    with pytest.raises(NotFound) as err:
        Sandbox.connect(gone, client=client)
    assert err.value.status == 404
    assert gone not in [s.id for s in client.sandboxes()]


def test_state_kept_across_execs_file(sandbox: Sandbox) -> None:
    r = sandbox.exec(["sh", "-c", f"echo kept > {WORK}/state.txt"])
    assert r.ok, r.stderr
    r = sandbox.exec(["cat", f"{WORK}/state.txt"])
    assert r.stdout == "kept\n"
    assert sandbox.files.read(f"{WORK}/state.txt") == b"kept\n"


def test_state_kept_across_execs_installed_package(sandbox: Sandbox) -> None:
    # A wheel built here and installed with pip from the file, not from an
    # index: the test must not depend on a registry being reachable from the
    # sandbox (that needs egress rules and the network, which a test of
    # session state has no business needing).
    name, wheel = build_wheel("cordon_probe", "1.0", {"cordon_probe/__init__.py": "def answer():\n    return 42\n"})
    sandbox.files.write(f"{WORK}/{name}", wheel)
    install = sandbox.exec(
        ["python3", "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir",
         "--disable-pip-version-check", "--target", f"{WORK}/site", f"{WORK}/{name}"],
        timeout=120,
    )  # fmt: skip
    assert install.ok, install.stdout + install.stderr
    r = sandbox.exec(
        ["python3", "-c", "import cordon_probe; print(cordon_probe.answer())"],
        env={"PYTHONPATH": f"{WORK}/site"},
    )
    assert (r.exit_code, r.stdout) == (0, "42\n"), r.stderr


def test_code_context_keeps_variables(sandbox: Sandbox) -> None:
    with sandbox.code_context("python") as ctx:
        first = ctx.run("x = 41")
        assert first.ok and first.value is None and not first.restarted
        r = ctx.run("x + 1")
        assert r.value == "42" and r.error is None
        printed = ctx.run("print('hi', x)")
        assert printed.stdout == "hi 41\n"
        failed = ctx.run("1 / 0")
        assert failed.error is not None and failed.error.name == "ZeroDivisionError"
        assert "ZeroDivisionError" in failed.error.traceback
        assert ctx.run("x").value == "41"  # an error does not lose the state


def test_code_context_timeout_and_restart(sandbox: Sandbox) -> None:
    ctx = sandbox.code_context("python")
    ctx.run("kept = 1")
    slow = ctx.run("while True: pass", timeout=1)
    assert slow.error is not None and slow.error.name == "TimeoutError", slow
    after = ctx.run("'kept' in globals()")
    assert after.restarted and after.value == "False"  # a new interpreter
    died = ctx.run("import os; os._exit(3)")
    assert died.error is not None and died.error.name == "InterpreterDied", died
    again = ctx.run("6 * 7")
    assert again.restarted and again.value == "42"
    assert ctx.id in [c.id for c in sandbox.code_contexts()]
    ctx.delete()
    assert ctx.id not in [c.id for c in sandbox.code_contexts()]
    with pytest.raises(NotFound):
        ctx.run("1")


def test_exec_stream_delivers_output_before_the_end(sandbox: Sandbox) -> None:
    # The command waits for a file that the test writes only after it has
    # seen the first chunk: the chunk must arrive while the command runs.
    script = (
        f"echo ready; while [ ! -e {WORK}/go ]; do sleep 0.02; done; echo late >&2; exit 3"
    )
    events: List[Event] = []
    for ev in sandbox.exec_stream(["sh", "-c", script], timeout=WAIT_S):
        events.append(ev)
        if ev.kind == "stdout" and ev.text == "ready\n":
            sandbox.files.write(f"{WORK}/go", b"")
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-1] == "exited", kinds
    assert "ready\n" in [e.text for e in events if e.kind == "stdout"]
    assert "late\n" in [e.text for e in events if e.kind == "stderr"]
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    end = events[-1].result
    assert end is not None and (end.exit_code, end.reason, end.timed_out) == (3, "exited", False)


def test_leaving_an_exec_stream_ends_its_command(sandbox: Sandbox) -> None:
    stream = sandbox.exec_stream(["sh", "-c", "echo started; sleep 600"])
    pid = None
    for ev in stream:
        pid = ev.pid if ev.kind == "started" else pid
        if ev.kind == "stdout":
            break
    stream.close()  # the client hangs up mid-stream
    assert pid is not None
    wait_until(
        "the command of a stream nobody reads is ended",
        lambda: not any(p.running for p in sandbox.processes() if p.pid == pid),
    )
    assert sandbox.exec(["echo", "still here"]).stdout == "still here\n"


def test_background_output_reattach_after_it_ended(client: Client, sandbox: Sandbox) -> None:
    p = sandbox.exec_background(["sh", "-c", "echo one; echo two >&2; echo three; exit 5"])
    wait_until("the background process ends", lambda: p.output().done)
    # a fresh connection and handle, after the producing exec is gone
    with Client(socket=client.http.endpoint.socket) as other:
        sb2 = Sandbox.connect(sandbox.id, client=other)
        listed = {pi.pid: pi for pi in sb2.processes()}
        assert listed[p.pid].running is False and listed[p.pid].exit_code == 5
        full = sb2.process(p.pid).output(after_seq=0)
        assert full.done
        assert full.stdout == "one\nthree\n" and full.stderr == "two\n"
        # after a sequence number: exactly the events after it, in order
        first = full.events[0]
        rest = sb2.process(p.pid).output(after_seq=first.seq or 0)
        assert [(e.seq, e.kind, e.data) for e in rest.events] == [
            (e.seq, e.kind, e.data) for e in full.events[1:]
        ]
        # the streamed form replays from the start and ends with the exit
        result = sb2.process(p.pid).wait()
        assert (result.exit_code, result.stdout, result.stderr) == (5, "one\nthree\n", "two\n")


def test_background_stdin_and_signal(sandbox: Sandbox) -> None:
    cat = sandbox.exec_background(["cat"])
    cat.write_stdin("over stdin\n")
    cat.write_stdin(b"", eof=True)
    r = cat.wait()
    assert (r.exit_code, r.stdout) == (0, "over stdin\n")

    sleeper = sandbox.exec_background(["sleep", "600"])
    wait_until("sleep starts", lambda: any(e.kind == "started" for e in sleeper.output().events))
    sleeper.signal("TERM")
    r = sleeper.wait()
    assert r.reason == "signaled" and r.exit_code == 128 + 15, r


def test_timeout_kills_the_exec_tree_not_the_session(sandbox: Sandbox) -> None:
    # A daemonized grandchild (own session, parent gone) would write the
    # marker 2 s later if the timeout left it alive.
    script = f"setsid sh -c 'sleep 2; echo leaked > {WORK}/leak' & sleep 600"
    r = sandbox.exec(["sh", "-c", script], timeout=1)
    assert (r.exit_code, r.reason, r.timed_out) == (124, "timed_out", True), r
    time.sleep(3)  # past the moment the grandchild would have written
    look = sandbox.exec(["sh", "-c", f"cat {WORK}/leak 2>/dev/null || echo absent"])
    assert look.stdout == "absent\n", "a daemonized child of the timed-out exec lived on"
    assert sandbox.exec(["echo", "alive"]).stdout == "alive\n"


def test_an_output_that_calls_for_a_hint_comes_with_one(sandbox: Sandbox) -> None:
    # A write outside the writable paths: the command's words as it wrote
    # them, and a hint saying which paths are writable and what changes it.
    probe = ["sh", "-c", "echo x > /usr/cordon-probe"]
    r = sandbox.exec(probe)
    assert r.exit_code != 0 and "Read-only file system" in r.stderr, r
    assert [h.kind for h in r.hints] == ["read_only"], r.hints
    assert isinstance(r.hints[0], Hint) and '"rw"' in r.hints[0].message
    # The same in the stream's last event and in a background exec's wait.
    end = list(sandbox.exec_stream(probe))[-1].result
    assert end is not None and [h.kind for h in end.hints] == ["read_only"]
    assert [h.kind for h in sandbox.exec_background(probe).wait().hints] == ["read_only"]
    # A lookup without network says what the sandbox reaches.
    lookup = ["python3", "-c", "import socket; socket.getaddrinfo('pkg.example', 443)"]
    assert [h.kind for h in sandbox.exec(lookup).hints] == ["no_network"]
    assert sandbox.exec(["echo", "fine"]).hints == []


def test_exec_output_that_is_not_utf8(sandbox: Sandbox) -> None:
    r = sandbox.exec(["printf", "\\377\\376ok"])
    assert r.stdout_bytes == b"\xff\xfeok"


def test_typed_errors(client: Client, sandbox: Sandbox) -> None:
    with pytest.raises(NotFound) as err:
        Sandbox.connect("sb-does-not-exist", client=client)
    assert err.value.status == 404 and err.value.code == "not_found"
    with pytest.raises(NotFound):
        sandbox.process(999999).output()
    with pytest.raises(NotFound):
        list(sandbox.process(999999).stream())  # the streamed form too
    with pytest.raises(NotFound):
        sandbox.files.read(f"{WORK}/no-such-file")
    with pytest.raises((BadRequest, Unprocessable)) as bad:
        Sandbox.create(preset="no-such-preset", client=client)
    assert isinstance(bad.value, CordonError) and bad.value.message
