"""What every shape mutation shares: a stream's events to edit in place, argument text to
rewrite, and the decorator that makes a change of the events a `Shape`."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from ..differential import _frames

Request = dict[str, Any]
# The mutated body and request, and which variant of the mutation it was.
Mutated = tuple[bytes, Request, str]
Shape = Callable[[random.Random, str, bytes, Request], Mutated | None]

_SENTINEL = "\u0001lockgate-raw-{}\u0001"


class _Events:
    """A body's frames, those with one JSON object as their data parsed; re-emitted with
    `sse` framing as they came (their `event:` line kept), raw JSON tokens put in place of
    sentinels."""

    def __init__(self, body: bytes) -> None:
        self.frames = _frames(body)
        self.payloads: dict[int, dict[str, Any]] = {}
        self.heads: dict[int, bytes] = {}
        self.raw: dict[str, str] = {}
        self.changed: set[int] = set()
        self.inserted: dict[int, list[dict[str, Any]]] = {}
        for index, frame in enumerate(self.frames):
            head, marker, data = frame.partition(b"data: ")
            if not marker or b"\ndata:" in data.rstrip(b"\r\n"):
                continue
            try:
                value = json.loads(data)
            except ValueError:
                continue
            if isinstance(value, dict):
                self.payloads[index] = value
                self.heads[index] = head

    def token(self, text: str) -> str:
        """A sentinel string that is replaced with `text`, raw, in the output."""
        key = _SENTINEL.format(len(self.raw))
        self.raw[key] = text
        return key

    def items(self) -> list[tuple[int, dict[str, Any]]]:
        return sorted(self.payloads.items())

    def emit(self, index: int, payload: dict[str, Any]) -> bytes:
        head = self.heads.get(index, b"")
        name = payload.get("type")
        if head.startswith(b"event:") and isinstance(name, str):
            head = b"event: " + name.encode() + b"\n"
        text = json.dumps(payload, separators=(",", ":"))
        for key, raw in self.raw.items():
            text = text.replace(json.dumps(key), raw)
        # A lone surrogate put raw stays an escape (UTF-8 has no encoding for it).
        return head + b"data: " + text.encode("utf-8", "backslashreplace") + b"\n\n"

    def body(self) -> bytes:
        out = []
        for index, frame in enumerate(self.frames):
            if index in self.changed:
                payload = self.payloads.get(index)
                if payload is not None:
                    out.append(self.emit(index, payload))
            else:
                out.append(frame)
            for added in self.inserted.get(index, []):
                out.append(self.emit(index, added))
        return b"".join(out)

    def drop(self, index: int) -> None:
        self.payloads.pop(index, None)
        self.changed.add(index)


# --- argument text ---------------------------------------------------------------------------

_DECOYS: dict[type, object] = {str: "/etc/passwd", int: 7, float: 7.5, bool: True}


def _argument_text(rng: random.Random, text: str, events: _Events) -> tuple[str, str] | None:
    """(the mutated argument text, what was done) of an argument text that is a JSON
    object."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    keys = list(value)
    key = rng.choice(keys) if keys else "lockgate_extra"
    old = value.get(key, "x")
    how = rng.choice(
        [
            "nan",
            "infinity",
            "duplicate first",
            "duplicate last",
            "big integer",
            "1e400",
            "surrogate escape",
            "surrogate raw",
        ]
    )

    def raw_at_key(raw: str) -> str:  # `value` with `raw` (JSON text) at `key`
        changed = {**value, key: events.token(raw)}
        return json.dumps(changed, ensure_ascii=False).replace(json.dumps(changed[key]), raw)

    if how in ("nan", "infinity", "big integer", "1e400"):
        raw = {
            "nan": "NaN",
            "infinity": rng.choice(["Infinity", "-Infinity"]),
            "big integer": rng.choice(["9007199254740993", "-18446744073709551617"]),
            "1e400": "1e400",
        }[how]
        return raw_at_key(raw), how
    if how.startswith("duplicate"):
        decoy = _DECOYS.get(type(old), "/etc/passwd")
        if not keys:
            return json.dumps({key: old})[:-1] + f", {json.dumps(key)}: {json.dumps(decoy)}}}", how
        rest = json.dumps(value, ensure_ascii=False)
        pair = f"{json.dumps(key)}: {json.dumps(decoy, ensure_ascii=False)}"
        if how == "duplicate first":
            return "{" + pair + ", " + rest[1:], how
        return rest[:-1] + ", " + pair + "}", how
    string = old if isinstance(old, str) else "x"
    if how == "surrogate escape":
        escape = rng.choice(["\\ud83d", "\\udc00", "\\ud800x"])
        return raw_at_key(json.dumps(string)[:-1] + escape + '"'), how
    changed = {**value, key: string + rng.choice(["\ud83d", "\udc00"])}
    return json.dumps(changed, ensure_ascii=False), how


def _spread(
    rng: random.Random,
    events: _Events,
    text: str,
    pieces: list[tuple[int, dict[str, Any]]],
    field: str,
) -> tuple[str, str] | None:
    """`text`, a call's argument text in `pieces` (each an event's object holding a piece of
    it in `field`), mutated: all of it in the first piece, the others emptied; (the new
    text, what was done)."""
    mutated = _argument_text(rng, text, events)
    if mutated is not None:
        for place, (index, piece) in enumerate(pieces):
            piece[field] = mutated[0] if place == 0 else ""
            events.changed.add(index)
    return mutated


# A shape's change: it edits the events in place and gives the request (changed or not) and
# what was done, or None where it does not apply.
Change = Callable[[random.Random, _Events, Request], tuple[Request, str] | None]


def _shape(wanted: str) -> Callable[[Change], Shape]:
    """A shape of a change to the events of a body of the protocol `wanted` (None for any
    other): the body re-emitted."""

    def wrap(change: Change) -> Shape:
        def shape(
            rng: random.Random, protocol: str, body: bytes, request: Request
        ) -> Mutated | None:
            if protocol != wanted:
                return None
            events = _Events(body)
            done = change(rng, events, request)
            return None if done is None else (events.body(), *done)

        return shape

    return wrap


def _of_type(
    events: _Events, kind: str, item: str | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """The events of type `kind` (whose `item` is of type `item`, where given)."""
    return [
        (index, payload)
        for index, payload in events.items()
        if payload.get("type") == kind
        and (
            item is None
            or (isinstance(payload.get("item"), dict) and payload["item"].get("type") == item)
        )
    ]


def _chat_calls(events: _Events) -> dict[object, list[tuple[int, dict[str, Any]]]]:
    """Choice 0's call fragments by index: (frame, the fragment) in order."""
    calls: dict[object, list[tuple[int, dict[str, Any]]]] = {}
    for index, payload in events.items():
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue
        delta = choices[0].get("delta")
        if not isinstance(delta, dict) or not isinstance(delta.get("tool_calls"), list):
            continue
        for fragment in delta["tool_calls"]:
            if isinstance(fragment, dict):
                calls.setdefault(fragment.get("index"), []).append((index, fragment))
    return calls


def _fragment_text(fragment: dict[str, Any], field: str = "arguments") -> str:
    function = fragment.get("function")
    if isinstance(function, dict) and isinstance(function.get(field), str):
        return str(function[field])
    return ""


def _anthropic_deltas(events: _Events) -> dict[object, list[tuple[int, dict[str, Any]]]]:
    """The `input_json_delta`s by block index: (frame, the delta) in order."""
    blocks: dict[object, list[tuple[int, dict[str, Any]]]] = {}
    for index, payload in _of_type(events, "content_block_delta"):
        delta = payload.get("delta")
        if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
            blocks.setdefault(payload.get("index"), []).append((index, delta))
    return blocks
