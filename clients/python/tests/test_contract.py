"""Every request the client can make, checked against the server's committed
OpenAPI document (docs/openapi.json, which the server's own test keeps equal
to what it generates): the route and method exist, the success statuses
agree, and every JSON field and query parameter the client may send is one
the server takes (request bodies refuse unknown fields)."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Tuple

import pytest

from cordon_client import _requests as rq

from conftest import REPO

SB, PID, CTX = "sb-0123", 7, "ctx-0123"

# Query parameters docs/api.md gives that the OpenAPI document leaves out.
NOT_IN_OPENAPI = {
    ("/v1/sandboxes/{id}/processes/{pid}/output", "after_seq"),
    ("/v1/sandboxes/{id}/processes/{pid}/stdin", "eof"),
}

# Each request builder with every optional field set.
CALLS: List[rq.Call] = [
    rq.health(),
    rq.list_sandboxes(),
    rq.create_sandbox(
        preset="low", profile={}, rw=["/h"], ro=["/h"], memory="512M", pids=64,
        allow_net=["pypi.org"], env={"K": "V"}, idle_timeout="10m", ttl=3600,
    ),  # fmt: skip
    rq.get_sandbox(SB),
    rq.delete_sandbox(SB),
    rq.exec_command(SB, ["true"], stdin="x", cwd="/workspace", env={"K": "V"}, timeout=30),
    rq.exec_command(SB, ["true"], stream=True),
    rq.exec_command(SB, ["true"], background=True),
    rq.list_processes(SB),
    rq.process_output(SB, PID, after_seq=3),
    rq.process_output(SB, PID, after_seq=3, stream=True),
    rq.signal_process(SB, PID, "SIGTERM"),
    rq.write_stdin(SB, PID, b"x", eof=True),
    rq.put_file(SB, "/workspace/a.py", b"x"),
    rq.get_file(SB, "/workspace/a.py"),
    rq.get_tar(SB, "/workspace"),
    rq.delete_file(SB, "/workspace/d", recursive=True),
    rq.create_context(SB, "python"),
    rq.list_contexts(SB),
    rq.run_cell(SB, CTX, "1", timeout="30s"),
    rq.delete_context(SB, CTX),
]


@pytest.fixture(scope="module")
def openapi() -> Dict[str, Any]:
    doc = json.loads((REPO / "docs" / "openapi.json").read_text())
    assert isinstance(doc, dict)
    return doc


def _pattern(template: str) -> str:
    """A regex for a path template (``{path}``, the files path, has slashes)."""
    out = ""
    for part in re.split(r"(\{[^}]+\})", template):
        if part == "{path}":
            out += ".+"
        elif part.startswith("{"):
            out += "[^/]+"
        else:
            out += re.escape(part)
    return out


def _operation(doc: Dict[str, Any], call: rq.Call) -> Tuple[str, Dict[str, Any]]:
    for template, ops in doc["paths"].items():
        op = ops.get(call.method.lower())
        if op is not None and re.fullmatch(_pattern(template), call.path):
            return template, op
    raise AssertionError(f"{call.method} {call.path}: no such operation in docs/openapi.json")


def _resolve(doc: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        resolved = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
        assert isinstance(resolved, dict)
        return resolved
    return schema


@pytest.mark.parametrize("call", CALLS, ids=lambda c: f"{c.method} {c.path}")
def test_the_client_speaks_the_documented_api(openapi: Dict[str, Any], call: rq.Call) -> None:
    template, op = _operation(openapi, call)
    documented = {int(s) for s in op.get("responses", {}) if s.startswith("2")}
    assert set(call.expect) <= documented, (
        f"{call.method} {template}: the server answers {sorted(documented)}, the client expects {call.expect}"
    )
    params = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
    params |= {name for t, name in NOT_IN_OPENAPI if t == template}
    assert set(call.params or {}) <= params, f"{template}: query {sorted(call.params or {})} vs {sorted(params)}"
    if call.json is not None:
        body = op["requestBody"]["content"]["application/json"]["schema"]
        fields = set(_resolve(openapi, body).get("properties", {}))
        assert set(call.json) <= fields, f"{template}: body fields {sorted(call.json)} vs {sorted(fields)}"
