"""The blocking client: :class:`Client`, :class:`Sandbox` and its parts."""

from __future__ import annotations

from typing import Any, Dict, Generator, List, Mapping, Optional, Sequence, Union

from . import _replies
from . import _requests as rq
from ._asks import OnApproval
from ._config import resolve_endpoint
from ._errors import Conflict, NotFound
from ._http import SyncHTTP, TimeoutArg
from ._models import CellResult, Event, ExecResult, Listing, Output, ProcessInfo, SandboxInfo, collect
from ._requests import Body, Duration

__all__ = ["Client", "Sandbox", "Process", "Files", "CodeContext"]


class Client:
    """A connection to a cordon server (keep-alive; share it between sandboxes).

    Args:
        base_url: a TCP server, e.g. ``"http://127.0.0.1:7700"`` (default:
            ``$CORDON_URL``; without either, the unix socket).
        token: the bearer token for TCP (default: ``$CORDON_TOKEN``).
        socket: the unix socket's path (default: where ``cordon serve``
            puts it, see :func:`cordon_client.default_socket_path`).
        timeout: seconds (or an ``httpx.Timeout``) for a request; calls that
            wait for a command add the command's own timeout.
        on_approval: called with each pending approval (the API's JSON) a
            call of this client waits on, once it has waited a moment, from
            a thread of the client's own (the call itself still waits); by
            default each is a warning of the ``cordon_client`` logger
            naming the approval, its rule and the command that answers it.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        timeout: TimeoutArg = None,
        on_approval: Optional[OnApproval] = None,
    ) -> None:
        self.http = SyncHTTP(resolve_endpoint(base_url, token, socket), timeout, on_approval)

    def health(self) -> Any:
        """``GET /v1/health``: ``{"status": "ok", "sessions": N, ...}``."""
        return self.http.json(rq.health())

    def sandboxes(self) -> List[SandboxInfo]:
        """Every sandbox this caller can see."""
        return _replies.sandboxes(self.http.json(rq.list_sandboxes()))

    def approvals(self, state: Optional[str] = "pending") -> List[Dict[str, Any]]:
        """The approvals this caller can see (``state=None``: all), newest
        first, as the API's JSON (``id, kind, subject, grant_subject,
        principal, session, offers, rule, expires_unix_ms, state``, ...)."""
        return list(self.http.json(rq.list_approvals(state))["approvals"])

    def approval(self, approval_id: str) -> Dict[str, Any]:
        """One approval."""
        return dict(self.http.json(rq.get_approval(approval_id)))

    def approve(
        self,
        approval_id: str,
        scope: str = "once",
        *,
        duration: Optional[Duration] = None,
        confirm: bool = False,
    ) -> Dict[str, Any]:
        """Approve (as the owner, or with a token made with ``--approver``).

        ``scope``: ``"once"``, ``"session"``, ``"duration"`` (with
        ``duration="10m"``) or ``"persistent"``. A persistent answer appends
        a rule to the server's policy file: without ``confirm=True`` it
        raises :class:`Conflict` whose ``body["rule"]`` is the rule's text.
        """
        call = rq.answer_approval(approval_id, "approve", scope=scope, duration=duration)
        try:
            return dict(self.http.json(call))
        except Conflict as e:
            token = e.body.get("confirm") if isinstance(e.body, dict) else None
            if not (confirm and token):
                raise
        call = rq.answer_approval(approval_id, "approve", scope=scope, duration=duration, confirm=token)
        return dict(self.http.json(call))

    def deny(self, approval_id: str) -> Dict[str, Any]:
        """Deny: the waiting action fails with :class:`PolicyRefused`."""
        return dict(self.http.json(rq.answer_approval(approval_id, "deny")))

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _client(
    client: Optional[Client], base_url: Optional[str], token: Optional[str], socket: Optional[str], timeout: TimeoutArg
) -> "tuple[Client, bool]":
    if client is not None:
        return client, False
    return Client(base_url, token=token, socket=socket, timeout=timeout), True


class Sandbox:
    """One long-lived sandbox: files, packages and processes persist across execs.

    Make one with :meth:`create` (or reach an existing one with
    :meth:`connect`). Used as a context manager it is deleted on exit::

        with Sandbox.create(preset="low") as sb:
            print(sb.exec(["echo", "hi"]).stdout)
    """

    def __init__(self, info: SandboxInfo, client: Client, owns_client: bool = False) -> None:
        self._info = info
        self._client = client
        self._owns_client = owns_client
        self.files = Files(self)

    # -- making and finding ------------------------------------------------

    @classmethod
    def create(
        cls,
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
        client: Optional[Client] = None,
        base_url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        timeout: TimeoutArg = None,
    ) -> "Sandbox":
        """Create a sandbox (``POST /v1/sandboxes``).

        Args:
            preset: trust level (``"untrusted"``, ``"low"``, ``"medium"``, ...).
            profile: a whole profile in its JSON form.
            rw, ro: host paths bound read-write / read-only.
            memory: e.g. ``"512M"`` or bytes. pids: most processes at once.
            allow_net: host patterns the sandbox may reach through its proxy.
            env: environment of every exec.
            idle_timeout, ttl: ended after this long idle / this long at all.
            extra: more request fields, sent as given.
            client: an open :class:`Client` to use (else one is opened from
                ``base_url``/``token``/``socket``/``timeout`` and closed
                with the sandbox).
        """
        c, owns = _client(client, base_url, token, socket, timeout)
        call = rq.create_sandbox(
            preset=preset, profile=profile, rw=rw, ro=ro, memory=memory, pids=pids,
            allow_net=allow_net, env=env, idle_timeout=idle_timeout, ttl=ttl, extra=extra,
        )  # fmt: skip
        try:
            info = _replies.sandbox(c.http.json(call))
        except BaseException:
            if owns:
                c.close()
            raise
        return cls(info, c, owns)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        client: Optional[Client] = None,
        base_url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        timeout: TimeoutArg = None,
    ) -> "Sandbox":
        """An existing sandbox by id (:class:`NotFound` when there is none)."""
        c, owns = _client(client, base_url, token, socket, timeout)
        try:
            info = _replies.sandbox(c.http.json(rq.get_sandbox(sandbox_id)))
        except BaseException:
            if owns:
                c.close()
            raise
        return cls(info, c, owns)

    @classmethod
    def list(
        cls,
        *,
        client: Optional[Client] = None,
        base_url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        timeout: TimeoutArg = None,
    ) -> List[SandboxInfo]:
        """Every sandbox this caller can see."""
        c, owns = _client(client, base_url, token, socket, timeout)
        try:
            return c.sandboxes()
        finally:
            if owns:
                c.close()

    # -- the sandbox itself ------------------------------------------------

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def client(self) -> Client:
        return self._client

    def info(self) -> SandboxInfo:
        """Its state, limits and usage now."""
        self._info = _replies.sandbox(self._client.http.json(rq.get_sandbox(self.id)))
        return self._info

    def delete(self) -> None:
        """Tear it down (every process, file and mount of it goes)."""
        self._client.http.send(rq.delete_sandbox(self.id))

    def close(self) -> None:
        """Close the connection if this sandbox opened it (the sandbox stays)."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except NotFound:
            pass  # already gone (deleted, idle timeout, ttl)
        finally:
            self.close()

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r})"

    # -- commands ------------------------------------------------------------

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Body] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[Duration] = None,
    ) -> ExecResult:
        """Run a command and wait for it.

        A command that outlives ``timeout`` is killed with its whole
        process tree: ``exit_code`` 124, ``timed_out`` true; the sandbox
        lives on. A failing command is not an exception: look at
        ``exit_code``/``reason`` (or ``ok``).
        """
        call = rq.exec_command(self.id, argv, stdin=stdin, cwd=cwd, env=env, timeout=timeout)
        return ExecResult.from_json(self._client.http.json(call))

    def exec_stream(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Body] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[Duration] = None,
        keepalives: bool = False,
    ) -> Generator[Event, None, None]:
        """Run a command and yield its events as they happen: ``started``,
        ``stdout``/``stderr`` chunks, ``exited`` last (``event.result``)."""
        call = rq.exec_command(self.id, argv, stdin=stdin, cwd=cwd, env=env, timeout=timeout, stream=True)
        return _replies.events(self._client.http.events(call), keepalives)

    def exec_background(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Body] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[Duration] = None,
    ) -> "Process":
        """Start a command and return at once; its output stays readable
        (:meth:`Process.output`) for the life of the sandbox."""
        call = rq.exec_command(self.id, argv, stdin=stdin, cwd=cwd, env=env, timeout=timeout, background=True)
        return Process(self, _replies.pid(self._client.http.json(call)))

    def process(self, pid: int) -> "Process":
        """A handle on a process of this sandbox by its pid (no request made)."""
        return Process(self, pid)

    def processes(self) -> List[ProcessInfo]:
        """Every process started in this sandbox, running or ended."""
        return _replies.processes(self._client.http.json(rq.list_processes(self.id)))

    def code_context(self, language: str = "python") -> "CodeContext":
        """A persistent interpreter inside the sandbox (variables survive between cells)."""
        ctx_id, lang = _replies.context(self._client.http.json(rq.create_context(self.id, language)))
        return CodeContext(self, ctx_id, lang or language)

    def code_contexts(self) -> List["CodeContext"]:
        """The code contexts of this sandbox."""
        found = _replies.contexts(self._client.http.json(rq.list_contexts(self.id)))
        return [CodeContext(self, ctx_id, lang) for ctx_id, lang in found]


class Process:
    """A command started with :meth:`Sandbox.exec_background`."""

    def __init__(self, sandbox: Sandbox, pid: int) -> None:
        self.sandbox = sandbox
        self.pid = pid

    @property
    def _http(self) -> SyncHTTP:
        return self.sandbox.client.http

    def output(self, after_seq: int = 0) -> Output:
        """The events after ``after_seq`` that are there now (``done``: it
        ended and nothing more will come)."""
        return Output.from_json(self._http.json(rq.process_output(self.sandbox.id, self.pid, after_seq=after_seq)))

    def stream(self, after_seq: int = 0, *, keepalives: bool = False) -> Generator[Event, None, None]:
        """Re-attach: the events after ``after_seq``, then new ones as they
        come, until it exits."""
        call = rq.process_output(self.sandbox.id, self.pid, after_seq=after_seq, stream=True)
        return _replies.events(self._http.events(call), keepalives)

    def wait(self) -> ExecResult:
        """Wait for the end; its whole output and how it ended."""
        return collect(list(self.stream(0)))

    def signal(self, signal: Union[str, int] = "TERM") -> None:
        """Send a signal (``"TERM"``, ``"KILL"``, ``"INT"``, or a number)."""
        self._http.send(rq.signal_process(self.sandbox.id, self.pid, signal))

    def kill(self) -> None:
        self.signal("KILL")

    def write_stdin(self, data: Body, *, eof: bool = False) -> None:
        """Write to its stdin; ``eof=True`` closes stdin afterwards."""
        self._http.send(rq.write_stdin(self.sandbox.id, self.pid, data, eof=eof))

    def close_stdin(self) -> None:
        self.write_stdin(b"", eof=True)

    def __repr__(self) -> str:
        return f"Process(sandbox={self.sandbox.id!r}, pid={self.pid})"


class Files:
    """A sandbox's files, by the paths the sandbox sees (``/workspace/a.py``)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    @property
    def _http(self) -> SyncHTTP:
        return self._sandbox.client.http

    def write(self, path: str, data: Body) -> None:
        """Write a whole file, atomically (text is written as UTF-8).

        Raises :class:`PayloadTooLarge` over the per-file limit and
        :class:`QuotaExceeded` over the sandbox's quota.
        """
        self._http.send(rq.put_file(self._sandbox.id, path, data))

    def read(self, path: str) -> bytes:
        """A file's bytes."""
        return _replies.file_bytes(self._http.send(rq.get_file(self._sandbox.id, path)), path)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def list(self, path: str = "/") -> Listing:
        """The entries of a directory (``.truncated`` when cut short)."""
        return _replies.listing(self._http.send(rq.get_file(self._sandbox.id, path)), path)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Delete a file, a symlink (not what it points to) or an empty
        directory; a directory with its contents with ``recursive=True``
        (else :class:`Conflict`)."""
        self._http.send(rq.delete_file(self._sandbox.id, path, recursive=recursive))

    def tar(self, path: str) -> bytes:
        """A directory as a tar archive."""
        return self._http.send(rq.get_tar(self._sandbox.id, path)).content


class CodeContext:
    """A persistent interpreter in a sandbox (see :meth:`Sandbox.code_context`)."""

    def __init__(self, sandbox: Sandbox, context_id: str, language: str) -> None:
        self.sandbox = sandbox
        self.id = context_id
        self.language = language

    def run(self, code: str, *, timeout: Optional[Duration] = None) -> CellResult:
        """Run a cell: its output, the value of its last expression, its error."""
        call = rq.run_cell(self.sandbox.id, self.id, code, timeout=timeout)
        return CellResult.from_json(self.sandbox.client.http.json(call))

    def delete(self) -> None:
        """Stop the interpreter."""
        self.sandbox.client.http.send(rq.delete_context(self.sandbox.id, self.id))

    def __enter__(self) -> "CodeContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except NotFound:
            pass

    def __repr__(self) -> str:
        return f"CodeContext(sandbox={self.sandbox.id!r}, id={self.id!r}, language={self.language!r})"
