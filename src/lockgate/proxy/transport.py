"""The gate inside the client: an `httpx2` transport for the official SDKs.

`GatingTransport` wraps another transport (by default `httpx2.AsyncHTTPTransport()`) and
puts the gating engine between it and the SDK, in the SDK's own process, with one line:

    AsyncOpenAI(http_client=httpx2.AsyncClient(transport=GatingTransport()))
    AsyncAnthropic(http_client=gated_client())

For every request:

- **Not a protocol request** (`routes.route`: not a POST to `…/responses`,
  `…/chat/completions` or `…/messages`): sent to the inner transport and answered
  unchanged. A protocol request whose body is not a JSON object is sent as it is (the
  upstream owns request validation), but it exposes no tools and asks for no stream: a 2xx
  answer to it is judged as a whole answer with no tools (a stream fails closed).
- **An error status** (anything but 2xx): the upstream's answer unchanged (its status,
  headers, `retry-after` and body), so the SDK raises and retries as it would directly.
- **A 2xx stream** (`engine.gates`): the same status and headers, but the body is the
  engine's (`GatingStream` over the upstream's decoded bytes): an accepted stream is
  the upstream's bytes (keep-alives aside); a refused one ends with the protocol's stream
  error, on which the SDK's stream helpers raise, and no tool call of it reaches the SDK.
  The bytes passed on are decoded, so `content-encoding` and `content-length` are dropped
  (`engine.forwarded_headers`).
- **A 2xx whole answer** (a request without `stream`): read (under `MAX_WHOLE_BYTES`) and
  judged (`engine.judge_whole`): accepted, the upstream's status and body unchanged;
  refused, a 502 with the protocol's JSON error body (the SDK raises
  `InternalServerError`).

The transport never retries (the SDK's own retries send a new request through it). The
inner response is closed when the gated body ends, and when the SDK abandons it (closes
the response early): nothing more is read from the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2

from ..events import Event, Observer, ignore_event
from ..gateway import Gateway
from ..providers.base import Provider
from .engine import (
    MAX_WHOLE_BYTES,
    GatingOptions,
    GatingStream,
    Refused,
    forwarded_headers,
    gates,
    judge_whole,
)
from .routes import route

__all__ = ["GatingTransport", "gated_client"]

# The response extensions that describe the exchange (not the connection's stream).
_EXTENSIONS = ("http_version", "reason_phrase")


class GatingTransport(httpx2.AsyncBaseTransport):
    """An `httpx2` transport that gates every protocol response of `inner` (see the module
    docstring). `options`: how responses are judged (`GatingOptions`); `observer`: sees the
    normalized events of every judged response."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport | None = None,
        options: GatingOptions | None = None,
        *,
        observer: Observer | None = None,
    ) -> None:
        self.inner = inner if inner is not None else httpx2.AsyncHTTPTransport()
        self.options = options or GatingOptions()
        self.observer: Callable[[Event], None] = observer or ignore_event

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        entry = route(request.method, request.url.path)
        if entry is None or entry.gateway is None:
            return await self.inner.handle_async_request(request)
        # A body that is no JSON object (the upstream will say what is wrong with it) asks
        # for no stream and exposes no tools: a 2xx answer to it fails closed.
        native = _json_object(await request.aread()) or {}
        gateway = entry.gateway()
        started_at = asyncio.get_running_loop().time()
        response = await self.inner.handle_async_request(request)
        status = response.status_code
        if not 200 <= status < 300:
            return response
        try:
            if gates(gateway, native, status):
                return self._streamed(entry, gateway, native, response, started_at)
            return await self._whole(entry, native, response)
        except BaseException:
            with contextlib.suppress(Exception):
                await response.aclose()
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _streamed(
        self,
        entry: Provider,
        gateway: Gateway,
        native: dict[str, Any],
        response: httpx2.Response,
        started_at: float,
    ) -> httpx2.Response:
        stream = GatingStream(
            entry,
            native,
            _Upstream(response),
            self.options,
            observer=self.observer,
            started_at=started_at,
        )
        return httpx2.Response(
            response.status_code,
            headers=_passed_headers(response.headers),
            stream=_GatedBody(stream, response),
            extensions=_extensions(response),
        )

    async def _whole(
        self, entry: Provider, native: dict[str, Any], response: httpx2.Response
    ) -> httpx2.Response:
        try:
            body = await _read_capped(response, MAX_WHOLE_BYTES + 1)
        finally:
            await response.aclose()
        verdict = judge_whole(
            entry,
            native,
            body,
            self.options,
            status=response.status_code,
            observer=self.observer,
        )
        headers = _passed_headers(response.headers)
        if isinstance(verdict.outcome, Refused):
            headers = [(name, value) for name, value in headers if name.lower() != "content-type"]
            headers.append(("content-type", "application/json"))
            headers.extend(verdict.headers)
        return httpx2.Response(
            verdict.status,
            headers=headers,
            content=verdict.body,
            extensions=_extensions(response) if verdict.status == response.status_code else None,
        )


def gated_client(
    options: GatingOptions | None = None,
    *,
    observer: Observer | None = None,
    **httpx_kwargs: Any,
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` whose transport is a `GatingTransport` (over `transport=`,
    when given, else the default HTTP transport); the other keyword arguments go to
    `httpx2.AsyncClient` as they are."""
    inner = httpx_kwargs.pop("transport", None)
    return httpx2.AsyncClient(
        transport=GatingTransport(inner, options, observer=observer), **httpx_kwargs
    )


def _json_object(body: bytes) -> dict[str, Any] | None:
    """The request body as a JSON object (None: it is not one)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _passed_headers(headers: httpx2.Headers) -> list[tuple[str, str]]:
    """The upstream headers `forwarded_headers` keeps, every value of each (a repeated
    header stays repeated)."""
    kept = {name.lower() for name in forwarded_headers(headers)}
    return [(name, value) for name, value in headers.multi_items() if name.lower() in kept]


def _extensions(response: httpx2.Response) -> dict[str, Any]:
    return {name: response.extensions[name] for name in _EXTENSIONS if name in response.extensions}


async def _read_capped(response: httpx2.Response, cap: int) -> bytes:
    """The decoded body, read until its end or until `cap` bytes arrived (the rest is
    never read)."""
    parts: list[bytes] = []
    size = 0
    async with contextlib.aclosing(response.aiter_bytes()) as pieces:
        async for piece in pieces:
            parts.append(piece)
            size += len(piece)
            if size >= cap:
                break
    return b"".join(parts)


class _Upstream:
    """The inner response's decoded body, as the engine reads it: closing it closes the
    inner response."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._response.aiter_bytes()

    async def aclose(self) -> None:
        await self._response.aclose()


class _GatedBody(httpx2.AsyncByteStream):
    """The gated body the SDK reads: the engine's output. Closing it (the body's end, or
    the SDK leaving early) ends the engine's iteration and closes the inner response."""

    def __init__(self, stream: GatingStream, response: httpx2.Response) -> None:
        self.stream = stream
        self._response = response
        self._pieces: AsyncIterator[bytes] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._pieces is not None:
            raise httpx2.StreamConsumed()
        pieces = self._pieces = aiter(self.stream)
        try:
            async for piece in pieces:
                yield piece
        finally:
            await self._finish()

    async def aclose(self) -> None:
        await self._finish()

    async def _finish(self) -> None:
        try:
            close = getattr(self._pieces, "aclose", None)
            if close is not None:
                await close()
        finally:
            if not self._response.is_closed:
                with contextlib.suppress(Exception):
                    await self._response.aclose()
