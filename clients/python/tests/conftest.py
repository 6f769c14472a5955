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
from pathlib import Path
from typing import Iterator

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

    def __init__(self, proc: subprocess.Popen, socket: str, state_dir: Path, log: Path) -> None:
        self.proc = proc
        self.socket = socket
        self.state_dir = state_dir
        self.log = log

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _wait_ready(server: Server) -> None:
    deadline = time.monotonic() + START_WAIT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"cordon serve exited with {server.proc.returncode}:\n{server.log_text()}")
        if os.path.exists(server.socket):
            try:
                with Client(socket=server.socket, timeout=5) as c:
                    if c.health().get("status") == "ok":
                        return
            except CordonError as e:
                last = e
        time.sleep(0.05)
    pytest.fail(f"cordon serve did not answer /v1/health in {START_WAIT_S:.0f} s ({last}):\n{server.log_text()}")


def _stop(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    binary = cordon_bin()
    if not binary.exists():
        skip_or_fail(f"no cordon binary at {binary} (cargo build -p cordon, or set CORDON_BIN)")
    if subprocess.run([str(binary), "serve", "--help"], capture_output=True).returncode != 0:
        skip_or_fail(f"{binary} has no `serve` command (an older build?)")
    if not _userns_available(binary):
        skip_or_fail("user namespaces are not available here (`cordon doctor`)")
    with tempfile.TemporaryDirectory(prefix="cordon-pyclient-") as tmp:
        tmp_path = Path(tmp)
        state = tmp_path / "state"
        state.mkdir()
        sock = str(tmp_path / "cordon.sock")
        log = tmp_path / "serve.log"
        env = dict(os.environ, XDG_STATE_HOME=str(state), RUST_LOG=os.environ.get("RUST_LOG", "info"))
        env.pop("CORDON_URL", None)
        with open(log, "wb") as log_file:
            proc = subprocess.Popen(
                [str(binary), "serve", "--socket", sock],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
            )
        srv = Server(proc, sock, state, log)
        try:
            _wait_ready(srv)
            yield srv
        finally:
            _stop(srv)
            if os.environ.get("CORDON_PYCLIENT_SHOW_LOG"):
                print(srv.log_text(), file=sys.stderr)


@pytest.fixture()
def client(server: Server) -> Iterator[Client]:
    with Client(socket=server.socket) as c:
        yield c


@pytest.fixture()
def sandbox(client: Client) -> Iterator[Sandbox]:
    with Sandbox.create(preset="low", client=client) as sb:
        yield sb
