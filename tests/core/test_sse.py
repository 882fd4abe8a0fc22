"""The SSE decoder (`sse.py`): line endings, any split point, event bounds, odd fields."""

from __future__ import annotations

import json

import pytest

from lockgate.errors import FailureKind, ResponseFailure
from lockgate.sse import ServerSentEvent, SSEDecoder, SSEFramer, canonical_frame, canonical_raw


def decode_all(chunks: list[bytes], limit: int = 1 << 20) -> list[ServerSentEvent]:
    decoder = SSEDecoder(limit)
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.finish())
    return events


STREAM = (
    b": keep-alive\n"
    b'event: a\ndata: {"x": 1}\n\n'
    b"data: line one\ndata: line two\n\n"
    b"id: 7\nretry: 10\nevent: b\ndata:no-space\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    ServerSentEvent("a", b'{"x": 1}'),
    ServerSentEvent(None, b"line one\nline two"),
    ServerSentEvent("b", b"no-space"),
    ServerSentEvent(None, b"[DONE]"),
]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_line_endings_decode_identically(ending: bytes) -> None:
    assert decode_all([STREAM.replace(b"\n", ending)]) == EXPECTED


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_every_split_point_decodes_identically(ending: bytes) -> None:
    payload = STREAM.replace(b"\n", ending)
    for cut in range(len(payload) + 1):
        assert decode_all([payload[:cut], payload[cut:]]) == EXPECTED, cut


def test_one_byte_at_a_time_including_inside_utf8() -> None:
    payload = 'data: {"t": "héllo — ✓"}\n\n'.encode()
    events = decode_all([payload[i : i + 1] for i in range(len(payload))])
    assert events == [ServerSentEvent(None, '{"t": "héllo — ✓"}'.encode())]


def test_incomplete_final_event_is_discarded() -> None:
    assert decode_all([b"data: complete\n\ndata: never terminated\n"]) == [
        ServerSentEvent(None, b"complete")
    ]


def test_endless_line_fails_before_being_buffered_whole() -> None:
    decoder = SSEDecoder(1024)
    decoder.feed(b"data: ")
    for _ in range(10):  # 1,006 bytes pending: still within the bound
        decoder.feed(b"x" * 100)
    with pytest.raises(ResponseFailure) as caught:
        decoder.feed(b"x" * 100)
    assert caught.value.kind is FailureKind.BOUND_EXCEEDED
    assert "1024" in caught.value.message


def test_many_data_lines_in_one_event_are_bounded() -> None:
    decoder = SSEDecoder(1024)
    with pytest.raises(ResponseFailure) as caught:
        decoder.feed(b"data: " + b"y" * 100 + b"\n" * 1 + (b"data: " + b"y" * 100 + b"\n") * 20)
    assert caught.value.kind is FailureKind.BOUND_EXCEEDED


def test_events_at_the_bound_pass() -> None:
    # The bound counts an event's lines, without the blank line that ends it.
    body = b"z" * 994
    frame = b"data: " + body + b"\n\n"
    assert decode_all([frame], limit=1000) == [ServerSentEvent(None, body)]
    assert decode_all([b"data: a\n\n" + frame], limit=1000)[-1] == ServerSentEvent(None, body)
    with pytest.raises(ResponseFailure):
        decode_all([b"data: a\n\ndata: z" + body + b"\n\n"], limit=1000)


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert decode_all([b"\n\n\nevent: lonely\n\n"]) == []


def test_rejects_non_positive_bound() -> None:
    with pytest.raises(ValueError, match="positive"):
        SSEDecoder(0)


def test_event_name_with_multi_line_data_and_comments_between_fields() -> None:
    payload = b"event: e\n: note\ndata: 1\ndata: 2\n\nevent: f\ndata: 3\nid: 9\n\n"
    assert decode_all([payload]) == [ServerSentEvent("e", b"1\n2"), ServerSentEvent("f", b"3")]


def test_field_without_colon_and_data_without_space() -> None:
    assert decode_all([b"data\n\ndata:x\n\n"]) == [
        ServerSentEvent(None, b""),
        ServerSentEvent(None, b"x"),
    ]


def test_a_whole_frame_beyond_the_bound_within_one_read_is_refused() -> None:
    decoder = SSEDecoder(max_event_bytes=1024)
    with pytest.raises(ResponseFailure) as caught:
        decoder.feed(b"data: a\n\ndata: " + b"x" * 5000 + b"\n\ndata: b")
    assert caught.value.kind is FailureKind.BOUND_EXCEEDED


# --- the byte order mark, and the canonical form -------------------------------------------

BOM = "\ufeff".encode()


@pytest.mark.parametrize("cut", [0, 1, 2, 3, 4])
def test_a_byte_order_mark_at_the_start_of_the_body_is_stripped(cut: int) -> None:
    body = BOM + b'event: a\ndata: {"x": 1}\n\n'
    chunks = [body[:cut], body[cut:]] if cut else [body]
    assert decode_all(chunks) == [ServerSentEvent("a", b'{"x": 1}')]


def test_a_byte_order_mark_elsewhere_is_no_field_name() -> None:
    # Only the body's first mark is the encoding's: one at a later line start makes that
    # line a field lockgate does not know (the engine then forwards nothing of it).
    body = b'event: a\ndata: {"x": 1}\n\n' + BOM + b'data: {"call": 1}\n\n'
    assert decode_all([body]) == [ServerSentEvent("a", b'{"x": 1}')]


@pytest.mark.parametrize("body", [b"", b"\xef", b"\xef\xbb"])
def test_a_body_shorter_than_a_mark_ends_as_it_is(body: bytes) -> None:
    decoder = SSEDecoder()
    assert decoder.feed(body) == []
    assert decoder.finish() == []
    assert decoder.cut is bool(body)  # a byte that is no comment: the body was cut


@pytest.mark.parametrize(
    ("event", "frame"),
    [
        (ServerSentEvent(None, b'{"a":1}'), b'data: {"a":1}\n\n'),
        (ServerSentEvent("response.created", b"{}"), b"event: response.created\ndata: {}\n\n"),
        (ServerSentEvent(None, b"[DONE]"), b"data: [DONE]\n\n"),
        # JSON over several lines: the same value on one (an LF is only whitespace there)
        (ServerSentEvent(None, b'{"a":\n1,\n"b":2}'), b'data: {"a": 1, "b":2}\n\n'),
        # separators that some readers split lines on, inside a string: their escapes
        (
            ServerSentEvent(None, '{"t":"a\u2028b\u2029c\x85d\ufeffe"}'.encode()),
            b'data: {"t":"a\\u2028b\\u2029c\\u0085d\\ufeffe"}\n\n',
        ),
    ],
)
def test_the_canonical_frame_is_one_data_line_meaning_the_same(
    event: ServerSentEvent, frame: bytes
) -> None:
    written = canonical_frame(event)
    assert written == frame
    # Every reader agrees on it: one event, and equal JSON where the data was JSON.
    (read,) = decode_all([written])
    assert read.event == event.event
    if read.data != b"[DONE]":
        assert json.loads(read.data) == json.loads(event.data)
    text = written.decode()
    assert text.splitlines() == text.split("\n")[:-1]  # str.splitlines finds the same lines


@pytest.mark.parametrize(
    "event",
    [
        ServerSentEvent(None, b"line one\nline two"),  # not JSON: no one-line equivalent
        ServerSentEvent(None, "not json \u2028data: {}".encode()),
        ServerSentEvent(None, b'{"a":"\x0b"}'),  # not JSON either (a raw control character)
        ServerSentEvent("two words", b"{}"),
        ServerSentEvent("r\u00e9sum\u00e9", b"{}"),
        ServerSentEvent("x\u2028data: y", b"{}"),
        ServerSentEvent("", b"{}"),
    ],
)
def test_what_no_frame_carries_unambiguously_is_refused(event: ServerSentEvent) -> None:
    with pytest.raises(ResponseFailure) as raised:
        canonical_frame(event)
    assert raised.value.kind is FailureKind.MALFORMED_EVENT


@pytest.mark.parametrize(
    "body",
    [
        b'data: {"a":1}\n\n',  # canonical: its own bytes
        b'data: {"a":1}\n\ndata: {"b":2}\n\n',
        b'data:{"a":1}\n\n',  # no space after the colon
        b'data: {"a":1}\r\n\r\n',  # CRLF
        b'data: {"a":\n1}\n\n',  # a line without a field
        b'data: {"a":1}\ndata: {"b":2}\n\n',  # two data lines
        b'data: {"a":1}\n: comment\n\n',
        b'id: 7\ndata: {"a":1}\n\n',
        b'event: delta\ndata: {"a":1}\n\n',
        'data: {"a":"x\u2028y"}\n\n'.encode(),  # a separator some readers split on
        'data: {"a":"\ufeffy"}\n\n'.encode(),
        'data: {"a":"\u00e9\u2019"}\n\n'.encode(),  # a separator's lead byte, no separator
        b'data: {"a":"\x0b"}\n\n',
    ],
)
def test_a_frame_goes_out_as_its_own_bytes_only_when_they_are_the_canonical_ones(
    body: bytes,
) -> None:
    for frame in SSEFramer().feed(body):
        if frame.event is None:
            continue
        try:
            expected = canonical_frame(frame.event)
        except ResponseFailure:
            with pytest.raises(ResponseFailure):
                canonical_raw(frame)
            continue
        sent = canonical_raw(frame)
        assert sent == expected
        if frame.raw.isascii() and frame.event.event is None and frame.raw == expected:
            assert sent is frame.raw  # no copy of a frame already canonical
