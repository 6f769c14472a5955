"""Sending a :class:`~cordon_client._requests.Call` with httpx, sync and async.

Both transports turn an unexpected status into the typed error of
:mod:`cordon_client._errors` and a transport failure into
:class:`ConnectionFailed` / :class:`Timeout`; streams are read as NDJSON.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Dict, Iterator, Optional, Union

import httpx

from ._config import DEFAULT_TIMEOUT, Endpoint
from ._errors import ProtocolError, error_from_response, error_from_transport
from ._requests import NDJSON, Call

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


class SyncHTTP:
    """A keep-alive httpx client bound to one cordon server."""

    def __init__(self, endpoint: Endpoint, timeout: TimeoutArg = None) -> None:
        self.endpoint = endpoint
        self._timeout = _base_timeout(timeout)
        transport = httpx.HTTPTransport(uds=endpoint.socket) if endpoint.socket else None
        self._client = httpx.Client(transport=transport, **_client_args(endpoint, timeout))

    def send(self, call: Call) -> httpx.Response:
        """Send; the response when its status is one ``call`` expects."""
        try:
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
            with self._client.stream(**_request_args(call, self._timeout)) as response:
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
        self._client.close()


class AsyncHTTP:
    """The async twin of :class:`SyncHTTP`."""

    def __init__(self, endpoint: Endpoint, timeout: TimeoutArg = None) -> None:
        self.endpoint = endpoint
        self._timeout = _base_timeout(timeout)
        transport = httpx.AsyncHTTPTransport(uds=endpoint.socket) if endpoint.socket else None
        self._client = httpx.AsyncClient(transport=transport, **_client_args(endpoint, timeout))

    async def send(self, call: Call) -> httpx.Response:
        try:
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
            async with self._client.stream(**_request_args(call, self._timeout)) as response:
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
