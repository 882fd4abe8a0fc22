"""A bounded, incremental Server-Sent Events decoder.

Feed it bytes exactly as they arrive, cut anywhere (inside a line, inside a UTF-8
character); it returns the complete events. It accepts LF, CRLF and CR line ends, strips one
byte order mark at the start of the body (as the specification says), skips comment lines
(keep-alives), joins multi-line `data:` with LF and enforces a cap on one event's size *while
it accumulates*, so an endless or giant frame fails without being buffered whole. Data stays
bytes: JSON decoding happens later, on complete events only.

`canonical_frame` writes an event back in the one form every SSE reader agrees on (what the
gating engine sends a client: see its docstring).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import FailureKind, ResponseFailure
from .events import fast_init
from .jsonlimits import parse_event

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024

_LF = b"\n"
_CR = b"\r"
_BLANK = b"\n\n"
_BOM = b"\xef\xbb\xbf"  # U+FEFF in UTF-8: stripped once, at the start of the body


class _BodyStart:
    """Strips a byte order mark from the start of a body, also when it arrives cut across
    reads. `pending` is true until the body's first three bytes (or its end) decided it."""

    __slots__ = ("_head", "pending")

    def __init__(self) -> None:
        self._head = b""
        self.pending = True

    def feed(self, chunk: bytes) -> bytes | None:
        """The bytes to parse now (None: wait for more, they may finish a mark)."""
        head = self._head + chunk
        if len(head) < len(_BOM) and _BOM.startswith(head):
            self._head = head
            return None
        self._head = b""
        self.pending = False
        return head[len(_BOM) :] if head.startswith(_BOM) else head

    def finish(self) -> bytes:
        """At the end of the body: what was held back (a mark's beginning, not a mark)."""
        head, self._head = self._head, b""
        self.pending = False
        return head


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

    __slots__ = ("_max", "_partial", "_pending_cr", "_start", "cut")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self._partial = bytearray()  # the unfinished frame
        self._pending_cr = False  # the last chunk ended in CR: maybe half of a CRLF
        self._start: _BodyStart | None = _BodyStart()  # None once the body's start is read
        self.cut = False  # `finish` found the body ending inside an event

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Accept the next bytes; return the events they completed."""
        if self._start is not None:
            started = self._start.feed(chunk)
            if started is None:
                return []
            self._start = None
            chunk = started
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
        events: list[ServerSentEvent] = []
        if self._start is not None:  # the body was shorter than a byte order mark
            head = self._start.finish()
            self._start = None
            events = self.feed(head) if head else []
        partial = bytes(self._partial)
        if self._pending_cr and partial.endswith(_LF):
            events += _events([partial[:-1]])
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


# --- raw framing (for forwarding a stream byte for byte) ---------------------------------

_LINE_END = re.compile(rb"\r\n|\r|\n")
_COLON = 58  # ':', a comment line's first byte
_CR_BYTE = 13


@fast_init
@dataclass(frozen=True, slots=True)
class RawFrame:
    """One SSE frame exactly as it arrived: `raw`, its bytes through the blank line that
    ended it, original line ends included; `event`, what `SSEDecoder` makes of it (None:
    the frame holds no `data:` line, so no event is dispatched); `keepalive`, it holds only
    comment lines (and blank lines)."""

    raw: bytes
    event: ServerSentEvent | None
    keepalive: bool


def _frame(raw: bytes, content: bytes) -> RawFrame:
    """A frame from its raw bytes and its content (LF line ends, without its blank line)."""
    events = _events([content])
    if events:
        return RawFrame(raw, events[0], False)
    keepalive = all(not line or line[0] == _COLON for line in content.split(_LF))
    return RawFrame(raw, None, keepalive)


def _normalized(raw: bytes) -> bytes:
    return raw.replace(b"\r\n", _LF).replace(_CR, _LF)


def _cut(tail: bytes) -> bool:
    """Whether an unterminated tail holds any line but a `:` comment (`SSEDecoder.finish`)."""
    return any(line and line[0] != _COLON for line in _normalized(tail).split(_LF))


class SSEFramer:
    """Splits a byte stream into raw SSE frames, each with the event `SSEDecoder` would
    decode from it, so that a stream can be judged event by event and forwarded byte for
    byte (the concatenation of the frames and `tail` is exactly the input, but for a byte
    order mark at its start, which is stripped as `SSEDecoder` strips it).

    A separate class, so that `SSEDecoder`'s hot path stays as it is; the semantics are
    its own: LF, CRLF and CR line ends (a CR at the end of a read may be half of a CRLF,
    and waits for the next byte), the same parse of each frame (`_events`), the same
    per-event size bound (the frame's content with LF line ends, while it accumulates and
    when it arrives whole), and at `finish` the same `cut` rule. A stream without any CR
    is framed on `\\n\\n` alone (the common case, with a fast path for reads made of whole
    frames); the first CR switches the stream to a line-by-line scan.
    """

    __slots__ = ("_buf", "_cr", "_crlf", "_line", "_max", "_scan", "_start", "cut", "tail")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self._start: _BodyStart | None = _BodyStart()  # None once the body's start is read
        self._buf = bytearray()  # the unfinished frame, raw
        self._cr = False  # a CR was seen: line-by-line scanning from then on
        self._line = 0  # CR scan: where the current line starts in the buffer
        self._scan = 0  # where the search for the next line end (or blank line) resumes
        self._crlf = 0  # CR scan: CRLF pairs in the scanned part of the unfinished frame
        self.cut = False  # `finish` found the body ending inside an event
        self.tail = b""  # `finish`: the bytes after the last frame (no blank line ended them)

    def feed(self, chunk: bytes) -> list[RawFrame]:
        """Accept the next bytes; return the frames they completed."""
        if self._start is not None:
            started = self._start.feed(chunk)
            if started is None:
                return []
            self._start = None
            chunk = started
        if not self._cr:
            if _CR not in chunk:
                return self._feed_lf(chunk)
            self._cr = True  # rescan the unfinished frame line by line
            self._line = self._scan = self._crlf = 0
        return self._feed_cr(chunk, finishing=False)

    def finish(self) -> list[RawFrame]:
        """End of stream: a CR held back ends its line; `tail` is what no blank line ended,
        and `cut` tells whether it holds anything but comments."""
        frames: list[RawFrame] = []
        if self._start is not None:  # the body was shorter than a byte order mark
            head = self._start.finish()
            self._start = None
            frames = self.feed(head) if head else []
        if self._cr:
            frames += self._feed_cr(b"", finishing=True)
        self.tail = bytes(self._buf)
        self.cut = _cut(self.tail)
        self._buf = bytearray()
        self._line = self._scan = self._crlf = 0
        return frames

    def _feed_lf(self, chunk: bytes) -> list[RawFrame]:
        buf = self._buf
        if not buf and chunk.endswith(_BLANK) and len(chunk) <= self._max:
            if chunk.startswith(b"data: ") and chunk.find(_LF) == len(chunk) - 2:
                # One `data: X` frame, its line end the only LF but the blank line's (the
                # commonest read): what `_frame` makes of it, without the splits.
                return [RawFrame(chunk, ServerSentEvent(None, chunk[6:-2]), False)]
            contents = chunk.split(_BLANK)
            if not contents[-1]:  # whole frames, and nothing after them (the common read)
                contents.pop()
                if len(contents) == 1:
                    return [_frame(chunk, contents[0])]
                return [_frame(content + _BLANK, content) for content in contents]
        search = self._scan
        buf += chunk
        frames: list[RawFrame] = []
        start = 0
        while True:
            blank = buf.find(_BLANK, search)
            if blank < 0:
                break
            end = blank + 2
            if blank - start > self._max:  # a whole frame beyond the bound, in one read
                raise self._too_big()
            frames.append(_frame(bytes(buf[start:end]), bytes(buf[start:blank])))
            start = search = end
        if start:
            del buf[:start]
        self._scan = max(len(buf) - 1, 0)  # a blank line may begin with the last byte
        if len(buf) > self._max:
            raise self._too_big()
        return frames

    def _feed_cr(self, chunk: bytes, *, finishing: bool) -> list[RawFrame]:
        buf = self._buf
        buf += chunk
        frames: list[RawFrame] = []
        start = 0
        line = self._line
        crlf = self._crlf
        size = len(buf)
        resume = size
        for match in _LINE_END.finditer(buf, self._scan):
            begin, end = match.span()
            if end == size and end - begin == 1 and buf[begin] == _CR_BYTE and not finishing:
                resume = begin  # perhaps half of a CRLF: wait for the next byte
                break
            if end - begin == 2:
                crlf += 1
            if begin == line:  # an empty line ends the frame
                raw = bytes(buf[start:end])
                normalized = _normalized(raw)
                content = normalized[:-2] if normalized.endswith(_BLANK) else normalized[:-1]
                if len(content) > self._max:
                    raise self._too_big()
                frames.append(_frame(raw, content))
                start = end
                crlf = 0
            line = end
        if start:
            del buf[:start]
        self._line = line - start
        self._scan = resume - start
        self._crlf = crlf
        # The unfinished frame with LF line ends (a CR held back is not part of it yet);
        # at the end it is only the tail, which `SSEDecoder.finish` does not measure.
        if not finishing and len(buf) - crlf - (size - resume) > self._max:
            raise self._too_big()
        return frames

    def _too_big(self) -> ResponseFailure:
        return ResponseFailure(
            FailureKind.BOUND_EXCEEDED, f"one SSE event exceeded {self._max} bytes"
        )


# --- the canonical form (what a client of the gating engine reads) -------------------------

# What SSE readers disagree on inside a line: the separators `str.splitlines` splits on
# besides CR and LF (Python clients that split text lines, httpx's `aiter_lines`), U+FEFF
# (the TypeScript SDKs strip it from every line), and NUL.
_AMBIGUOUS = re.compile(rb"[\x00\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]|\xef\xbb\xbf")
# In JSON text those characters can only stand raw inside a string (the others are invalid
# there), where their escapes mean the same.
_ESCAPES = {
    b"\xc2\x85": b"\\u0085",
    b"\xe2\x80\xa8": b"\\u2028",
    b"\xe2\x80\xa9": b"\\u2029",
    b"\xef\xbb\xbf": b"\\ufeff",
}


# Every byte but LF and the first bytes of what `_AMBIGUOUS` matches, deleted: data left
# empty by it holds neither (nearly every event), a test several times cheaper than the
# search, which decides the rest.
_NOT_LEADS = bytes(
    byte for byte in range(256) if byte not in b"\n\x00\x0b\x0c\x1c\x1d\x1e\xc2\xe2\xef"
)


def _ambiguous(reason: str) -> ResponseFailure:
    return ResponseFailure(
        FailureKind.MALFORMED_EVENT, f"an event that SSE readers would read differently: {reason}"
    )


def _one_line(data: bytes) -> bytes:
    """Event data as one line without an ambiguous character, meaning the same JSON; data
    that is not JSON cannot be rewritten so, and is refused."""
    try:
        parse_event(data)
    except ValueError:
        raise _ambiguous("a line break or separator in data that is not JSON") from None
    # Valid JSON holds LF only as whitespace (a raw LF in a string is invalid), and the
    # multi-byte separators only inside strings.
    data = data.replace(_LF, b" ")
    return _AMBIGUOUS.sub(lambda match: _ESCAPES[match.group()], data)


def canonical_frame(event: ServerSentEvent) -> bytes:
    """`event` as the one frame every SSE reader reads alike: `event: NAME` (when it has a
    name) and one `data:` line, LF line ends, nothing else. The name must be printable
    ASCII without spaces; data holding a line break or a character some readers split or
    strip lines on is rewritten as equal JSON on one line. An event that cannot be written
    so raises ResponseFailure (`malformed_event`)."""
    data = event.data
    if data.translate(None, _NOT_LEADS) and (_LF in data or _AMBIGUOUS.search(data) is not None):
        data = _one_line(data)
    name = event.event
    if name is None:
        return b"data: " + data + b"\n\n"
    if not (name.isascii() and name.isprintable()) or " " in name or not name:
        raise _ambiguous(f"the event name {name!r}")
    return b"event: " + name.encode("ascii") + b"\ndata: " + data + b"\n\n"


def canonical_raw(frame: RawFrame) -> bytes:
    """`canonical_frame` of the frame's event, which is the frame's own bytes (returned as
    they are, no copy) when it already is `data: X` with LF line ends and nothing in X to
    rewrite (nearly every Chat event); the event must not be None."""
    event = frame.event
    assert event is not None
    raw = frame.raw
    data = event.data
    if (
        event.event is None
        and len(raw) == len(data) + 8
        and raw.startswith(b"data: ")
        and raw.startswith(data, 6)
        and raw.endswith(_BLANK)
        and not data.translate(None, _NOT_LEADS)
    ):
        return raw  # == b"data: " + data + b"\n\n", what canonical_frame writes
    return canonical_frame(event)
