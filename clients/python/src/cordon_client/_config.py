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


def _state_dir() -> str:
    """The server's state directory, by the server's own rule."""
    for var, suffix in (("CORDON_STATE_DIR", ""), ("XDG_STATE_HOME", "cordon")):
        value = os.environ.get(var)
        if value and os.path.isabs(value):
            return os.path.join(value, suffix) if suffix else value
    home = os.environ.get("HOME")
    if home:
        return os.path.join(home, ".local", "state", "cordon")
    if os.geteuid() == 0:
        return "/var/lib/cordon"
    return f"/tmp/cordon-{os.getuid()}"


def default_socket_path() -> str:
    """The socket ``cordon serve`` listens on when given no ``--socket``.

    ``$CORDON_SOCKET`` when set (a client-side override); else the server's
    rule: as root ``/run/cordon/cordon.sock``; else
    ``$XDG_RUNTIME_DIR/cordon/cordon.sock``; else
    ``/run/user/UID/cordon/cordon.sock`` when ``/run/user/UID`` exists; else
    ``cordon.sock`` in the server's state directory (``$CORDON_STATE_DIR``,
    ``$XDG_STATE_HOME/cordon``, ``~/.local/state/cordon``).
    """
    explicit = os.environ.get("CORDON_SOCKET")
    if explicit:
        return explicit
    if os.geteuid() == 0:
        return "/run/cordon/cordon.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "cordon", "cordon.sock")
    run_user = f"/run/user/{os.getuid()}"
    if os.path.isdir(run_user):
        return os.path.join(run_user, "cordon", "cordon.sock")
    return os.path.join(_state_dir(), "cordon.sock")


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
