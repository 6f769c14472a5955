"""Fixtures: the real `cordon mcp` (stdio per test, HTTP per module)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from mcpclient import MCP_VERSION, HttpServer, ServeServer, check_host


def pytest_report_header(config: object) -> str:
    return f"mcp (the official Python SDK) {MCP_VERSION}"


@pytest.fixture()
def binary() -> Path:
    return check_host()


@pytest.fixture()
def state() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cordon-mcp-test-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    binary = check_host()
    with tempfile.TemporaryDirectory(prefix="cordon-mcp-http-") as tmp:
        server = HttpServer(
            binary,
            Path(tmp),
            {
                # The same memory ceiling as stdio's default (medium's).
                "alice": ["--preset", "medium", "--allow-net", "pypi.org", "--memory", "2GiB"],
                "bob": ["--preset", "low", "--max-sandboxes", "2"],
            },
        )
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def serve_server() -> Iterator[ServeServer]:
    """A running `cordon serve` for `cordon mcp --server SOCKET`."""
    binary = check_host()
    with tempfile.TemporaryDirectory(prefix="cordon-mcp-serve-") as tmp:
        server = ServeServer(binary, Path(tmp))
        try:
            yield server
        finally:
            server.stop()
