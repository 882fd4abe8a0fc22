"""The faults a cassette can be played with, as values and as one-line specs (`parse_fault`;
`str(fault)` gives the spec back). What each one does to the body is `faults.playback`'s.

| spec | what the body does |
| --- | --- |
| `cut:after=N` / `cut:inside=N` | ends cleanly after event N / in the middle of its bytes |
| `cut:byte=K` | ends cleanly after the body's first K bytes (any frame, any byte) |
| `reset:after=N` / `reset:inside=N` / `reset:byte=K` | the connection is reset (RST) there |
| `stall:before=N:seconds=S` | S seconds of silence before event N |
| `drop:N` / `duplicate:N` | event N is left out / sent twice |
| `reorder:N` | events N and N+1 swap places |
| `split:bytes=K` | every read is split K bytes in |
| `split-utf8` | every read is split inside every multi-byte UTF-8 character in it |
| `status:S[:retry-after=R]` | no stream: HTTP status S with the protocol's error body |
| `corrupt-terminal` | the last event's JSON no longer parses (no frames: the last bytes) |
| `bad-crc:N` | event-stream frame N's message CRC no longer matches its bytes |
| `exception:N[:type=T]` | an event-stream `exception` frame of type T is sent before frame N |

An event is a frame of the body as recorded: an SSE frame (keep-alive comments included), or
a binary event-stream message (`application/vnd.amazon.eventstream`, Bedrock); `bad-crc` and
`exception` address event-stream frames only (the exception's type defaults to
`internalServerException`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "DEFAULT_EXCEPTION",
    "EVENTSTREAM_KINDS",
    "EVENT_KINDS",
    "FAULT_KINDS",
    "MAX_EVENT",
    "MAX_FAULT_SECONDS",
    "Fault",
    "FaultKind",
    "parse_fault",
    "seconds_text",
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
    "bad-crc",
    "exception",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
MAX_FAULT_SECONDS = 3600.0  # a stall or a retry-after longer than an hour is a typo
MAX_EVENT = 10**9
DEFAULT_EXCEPTION = "internalServerException"
# The kinds that address one event (frame); cut and reset may address a byte instead.
EVENT_KINDS = frozenset(
    {"cut", "reset", "stall", "drop", "duplicate", "reorder", "bad-crc", "exception"}
)
EVENTSTREAM_KINDS = frozenset({"bad-crc", "exception"})  # binary event-stream frames only
_NUMBER = re.compile(r"[0-9]{1,10}")
_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_EXCEPTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.]{0,99}")


def seconds_text(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _check_seconds(value: object, name: str) -> None:
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be a number of seconds")
    if not 0 <= value <= MAX_FAULT_SECONDS:  # type: ignore[operator]
        raise ValueError(f"{name} must be between 0 and {MAX_FAULT_SECONDS:g} seconds")


def _check_target(fault: Fault) -> None:
    """The event (or, for cut and reset, the byte offset) a fault addresses."""
    kind = fault.kind
    at_byte = kind in ("cut", "reset") and fault.event is None
    if kind in EVENT_KINDS and not at_byte:
        if type(fault.event) is not int or not 1 <= fault.event <= MAX_EVENT:
            raise ValueError(f"{kind} needs an event number, 1 or more")
    elif fault.event is not None:
        raise ValueError(f"{kind} addresses no event")
    if type(fault.inside) is not bool or (fault.inside and kind not in ("cut", "reset")):
        raise ValueError("only cut and reset go inside an event")
    if at_byte or kind == "split":
        what = "a byte offset" if kind == "split" else "an event number or a byte offset"
        if type(fault.offset) is not int or not 1 <= fault.offset <= MAX_EVENT:
            raise ValueError(f"{kind} needs {what}, 1 or more")
        if fault.inside:
            raise ValueError(f"{kind} at a byte offset is not inside an event")
    elif fault.offset is not None:
        raise ValueError(f"{kind} takes no byte offset")


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault (see the module docstring). Only the fields its kind uses may differ from
    their defaults, so that `parse_fault(str(fault)) == fault` always holds."""

    kind: FaultKind
    event: int | None = None  # the 1-based event (frame) it addresses, where it addresses one
    inside: bool = False  # cut/reset: in the middle of event N's bytes instead of after it
    seconds: float = 0.0  # stall: how long, before event N
    offset: int | None = None  # split: every read split this many bytes in; cut/reset: where
    status: int | None = None  # status: the HTTP status sent instead of the stream
    retry_after: float | None = None  # status: its retry-after header
    name: str | None = None  # exception: the `:exception-type` (None: DEFAULT_EXCEPTION)

    def __post_init__(self) -> None:
        kind = self.kind
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r} (one of: {', '.join(FAULT_KINDS)})")
        _check_target(self)
        if kind == "stall":
            _check_seconds(self.seconds, "a stall")
        elif self.seconds != 0.0:
            raise ValueError(f"{kind} takes no seconds")
        if kind == "status":
            if type(self.status) is not int or not 400 <= self.status <= 599:
                raise ValueError("status needs an HTTP error status (400-599)")
            if self.retry_after is not None:
                _check_seconds(self.retry_after, "retry-after")
        elif self.status is not None or self.retry_after is not None:
            raise ValueError(f"{kind} takes no status")
        if kind == "exception" and self.name is not None:
            if type(self.name) is not str or _EXCEPTION_NAME.fullmatch(self.name) is None:
                raise ValueError("an exception type is a word (letters, digits, _ and .)")
        elif kind != "exception" and self.name is not None:
            raise ValueError(f"{kind} takes no exception type")

    @property
    def exception_type(self) -> str:
        return self.name or DEFAULT_EXCEPTION

    def __str__(self) -> str:
        kind = self.kind
        if kind in ("cut", "reset"):
            if self.event is None:
                return f"{kind}:byte={self.offset}"
            return f"{kind}:{'inside' if self.inside else 'after'}={self.event}"
        if kind == "stall":
            return f"stall:before={self.event}:seconds={seconds_text(self.seconds)}"
        if kind in ("drop", "duplicate", "reorder", "bad-crc"):
            return f"{kind}:{self.event}"
        if kind == "exception":
            return f"exception:{self.event}" + (f":type={self.name}" if self.name else "")
        if kind == "split":
            return f"split:bytes={self.offset}"
        if kind == "status":
            text = f"status:{self.status}"
            if self.retry_after is not None:
                text += f":retry-after={seconds_text(self.retry_after)}"
            return text
        return kind  # split-utf8, corrupt-terminal


_EXAMPLES: dict[str, str] = {
    "cut": "cut:after=3, cut:inside=3 or cut:byte=100",
    "reset": "reset:after=3, reset:inside=3 or reset:byte=100",
    "stall": "stall:before=3:seconds=5",
    "drop": "drop:3",
    "duplicate": "duplicate:3",
    "reorder": "reorder:3",
    "split": "split:bytes=1",
    "split-utf8": "split-utf8",
    "status": "status:429:retry-after=2 or status:503",
    "corrupt-terminal": "corrupt-terminal",
    "bad-crc": "bad-crc:3",
    "exception": "exception:3 or exception:3:type=throttlingException",
}


def _number(text: str) -> int | None:
    return int(text) if _NUMBER.fullmatch(text) else None


def _float(text: str) -> float | None:
    return float(text) if _SECONDS.fullmatch(text) else None


def _parse_status(rest: list[str]) -> Fault | None:
    status = _number(rest[0])
    retry: float | None = None
    if len(rest) == 2:
        if not rest[1].startswith("retry-after="):
            return None
        retry = _float(rest[1].removeprefix("retry-after="))
        if retry is None:
            return None
    return None if status is None else Fault("status", status=status, retry_after=retry)


def _parse(kind: str, rest: list[str]) -> Fault | None:
    """The fault a spec's parts give, None when they do not fit `kind`."""
    if kind in ("cut", "reset") and len(rest) == 1:
        where, _, value = rest[0].partition("=")
        number = _number(value)
        if where == "byte" and number is not None:
            return Fault(kind, offset=number)  # type: ignore[arg-type]
        if where in ("after", "inside") and number is not None:
            return Fault(kind, event=number, inside=where == "inside")  # type: ignore[arg-type]
    elif kind == "stall" and len(rest) == 2:
        before, seconds = rest
        if before.startswith("before=") and seconds.startswith("seconds="):
            number = _number(before.removeprefix("before="))
            length = _float(seconds.removeprefix("seconds="))
            if number is not None and length is not None:
                return Fault("stall", event=number, seconds=length)
    elif kind in ("drop", "duplicate", "reorder", "bad-crc") and len(rest) == 1:
        number = _number(rest[0])
        if number is not None:
            return Fault(kind, event=number)  # type: ignore[arg-type]
    elif kind == "exception" and 1 <= len(rest) <= 2:
        number = _number(rest[0])
        name: str | None = None
        if len(rest) == 2:
            if not rest[1].startswith("type="):
                return None
            name = rest[1].removeprefix("type=")
        if number is not None:
            return Fault("exception", event=number, name=name)
    elif kind == "split" and len(rest) == 1 and rest[0].startswith("bytes="):
        number = _number(rest[0].removeprefix("bytes="))
        if number is not None:
            return Fault("split", offset=number)
    elif kind in ("split-utf8", "corrupt-terminal") and not rest:
        return Fault(kind)  # type: ignore[arg-type]
    elif kind == "status" and 1 <= len(rest) <= 2:
        return _parse_status(rest)
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
