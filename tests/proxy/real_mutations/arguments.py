"""`json in arguments`: one call's whole argument text rewritten with JSON a strict reader
refuses and a lenient one reads (NaN, duplicate keys, big numbers, lone surrogates)."""

from __future__ import annotations

import json
import random
from typing import Any

from .events import (
    Mutated,
    Request,
    Shape,
    _anthropic_deltas,
    _argument_text,
    _chat_calls,
    _Events,
    _fragment_text,
    _of_type,
    _shape,
    _spread,
)

# --- JSON in the arguments -------------------------------------------------------------------


@_shape("chat")
def _chat_arguments(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    calls = [fragments for fragments in _chat_calls(events).values() if fragments]
    if not calls:
        return None
    fragments = rng.choice(calls)
    text = "".join(_fragment_text(fragment) for _, fragment in fragments)
    functions = [(index, fragment.setdefault("function", {})) for index, fragment in fragments]
    mutated = _spread(
        rng, events, text, [(i, f) for i, f in functions if isinstance(f, dict)], "arguments"
    )
    if mutated is None:
        return None
    events.changed.update(index for index, _ in fragments)
    return request, mutated[1]


@_shape("anthropic")
def _anthropic_arguments(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    blocks = _anthropic_deltas(events)
    if not blocks:
        return None
    deltas = rng.choice(list(blocks.values()))
    text = "".join(str(delta.get("partial_json", "")) for _, delta in deltas)
    mutated = _spread(rng, events, text, deltas, "partial_json")
    return None if mutated is None else (request, mutated[1])


@_shape("responses")
def _responses_arguments(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    deltas: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for index, payload in _of_type(events, "response.function_call_arguments.delta"):
        deltas.setdefault(str(payload.get("item_id")), []).append((index, payload))
    if not deltas:
        return None
    item_id = rng.choice(sorted(deltas))
    text = "".join(str(payload.get("delta", "")) for _, payload in deltas[item_id])
    mutated = _spread(rng, events, text, deltas[item_id], "delta")
    if mutated is None:
        return None
    new = mutated[0]
    for index, payload in events.items():
        kind = payload.get("type")
        if kind == "response.function_call_arguments.done" and payload.get("item_id") == item_id:
            payload["arguments"] = new
            events.changed.add(index)
        item = payload.get("item")
        if (
            kind == "response.output_item.done"
            and isinstance(item, dict)
            and item.get("id") == item_id
        ):
            item["arguments"] = new
            events.changed.add(index)
        response = payload.get("response")
        output = response.get("output") if isinstance(response, dict) else None
        for entry in output if isinstance(output, list) else []:
            if isinstance(entry, dict) and entry.get("id") == item_id and "arguments" in entry:
                entry["arguments"] = new
                events.changed.add(index)
    return request, mutated[1]


@_shape("gemini")
def _gemini_arguments(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    found = []
    for index, payload in events.items():
        for part in _gemini_parts(payload):
            call = part.get("functionCall")
            if isinstance(call, dict) and isinstance(call.get("args", {}), dict):
                found.append((index, call))
    if not found:
        return None
    index, call = rng.choice(found)
    mutated = _argument_text(rng, json.dumps(call.get("args", {})), events)
    if mutated is None:
        return None
    call["args"] = events.token(mutated[0])
    events.changed.add(index)
    return request, mutated[1]


def _gemini_parts(payload: dict[str, Any]) -> list[dict[str, Any]]:
    candidates = payload.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return []
    content = candidates[0].get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


_ARGUMENTS: dict[str, Shape] = {
    "chat": _chat_arguments,
    "anthropic": _anthropic_arguments,
    "responses": _responses_arguments,
    "gemini": _gemini_arguments,
}


def json_in_arguments(
    rng: random.Random, protocol: str, body: bytes, request: Request
) -> Mutated | None:
    shape = _ARGUMENTS.get(protocol)
    return None if shape is None else shape(rng, protocol, body, request)
