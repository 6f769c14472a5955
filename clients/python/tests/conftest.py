"""Fixtures: the real `cordon serve` on a socket in a temporary directory.

The server is the binary at $CORDON_BIN (default: target/debug/cordon of
this repository). Where it cannot run (no binary, no user namespaces) the
tests are skipped with `SKIPPED: <reason>`; with CORDON_TESTS_REQUIRE_ALL=1
(CI) they fail instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, Optional, Sequence

import pytest

from cordon_client import Client, CordonError, Sandbox

REPO = Path(__file__).resolve().parents[3]
START_WAIT_S = 60.0


def skip_or_fail(reason: str) -> None:
    """Skip with `SKIPPED: reason`, or fail when every test must run (CI)."""
    if os.environ.get("CORDON_TESTS_REQUIRE_ALL"):
        pytest.fail(f"required host feature missing: {reason}", pytrace=False)
    print(f"SKIPPED: {reason}", file=sys.stderr)
    pytest.skip(reason)


def cordon_bin() -> Path:
    return Path(os.environ.get("CORDON_BIN") or REPO / "target" / "debug" / "cordon")


def _userns_available(binary: Path) -> bool:
    out = subprocess.run([str(binary), "doctor", "--json"], capture_output=True, timeout=60)
    try:
        return json.loads(out.stdout)["user_namespaces"]["ok"] is True
    except (ValueError, KeyError, TypeError):
        return False


class Server:
    """A running `cordon serve` and where to reach it."""

    def __init__(self, socket: str, state_dir: Path, log: Path) -> None:
        self.proc: "subprocess.Popen[bytes]"
        self.socket = socket
        self.state_dir = state_dir
        self.log = log
        self.url: Optional[str] = None  # http://ADDR with --listen
        self.tokens: Dict[str, str] = {}  # name -> secret

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def env(self) -> Dict[str, str]:
        """The environment the server and `cordon token` run with."""
        env = dict(os.environ, CORDON_STATE_DIR=str(self.state_dir), XDG_STATE_HOME=str(self.state_dir))
        env.pop("CORDON_URL", None)
        env.pop("CORDON_TOKEN", None)
        return env


def _started_line(server: Server) -> Dict[str, object]:
    """The JSON line the server prints on start ({"socket", "listen", "pid"})."""
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"cordon serve exited with {server.proc.returncode}:\n{server.log_text()}")
        for line in server.log_text().splitlines():
            if line.startswith("{") and '"socket"' in line:
                value = json.loads(line)
                assert isinstance(value, dict)
                return value
        time.sleep(0.02)
    pytest.fail(f"cordon serve printed no start line in {START_WAIT_S:.0f} s:\n{server.log_text()}")


def _wait_ready(server: Server) -> None:
    started = _started_line(server)
    if started.get("listen"):
        server.url = f"http://{started['listen']}"
    with Client(socket=server.socket, timeout=10) as c:
        health = c.health()
    assert health.get("status") == "ok", health


def _stop(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    if os.environ.get("CORDON_PYCLIENT_SHOW_LOG"):
        print(server.log_text(), file=sys.stderr)


def _check_host() -> Path:
    binary = cordon_bin()
    if not binary.exists():
        skip_or_fail(f"no cordon binary at {binary} (cargo build -p cordon, or set CORDON_BIN)")
    if subprocess.run([str(binary), "serve", "--help"], capture_output=True).returncode != 0:
        skip_or_fail(f"{binary} has no `serve` command (an older build?)")
    if not _userns_available(binary):
        skip_or_fail("user namespaces are not available here (`cordon doctor`)")
    return binary


@contextmanager
def running_server(*args: str, tokens: Sequence[Sequence[str]] = ()) -> Iterator[Server]:
    """`cordon serve --socket <tmp> ARGS` in a state directory of its own.

    ``tokens``: argument lists for `cordon token create --json` run first;
    their secrets are in ``server.tokens`` by name.
    """
    binary = _check_host()
    with tempfile.TemporaryDirectory(prefix="cordon-pyclient-") as tmp:
        tmp_path = Path(tmp)
        state = tmp_path / "state"
        state.mkdir()
        log = tmp_path / "serve.log"
        srv = Server(str(tmp_path / "cordon.sock"), state, log)
        for token_args in tokens:
            out = subprocess.run(
                [str(binary), "token", "create", "--json", *token_args],
                capture_output=True, env=srv.env(), check=True,
            )  # fmt: skip
            made = json.loads(out.stdout)
            srv.tokens[made["name"]] = made["token"]
        with open(log, "wb") as log_file:
            srv.proc = subprocess.Popen(
                [str(binary), "serve", "--socket", srv.socket, "--audit", str(state / "audit.db"), *args],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=srv.env(),
            )
        try:
            _wait_ready(srv)
            yield srv
        finally:
            _stop(srv)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with running_server() as srv:
        yield srv


@pytest.fixture()
def client(server: Server) -> Iterator[Client]:
    with Client(socket=server.socket) as c:
        yield c


@pytest.fixture()
def sandbox(client: Client) -> Iterator[Sandbox]:
    with Sandbox.create(preset="low", client=client) as sb:
        yield sb
