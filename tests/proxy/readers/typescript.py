"""The TypeScript readers, ported: the `openai` and `@anthropic-ai/sdk` npm SDKs and
`@google/genai` (as Gemini CLI bundles it)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator

from .base import _LINE_END, _NEWLINE_BYTE, _NEWLINE_CHAR, Chunks, ReadEvent, _utf8

# --- the TypeScript SDKs, ported ------------------------------------------------------------


def _node_text_line(line: bytes) -> str:
    """`decodeUTF8` (openai npm `internal/utils/bytes.js`): one shared `new TextDecoder()`
    called without `stream` on each line, so ITS LEADING BYTE ORDER MARK IS STRIPPED (the
    decoder's default `ignoreBOM: false`) and invalid bytes become U+FFFD."""
    text = line.decode("utf-8", "replace")
    return text[1:] if text.startswith("\ufeff") else text


def _node_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """openai npm `LineDecoder.decode`/`flush`: raw lines split on LF, CR and CRLF, a CR
    waiting for the next newline byte to know whether it is half of a CRLF
    (`#carriageReturnIndex`); `flush` decodes a final LF, so an unterminated last line is
    emitted too."""
    buffer = bytearray()
    cr_index: int | None = None  # the index after a pending CR

    def found(start: int) -> tuple[int, int, bool] | None:
        match = _NEWLINE_BYTE.search(buffer, start)
        if match is None:
            return None
        index = match.start()
        return index, index + 1, buffer[index] == 13

    def lines() -> Iterator[bytes]:
        nonlocal buffer, cr_index
        while (match := found(cr_index or 0)) is not None:
            preceding, after, carriage = match
            if carriage and cr_index is None:
                cr_index = after  # wait: a LF right after it makes a CRLF
                continue
            if cr_index is not None and (after != cr_index + 1 or carriage):
                yield bytes(buffer[: cr_index - 1])  # a lone CR ended that line
                buffer = buffer[cr_index:]
                cr_index = None
                continue
            end = preceding - 1 if cr_index is not None else preceding
            yield bytes(buffer[:end])
            buffer = buffer[after:]
            cr_index = None

    for chunk in chunks:
        buffer += chunk
        yield from lines()
    if buffer:
        buffer += b"\n"
        yield from lines()


def read_openai_node(chunks: Chunks) -> list[ReadEvent]:
    """openai npm 6.49.0 `_iterSSEMessages`: `iterSSEChunks` groups reads up to each blank
    line (`\\n\\n`, `\\r\\r`, `\\r\\n\\r\\n`; the grouping changes no line, the line decoder
    keeping its state across groups), `LineDecoder` splits lines (`_node_lines`), each line
    decoded with its own leading U+FEFF stripped (`_node_text_line`), then `SSEDecoder.decode`:
    a blank line dispatches when the name is non-empty or a data line was seen (so a frame
    with `event:` and no data IS dispatched, with data ""; a blank line that dispatches
    nothing resets nothing, so an empty `event:` stays for the next frame), `:` is a
    comment, the field is what precedes the first colon, one space after it dropped, only
    `event` and `data` kept."""
    events: list[ReadEvent] = []
    name: str | None = None
    data: list[str] = []
    for raw in _node_lines(chunks):
        line = _node_text_line(raw)
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            if name or data:  # else nothing is reset: an empty name stays for the next frame
                events.append(ReadEvent(name, "\n".join(data)))
                name, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return events


def read_anthropic_node(chunks: Chunks) -> list[ReadEvent]:
    """@anthropic-ai/sdk npm 1.16.0 `_iterSSEMessages`: one streaming `TextDecoder('utf-8',
    {ignoreBOM: true})` over the reads (invalid bytes replaced), lines split on LF, CR and
    CRLF (a CR at the end of the text waits for the next read), and `takeLine`: ONE LEADING
    U+FEFF STRIPPED FROM EVERY LINE, a blank line dispatching when the name is non-empty or
    data was seen (resetting nothing otherwise), `:` at index 0 a comment, only `event` and
    `data` fields (one space after the colon dropped). At the end the decoder is flushed
    and what is left (a final CR dropped) is split and taken line by line: an unterminated
    line is read, but no blank line follows it. (`Stream.fromSSEResponse` then skips
    `ping`, frames without a name and frames with empty data: client rules, left to the
    naive client.)"""
    events: list[ReadEvent] = []
    name: str | None = None
    data: list[str] = []

    def take(line: str) -> None:
        nonlocal name, data
        if line.startswith("\ufeff"):
            line = line[1:]
        if not line:
            if name or data:  # else nothing is reset: an empty name stays for the next frame
                events.append(ReadEvent(name, "\n".join(data)))
                name, data = None, []
            return
        colon = line.find(":")
        if colon == 0:
            return
        field = line if colon < 0 else line[:colon]
        if field not in ("event", "data"):
            return
        if colon < 0:
            value = ""
        else:
            value = line[colon + 2 :] if line[colon + 1 : colon + 2] == " " else line[colon + 1 :]
        if field == "event":
            name = value
        else:
            data.append(value)

    decoder = _utf8()
    text = ""
    for chunk in chunks:
        text += decoder.decode(chunk)
        start = 0
        while (match := _NEWLINE_CHAR.search(text, start)) is not None:
            index = match.start()
            if text[index] == "\r" and index + 1 == len(text):
                break  # perhaps half of a CRLF
            take(text[start:index])
            start = index + (2 if text.startswith("\r\n", index) else 1)
        text = text[start:]
    text += decoder.decode(b"", final=True)
    if text:
        if text.endswith("\r"):
            text = text[:-1]
        for line in _LINE_END.split(text):
            take(line)
    return events


# @google/genai's `responseLineRE`, `/^\s*data: (.*)(?:\n\n|\r\r|\r\n\r\n)/`, in Python:
# JavaScript's `\s` (its white space and line terminators, U+FEFF among them) and `.` (any
# character but LF, CR, U+2028, U+2029).
_JS_SPACE = "[\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
_RESPONSE_LINE = re.compile(_JS_SPACE + "*data: ([^\n\r\u2028\u2029]*)(?:\n\n|\r\r|\r\n\r\n)")


def read_genai_node(chunks: Chunks) -> list[ReadEvent]:
    """@google/genai 1.30.0 (Gemini CLI 0.61.0's), `processStreamResponse`: one streaming
    `TextDecoder('utf-8')` (invalid bytes replaced, one byte order mark stripped at the start
    of the body); a read that parses as JSON holding `error` with a `code` from 400 to 599
    throws `ApiError` (the reading stops); every read is appended to a buffer, and while
    the buffer's START matches `responseLineRE` (white space, `data: `, the rest of ONE
    line, a blank line) the line's text is a chunk and is cut off (an `ApiError` carries
    the error object: the client reads it, as the others read the error event). Nothing
    else is ever
    read: a buffer that starts otherwise (a comment, an `event:` line, `data:` without its
    space) matches no more, and the body's end then throws. Each chunk is `JSON.parse`d
    by `generateContentStreamInternal` (a failure throws: the reading stops); an `error`
    chunk read so raises nothing (it is a response without candidates)."""
    events: list[ReadEvent] = []
    decoder = _utf8()
    buffer = ""
    started = False
    for chunk in chunks:
        text = decoder.decode(chunk)
        if not started and text:
            started = True
            text = text.removeprefix("\ufeff")
        try:
            whole = json.loads(text)
        except ValueError:
            whole = None
        if isinstance(whole, dict) and "error" in whole:
            error = whole["error"]
            code = error.get("code") if isinstance(error, dict) else None
            if isinstance(code, int | float) and 400 <= code < 600:
                return [*events, ReadEvent(None, json.dumps(whole))]
        buffer += text
        while (match := _RESPONSE_LINE.match(buffer)) is not None:
            data = match.group(1)
            try:
                json.loads(data)
            except ValueError:
                return events
            events.append(ReadEvent(None, data))
            buffer = buffer[match.end() :]
    return events
