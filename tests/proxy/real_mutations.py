"""Mutations of a call's shape (not of the framing, which `differential.MUTATIONS` covers):
what the real readers were found to read otherwise than the gate. Both real-reader
differentials run them: the Python one (`real_differential.py`) and the JS one
(`interop/readers/run.py`, which labels a case `name: variant` and classes its findings so).

Each takes (random, protocol, body, request) and returns the mutated (body, request), or
None where it does not apply; some add a tool to the request (a custom tool with a grammar,
a namespace, a client-executed built-in tool) so that the call they add can be accepted.

- `json in arguments`: one call's whole argument text rewritten (Chat, Responses,
  Anthropic: in its first fragment, the others emptied and, for Responses, every later
  statement of it too; Gemini: the `args` object of the event itself) with NaN or
  Infinity, a duplicate key (the decoy first or last), an integer beyond 2⁵³ or 1e400, or a
  lone surrogate (an escape in the argument text, or a raw one in the event's string).
- `chat index`: a Chat call's `index` null, missing on one fragment beside indexed calls, a
  new id at an index in use, indexes with gaps, reversed or negative.
- `chat repeated fragment`: a Chat call's first fragment (id and name, or one of them) sent
  again, identical.
- `anthropic start input`: a `tool_use` start with a non-empty `input`, its deltas kept or
  dropped.
- `responses no done`: a function call's `output_item.done` (and its `arguments.done`)
  dropped.
- `responses output null`: `response.completed` with `output: null` (the SDK's final
  response is then the `.done` items), a `.done` dropped, altered, or one more.
- `responses custom tool`, `responses namespace`, `responses built-in item`: a custom tool
  call (its grammar met or not), a call in a namespace (the declared one or another), a
  client-executed `local_shell_call` (its tool declared or not), added before
  `response.completed` and listed in its output.
- `gemini parts`: a `functionCall` part added to the finishing chunk, beside text in one
  part, in a thought part, without a name, with `args` null, or in a second candidate.

`KNOWN` names the mutations whose findings are known and being fixed elsewhere (the test
lists them apart; they must disappear once the fixes are merged).
"""

from __future__ import annotations

import copy
import functools
import json
import random
import re
from collections.abc import Callable
from typing import Any

from .differential import _frames

__all__ = ["KNOWN", "SHAPES", "Shape", "custom_grammar_violation"]

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


# --- JSON in the arguments -------------------------------------------------------------------


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


def _anthropic_deltas(events: _Events) -> dict[object, list[tuple[int, dict[str, Any]]]]:
    """The `input_json_delta`s by block index: (frame, the delta) in order."""
    blocks: dict[object, list[tuple[int, dict[str, Any]]]] = {}
    for index, payload in _of_type(events, "content_block_delta"):
        delta = payload.get("delta")
        if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
            blocks.setdefault(payload.get("index"), []).append((index, delta))
    return blocks


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


# --- Gemini ------------------------------------------------------------------------------------

_GEMINI_CALL: dict[str, Any] = {"name": "lockgate_read", "args": {"path": "a.txt"}}


@_shape("gemini")
def gemini_parts(
    rng: random.Random, events: _Events, request: Request
) -> tuple[Request, str] | None:
    finishing = [
        (index, payload)
        for index, payload in events.items()
        if isinstance(payload.get("candidates"), list)
        and payload["candidates"]
        and isinstance(payload["candidates"][0], dict)
        and payload["candidates"][0].get("finishReason") == "STOP"
    ]
    if not finishing:
        return None
    index, payload = finishing[-1]
    tools = list(request.get("tools") or [])
    declaration = {
        "name": "lockgate_read",
        "description": "read a file",
        "parameters": {
            "type": "OBJECT",
            "properties": {"path": {"type": "STRING"}},
            "required": ["path"],
        },
    }
    tools.append({"functionDeclarations": [declaration]})
    candidate = payload["candidates"][0]
    content = candidate.setdefault("content", {"role": "model", "parts": []})
    if not isinstance(content, dict):
        return None
    parts = content.setdefault("parts", [])
    if not isinstance(parts, list):
        return None
    how = rng.choice(
        ["added", "beside text", "thought", "no name", "args null", "second candidate"]
    )
    call = copy.deepcopy(_GEMINI_CALL)
    if how == "added":
        parts.append({"functionCall": call})
    elif how == "beside text":
        parts.append({"text": "Reading it.", "functionCall": call})
    elif how == "thought":
        parts.append({"thought": True, "functionCall": call})
    elif how == "no name":
        del call["name"]
        parts.append({"functionCall": call})
    elif how == "args null":
        call["args"] = None
        parts.append({"functionCall": call})
    else:
        payload["candidates"].append(
            {
                "index": 1,
                "content": {"role": "model", "parts": [{"functionCall": call}]},
                "finishReason": "STOP",
            }
        )
    events.changed.add(index)
    return {**request, "tools": tools}, how


SHAPES: dict[str, Shape] = {
    "json in arguments": json_in_arguments,
    "chat index": chat_index,
    "chat repeated fragment": chat_repeated_fragment,
    "anthropic start input": anthropic_start_input,
    "responses no done": responses_no_done,
    "responses output null": responses_output_null,
    "responses custom tool": _responses_added("custom met", "custom unmet"),
    "responses namespace": _responses_added("namespace", "namespace other"),
    "responses built-in item": _responses_added("builtin", "builtin undeclared"),
    "gemini parts": gemini_parts,
}

# The mutations whose findings are known, and the fix each waits for (in progress elsewhere):
# a finding of one of them is listed as known; it must disappear once the fix is merged.
KNOWN: dict[str, str] = {
    "json in arguments": "JSON strictness (jsonlimits.py): NaN, duplicate keys, lone surrogates",
    "chat index": "the Chat decoder's index rules",
    "anthropic start input": "the Anthropic decoder: a tool_use start's input",
    "responses no done": "the Responses decoder: a call without output_item.done",
    "responses custom tool": "custom tools' grammars (gate.py)",
}
