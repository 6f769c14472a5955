"""Sending a :class:`~cordon_client._requests.Call` with httpx, sync and async.

Both transports turn an unexpected status into the typed error of
:mod:`cordon_client._errors` and a transport failure into
:class:`ConnectionFailed` / :class:`Timeout`; streams are read as NDJSON.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Union

import httpx

from ._asks import Approval, AsyncWatch, OnApproval, SyncWatch
from ._config import DEFAULT_TIMEOUT, Endpoint
from ._errors import ProtocolError, error_from_response, error_from_transport
from ._requests import NDJSON, Call, list_approvals

TimeoutArg = Union[float, httpx.Timeout, None]


def _base_timeout(timeout: TimeoutArg) -> httpx.Timeout:
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(float(timeout), connect=min(10.0, float(timeout)))


def _call_timeout(base: httpx.Timeout, call: Call) -> httpx.Timeout:
    if call.read_timeout is None:
        return base
    read: Optional[float] = None
    if not call.waits_forever:
        read = max(base.read or 0.0, call.read_timeout)
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)


def _request_args(call: Call, base: httpx.Timeout) -> Dict[str, Any]:
    args: Dict[str, Any] = {
        "method": call.method,
        "url": call.path,
        "params": call.params,
        "headers": call.headers,
        "timeout": _call_timeout(base, call),
    }
    if call.json is not None:
        args["json"] = call.json
    if call.content is not None:
        args["content"] = call.content
    return args


def decode_json(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError as e:
        raise ProtocolError(
            f"the server's answer to {response.request.method} {response.request.url.path} is not JSON: {e}",
            status=response.status_code,
        ) from e


def _ndjson_line(line: str) -> Optional[Dict[str, Any]]:
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"a line of the event stream is not JSON: {line[:200]!r}") from e
    if not isinstance(value, dict):
        raise ProtocolError(f"a line of the event stream is not an object: {line[:200]!r}")
    return value


def _check_stream(response: httpx.Response) -> None:
    ctype = response.headers.get("content-type", "")
    if not ctype.startswith(NDJSON):
        raise ProtocolError(
            f"asked for an event stream, got {ctype or 'no content type'}",
            status=response.status_code,
        )


def _client_args(endpoint: Endpoint, timeout: TimeoutArg) -> Dict[str, Any]:
    return {
        "base_url": endpoint.base_url,
        "headers": endpoint.headers,
        "timeout": _base_timeout(timeout),
    }


def _approvals_of(response: httpx.Response) -> List[Approval]:
    if response.status_code != 200:
        return []
    listed = decode_json(response)
    return list(listed.get("approvals") or []) if isinstance(listed, dict) else []


class SyncHTTP:
    """A keep-alive httpx client bound to one cordon server.

    A call that a policy may hold for a human's answer is watched while it
    waits (:mod:`cordon_client._asks`), on a second connection opened then.
    """

    def __init__(self, endpoint: Endpoint, timeout: TimeoutArg = None, on_approval: Optional[OnApproval] = None) -> None:
        self.endpoint = endpoint
        self._timeout = _base_timeout(timeout)
        self._client = self._new_client(timeout)
        self._timeout_arg = timeout
        self._lookup_client: Optional[httpx.Client] = None
        self._watch = SyncWatch(self._pending_approvals, on_approval)

    def _new_client(self, timeout: TimeoutArg) -> httpx.Client:
        transport = httpx.HTTPTransport(uds=self.endpoint.socket) if self.endpoint.socket else None
        return httpx.Client(transport=transport, **_client_args(self.endpoint, timeout))

    def _pending_approvals(self) -> List[Approval]:
        """Only ever called from the watch's thread."""
        if self._lookup_client is None:
            self._lookup_client = self._new_client(self._timeout_arg)
        call = list_approvals("pending")
        return _approvals_of(self._lookup_client.request(**_request_args(call, self._timeout)))

    def send(self, call: Call) -> httpx.Response:
        """Send; the response when its status is one ``call`` expects."""
        try:
            with self._watch.watching(call.asks):
                response = self._client.request(**_request_args(call, self._timeout))
        except httpx.HTTPError as e:
            raise error_from_transport(e, self.endpoint.describe()) from e
        if response.status_code not in call.expect:
            raise error_from_response(response)
        return response

    def json(self, call: Call) -> Any:
        return decode_json(self.send(call))

    def events(self, call: Call) -> Iterator[Dict[str, Any]]:
        """The NDJSON objects of a streamed answer, as they arrive."""
        try:
            with self._watch.watching(call.asks), self._client.stream(**_request_args(call, self._timeout)) as response:
                if response.status_code not in call.expect:
                    raise error_from_response(response, response.read())
                _check_stream(response)
                for line in response.iter_lines():
                    value = _ndjson_line(line)
                    if value is not None:
                        yield value
        except httpx.HTTPError as e:
            raise error_from_transport(e, self.endpoint.describe()) from e

    def close(self) -> None:
        self._watch.close()
        self._client.close()
        if self._lookup_client is not None:
            self._lookup_client.close()


class AsyncHTTP:
    """The async twin of :class:`SyncHTTP`."""

    def __init__(self, endpoint: Endpoint, timeout: TimeoutArg = None, on_approval: Optional[OnApproval] = None) -> None:
        self.endpoint = endpoint
        self._timeout = _base_timeout(timeout)
        self._timeout_arg = timeout
        self._client = self._new_client(timeout)
        self._lookup_client: Optional[httpx.AsyncClient] = None
        self._watch = AsyncWatch(self._pending_approvals, on_approval)

    def _new_client(self, timeout: TimeoutArg) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(uds=self.endpoint.socket) if self.endpoint.socket else None
        return httpx.AsyncClient(transport=transport, **_client_args(self.endpoint, timeout))

    async def _pending_approvals(self) -> List[Approval]:
        if self._lookup_client is None:
            self._lookup_client = self._new_client(self._timeout_arg)
        call = list_approvals("pending")
        return _approvals_of(await self._lookup_client.request(**_request_args(call, self._timeout)))

    async def send(self, call: Call) -> httpx.Response:
        try:
            async with self._watch.watching(call.asks):
                response = await self._client.request(**_request_args(call, self._timeout))
        except httpx.HTTPError as e:
            raise error_from_transport(e, self.endpoint.describe()) from e
        if response.status_code not in call.expect:
            raise error_from_response(response)
        return response

    async def json(self, call: Call) -> Any:
        return decode_json(await self.send(call))

    async def events(self, call: Call) -> AsyncIterator[Dict[str, Any]]:
        try:
            async with self._watch.watching(call.asks), self._client.stream(
                **_request_args(call, self._timeout)
            ) as response:
                if response.status_code not in call.expect:
                    raise error_from_response(response, await response.aread())
                _check_stream(response)
                async for line in response.aiter_lines():
                    value = _ndjson_line(line)
                    if value is not None:
                        yield value
        except httpx.HTTPError as e:
            raise error_from_transport(e, self.endpoint.describe()) from e

    async def close(self) -> None:
        await self._client.aclose()
        if self._lookup_client is not None:
            await self._lookup_client.aclose()
