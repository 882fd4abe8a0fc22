"""A recorded binary event-stream body (`application/vnd.amazon.eventstream`, Bedrock) as
frames a fault can address, and the frames a fault writes into one.

`frames` splits the body at the lengths the messages' preludes state, without judging them
(a frame whose CRC is wrong is still a frame: a fault addresses it as recorded); the bytes
from the first prelude that cannot be a message (cut short, or stating a length the rest of
the body does not hold) are the tail. Each frame's event is read from its headers, in the
AWS event stream's own terms: `:event-type` for an event, `:exception:<:exception-type>` for
an exception, `:error:<:error-code>` for an error, and `:unreadable` for a frame that does
not decode (its payload is then the frame's bytes). What an event means is each
provider's (`providers/bedrock/framing.py`).
"""

from __future__ import annotations

import json
import struct

from ..eventstream import (
    MIN_MESSAGE_BYTES,
    PRELUDE_BYTES,
    EventMessage,
    EventStreamDecoder,
    EventStreamError,
    Header,
    encode_message,
)
from ..sse import RawFrame, ServerSentEvent

__all__ = [
    "UNREADABLE",
    "bad_crc",
    "corrupt_payload",
    "exception_frame",
    "frames",
]

UNREADABLE = ":unreadable"
_PRELUDE = struct.Struct(">II")


def _decode(raw: bytes) -> EventMessage | None:
    decoder = EventStreamDecoder(max(MIN_MESSAGE_BYTES, min(len(raw), 16 * 1024 * 1024)))
    try:
        messages = decoder.feed(raw)
        decoder.finish()
    except EventStreamError:
        return None
    return messages[0] if len(messages) == 1 else None


def _event(raw: bytes) -> ServerSentEvent:
    message = _decode(raw)
    if message is None:
        return ServerSentEvent(UNREADABLE, raw)
    kind = message.string(":message-type")
    if kind == "exception":
        return ServerSentEvent(f":exception:{message.string(':exception-type')}", message.payload)
    if kind == "error":
        return ServerSentEvent(f":error:{message.string(':error-code')}", message.payload)
    return ServerSentEvent(message.string(":event-type") or "", message.payload)


def frames(body: bytes) -> tuple[list[RawFrame], bytes]:
    """The body's messages as frames (raw bytes and event each), and the bytes after the
    last whole one (see the module docstring)."""
    found: list[RawFrame] = []
    position = 0
    while len(body) - position >= PRELUDE_BYTES:
        total, _ = _PRELUDE.unpack_from(body, position)
        if total < MIN_MESSAGE_BYTES or total > len(body) - position:
            break
        raw = body[position : position + total]
        found.append(RawFrame(raw, _event(raw), False))
        position += total
    return found, body[position:]


def bad_crc(end: bytes) -> bytes:
    """A frame's last bytes (its whole bytes, or a piece that ends where it ends) with one
    bit of its message CRC flipped: the CRC no longer matches the message."""
    if not end:
        return end
    return end[:-1] + bytes([end[-1] ^ 0x01])


def corrupt_payload(raw: bytes) -> bytes | None:
    """The frame with its JSON payload's closing brace removed and its CRCs made right
    again (a message that decodes, whose JSON does not parse); None when the frame does not
    decode or its payload is not a JSON object."""
    message = _decode(raw)
    if message is None:
        return None
    payload = message.payload.rstrip()
    if not payload.endswith(b"}"):
        return None
    try:
        json.loads(payload)
    except ValueError:
        return None
    return encode_message(message.headers, payload[:-1])


def exception_frame(kind: str, text: str) -> bytes:
    """An `exception` message of the type `kind` (as AWS services send one in a stream)."""
    headers = (
        Header.string(":exception-type", kind),
        Header.string(":content-type", "application/json"),
        Header.string(":message-type", "exception"),
    )
    return encode_message(headers, json.dumps({"message": text}).encode())
