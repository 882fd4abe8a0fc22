"""`cassette.faults`: fault specs round-trip; each fault's effect on a small cassette built
from a scripted reply in each protocol's native frames (events as byte ranges, read
boundaries kept); splits at byte level; seeded draws; which faults keep the decision."""

from __future__ import annotations

import json
from itertools import accumulate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.cassette.fault_spec import EVENTSTREAM_KINDS
from lockgate.cassette.faults import (
    FAULT_KINDS,
    Fault,
    Playback,
    draw_faults,
    fault_points,
    parse_fault,
    playback,
    preserves_decision,
)
from lockgate.cassette.format import Cassette
from lockgate.providers import PROVIDERS, provider
from lockgate.scripted.reply import OpeningError
from lockgate.scripted.script import Hang, Pause, Reset
from lockgate.sse import SSEFramer

from .recorded import edit_reply, json_exchange, native_frames, recorded

SPECS = [
    "cut:after=3",
    "cut:inside=3",
    "reset:after=3",
    "reset:inside=3",
    "stall:before=3:seconds=5",
    "stall:before=1:seconds=0.25",
    "drop:3",
    "duplicate:3",
    "reorder:3",
    "split:bytes=1",
    "split-utf8",
    "status:429:retry-after=2",
    "status:503",
    "corrupt-terminal",
    "cut:byte=40",
    "reset:byte=40",
    "bad-crc:3",
    "exception:3",
    "exception:3:type=throttlingException",
]
# The protocols whose bodies are SSE (Bedrock's is a binary event stream: its own tests are
# in test_eventstream_faults.py).
SSE_ONLY = frozenset({"bedrock"})
PROTOCOLS = [name for name in PROVIDERS if name not in SSE_ONLY]


def body(played: Playback) -> bytes:
    return b"".join(step for step in played.steps if isinstance(step, bytes))


def chunks(played: Playback) -> list[bytes]:
    return [step for step in played.steps if isinstance(step, bytes)]


def boundaries(pieces: list[bytes]) -> set[int]:
    return set(accumulate(len(piece) for piece in pieces))


def starts(frames: list[bytes]) -> list[int]:
    """Where each frame starts in the body."""
    return [0, *accumulate(len(frame) for frame in frames)][:-1]


def reads(cassette: Cassette) -> list[bytes]:
    return [read.data for read in cassette.reads]


@pytest.mark.parametrize("spec", SPECS)
def test_a_spec_parses_and_prints_back(spec: str) -> None:
    fault = parse_fault(spec)
    assert str(fault) == spec
    assert parse_fault(str(fault)) == fault


def test_every_kind_has_a_spec() -> None:
    assert {parse_fault(spec).kind for spec in SPECS} == set(FAULT_KINDS)


_events = st.integers(1, 10**9)
_seconds = st.floats(0, 3600, allow_nan=False, allow_infinity=False)
FAULTS = st.one_of(
    st.builds(
        lambda k, n, i: Fault(k, event=n, inside=i),
        st.sampled_from(["cut", "reset"]),
        _events,
        st.booleans(),
    ),
    st.builds(lambda n, s: Fault("stall", event=n, seconds=s), _events, _seconds),
    st.builds(
        lambda k, n: Fault(k, event=n), st.sampled_from(["drop", "duplicate", "reorder"]), _events
    ),
    st.builds(lambda n: Fault("split", offset=n), _events),
    st.just(Fault("split-utf8")),
    st.just(Fault("corrupt-terminal")),
    st.builds(lambda k, n: Fault(k, offset=n), st.sampled_from(["cut", "reset"]), _events),
    st.builds(lambda n: Fault("bad-crc", event=n), _events),
    st.builds(
        lambda n, t: Fault("exception", event=n, name=t),
        _events,
        st.none() | st.from_regex(r"[A-Za-z][A-Za-z0-9_.]{0,20}", fullmatch=True),
    ),
    st.builds(
        lambda s, r: Fault("status", status=s, retry_after=r),
        st.integers(400, 599),
        st.none() | _seconds,
    ),
)


@given(FAULTS)
def test_every_fault_round_trips_through_its_spec(fault: Fault) -> None:
    text = str(fault)
    assert parse_fault(text) == fault
    assert "\n" not in text
    assert " " not in text


BAD_SPECS = {
    "": "unknown fault",
    "explode:3": "unknown fault 'explode:3'",
    "cut:3": "is not of the form cut:after=3, cut:inside=3 or cut:byte=100",
    "cut:after=x": "is not of the form",
    "cut:after=0": "cut needs an event number, 1 or more",
    "stall:before=2": "is not of the form stall:before=3:seconds=5",
    "stall:before=2:seconds=-1": "is not of the form",
    "stall:before=2:seconds=1e9": "a stall must be between 0 and 3600 seconds",
    "drop:-1": "is not of the form drop:3",
    "split:bytes=0": "split needs a byte offset, 1 or more",
    "split-utf8:2": "is not of the form split-utf8",
    "status:200": "status needs an HTTP error status (400-599)",
    "status:429:retry=2": "is not of the form status:429:retry-after=2 or status:503",
    "corrupt-terminal:1": "is not of the form corrupt-terminal",
}


@pytest.mark.parametrize(("spec", "reason"), list(BAD_SPECS.items()), ids=list(BAD_SPECS))
def test_a_bad_spec_is_a_one_line_value_error(spec: str, reason: str) -> None:
    with pytest.raises(ValueError, match=r"^.*$") as caught:
        parse_fault(spec)
    message = str(caught.value)
    assert reason in message
    assert "\n" not in message


def test_a_fault_holds_only_what_its_kind_uses() -> None:
    with pytest.raises(ValueError, match=r"only cut and reset go inside an event"):
        Fault("drop", event=2, inside=True)
    with pytest.raises(ValueError, match="split-utf8 addresses no event"):
        Fault("split-utf8", event=2)
    with pytest.raises(ValueError, match="cut takes no seconds"):
        Fault("cut", event=1, seconds=2.0)


# --- playback ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_without_faults_the_reads_are_replayed_as_recorded(protocol: str) -> None:
    cassette = recorded(protocol)
    played = playback(cassette)
    assert played.status == 200
    assert list(played.steps) == reads(cassette)  # the same bytes, the same boundaries
    # The server frames the body itself: no recorded length comes back.
    assert ("content-length", "999") not in played.headers
    assert ("x-request-id", "req_rec") in played.headers


def test_recorded_timing_pauses_between_reads_as_recorded() -> None:
    cassette = recorded(step=0.5)
    played = playback(cassette, timing="recorded")
    pauses = [step for step in played.steps if isinstance(step, Pause)]
    assert chunks(played) == reads(cassette)
    assert len(pauses) == len(cassette.reads) - 1
    assert all(pause.seconds == pytest.approx(0.5) for pause in pauses)
    assert playback(cassette, timing="fast").steps == tuple(reads(cassette))


@pytest.mark.parametrize(("end", "last"), [("reset", Reset()), ("timeout", Hang())])
def test_the_recording_ends_as_it_ended(end: str, last: object) -> None:
    played = playback(recorded(end=end))  # type: ignore[arg-type]
    assert played.steps[-1] == last


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_event_faults_move_whole_events(protocol: str) -> None:
    frames = native_frames(protocol, edit_reply())
    cassette = recorded(protocol, frames=frames)
    n = 2
    expected = {
        "drop:2": frames[:1] + frames[2:],
        "duplicate:2": frames[:2] + frames[1:],
        "reorder:2": [*frames[:1], frames[2], frames[1], *frames[3:]],
        "cut:after=2": frames[:2],
        "reset:after=2": frames[:2],
    }
    for spec, want in expected.items():
        played = playback(cassette, [parse_fault(spec)])
        assert body(played) == b"".join(want), spec
    reset = playback(cassette, [parse_fault(f"reset:after={n}")])
    assert reset.steps[-1] == Reset()
    cut = playback(cassette, [parse_fault("cut:after=2")])
    assert not any(isinstance(step, Reset) for step in cut.steps)


@pytest.mark.parametrize("kind", ["cut", "reset"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_inside_ends_in_the_middle_of_the_event(protocol: str, kind: str) -> None:
    frames = native_frames(protocol, edit_reply())
    cassette = recorded(protocol, frames=frames)
    number = len(frames) - 1
    played = playback(cassette, [parse_fault(f"{kind}:inside={number}")])
    start = starts(frames)[number - 1]
    sent = body(played)
    assert cassette.body.startswith(sent)
    assert start < len(sent) < start + len(frames[number - 1])
    assert (played.steps[-1] == Reset()) == (kind == "reset")


def test_a_fault_cuts_a_read_only_where_it_must() -> None:
    frames = native_frames("chat", edit_reply())
    cassette = recorded("chat", frames=frames, sizes=(33,))
    original = boundaries(reads(cassette))
    at = starts(frames)[3]  # event 4 starts here
    assert at not in original  # inside a read
    played = playback(cassette, [parse_fault("stall:before=4:seconds=2")])
    assert body(played) == cassette.body
    assert boundaries(chunks(played)) == original | {at}
    stall = played.steps.index(Pause(2.0))
    assert sum(len(step) for step in played.steps[:stall] if isinstance(step, bytes)) == at


def test_dropping_an_event_keeps_the_other_read_boundaries() -> None:
    frames = native_frames("chat", edit_reply())
    cassette = recorded("chat", frames=frames, sizes=(40,))
    played = playback(cassette, [parse_fault("drop:5")])
    start, size = starts(frames)[4], len(frames[4])
    before = {b for b in boundaries(reads(cassette)) if b <= start}
    after = {b - size for b in boundaries(reads(cassette)) if b >= start + size}
    assert boundaries(chunks(played)) == before | after


def test_faults_address_the_recorded_numbering() -> None:
    frames = native_frames("chat", edit_reply())
    cassette = recorded("chat", frames=frames)
    played = playback(cassette, [parse_fault("drop:1"), parse_fault("drop:2")])
    assert body(played) == b"".join(frames[2:])


def test_split_bytes_splits_every_read() -> None:
    cassette = recorded(sizes=(9, 1, 30))
    played = playback(cassette, [parse_fault("split:bytes=4")])
    want = [p for read in reads(cassette) for p in (read[:4], read[4:]) if p]
    assert chunks(played) == want
    assert body(played) == cassette.body


def test_split_utf8_splits_every_multibyte_character() -> None:
    cassette = recorded(sizes=(4096,))  # one read holding every character
    played = playback(cassette, [parse_fault("split-utf8")])
    pieces = chunks(played)
    assert b"".join(pieces) == cassette.body
    text = cassette.body.decode("utf-8")
    assert any(ord(c) > 127 for c in text)
    for piece in pieces:  # no multi-byte character arrives whole
        try:
            decoded = piece.decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert decoded.isascii(), decoded


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_status_sends_the_protocols_error_instead_of_the_stream(protocol: str) -> None:
    played = playback(recorded(protocol), [parse_fault("status:429:retry-after=2")])
    assert played.status == 429
    assert ("retry-after", "2") in played.headers
    assert ("content-type", "application/json") in played.headers
    sent = json.loads(body(played))
    renderer = provider(protocol).render()
    model = renderer.error_body(OpeningError(429, "rate_limit", "x"))
    assert set(sent) == set(model)  # the protocol's own error shape


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_corrupt_terminal_breaks_only_the_last_json_event(protocol: str) -> None:
    frames = native_frames(protocol, edit_reply())
    cassette = recorded(protocol, frames=frames)
    played = playback(cassette, [parse_fault("corrupt-terminal")])
    framer = SSEFramer(1 << 20)
    got = framer.feed(body(played)) + framer.finish()
    datas = [f.event.data for f in got if f.event is not None]
    original = [f.event.data for f in cassette.frames()[0] if f.event is not None]
    last_json = max(i for i, d in enumerate(original) if d.startswith(b"{"))
    assert len(datas) == len(original)
    for index, (new, old) in enumerate(zip(datas, original, strict=True)):
        if index == last_json:
            with pytest.raises(json.JSONDecodeError, match="Expecting"):
                json.loads(new)
        else:
            assert new == old


def test_a_whole_json_body_is_replayed_as_it_was() -> None:
    exchange = json_exchange()
    played = playback(exchange)
    assert list(played.steps) == reads(exchange)
    corrupt = body(playback(exchange, [parse_fault("corrupt-terminal")]))
    with pytest.raises(json.JSONDecodeError, match="Expecting"):
        json.loads(corrupt)
    assert chunks(playback(exchange, [parse_fault("split:bytes=3")]))[:2] == [b'{"i', b'd": "x"']


@pytest.mark.parametrize("spec", ["cut:after=1", "stall:before=1:seconds=1", "drop:1", "reorder:1"])
def test_an_event_fault_on_a_whole_body_is_an_error(spec: str) -> None:
    with pytest.raises(ValueError, match=r"addresses events; this exchange has none$"):
        playback(json_exchange(), [parse_fault(spec)])


def test_an_event_past_the_last_is_an_error() -> None:
    cassette = recorded()
    count = len(cassette.frames()[0])
    with pytest.raises(ValueError, match=f"addresses event {count + 1}; this exchange has {count}"):
        playback(cassette, [parse_fault(f"reorder:{count}")])
    playback(cassette, [parse_fault(f"drop:{count}")])  # the last one exists


# --- draws and points ----------------------------------------------------------------------


def test_seeded_draws_are_deterministic_and_valid() -> None:
    cassette = recorded()
    points = fault_points(cassette)
    draws = [tuple(draw_faults(seed, cassette, 2)) for seed in range(20)]
    assert draws == [tuple(draw_faults(seed, cassette, 2)) for seed in range(20)]
    assert len(set(draws)) > 1
    for drawn in draws:
        assert len(drawn) == 2
        assert all(fault in points for fault in drawn)
        playback(cassette, drawn)  # every drawn fault fits
    assert draw_faults(3, json_exchange(), 50) == fault_points(json_exchange())


def test_fault_points_cover_every_kind_at_every_event() -> None:
    cassette = recorded()
    count = len(cassette.frames()[0])
    points = fault_points(cassette, stall_seconds=1.5)
    # An SSE body has no event-stream frame to break (test_eventstream_faults.py has them).
    assert {fault.kind for fault in points} == set(FAULT_KINDS) - EVENTSTREAM_KINDS
    assert {f.event for f in points if f.kind == "drop"} == set(range(1, count + 1))
    assert {f.event for f in points if f.kind == "reorder"} == set(range(1, count))
    assert {f.seconds for f in points if f.kind == "stall"} == {1.5}
    assert all(f.event is None for f in fault_points(json_exchange()))


def test_which_faults_must_keep_the_decision() -> None:
    frames = native_frames("chat", edit_reply())
    frames.insert(2, b": keep-alive\n\n")
    cassette = recorded(frames=frames)

    def keeps(spec: str) -> bool:
        return preserves_decision(parse_fault(spec), cassette, idle_timeout=10.0)

    for spec in ("split:bytes=1", "split-utf8", "stall:before=2:seconds=3", "drop:3"):
        assert keeps(spec), spec  # event 3 is the keep-alive
    assert keeps("duplicate:3")
    for spec in (
        "stall:before=2:seconds=30",
        "drop:2",
        "duplicate:2",
        "cut:after=2",
        "reset:inside=2",
        "reorder:1",
        "status:500",
        "corrupt-terminal",
    ):
        assert not keeps(spec), spec
