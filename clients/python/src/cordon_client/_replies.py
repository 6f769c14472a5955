"""Reading the API's replies into typed values (shared by sync and async)."""

from __future__ import annotations

from typing import Any, AsyncGenerator, AsyncIterator, Dict, Generator, Iterator, List, Optional, Tuple

import httpx

from ._errors import CordonError, ProtocolError
from ._models import Event, Listing, ProcessInfo, SandboxInfo


def sandbox(body: Any) -> SandboxInfo:
    return SandboxInfo.from_json(body)


def sandboxes(body: Any) -> List[SandboxInfo]:
    items = body.get("sandboxes") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ProtocolError("the sandbox listing has no 'sandboxes' list")
    return [SandboxInfo.from_json(s) for s in items]


def processes(body: Any) -> List[ProcessInfo]:
    items = body.get("processes") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ProtocolError("the process listing has no 'processes' list")
    return [ProcessInfo.from_json(p) for p in items]


def pid(body: Any) -> int:
    value = body.get("pid") if isinstance(body, dict) else None
    if not isinstance(value, int):
        raise ProtocolError(f"a background exec answered without a pid: {body!r}")
    return value


def context(body: Any) -> Tuple[str, str]:
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        raise ProtocolError(f"a new code context without an id: {body!r}")
    return body["id"], str(body.get("language", ""))


def _is_json(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("application/json")


def file_bytes(response: httpx.Response, path: str) -> bytes:
    """A file's bytes; a directory's listing is refused with a clear error."""
    body = _json_or_none(response) if _is_json(response) else None
    if body is not None and "entries" in body:
        raise CordonError(f"{path} is a directory", code="is_a_directory", fix="use files.list() for a directory")
    return response.content


def listing(response: httpx.Response, path: str) -> Listing:
    if not _is_json(response):
        raise CordonError(f"{path} is not a directory", code="not_a_directory", fix="use files.read() for a file")
    return Listing.from_json(_json_or_none(response))


def contexts(body: Any) -> List[Tuple[str, str]]:
    items = body.get("contexts") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ProtocolError("the context listing has no 'contexts' list")
    return [context(c) for c in items]


def _json_or_none(response: httpx.Response) -> Optional[Dict[str, Any]]:
    try:
        value = response.json()
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def events(items: Iterator[Dict[str, Any]], keepalives: bool) -> Generator[Event, None, None]:
    """Events from a stream's objects; closing this closes the stream."""
    try:
        for item in items:
            event = Event.from_json(item)
            if event.kind == "keepalive" and not keepalives:
                continue
            yield event
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


async def aevents(items: AsyncIterator[Dict[str, Any]], keepalives: bool) -> AsyncGenerator[Event, None]:
    """The async form of :func:`events`."""
    try:
        async for item in items:
            event = Event.from_json(item)
            if event.kind == "keepalive" and not keepalives:
                continue
            yield event
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
