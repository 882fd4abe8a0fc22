"""A bounded, incremental Server-Sent Events decoder.

Feed it bytes exactly as they arrive, cut anywhere (inside a line, inside a UTF-8
character); it returns the complete events. It accepts LF, CRLF and CR line ends, skips
comment lines (keep-alives), joins multi-line `data:` with LF and enforces a cap on one
event's size *while it accumulates*, so an endless or giant frame fails without being
buffered whole. Data stays bytes: JSON decoding happens later, on complete events only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import FailureKind, ResponseFailure
from .events import fast_init

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024

_LF = b"\n"
_CR = b"\r"
_BLANK = b"\n\n"


@fast_init
@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str | None
    data: bytes


class SSEDecoder:
    """Incremental SSE decoder with a per-event size bound.

    Line ends are normalized to LF, so events are the frames between blank lines
    (`\n\n`). The unfinished frame is the only thing retained, and its size is the bound.
    """

    __slots__ = ("_max", "_partial", "_pending_cr", "cut")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self._partial = bytearray()  # the unfinished frame
        self._pending_cr = False  # the last chunk ended in CR: maybe half of a CRLF
        self.cut = False  # `finish` found the body ending inside an event

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Accept the next bytes; return the events they completed."""
        if (
            not self._partial
            and not self._pending_cr
            and chunk.endswith(_BLANK)
            and len(chunk) <= self._max
            and _CR not in chunk
        ):
            # The common shape: a server flushes each event, so a chunk is whole frames;
            # most often exactly one, `data: X` or `event: NAME` + `data: X` (its line
            # ends are then the only LFs: one scan decides it).
            lines = chunk.count(_LF)
            if lines == 2:
                if chunk.startswith(b"data: "):
                    return [ServerSentEvent(None, chunk[6:-2])]
            elif lines == 3 and chunk.startswith(b"event: "):
                newline = chunk.find(_LF)
                if chunk.startswith(b"data: ", newline + 1):
                    label = chunk[7:newline].decode("utf-8", "replace")
                    return [ServerSentEvent(label, chunk[newline + 7 : -2])]
            frames = chunk.split(_BLANK)
            frames.pop()
            return _events(frames)
        if self._pending_cr:
            chunk = _CR + chunk
            self._pending_cr = False
        if _CR in chunk:
            if chunk.endswith(_CR):
                self._pending_cr = True
                chunk = chunk[:-1]
            chunk = chunk.replace(b"\r\n", _LF).replace(_CR, _LF)
        partial = self._partial
        searched_from = len(partial) - 1 if partial else 0
        partial += chunk
        if partial.find(_BLANK, searched_from) < 0:
            self._check_size()
            return []
        frames = bytes(partial).split(_BLANK)
        self._partial = bytearray(frames.pop())
        self._check_size()
        if len(partial) > self._max and any(len(frame) > self._max for frame in frames):
            # A whole frame beyond the bound, arrived within one read: refused all the same.
            raise self._too_big()
        return _events(frames)

    def finish(self) -> list[ServerSentEvent]:
        """End of stream. A CR held back as a possible half of CRLF ends its line; an
        event without its closing blank line is incomplete and is discarded (as the SSE
        specification says), and `cut` then tells that the body ended inside it: evidence
        that the stream was cut, never a clean end."""
        events = []
        partial = bytes(self._partial)
        if self._pending_cr and partial.endswith(_LF):
            events = _events([partial[:-1]])
            partial = b""
        self.cut = any(line and line[0] != 58 for line in partial.split(_LF))  # not ':'
        self._partial = bytearray()
        self._pending_cr = False
        return events

    def _check_size(self) -> None:
        if len(self._partial) > self._max:
            raise self._too_big()

    def _too_big(self) -> ResponseFailure:
        return ResponseFailure(
            FailureKind.BOUND_EXCEEDED, f"one SSE event exceeded {self._max} bytes"
        )


def _events(frames: list[bytes]) -> list[ServerSentEvent]:
    events: list[ServerSentEvent] = []
    for frame in frames:
        # Fast paths for the common shapes: `data: X` and `event: NAME` + `data: X`.
        if frame.startswith(b"data: "):
            if _LF not in frame:
                events.append(ServerSentEvent(None, frame[6:]))
                continue
        elif frame.startswith(b"event: "):
            newline = frame.find(_LF)
            if (
                newline > 0
                and frame.startswith(b"data: ", newline + 1)
                and frame.find(_LF, newline + 1) < 0
            ):
                label = frame[7:newline].decode("utf-8", "replace")
                events.append(ServerSentEvent(label, frame[newline + 7 :]))
                continue
        name: str | None = None
        data: bytes | None = None
        for line in frame.split(_LF):
            if not line or line[0] == 58:  # blank (leading) line or ':' comment
                continue
            field, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                data = value if data is None else data + _LF + value
            elif field == b"event":
                name = value.decode("utf-8", "replace")
            # `id`, `retry` and unknown fields are ignored.
        if data is not None:
            events.append(ServerSentEvent(name, data))
    return events
