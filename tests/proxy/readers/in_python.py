"""The readers in Python: the WHATWG specification, lockgate's own decoder, the official
Python SDKs and google-genai called directly, litellm's Anthropic route ported, and clients
splitting lines like `str.splitlines`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, cast

import anthropic._streaming
import httpx2
import openai._streaming
from google.genai import _api_client as genai_client

from lockgate.sse import SSEDecoder

from .base import _LINE_END, Chunks, ReadEvent, _utf8

# --- the specification, and lockgate's own decoder -------------------------------------------


class _SpecEvents:
    """The WHATWG event assembly, line by line: a blank line dispatches when the data buffer
    is not empty (data lines joined with LF), `:` starts a comment, a line without a colon is
    a field with an empty value, one space after the colon is dropped; `event`, `data`, `id`
    (without NUL) and `retry` (ASCII digits) are fields, the rest is ignored. The name is
    reported as None where the specification says `message` (an empty type buffer)."""

    def __init__(self) -> None:
        self.events: list[ReadEvent] = []
        self._data: list[str] = []
        self._name = ""

    def line(self, line: str) -> None:
        if not line:
            if self._data:
                self.events.append(ReadEvent(self._name or None, "\n".join(self._data)))
            self._data = []
            self._name = ""
            return
        if line.startswith(":"):
            return
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._name = value
        elif field == "data":
            self._data.append(value)
        # `id` and `retry` change no event's name or data; other fields are ignored.


def read_whatwg(chunks: Chunks) -> list[ReadEvent]:
    """The specification: the body decoded as UTF-8 (invalid bytes replaced, ONE byte order
    mark stripped at the start of the stream), lines ended by CRLF, LF or CR, events
    assembled as `_SpecEvents` says; what no blank line ended is discarded."""
    text = _utf8().decode(b"".join(chunks), final=True)
    if text.startswith("\ufeff"):
        text = text[1:]
    spec = _SpecEvents()
    lines = _LINE_END.split(text)
    lines.pop()  # the unterminated rest (empty when the body ends with a line end)
    for line in lines:
        spec.line(line)
    return spec.events


def read_lockgate(chunks: Chunks) -> list[ReadEvent]:
    """lockgate's own `sse.SSEDecoder` (what the gate judged; called directly)."""
    decoder = SSEDecoder(1 << 30)
    events = []
    try:
        for chunk in chunks:
            events.extend(decoder.feed(chunk))
        events.extend(decoder.finish())
    except Exception:
        pass
    return [ReadEvent(event.event, event.data.decode("utf-8", "replace")) for event in events]


# --- the official Python SDKs, called directly -------------------------------------------------


def read_openai_python(chunks: Chunks) -> list[ReadEvent]:
    """`openai._streaming.SSEDecoder.iter_bytes` (installed; what `openai.Stream` reads):
    lines split on CR, LF and CRLF before decoding, each line decoded as strict UTF-8 (an
    invalid byte raises: the reading stops there), spec fields; it also dispatches a frame
    with only `id:` or `retry:` (data ""), and once an `id:` was read every later frame,
    comment-only ones too (the id is kept, and a kept id dispatches)."""
    events: list[ReadEvent] = []
    try:
        for sse in openai._streaming.SSEDecoder().iter_bytes(iter(chunks)):
            events.append(ReadEvent(sse.event, sse.data))
    except Exception:
        pass
    return events


def read_anthropic_python(chunks: Chunks) -> list[ReadEvent]:
    """`anthropic._streaming.SSEDecoder.iter_bytes` (installed): each read is split with
    `bytes.splitlines(keepends=True)` and gathered until it ends in a blank line (`\\r\\r`,
    `\\n\\n`, `\\r\\n\\r\\n`), then split again and each line decoded as strict UTF-8 (an
    invalid byte raises); spec fields, frames with only `id:`/`retry:` dispatched, and
    after an `id:` every later frame (as `read_openai_python`)."""
    events: list[ReadEvent] = []
    try:
        for sse in anthropic._streaming.SSEDecoder().iter_bytes(iter(chunks)):
            events.append(ReadEvent(sse.event, sse.data))
    except Exception:
        pass
    return events


# --- litellm's Anthropic route, ported -----------------------------------------------------


class _LitellmLines:
    """litellm `sse_lines._SSELineSplitter` over httpx's `aiter_text` (an incremental UTF-8
    decoder, invalid bytes replaced, no byte order mark stripped): lines end at CRLF, LF or
    CR only (litellm no longer splits like `str.splitlines`); a CR ending a read ends its
    line, and a LF starting the next read is then dropped."""

    def __init__(self) -> None:
        self._partial = ""
        self._after_cr = False

    def feed(self, text: str) -> list[str]:
        if not text:
            return []
        fresh = text[1:] if self._after_cr and text.startswith("\n") else text
        self._after_cr = fresh.endswith("\r")
        *ended, tail = _LINE_END.split(fresh)
        if not ended:
            self._partial += tail
            return []
        first = self._partial + ended[0]
        self._partial = tail
        return [first, *ended[1:]]

    def flush(self) -> list[str]:
        rest, self._partial = self._partial, ""
        return [rest] if rest else []


class _LitellmJson:
    """litellm `JSONFragmentAccumulator` as `_handle_accumulated_json_chunk` uses it: the
    fragments are joined; a value is popped (`JSONDecoder.raw_decode`, leading whitespace
    skipped) only when the last non-blank fragment ends in `}` or `]`, or at the end of the
    stream; values that are not objects are skipped, and a front that does not decode
    blocks every later value."""

    def __init__(self) -> None:
        self.buffer = ""
        self.could_close = False

    def append(self, fragment: str) -> None:
        self.buffer += fragment
        stripped = fragment.rstrip()
        if stripped:
            self.could_close = stripped[-1] in "}]"

    def pop_object(self) -> tuple[bool, str]:
        """(found, the object's text); one object at most, as one call of the handler."""
        decoder = json.JSONDecoder()
        while True:
            start = len(self.buffer) - len(self.buffer.lstrip())
            if start >= len(self.buffer):
                self.buffer = ""
                return False, ""
            try:
                value, end = decoder.raw_decode(self.buffer, start)
            except json.JSONDecodeError:
                return False, ""
            text = self.buffer[start:end]
            self.buffer = self.buffer[end:]
            if not self.buffer:
                self.could_close = False
            if isinstance(value, dict):
                return True, text


def read_litellm_anthropic(chunks: Chunks) -> list[ReadEvent]:
    """litellm 1.110.2, `anthropic/chat/handler.py` `ModelResponseIterator.__anext__` over
    `aiter_sse_lines(response.aiter_text())`: every line starting `data:` is read ON ITS OWN
    (the text after `data:`; `event:` lines, comments and blank lines are ignored, so a
    frame without `event:` is read like any other); `json.loads` of it goes to
    `chunk_parser`, which dispatches on the payload's `type`, never on an SSE name. A value
    that is not an object makes `chunk_parser` raise (the stream ends there). The first line
    that is not JSON switches the stream to accumulation (`_LitellmJson`) for good; at the
    end what is buffered is drained."""
    events: list[ReadEvent] = []
    lines = _LitellmLines()
    accumulating = False
    pending = _LitellmJson()

    def handle(line: str) -> bool:
        """Read one line; False: the stream raised."""
        nonlocal accumulating
        if not line.startswith("data:"):
            return True
        fragment = line[5:]
        if not accumulating:
            try:
                value = json.loads(fragment)
            except ValueError:
                accumulating = True
            else:
                if not isinstance(value, dict):
                    return False  # `chunk.get` on a list or a number: AttributeError
                events.append(ReadEvent(None, fragment))
                return True
        pending.append(fragment)
        if pending.could_close:
            found, text = pending.pop_object()
            if found:
                events.append(ReadEvent(None, text))
        return True

    decoder = _utf8()
    texts = [decoder.decode(chunk) for chunk in chunks]
    texts.append(decoder.decode(b"", final=True))
    for text in texts:
        for line in lines.feed(text):
            if not handle(line):
                return events
    for line in lines.flush():
        if not handle(line):
            return events
    while pending.buffer:
        found, text = pending.pop_object()
        if not found:
            break
        events.append(ReadEvent(None, text))
    return events


# --- a Python client splitting lines like `str.splitlines` -----------------------------------


def _httpx_lines(chunks: Chunks) -> list[str]:
    """The lines `httpx2.Response.iter_lines` gives (installed, called directly): the text
    decoded as UTF-8 (invalid bytes replaced, no byte order mark stripped) and split by
    `LineDecoder`, which follows `str.splitlines`: LF, CR, CRLF, and also `\\x0b`, `\\x0c`,
    `\\x1c`, `\\x1d`, `\\x1e`, U+0085, U+2028 and U+2029."""
    response = httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=iter(list(chunks))
    )
    try:
        return list(response.iter_lines())
    except Exception:
        return []


def read_splitlines_events(chunks: Chunks) -> list[ReadEvent]:
    """A Python client that reads `aiter_lines()` (`_httpx_lines`) and assembles events by
    the specification's field rules (`_SpecEvents`)."""
    spec = _SpecEvents()
    for line in _httpx_lines(chunks):
        spec.line(line)
    return spec.events


def read_splitlines_data_lines(chunks: Chunks) -> list[ReadEvent]:
    """The hand-written client loop: `for line in response.iter_lines(): if
    line.startswith("data:")`, each data line read on its own (one space after the colon
    dropped), names and blank lines ignored."""
    events = []
    for line in _httpx_lines(chunks):
        if line.startswith("data:"):
            value = line[5:]
            events.append(ReadEvent(None, value[1:] if value.startswith(" ") else value))
    return events


def read_json_lines(chunks: Chunks) -> list[ReadEvent]:
    """A client given a body that is not SSE (a JSON answer where a stream was asked for):
    the whole body as one JSON document when it is one, else each line (`_httpx_lines`)
    that is a JSON document on its own (JSON Lines)."""
    body = b"".join(chunks)
    try:
        json.loads(body)
    except ValueError:
        pass
    else:
        return [ReadEvent(None, body.decode("utf-8", "replace"))]
    events = []
    for line in _httpx_lines(chunks):
        try:
            json.loads(line)
        except ValueError:
            continue
        events.append(ReadEvent(None, line))
    return events


# --- google-genai (Python), called directly, and @google/genai (Node), ported ------------------


def read_genai_python(chunks: Chunks) -> list[ReadEvent]:
    """google-genai 3.6.1 over httpx2 (its `HttpResponse._iter_response_stream`, installed,
    called directly): lines split at CR, LF and CRLF only (`_SseLineDecoder`, invalid bytes
    replaced); consecutive `data: ` lines joined with LF and dispatched at a blank line (or
    at the end of the body); EVERY OTHER LINE (a comment, `event:`, `id:`) is read as raw
    JSON, gathered until its braces balance (`_RawJsonLineBuffer`). Then, as
    `async_request_streamed` does, each piece is parsed as JSON (a failure raises
    `UnknownApiResponseError`: the reading stops there) and one whose first key is `error`
    raises `APIError` once read."""
    response = httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=iter(list(chunks))
    )
    events: list[ReadEvent] = []
    try:
        for piece in genai_client.HttpResponse(
            dict(response.headers), response
        )._iter_response_stream():
            value = json.loads(piece)
            events.append(ReadEvent(None, piece))
            if json.dumps(value).startswith('{"error":'):
                break
    except Exception:
        pass
    return events


class _Reads:
    """Reads as aiohttp's `StreamReader.iter_any` gives them."""

    def __init__(self, chunks: Chunks) -> None:
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def _done(step: Awaitable[bytes]) -> bytes | None:
    """The value of an awaitable that never suspends (None: the iteration ended)."""
    try:
        next(step.__await__())
    except StopIteration as finished:
        value: bytes = finished.value
        return value
    except StopAsyncIteration:
        return None
    raise RuntimeError("an awaitable that suspends")


def read_genai_aiohttp(chunks: Chunks) -> list[ReadEvent]:
    """google-genai 3.6.1 over aiohttp (what it uses when aiohttp is installed):
    `_aiter_aiohttp_lines` (called directly: lines split at LF ONLY, a CR is no line end),
    each line decoded as STRICT UTF-8 (an invalid byte raises: the reading stops) and
    right-stripped of all whitespace (`str.rstrip`: also U+0085, U+2028, \\x1c …), then the
    same `data: ` / raw JSON rules and the same JSON and `error` checks as
    `read_genai_python` (ported from `HttpResponse._aiter_response_stream`)."""
    events: list[ReadEvent] = []
    pending: list[str] = []

    def take(piece: str) -> bool:
        """Read one piece; False: google-genai raised there."""
        try:
            value = json.loads(piece)
        except ValueError:
            return False
        events.append(ReadEvent(None, piece))
        return not json.dumps(value).startswith('{"error":')

    raw = genai_client._RawJsonLineBuffer()
    lines = genai_client._aiter_aiohttp_lines(cast(Any, _Reads(chunks)))
    while (line_bytes := _done(lines.__anext__())) is not None:
        try:
            line = line_bytes.decode("utf-8").rstrip()
        except UnicodeDecodeError:
            return events
        if not line:
            if pending and not take("\n".join(pending)):
                return events
            pending = []
            continue
        if line.startswith("data: "):
            pending.append(line[len("data: ") :])
            continue
        piece = raw.add_line(line)
        if piece is not None and not take(piece):
            return events
    rest = raw.flush()
    if rest and not take(rest):
        return events
    if pending:
        take("\n".join(pending))
    return events
