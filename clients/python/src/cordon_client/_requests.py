"""The API's requests as plain values, shared by the sync and async clients.

Each function returns a :class:`Call` (method, path, body, how long to
wait); the clients only send it. Nothing here does I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote

from ._asks import Asks

NDJSON = "application/x-ndjson"

Duration = Union[int, float, str]
"""Seconds as a number, or a string like ``"30s"``, ``"10m"``, ``"1h"``."""

Body = Union[bytes, str]

# Added to a command's own timeout before the client stops waiting for the
# reply (the server needs a moment to kill the tree and answer).
_REPLY_MARGIN_S = 30.0

# Between two lines of a stream: the server sends a keepalive at least
# every 15 s, so a longer silence means the connection is dead.
STREAM_READ_TIMEOUT_S = 60.0

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")

_WAIT_FOREVER = -1.0


@dataclass(frozen=True)
class Call:
    """One HTTP request of the API.

    ``read_timeout``: ``None`` keeps the client's default; a number widens
    it (seconds); :data:`_WAIT_FOREVER` waits as long as the command runs.
    ``expect``: the success statuses. ``asks``: the approvals a server's
    policy may make the call wait on (named while it waits).
    """

    method: str
    path: str
    json: Any = None
    content: Optional[bytes] = None
    params: Optional[Dict[str, str]] = None
    headers: Optional[Dict[str, str]] = None
    read_timeout: Optional[float] = None
    expect: Sequence[int] = (200,)
    asks: Optional[Asks] = None

    @property
    def waits_forever(self) -> bool:
        return self.read_timeout == _WAIT_FOREVER


def seconds(value: Duration) -> float:
    """A duration in seconds (for the client's own timeouts)."""
    if isinstance(value, (int, float)):
        return float(value)
    m = _DURATION.match(value)
    if not m:
        raise ValueError(f"not a duration: {value!r} (use seconds, or '30s', '10m', '1h')")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def wire_duration(value: Duration) -> Union[int, str]:
    """A duration as the API takes it: whole seconds as a number, else a string."""
    if isinstance(value, bool):
        raise ValueError("a duration cannot be a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        return f"{round(value * 1000)}ms"
    seconds(value)  # refuse a malformed string here, with a clear message
    return value.strip()


def _reply_wait(timeout: Optional[Duration]) -> float:
    return _WAIT_FOREVER if timeout is None else seconds(timeout) + _REPLY_MARGIN_S


def _seg(value: Union[str, int]) -> str:
    return quote(str(value), safe="")


def sandbox_path(sandbox_id: str, *rest: Union[str, int]) -> str:
    return "/v1/sandboxes/" + "/".join([_seg(sandbox_id), *(_seg(r) for r in rest)])


def file_path(sandbox_id: str, path: str) -> str:
    """The URL of a file of the sandbox, by its path inside the sandbox.

    Each segment is percent-encoded, ``.`` and ``..`` too (``%2E``), so that
    no HTTP library folds them away: the server resolves the path inside the
    sandbox's root and is the one to judge it.
    """
    if not path.startswith("/"):
        raise ValueError(f"a sandbox path is absolute: {path!r} (e.g. '/workspace/a.py')")
    base = sandbox_path(sandbox_id, "files")
    rest = path.strip("/")
    if not rest:
        return base  # the sandbox's root directory
    encoded = [s.replace(".", "%2E") if s in (".", "..") else quote(s, safe="") for s in rest.split("/")]
    return base + "/" + "/".join(encoded)


def _strip_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# --- sandboxes ---------------------------------------------------------


def create_sandbox(
    *,
    preset: Optional[str] = None,
    profile: Optional[Mapping[str, Any]] = None,
    rw: Optional[Sequence[str]] = None,
    ro: Optional[Sequence[str]] = None,
    memory: Optional[Union[int, str]] = None,
    pids: Optional[int] = None,
    allow_net: Optional[Sequence[str]] = None,
    env: Optional[Mapping[str, str]] = None,
    idle_timeout: Optional[Duration] = None,
    ttl: Optional[Duration] = None,
    extra: Optional[Mapping[str, Any]] = None,
) -> Call:
    body = _strip_none(
        {
            "preset": preset,
            "profile": dict(profile) if profile is not None else None,
            "rw": list(rw) if rw is not None else None,
            "ro": list(ro) if ro is not None else None,
            "memory": memory,
            "pids": pids,
            "allow_net": list(allow_net) if allow_net is not None else None,
            "env": dict(env) if env is not None else None,
            "idle_timeout": wire_duration(idle_timeout) if idle_timeout is not None else None,
            "ttl": wire_duration(ttl) if ttl is not None else None,
        }
    )
    body.update(extra or {})
    asks = Asks(None, ("create", "secret", "bind", "limits"))
    return Call("POST", "/v1/sandboxes", json=body, expect=(201,), asks=asks)


def get_sandbox(sandbox_id: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id))


def list_sandboxes() -> Call:
    return Call("GET", "/v1/sandboxes")


def delete_sandbox(sandbox_id: str) -> Call:
    return Call("DELETE", sandbox_path(sandbox_id), expect=(204,))


def health() -> Call:
    return Call("GET", "/v1/health")


# --- approvals ---------------------------------------------------------

SCOPES = ("once", "session", "duration", "persistent")


def list_approvals(state: Optional[str]) -> Call:
    return Call("GET", "/v1/approvals", params={"state": state} if state else None)


def get_approval(approval_id: str) -> Call:
    return Call("GET", "/v1/approvals/" + _seg(approval_id))


def answer_approval(
    approval_id: str,
    decision: str,
    *,
    scope: Optional[str] = None,
    duration: Optional[Duration] = None,
    confirm: Optional[str] = None,
) -> Call:
    """``POST /v1/approvals/{id}``; ``scope`` ``duration`` needs ``duration``."""
    if scope is not None and scope not in SCOPES:
        raise ValueError(f"scope: {scope!r} is not one of {', '.join(SCOPES)}")
    if scope == "duration" and duration is None:
        raise ValueError("scope='duration' needs duration=, e.g. '10m'")
    body = _strip_none(
        {
            "decision": decision,
            "scope": scope,
            "duration": None if duration is None else wire_duration(duration),
            "confirm": confirm,
        }
    )
    return Call("POST", "/v1/approvals/" + _seg(approval_id), json=body)


# --- exec and processes -------------------------------------------------


def exec_command(
    sandbox_id: str,
    argv: Sequence[str],
    *,
    stdin: Optional[Body] = None,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[Duration] = None,
    background: bool = False,
    stream: bool = False,
) -> Call:
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv is a list of strings, e.g. ['python3', 'a.py'] (or ['sh', '-c', '...'])")
    if not argv:
        raise ValueError("argv is empty: name the command to run")
    if isinstance(stdin, bytes):
        stdin = stdin.decode("utf-8")  # the API takes stdin as text
    body = _strip_none(
        {
            "argv": [str(a) for a in argv],
            "stdin": stdin,
            "cwd": cwd,
            "env": dict(env) if env is not None else None,
            "timeout": wire_duration(timeout) if timeout is not None else None,
        }
    )
    # The exec itself, or a connection its command makes through the proxy.
    asks = Asks(sandbox_id, ("exec", "egress"))
    if background:
        body["background"] = True
        return Call("POST", sandbox_path(sandbox_id, "exec"), json=body, expect=(202,), asks=asks)
    if stream:
        return Call(
            "POST",
            sandbox_path(sandbox_id, "exec"),
            json=body,
            headers={"Accept": NDJSON},
            read_timeout=STREAM_READ_TIMEOUT_S,
            asks=asks,
        )
    return Call(
        "POST", sandbox_path(sandbox_id, "exec"), json=body, read_timeout=_reply_wait(timeout), asks=asks
    )


def list_processes(sandbox_id: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id, "processes"))


def process_output(sandbox_id: str, pid: int, *, after_seq: int = 0, stream: bool = False) -> Call:
    path = sandbox_path(sandbox_id, "processes", pid, "output")
    params = {"after_seq": str(int(after_seq))}
    if stream:
        return Call("GET", path, params=params, headers={"Accept": NDJSON}, read_timeout=STREAM_READ_TIMEOUT_S)
    return Call("GET", path, params=params, headers={"Accept": "application/json"})


def signal_process(sandbox_id: str, pid: int, signal: Union[str, int]) -> Call:
    if isinstance(signal, str) and signal.upper().startswith("SIG"):
        signal = signal[3:]
    sig = signal.upper() if isinstance(signal, str) else int(signal)
    return Call("POST", sandbox_path(sandbox_id, "processes", pid, "signal"), json={"signal": sig}, expect=(204,))


def write_stdin(sandbox_id: str, pid: int, data: Body, *, eof: bool = False) -> Call:
    content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return Call(
        "POST",
        sandbox_path(sandbox_id, "processes", pid, "stdin"),
        content=content,
        params={"eof": "true"} if eof else None,
        headers={"Content-Type": "application/octet-stream"},
        expect=(204,),
    )


# --- files --------------------------------------------------------------


def put_file(sandbox_id: str, path: str, data: Body) -> Call:
    content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return Call(
        "PUT",
        file_path(sandbox_id, path),
        content=content,
        headers={"Content-Type": "application/octet-stream"},
        expect=(204,),
        asks=Asks(sandbox_id, ("path",)),
    )


def get_file(sandbox_id: str, path: str) -> Call:
    return Call("GET", file_path(sandbox_id, path))


def get_tar(sandbox_id: str, path: str) -> Call:
    return Call("GET", file_path(sandbox_id, path), params={"format": "tar"})


def delete_file(sandbox_id: str, path: str, *, recursive: bool = False) -> Call:
    params = {"recursive": "true"} if recursive else None
    return Call("DELETE", file_path(sandbox_id, path), params=params, expect=(204,))


# --- code contexts --------------------------------------------------------


def create_context(sandbox_id: str, language: str) -> Call:
    return Call("POST", sandbox_path(sandbox_id, "contexts"), json={"language": language}, expect=(201,))


def list_contexts(sandbox_id: str) -> Call:
    return Call("GET", sandbox_path(sandbox_id, "contexts"))


def run_cell(sandbox_id: str, context_id: str, code: str, *, timeout: Optional[Duration] = None) -> Call:
    body: Dict[str, Any] = {"code": code}
    if timeout is not None:
        body["timeout"] = wire_duration(timeout)
    return Call(
        "POST",
        sandbox_path(sandbox_id, "contexts", context_id, "run"),
        json=body,
        read_timeout=_reply_wait(timeout),
        asks=Asks(sandbox_id, ("egress",)),
    )


def delete_context(sandbox_id: str, context_id: str) -> Call:
    return Call("DELETE", sandbox_path(sandbox_id, "contexts", context_id), expect=(204,))

