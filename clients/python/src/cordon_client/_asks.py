"""Naming the approval a call waits on.

A call that the server's policy puts to a human waits at the API until the
answer, and the request says nothing while it waits. So while a call that
can be asked about is unanswered past a moment, the client looks up the
pending approvals it may be waiting on (on a connection of its own) and
names each once: to the ``on_approval`` callback given to the client, else
as a warning of the ``cordon_client`` logger, which Python prints on stderr
when logging is not configured. The lookup only informs: when it fails, the
call waits as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterator, List, Optional, Set, Tuple

log = logging.getLogger("cordon_client")

#: How long a call runs before its pending approvals are looked up, and how
#: often after that (seconds).
FIRST_LOOK_S = 0.7
LOOK_EVERY_S = 1.0

Approval = Dict[str, Any]
OnApproval = Callable[[Approval], None]


@dataclass(frozen=True)
class Asks:
    """Which approvals a call may be waiting on: those of its sandbox
    (``None`` for a create) and of these kinds."""

    session: Optional[str]
    kinds: Tuple[str, ...]

    def covers(self, approval: Approval) -> bool:
        return approval.get("kind") in self.kinds and approval.get("session") == self.session


def _subject_text(subject: Any) -> str:
    """What was asked for, as ``cordon approvals list`` words it."""
    if not isinstance(subject, dict):
        return str(subject)
    kind = subject.get("kind")
    if kind == "exec":
        return " ".join(str(a) for a in subject.get("argv_prefix") or [])
    if kind == "egress":
        return f"{subject.get('host', '')}:{subject.get('port')}"
    if kind in ("path", "bind"):
        return str(subject.get("path") or subject.get("host_path") or "")
    if kind == "create":
        return f"profile {subject.get('profile', '')}"
    if kind == "secret":
        return str(subject.get("name", ""))
    return str(subject)


def notice(approval: Approval) -> str:
    """``waiting for approval ap_…: exec `rm -f x` (rule ask-rm,
    policy.cedar:3); a human answers with ...``"""
    aid = approval.get("id", "")
    rule = approval.get("rule") or {}
    place = f", {rule['file']}:{rule['line']}" if rule.get("file") and rule.get("line") else ""
    return (
        f"waiting for approval {aid}: {approval.get('kind', 'action')} "
        f"`{_subject_text(approval.get('subject'))}` (rule {rule.get('id', '?')}{place}); "
        f"a human answers with `cordon approvals approve {aid}` or `cordon approvals deny {aid}`"
    )


def _tell(approval: Approval, on_approval: Optional[OnApproval]) -> None:
    if on_approval is None:
        log.warning("%s", notice(approval))
        return
    try:
        on_approval(approval)
    except Exception:  # noqa: BLE001 (a callback's failure must not break the call)
        log.exception("the on_approval callback failed")


@dataclass
class _InFlight:
    asks: Asks
    started: float
    told: Set[str] = field(default_factory=set)


class SyncWatch:
    """Watches the calls in flight of one blocking client from one thread
    of its own, started with the first call that can be asked about. It
    sleeps while no such call is in flight. Each call is told of each
    approval once."""

    def __init__(self, lookup: Callable[[], List[Approval]], on_approval: Optional[OnApproval]) -> None:
        self._lookup = lookup
        self._on_approval = on_approval
        self._cond = threading.Condition()
        self._calls: Dict[int, _InFlight] = {}
        self._keys = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    @contextlib.contextmanager
    def watching(self, asks: Optional[Asks]) -> Iterator[None]:
        if asks is None:
            yield
            return
        with self._cond:
            key = next(self._keys)
            self._calls[key] = _InFlight(asks, time.monotonic())
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="cordon-approvals", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._calls.pop(key, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _due(self, now: float, next_look: float) -> Tuple[List[_InFlight], float]:
        """The calls to look up for now, or how long to sleep."""
        ripe = [c for c in self._calls.values() if now - c.started >= FIRST_LOOK_S]
        if ripe and now >= next_look:
            return ripe, 0.0
        first = min(c.started for c in self._calls.values()) + FIRST_LOOK_S
        return [], max(first, next_look) - now

    def _run(self) -> None:
        next_look = 0.0
        while True:
            with self._cond:
                while not self._closed and not self._calls:
                    self._cond.wait()
                if self._closed:
                    return
                ripe, sleep = self._due(time.monotonic(), next_look)
                if not ripe:
                    self._cond.wait(sleep)
                    continue
            next_look = time.monotonic() + LOOK_EVERY_S
            try:
                pending = self._lookup()
            except Exception:  # noqa: BLE001 (only informs; the call waits as before)
                continue
            for approval in pending:
                aid = str(approval.get("id"))
                with self._cond:
                    waiting = [c for c in ripe if c.asks.covers(approval) and aid not in c.told]
                    for c in waiting:
                        c.told.add(aid)
                if waiting:
                    _tell(approval, self._on_approval)


class AsyncWatch:
    """The asyncio twin: a task beside each call that can be asked about."""

    def __init__(
        self, lookup: Callable[[], Awaitable[List[Approval]]], on_approval: Optional[OnApproval]
    ) -> None:
        self._lookup = lookup
        self._on_approval = on_approval

    @contextlib.asynccontextmanager
    async def watching(self, asks: Optional[Asks]) -> AsyncIterator[None]:
        if asks is None:
            yield
            return
        task = asyncio.ensure_future(self._look(asks))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _look(self, asks: Asks) -> None:
        told: Set[str] = set()
        await asyncio.sleep(FIRST_LOOK_S)
        while True:
            try:
                pending = await self._lookup()
            except Exception:  # noqa: BLE001 (only informs; the call waits as before)
                pending = []
            for approval in pending:
                aid = str(approval.get("id"))
                if asks.covers(approval) and aid not in told:
                    told.add(aid)
                    _tell(approval, self._on_approval)
            await asyncio.sleep(LOOK_EVERY_S)
