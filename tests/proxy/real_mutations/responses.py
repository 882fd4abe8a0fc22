"""The Responses mutations: a call without its `.done`, `response.completed` with `output:
null`, and custom, namespaced and built-in items added."""

from __future__ import annotations

import copy
import functools
import json
import random
import re
from typing import Any

from .events import Mutated, Request, Shape, _Events, _of_type, _shape

# --- Responses ---------------------------------------------------------------------------------


def _calls_done(events: _Events) -> list[tuple[int, dict[str, Any]]]:
    return _of_type(events, "response.output_item.done", "function_call")


@_shape("responses")
def responses_no_done(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    done = _calls_done(events)
    if not done:
        return None
    index, payload = rng.choice(done)
    events.drop(index)
    how = "output_item.done dropped"
    if rng.random() < 0.5:
        how = "output_item.done and arguments.done dropped"
        item_id = payload["item"].get("id")
        for other, event in _of_type(events, "response.function_call_arguments.done"):
            if event.get("item_id") == item_id:
                events.drop(other)
    return request, how


def _completed(events: _Events) -> list[tuple[int, dict[str, Any]]]:
    return [
        (index, payload)
        for index, payload in _of_type(events, "response.completed")
        if isinstance(payload.get("response"), dict)
    ]


@_shape("responses")
def responses_output_null(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    """`response.completed` without its output (null: the SDK's final response is then the
    `.done` items), and a call's `.done` item dropped, or stating other arguments, or one
    more `.done` item for a call never added."""
    completed = _completed(events)
    done = _calls_done(events)
    if not completed or not done:
        return None
    at, terminal = completed[-1]
    terminal["response"]["output"] = None
    events.changed.add(at)
    how = rng.choice(["only", "drop done", "other arguments", "extra done"])
    index, payload = rng.choice(done)
    if how == "drop done":
        events.drop(index)
    elif how == "other arguments":
        payload["item"]["arguments"] = json.dumps({"path": "/etc/passwd"})
        events.changed.add(index)
    elif how == "extra done":
        extra = copy.deepcopy(payload)
        extra["output_index"] = 90
        extra["item"].update(id="fc_lockgate_extra", call_id="call_lockgate_extra")
        events.inserted.setdefault(index, []).append(extra)
    return request, how


_FUNCTION_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}


def _responses_added(*variants: str) -> Shape:
    """A shape that adds a call (`_responses_item`), one of `variants` drawn (before the
    protocol is looked at)."""

    def shape(rng: random.Random, protocol: str, body: bytes, request: Request) -> Mutated | None:
        how = rng.choice(list(variants))
        added = _shape("responses")(functools.partial(_responses_item, how))
        return added(rng, protocol, body, request)

    return shape


def _streamed(kind: str, item_id: str, place: int, field: str, text: str) -> list[dict[str, Any]]:
    """The `.delta` and `.done` events of an item's `field` (`kind`: their type's stem)."""
    return [
        {"type": f"{kind}.delta", "item_id": item_id, "output_index": place, "delta": text},
        {"type": f"{kind}.done", "item_id": item_id, "output_index": place, field: text},
    ]


def _responses_item(
    how: str, rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    completed = [
        (index, payload)
        for index, payload in _completed(events)
        if isinstance(payload["response"].get("output"), list)
    ]
    if not completed:
        return None
    at, terminal = completed[-1]
    output: list[Any] = terminal["response"]["output"]
    place = len(output)
    tools = list(request.get("tools") or [])
    item: dict[str, Any]
    deltas: list[dict[str, Any]] = []
    if how.startswith("custom"):
        tools.append(
            {
                "type": "custom",
                "name": "lockgate_custom",
                "description": "lower-case letters",
                "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z]+"},
            }
        )
        text = "abc" if how == "custom met" else rng.choice(["rm -rf ~", "ABC", ""])
        item = {
            "type": "custom_tool_call",
            "id": "ctc_lockgate",
            "call_id": "call_lockgate_custom",
            "name": "lockgate_custom",
            "input": text,
            "status": "completed",
        }
        deltas = _streamed("response.custom_tool_call_input", "ctc_lockgate", place, "input", text)
    elif how.startswith("namespace"):
        function = {"type": "function", "name": "lockgate_read", "parameters": _FUNCTION_SCHEMA}
        tools.append({"type": "namespace", "name": "lockgate_ns", "tools": [function]})
        arguments = json.dumps({"path": "a.txt"})
        item = {
            "type": "function_call",
            "id": "fc_lockgate",
            "call_id": "call_lockgate_ns",
            "name": "lockgate_read",
            "namespace": "lockgate_ns" if how == "namespace" else "other_ns",
            "arguments": arguments,
            "status": "completed",
        }
        deltas = _streamed(
            "response.function_call_arguments", "fc_lockgate", place, "arguments", arguments
        )
    else:
        if how == "builtin":
            tools.append({"type": "local_shell"})
        item = {
            "type": "local_shell_call",
            "id": "lsh_lockgate",
            "call_id": "call_lockgate_shell",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        }
    added = {**copy.deepcopy(item), "status": "in_progress"}
    for field in ("arguments", "input"):
        if field in added:
            added[field] = ""
    new = [
        {"type": "response.output_item.added", "output_index": place, "item": added},
        *deltas,
        {"type": "response.output_item.done", "output_index": place, "item": item},
    ]
    before = max((index for index in events.payloads if index < at), default=None)
    if before is None:
        return None
    events.inserted.setdefault(before, []).extend(new)
    output.append(copy.deepcopy(item))
    events.changed.add(at)
    return {**request, "tools": tools}, how


def custom_grammar_violation(request: Request, name: str, text: str) -> bool:
    """Whether `text` is outside the regex grammar `request` declares for the custom tool
    `name` (False where it declares none this checks: a lark grammar, or no format)."""
    tools = request.get("tools")
    for declared in tools if isinstance(tools, list) else []:
        if not isinstance(declared, dict) or declared.get("type") != "custom":
            continue
        if declared.get("name") != name:
            continue
        form = declared.get("format")
        if (
            isinstance(form, dict)
            and form.get("type") == "grammar"
            and form.get("syntax") == "regex"
        ):
            definition = form.get("definition")
            if isinstance(definition, str):
                return re.fullmatch(definition, text) is None
    return False
