"""The naive clients: every tool call a careless agent could act on in what a reader read,
and the audit of what they saw against what the gate released."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockgate.conversation import ToolCall

from .base import Chunks, ReadEvent, _same_json
from .compare import disagreements, payloads, read_all

# --- the naive clients ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeenCall:
    """A tool call a naive client could act on: its id, name and arguments (None: not
    known there, which matches anything), and where it was seen."""

    id: str | None
    name: str | None
    arguments: str | None
    where: str


# Responses items that ask the client to act (a careless agent runs them all; lockgate's
# gate releases only function calls).
_CLIENT_ITEMS = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "computer_call",
        "apply_patch_call",
    }
)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _arguments_of(item: Mapping[str, Any]) -> str | None:
    if item.get("type") == "function_call":
        return _text(item.get("arguments"))
    for key in ("input", "action", "arguments", "operation"):
        if key in item:
            value = item[key]
            return value if isinstance(value, str) else _same_json(value)
    return None


def _responses_calls(events: Sequence[tuple[str | None, dict[str, Any]]]) -> list[SeenCall]:
    """Every client-side item in `output_item.added`/`.done`, every `.arguments.done`, every
    response snapshot's `output` (created, in progress, completed, …, and a whole response
    object), and each started call's arguments assembled from its deltas."""
    seen: list[SeenCall] = []
    started: dict[str, list[Any]] = {}  # item id → [call id, name, arguments so far]
    for _, payload in events:
        kind = payload.get("type")
        item = payload.get("item")
        if isinstance(item, dict) and item.get("type") in _CLIENT_ITEMS:
            key = _text(item.get("id")) or f"#{payload.get('output_index')}"
            call = [_text(item.get("call_id")), _text(item.get("name")), _arguments_of(item)]
            if kind == "response.output_item.done":
                seen.append(SeenCall(call[0], call[1], call[2], "output_item.done"))
            else:
                seen.append(SeenCall(call[0], call[1], None, f"{kind}"))
                started[key] = [call[0], call[1], call[2] or ""]
        if kind == "response.function_call_arguments.delta":
            key = _text(payload.get("item_id")) or ""
            entry = started.setdefault(key, [None, None, ""])
            entry[2] = (entry[2] or "") + (_text(payload.get("delta")) or "")
        elif kind == "response.function_call_arguments.done":
            key = _text(payload.get("item_id")) or ""
            entry = started.get(key, [None, None, None])
            name = _text(payload.get("name")) or entry[1]
            seen.append(SeenCall(entry[0], name, _text(payload.get("arguments")), str(kind)))
        snapshots = [payload.get("response"), payload if "output" in payload else None]
        for snapshot in snapshots:
            if not isinstance(snapshot, dict) or not isinstance(snapshot.get("output"), list):
                continue
            for entry_item in snapshot["output"]:
                if isinstance(entry_item, dict) and entry_item.get("type") in _CLIENT_ITEMS:
                    seen.append(
                        SeenCall(
                            _text(entry_item.get("call_id")),
                            _text(entry_item.get("name")),
                            _arguments_of(entry_item),
                            f"{kind or 'response'} snapshot",
                        )
                    )
    seen.extend(SeenCall(c[0], c[1], c[2], "assembled") for c in started.values())
    return seen


def _chat_calls(events: Sequence[tuple[str | None, dict[str, Any]]]) -> list[SeenCall]:
    """Every `delta.tool_calls` fragment (and legacy `delta.function_call`) assembled per
    (choice, index): the first id and name, the arguments concatenated; and the
    `message.tool_calls` of a whole answer (a choice without `delta`: the `message` some
    servers repeat in stream chunks, one fragment each, is what no client reads as calls)."""
    seen: list[SeenCall] = []
    calls: dict[tuple[object, object], list[str | None]] = {}
    for _, payload in events:
        choices = payload.get("choices")
        if not isinstance(choices, list):
            continue
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                continue
            number = choice.get("index", position)
            message = choice.get("message")
            whole = "delta" not in choice  # a chunk's `message` (some servers add one) is not read
            if whole and isinstance(message, dict) and isinstance(message.get("tool_calls"), list):
                for call in message["tool_calls"]:
                    if isinstance(call, dict) and isinstance(call.get("function"), dict):
                        function = call["function"]
                        seen.append(
                            SeenCall(
                                _text(call.get("id")),
                                _text(function.get("name")),
                                _text(function.get("arguments")),
                                "message.tool_calls",
                            )
                        )
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            fragments = delta.get("tool_calls")
            legacy = delta.get("function_call")
            if isinstance(legacy, dict):
                fragments = [{"index": "legacy", "function": legacy}]
            if not isinstance(fragments, list):
                continue
            for place, fragment in enumerate(fragments):
                if not isinstance(fragment, dict):
                    continue
                key = (number, fragment.get("index", place))
                entry = calls.setdefault(key, [None, None, ""])
                entry[0] = entry[0] or _text(fragment.get("id"))
                function = fragment.get("function")
                if isinstance(function, dict):
                    entry[1] = entry[1] or _text(function.get("name"))
                    entry[2] = (entry[2] or "") + (_text(function.get("arguments")) or "")
    seen.extend(SeenCall(c[0], c[1], c[2], "delta.tool_calls") for c in calls.values())
    return seen


def _anthropic_calls(events: Sequence[tuple[str | None, dict[str, Any]]]) -> list[SeenCall]:
    """Every `tool_use` block: in `content_block_start` (its arguments the concatenated
    `input_json_delta`s of its index, or its `input` when none came), in the content of
    `message_start`'s message and of a whole message."""
    seen: list[SeenCall] = []
    blocks: dict[object, list[Any]] = {}  # index → [id, name, input, partial json or None]
    for _, payload in events:
        kind = payload.get("type")
        message = payload.get("message") if kind == "message_start" else payload
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    where = "message_start content" if kind == "message_start" else "message"
                    seen.append(
                        SeenCall(
                            _text(block.get("id")),
                            _text(block.get("name")),
                            _same_json(block.get("input", {})),
                            where,
                        )
                    )
        if kind == "content_block_start":
            block = payload.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                blocks[payload.get("index")] = [
                    _text(block.get("id")),
                    _text(block.get("name")),
                    block.get("input", {}),
                    None,
                ]
        elif kind == "content_block_delta":
            delta = payload.get("delta")
            entry = blocks.get(payload.get("index"))
            if entry is not None and isinstance(delta, dict):
                partial = _text(delta.get("partial_json"))
                if partial is not None:
                    entry[3] = (entry[3] or "") + partial
        elif kind == "content_block_stop":
            entry = blocks.pop(payload.get("index"), None)
            if entry is not None:
                seen.append(_block_call(entry, "content_block_stop"))
    seen.extend(_block_call(entry, "assembled") for entry in blocks.values())
    return seen


def _block_call(entry: list[Any], where: str) -> SeenCall:
    arguments = entry[3] if entry[3] is not None else _same_json(entry[2])
    return SeenCall(entry[0], entry[1], arguments, where)


# The spellings of a Gemini part's call that a client reads (google-genai's models take the
# snake_case field names too).
_GEMINI_CALLS = ("functionCall", "function_call")


def _gemini_calls(events: Sequence[tuple[str | None, dict[str, Any]]]) -> list[SeenCall]:
    """Every call part of every candidate (whatever its index), in either spelling, in
    every chunk: Gemini sends each call whole (`args` an object, absent: `{}`)."""
    seen: list[SeenCall] = []
    for _, payload in events:
        candidates = payload.get("candidates")
        for candidate in candidates if isinstance(candidates, list) else ():
            content = candidate.get("content") if isinstance(candidate, dict) else None
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in parts if isinstance(parts, list) else ():
                for spelling in _GEMINI_CALLS:
                    call = part.get(spelling) if isinstance(part, dict) else None
                    if isinstance(call, dict):
                        arguments = call.get("args")
                        seen.append(
                            SeenCall(
                                _text(call.get("id")),
                                _text(call.get("name")),
                                _same_json({} if arguments is None else arguments),
                                spelling,
                            )
                        )
    return seen


_NAIVE: dict[str, Callable[[Sequence[tuple[str | None, dict[str, Any]]]], list[SeenCall]]] = {
    "responses": _responses_calls,
    "chat": _chat_calls,
    "anthropic": _anthropic_calls,
    "gemini": _gemini_calls,
}


def calls_seen(protocol: str, events: Sequence[ReadEvent]) -> list[SeenCall]:
    """The tool calls the protocol's naive client sees in what a reader read: it reads every
    event whose data is a JSON object (for Gemini, also each object of a JSON array),
    whatever its name (or none), and reports every call it could act on, complete or
    not."""
    return _NAIVE[protocol](payloads(events, arrays=protocol == "gemini"))


def _json_value(text: str) -> object:
    if text == "":
        return {}  # no argument text: an empty object (as every protocol reads it)
    try:
        return json.loads(text)
    except ValueError:
        return ("not JSON", text)


def _matches(seen: SeenCall, call: ToolCall) -> bool:
    if seen.id and seen.id != call.id:
        return False
    if seen.name is not None and seen.name != call.name:
        return False
    if seen.arguments is None:
        return True
    released = call.arguments_json if call.arguments_json else _same_json(call.arguments)
    return _json_value(seen.arguments) == _json_value(released)


def unreleased(seen: Sequence[SeenCall], released: Sequence[ToolCall] | None) -> list[SeenCall]:
    """The calls seen that the gate did not release (`released` None: it refused the
    response, so every call seen is one): a seen call matches a released one when its id
    (if it has one), its name (if known) and its arguments as JSON (if known) are equal."""
    if released is None:
        return list(seen)
    return [call for call in seen if not any(_matches(call, kept) for kept in released)]


@dataclass(frozen=True, slots=True)
class Audit:
    """One output read by every reader of its protocol: what each read, how they disagree
    with lockgate's reading, and per reader the calls its naive client saw that the gate
    did not release."""

    reads: Mapping[str, Sequence[ReadEvent]]
    disagreements: tuple[str, ...]
    unreleased: Mapping[str, tuple[SeenCall, ...]]

    @property
    def leaked(self) -> dict[str, tuple[SeenCall, ...]]:
        """The readers whose naive client saw a call the gate did not release."""
        return {name: calls for name, calls in self.unreleased.items() if calls}


def audit(protocol: str, chunks: Chunks, released: Sequence[ToolCall] | None) -> Audit:
    """Read `chunks` (an output, in reads) with every reader of `protocol`; `released`: the
    calls the gate released (None: it refused the response)."""
    reads = read_all(protocol, chunks)
    return Audit(
        reads,
        tuple(disagreements(protocol, reads)),
        {
            name: tuple(unreleased(calls_seen(protocol, events), released))
            for name, events in reads.items()
        },
    )
