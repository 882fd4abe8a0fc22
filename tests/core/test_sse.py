"""The SSE decoder (`sse.py`): line endings, any split point, event bounds, odd fields."""

from __future__ import annotations

import pytest

from lockgate.errors import FailureKind, ResponseFailure
from lockgate.sse import ServerSentEvent, SSEDecoder


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
