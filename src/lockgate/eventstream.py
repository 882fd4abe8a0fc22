"""A bounded, incremental decoder and an encoder for `application/vnd.amazon.eventstream`.

The AWS event stream is binary: every message is

    total length u32 | headers length u32 | prelude CRC32 u32      (the 12-byte prelude)
    headers                                                        (typed, see below)
    payload                                                        (opaque bytes)
    message CRC32 u32                                              (over everything before it)

big-endian, CRC32 as `zlib.crc32`. A header is a name (u8 length, 1-255 bytes of UTF-8), a
type byte and a value: 0 true, 1 false (no value bytes), 2 byte (i8), 3 short (i16),
4 integer (i32), 5 long (i64), 6 byte array (u16 length), 7 string (u16 length, UTF-8),
8 timestamp (i64, milliseconds since the epoch), 9 uuid (16 bytes).

Feed `EventStreamDecoder` bytes exactly as they arrive, cut anywhere; it returns every
complete message and keeps only the unfinished one. It is bounded while it accumulates: the
prelude states the message's length, so a message over the limit fails as soon as its 12
bytes are in (after their CRC is checked, so a corrupt length is reported as corruption).
Limits, at least as strict as botocore's (`botocore/eventstream.py`: headers ≤ 128 KiB,
payload ≤ 24 MiB, total unchecked): headers ≤ 128 KiB (`MAX_HEADERS_BYTES`), the whole
message ≤ 16 MiB (`MAX_MESSAGE_BYTES`, so the payload ≤ 16 MiB - 16), or a smaller bound the
caller gives. Both CRCs are checked; a message shorter than its own prelude and CRC, headers
longer than the message, an unknown header type, a header cut inside its value, an empty or
repeated name or invalid UTF-8 are `EventStreamCorrupt`; a message over a limit is
`EventStreamTooLarge`; and `finish()` at the end of the body raises `EventStreamCut` when
the body ended inside a message (in its prelude, headers, payload or CRC).

**Why not botocore's `EventStreamBuffer`.** It has no end-of-stream check at all: its
iterator stops when the buffer holds less than a whole message, so a body cut inside its
last message ends exactly like a complete one, and the partial message is dropped silently
(the Anthropic Python SDK's Bedrock decoder does the same; the JS SDKs raise "Truncated
event message received"). That is the failure lockgate exists to catch: a cut stream must
never look like a short, complete one. It is also not incremental in cost (`_data += data`
and a slice after every message copy the whole buffer again: quadratic in the messages a
read holds), it does not bound the total length (only headers and payload, the payload to
24 MiB), an unknown header type escapes as a `KeyError` and a negative payload length
(total < headers + 16) is not refused. The format is small and fully specified, so this
module implements it (≈200 lines) rather than wrap a decoder whose end it cannot see;
`tests/core/test_eventstream.py` checks that botocore decodes what `encode_message` writes.

`encode_message` writes a message back: it is deterministic, so a message decoded here and
encoded again is byte for byte the message that came (headers in order, with their types),
which is what re-framing needs (a changed payload gets new CRCs). No provider knowledge
lives here: what `:message-type`, `:event-type` and `:exception-type` mean is each
provider's (`providers/bedrock/`).
"""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import dataclass, field
from enum import IntEnum

__all__ = [
    "MAX_HEADERS_BYTES",
    "MAX_MESSAGE_BYTES",
    "MEDIA_TYPE",
    "MIN_MESSAGE_BYTES",
    "PRELUDE_BYTES",
    "EventMessage",
    "EventStreamCorrupt",
    "EventStreamCut",
    "EventStreamDecoder",
    "EventStreamError",
    "EventStreamTooLarge",
    "Header",
    "HeaderType",
    "HeaderValue",
    "encode_headers",
    "encode_message",
]

MEDIA_TYPE = "application/vnd.amazon.eventstream"
PRELUDE_BYTES = 12
MIN_MESSAGE_BYTES = PRELUDE_BYTES + 4  # a message without headers or payload
MAX_HEADERS_BYTES = 128 * 1024
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_PRELUDE = struct.Struct(">III")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")


class EventStreamError(ValueError):
    """Bytes that are not a valid event stream (the subclasses say how)."""


class EventStreamCut(EventStreamError):
    """The body ended inside a message: the stream was cut."""


class EventStreamCorrupt(EventStreamError):
    """A CRC does not match, or the prelude or the headers are malformed."""


class EventStreamTooLarge(EventStreamError):
    """A message (or its headers) is over the decoder's limit."""


class HeaderType(IntEnum):
    TRUE = 0
    FALSE = 1
    BYTE = 2
    SHORT = 3
    INTEGER = 4
    LONG = 5
    BYTE_ARRAY = 6
    STRING = 7
    TIMESTAMP = 8  # milliseconds since the epoch
    UUID = 9


HeaderValue = bool | int | bytes | str | uuid.UUID

# The fixed-size integer types: (struct format, byte count).
_INTEGERS: dict[HeaderType, struct.Struct] = {
    HeaderType.BYTE: struct.Struct(">b"),
    HeaderType.SHORT: struct.Struct(">h"),
    HeaderType.INTEGER: struct.Struct(">i"),
    HeaderType.LONG: struct.Struct(">q"),
    HeaderType.TIMESTAMP: struct.Struct(">q"),
}


@dataclass(frozen=True, slots=True)
class Header:
    """One typed header. `value`: a bool for TRUE/FALSE, an int for the integer types and
    TIMESTAMP, bytes for BYTE_ARRAY, str for STRING, `uuid.UUID` for UUID."""

    name: str
    type: HeaderType
    value: HeaderValue

    @classmethod
    def string(cls, name: str, value: str) -> Header:
        return cls(name, HeaderType.STRING, value)


@dataclass(frozen=True, slots=True)
class EventMessage:
    """One decoded message: its headers in order, and its payload; `raw`, when it was
    decoded, its bytes as they came (CRCs checked: what `encode_message` would write)."""

    headers: tuple[Header, ...]
    payload: bytes
    raw: bytes = field(default=b"", compare=False, repr=False)

    def header(self, name: str) -> HeaderValue | None:
        """The value of the header `name`, or None when the message has none."""
        for header in self.headers:
            if header.name == name:
                return header.value
        return None

    def string(self, name: str) -> str | None:
        """The header `name` when it is a STRING header, else None."""
        for header in self.headers:
            if header.name == name:
                value = header.value
                return value if header.type is HeaderType.STRING and type(value) is str else None
        return None


def _crc(data: bytes | bytearray | memoryview, start: int = 0) -> int:
    return zlib.crc32(data, start) & 0xFFFFFFFF


def _value_bytes(header: Header) -> bytes:
    kind, value = header.type, header.value
    if kind is HeaderType.TRUE or kind is HeaderType.FALSE:
        if value is not (kind is HeaderType.TRUE):
            raise ValueError(f"header {header.name!r}: a {kind.name} header's value is {value!r}")
        return b""
    if kind in _INTEGERS:
        if type(value) is not int:
            raise ValueError(f"header {header.name!r}: {kind.name} needs an int")
        try:
            return _INTEGERS[kind].pack(value)
        except struct.error:
            raise ValueError(f"header {header.name!r}: {value} does not fit {kind.name}") from None
    if kind is HeaderType.UUID:
        if not isinstance(value, uuid.UUID):
            raise ValueError(f"header {header.name!r}: UUID needs a uuid.UUID")
        return value.bytes
    if kind is HeaderType.STRING:
        if type(value) is not str:
            raise ValueError(f"header {header.name!r}: STRING needs a str")
        raw = value.encode("utf-8")
    elif kind is HeaderType.BYTE_ARRAY:
        if type(value) is not bytes:
            raise ValueError(f"header {header.name!r}: BYTE_ARRAY needs bytes")
        raw = value
    else:  # pragma: no cover - every HeaderType is handled above
        raise ValueError(f"unknown header type {kind!r}")
    if len(raw) > 0xFFFF:
        raise ValueError(f"header {header.name!r}: value over 65535 bytes")
    return _U16.pack(len(raw)) + raw


def encode_headers(headers: tuple[Header, ...] | list[Header]) -> bytes:
    out = bytearray()
    for header in headers:
        name = header.name.encode("utf-8")
        if not 1 <= len(name) <= 255:
            raise ValueError(f"header name {header.name!r} must be 1-255 bytes")
        out += bytes((len(name),)) + name + bytes((int(header.type),)) + _value_bytes(header)
    return bytes(out)


def encode_message(headers: tuple[Header, ...] | list[Header], payload: bytes) -> bytes:
    """One message's bytes (ValueError for headers or a payload the format cannot carry)."""
    head = encode_headers(headers)
    if len(head) > MAX_HEADERS_BYTES:
        raise ValueError(f"headers of {len(head)} bytes are over {MAX_HEADERS_BYTES}")
    total = MIN_MESSAGE_BYTES + len(head) + len(payload)
    if total > MAX_MESSAGE_BYTES:
        raise ValueError(f"a message of {total} bytes is over {MAX_MESSAGE_BYTES}")
    prelude = struct.pack(">II", total, len(head))
    prelude += _U32.pack(_crc(prelude))
    body = prelude + head + payload
    return body + _U32.pack(_crc(body))


def _parse_headers(data: bytes) -> tuple[Header, ...]:
    headers: list[Header] = []
    seen: set[str] = set()
    position, end = 0, len(data)
    try:
        while position < end:
            size = data[position]
            position += 1
            if size == 0 or position + size > end:
                raise EventStreamCorrupt("a header name is empty or runs past the headers")
            name = data[position : position + size].decode("utf-8")
            position += size
            if name in seen:
                raise EventStreamCorrupt(f"header {name!r} appears twice")
            seen.add(name)
            if position >= end:
                raise EventStreamCorrupt(f"header {name!r} has no type")
            try:
                kind = HeaderType(data[position])
            except ValueError:
                raise EventStreamCorrupt(
                    f"header {name!r} has an unknown type {data[position]}"
                ) from None
            position += 1
            value: HeaderValue
            if kind is HeaderType.TRUE or kind is HeaderType.FALSE:
                value = kind is HeaderType.TRUE
            elif kind in _INTEGERS:
                layout = _INTEGERS[kind]
                if position + layout.size > end:
                    raise EventStreamCorrupt(f"header {name!r} is cut inside its value")
                (value,) = layout.unpack_from(data, position)
                position += layout.size
            elif kind is HeaderType.UUID:
                if position + 16 > end:
                    raise EventStreamCorrupt(f"header {name!r} is cut inside its value")
                value = uuid.UUID(bytes=bytes(data[position : position + 16]))
                position += 16
            else:
                if position + 2 > end:
                    raise EventStreamCorrupt(f"header {name!r} is cut inside its length")
                (length,) = _U16.unpack_from(data, position)
                position += 2
                if position + length > end:
                    raise EventStreamCorrupt(f"header {name!r} is cut inside its value")
                raw = bytes(data[position : position + length])
                position += length
                value = raw.decode("utf-8") if kind is HeaderType.STRING else raw
            headers.append(Header(name, kind, value))
    except UnicodeDecodeError:
        raise EventStreamCorrupt("a header name or string value is not UTF-8") from None
    return tuple(headers)


class EventStreamDecoder:
    """Incremental, bounded event-stream decoder (see the module docstring).

    `max_message_bytes`: the bound on one whole message (at most `MAX_MESSAGE_BYTES`).
    Only the unfinished message is retained, and the bound is checked from its prelude.
    """

    __slots__ = ("_buffer", "_max", "_total")

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        if not MIN_MESSAGE_BYTES <= max_message_bytes <= MAX_MESSAGE_BYTES:
            raise ValueError(
                f"max_message_bytes must be between {MIN_MESSAGE_BYTES} and {MAX_MESSAGE_BYTES}"
            )
        self._max = max_message_bytes
        self._buffer = bytearray()
        self._total = 0  # the current message's length, once its prelude is checked

    @property
    def pending(self) -> int:
        """Bytes of an unfinished message held (0 between messages)."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[EventMessage]:
        """The messages `chunk` completes (EventStreamError for invalid bytes)."""
        buffer = self._buffer
        buffer += chunk
        messages: list[EventMessage] = []
        position = 0
        available = len(buffer)
        while True:
            total = self._total
            if not total:
                if available - position < PRELUDE_BYTES:
                    break
                total = self._prelude(buffer, position)
            if available - position < total:
                break
            messages.append(self._message(buffer, position, total))
            position += total
            self._total = 0
        if position:
            del buffer[:position]
        return messages

    def finish(self) -> None:
        """The body ended: EventStreamCut when it ended inside a message."""
        held = len(self._buffer)
        if held:
            where = "prelude" if held < PRELUDE_BYTES else "message"
            raise EventStreamCut(
                f"the body ended inside an event-stream {where} ({held} of "
                f"{self._total or '?'} bytes)"
            )

    def _prelude(self, buffer: bytearray, position: int) -> int:
        total: int
        head: int
        crc: int
        total, head, crc = _PRELUDE.unpack_from(buffer, position)
        if _crc(buffer[position : position + 8]) != crc:
            raise EventStreamCorrupt("the prelude CRC does not match")
        if total < MIN_MESSAGE_BYTES or head > total - MIN_MESSAGE_BYTES:
            raise EventStreamCorrupt(
                f"a message of {total} bytes cannot hold {head} bytes of headers"
            )
        if head > MAX_HEADERS_BYTES:
            raise EventStreamTooLarge(f"headers of {head} bytes are over {MAX_HEADERS_BYTES}")
        if total > self._max:
            raise EventStreamTooLarge(f"a message of {total} bytes is over {self._max}")
        self._total = total
        return total

    def _message(self, buffer: bytearray, position: int, total: int) -> EventMessage:
        end = position + total - 4
        raw = bytes(buffer[position : end + 4])  # one copy per message
        message = memoryview(raw)[: total - 4]
        (crc,) = _U32.unpack_from(raw, total - 4)
        if _crc(message) != crc:
            raise EventStreamCorrupt("the message CRC does not match")
        (head,) = _U32.unpack_from(raw, 4)
        headers = _parse_headers(bytes(message[PRELUDE_BYTES : PRELUDE_BYTES + head]))
        return EventMessage(headers, raw[PRELUDE_BYTES + head : total - 4], raw)
