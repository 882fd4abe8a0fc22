"""The event-stream codec (`lockgate.eventstream`): round trips at every split point, every
truncation an error at the end of the body, every single-bit flip detected, the bounds, the
typed headers, and botocore reading what the encoder writes."""

from __future__ import annotations

import struct
import uuid
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.eventstream import (
    MAX_HEADERS_BYTES,
    MAX_MESSAGE_BYTES,
    EventMessage,
    EventStreamCorrupt,
    EventStreamCut,
    EventStreamDecoder,
    EventStreamError,
    EventStreamTooLarge,
    Header,
    HeaderType,
    encode_message,
)

_NAMES = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12
)


def _header_value(kind: HeaderType) -> st.SearchStrategy[Header]:
    values: st.SearchStrategy[object]
    if kind is HeaderType.TRUE:
        values = st.just(True)
    elif kind is HeaderType.FALSE:
        values = st.just(False)
    elif kind is HeaderType.BYTE:
        values = st.integers(-128, 127)
    elif kind is HeaderType.SHORT:
        values = st.integers(-(2**15), 2**15 - 1)
    elif kind is HeaderType.INTEGER:
        values = st.integers(-(2**31), 2**31 - 1)
    elif kind in (HeaderType.LONG, HeaderType.TIMESTAMP):
        values = st.integers(-(2**63), 2**63 - 1)
    elif kind is HeaderType.BYTE_ARRAY:
        values = st.binary(max_size=40)
    elif kind is HeaderType.STRING:
        values = st.text(max_size=40)
    else:
        values = st.uuids()
    return st.builds(lambda name, value: Header(name, kind, value), _NAMES, values)


HEADER = st.sampled_from(list(HeaderType)).flatmap(_header_value)
HEADERS = st.lists(HEADER, max_size=5, unique_by=lambda header: header.name).map(tuple)
MESSAGE = st.builds(EventMessage, HEADERS, st.binary(max_size=200))
MESSAGES = st.lists(MESSAGE, min_size=1, max_size=4)


def _encode(messages: list[EventMessage]) -> bytes:
    return b"".join(encode_message(m.headers, m.payload) for m in messages)


def _decode(pieces: list[bytes]) -> list[EventMessage]:
    decoder = EventStreamDecoder()
    out: list[EventMessage] = []
    for piece in pieces:
        out.extend(decoder.feed(piece))
    decoder.finish()
    return out


@settings(max_examples=60, deadline=None)
@given(MESSAGES)
def test_round_trip_at_every_split_point(messages: list[EventMessage]) -> None:
    body = _encode(messages)
    assert _decode([body]) == messages
    for cut in range(len(body) + 1):
        assert _decode([body[:cut], body[cut:]]) == messages
    assert _decode([body[i : i + 1] for i in range(len(body))]) == messages


@settings(max_examples=60, deadline=None)
@given(MESSAGES)
def test_re_encoding_is_byte_for_byte(messages: list[EventMessage]) -> None:
    body = _encode(messages)
    assert _encode(_decode([body])) == body


@settings(max_examples=60, deadline=None)
@given(MESSAGES)
def test_each_decoded_message_keeps_its_bytes_as_they_came(messages: list[EventMessage]) -> None:
    body = _encode(messages)
    for cut in (0, len(body) // 3, len(body) // 2):
        decoded = _decode([body[:cut], body[cut:]])
        assert b"".join(message.raw for message in decoded) == body
        for message in decoded:
            assert message.raw == encode_message(message.headers, message.payload)


@settings(max_examples=60, deadline=None)
@given(MESSAGES)
def test_every_truncation_is_an_error_at_the_end(messages: list[EventMessage]) -> None:
    body = _encode(messages)
    boundaries = set()
    position = 0
    for message in messages:
        position += len(encode_message(message.headers, message.payload))
        boundaries.add(position)
    for cut in range(1, len(body)):
        decoder = EventStreamDecoder()
        decoder.feed(body[:cut])
        if cut in boundaries:
            decoder.finish()  # a cut between messages is a shorter, complete stream
        else:
            with pytest.raises(EventStreamCut):
                decoder.finish()


@settings(max_examples=30, deadline=None)
@given(MESSAGES)
def test_every_single_bit_flip_is_detected(messages: list[EventMessage]) -> None:
    body = _encode(messages)
    for bit in range(len(body) * 8):
        flipped = bytearray(body)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(EventStreamError):
            _decode([bytes(flipped)])


def test_an_empty_body_is_a_complete_empty_stream() -> None:
    assert _decode([]) == []


def test_cut_in_prelude_headers_payload_and_crc() -> None:
    body = encode_message((Header.string(":event-type", "messageStart"),), b'{"role":"x"}')
    head = struct.unpack(">I", body[4:8])[0]
    for cut, where in (
        (5, "prelude"),
        (12 + head // 2, "message"),
        (len(body) - 6, "message"),
        (len(body) - 2, "message"),
    ):
        decoder = EventStreamDecoder()
        assert decoder.feed(body[:cut]) == []
        with pytest.raises(EventStreamCut, match=where):
            decoder.finish()


def _with_prelude(total: int, head: int, rest: bytes = b"") -> bytes:
    prelude = struct.pack(">II", total, head)
    return prelude + struct.pack(">I", zlib.crc32(prelude)) + rest


def test_bounds_fail_from_the_prelude() -> None:
    with pytest.raises(EventStreamTooLarge):
        EventStreamDecoder().feed(_with_prelude(MAX_MESSAGE_BYTES + 1, 0))
    with pytest.raises(EventStreamTooLarge):
        EventStreamDecoder().feed(_with_prelude(MAX_HEADERS_BYTES + 1000, MAX_HEADERS_BYTES + 1))
    with pytest.raises(EventStreamTooLarge):
        EventStreamDecoder(1024).feed(_with_prelude(2048, 0))
    with pytest.raises(EventStreamCorrupt):
        EventStreamDecoder().feed(_with_prelude(15, 0))
    with pytest.raises(EventStreamCorrupt):
        EventStreamDecoder().feed(_with_prelude(40, 30))


def _raw_message(headers: bytes, payload: bytes = b"") -> bytes:
    total = 16 + len(headers) + len(payload)
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


@pytest.mark.parametrize(
    "headers",
    [
        b"\x00\x07",  # an empty name
        b"\x01a\x0a",  # an unknown type
        b"\x01a\x04\x00\x01",  # an integer cut inside its value
        b"\x01a\x07\x00\x09abc",  # a string cut inside its value
        b"\x01a\x07\x00\x01\xff",  # a string that is not UTF-8
        b"\x01a\x00\x01a\x01",  # a name twice
        b"\x05ab",  # a name past the headers
    ],
)
def test_malformed_headers(headers: bytes) -> None:
    with pytest.raises(EventStreamCorrupt):
        EventStreamDecoder().feed(_raw_message(headers))


def test_typed_headers_read_back() -> None:
    ident = uuid.UUID(int=7)
    headers = (
        Header(":t", HeaderType.TRUE, True),
        Header(":f", HeaderType.FALSE, False),
        Header("b", HeaderType.BYTE, -3),
        Header("s", HeaderType.SHORT, 300),
        Header("i", HeaderType.INTEGER, -70000),
        Header("l", HeaderType.LONG, 2**40),
        Header("a", HeaderType.BYTE_ARRAY, b"\x00\x01"),
        Header.string(":event-type", "contentBlockDelta"),
        Header("ts", HeaderType.TIMESTAMP, 1_700_000_000_000),
        Header("u", HeaderType.UUID, ident),
    )
    (message,) = _decode([encode_message(headers, b"{}")])
    assert message.headers == headers
    assert message.string(":event-type") == "contentBlockDelta"
    assert message.string("i") is None
    assert message.header("u") == ident
    assert message.header("missing") is None


def test_encoder_refuses_what_the_format_cannot_carry() -> None:
    with pytest.raises(ValueError, match="does not fit BYTE"):
        encode_message((Header("x", HeaderType.BYTE, 300),), b"")
    with pytest.raises(ValueError, match="must be 1-255 bytes"):
        encode_message((Header("", HeaderType.TRUE, True),), b"")
    with pytest.raises(ValueError, match="TRUE header's value"):
        encode_message((Header("x", HeaderType.TRUE, False),), b"")
    with pytest.raises(ValueError, match="is over"):
        encode_message((), b"x" * MAX_MESSAGE_BYTES)


def test_botocore_reads_what_the_encoder_writes() -> None:
    eventstream = pytest.importorskip("botocore.eventstream")
    headers = (
        Header.string(":event-type", "contentBlockDelta"),
        Header.string(":content-type", "application/json"),
        Header.string(":message-type", "event"),
        Header("n", HeaderType.LONG, -5),
        Header("u", HeaderType.UUID, uuid.UUID(int=9)),
        Header("yes", HeaderType.TRUE, True),
    )
    payload = b'{"contentBlockIndex":0,"delta":{"text":"hi"}}'
    body = encode_message(headers, payload) * 2
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(body)
    read = list(buffer)
    assert len(read) == 2
    for message in read:
        assert message.payload == payload
        assert message.headers[":event-type"] == "contentBlockDelta"
        assert message.headers["n"] == -5
        assert message.headers["yes"] is True
        assert message.headers["u"] == uuid.UUID(int=9).bytes


def test_botocore_drops_a_cut_final_message_silently_where_this_codec_refuses() -> None:
    """Why the codec is lockgate's own: botocore ends a cut body as if it were complete."""
    eventstream = pytest.importorskip("botocore.eventstream")
    whole = encode_message((Header.string(":event-type", "messageStop"),), b"{}")
    body = whole + whole[:-3]
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(body)
    assert len(list(buffer)) == 1  # no error: the cut message is just not there
    decoder = EventStreamDecoder()
    assert len(decoder.feed(body)) == 1
    with pytest.raises(EventStreamCut):
        decoder.finish()
