"""Where the server is: a unix socket (the default) or a TCP URL with a token."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Optional

import httpx

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
"""Per request: 10 s to connect, 60 s for anything else. Calls that wait for
a command (exec, a cell, a stream) widen the read timeout themselves."""

_SOCKET_BASE_URL = "http://cordon"


def default_socket_path() -> str:
    """The socket ``cordon serve`` listens on when given no ``--socket``.

    ``$CORDON_SOCKET``; else, as root, ``/run/cordon/cordon.sock``; else
    ``$XDG_RUNTIME_DIR/cordon/cordon.sock``; else
    ``/run/user/UID/cordon/cordon.sock``.
    """
    explicit = os.environ.get("CORDON_SOCKET")
    if explicit:
        return explicit
    if os.geteuid() == 0:
        return "/run/cordon/cordon.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "cordon", "cordon.sock")
    return f"/run/user/{os.geteuid()}/cordon/cordon.sock"


@dataclass(frozen=True)
class Endpoint:
    """A resolved server address: what httpx needs to reach it."""

    base_url: str
    socket: Optional[str]
    headers: Dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """The address as a person would name it (for error messages)."""
        return f"unix:{self.socket}" if self.socket else self.base_url


def resolve_endpoint(
    base_url: Optional[str] = None,
    token: Optional[str] = None,
    socket: Optional[str] = None,
) -> Endpoint:
    """Pick the server's address.

    In order: ``base_url`` (TCP, with ``token`` or ``$CORDON_TOKEN``);
    ``socket``; ``$CORDON_URL`` (with ``$CORDON_TOKEN``); the default
    unix socket (:func:`default_socket_path`). A unix socket needs no token
    (its mode lets only its owner in); one given is sent all the same.
    """
    if base_url is None and socket is None:
        base_url = os.environ.get("CORDON_URL") or None
    if token is None:
        token = os.environ.get("CORDON_TOKEN") or None
    headers = {"User-Agent": "cordon-client-python"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if base_url is not None:
        return Endpoint(base_url=base_url.rstrip("/"), socket=None, headers=headers)
    return Endpoint(
        base_url=_SOCKET_BASE_URL,
        socket=socket or default_socket_path(),
        headers=headers,
    )
