"""Server-sent events as a `Framing`: the upstream's bytes split into frames
(`sse.SSEFramer`), each event sent in its canonical form (`sse.canonical_frame`: a frame
already canonical goes out byte for byte), an upstream comment become the gateway's own
keep-alive, a refusal the gateway's stream error. `lockgate/sse.py` stays the library;
this is the proxy's use of it."""

from __future__ import annotations

from ...gateway import Gateway, Refusal
from ...sse import RawFrame, ServerSentEvent, SSEFramer, canonical_frame, canonical_raw

__all__ = ["SSEFraming"]


class SSEFraming:
    """SSE in and out, one stream (see the module docstring). The keep-alive and the
    refusal are the gateway's SSE bytes (`Gateway.keepalive`, `Gateway.refusal_frame`)."""

    __slots__ = ("_framer", "_gateway")

    media_type = "text/event-stream"

    def __init__(self, gateway: Gateway, max_event_bytes: int) -> None:
        self._gateway = gateway
        self._framer = SSEFramer(max_event_bytes)

    @property
    def cut(self) -> bool:
        return self._framer.cut

    def feed(self, unit: bytes) -> list[RawFrame]:
        return self._framer.feed(unit)

    def finish(self) -> list[RawFrame]:
        return self._framer.finish()

    def encode(self, frame: RawFrame) -> bytes:
        return canonical_raw(frame)

    def frame(self, event: ServerSentEvent) -> bytes:
        return canonical_frame(event)

    def keepalive(self) -> bytes | None:
        return self._gateway.keepalive()

    def refusal(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        return self._gateway.refusal_frame(refusal, last)
