"""Faults overlaid on a recorded exchange, and its playback as bytes and socket actions.

A fault is written as a one-line spec (`parse_fault`, and `str(fault)` gives it back; the
specs are `fault_spec`'s): cut or reset after, inside or at a byte of the body, stall,
drop, duplicate or reorder an event, split the reads, answer an HTTP status instead, corrupt
the last event's JSON, and on a binary event stream (Bedrock) break a frame's CRC or send
an `exception` frame before it.

Events are the body's frames (`Cassette.frames`: SSE frames, keep-alive comments included,
or binary event-stream messages), numbered from 1 as recorded: every fault that addresses
an event addresses the recorded numbering, whatever the faults before it in the list did
(`cut:byte=K` / `reset:byte=K` address the body as the faults before them left it: the
first K bytes are sent). `playback` keeps the recorded read boundaries (a fault cuts a read
only where it has to) and, with `timing="recorded"`, the recorded pauses between reads. On
an event stream, `corrupt-terminal` removes the last event's closing brace from its JSON
payload and makes its CRCs right again (the message decodes; its JSON does not parse), and
`bad-crc` flips one bit of the frame's message CRC.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ..scripted.script import Action, Hang, Pause, Reset
from .eventstream_frames import bad_crc, corrupt_payload, exception_frame
from .fault_spec import (
    EVENT_KINDS,
    EVENTSTREAM_KINDS,
    FAULT_KINDS,
    MAX_FAULT_SECONDS,
    Fault,
    FaultKind,
    parse_fault,
    seconds_text,
)
from .format import Cassette, header_problem

__all__ = [
    "EVENT_KINDS",
    "FAULT_KINDS",
    "MAX_FAULT_SECONDS",
    "Fault",
    "FaultKind",
    "Playback",
    "draw_faults",
    "fault_points",
    "parse_fault",
    "playback",
    "preserves_decision",
]

_NOT_A_FRAME = -1  # an atom's event when the bytes are a frame a fault wrote
# Response headers a playback does not repeat: the server frames the body itself.
_FRAMING_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
)


# --- where the events are ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Atom:
    """A run of body bytes within one recorded read and one event (`event` None: the bytes
    after the last frame). `opens`/`closes`: a recorded read starts before / ends after it."""

    data: bytes
    at: float  # the recorded read's time
    event: int | None
    opens: bool
    closes: bool


@dataclass(frozen=True, slots=True)
class _Stall:
    seconds: float


_Item = _Atom | _Stall
Ending = Literal["cut", "reset"]  # how a fault ends the body early


def _atoms(cassette: Cassette) -> list[_Atom]:
    """The body as atoms: cut at every recorded read boundary and every frame boundary."""
    frames = cassette.frames()[0] if cassette.streamed else []
    starts: list[int] = []  # where each frame starts; the tail starts at the last `ends`
    position = 0
    for frame in frames:
        starts.append(position)
        position += len(frame.raw)
    tail_start = position
    bounds = [*starts, tail_start]
    atoms: list[_Atom] = []
    start = 0
    for read in cassette.reads:
        end = start + len(read.data)
        cuts = sorted({start, end, *(b for b in bounds if start < b < end)})
        for low, high in itertools.pairwise(cuts):
            index = bisect.bisect_right(bounds, low) - 1  # the frame holding `low`
            event = index + 1 if 0 <= index < len(frames) else None
            data = read.data[low - start : high - start]
            atoms.append(_Atom(data, read.at, event, low == start, high == end))
        start = end
    return atoms


def _events_in(cassette: Cassette) -> int:
    return len(cassette.frames()[0]) if cassette.streamed else 0


def _check_fits(fault: Fault, cassette: Cassette, events: int) -> None:
    """ValueError when `fault` addresses an event (or a byte) the exchange does not have,
    or an event-stream frame in a body that is not an event stream."""
    if fault.kind in EVENTSTREAM_KINDS and cassette.wire != "eventstream":
        raise ValueError(f"{fault} addresses event-stream frames; this exchange has none")
    if fault.kind not in EVENT_KINDS:
        return
    if fault.event is None:  # cut or reset at a byte
        assert fault.offset is not None
        size = len(cassette.body)
        if fault.offset >= size:
            raise ValueError(f"{fault} addresses byte {fault.offset}; the body has {size}")
        return
    if events == 0:
        raise ValueError(f"{fault} addresses events; this exchange has none")
    last = fault.event + 1 if fault.kind == "reorder" else fault.event
    if last > events:
        raise ValueError(f"{fault} addresses event {last}; this exchange has {events}")


def _group(items: list[_Item], event: int) -> tuple[int, int]:
    """The index range of the first occurrence of `event`'s atoms in `items`, (-1, -1) when
    they are gone (an earlier fault dropped or cut them)."""
    first = -1
    for index, item in enumerate(items):
        if isinstance(item, _Atom) and item.event == event:
            if first < 0:
                first = index
        elif first >= 0 and not (isinstance(item, _Atom) and item.event == event):
            return first, index
    return (first, len(items)) if first >= 0 else (-1, -1)


def _split_group(items: list[_Item], start: int, stop: int, offset: int) -> int:
    """Cut the atoms `items[start:stop]` `offset` bytes into them (in place); the index of
    the first item at or after the cut."""
    position = 0
    for index in range(start, stop):
        item = items[index]
        if not isinstance(item, _Atom):
            continue  # a stall holds no byte
        size = len(item.data)
        if position + size <= offset:
            position += size
            continue
        inner = offset - position
        if inner == 0:
            return index
        head = replace(item, data=item.data[:inner], closes=False)
        rest = replace(item, data=item.data[inner:], opens=False)
        items[index : index + 1] = [head, rest]
        return index + 1
    return stop


def _json_event(frame_raw: bytes) -> bool:
    return b"{" in frame_raw and frame_raw.rstrip().endswith(b"}")


def _corrupt_eventstream(items: list[_Item], cassette: Cassette) -> None:
    """Re-encode the last event frame whose payload is JSON without its closing brace (its
    atoms become one), or without one the last byte of the body."""
    frames = cassette.frames()[0]
    for number in range(len(frames), 0, -1):
        corrupted = corrupt_payload(frames[number - 1].raw)
        if corrupted is None:
            continue
        start, stop = _group(items, number)
        if start < 0:
            continue
        first, last = items[start], items[stop - 1]
        assert isinstance(first, _Atom)
        assert isinstance(last, _Atom)
        items[start:stop] = [_Atom(corrupted, first.at, number, first.opens, last.closes)]
        return
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, _Atom) and item.data:
            items[index] = replace(item, data=item.data[:-1])
            return


def _corrupt(items: list[_Item], cassette: Cassette) -> None:
    """Mangle the last event's JSON (drop its closing brace), or without a JSON event the
    last byte that is not white space."""
    if cassette.wire == "eventstream":
        _corrupt_eventstream(items, cassette)
        return
    frames = cassette.frames()[0] if cassette.streamed else []
    target: int | None = None
    for number in range(len(frames), 0, -1):
        if frames[number - 1].event is not None and _json_event(frames[number - 1].raw):
            target = number
            break
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if not isinstance(item, _Atom) or (target is not None and item.event != target):
            continue
        stripped = item.data.rstrip()
        if not stripped or (target is not None and not stripped.endswith(b"}")):
            continue
        position = len(stripped) - 1
        items[index] = replace(item, data=item.data[:position] + item.data[position + 1 :])
        return


def _apply(items: list[_Item], fault: Fault, cassette: Cassette) -> Ending | None:
    """Apply one fault to the items in place; the body's new ending, if it changes."""
    kind = fault.kind
    if kind == "corrupt-terminal":
        _corrupt(items, cassette)
        return None
    if kind not in EVENT_KINDS:
        return None  # split faults apply to the reads afterwards; status replaces it all
    if fault.event is None:  # cut or reset at a byte of the body as played so far
        assert fault.offset is not None
        atoms = [index for index, item in enumerate(items) if isinstance(item, _Atom)]
        if not atoms:
            return None
        cut = _split_group(items, atoms[0], len(items), fault.offset)
        del items[cut:]
        return "cut" if kind == "cut" else "reset"
    start, stop = _group(items, fault.event)
    if start < 0:
        return None  # already gone
    if kind in ("cut", "reset"):
        if fault.inside:
            size = sum(len(i.data) for i in items[start:stop] if isinstance(i, _Atom))
            stop = _split_group(items, start, stop, size // 2)
        del items[stop:]
        return "cut" if kind == "cut" else "reset"
    if kind == "stall":
        items.insert(start, _Stall(fault.seconds))
    elif kind == "bad-crc":
        last = items[stop - 1]
        assert isinstance(last, _Atom)
        items[stop - 1] = replace(last, data=bad_crc(last.data))
    elif kind == "exception":
        first = items[start]
        assert isinstance(first, _Atom)
        text = f"lockgate fault: {fault.exception_type} before frame {fault.event}"
        frame = exception_frame(fault.exception_type, text)
        items.insert(start, _Atom(frame, first.at, _NOT_A_FRAME, True, True))
    elif kind == "drop":
        del items[start:stop]
    elif kind == "duplicate":
        items[stop:stop] = items[start:stop]
    elif kind == "reorder":
        after, end = _group(items, fault.event + 1)
        if after >= 0:
            mine, theirs = items[start:stop], items[after:end]
            if after >= stop:
                items[after:end] = mine
                items[start:stop] = theirs
            else:
                items[start:stop] = theirs
                items[after:end] = mine
    return None


def _reads(items: list[_Item]) -> list[tuple[bytes, float] | _Stall]:
    """Join atoms back into reads wherever the recording had no read boundary."""
    out: list[tuple[bytes, float] | _Stall] = []
    previous: _Atom | None = None
    for item in items:
        if isinstance(item, _Stall):
            out.append(item)
            previous = None
            continue
        if previous is not None and not previous.closes and not item.opens:
            data, at = out[-1]  # type: ignore[misc]
            out[-1] = (data + item.data, at)
        else:
            out.append((item.data, item.at))
        previous = item
    return out


def _split_utf8(data: bytes) -> list[bytes]:
    """`data` cut right after the lead byte of every multi-byte UTF-8 character."""
    pieces: list[bytes] = []
    start = 0
    for index, byte in enumerate(data):
        if byte >= 0xC0 and index + 1 < len(data) and 0x80 <= data[index + 1] < 0xC0:
            pieces.append(data[start : index + 1])
            start = index + 1
    pieces.append(data[start:])
    return [piece for piece in pieces if piece]


def _split(data: bytes, faults: Sequence[Fault]) -> list[bytes]:
    pieces = [data]
    for fault in faults:
        if fault.kind == "split":
            assert fault.offset is not None
            offset = fault.offset
            pieces = [p for piece in pieces for p in (piece[:offset], piece[offset:]) if p]
        elif fault.kind == "split-utf8":
            pieces = [p for piece in pieces for p in _split_utf8(piece)]
    return pieces


@dataclass(frozen=True, slots=True)
class Playback:
    """What a server sends for a (faulted) recorded exchange: its status, its headers (the
    body's framing headers left out: the server frames it) and its body as actions."""

    status: int
    headers: tuple[tuple[str, str], ...]
    steps: tuple[Action, ...] = field(default=())


def _status_playback(cassette: Cassette, fault: Fault) -> Playback:
    import json

    from ..providers import provider
    from ..scripted.reply import ErrorKind, OpeningError

    assert fault.status is not None
    kinds: dict[int, ErrorKind] = {
        400: "invalid",
        401: "auth",
        403: "auth",
        429: "rate_limit",
        500: "server",
        502: "unavailable",
        503: "unavailable",
        529: "overloaded",
    }
    kind: ErrorKind = kinds.get(fault.status, "server" if fault.status >= 500 else "invalid")
    message = f"lockgate fault: HTTP {fault.status} instead of the recorded response"
    try:
        body = (
            provider(cassette.protocol)
            .render()
            .error_body(OpeningError(fault.status, kind, message))
        )
    except KeyError:
        body = {"error": {"message": message}}
    headers: list[tuple[str, str]] = [("content-type", "application/json")]
    if fault.retry_after is not None:
        headers.append(("retry-after", seconds_text(fault.retry_after)))
    return Playback(fault.status, tuple(headers), (json.dumps(body).encode(),))


def playback(
    cassette: Cassette,
    faults: Sequence[Fault] = (),
    *,
    timing: Literal["recorded", "fast"] = "fast",
) -> Playback:
    """The recorded exchange with `faults` applied, in order (see the module docstring).
    ValueError when a fault addresses an event the exchange does not have, or when a
    recorded header cannot be sent as is (`format.header_problem`: a value holding CR or
    LF would add a header of its own)."""
    if timing not in ("recorded", "fast"):
        raise ValueError("timing must be 'recorded' or 'fast'")
    for name, value in cassette.headers:
        problem = header_problem(name, value)
        if problem is not None:
            raise ValueError(problem)
    events = _events_in(cassette)
    for fault in faults:
        _check_fits(fault, cassette, events)
    for fault in faults:
        if fault.kind == "status":
            return _status_playback(cassette, fault)
    items: list[_Item] = list(_atoms(cassette))
    ending: Ending | None = None
    for fault in faults:
        changed = _apply(items, fault, cassette)
        if changed is not None and ending is None:
            ending = changed
    steps: list[Action] = []
    clock = 0.0
    for read in _reads(items):
        if isinstance(read, _Stall):
            steps.append(Pause(read.seconds))
            continue
        data, at = read
        if timing == "recorded" and at > clock:
            steps.append(Pause(at - clock))
            clock = at
        steps.extend(_split(data, faults))
    if ending is None:
        if timing == "recorded" and cassette.end_at is not None and cassette.end_at > clock:
            steps.append(Pause(cassette.end_at - clock))
        if cassette.end == "reset":
            steps.append(Reset())
        elif cassette.end == "timeout":
            steps.append(Hang())
    elif ending == "reset":
        steps.append(Reset())
    headers = tuple(
        (name, value) for name, value in cassette.headers if name.lower() not in _FRAMING_HEADERS
    )
    return Playback(cassette.status, headers, tuple(steps))


# --- which faults, and what they may do ----------------------------------------------------


def fault_points(cassette: Cassette, stall_seconds: float = 5.0) -> list[Fault]:
    """Every fault kind at every event boundary of the exchange (stalls of `stall_seconds`;
    on an event stream, a bad CRC and an exception frame at every frame too), then the
    faults that address no event. A non-streamed exchange gets only the latter."""
    events = _events_in(cassette)
    points: list[Fault] = []
    for number in range(1, events + 1):
        points.extend(
            [
                Fault("cut", event=number),
                Fault("cut", event=number, inside=True),
                Fault("reset", event=number),
                Fault("reset", event=number, inside=True),
                Fault("stall", event=number, seconds=float(stall_seconds)),
                Fault("drop", event=number),
                Fault("duplicate", event=number),
            ]
        )
        if number < events:
            points.append(Fault("reorder", event=number))
        if cassette.wire == "eventstream":
            points.extend([Fault("bad-crc", event=number), Fault("exception", event=number)])
    points.extend(
        [
            Fault("split", offset=1),
            Fault("split-utf8"),
            Fault("status", status=429, retry_after=1.0),
            Fault("status", status=500),
            Fault("status", status=503),
            Fault("corrupt-terminal"),
        ]
    )
    return points


def draw_faults(seed: int, cassette: Cassette, count: int = 1) -> list[Fault]:
    """`count` distinct faults drawn from `fault_points(cassette)` by a generator seeded with
    `seed` (the same seed and cassette draw the same faults), in event order."""
    if count < 0:
        raise ValueError("count must be 0 or more")
    points = fault_points(cassette)
    rng = random.Random(f"lockgate-fault:{seed}")
    chosen = sorted(rng.sample(range(len(points)), min(count, len(points))))
    return [points[index] for index in chosen]


def preserves_decision(fault: Fault, cassette: Cassette, idle_timeout: float) -> bool:
    """Whether the faulted body must still give exactly the recorded decision: splits, a
    stall shorter than `idle_timeout`, dropping, duplicating or swapping frames that carry
    no event (keep-alive comments). Otherwise the fault may change it (then the only
    acceptable results are a refusal or exactly the recorded decision)."""
    _check_fits(fault, cassette, _events_in(cassette))
    if fault.kind in ("split", "split-utf8"):
        return True
    if fault.kind == "stall":
        return fault.seconds < idle_timeout
    if fault.kind in ("drop", "duplicate", "reorder"):
        assert fault.event is not None
        frames = cassette.frames()[0]
        numbers = [fault.event, fault.event + 1] if fault.kind == "reorder" else [fault.event]
        return all(frames[n - 1].event is None for n in numbers)
    return False
