"""What the lab's naive client (`via_proxy`) reads of a binary event-stream body (Bedrock's
`application/vnd.amazon.eventstream`): each whole message, read as botocore's `EventStream`
reads them, message by message until one does not decode (a bad CRC, a malformed prelude:
botocore raises there) or the body ends (a message cut at the end is dropped, as botocore
drops it). Each message is the event its gateway's mapping makes of it
(`Gateway.eventstream`: ConverseStream's events, or the Anthropic event an invoke `chunk`
carries)."""

from __future__ import annotations

from collections.abc import Iterator

from ..eventstream import PRELUDE_BYTES, EventMessage, EventStreamDecoder, EventStreamError
from ..gateway import Gateway
from ..sse import ServerSentEvent

__all__ = ["eventstream_content", "eventstream_events", "eventstream_messages"]


def _messages(body: bytes) -> Iterator[tuple[bytes, EventMessage]]:
    """Each whole message that decodes, with its bytes, up to the first that does not."""
    position = 0
    while len(body) - position >= PRELUDE_BYTES:
        total = int.from_bytes(body[position : position + 4], "big")
        if total < PRELUDE_BYTES or total > len(body) - position:
            return  # cut at the end (or a prelude no reader can follow)
        raw = body[position : position + total]
        try:
            messages = EventStreamDecoder().feed(raw)
        except EventStreamError:
            return  # botocore raises on it: nothing after it is read
        if len(messages) != 1:
            return
        yield raw, messages[0]
        position += total


def eventstream_messages(body: bytes) -> list[bytes]:
    """The bytes of each message a naive client reads (see the module docstring)."""
    return [raw for raw, _ in _messages(body)]


def eventstream_events(gateway: Gateway, body: bytes) -> list[ServerSentEvent]:
    """The events a naive client reads, as the gateway's mapping states them (a message the
    mapping cannot read is left out: a client skips or raises on it, running nothing)."""
    mapping = getattr(gateway, "eventstream", None)
    if mapping is None:
        return []
    events: list[ServerSentEvent] = []
    for _, message in _messages(body):
        try:
            events.append(mapping.as_event(message))
        except Exception:
            continue
    return events


def eventstream_content(gateway: Gateway, body: bytes) -> list[bytes]:
    """What a client reads of an event-stream body, in the form the proxy sends it: each
    message's bytes as they came, or (where the gateway's decoder states an event's data
    in one canonical way, `StreamDecoder.canonical_data`) the message the mapping writes
    for that data; keep-alive events (an Anthropic `ping` in a `chunk`: the proxy passes
    those at once, ahead of the frames it holds) and events the decoder skips left out."""
    mapping = getattr(gateway, "eventstream", None)
    if mapping is None:
        return eventstream_messages(body)
    decoder = gateway.new_decoder()
    kept: list[bytes] = []
    for raw, message in _messages(body):
        try:
            event = mapping.as_event(message)
        except Exception:
            kept.append(raw)
            continue
        if gateway.is_keepalive(event) or gateway.skipped(event):
            continue
        try:
            list(decoder.decode(event))
        except Exception:
            kept.append(raw)
            continue
        data = decoder.canonical_data()
        if data is None or data == event.data:
            kept.append(raw)
        else:
            kept.append(mapping.as_message(ServerSentEvent(event.event, data)))
    return kept
