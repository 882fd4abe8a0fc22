"""WebSocket messages as a `Framing` (the Responses WebSocket relay, `proxy/relay.py`): one
text message is one event.

The engine reads bytes and writes bytes, and may slice what it reads (a large read is framed
in slices) or join what it writes (the held frames are released in pieces that may end
inside a message). So both ways a message travels as a **unit**: its length (4 bytes, big
endian) then its UTF-8 text (`unit`). The relay wraps each upstream message so before the
engine, and splits what the engine yields back into messages (`Units`) to send each as one
text message; nothing of the unit reaches either socket.

- **In**: each unit is one `RawFrame` whose event is named by the message's `type` (read
  from the JSON without a full parse when `type` comes first, as it does in every Responses
  event; else parsed), so that the gateway's hold rule reads the name alone; a name that
  disagrees with the data is refused by the decoder as malformed (a duplicated key). A unit
  announcing more than the route's event bound (the relay announces an oversize message by
  its length alone) or more than `MAX_MESSAGES` per response refuses the response
  (`bound_exceeded`); a body that ends inside a unit sets `cut`.
- **Out**: a frame as it came (its message's bytes in a unit); the refusal is the gateway's
  WebSocket refusal message (`WebSocketWire`, a gateway's `websocket`: the Responses one is
  a wrapped `error` with a 5xx `status`, `providers/responses/websocket.py`).
- **No keep-alive** (`keepalive()` is None): WebSocket pings (aiohttp's heartbeat) keep the
  socket alive below the messages, and any message would be content the client reads.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Protocol, runtime_checkable

from ...errors import FailureKind, ResponseFailure
from ...gateway import Gateway, Refusal
from ...sse import RawFrame, ServerSentEvent

__all__ = [
    "MAX_MESSAGES",
    "MEDIA_TYPE",
    "Units",
    "WebSocketFraming",
    "WebSocketWire",
    "message_type",
    "unit",
    "wire_of",
]

MEDIA_TYPE = "application/x-lockgate-websocket-units"  # never on a wire: the relay's own
# The messages one response may carry (every delta one message): beyond it, refused.
MAX_MESSAGES = 250_000
_LENGTH = struct.Struct(">I")
_HEAD = _LENGTH.size
# `{"type":"NAME"` at the start of a message: its type, read without a parse.
_FIRST_TYPE = re.compile(rb'\{\s*"type"\s*:\s*"([A-Za-z0-9_.\-]{1,128})"')


def unit(message: bytes) -> bytes:
    """A message as one unit: its length, then its bytes."""
    return _LENGTH.pack(len(message)) + message


def announced(size: int) -> bytes:
    """A unit's head alone: a message of `size` bytes that was not read (over a bound)."""
    return _LENGTH.pack(min(size, 0xFFFFFFFF))


def message_type(data: bytes) -> str | None:
    """A message's `type` (None: not a JSON object with a string `type`)."""
    found = _FIRST_TYPE.match(data)
    if found is not None:
        return found.group(1).decode("ascii")
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    kind = value.get("type") if type(value) is dict else None
    return kind if type(kind) is str else None


class Units:
    """Units split back into messages, incrementally: `feed` what came, get the messages it
    completed. A unit announcing more than `limit` bytes raises `ResponseFailure`
    (`bound_exceeded`) before its bytes are kept."""

    __slots__ = ("_buffer", "_limit")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished unit are kept (a body that ends now was cut)."""
        return bool(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if not buffer and len(data) >= _HEAD:
            # The common case: whole units, nothing kept from before.
            size = _LENGTH.unpack_from(data)[0]
            if size <= self._limit and len(data) == _HEAD + size:
                return [data[_HEAD:]]
        buffer += data
        messages: list[bytes] = []
        start = 0
        while len(buffer) - start >= _HEAD:
            size = _LENGTH.unpack_from(buffer, start)[0]
            if size > self._limit:
                buffer.clear()
                raise ResponseFailure(
                    FailureKind.BOUND_EXCEEDED,
                    f"a WebSocket message larger than {self._limit} bytes (the event bound)",
                )
            end = start + _HEAD + size
            if len(buffer) < end:
                break
            messages.append(bytes(buffer[start + _HEAD : end]))
            start = end
        del buffer[:start]
        return messages


@runtime_checkable
class WebSocketWire(Protocol):
    """A protocol's WebSocket refusal (a gateway's `websocket`)."""

    def refusal_message(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        """The one text message that ends a refused response."""
        ...


def wire_of(gateway: Gateway) -> WebSocketWire:
    """The gateway's WebSocket wire (TypeError: it speaks no WebSocket)."""
    wire = getattr(gateway, "websocket", None)
    if not isinstance(wire, WebSocketWire):
        raise TypeError(f"{type(gateway).__name__} has no WebSocket wire")
    return wire


class WebSocketFraming:
    """WebSocket messages in and out, one response (see the module docstring)."""

    __slots__ = ("_count", "_cut", "_units", "_wire")

    media_type = MEDIA_TYPE

    def __init__(self, gateway: Gateway, max_event_bytes: int) -> None:
        self._wire = wire_of(gateway)
        self._units = Units(max_event_bytes)
        self._count = 0
        self._cut = False

    @property
    def cut(self) -> bool:
        return self._cut

    def feed(self, unit: bytes) -> list[RawFrame]:
        messages = self._units.feed(unit)
        if not messages:
            return []
        self._count += len(messages)
        if self._count > MAX_MESSAGES:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"more than {MAX_MESSAGES} WebSocket messages in one response",
            )
        return [
            RawFrame(message, ServerSentEvent(message_type(message), message), False)
            for message in messages
        ]

    def finish(self) -> list[RawFrame]:
        self._cut = self._units.pending
        return []

    def encode(self, frame: RawFrame) -> bytes:
        return unit(frame.raw)

    def frame(self, event: ServerSentEvent) -> bytes:
        return unit(event.data)

    def keepalive(self) -> bytes | None:
        return None

    def refusal(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        return unit(self._wire.refusal_message(refusal, last))
