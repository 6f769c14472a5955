"""The values the API returns, as typed objects.

Every object keeps the JSON it came from in ``raw``, so a field the server
adds later is reachable before this client knows it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._errors import ProtocolError

__all__ = [
    "SandboxInfo",
    "Hint",
    "ExecResult",
    "Event",
    "Output",
    "ProcessInfo",
    "FileEntry",
    "Listing",
    "CellError",
    "CellResult",
]


def _obj(value: Any, what: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"expected a JSON object for {what}, got {type(value).__name__}")
    return value


def decode_output(value: Any, encoding: Optional[str]) -> bytes:
    """Output text as the API sends it (UTF-8, or base64 when flagged) to bytes."""
    if value is None:
        return b""
    if encoding == "base64":
        return base64.b64decode(value)
    return str(value).encode("utf-8")


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as ``GET /v1/sandboxes/{id}`` shows it."""

    id: str
    state: str
    owner: Optional[str] = None
    created_unix_ms: Optional[int] = None
    ended: Optional[str] = None
    limits: Dict[str, Any] = field(default_factory=dict)
    usage: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_json(cls, value: Any) -> "SandboxInfo":
        d = _obj(value, "a sandbox")
        if not isinstance(d.get("id"), str):
            raise ProtocolError("a sandbox without an id")
        return cls(
            id=d["id"],
            state=str(d.get("state", "")),
            owner=d.get("owner"),
            created_unix_ms=d.get("created_unix_ms"),
            ended=d.get("ended"),
            limits=d.get("limits") or {},
            usage=d.get("usage") or {},
            raw=d,
        )


@dataclass(frozen=True)
class Hint:
    """What the sandbox explains about a command's end: ``kind`` is
    ``read_only``, ``no_network``, ``no_process`` or ``no_memory`` (its
    output said so), or ``egress_refused`` (the sandbox's proxy refused a
    connection while it ran); a kind added later arrives as it is.
    ``message`` says what the sandbox allows and which setting of
    :meth:`Sandbox.create` changes it."""

    kind: str
    message: str

    @classmethod
    def from_json(cls, value: Any) -> "Hint":
        d = _obj(value, "a hint")
        return cls(kind=str(d.get("kind", "")), message=str(d.get("message", "")))


@dataclass(frozen=True)
class ExecResult:
    """How a command ended and what it printed.

    ``stdout``/``stderr`` are text (undecodable bytes replaced);
    ``stdout_bytes``/``stderr_bytes`` are exactly what it wrote (as kept by
    the server within its output limit).
    """

    exit_code: int
    reason: str
    timed_out: bool
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    pid: Optional[int] = None
    usage: Dict[str, Any] = field(default_factory=dict)
    message: Optional[str] = None
    #: What the output said that the sandbox explains (usually empty).
    hints: List[Hint] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """It exited on its own with status 0."""
        return self.reason == "exited" and self.exit_code == 0

    @classmethod
    def from_json(cls, value: Any) -> "ExecResult":
        d = _obj(value, "an exec result")
        return cls(
            exit_code=int(d.get("exit_code", -1)),
            reason=str(d.get("reason", "")),
            timed_out=bool(d.get("timed_out", False)),
            stdout_bytes=decode_output(d.get("stdout"), d.get("stdout_encoding")),
            stderr_bytes=decode_output(d.get("stderr"), d.get("stderr_encoding")),
            pid=d.get("pid"),
            usage=d.get("usage") or {},
            message=d.get("message"),
            hints=[Hint.from_json(h) for h in d.get("hints") or []],
            raw=d,
        )


@dataclass(frozen=True)
class Event:
    """One event of a process: ``started``, ``stdout``, ``stderr``,
    ``exited``, ``gap`` (older events dropped from the server's buffer) or
    ``keepalive``.

    ``data`` holds the bytes of an output chunk; for ``exited``,
    :attr:`result` is the exit as an :class:`ExecResult` (without output).
    """

    kind: str
    seq: Optional[int] = None
    data: bytes = b""
    pid: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    @property
    def result(self) -> Optional[ExecResult]:
        if self.kind != "exited":
            return None
        return ExecResult.from_json(self.raw)

    @classmethod
    def from_json(cls, value: Any) -> "Event":
        d = _obj(value, "an event")
        kind = d.get("event")
        if not isinstance(kind, str):
            raise ProtocolError(f"an event without its kind: {d!r}")
        data = b""
        if kind in ("stdout", "stderr"):
            data = decode_output(d.get("data"), d.get("encoding"))
        return cls(kind=kind, seq=d.get("seq"), data=data, pid=d.get("pid"), raw=d)


@dataclass(frozen=True)
class Output:
    """What a background process has produced after a sequence number."""

    events: List[Event]
    done: bool

    @property
    def last_seq(self) -> Optional[int]:
        """The sequence number to pass as ``after_seq`` next time."""
        seqs = [e.seq for e in self.events if e.seq is not None]
        return max(seqs) if seqs else None

    @property
    def stdout(self) -> str:
        return b"".join(e.data for e in self.events if e.kind == "stdout").decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return b"".join(e.data for e in self.events if e.kind == "stderr").decode("utf-8", "replace")

    @classmethod
    def from_json(cls, value: Any) -> "Output":
        d = _obj(value, "process output")
        events = d.get("events")
        if not isinstance(events, list):
            raise ProtocolError("process output without its events")
        return cls(events=[Event.from_json(e) for e in events], done=bool(d.get("done")))


def collect(events: List[Event]) -> ExecResult:
    """Fold a process's events (through ``exited``) into one result."""
    out = b"".join(e.data for e in events if e.kind == "stdout")
    err = b"".join(e.data for e in events if e.kind == "stderr")
    pid = next((e.pid for e in events if e.kind == "started"), None)
    exited = next((e for e in events if e.kind == "exited"), None)
    if exited is None:
        raise ProtocolError("the event stream ended before the process exited")
    d = exited.raw
    return ExecResult(
        exit_code=int(d.get("exit_code", -1)),
        reason=str(d.get("reason", "")),
        timed_out=bool(d.get("timed_out", False)),
        stdout_bytes=out,
        stderr_bytes=err,
        pid=pid,
        usage=d.get("usage") or {},
        message=d.get("message"),
        hints=[Hint.from_json(h) for h in d.get("hints") or []],
        raw=d,
    )


@dataclass(frozen=True)
class ProcessInfo:
    """A process of a sandbox as ``GET .../processes`` lists it."""

    pid: int
    argv: List[str]
    running: bool
    exit_code: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, value: Any) -> "ProcessInfo":
        d = _obj(value, "a process")
        return cls(
            pid=int(d.get("pid", -1)),
            argv=list(d.get("argv") or []),
            running=bool(d.get("running")),
            exit_code=d.get("exit_code"),
            raw=d,
        )


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory listing."""

    name: str
    type: str
    size: Optional[int] = None

    @classmethod
    def from_json(cls, value: Any) -> "FileEntry":
        d = _obj(value, "a directory entry")
        return cls(name=str(d.get("name", "")), type=str(d.get("type", "other")), size=d.get("size"))


class Listing(List[FileEntry]):
    """A directory's entries (sorted by name); ``truncated`` when the
    server cut the listing short (it sends at most 10,000)."""

    def __init__(self, entries: List[FileEntry], truncated: bool = False) -> None:
        super().__init__(entries)
        self.truncated = truncated

    @classmethod
    def from_json(cls, value: Any) -> "Listing":
        d = _obj(value, "a directory listing")
        items = d.get("entries")
        if not isinstance(items, list):
            raise ProtocolError("a directory listing without its entries")
        return cls([FileEntry.from_json(e) for e in items], bool(d.get("truncated", False)))


@dataclass(frozen=True)
class CellError:
    """The exception a cell raised."""

    name: str
    message: str
    traceback: str = ""


@dataclass(frozen=True)
class CellResult:
    """What one cell of a code context printed and returned.

    ``value`` is the ``repr`` of the last expression (``None`` when the cell
    ended with a statement); ``restarted`` is true when the interpreter had
    died and was started afresh for this cell (its earlier state is gone).
    """

    stdout: str = ""
    stderr: str = ""
    value: Optional[str] = None
    error: Optional[CellError] = None
    restarted: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_json(cls, value: Any) -> "CellResult":
        d = _obj(value, "a cell result")
        err = d.get("error")
        error = None
        if isinstance(err, dict):
            error = CellError(
                name=str(err.get("name", "")),
                message=str(err.get("message", "")),
                traceback=str(err.get("traceback") or ""),
            )
        return cls(
            stdout=str(d.get("stdout") or ""),
            stderr=str(d.get("stderr") or ""),
            value=d.get("value"),
            error=error,
            restarted=bool(d.get("restarted", False)),
            raw=d,
        )
