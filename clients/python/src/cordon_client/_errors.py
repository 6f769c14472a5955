"""Typed errors of the cordon API.

The server answers an error with ``{"error": {"code", "message", "fix"?}}``
and an HTTP status; :func:`error_from_response` picks the class from the
``code`` first and the status second, so a new code on a known status still
gets a useful class.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type

import httpx

__all__ = [
    "CordonError",
    "ConnectionFailed",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "PolicyRefused",
    "NotFound",
    "Timeout",
    "Conflict",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "Unprocessable",
    "RateLimited",
    "ServerError",
    "Unavailable",
    "QuotaExceeded",
    "ProtocolError",
]


class CordonError(Exception):
    """Anything the cordon API answered with an error, or could not answer.

    Attributes:
        status: the HTTP status (``None`` when no response came).
        code: the machine-readable code from the error body
            (``"not_found"``, ``"quota"``, ...), or a client-side one.
        message: what went wrong.
        fix: how to fix it, when the server said.
        body: the decoded error body, when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        fix: Optional[str] = None,
        body: Any = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.fix = fix
        self.body = body
        text = message
        if status is not None:
            text = f"{status} {code or 'error'}: {message}"
        if fix:
            text += f" (fix: {fix})"
        super().__init__(text)


class ConnectionFailed(CordonError):
    """The server could not be reached (not started, wrong socket or URL)."""


class BadRequest(CordonError):
    """400: the request is malformed; the message says which part."""


class Unauthorized(CordonError):
    """401: no token, or a token the server does not know."""


class Forbidden(CordonError):
    """403: the request goes beyond the token's ceiling."""


class PolicyRefused(Forbidden):
    """403 from the policy or an approver: ``code`` is ``"policy_denied"``,
    ``"approval_denied"`` or ``"approval_expired"``.

    Attributes:
        subject: what was refused, e.g. ``{"kind": "exec", "argv_prefix": [...]}``.
        rule: the rule that decided, ``{"id", "file", "line"}``.
        approval: the approval that was asked (``"ap_..."``), if one was.
        would_allow: the grant that would allow it, in words (``None`` for
            a ``forbid``: only a change of the policy can).
    """

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        err = self.body.get("error", {}) if isinstance(self.body, dict) else {}
        self.subject: Optional[Dict[str, Any]] = err.get("subject")
        self.rule: Optional[Dict[str, Any]] = err.get("rule")
        self.approval: Optional[str] = err.get("approval")
        self.would_allow: Optional[str] = err.get("would_allow")


class NotFound(CordonError):
    """404: no such sandbox, process, context or file (or not the token's)."""


class Timeout(CordonError):
    """408 from the server, or no answer within the client's timeout."""


class Conflict(CordonError):
    """409: the object is not in a state that allows this (e.g. ended)."""


class PayloadTooLarge(CordonError):
    """413: the body is over a size limit (per-file limit for uploads)."""


class UnsupportedMediaType(CordonError):
    """415: the body's content type is not one the endpoint takes."""


class Unprocessable(CordonError):
    """422: well-formed but not acceptable (an unknown preset, a bad path)."""


class RateLimited(CordonError):
    """429: the server is at capacity; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw: Any) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)


class ServerError(CordonError):
    """500: the server failed; the message says what it could not do."""


class Unavailable(CordonError):
    """503: the server cannot serve now (shutting down, spawner gone), or
    its audit store cannot take the action's record (``code`` is
    ``"audit_unavailable"``: nothing was done; retry once the store is
    writable)."""


class QuotaExceeded(CordonError):
    """507: the session's storage quota is used up."""


class ProtocolError(CordonError):
    """The server's answer did not have the shape the API promises."""


_BY_STATUS: Dict[int, Type[CordonError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: Timeout,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: Unprocessable,
    429: RateLimited,
    500: ServerError,
    503: Unavailable,
    507: QuotaExceeded,
}

_BY_CODE: Dict[str, Type[CordonError]] = {
    "bad_request": BadRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "policy_denied": PolicyRefused,
    "approval_denied": PolicyRefused,
    "approval_expired": PolicyRefused,
    "not_found": NotFound,
    "request_timeout": Timeout,
    "conflict": Conflict,
    "too_large": PayloadTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "unprocessable": Unprocessable,
    "at_capacity": RateLimited,
    "internal": ServerError,
    "not_implemented": ServerError,
    "unavailable": Unavailable,
    "audit_unavailable": Unavailable,
    "quota": QuotaExceeded,
}


def _retry_after(response: httpx.Response) -> Optional[float]:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date: not used by cordon


def error_from_response(response: httpx.Response, body: Optional[bytes] = None) -> CordonError:
    """The typed error for an error response (``body``: its bytes, read)."""
    raw = body if body is not None else response.content
    status = response.status_code
    code: Optional[str] = None
    message = raw.decode("utf-8", "replace").strip() or response.reason_phrase
    fix: Optional[str] = None
    decoded: Any = None
    try:
        decoded = json.loads(raw)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
        err = decoded["error"]
        code = err.get("code") if isinstance(err.get("code"), str) else None
        message = str(err.get("message", message))
        fix = err.get("fix") if isinstance(err.get("fix"), str) else None
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else CordonError
    kw: Dict[str, Any] = dict(status=status, code=code, fix=fix, body=decoded)
    if cls is RateLimited:
        return RateLimited(message, retry_after=_retry_after(response), **kw)
    return cls(message, **kw)


def error_from_transport(exc: httpx.HTTPError, where: str) -> CordonError:
    """The typed error for a failure below HTTP (connect, read timeout)."""
    if isinstance(exc, httpx.TimeoutException):
        return Timeout(
            f"no answer from {where} in time ({type(exc).__name__})",
            code="client_timeout",
            fix="raise the client's timeout, or the exec's own timeout",
        )
    if isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError)):
        return ConnectionFailed(
            f"cannot talk to the cordon server at {where}: {exc}",
            code="connection_failed",
            fix="start it with `cordon serve`, or point the client at it "
            "(socket=..., base_url=..., $CORDON_SOCKET, $CORDON_URL)",
        )
    return CordonError(f"request to {where} failed: {exc}", code="transport")
