"""The wire under the gate: a `Framing` turns an upstream's body units (bytes, a message)
into `RawFrame`s, one event each, and writes events back for the client. The gate sees
events only; each wire is a `Gateway` (a protocol's meaning) and a `Framing` (its wire),
chosen by the answer's target (`ProtocolTarget.framing`), never a branch in a stage.

SSE (`sse.py`), the AWS event stream (`eventstream.py`, for a gateway with an
`eventstream` mapping) and WebSocket messages (`websocket.py`, for a gateway with a
`websocket` wire: the Responses WebSocket relay) are here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ...gateway import Gateway, Refusal
from ...sse import DEFAULT_MAX_EVENT_BYTES, RawFrame, ServerSentEvent
from .eventstream import EventStreamFraming
from .sse import SSEFraming
from .websocket import WebSocketFraming

__all__ = [
    "FRAMINGS",
    "EventStreamFraming",
    "Framing",
    "RawFrame",
    "SSEFraming",
    "WebSocketFraming",
    "framing_for",
]


class Framing(Protocol):
    """One wire's framing, one per stream: sans-IO, no socket, no judgement."""

    @property
    def media_type(self) -> str:
        """The content type of the stream it writes."""
        ...

    @property
    def cut(self) -> bool:
        """After `finish`: the body ended inside a unit (the stream was cut)."""
        ...

    def feed(self, unit: bytes) -> list[RawFrame]:
        """The next unit of the upstream's body; the frames it completed."""
        ...

    def finish(self) -> list[RawFrame]:
        """The body ended: the frames its end completed (`cut` then says whether it ended
        inside one)."""
        ...

    def encode(self, frame: RawFrame) -> bytes:
        """A frame as the client receives it: as it came when it is already canonical and
        unchanged, else re-encoded. The frame's event must not be None."""
        ...

    def frame(self, event: ServerSentEvent) -> bytes:
        """An event (one the decoder rewrote) as the client receives it."""
        ...

    def keepalive(self) -> bytes | None:
        """One keep-alive while the gate holds (None: the wire has none)."""
        ...

    def refusal(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        """The protocol's in-band refusal, framed: what ends a refused stream."""
        ...


# Each wire's framing by name (`ProtocolTarget.framing`): a gateway and a size bound in.
FRAMINGS: dict[str, Callable[[Gateway, int], Framing]] = {
    "sse": SSEFraming,
    "eventstream": EventStreamFraming,
    "websocket": WebSocketFraming,
}


def framing_for(
    name: str, gateway: Gateway, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> Framing:
    """The framing a target names, for one stream of `gateway`'s protocol."""
    return FRAMINGS[name](gateway, max_event_bytes)
