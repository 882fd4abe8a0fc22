"""`chat index`, `chat repeated fragment` and `anthropic start input`: Chat call indexes and
fragments, and an Anthropic `tool_use` start with an input."""

from __future__ import annotations

import copy
import random
from typing import Any

from .events import (
    Request,
    _anthropic_deltas,
    _chat_calls,
    _Events,
    _fragment_text,
    _of_type,
    _shape,
)

# --- Chat indexes ------------------------------------------------------------------------------


def _insert_fragment(events: _Events, like: int, after: int, fragment: dict[str, Any]) -> None:
    """A chunk like the one at `like` with `fragment` its only delta, put after `after`."""
    payload = copy.deepcopy(events.payloads[like])
    payload["choices"][0]["delta"] = {"tool_calls": [fragment]}
    payload["choices"][0]["finish_reason"] = None
    events.inserted.setdefault(after, []).append(payload)


@_shape("chat")
def chat_index(rng: random.Random, events: _Events, request: Request) -> tuple[Request, str] | None:
    calls = _chat_calls(events)
    if not calls:
        return None
    indexed = sorted(key for key in calls if isinstance(key, int))
    how = rng.choice(["null", "missing", "new id", "gap", "reversed", "negative"])
    key = rng.choice(list(calls))
    fragments = calls[key]
    if how == "null":
        for index, fragment in fragments[rng.choice([0, len(fragments) - 1]) :]:
            fragment["index"] = None
            events.changed.add(index)
    elif how == "missing":
        index, fragment = rng.choice(fragments)
        fragment.pop("index", None)
        events.changed.add(index)
    elif how == "new id":
        index, fragment = fragments[-1]
        name = _fragment_text(fragments[0][1], "name") or "lockgate_tool"
        arguments = rng.choice(['{"path": "/etc/passwd"}', "{}", '"x": 1}'])
        new = {
            "index": key,
            "id": "call_lockgate_new",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        _insert_fragment(events, index, index, new)
    else:
        if not indexed:
            return None
        if how == "reversed" and len(indexed) < 2:
            return None
        mapping = {
            "gap": {old: 2 * old + 1 for old in indexed},
            "reversed": dict(zip(indexed, reversed(indexed), strict=True)),
            "negative": {old: -1 - old for old in indexed},
        }[how]
        for old, new_index in mapping.items():
            for index, fragment in calls[old]:
                fragment["index"] = new_index
                events.changed.add(index)
    return request, how


@_shape("chat")
def chat_repeated_fragment(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    """A call's first fragment (its id and name) sent again, at once or later: the gate
    reads an id or name that is set again to the same value as no change; openai-python's
    stream state concatenates them (`accumulate_delta`)."""
    calls = [fragments for fragments in _chat_calls(events).values() if fragments]
    if not calls:
        return None
    fragments = rng.choice(calls)
    index, first = fragments[0]
    how = rng.choice(["id and name", "name", "id"])
    repeated = copy.deepcopy(first)
    function = repeated.get("function")
    if how == "name":
        repeated.pop("id", None)
    if how == "id" and isinstance(function, dict):
        function.pop("name", None)
    if isinstance(function, dict):
        function["arguments"] = ""
    _insert_fragment(events, index, fragments[rng.randrange(len(fragments))][0], repeated)
    return request, how


# --- Anthropic ---------------------------------------------------------------------------------


@_shape("anthropic")
def anthropic_start_input(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    starts = [
        (index, payload)
        for index, payload in _of_type(events, "content_block_start")
        if isinstance(payload.get("content_block"), dict)
        and payload["content_block"].get("type") == "tool_use"
    ]
    if not starts:
        return None
    index, payload = rng.choice(starts)
    block = payload["content_block"]
    block["input"] = rng.choice([{"path": "/etc/passwd"}, {"command": "rm -rf ~"}, {"lockgate": 1}])
    events.changed.add(index)
    how = "deltas kept"
    if rng.random() < 0.5:  # its deltas dropped: the start's input is all there is
        how = "deltas dropped"
        for other, _ in _anthropic_deltas(events).get(payload.get("index"), []):
            events.drop(other)
    return request, how
