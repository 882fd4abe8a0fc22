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

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024

_LF = b"\n"
_CR = b"\r"


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str | None
    data: bytes


class SSEDecoder:
    """Incremental SSE decoder with a per-event size bound."""

    __slots__ = ("_data", "_event", "_event_size", "_max", "_partial", "_pending_cr")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self._partial = bytearray()  # an unterminated line
        self._pending_cr = False  # chunk ended in CR: may be half of a CRLF
        self._data: list[bytes] = []
        self._event: str | None = None
        self._event_size = 0

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Accept the next bytes; return the events they completed."""
        if self._pending_cr:
            chunk = _CR + chunk
            self._pending_cr = False
        if _CR in chunk:
            if chunk.endswith(_CR):
                self._pending_cr = True
                chunk = chunk[:-1]
            chunk = chunk.replace(b"\r\n", _LF).replace(_CR, _LF)
        last = chunk.rfind(_LF)
        if last < 0:
            self._partial += chunk
            self._check_size(len(self._partial))
            return []
        if self._partial:
            self._partial += chunk[:last]
            lines = bytes(self._partial).split(_LF)
            self._partial = bytearray(chunk[last + 1 :])
        else:
            lines = chunk[:last].split(_LF)
            self._partial = bytearray(chunk[last + 1 :])
        events = self._lines(lines)
        self._check_size(len(self._partial))
        return events

    def finish(self) -> list[ServerSentEvent]:
        """End of stream. A CR held back as a possible half of CRLF ends its line; an
        event without its closing blank line is incomplete and is discarded (as the SSE
        specification says)."""
        events = self._lines([bytes(self._partial)]) if self._pending_cr else []
        self._partial = bytearray()
        self._pending_cr = False
        self._data = []
        self._event = None
        self._event_size = 0
        return events

    def _check_size(self, pending_line: int) -> None:
        if self._event_size + pending_line > self._max:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"one SSE event exceeded {self._max} bytes",
            )

    def _lines(self, lines: list[bytes]) -> list[ServerSentEvent]:
        events: list[ServerSentEvent] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(
                        ServerSentEvent(self._event, data[0] if len(data) == 1 else _LF.join(data))
                    )
                    data = self._data = []
                self._event = None
                self._event_size = 0
                continue
            if line[0] == 58:  # ':' comment / keep-alive
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data.append(value)
                self._event_size += len(value) + 1
                if self._event_size > self._max:
                    self._check_size(0)
            elif name == b"event":
                self._event = value.decode("utf-8", "replace")
            # `id` and `retry` fields and unknown fields are ignored.
        return events
