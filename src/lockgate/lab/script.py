"""Scripted provider turns: what a (mis)behaving provider does for each request.

A script is a list of turns, one per request the client makes. A turn either fails the
opening (an HTTP status with a body and headers, or a dropped connection) or streams native
events shaped by `Faults`. `body_actions` turns a streaming turn into bytes and socket
actions; the in-process replay and the loopback HTTP server both play exactly those, so the
two transports see the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

DEFAULT_FRAGMENTS = (1, 7, 3, 29, 64, 5, 256)
MAX_SCRIPT_BYTES = 16 * 1024 * 1024
GIANT_CHUNK_BYTES = 64 * 1024

Frame = Mapping[str, Any]  # a native event, or {"raw": "bytes to send verbatim"}


@dataclass(frozen=True, slots=True)
class Faults:
    """How a streaming turn misbehaves. Event counts are 1-based (`after 2` = after the
    second event)."""

    reset_after: int | None = None  # connection reset (RST) after N events
    stall_after: int | None = None  # no bytes for `stall_seconds` after N events
    stall_seconds: float = 0.0
    drip_ms: int | None = None  # send each fragment `drip_ms` apart
    giant_frame_bytes: int | None = None  # after the events: a frame that never ends
    endless: Literal["text", "unknown"] | None = None  # after the events: events forever
    fragment_sizes: tuple[int, ...] = DEFAULT_FRAGMENTS  # byte boundaries, cycled
    line_ending: Literal["lf", "crlf", "cr"] = "lf"
    keepalive_every: int | None = None  # a `: keep-alive` comment every N events
    done_sentinel: bool = False  # a trailing `data: [DONE]`
    end: Literal["eof", "hang"] = "eof"  # after everything: end the body, or go silent
    close_fails: bool = False  # client side (lab only): closing this stream raises

    def __post_init__(self) -> None:
        if self.end not in {"eof", "hang"}:
            raise ValueError("end must be 'eof' or 'hang'")
        if self.line_ending not in {"lf", "crlf", "cr"}:
            raise ValueError("line_ending must be 'lf', 'crlf' or 'cr'")
        if self.endless not in {None, "text", "unknown"}:
            raise ValueError("endless must be 'text' or 'unknown'")
        if not self.fragment_sizes or min(self.fragment_sizes) < 1:
            raise ValueError("fragment_sizes must be positive byte counts")
        for name in (
            "reset_after",
            "stall_after",
            "drip_ms",
            "giant_frame_bytes",
            "keepalive_every",
        ):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative")


@dataclass(frozen=True, slots=True)
class Turn:
    """One request's scripted answer."""

    events: tuple[Frame, ...] = ()
    status: int = 200
    body: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    connection_error: bool = False
    faults: Faults = field(default_factory=Faults)


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


def sse_bytes(event: Frame) -> bytes:
    """One native event as an SSE frame (`event:` line, `data:` line, blank line)."""
    if "raw" in event and "type" not in event:
        return str(event["raw"]).encode()
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


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


def body_actions(turn: Turn) -> Iterator[Action]:
    """The bytes and socket actions of a streaming turn's body, in order."""
    faults = turn.faults
    drip = Pause(faults.drip_ms / 1000) if faults.drip_ms else None

    def send(payload: bytes) -> Iterator[Action]:
        for piece in fragments(_line_ends(payload, faults.line_ending), faults.fragment_sizes):
            yield piece
            if drip is not None:
                yield drip

    for number, event in enumerate(turn.events, start=1):
        yield from send(sse_bytes(event))
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
        unit = (
            {"type": "response.output_text.delta", "item_id": "msg_endless", "delta": "more "}
            if faults.endless == "text"
            else {"type": "response.future_event", "note": "unknown events are progress"}
        )
        frame = _line_ends(sse_bytes(unit), faults.line_ending)
        batch = frame * max(1, GIANT_CHUNK_BYTES // len(frame))
        while True:
            yield batch
    if faults.done_sentinel:
        yield from send(b"data: [DONE]\n\n")
    if faults.end == "hang":
        yield Hang()


class ScriptError(ValueError):
    """A script file that is not a valid list of turns."""


def load_script(text: str) -> list[Turn]:
    """Parse the JSON script format: `{"turns": [turn, ...]}` or a bare list of turns.

    A turn is `{"status": 429, "body": {...}, "headers": {...}}`, `{"connection_error":
    true}`, or `{"events": [event | {"raw": "..."}, ...], "faults": {...}}`.
    """
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ScriptError(f"not valid JSON: {exc}") from None
    raw_turns = document.get("turns") if isinstance(document, dict) else document
    if not isinstance(raw_turns, list) or not raw_turns:
        raise ScriptError('expected a non-empty list of turns (or {"turns": [...]})')
    return [_turn(number, raw) for number, raw in enumerate(raw_turns, start=1)]


_TURN_KEYS = {"events", "status", "body", "headers", "connection_error", "faults"}
_FAULT_KEYS = {f.name for f in fields(Faults)}


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
    if not isinstance(status, int) or not 200 <= status <= 599:
        raise ScriptError(f"{where}: status must be an HTTP status code")
    headers = raw.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ScriptError(f"{where}: headers must map names to strings")
    body = raw.get("body")
    if body is not None and not isinstance(body, dict):
        raise ScriptError(f"{where}: body must be an object")
    fault_spec = raw.get("faults", {})
    if not isinstance(fault_spec, dict) or set(fault_spec) - _FAULT_KEYS:
        raise ScriptError(f"{where}: faults must be an object with keys from {sorted(_FAULT_KEYS)}")
    if "fragment_sizes" in fault_spec:
        fault_spec = {**fault_spec, "fragment_sizes": tuple(fault_spec["fragment_sizes"])}
    try:
        faults = Faults(**fault_spec)
    except (TypeError, ValueError) as exc:
        raise ScriptError(f"{where}: faults: {exc}") from None
    return Turn(
        events=tuple(events),
        status=status,
        body=body,
        headers=headers,
        connection_error=bool(raw.get("connection_error", False)),
        faults=faults,
    )


class ResponseBuilder:
    """Authors a realistic Responses event stream: sequence numbers, item ids, content
    parts, argument fragments and per-item `.done` events, as the live API sends them."""

    def __init__(self, response_id: str, model: str = "gpt-4.1-mini") -> None:
        self.response_id = response_id
        self.model = model
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def _emit(self, event: dict[str, Any]) -> ResponseBuilder:
        event["sequence_number"] = len(self.events)
        self.events.append(event)
        return self

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": self.response_id,
            "object": "response",
            "model": self.model,
            "status": status,
            "output": list(self.output) if status != "in_progress" else [],
            **extra,
        }

    def created(self, response_id: str | None = None) -> ResponseBuilder:
        response = self._response("in_progress")
        if response_id is not None:
            response["id"] = response_id
        self._emit({"type": "response.created", "response": response})
        return self._emit(
            {"type": "response.in_progress", "response": self._response("in_progress")}
        )

    def text(self, item_id: str, text: str, pieces: int = 4) -> ResponseBuilder:
        index = len(self.output)
        self._emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {
                    "id": item_id,
                    "type": "message",
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                },
            }
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        self._emit(
            {
                "type": "response.content_part.added",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "part": part,
            }
        )
        for piece in _split(text, pieces):
            self._emit(
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                    "logprobs": [],
                }
            )
        self._emit(
            {
                "type": "response.output_text.done",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "text": text,
            }
        )
        done_part = {"type": "output_text", "text": text, "annotations": []}
        self._emit(
            {
                "type": "response.content_part.done",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "part": done_part,
            }
        )
        item = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [done_part],
        }
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def call(
        self,
        item_id: str,
        call_id: str,
        name: str,
        arguments: str | Mapping[str, Any],
        pieces: int = 5,
        *,
        finish: bool = True,
    ) -> ResponseBuilder:
        """A function call item; with `finish=False` the stream stops mid-arguments."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        index = len(self.output)
        self._emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {
                    "id": item_id,
                    "type": "function_call",
                    "status": "in_progress",
                    "call_id": call_id,
                    "name": name,
                    "arguments": "",
                },
            }
        )
        for piece in _split(text, pieces):
            self._emit(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item_id,
                    "output_index": index,
                    "delta": piece,
                }
            )
        if not finish:
            return self
        self._emit(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": index,
                "name": name,
                "arguments": text,
            }
        )
        item = {
            "id": item_id,
            "type": "function_call",
            "status": "completed",
            "call_id": call_id,
            "name": name,
            "arguments": text,
        }
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def reasoning(self, item: dict[str, Any], pieces: int = 3) -> ResponseBuilder:
        """A reasoning item: added (empty), its summary as deltas, then done (whole item)."""
        index = len(self.output)
        self._emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {"id": item["id"], "type": "reasoning", "summary": []},
            }
        )
        for part_index, part in enumerate(item.get("summary", [])):
            for piece in _split(str(part.get("text", "")), pieces):
                self._emit(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "summary_index": part_index,
                        "delta": piece,
                    }
                )
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def output_item(self, item: dict[str, Any]) -> ResponseBuilder:
        """An output item of any other type (e.g. a built-in tool call), added and done at
        once."""
        index = len(self.output)
        self._emit({"type": "response.output_item.added", "output_index": index, "item": item})
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def completed(
        self,
        output: list[dict[str, Any]] | None = None,
        response_id: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> ResponseBuilder:
        response = self._response("completed", usage=usage or _usage(self.output))
        if output is not None:
            response["output"] = output
        if response_id is not None:
            response["id"] = response_id
        return self._emit({"type": "response.completed", "response": response})

    def incomplete(self, reason: str = "max_output_tokens") -> ResponseBuilder:
        response = self._response("incomplete", incomplete_details={"reason": reason})
        return self._emit({"type": "response.incomplete", "response": response})

    def failed(self, code: str, message: str) -> ResponseBuilder:
        response = self._response("failed", error={"code": code, "message": message})
        return self._emit({"type": "response.failed", "response": response})

    def error(self, code: str, message: str, *, nested: bool = False) -> ResponseBuilder:
        if nested:
            body: dict[str, Any] = {
                "error": {"type": "server_error", "code": code, "message": message, "param": None}
            }
        else:
            body = {"code": code, "message": message, "param": None}
        return self._emit({"type": "error", **body})

    def raw(self, event: dict[str, Any]) -> ResponseBuilder:
        return self._emit(dict(event))

    def turn(self, faults: Faults | None = None, **options: Any) -> Turn:
        return Turn(events=tuple(self.events), faults=faults or Faults(), **options)


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(output: list[dict[str, Any]]) -> dict[str, Any]:
    produced = sum(len(json.dumps(item)) for item in output) // 4
    return {
        "input_tokens": 320,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": produced,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 320 + produced,
    }
