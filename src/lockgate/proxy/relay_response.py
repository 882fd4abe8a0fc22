"""One response on a relayed Responses WebSocket (`relay.py`): its own body, gate and flow.

A client's `response.create` starts one `RelayedResponse`: the upstream's messages from then
on are its body (`ResponseBody`, read from the upstream socket in the engine's task), read
by the same engine as an HTTP stream (`engine.GatingStream` with the `websocket` framing:
each message one event, text at once, tool items held until the terminal and the whole
batch valid), and what the engine yields is split back into messages
(`framing.websocket.Units`) and sent to the client one text message each. State is the
response's, never the socket's: the next `response.create` on the socket starts a new one.

- **The body** ends after the response's terminal message (`response.completed`,
  `.incomplete`, `.failed`, `error`); an upstream socket that closes normally before it is a
  clean end (`stream_ended`), one that closes abnormally (1006, 1011 …) or breaks is
  `transport`; a binary message breaks it; a message over the route's event bound is
  announced by its length alone (`bound_exceeded`).
- **The connection limit** (`websocket_connection_limit_reached`): the upstream's error goes
  to the client as it came, in place of the refusal (Codex retries it on a new socket).
- **A refusal** (`refused` after the iteration) means the socket is to be closed: the
  upstream's copy of the refused response must not be continued by id.
- **The flow** (`/metrics`, the access log): one per response, method `WS`, the socket's
  path and route, status 200 as an HTTP stream's (its refusal is in-band).
- **The recording** (`--record`): one cassette per response
  (`CassetteRecorder.websocket_exchange`), each upstream message one read, as it came
  (redacted).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal

import aiohttp
from aiohttp import WSMsgType, web
from aiohttp.http_websocket import WSMessage, WSMessageTextBytes

from ..cassette.recorder import Exchange
from ..conversation import ToolSpec
from ..credentials import Redactor
from ..providers.base import Provider
from ..providers.responses.websocket import TERMINAL_TYPES, is_connection_limit
from ..telemetry import RequestTrace
from .admit import Shared
from .engine import GatingStream, Refused
from .flow import Flow, FlowHook, notify_done, notify_started
from .framing.websocket import Units, announced, message_type, unit
from .traced import summary

__all__ = [
    "CLEAN_CLOSES",
    "OVERSIZE",
    "Closed",
    "Item",
    "RelayedResponse",
    "ResponseBody",
    "UpstreamSocket",
    "item_of",
]

CLEAN_CLOSES = frozenset({1000, 1001})  # an upstream close that is a clean end
UpstreamSocket = aiohttp.ClientWebSocketResponse[Literal[False]]  # its text read as bytes


class Closed:
    """The upstream socket ended: normally (`clean`: a clean end of the body) or not (why)."""

    __slots__ = ("clean", "why")

    def __init__(self, clean: bool, why: str) -> None:
        self.clean = clean
        self.why = why


class Oversize:
    """An upstream message over the event bound (aiohttp did not read it)."""

    __slots__ = ()


OVERSIZE = Oversize()
Item = bytes | Closed | Oversize


def item_of(message: WSMessage | WSMessageTextBytes, close_code: int | None) -> Item | None:
    """What an upstream WebSocket message is to a response (None: a ping or pong)."""
    kind = message.type
    if kind is WSMsgType.TEXT:
        data: bytes = message.data  # text read as bytes (`decode_text=False`)
        return data
    if kind is WSMsgType.BINARY:
        return Closed(False, "the upstream sent a binary message")
    if kind is WSMsgType.ERROR:
        error = message.data
        too_big = (
            isinstance(error, aiohttp.WebSocketError)
            and error.code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
        )
        return OVERSIZE if too_big else Closed(False, f"the socket broke ({error!r})")
    if kind in (WSMsgType.PING, WSMsgType.PONG):
        return None
    return Closed(close_code in CLEAN_CLOSES, f"the upstream closed the socket ({close_code})")


class ResponseBody:
    """One response's upstream messages, as units for the engine, read from the upstream
    socket in the engine's own task (`engine.ResumableBody`: a cancelled wait loses nothing,
    the message stays in aiohttp's queue); after its terminal, nothing more is read."""

    __slots__ = (
        "_ended",
        "_limit",
        "_redactor",
        "_socket",
        "closed",
        "exchange",
        "limit_message",
    )

    def __init__(self, socket: UpstreamSocket, limit: int, redactor: Redactor | None) -> None:
        self._socket = socket
        self._limit = limit
        self._redactor = redactor
        self._ended = False
        self.closed = False  # the upstream socket ended while it was read
        self.limit_message: bytes | None = None  # the upstream's connection-limit error
        self.exchange: Exchange | None = None  # the response's recording (`--record`)

    async def read_chunk(self) -> bytes:
        if self._ended:
            return b""
        socket = self._socket
        while True:
            item = item_of(await socket.receive(), socket.close_code)
            if item is not None:
                break
        if type(item) is bytes:
            if self._redactor is not None:
                item = self._redactor.redact_bytes(item)
            if self.exchange is not None:
                self.exchange.message(item)
            if message_type(item) in TERMINAL_TYPES:
                self._ended = True  # the response ended: nothing after it is its
                if is_connection_limit(item):
                    self.limit_message = item
                    return b""
            return unit(item)
        if self.exchange is not None:
            self.exchange.end("clean" if isinstance(item, Closed) and item.clean else "reset")
        if isinstance(item, Oversize):
            self._ended = self.closed = True  # aiohttp closes the socket
            return announced(self._limit + 1)
        assert isinstance(item, Closed)
        self._ended = self.closed = True
        if item.clean:
            return b""
        raise ConnectionResetError(item.why)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.read_chunk():
            yield chunk

    async def aclose(self) -> None:
        self._ended = True


class RelayedResponse:
    """One `response.create` through the gate (see the module docstring)."""

    def __init__(
        self,
        shared: Shared,
        hooks: Sequence[FlowHook],
        entry: Provider,
        request: Mapping[str, Any],
        tools: Sequence[ToolSpec],
        flow: Flow,
        body: ResponseBody,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.shared = shared
        self.hooks = hooks
        # The client's upgrade headers: a tracer continues their trace context, one request
        # trace per response (`traced.summary`).
        self.headers: Mapping[str, str] = headers or {}
        self.trace: RequestTrace | None = None
        self.entry = entry
        self.request = request
        self.tools = tools
        self.flow = flow
        self.body = body
        self.refused = False  # the socket is to be closed after it
        body.exchange = _recording(shared, entry, request, flow)

    async def run(
        self,
        route_gating: Any,
        client: web.WebSocketResponse,
        send_upstream: Callable[[], Any],
    ) -> None:
        """Send the request upstream (`send_upstream`), gate its answer to `client`."""
        flow, shared = self.flow, self.shared
        loop = asyncio.get_running_loop()
        left = False
        stream = GatingStream(
            self.entry,
            self.request,
            self.body,
            route_gating,
            observer=flow.observe,
            redact=shared.redact,
            started_at=loop.time(),
            budget=shared.held,
            tools=self.tools,
            framing="websocket",
        )
        flow.status = 200
        with contextlib.suppress(Exception):  # not sent: the socket's end, when read, says so
            await send_upstream()
        units = Units(1 << 32)
        pieces = aiter(stream)
        try:
            async for piece in pieces:
                refusing = isinstance(stream.outcome, Refused)
                for message in units.feed(piece):
                    if refusing and self.body.limit_message is not None:
                        message = self.body.limit_message  # as it came: Codex retries it
                    if flow.first_sent_at is None:
                        flow.first_sent_at = time.monotonic()
                    await client.send_frame(message, WSMsgType.TEXT)
        except (ConnectionError, RuntimeError):  # the client left
            left = True
        finally:
            await _close(pieces)
            flow.judged_stream(stream, left, time.monotonic())
            _recorded(self.body.exchange, flow)
            if self.body.limit_message is not None and not left:
                # the upstream's own error, passed as it came: no refusal of lockgate's
                flow.outcome, flow.kind, flow.verdict = "forwarded", None, None
                flow.incomplete, flow.withheld = False, 0
                flow.reason = "the upstream's WebSocket connection limit, passed on"
        self.refused = left or isinstance(stream.outcome, Refused)

    def start(self) -> None:
        notify_started(self.hooks, self.flow)
        with contextlib.suppress(Exception):  # a tracer that fails never fails a response
            self.trace = self.shared.tracing.request(self.headers, self.flow.started)

    def done(self, cancelled: bool) -> None:
        flow = self.flow
        if cancelled:
            if self.shared.cutting:
                flow.outcome = "cut"
                flow.reason = (
                    f"the proxy stopped: cut after the {self.shared.grace:g} s grace period"
                )
            else:
                flow.outcome = "abandoned"
        flow.ended = time.monotonic()
        self.shared.answered += 1
        notify_done(self.hooks, flow)
        if self.trace is not None:
            with contextlib.suppress(Exception):
                self.trace.end(summary(flow, True))


def _recording(
    shared: Shared, entry: Provider, request: Mapping[str, Any], flow: Flow
) -> Exchange | None:
    """The response's recording (the route's first upstream serves the socket)."""
    if shared.recorder is None:
        return None
    runtime = next((r for r in shared.routes if r.settings.name == flow.route), None)
    if runtime is None or not runtime.upstreams:
        return None
    url = runtime.upstreams[0].url
    return shared.recorder.websocket_exchange(entry.name, url, flow.upstream_path, request)


def _recorded(exchange: Exchange | None, flow: Flow) -> None:
    if exchange is not None:
        if flow.kind in ("idle_timeout", "deadline"):
            exchange.end("timeout")
        exchange.decide(flow.verdict)
        exchange.finish()


async def _close(pieces: Any) -> None:
    close = getattr(pieces, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()
