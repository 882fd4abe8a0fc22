"""A scripted turn played over a WebSocket (the Responses API's WebSocket mode): each event
one text message, the same `response.*` events the SSE renderer writes without the SSE
framing, with the turn's faults as socket faults.

The turn's `Faults` map to what a WebSocket can do: `reset_after` resets the TCP connection
(RST, no close frame: a client sees 1006, and may lose what it had not read yet),
`stall_after` is silence, `end: "hang"` silence until the client leaves,
`keepalive_every` a ping from the server, `giant_frame_bytes` a frame announcing that many
bytes that never ends, `endless` messages forever,
`fragment_sizes` and `drip_ms` how each frame's bytes are cut into TCP writes. `line_ending`
and `done_sentinel` are SSE's and have no WebSocket form. `WebSocketFaults` (a turn's
`websocket`) adds what only a WebSocket has: a close frame with a code mid-response (1011),
a message whose frame is cut and the connection dropped, silence after N messages, and pings
the server never answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..sse import SSEDecoder
from .renderer import Renderer
from .script import Hang, Pause, Reset, Turn, WebSocketFaults

__all__ = [
    "Close",
    "CutFrame",
    "GiantFrame",
    "Message",
    "Ping",
    "WebSocketAction",
    "WebSocketFaults",
    "message_actions",
]

ABRUPT = 1006  # no close frame: the TCP connection is dropped (RFC 6455 7.1.5)


@dataclass(frozen=True, slots=True)
class Message:
    """One text message (its UTF-8 payload)."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """End the socket: a close frame with `code`, or (1006) the TCP connection closed
    without a close frame (an orderly FIN: what was sent arrives)."""

    code: int


@dataclass(frozen=True, slots=True)
class CutFrame:
    """A text frame announcing `payload`'s length, only its first half sent, then the TCP
    connection dropped."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class GiantFrame:
    """A text frame announcing `size` bytes whose payload never ends."""

    size: int


@dataclass(frozen=True, slots=True)
class Ping:
    """A ping from the server (the WebSocket's keep-alive)."""


WebSocketAction = Message | Close | CutFrame | GiantFrame | Ping | Pause | Hang | Reset


class _Messages:
    """SSE bytes to the messages they carry: each complete event's data (a `[DONE]`
    sentinel and comments left out)."""

    def __init__(self) -> None:
        self._decoder = SSEDecoder(1 << 40)

    def feed(self, data: bytes) -> list[Message]:
        return [self._message(event.data) for event in self._decoder.feed(data) if _kept(event)]

    def finish(self) -> list[Message]:
        return [self._message(event.data) for event in self._decoder.finish() if _kept(event)]

    @staticmethod
    def _message(data: bytes) -> Message:
        return Message(data)


def _kept(event: object) -> bool:
    data = getattr(event, "data", b"")
    return bool(data) and data != b"[DONE]"


def message_actions(turn: Turn, protocol: Renderer) -> Iterator[WebSocketAction]:
    """The messages and socket actions of a streaming turn on a WebSocket, in order (a
    playback turn's recorded SSE body as its events' messages, its pauses, resets and hangs
    kept)."""
    messages = _Messages()
    if turn.playback is not None:
        for step in turn.playback:
            if isinstance(step, bytes):
                yield from messages.feed(step)
            elif isinstance(step, Reset):
                yield step
                return
            else:
                yield step
        yield from messages.finish()
        return
    faults = turn.faults
    extra = turn.websocket or WebSocketFaults()
    sent = 0
    for number, event in enumerate(turn.stream_events(protocol), start=1):
        for message in messages.feed(protocol.frame(event)):
            if extra.cut_after is not None and sent == extra.cut_after:
                yield CutFrame(message.payload)
                return
            yield message
            sent += 1
            if extra.close_after == sent:
                yield Close(extra.close_code)
                return
            if extra.silent_after == sent:
                yield Hang()
                return
        if faults.keepalive_every and number % faults.keepalive_every == 0:
            yield Ping()
        if faults.reset_after == number:
            yield Reset()
            return
        if faults.stall_after == number:
            yield Pause(faults.stall_seconds)
    yield from messages.finish()
    if extra.cut_after is not None or extra.close_after is not None:
        yield Close(ABRUPT)  # the fault's point never came: the socket still breaks
        return
    if faults.giant_frame_bytes is not None:
        yield GiantFrame(faults.giant_frame_bytes)
        return
    if faults.endless is not None:
        endless = messages.feed(protocol.frame(protocol.endless_event(faults.endless)))
        while endless:
            yield from endless
    if faults.end == "hang" or extra.silent_after is not None:
        yield Hang()
