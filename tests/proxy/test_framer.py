"""`sse.SSEFramer`: raw frames whose bytes are exactly the input (but for a leading byte order
mark), each with the event `SSEDecoder` decodes from the same bytes, the same `cut` and the
same size bound, whatever the line ends and wherever the reads are cut."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.errors import FailureKind, ResponseFailure
from lockgate.sse import RawFrame, ServerSentEvent, SSEDecoder, SSEFramer

# Pieces that SSE streams are made of, and the ways they go wrong.
_PIECES = st.sampled_from(
    [
        b'data: {"a": 1}',
        b"data:x",
        b"data: [DONE]",
        b"data",
        b"event: message_start",
        b"event:ping",
        b": keep-alive",
        b":",
        b"id: 7",
        b"retry: 10",
        b"data: \xc3\xa9\xe2\x9c\x93",
        b"\xe2\x9c",
        b"\xef\xbb\xbfdata: x",  # a byte order mark at a line start: a field of no name
        b"x",
        b" ",
    ]
)
_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 14))):
        parts.append(draw(_PIECES))
        parts.append(draw(_ENDS))
        if draw(st.booleans()):
            parts.append(draw(_ENDS))  # a blank line: the frame ends
    if draw(st.booleans()):
        parts.append(draw(_PIECES))  # an unterminated tail
    return b"".join(parts)


@st.composite
def reads(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def _framed(chunks: list[bytes], limit: int) -> tuple[list[RawFrame], bytes, bool]:
    framer = SSEFramer(limit)
    found: list[RawFrame] = []
    for chunk in chunks:
        found.extend(framer.feed(chunk))
    found.extend(framer.finish())
    return found, framer.tail, framer.cut


def _decoded(chunks: list[bytes], limit: int) -> tuple[list[ServerSentEvent], bool]:
    decoder = SSEDecoder(limit)
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.finish())
    return events, decoder.cut


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_frames_are_the_bytes_and_their_events_are_the_decoders(data: st.DataObject) -> None:
    body = data.draw(streams())
    if data.draw(st.booleans()):
        body = b"\xef\xbb\xbf" + body  # the body's own byte order mark: stripped by both
    chunks = data.draw(reads(body))
    found, tail, cut = _framed(chunks, 1 << 20)
    content = body.removeprefix(b"\xef\xbb\xbf")
    assert b"".join(frame.raw for frame in found) + tail == content
    events, decoder_cut = _decoded(chunks, 1 << 20)
    assert [frame.event for frame in found if frame.event is not None] == events
    assert cut == decoder_cut
    for frame in found:
        if frame.keepalive:
            assert frame.event is None
            assert all(
                not line or line.startswith(b":")
                for line in frame.raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
            )
    # The same bytes read whole frame the same way.
    whole, whole_tail, _ = _framed([body], 1 << 20)
    assert [f.event for f in whole if f.event is not None] == events
    assert b"".join(f.raw for f in whole) + whole_tail == content


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_the_size_bound_is_the_decoders(data: st.DataObject) -> None:
    body = data.draw(streams())
    chunks = data.draw(reads(body))
    limit = data.draw(st.integers(1, 40))

    def outcome(run: Callable[[], object]) -> str:
        try:
            run()
        except ResponseFailure as failure:
            return str(failure.kind)
        return "ok"

    # Whether the bound refuses the stream is the decoder's decision, for any reads.
    assert outcome(lambda: _framed(chunks, limit)) == outcome(lambda: _decoded(chunks, limit))


def test_crlf_split_across_reads_and_a_cr_at_the_end() -> None:
    body = b"data: a\r\n\r\ndata: b\r\r: c\r\n\r\n"
    for cut in range(len(body) + 1):
        found, tail, cut_flag = _framed([body[:cut], body[cut:]], 1024)
        assert [f.raw for f in found] == [b"data: a\r\n\r\n", b"data: b\r\r", b": c\r\n\r\n"]
        assert [f.event for f in found] == [
            ServerSentEvent(None, b"a"),
            ServerSentEvent(None, b"b"),
            None,
        ]
        assert [f.keepalive for f in found] == [False, False, True]
        assert tail == b""
        assert not cut_flag
    # A CR as the very last byte ends its line; the blank line it makes ends the frame.
    found, tail, cut_flag = _framed([b"data: z\r", b"\r"], 1024)
    assert [f.raw for f in found] == [b"data: z\r\r"]
    assert not cut_flag


def test_an_unterminated_tail_is_cut_unless_it_holds_only_comments() -> None:
    found, tail, cut = _framed([b"data: a\n\n: ping"], 1024)
    assert [f.raw for f in found] == [b"data: a\n\n"]
    assert (tail, cut) == (b": ping", False)
    found, tail, cut = _framed([b"data: a\n\ndata: [DONE]\n"], 1024)
    assert (tail, cut) == (b"data: [DONE]\n", True)


def test_frames_without_data_are_no_events_and_only_comments_are_keepalives() -> None:
    found, _, _ = _framed([b": one\n:\n\nevent: x\n\nid: 3\n\n\n\n"], 1024)
    assert [(f.event, f.keepalive) for f in found] == [
        (None, True),
        (None, False),
        (None, False),
        (None, True),
    ]


def test_a_blank_line_keepalive_begins_the_frame_after_it() -> None:
    """Gemini's keep-alive is a blank line (its clients read no comment): after a frame it
    begins the next frame, two in a row make an empty frame of their own, and no event
    changes. `support.not_canonical` and `support.keepalive_count` read them so."""
    from lockgate.providers.gemini.gateway import GATEWAY

    from .support import keepalive_count, not_canonical

    first, second = b'data: {"a":1}\n\n', b'data: {"b":2}\n\n'
    events = [ServerSentEvent(None, b'{"a":1}'), ServerSentEvent(None, b'{"b":2}')]
    for count in range(6):
        body = first + b"\n" * count + second
        found, tail, cut = _framed([body], 1024)
        assert [f.event for f in found if f.event is not None] == events
        assert b"".join(f.raw for f in found) == body
        assert (tail, cut) == (b"", False)
        assert sum(f.keepalive for f in found) == count // 2
        assert found[-1].raw == b"\n" * (count % 2) + second
        assert keepalive_count(body, GATEWAY) == count
        assert not_canonical(body, GATEWAY) == []
        assert keepalive_count(body + b"\n" * count, GATEWAY) == 2 * count  # at the end too
        assert not_canonical(body + b"\n" * count, GATEWAY) == []
    # A comment-only frame is one keep-alive (the engine sends one blank line for it);
    # anything else before a frame is no keep-alive and no canonical frame.
    assert keepalive_count(first + b": ping\r\n\r\n" + second, GATEWAY) == 1
    assert not_canonical(first + b"\r\n" + second, GATEWAY) != []
    assert not_canonical(first + b" \n" + second, GATEWAY) != []


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"])
def test_a_giant_frame_fails_while_it_accumulates(line_end: bytes) -> None:
    framer = SSEFramer(64)
    framer.feed(b"data: " + b"x" * 50)
    with pytest.raises(ResponseFailure) as caught:
        framer.feed(b"x" * 20)
    assert caught.value.kind is FailureKind.BOUND_EXCEEDED
    # A whole frame beyond the bound, in one read, fails too.
    with pytest.raises(ResponseFailure):
        SSEFramer(64).feed(b"data: " + b"y" * 70 + line_end + line_end + b"data: z" + line_end)
    # Within the bound is fine, with any line ends (the content, with LF line ends, is
    # what counts), exactly where the decoder finds it fine.
    # (A CR at the end of a read may be half of a CRLF: the frame ends with the next byte.)
    frame = b"data: " + b"y" * 57 + line_end + line_end + b":"
    found = SSEFramer(64).feed(frame)
    assert (
        [f.event for f in found] == SSEDecoder(64).feed(frame) == [ServerSentEvent(None, b"y" * 57)]
    )


def test_the_framer_rejects_a_non_positive_bound() -> None:
    with pytest.raises(ValueError, match="positive"):
        SSEFramer(0)
