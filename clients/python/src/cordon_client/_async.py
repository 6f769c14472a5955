"""The asyncio client: the same API as :mod:`cordon_client._sync`, awaited.

``AsyncSandbox.create(...)`` can be awaited or used directly as an async
context manager::

    async with AsyncSandbox.create(preset="low") as sb:
        r = await sb.exec(["echo", "hi"])
    sb = await AsyncSandbox.create(preset="low")   # delete it yourself
"""

from __future__ import annotations

from typing import Any, AsyncGenerator, Awaitable, Callable, Dict, Generator, List, Mapping, Optional, Sequence, Union

from . import _replies
from . import _requests as rq
from ._asks import OnApproval
from ._config import resolve_endpoint
from ._errors import Conflict, NotFound
from ._http import AsyncHTTP, TimeoutArg
from ._models import CellResult, Event, ExecResult, Listing, Output, ProcessInfo, SandboxInfo, collect
from ._requests import Body, Duration

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncProcess", "AsyncFiles", "AsyncCodeContext"]


class AsyncClient:
    """A connection to a cordon server, for asyncio (see :class:`cordon_client.Client`)."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        timeout: TimeoutArg = None,
        on_approval: Optional[OnApproval] = None,
    ) -> None:
        self.http = AsyncHTTP(resolve_endpoint(base_url, token, socket), timeout, on_approval)

    async def health(self) -> Any:
        return await self.http.json(rq.health())

    async def sandboxes(self) -> List[SandboxInfo]:
        return _replies.sandboxes(await self.http.json(rq.list_sandboxes()))

    async def approvals(self, state: Optional[str] = "pending") -> List[Dict[str, Any]]:
        """See :meth:`cordon_client.Client.approvals`."""
        return list((await self.http.json(rq.list_approvals(state)))["approvals"])

    async def approval(self, approval_id: str) -> Dict[str, Any]:
        return dict(await self.http.json(rq.get_approval(approval_id)))

    async def approve(
        self,
        approval_id: str,
        scope: str = "once",
        *,
        duration: Optional[Duration] = None,
        confirm: bool = False,
    ) -> Dict[str, Any]:
        """See :meth:`cordon_client.Client.approve`."""
        call = rq.answer_approval(approval_id, "approve", scope=scope, duration=duration)
        try:
            return dict(await self.http.json(call))
        except Conflict as e:
            token = e.body.get("confirm") if isinstance(e.body, dict) else None
            if not (confirm and token):
                raise
        call = rq.answer_approval(approval_id, "approve", scope=scope, duration=duration, confirm=token)
        return dict(await self.http.json(call))

    async def deny(self, approval_id: str) -> Dict[str, Any]:
        return dict(await self.http.json(rq.answer_approval(approval_id, "deny")))

    async def close(self) -> None:
        await self.http.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def _client(
    client: Optional[AsyncClient],
    base_url: Optional[str],
    token: Optional[str],
    socket: Optional[str],
    timeout: TimeoutArg,
) -> "tuple[AsyncClient, bool]":
    if client is not None:
        return client, False
    return AsyncClient(base_url, token=token, socket=socket, timeout=timeout), True


class _Opening:
    """An :class:`AsyncSandbox` on its way: await it, or ``async with`` it."""

    def __init__(self, make: Callable[[], Awaitable["AsyncSandbox"]]) -> None:
        self._make = make
        self._sandbox: Optional[AsyncSandbox] = None

    def __await__(self) -> Generator[Any, None, "AsyncSandbox"]:
        return self._make().__await__()

    async def __aenter__(self) -> "AsyncSandbox":
        self._sandbox = await self._make()
        return self._sandbox

    async def __aexit__(self, *exc: Any) -> None:
        if self._sandbox is not None:
            await self._sandbox.__aexit__(*exc)


async def _open(
    cls: "type[AsyncSandbox]", client: AsyncClient, owns: bool, call: rq.Call
) -> "AsyncSandbox":
    try:
        info = _replies.sandbox(await client.http.json(call))
    except BaseException:
        if owns:
            await client.close()
        raise
    return cls(info, client, owns)


class AsyncSandbox:
    """One long-lived sandbox, for asyncio (see :class:`cordon_client.Sandbox`)."""

    def __init__(self, info: SandboxInfo, client: AsyncClient, owns_client: bool = False) -> None:
        self._info = info
        self._client = client
        self._owns_client = owns_client
        self.files = AsyncFiles(self)

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
        client: Optional[AsyncClient] = None,
        base_url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        timeout: TimeoutArg = None,
    ) -> _Opening:
        """Create a sandbox (arguments as :meth:`cordon_client.Sandbox.create`)."""
        call = rq.create_sandbox(
            preset=preset, profile=profile, rw=rw, ro=ro, memory=memory, pids=pids,
            allow_net=allow_net, env=env, idle_timeout=idle_timeout, ttl=ttl, extra=extra,
        )  # fmt: skip

        def make() -> Awaitable[AsyncSandbox]:
            c, owns = _client(client, base_url, token, socket, timeout)
            return _open(cls, c, owns, call)

        return _Opening(make)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        client: Optional[AsyncClient] = None,
        base_url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        timeout: TimeoutArg = None,
    ) -> _Opening:
        """An existing sandbox by id (:class:`NotFound` when there is none)."""

        def make() -> Awaitable[AsyncSandbox]:
            c, owns = _client(client, base_url, token, socket, timeout)
            return _open(cls, c, owns, rq.get_sandbox(sandbox_id))

        return _Opening(make)

    @classmethod
    async def list(
        cls,
        *,
        client: Optional[AsyncClient] = None,
        base_url: Optional[str] = None,
        token: Optional[str] = None,
        socket: Optional[str] = None,
        timeout: TimeoutArg = None,
    ) -> List[SandboxInfo]:
        c, owns = _client(client, base_url, token, socket, timeout)
        try:
            return await c.sandboxes()
        finally:
            if owns:
                await c.close()

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def info(self) -> SandboxInfo:
        self._info = _replies.sandbox(await self._client.http.json(rq.get_sandbox(self.id)))
        return self._info

    async def delete(self) -> None:
        await self._client.http.send(rq.delete_sandbox(self.id))

    async def close(self) -> None:
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.delete()
        except NotFound:
            pass
        finally:
            await self.close()

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r})"

    async def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Body] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[Duration] = None,
    ) -> ExecResult:
        """Run a command and wait for it (see :meth:`cordon_client.Sandbox.exec`)."""
        call = rq.exec_command(self.id, argv, stdin=stdin, cwd=cwd, env=env, timeout=timeout)
        return ExecResult.from_json(await self._client.http.json(call))

    def exec_stream(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Body] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[Duration] = None,
        keepalives: bool = False,
    ) -> AsyncGenerator[Event, None]:
        """Run a command and yield its events as they happen."""
        call = rq.exec_command(self.id, argv, stdin=stdin, cwd=cwd, env=env, timeout=timeout, stream=True)
        return _replies.aevents(self._client.http.events(call), keepalives)

    async def exec_background(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Body] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[Duration] = None,
    ) -> "AsyncProcess":
        call = rq.exec_command(self.id, argv, stdin=stdin, cwd=cwd, env=env, timeout=timeout, background=True)
        return AsyncProcess(self, _replies.pid(await self._client.http.json(call)))

    def process(self, pid: int) -> "AsyncProcess":
        return AsyncProcess(self, pid)

    async def processes(self) -> List[ProcessInfo]:
        return _replies.processes(await self._client.http.json(rq.list_processes(self.id)))

    async def code_context(self, language: str = "python") -> "AsyncCodeContext":
        ctx_id, lang = _replies.context(await self._client.http.json(rq.create_context(self.id, language)))
        return AsyncCodeContext(self, ctx_id, lang or language)

    async def code_contexts(self) -> List["AsyncCodeContext"]:
        found = _replies.contexts(await self._client.http.json(rq.list_contexts(self.id)))
        return [AsyncCodeContext(self, ctx_id, lang) for ctx_id, lang in found]


class AsyncProcess:
    """A background command, for asyncio (see :class:`cordon_client.Process`)."""

    def __init__(self, sandbox: AsyncSandbox, pid: int) -> None:
        self.sandbox = sandbox
        self.pid = pid

    @property
    def _http(self) -> AsyncHTTP:
        return self.sandbox.client.http

    async def output(self, after_seq: int = 0) -> Output:
        call = rq.process_output(self.sandbox.id, self.pid, after_seq=after_seq)
        return Output.from_json(await self._http.json(call))

    def stream(self, after_seq: int = 0, *, keepalives: bool = False) -> AsyncGenerator[Event, None]:
        call = rq.process_output(self.sandbox.id, self.pid, after_seq=after_seq, stream=True)
        return _replies.aevents(self._http.events(call), keepalives)

    async def wait(self) -> ExecResult:
        return collect([e async for e in self.stream(0)])

    async def signal(self, signal: Union[str, int] = "TERM") -> None:
        await self._http.send(rq.signal_process(self.sandbox.id, self.pid, signal))

    async def kill(self) -> None:
        await self.signal("KILL")

    async def write_stdin(self, data: Body, *, eof: bool = False) -> None:
        await self._http.send(rq.write_stdin(self.sandbox.id, self.pid, data, eof=eof))

    async def close_stdin(self) -> None:
        await self.write_stdin(b"", eof=True)

    def __repr__(self) -> str:
        return f"AsyncProcess(sandbox={self.sandbox.id!r}, pid={self.pid})"


class AsyncFiles:
    """A sandbox's files, for asyncio (see :class:`cordon_client.Files`)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    @property
    def _http(self) -> AsyncHTTP:
        return self._sandbox.client.http

    async def write(self, path: str, data: Body) -> None:
        await self._http.send(rq.put_file(self._sandbox.id, path, data))

    async def read(self, path: str) -> bytes:
        return _replies.file_bytes(await self._http.send(rq.get_file(self._sandbox.id, path)), path)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def list(self, path: str = "/") -> Listing:
        return _replies.listing(await self._http.send(rq.get_file(self._sandbox.id, path)), path)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._http.send(rq.delete_file(self._sandbox.id, path, recursive=recursive))

    async def tar(self, path: str) -> bytes:
        return (await self._http.send(rq.get_tar(self._sandbox.id, path))).content


class AsyncCodeContext:
    """A persistent interpreter, for asyncio (see :class:`cordon_client.CodeContext`)."""

    def __init__(self, sandbox: AsyncSandbox, context_id: str, language: str) -> None:
        self.sandbox = sandbox
        self.id = context_id
        self.language = language

    async def run(self, code: str, *, timeout: Optional[Duration] = None) -> CellResult:
        call = rq.run_cell(self.sandbox.id, self.id, code, timeout=timeout)
        return CellResult.from_json(await self.sandbox.client.http.json(call))

    async def delete(self) -> None:
        await self.sandbox.client.http.send(rq.delete_context(self.sandbox.id, self.id))

    async def __aenter__(self) -> "AsyncCodeContext":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.delete()
        except NotFound:
            pass

    def __repr__(self) -> str:
        return f"AsyncCodeContext(sandbox={self.sandbox.id!r}, id={self.id!r}, language={self.language!r})"
