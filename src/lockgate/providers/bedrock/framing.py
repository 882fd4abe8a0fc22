"""Bedrock's event-stream messages as the events its decoder reads.

The generic codec (`lockgate.eventstream`) splits the body into messages; this module says
what a Bedrock message is, in the one shape every decoder reads (`sse.ServerSentEvent`, as
`codec.StreamDecoder` takes it):

- `:message-type: event` → `ServerSentEvent(<:event-type>, payload)` (a JSON object);
- `:message-type: exception` → `ServerSentEvent(":exception:<:exception-type>", payload)`;
- `:message-type: error` → `ServerSentEvent(":error:<:error-code>", <:error-message>)`.

Event names beginning with `:` are never Bedrock event types (those are plain words), so an
exception can never be read as an event. The codec's errors become the client's failure
kinds: a body that ends inside a message is `stream_ended`, a bad CRC or a malformed prelude
or headers `malformed_event`, a message over the bound `bound_exceeded`; a message without
a `:message-type`, or an event without an `:event-type`, is `malformed_event`.
"""

from __future__ import annotations

from ...errors import FailureKind, ResponseFailure
from ...eventstream import (
    MAX_MESSAGE_BYTES,
    MIN_MESSAGE_BYTES,
    EventMessage,
    EventStreamCut,
    EventStreamDecoder,
    EventStreamError,
    EventStreamTooLarge,
    Header,
    encode_message,
)
from ...sse import ServerSentEvent

__all__ = [
    "ERROR_PREFIX",
    "EXCEPTION_PREFIX",
    "WIRE",
    "EventStreamFramer",
    "EventStreamWire",
    "as_event",
    "as_message",
    "failure_of",
    "message_headers",
]

EXCEPTION_PREFIX = ":exception:"
ERROR_PREFIX = ":error:"


def failure_of(error: EventStreamError) -> ResponseFailure:
    """The client's failure for a codec error."""
    if isinstance(error, EventStreamCut):
        return ResponseFailure(
            FailureKind.STREAM_ENDED, f"{error} (the stream was cut); nothing executed"
        )
    if isinstance(error, EventStreamTooLarge):
        return ResponseFailure(FailureKind.BOUND_EXCEEDED, str(error))
    return ResponseFailure(FailureKind.MALFORMED_EVENT, f"invalid event-stream bytes: {error}")


def as_event(message: EventMessage) -> ServerSentEvent:
    """One Bedrock message as the event its decoder reads (see the module docstring)."""
    kind = message.string(":message-type")
    if kind == "event":
        name = message.string(":event-type")
        if not name or name.startswith(":"):
            raise ResponseFailure(FailureKind.MALFORMED_EVENT, "an event without an :event-type")
        return ServerSentEvent(name, message.payload)
    if kind == "exception":
        name = message.string(":exception-type") or "unknownException"
        return ServerSentEvent(EXCEPTION_PREFIX + name, message.payload)
    if kind == "error":
        code = message.string(":error-code") or "unknownError"
        text = message.string(":error-message") or ""
        return ServerSentEvent(ERROR_PREFIX + code, text.encode("utf-8"))
    raise ResponseFailure(FailureKind.MALFORMED_EVENT, f"an event-stream message of type {kind!r}")


def message_headers(event_type: str, message_type: str = "event") -> tuple[Header, ...]:
    """The headers Bedrock sends on an event (`message_type` "event") or an exception
    (`event_type` then names the exception)."""
    type_header = ":event-type" if message_type == "event" else ":exception-type"
    return (
        Header.string(type_header, event_type),
        Header.string(":content-type", "application/json"),
        Header.string(":message-type", message_type),
    )


class EventStreamFramer:
    """The client's framer for an event-stream body (`codec.Framer`): bytes in, the
    decoder's events out; `finish` raises `stream_ended` when the body ended mid-message."""

    __slots__ = ("_decoder",)

    cut = False  # a cut body raises in `finish` instead

    def __init__(self, max_event_bytes: int = MAX_MESSAGE_BYTES) -> None:
        bound = max(MIN_MESSAGE_BYTES, min(max_event_bytes, MAX_MESSAGE_BYTES))
        self._decoder = EventStreamDecoder(bound)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        try:
            messages = self._decoder.feed(chunk)
        except EventStreamError as error:
            raise failure_of(error) from None
        return [as_event(message) for message in messages]

    def finish(self) -> list[ServerSentEvent]:
        try:
            self._decoder.finish()
        except EventStreamError as error:
            raise failure_of(error) from None
        return []


def as_message(event: ServerSentEvent) -> bytes:
    """An event (as `as_event` makes them) as the event-stream message it reads as: the
    inverse of `as_event`, for an event lockgate writes itself (a refusal, a rewrite)."""
    name = event.event or ""
    if name.startswith(EXCEPTION_PREFIX):
        headers = message_headers(name[len(EXCEPTION_PREFIX) :], "exception")
        return encode_message(headers, event.data)
    if name.startswith(ERROR_PREFIX):
        text = event.data.decode("utf-8", "replace")
        error_headers = (
            Header.string(":error-code", name[len(ERROR_PREFIX) :]),
            Header.string(":error-message", text),
            Header.string(":message-type", "error"),
        )
        return encode_message(error_headers, b"")
    if not name:
        raise ValueError("an event-stream event needs a name (its :event-type)")
    return encode_message(message_headers(name), event.data)


class EventStreamWire:
    """Bedrock's event-stream mapping, as the proxy's event-stream framing reads it
    (`proxy.framing.eventstream.EventStreamMapping`): messages to events, events to
    messages, codec errors to failures."""

    __slots__ = ()

    def as_event(self, message: EventMessage) -> ServerSentEvent:
        return as_event(message)

    def as_message(self, event: ServerSentEvent) -> bytes:
        return as_message(event)

    def failure_of(self, error: EventStreamError) -> ResponseFailure:
        return failure_of(error)


WIRE = EventStreamWire()
