"""The AWS event stream (`application/vnd.amazon.eventstream`) as a `Framing`: the upstream's
bytes decoded by `lockgate.eventstream` (bounded, incremental, both CRCs checked), one
`RawFrame` per message, its event the one the gateway's decoder reads.

What a message *means* is the protocol's, not the wire's: the gateway says it through its
`eventstream` mapping (`EventStreamMapping`: Bedrock's is `providers/bedrock/framing.WIRE`,
`:event-type` → the event's name, `:exception-type` → an exception event). A gateway
without one cannot be framed so (TypeError when the framing is made, never a branch in a
stage).

- **In**: each complete message is one frame; `RawFrame.raw` is the message's bytes as they
  came (the decoder keeps them, CRCs checked: no encoding again), and `encode` sends it
  so. A bad CRC, a malformed prelude or headers, a message over the bound refuse the
  stream (the mapping's `failure_of`); a body that ends inside a message sets `cut` and
  refuses it as `stream_ended` in `finish` (with the wire's own words; the judge's own cut
  check then never runs).
- **Out**: a frame as it came; a rewritten event (none today: the Bedrock decoder rewrites
  nothing) as a new message with new CRCs; the refusal = the gateway's refusal events as
  messages (Bedrock: an `exception` message, on which botocore's `EventStream` raises
  `EventStreamError`), so that a refused stream never ends with a cut or a clean end.
- **No keep-alive** (`keepalive()` is None): the event stream has no comment or ping frame.
  An unknown `:event-type` is skipped by botocore (its parser yields an empty dict), but the
  AWS SDK for JavaScript's unmarshaller and other clients may raise on, or hand the caller,
  an event type their model does not declare; and any declared event type (a
  `contentBlockDelta` with empty text) is content the client reads. Until a frame every
  client ignores is known, the gate holds in silence.

`RawFrame` (from `lockgate.sse`) fits unchanged: `raw` holds the binary message, `event`
its meaning, `keepalive` is always False.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ...errors import ResponseFailure
from ...eventstream import (
    MAX_MESSAGE_BYTES,
    MEDIA_TYPE,
    MIN_MESSAGE_BYTES,
    EventMessage,
    EventStreamCut,
    EventStreamDecoder,
    EventStreamError,
    encode_message,
)
from ...gateway import Gateway, Refusal
from ...sse import RawFrame, ServerSentEvent

__all__ = ["EventStreamFraming", "EventStreamMapping"]


@runtime_checkable
class EventStreamMapping(Protocol):
    """A protocol's meaning of event-stream messages (a gateway's `eventstream`)."""

    def as_event(self, message: EventMessage) -> ServerSentEvent:
        """The event a message is (ResponseFailure: a message the protocol cannot read)."""
        ...

    def as_message(self, event: ServerSentEvent) -> bytes:
        """The message an event (one `as_event` could make) is written as."""
        ...

    def failure_of(self, error: EventStreamError) -> ResponseFailure:
        """The failure a codec error refuses the stream with."""
        ...


def mapping_of(gateway: Gateway) -> EventStreamMapping:
    """The gateway's event-stream mapping (TypeError: it speaks no event stream)."""
    mapping = getattr(gateway, "eventstream", None)
    if not isinstance(mapping, EventStreamMapping):
        raise TypeError(f"{type(gateway).__name__} has no event-stream mapping")
    return mapping


class EventStreamFraming:
    """The event stream in and out, one stream (see the module docstring)."""

    __slots__ = ("_cut", "_decoder", "_gateway", "_mapping")

    media_type = MEDIA_TYPE

    def __init__(self, gateway: Gateway, max_event_bytes: int) -> None:
        self._gateway = gateway
        self._mapping = mapping_of(gateway)
        bound = max(MIN_MESSAGE_BYTES, min(max_event_bytes, MAX_MESSAGE_BYTES))
        self._decoder = EventStreamDecoder(bound)
        self._cut = False

    @property
    def cut(self) -> bool:
        return self._cut

    def feed(self, unit: bytes) -> list[RawFrame]:
        try:
            messages = self._decoder.feed(unit)
        except EventStreamError as error:
            raise self._mapping.failure_of(error) from None
        as_event = self._mapping.as_event
        return [
            RawFrame(
                message.raw or encode_message(message.headers, message.payload),
                as_event(message),
                False,
            )
            for message in messages
        ]

    def finish(self) -> list[RawFrame]:
        try:
            self._decoder.finish()
        except EventStreamCut as error:
            self._cut = True
            raise self._mapping.failure_of(error) from None
        return []

    def encode(self, frame: RawFrame) -> bytes:
        assert frame.event is not None
        return frame.raw

    def frame(self, event: ServerSentEvent) -> bytes:
        return self._mapping.as_message(event)

    def keepalive(self) -> bytes | None:
        return None

    def refusal(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        events = self._gateway.refusal_events(refusal, last)
        return b"".join(self._mapping.as_message(event) for event in events)
