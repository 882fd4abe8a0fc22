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

**Time bounds** (`GatingOptions.idle_timeout`, `GatingOptions.deadline`, the deadline
counted from the request's start), as `lockgate proxy` applies them: the response head
must arrive within both, a stream is bounded by the engine, and a whole answer's body may
fall silent for no longer than the idle timeout and must be complete by the deadline. A
bound that runs out is a refusal after which a new request may succeed (the protocol's
JSON error body, marked transient, without `x-should-retry: false`, so the SDK's own
retries apply): 504 when the head never came, 502 when the body did not; the inner
response is closed. The client's own `httpx2` timeouts still apply underneath.

The transport never retries (the SDK's own retries send a new request through it). The
inner response is closed when the gated body ends, when the SDK abandons it (closes the
response early), and, for a body still open, when the transport is closed
(`client.close()` after leaving a stream without closing it): nothing more is read from
the upstream, and nothing is left for the event loop to finalize at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from ..errors import FailureKind
from ..events import Event, Observer, ignore_event
from ..gateway import Gateway, Refusal
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
from .routes import PathProblem, plain_path, route

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
        # The gated bodies not yet closed (weakly: one the SDK dropped is not kept alive).
        self._open: weakref.WeakSet[_GatedBody] = weakref.WeakSet()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            path = plain_path(request.url.path)
        except PathProblem:
            path = request.url.path  # no SDK builds such a path: routed as it is
        query = {name: value for name, value in reversed(request.url.params.multi_items())}
        routed = route(request.method, path, query)
        if routed is None:
            return await self.inner.handle_async_request(request)
        entry, gateway, target = routed.provider, routed.gateway, routed.target
        if target.problem is not None:
            return _unsupported(gateway, target.problem)
        started_at = asyncio.get_running_loop().time()
        # A body that is no JSON object (the upstream will say what is wrong with it) asks
        # for no stream and exposes no tools: a 2xx answer to it fails closed.
        native = _json_object(await request.aread()) or {}
        bounds = _Bounds(started_at, self.options)
        try:
            async with asyncio.timeout_at(bounds.head_until()) as timer:
                response = await self.inner.handle_async_request(request)
        except TimeoutError:
            if not timer.expired():
                raise
            return _time_refusal(gateway, 504, bounds.lapse("no response head"))
        status = response.status_code
        if not 200 <= status < 300:
            return response
        try:
            if gates(gateway, native, status, target):
                return self._streamed(entry, gateway, native, response, started_at)
            return await self._whole(entry, gateway, native, response, bounds)
        except BaseException:
            with contextlib.suppress(Exception):
                await response.aclose()
            raise

    async def aclose(self) -> None:
        """Close every gated body still open (and so its inner response), then the inner
        transport."""
        try:
            for body in list(self._open):
                await body.aclose()
        finally:
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
        body = _GatedBody(stream, response, self._open.discard)
        self._open.add(body)
        return httpx2.Response(
            response.status_code,
            headers=_passed_headers(response.headers),
            stream=body,
            extensions=_extensions(response),
        )

    async def _whole(
        self,
        entry: Provider,
        gateway: Gateway,
        native: dict[str, Any],
        response: httpx2.Response,
        bounds: _Bounds,
    ) -> httpx2.Response:
        try:
            body = await _read_whole(response, bounds)
        except _Lapsed as lapsed:
            return _time_refusal(gateway, 502, lapsed.lapse, _passed_headers(response.headers))
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
            told = {name.lower() for name, _ in verdict.headers}  # in place of any case
            headers = [item for item in _json_headers(headers) if item[0].lower() not in told]
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


@dataclass(frozen=True, slots=True)
class _Lapse:
    """A time bound that ran out: its failure kind and what the client is told."""

    kind: FailureKind
    reason: str


class _Lapsed(Exception):
    """Reading a whole answer ran out of time (`lapse` says which bound)."""

    def __init__(self, lapse: _Lapse) -> None:
        super().__init__(lapse.reason)
        self.lapse = lapse


@dataclass(frozen=True, slots=True)
class _Bounds:
    """The time bounds of one gated request, on the loop's clock: silence for no longer
    than `idle_timeout`, all of it by `deadline` after `started_at`."""

    started_at: float
    options: GatingOptions

    @property
    def deadline_at(self) -> float:
        return self.started_at + self.options.deadline

    def head_until(self) -> float:
        return min(self.started_at + self.options.idle_timeout, self.deadline_at)

    def read_until(self) -> float:
        now = asyncio.get_running_loop().time()
        return min(now + self.options.idle_timeout, self.deadline_at)

    def lapse(self, silence: str) -> _Lapse:
        """The bound that ran out now: the deadline when it has passed, else the silence
        (`silence` says what did not come)."""
        if asyncio.get_running_loop().time() >= self.deadline_at:
            return _Lapse(
                FailureKind.DEADLINE,
                f"no complete response within the {self.options.deadline:g} s deadline",
            )
        return _Lapse(
            FailureKind.IDLE_TIMEOUT,
            f"{silence} for {self.options.idle_timeout:g} s; connection closed",
        )


async def _read_whole(response: httpx2.Response, bounds: _Bounds) -> bytes:
    """The decoded body, read until its end or until more than `MAX_WHOLE_BYTES` arrived
    (the rest is never read: `judge_whole` refuses it as too large); raises `_Lapsed` when
    it falls silent for the idle timeout or is not complete by the deadline."""
    parts: list[bytes] = []
    size = 0
    async with contextlib.aclosing(response.aiter_bytes()) as pieces:
        while size <= MAX_WHOLE_BYTES:
            try:
                async with asyncio.timeout_at(bounds.read_until()) as timer:
                    piece = await anext(pieces, None)
            except TimeoutError:
                if not timer.expired():
                    raise
                raise _Lapsed(bounds.lapse("no bytes")) from None
            if piece is None:
                break
            parts.append(piece)
            size += len(piece)
    return b"".join(parts)


def _time_refusal(
    gateway: Gateway, status: int, lapse: _Lapse, headers: list[tuple[str, str]] | None = None
) -> httpx2.Response:
    """The refusal for a time bound that ran out: `status` and the protocol's JSON error
    body, transient (a new request may succeed: no `x-should-retry: false`)."""
    text = f"lockgate refused the response: {lapse.kind}: {lapse.reason}"
    body = gateway.error_body(Refusal(str(lapse.kind), text, True, 0))
    return httpx2.Response(status, headers=_json_headers(headers or []), content=body)


def _unsupported(gateway: Gateway, problem: str) -> httpx2.Response:
    """A protocol request the gate cannot judge, refused before it is sent: a 400 with the
    protocol's error body, which no new request can change (`x-should-retry: false`)."""
    text = f"lockgate refused the request: {problem}"
    body = gateway.error_body(Refusal("unsupported_request", text, False, 0))
    headers = [*_json_headers([]), ("x-should-retry", "false")]
    return httpx2.Response(400, headers=headers, content=body)


def _json_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`headers` with the content type of a JSON error body in place of the upstream's."""
    kept = [(name, value) for name, value in headers if name.lower() != "content-type"]
    kept.append(("content-type", "application/json"))
    return kept


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
    """The gated body the SDK reads: the engine's output. Closing it (the body's end, a
    failure, the SDK leaving early, or the transport closing) ends the engine's iteration
    and closes the inner response, at once and once.

    Its iterator is an object, not an async generator: an SDK that leaves a stream without
    closing it leaves nothing of the gate for the event loop to finalize at shutdown (the
    loop closes every pending async generator at once, and one closing another that it is
    closing too prints `aclose(): asynchronous generator is already running`)."""

    def __init__(
        self,
        stream: GatingStream,
        response: httpx2.Response,
        closed: Callable[[_GatedBody], None],
    ) -> None:
        self.stream = stream
        self._response = response
        self._closed_callback = closed
        self._pieces: AsyncIterator[bytes] | None = None
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._pieces is not None or self._closed:
            raise httpx2.StreamConsumed()
        self._pieces = aiter(self.stream)
        return _Pieces(self)

    async def next_piece(self) -> bytes:
        pieces = self._pieces
        if pieces is None or self._closed:
            raise StopAsyncIteration
        try:
            return await anext(pieces)
        except BaseException:  # the end, a failure or a cancellation: closed now
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closed_callback(self)
        pieces = self._pieces
        try:
            # An iteration running elsewhere (another task reading, or the loop finalizing
            # it) is not closed from here: closing the inner response ends its read.
            if pieces is not None and not getattr(pieces, "ag_running", False):
                close = getattr(pieces, "aclose", None)
                if close is not None:
                    await close()
        finally:
            if not self._response.is_closed:
                with contextlib.suppress(Exception):
                    await self._response.aclose()


class _Pieces:
    """The iterator over a `_GatedBody` (the body closes itself at the end)."""

    __slots__ = ("_body",)

    def __init__(self, body: _GatedBody) -> None:
        self._body = body

    def __aiter__(self) -> _Pieces:
        return self

    async def __anext__(self) -> bytes:
        return await self._body.next_piece()
