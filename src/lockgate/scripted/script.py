"""Scripted provider turns: what a (mis)behaving provider does for each request.

A script is a list of turns, one per request the client makes. A turn either fails the
opening (an HTTP status with a body and headers, or a dropped connection) or streams a reply
— a neutral `Reply` that the protocol renders, or native events — shaped by `Faults`.
`body_actions` turns a streaming turn into bytes and socket actions; the in-process replay
and the loopback HTTP server both play exactly those, so the two transports see the same
bytes.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from ..errors import StreamInterrupted
from ..jsonlimits import too_deep
from .renderer import Frame, Renderer
from .reply import (
    LAB_MODEL,
    Broken,
    Call,
    Ending,
    OpeningError,
    ProviderTool,
    Refuse,
    Reply,
    ReplyUsage,
    Say,
    Think,
)

DEFAULT_FRAGMENTS = (1, 7, 3, 29, 64, 5, 256)
GIANT_CHUNK_BYTES = 64 * 1024
MAX_SCRIPT_BYTES = 16 * 1024 * 1024
MAX_SCRIPT_DEPTH = 32
MAX_FRAGMENT_BYTES = 1024 * 1024
MAX_STALL_SECONDS = 3600.0
MAX_DRIP_MS = 10_000
MAX_GIANT_FRAME_BYTES = 16 * 1024**3
_SURROGATES = re.compile("[\ud800-\udfff]")


def _whole(value: object, name: str, minimum: int = 0, maximum: int | None = None) -> None:
    if type(value) is not int:
        raise ValueError(f"{name} must be a whole number")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f" and at most {maximum}" if maximum is not None else ""
        raise ValueError(f"{name} must be at least {minimum}{bound}")


@dataclass(frozen=True, slots=True)
class Faults:
    """How a streaming turn misbehaves. Event counts are 1-based (`after 2` = after the
    second event). Every value is checked when the turn is made."""

    reset_after: int | None = None  # connection reset (RST) after N events
    stall_after: int | None = None  # no bytes for `stall_seconds` after N events
    stall_seconds: float = 0.0
    drip_ms: int | None = None  # send each fragment `drip_ms` apart
    giant_frame_bytes: int | None = None  # after the events: a frame that never ends
    endless: Literal["text", "unknown"] | None = None  # after the events: events forever
    fragment_sizes: tuple[int, ...] = DEFAULT_FRAGMENTS  # byte boundaries, cycled
    line_ending: Literal["lf", "crlf", "cr"] = "lf"
    keepalive_every: int | None = None  # a `: keep-alive` comment every N events
    done_sentinel: bool = False  # a trailing `data: [DONE]` (as Responses gateways send)
    end: Literal["eof", "hang"] = "eof"  # after everything: end the body, or go silent

    def __post_init__(self) -> None:
        if self.end not in {"eof", "hang"}:
            raise ValueError("end must be 'eof' or 'hang'")
        if self.line_ending not in {"lf", "crlf", "cr"}:
            raise ValueError("line_ending must be 'lf', 'crlf' or 'cr'")
        if self.endless not in {None, "text", "unknown"}:
            raise ValueError("endless must be 'text' or 'unknown'")
        if type(self.fragment_sizes) is not tuple or not self.fragment_sizes:
            raise ValueError("fragment_sizes must be a non-empty list of byte counts")
        for size in self.fragment_sizes:
            _whole(size, "each fragment size", 1, MAX_FRAGMENT_BYTES)
        for name in ("reset_after", "stall_after", "keepalive_every"):
            value = getattr(self, name)
            if value is not None:
                _whole(value, name, 1 if name == "keepalive_every" else 0)
        if self.drip_ms is not None:
            _whole(self.drip_ms, "drip_ms", 0, MAX_DRIP_MS)
        if self.giant_frame_bytes is not None:
            _whole(self.giant_frame_bytes, "giant_frame_bytes", 1, MAX_GIANT_FRAME_BYTES)
        stall = self.stall_seconds
        if type(stall) not in (int, float) or not math.isfinite(stall):
            raise ValueError("stall_seconds must be a number of seconds")
        if not 0 <= stall <= MAX_STALL_SECONDS:
            raise ValueError(f"stall_seconds must be between 0 and {MAX_STALL_SECONDS:g}")
        if type(self.done_sentinel) is not bool:
            raise ValueError("done_sentinel must be true or false")


@dataclass(frozen=True, slots=True)
class WebSocketFaults:
    """What a turn does on a WebSocket beyond its `Faults`. Message counts are 1-based
    (`after 2` = after the second message)."""

    close_after: int | None = None  # a close after N messages, with `close_code`
    close_code: int = 1011  # 1006: no close frame, the TCP connection closed (FIN)
    cut_after: int | None = None  # after N messages: the next one's frame cut, then dropped
    silent_after: int | None = None  # after N messages: nothing more until the client leaves
    pong: bool = True  # False: the client's pings during this turn are never answered

    def __post_init__(self) -> None:
        for name in ("close_after", "cut_after", "silent_after"):
            value = getattr(self, name)
            if value is not None:
                _whole(value, name)
        _whole(self.close_code, "close_code", 1000, 4999)
        if type(self.pong) is not bool:
            raise ValueError("pong must be true or false")


@dataclass(frozen=True, slots=True)
class Turn:
    """One request's scripted answer: a reply (rendered by the protocol) or native events
    to stream, or an opening failure (`status` with `body`, or `connection_error`), or a
    raw playback (a recorded exchange, `cassette.faults.playback`): `status`, the headers
    `raw_headers` in order and the body's bytes and socket actions `playback`, sent as they
    are whatever the request asked."""

    events: tuple[Frame, ...] = ()
    status: int = 200
    body: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    connection_error: bool = False
    faults: Faults = field(default_factory=Faults)
    reply: Reply | None = None
    error: OpeningError | None = None  # a neutral opening error (the protocol writes it)
    playback: tuple[Action, ...] | None = None  # a raw body, sent exactly (see above)
    raw_headers: tuple[tuple[str, str], ...] = ()  # a playback's headers (no framing ones)
    websocket: WebSocketFaults | None = None  # its faults on a WebSocket (`websocket.py`)

    def opening_error(
        self, protocol: Renderer
    ) -> tuple[int, Mapping[str, Any], dict[str, str]] | None:
        """(status, native body, headers) when this turn fails the opening with a status."""
        if self.playback is not None:
            if 200 <= self.status < 300:
                return None
            raw = b"".join(step for step in self.playback if isinstance(step, bytes))
            try:
                parsed = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                parsed = {}
            body = parsed if isinstance(parsed, dict) else {}
            return self.status, body, {name.lower(): value for name, value in self.raw_headers}
        headers = dict(self.headers)
        if self.error is not None:
            if self.error.reset_seconds is not None:
                headers.update(protocol.reset_headers(self.error.reset_seconds))
            return self.error.status, protocol.error_body(self.error), headers
        if self.status != 200:
            return self.status, self.body or {}, headers
        return None

    def stream_events(self, protocol: Renderer) -> list[Frame]:
        """The native events this turn streams in `protocol`."""
        if self.reply is not None:
            return protocol.events(self.reply)
        return list(self.events)


@dataclass(frozen=True, slots=True)
class Script:
    """A loaded script: the protocol it speaks (None: the server's choice) and its turns."""

    provider: str | None
    turns: list[Turn]


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class Reset:
    """Drop the connection abruptly."""


@dataclass(frozen=True, slots=True)
class Hang:
    """Go silent until the client leaves."""


Action = bytes | Pause | Reset | Hang


async def play(
    actions: Iterable[Action], on_hang: Callable[[], object] | None = None
) -> AsyncIterator[bytes]:
    """A body's actions as an in-process byte stream: bytes are reads (the loop gets a turn
    between two), a pause sleeps, a reset raises `StreamInterrupted`, a hang calls
    `on_hang` and stays silent until cancelled."""
    for action in actions:
        if isinstance(action, bytes):
            await asyncio.sleep(0)  # a real stream yields to the loop between reads
            yield action
        elif isinstance(action, Pause):
            await asyncio.sleep(action.seconds)
        elif isinstance(action, Reset):
            raise StreamInterrupted("simulated connection reset by peer")
        elif isinstance(action, Hang):
            if on_hang is not None:
                on_hang()
            await asyncio.Event().wait()


def fragments(payload: bytes, sizes: Sequence[int] = DEFAULT_FRAGMENTS) -> Iterator[bytes]:
    """Cut bytes at deterministic, uneven boundaries (inside lines and UTF-8 characters)."""
    position = 0
    index = 0
    while position < len(payload):
        size = sizes[index % len(sizes)]
        yield payload[position : position + size]
        position += size
        index += 1


def _line_ends(payload: bytes, style: str) -> bytes:
    if style == "crlf":
        return payload.replace(b"\n", b"\r\n")
    if style == "cr":
        return payload.replace(b"\n", b"\r")
    return payload


def body_actions(turn: Turn, protocol: Renderer) -> Iterator[Action]:
    """The bytes and socket actions of a streaming turn's body, in order (a playback
    turn's, as they are)."""
    if turn.playback is not None:
        yield from turn.playback
        return
    faults = turn.faults
    drip = Pause(faults.drip_ms / 1000) if faults.drip_ms else None

    def send(payload: bytes) -> Iterator[Action]:
        for piece in fragments(_line_ends(payload, faults.line_ending), faults.fragment_sizes):
            yield piece
            if drip is not None:
                yield drip

    for number, event in enumerate(turn.stream_events(protocol), start=1):
        yield from send(protocol.frame(event))
        if faults.keepalive_every and number % faults.keepalive_every == 0:
            yield from send(b": keep-alive\n\n")
        if faults.reset_after == number:
            yield Reset()
            return
        if faults.stall_after == number:
            yield Pause(faults.stall_seconds)
    if faults.giant_frame_bytes is not None:
        yield b"data: "
        remaining = faults.giant_frame_bytes
        block = b"x" * GIANT_CHUNK_BYTES
        while remaining > 0:
            yield block[: min(remaining, GIANT_CHUNK_BYTES)]
            remaining -= GIANT_CHUNK_BYTES
    if faults.endless is not None:
        frame = _line_ends(
            protocol.frame(protocol.endless_event(faults.endless)), faults.line_ending
        )
        batch = frame * max(1, GIANT_CHUNK_BYTES // len(frame))
        while True:
            yield batch
    if faults.done_sentinel:
        yield from send(b"data: [DONE]\n\n")
    if faults.end == "hang":
        yield Hang()


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    """How a turn answers a request that did not ask for a stream (`stream: false`): the
    same reply and the same fault, told in a whole-body answer. A fault stays a fault:
    `drop` resets the connection, `hang` goes silent until the client leaves, `cut` sends
    only part of the announced body, `malformed` a body that is not JSON, `status` the
    protocol's HTTP error for an in-stream error or failure; otherwise the reply's JSON
    (`protocol.completion`), after `delay` seconds (a stall)."""

    outcome: Literal["json", "drop", "hang", "cut", "malformed", "status"]
    delay: float = 0.0


def json_answer(turn: Turn) -> JsonAnswer:
    """What a reply turn answers without a stream (see `JsonAnswer`)."""
    faults = turn.faults
    reply = turn.reply
    if reply is None:
        raise ValueError("only a reply turn has a non-streaming answer")
    delay = faults.stall_seconds if faults.stall_after is not None else 0.0
    if (
        faults.reset_after is not None
        or faults.giant_frame_bytes is not None
        or faults.endless is not None
    ):
        return JsonAnswer("drop", delay)
    if any(isinstance(part, Broken) for part in reply.sent_parts):
        return JsonAnswer("malformed", delay)
    if reply.ending in ("error", "failed"):
        return JsonAnswer("status", delay)
    if reply.ending == "open":
        # No terminal event: the stream just stops; a body that stops short says the same.
        return JsonAnswer("hang" if faults.end == "hang" else "cut", delay)
    if faults.end == "hang":
        return JsonAnswer("hang", delay)
    return JsonAnswer("json", delay)


# --- the JSON script format ----------------------------------------------------------------


class ScriptError(ValueError):
    """A script file that is not a valid list of turns."""


def _has_lone_surrogate(document: object) -> bool:
    """Whether any string (key or value) in the parsed document is not valid Unicode text
    (iterative: the document's depth is already bounded, but no recursion is needed)."""
    stack = [document]
    while stack:
        current = stack.pop()
        if isinstance(current, str):
            if not current.isascii() and _SURROGATES.search(current):
                return True
        elif isinstance(current, dict):
            stack.extend(current.keys())
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return False


def _no_constant(name: str) -> object:
    """`NaN`, `Infinity` and `-Infinity` (Python's json accepts them; JSON does not)."""
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # e.g. 1e999, which float() makes infinite
        raise ValueError(f"{text} is out of range")
    return value


def load_script(text: str) -> Script:
    """Parse the JSON script format: `{"provider": "chat", "turns": [turn, ...]}` (or a bare
    list of turns). Every value is checked here, so a script that loads plays.

    A turn is `{"status": 429, "body": {...}, "headers": {...}}`, `{"connection_error":
    true}`, `{"events": [event | {"raw": "..."}, ...], "faults": {...}}` or `{"reply":
    {"id", "text", "reasoning", "refusal", "calls": [{"id", "name", "arguments", "cut"}],
    "ending", "usage"}, "faults": {...}}`; a streaming turn may add `"websocket": {...}`, its
    faults on a WebSocket (`WebSocketFaults`).
    """
    try:
        document = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise ScriptError("nested too deeply") from None
    except ValueError as exc:
        raise ScriptError(f"not valid JSON: {exc}") from None
    if too_deep(document, MAX_SCRIPT_DEPTH):
        raise ScriptError(f"nested deeper than {MAX_SCRIPT_DEPTH} levels")
    if _has_lone_surrogate(document):
        raise ScriptError(
            "a string holds a lone surrogate (such as \\ud800), which cannot be sent as "
            'UTF-8; send it as a JSON escape inside a {"raw": "..."} frame'
        )
    provider: str | None = None
    if isinstance(document, dict):
        unknown = set(document) - {"provider", "turns"}
        if unknown:
            raise ScriptError(f"unknown keys {sorted(unknown)}")
        raw_provider = document.get("provider")
        if raw_provider is not None and not isinstance(raw_provider, str):
            raise ScriptError("provider must be a string")
        provider = raw_provider
        raw_turns = document.get("turns")
    else:
        raw_turns = document
    if not isinstance(raw_turns, list) or not raw_turns:
        raise ScriptError('expected a non-empty list of turns (or {"turns": [...]})')
    return Script(provider, [_turn(number, raw) for number, raw in enumerate(raw_turns, 1)])


_TURN_KEYS = {
    "events",
    "status",
    "body",
    "headers",
    "connection_error",
    "faults",
    "reply",
    "websocket",
}
_FAULT_KEYS = {f.name for f in fields(Faults)}
_REPLY_KEYS = {"id", "text", "reasoning", "refusal", "calls", "ending", "usage", "model"}
_CALL_KEYS = {"id", "name", "arguments", "cut"}
_ENDINGS: tuple[str, ...] = get_args(Ending)


def _turn(number: int, raw: object) -> Turn:
    where = f"turn {number}"
    if not isinstance(raw, dict):
        raise ScriptError(f"{where}: must be an object")
    unknown = set(raw) - _TURN_KEYS
    if unknown:
        raise ScriptError(f"{where}: unknown keys {sorted(unknown)}")
    events = raw.get("events", [])
    if not isinstance(events, list) or not all(
        isinstance(e, dict) and (isinstance(e.get("type"), str) or isinstance(e.get("raw"), str))
        for e in events
    ):
        raise ScriptError(f"{where}: events must be objects with a string 'type' or 'raw'")
    status = raw.get("status", 200)
    if type(status) is not int or not 200 <= status <= 599:
        raise ScriptError(f"{where}: status must be an HTTP status code (200-599)")
    headers = raw.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and _header_safe(k) and isinstance(v, str) and _header_safe(v)
        for k, v in headers.items()
    ):
        raise ScriptError(f"{where}: headers must map names to strings without line breaks")
    body = raw.get("body")
    if body is not None and not isinstance(body, dict):
        raise ScriptError(f"{where}: body must be an object")
    connection_error = raw.get("connection_error", False)
    if type(connection_error) is not bool:
        raise ScriptError(f"{where}: connection_error must be true or false")
    fault_spec = raw.get("faults", {})
    if not isinstance(fault_spec, dict) or set(fault_spec) - _FAULT_KEYS:
        raise ScriptError(f"{where}: faults must be an object with keys from {sorted(_FAULT_KEYS)}")
    if "fragment_sizes" in fault_spec:
        sizes = fault_spec["fragment_sizes"]
        if not isinstance(sizes, list):
            raise ScriptError(f"{where}: faults: fragment_sizes must be a list of byte counts")
        fault_spec = {**fault_spec, "fragment_sizes": tuple(sizes)}
    try:
        faults = Faults(**fault_spec)
    except (TypeError, ValueError) as exc:
        raise ScriptError(f"{where}: faults: {exc}") from None
    reply = _reply(where, raw["reply"]) if "reply" in raw else None
    websocket = _websocket_faults(where, raw["websocket"]) if "websocket" in raw else None
    if reply is not None and events:
        raise ScriptError(f"{where}: give either events or a reply, not both")
    return Turn(
        events=tuple(events),
        status=status,
        body=body,
        headers=headers,
        connection_error=connection_error,
        faults=faults,
        reply=reply,
        websocket=websocket,
    )


def _websocket_faults(where: str, spec: object) -> WebSocketFaults:
    """A turn's `websocket` faults (`WebSocketFaults`)."""
    names = set(WebSocketFaults.__dataclass_fields__)
    if not isinstance(spec, dict) or set(spec) - names:
        raise ScriptError(f"{where}: websocket must be an object with keys from {sorted(names)}")
    try:
        return WebSocketFaults(**spec)
    except (TypeError, ValueError) as exc:
        raise ScriptError(f"{where}: websocket: {exc}") from None


def _header_safe(text: str) -> bool:
    return text.isascii() and not any(c in text for c in "\r\n\x00")


def _text_field(where: str, spec: Mapping[str, Any], name: str) -> str:
    value = spec.get(name, "")
    if not isinstance(value, str):
        raise ScriptError(f"{where}: reply {name} must be a string")
    return value


def _reply(where: str, spec: object) -> Reply:
    if not isinstance(spec, dict) or set(spec) - _REPLY_KEYS:
        raise ScriptError(f"{where}: reply must be an object with keys from {sorted(_REPLY_KEYS)}")
    response_id = _text_field(where, spec, "id") or f"resp_script_{where.split()[-1]}"
    parts: list[Say | Think | Refuse | Call | ProviderTool] = []
    if reasoning := _text_field(where, spec, "reasoning"):
        parts.append(Think(reasoning))
    if text := _text_field(where, spec, "text"):
        parts.append(Say(text))
    if refusal := _text_field(where, spec, "refusal"):
        parts.append(Refuse(refusal))
    calls = spec.get("calls", [])
    if not isinstance(calls, list):
        raise ScriptError(f"{where}: reply calls must be a list")
    for index, call in enumerate(calls, 1):
        if not isinstance(call, dict) or set(call) - _CALL_KEYS:
            raise ScriptError(
                f"{where}: call {index} must be an object with keys {sorted(_CALL_KEYS)}"
            )
        name = call.get("name")
        arguments = call.get("arguments", {})
        if not isinstance(name, str) or not name:
            raise ScriptError(f"{where}: call {index} needs a name")
        if not isinstance(arguments, str | dict):
            raise ScriptError(f"{where}: call {index} arguments must be an object or a string")
        call_id = call.get("id", f"call_{index}")
        cut = call.get("cut", False)
        if not isinstance(call_id, str) or type(cut) is not bool:
            raise ScriptError(f"{where}: call {index}: id must be a string and cut true/false")
        parts.append(Call(call_id, name, arguments, cut=cut))
    ending = spec.get("ending", "complete")
    if ending not in _ENDINGS:
        raise ScriptError(f"{where}: reply ending must be one of {', '.join(_ENDINGS)}")
    usage = spec.get("usage", {})
    if not isinstance(usage, dict) or not all(type(v) is int and v >= 0 for v in usage.values()):
        raise ScriptError(f"{where}: reply usage must map token counts to whole numbers")
    try:
        reply_usage = ReplyUsage(**usage)
    except TypeError:
        raise ScriptError(f"{where}: reply usage keys must be from {_usage_keys()}") from None
    model = _text_field(where, spec, "model") or LAB_MODEL
    return Reply(response_id, tuple(parts), ending, reply_usage, model)


def _usage_keys() -> list[str]:
    return [f.name for f in fields(ReplyUsage)]


__all__ = [
    "Action",
    "Faults",
    "Hang",
    "JsonAnswer",
    "Pause",
    "Reset",
    "Script",
    "ScriptError",
    "Turn",
    "WebSocketFaults",
    "body_actions",
    "fragments",
    "json_answer",
    "load_script",
]
