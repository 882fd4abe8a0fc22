"""One response on a relayed Responses WebSocket (`relay.py`): its own body, gate and flow.

A client's `response.create` starts one `RelayedResponse`: the upstream's messages from then
on are its body (`ResponseBody`, fed by the socket's upstream reader), read by the same
engine as an HTTP stream (`engine.GatingStream` with the `websocket` framing: each message
one event, text at once, tool items held until the terminal and the whole batch valid), and
what the engine yields is split back into messages (`framing.websocket.Units`) and sent to
the client one text message each. State is the response's, never the socket's: the next
`response.create` on the socket starts a new one.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from aiohttp import WSMsgType, web

from ..conversation import ToolSpec
from ..credentials import Redactor
from ..providers.base import Provider
from ..providers.responses.websocket import TERMINAL_TYPES, is_connection_limit
from .admit import Shared
from .engine import GatingStream, Refused
from .flow import Flow, FlowHook, notify_done, notify_started
from .framing.websocket import Units, announced, message_type, unit

__all__ = ["MESSAGES_BUFFERED", "Closed", "RelayedResponse", "ResponseBody"]

MESSAGES_BUFFERED = 256  # upstream messages read ahead of the gate, per response


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


class ResponseBody:
    """One response's upstream messages, as units for the engine (`engine.ResumableBody`: a
    cancelled wait loses nothing, the messages wait in the queue)."""

    __slots__ = ("_ended", "_limit", "_redactor", "limit_message", "queue")

    def __init__(self, limit: int, redactor: Redactor | None) -> None:
        self.queue: asyncio.Queue[Item] = asyncio.Queue(MESSAGES_BUFFERED)
        self._limit = limit
        self._redactor = redactor
        self._ended = False
        self.limit_message: bytes | None = None  # the upstream's connection-limit error

    async def read_chunk(self) -> bytes:
        if self._ended:
            return b""
        item = await self.queue.get()
        if type(item) is bytes:
            if self._redactor is not None:
                item = self._redactor.redact_bytes(item)
            if message_type(item) in TERMINAL_TYPES:
                self._ended = True  # the response ended: nothing after it is its
                if is_connection_limit(item):
                    self.limit_message = item
                    return b""
            return unit(item)
        if isinstance(item, Oversize):
            return announced(self._limit + 1)
        assert isinstance(item, Closed)
        self._ended = True
        if item.clean:
            return b""
        raise ConnectionResetError(item.why)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.read_chunk():
            yield chunk

    @property
    def done(self) -> bool:
        """The response's body ended: the messages that come now are not its."""
        return self._ended

    async def aclose(self) -> None:
        self._ended = True
        while not self.queue.empty():  # an upstream reader waiting to put goes on
            self.queue.get_nowait()


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
    ) -> None:
        self.shared = shared
        self.hooks = hooks
        self.entry = entry
        self.request = request
        self.tools = tools
        self.flow = flow
        self.body = body
        self.refused = False  # the socket is to be closed after it

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
        try:
            await send_upstream()
        except Exception:
            await self.body.queue.put(Closed(False, "sending the request upstream failed"))
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
        self.refused = left or isinstance(stream.outcome, Refused)

    def start(self) -> None:
        notify_started(self.hooks, self.flow)

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


async def _close(pieces: Any) -> None:
    close = getattr(pieces, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()
