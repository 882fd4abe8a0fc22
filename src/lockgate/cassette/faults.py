"""Faults overlaid on a recorded exchange, and its playback as bytes and socket actions.

A fault is written as a one-line spec (`parse_fault`, and `str(fault)` gives it back):

| spec | what the body does |
| --- | --- |
| `cut:after=N` / `cut:inside=N` | ends cleanly after event N / in the middle of its bytes |
| `reset:after=N` / `reset:inside=N` | the connection is reset (RST) there instead |
| `stall:before=N:seconds=S` | S seconds of silence before event N |
| `drop:N` / `duplicate:N` | event N is left out / sent twice |
| `reorder:N` | events N and N+1 swap places |
| `split:bytes=K` | every read is split K bytes in |
| `split-utf8` | every read is split inside every multi-byte UTF-8 character in it |
| `status:S[:retry-after=R]` | no stream: HTTP status S with the protocol's error body |
| `corrupt-terminal` | the last event's JSON no longer parses (no frames: the last bytes) |

Events are the body's SSE frames (`Cassette.frames`, keep-alive comments included), numbered
from 1 as recorded: every fault addresses the recorded numbering, whatever the faults before
it in the list did. `playback` keeps the recorded read boundaries (a fault cuts a read only
where it has to) and, with `timing="recorded"`, the recorded pauses between reads.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from ..scripted.script import Action, Hang, Pause, Reset
from .format import Cassette, header_problem

__all__ = [
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

FaultKind = Literal[
    "cut",
    "reset",
    "stall",
    "drop",
    "duplicate",
    "reorder",
    "split",
    "split-utf8",
    "status",
    "corrupt-terminal",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
MAX_FAULT_SECONDS = 3600.0  # a stall or a retry-after longer than an hour is a typo
MAX_EVENT = 10**9
_EVENT_KINDS = frozenset({"cut", "reset", "stall", "drop", "duplicate", "reorder"})
_NUMBER = re.compile(r"[0-9]{1,10}")
_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
# Response headers a playback does not repeat: the server frames the body itself.
_FRAMING_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
)


def _seconds_text(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _check_seconds(value: object, name: str) -> None:
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be a number of seconds")
    if not 0 <= value <= MAX_FAULT_SECONDS:  # type: ignore[operator]
        raise ValueError(f"{name} must be between 0 and {MAX_FAULT_SECONDS:g} seconds")


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault (see the module docstring). Only the fields its kind uses may differ from
    their defaults, so that `parse_fault(str(fault)) == fault` always holds."""

    kind: FaultKind
    event: int | None = None  # the 1-based event (frame) it addresses, where it addresses one
    inside: bool = False  # cut/reset: in the middle of event N's bytes instead of after it
    seconds: float = 0.0  # stall: how long, before event N
    offset: int | None = None  # split: every read split this many bytes in
    status: int | None = None  # status: the HTTP status sent instead of the stream
    retry_after: float | None = None  # status: its retry-after header

    def __post_init__(self) -> None:
        kind = self.kind
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r} (one of: {', '.join(FAULT_KINDS)})")
        if kind in _EVENT_KINDS:
            if type(self.event) is not int or not 1 <= self.event <= MAX_EVENT:
                raise ValueError(f"{kind} needs an event number, 1 or more")
        elif self.event is not None:
            raise ValueError(f"{kind} addresses no event")
        if type(self.inside) is not bool or (self.inside and kind not in ("cut", "reset")):
            raise ValueError("only cut and reset go inside an event")
        if kind == "stall":
            _check_seconds(self.seconds, "a stall")
        elif self.seconds != 0.0:
            raise ValueError(f"{kind} takes no seconds")
        if kind == "split":
            if type(self.offset) is not int or not 1 <= self.offset <= MAX_EVENT:
                raise ValueError("split needs a byte offset, 1 or more")
        elif self.offset is not None:
            raise ValueError(f"{kind} takes no byte offset")
        if kind == "status":
            if type(self.status) is not int or not 400 <= self.status <= 599:
                raise ValueError("status needs an HTTP error status (400-599)")
            if self.retry_after is not None:
                _check_seconds(self.retry_after, "retry-after")
        elif self.status is not None or self.retry_after is not None:
            raise ValueError(f"{kind} takes no status")

    def __str__(self) -> str:
        kind = self.kind
        if kind in ("cut", "reset"):
            return f"{kind}:{'inside' if self.inside else 'after'}={self.event}"
        if kind == "stall":
            return f"stall:before={self.event}:seconds={_seconds_text(self.seconds)}"
        if kind in ("drop", "duplicate", "reorder"):
            return f"{kind}:{self.event}"
        if kind == "split":
            return f"split:bytes={self.offset}"
        if kind == "status":
            text = f"status:{self.status}"
            if self.retry_after is not None:
                text += f":retry-after={_seconds_text(self.retry_after)}"
            return text
        return kind  # split-utf8, corrupt-terminal


_EXAMPLES: dict[str, str] = {
    "cut": "cut:after=3 or cut:inside=3",
    "reset": "reset:after=3 or reset:inside=3",
    "stall": "stall:before=3:seconds=5",
    "drop": "drop:3",
    "duplicate": "duplicate:3",
    "reorder": "reorder:3",
    "split": "split:bytes=1",
    "split-utf8": "split-utf8",
    "status": "status:429:retry-after=2 or status:503",
    "corrupt-terminal": "corrupt-terminal",
}


def _number(text: str) -> int | None:
    return int(text) if _NUMBER.fullmatch(text) else None


def _float(text: str) -> float | None:
    return float(text) if _SECONDS.fullmatch(text) else None


def _parse(kind: str, rest: list[str]) -> Fault | None:
    """The fault a spec's parts give, None when they do not fit `kind`."""
    if kind in ("cut", "reset") and len(rest) == 1:
        where, _, value = rest[0].partition("=")
        number = _number(value)
        if where in ("after", "inside") and number is not None:
            return Fault(kind, event=number, inside=where == "inside")  # type: ignore[arg-type]
    elif kind == "stall" and len(rest) == 2:
        before, seconds = rest
        if before.startswith("before=") and seconds.startswith("seconds="):
            number = _number(before.removeprefix("before="))
            length = _float(seconds.removeprefix("seconds="))
            if number is not None and length is not None:
                return Fault("stall", event=number, seconds=length)
    elif kind in ("drop", "duplicate", "reorder") and len(rest) == 1:
        number = _number(rest[0])
        if number is not None:
            return Fault(kind, event=number)  # type: ignore[arg-type]
    elif kind == "split" and len(rest) == 1 and rest[0].startswith("bytes="):
        number = _number(rest[0].removeprefix("bytes="))
        if number is not None:
            return Fault("split", offset=number)
    elif kind in ("split-utf8", "corrupt-terminal") and not rest:
        return Fault(kind)  # type: ignore[arg-type]
    elif kind == "status" and 1 <= len(rest) <= 2:
        status = _number(rest[0])
        retry: float | None = None
        if len(rest) == 2:
            if not rest[1].startswith("retry-after="):
                return None
            retry = _float(rest[1].removeprefix("retry-after="))
            if retry is None:
                return None
        if status is not None:
            return Fault("status", status=status, retry_after=retry)
    return None


def parse_fault(text: str) -> Fault:
    """A fault from its spec (`cut:inside=3`, …); ValueError with a one-line reason."""
    kind, *rest = text.split(":")
    shown = text if len(text) <= 80 else text[:77] + "..."
    if kind not in _EXAMPLES:
        raise ValueError(f"unknown fault {shown!r} (one of: {', '.join(FAULT_KINDS)})")
    try:
        fault = _parse(kind, rest)
    except ValueError as exc:
        raise ValueError(f"fault {shown!r}: {exc}") from None
    if fault is None:
        raise ValueError(f"fault {shown!r} is not of the form {_EXAMPLES[kind]}")
    return fault


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


def _check_fits(fault: Fault, events: int) -> None:
    """ValueError when `fault` addresses an event the exchange does not have."""
    if fault.kind not in _EVENT_KINDS:
        return
    assert fault.event is not None
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
        assert isinstance(item, _Atom)
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


def _corrupt(items: list[_Item], cassette: Cassette) -> None:
    """Mangle the last event's JSON (drop its closing brace), or without a JSON event the
    last byte that is not white space."""
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
    if kind not in _EVENT_KINDS:
        return None  # split faults apply to the reads afterwards; status replaces it all
    assert fault.event is not None
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
        headers.append(("retry-after", _seconds_text(fault.retry_after)))
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
        _check_fits(fault, events)
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
    """Every fault kind at every event boundary of the exchange (stalls of `stall_seconds`),
    then the faults that address no event. A non-streamed exchange gets only the latter."""
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
    _check_fits(fault, _events_in(cassette))
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
