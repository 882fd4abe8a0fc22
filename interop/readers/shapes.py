"""The shapes the JS differential adds to `tests.proxy.differential.MUTATIONS`: odd values
inside a call's arguments, and the call shapes each protocol's readers assemble differently.

A shape takes (random, protocol, request, body) and gives (request, body) — most leave the
request alone; `responses custom tool` declares the custom tool it calls — or None where it
does not apply (no call of that protocol in the body). Every rewritten event is one compact
`data:` line (its `event:` line kept).

- Inside a call's arguments (every protocol; the whole argument text moved into the call's
  first fragment, the others emptied, every statement of it kept equal): `NaN`, `Infinity`,
  `-Infinity`, a big integer, a lone surrogate (`\\ud800` escaped), a duplicate key (first
  or last), each replacing a leaf of the arguments or added as a key `lg_extra`.
- Chat: `index: null` on a fragment, a fragment without `index` beside indexed ones, a new
  `id` at an index in use, gapped or reversed indexes.
- Anthropic: a `tool_use` start whose `input` is not empty (a key of its own, or the whole
  arguments) before its deltas.
- Responses: a custom tool call (the tool declared with a regex grammar; the input in it or
  not), a `namespace` on a function call (its own name, or an undeclared one), a function
  call without its `output_item.done`.
- Gemini: a call part that also has text, a call part marked `thought`, `args: null`, the
  call again in a second candidate with other arguments.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

from lockgate.sse import SSEFramer

__all__ = ["CUSTOM_GRAMMAR", "CUSTOM_TOOL", "SHAPES", "Shape"]

Shape = Callable[[random.Random, str, dict[str, Any], bytes], tuple[dict[str, Any], bytes] | None]

CUSTOM_TOOL = "lg_patch"
CUSTOM_GRAMMAR = "[a-z]+( [a-z]+)*"  # a regex grammar: lower-case words
_SENTINEL = "\x00lockgate-sentinel\x00"
_SENTINEL_JSON = json.dumps(_SENTINEL)


class _Frame:
    """One raw frame: its lines before `data:`, its JSON payload (None: not a JSON object
    on one data line), or its raw bytes when left alone."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.head, marker, data = raw.partition(b"data: ")
        self.payload: dict[str, Any] | None = None
        self.tokens: dict[str, str] = {}  # sentinel replacements, as raw JSON text
        if marker:
            try:
                value = json.loads(data)
            except ValueError:
                value = None
            if isinstance(value, dict):
                self.payload = value
        self.changed = False

    def bytes(self) -> bytes:
        if not self.changed or self.payload is None:
            return self.raw
        head = self.head
        name = self.payload.get("type")
        if head.startswith(b"event:") and isinstance(name, str):
            head = b"event: " + name.encode() + b"\n"
        text = json.dumps(self.payload, separators=(",", ":"))
        for sentinel, token in self.tokens.items():
            text = text.replace(json.dumps(sentinel), token)
        return head + b"data: " + text.encode("utf-8", "surrogatepass") + b"\n\n"


def _frames(body: bytes) -> list[_Frame]:
    framer = SSEFramer(1 << 30)
    raws = [frame.raw for frame in framer.feed(body)]
    raws.extend(frame.raw for frame in framer.finish())
    return [_Frame(raw) for raw in [*raws, framer.tail]]


def _join(frames: list[_Frame]) -> bytes:
    return b"".join(frame.bytes() for frame in frames)


def _dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _at(value: object, key: str) -> Any:
    """`value[key]` where `value` is an object holding it, else None."""
    return value.get(key) if isinstance(value, dict) else None


# --- odd values inside a call's arguments ----------------------------------------------------


def _leaves(value: object, kind: type, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, kind, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, kind, (*path, i))]
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return [path]
    if kind is str and isinstance(value, str):
        return [path]
    return []


def _with_token(rng: random.Random, value: object, kind: type, token: str) -> str | None:
    """The arguments' JSON text with one leaf of `kind` (or a new key `lg_extra`) written
    as `token` (raw JSON text)."""
    if not isinstance(value, dict):
        return None
    copy: Any = json.loads(json.dumps(value))
    paths = _leaves(copy, kind)
    if paths and rng.random() < 0.7:
        *parents, last = rng.choice(paths)
        target = copy
        for step in parents:
            target = target[step]
        target[last] = _SENTINEL
    else:
        copy["lg_extra"] = _SENTINEL
    return json.dumps(copy, ensure_ascii=False).replace(_SENTINEL_JSON, token)


def _nan(rng: random.Random, value: object) -> str | None:
    return _with_token(rng, value, float, rng.choice(["NaN", "Infinity", "-Infinity"]))


def _big_integer(rng: random.Random, value: object) -> str | None:
    token = rng.choice(
        ["9007199254740993", "123456789012345678901234567890", "-9223372036854775809"]
    )
    return _with_token(rng, value, float, token)


def _lone_surrogate(rng: random.Random, value: object) -> str | None:
    token = rng.choice(['"\\ud800"', '"a\\udfff"', '"\\udc00\\ud800x"'])
    return _with_token(rng, value, str, token)


def _duplicate_key(rng: random.Random, value: object) -> str | None:
    if not isinstance(value, dict) or not value:
        return None
    key = rng.choice(sorted(value))
    original = value[key]
    other: object = (
        original + "-lg"
        if isinstance(original, str)
        else (original + 1 if isinstance(original, int | float) else "lg-other")
    )
    inner = json.dumps(value, ensure_ascii=False)[1:-1]
    duplicate = f"{json.dumps(key)}: {json.dumps(other, ensure_ascii=False)}"
    if rng.random() < 0.5:
        return "{" + duplicate + ", " + inner + "}"
    return "{" + inner + ", " + duplicate + "}"


def _parse(text: str) -> object:
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return None


def _chat_rewrite(frames: list[_Frame], transform: Callable[[object], str | None]) -> bool:
    fragments: list[dict[str, Any]] = []
    owners: list[_Frame] = []
    wanted: int | None = None
    for frame in frames:
        payload = frame.payload
        for choice in _list(_at(payload, "choices")):
            for entry in _list(_at(_at(choice, "delta"), "tool_calls")):
                function = _dict(_at(entry, "function"))
                if function is None or not isinstance(function.get("arguments"), str):
                    continue
                index = entry.get("index")
                if wanted is None:
                    wanted = index if isinstance(index, int) else -1
                if index == wanted or (wanted == -1 and not fragments):
                    fragments.append(function)
                    owners.append(frame)
    if not fragments:
        return False
    new = transform(_parse("".join(f["arguments"] for f in fragments)))
    if new is None:
        return False
    for place, function in enumerate(fragments):
        function["arguments"] = new if place == 0 else ""
    for frame in owners:
        frame.changed = True
    return True


def _responses_rewrite(frames: list[_Frame], transform: Callable[[object], str | None]) -> bool:
    item_id = None
    for frame in frames:
        payload = frame.payload or {}
        item = _dict(payload.get("item"))
        added = payload.get("type") == "response.output_item.added"
        if added and item is not None and item.get("type") == "function_call":
            item_id = item.get("id")
            break
    if item_id is None:
        return False
    deltas = [
        f
        for f in frames
        if f.payload
        and f.payload.get("type") == "response.function_call_arguments.delta"
        and f.payload.get("item_id") == item_id
    ]
    whole = "".join(str(f.payload.get("delta", "")) for f in deltas if f.payload)
    new = transform(_parse(whole))
    if new is None:
        return False
    for place, frame in enumerate(deltas):
        assert frame.payload is not None
        frame.payload["delta"] = new if place == 0 else ""
        frame.changed = True
    for frame in frames:
        event = frame.payload
        if event is None:
            continue
        kind = event.get("type")
        if kind == "response.function_call_arguments.done" and event.get("item_id") == item_id:
            event["arguments"] = new
            frame.changed = True
        if kind == "response.output_item.added":
            continue  # its arguments are the start the deltas add to
        items = [_dict(event.get("item"))]
        items += [_dict(i) for i in _list(_at(event.get("response"), "output"))]
        for item in items:
            if item is not None and item.get("id") == item_id and "arguments" in item:
                item["arguments"] = new
                frame.changed = True
    return True


def _anthropic_rewrite(frames: list[_Frame], transform: Callable[[object], str | None]) -> bool:
    index = None
    for frame in frames:
        payload = frame.payload or {}
        block = _dict(payload.get("content_block"))
        if (
            payload.get("type") == "content_block_start"
            and block
            and block.get("type") == "tool_use"
        ):
            index = payload.get("index")
            break
    if index is None:
        return False
    deltas = []
    for frame in frames:
        payload = frame.payload or {}
        delta = _dict(payload.get("delta"))
        right = payload.get("type") == "content_block_delta" and payload.get("index") == index
        if right and delta is not None and delta.get("type") == "input_json_delta":
            deltas.append((frame, delta))
    if not deltas:
        return False
    new = transform(_parse("".join(str(d.get("partial_json", "")) for _, d in deltas)))
    if new is None:
        return False
    for place, (frame, delta) in enumerate(deltas):
        delta["partial_json"] = new if place == 0 else ""
        frame.changed = True
    return True


def _gemini_parts(frame: _Frame) -> list[dict[str, Any]]:
    payload = frame.payload or {}
    found = []
    for candidate in _list(payload.get("candidates")):
        found += [p for p in _list(_at(_at(candidate, "content"), "parts")) if _dict(p)]
    return found


def _gemini_rewrite(frames: list[_Frame], transform: Callable[[object], str | None]) -> bool:
    for frame in frames:
        for part in _gemini_parts(frame):
            call = _dict(part.get("functionCall"))
            if call is None:
                continue
            new = transform(call.get("args", {}))
            if new is None:
                return False
            call["args"] = _SENTINEL
            frame.tokens[_SENTINEL] = new
            frame.changed = True
            return True
    return False


_REWRITERS = {
    "chat": _chat_rewrite,
    "responses": _responses_rewrite,
    "anthropic": _anthropic_rewrite,
    "gemini": _gemini_rewrite,
}


def _argument_shape(make: Callable[[random.Random, object], str | None]) -> Shape:
    def shape(
        rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
    ) -> tuple[dict[str, Any], bytes] | None:
        frames = _frames(body)
        if not _REWRITERS[protocol](frames, lambda value: make(rng, value)):
            return None
        return request, _join(frames)

    return shape


# --- Chat: the index of a fragment -----------------------------------------------------------


def _chat_entries(frames: list[_Frame]) -> list[tuple[_Frame, dict[str, Any]]]:
    found = []
    for frame in frames:
        payload = frame.payload
        for choice in _list(_at(payload, "choices")):
            for entry in _list(_at(_at(choice, "delta"), "tool_calls")):
                if isinstance(entry, dict):
                    found.append((frame, entry))
    return found


def _chat_shape(
    change: Callable[[random.Random, list[tuple[_Frame, dict[str, Any]]]], bool],
) -> Shape:
    def shape(
        rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
    ) -> tuple[dict[str, Any], bytes] | None:
        if protocol != "chat":
            return None
        frames = _frames(body)
        entries = _chat_entries(frames)
        if not entries or not change(rng, entries):
            return None
        return request, _join(frames)

    return shape


def _continuations(
    entries: list[tuple[_Frame, dict[str, Any]]],
) -> list[tuple[_Frame, dict[str, Any]]]:
    later = [pair for pair in entries if not pair[1].get("id")]
    return later or entries


def _index_null(rng: random.Random, entries: list[tuple[_Frame, dict[str, Any]]]) -> bool:
    frame, entry = rng.choice(_continuations(entries))
    entry["index"] = None
    frame.changed = True
    return True


def _index_missing(rng: random.Random, entries: list[tuple[_Frame, dict[str, Any]]]) -> bool:
    frame, entry = rng.choice(_continuations(entries))
    entry.pop("index", None)
    frame.changed = True
    return True


def _new_id_at_index(rng: random.Random, entries: list[tuple[_Frame, dict[str, Any]]]) -> bool:
    later = [pair for pair in entries if not pair[1].get("id")]
    if not later:
        return False
    frame, entry = rng.choice(later)
    entry["id"] = "call_lg_new"
    frame.changed = True
    return True


def _indexes_moved(rng: random.Random, entries: list[tuple[_Frame, dict[str, Any]]]) -> bool:
    indexes = sorted({e["index"] for _, e in entries if isinstance(e.get("index"), int)})
    if not indexes:
        return False
    top = max(indexes)
    reverse = len(indexes) > 1 and rng.random() < 0.5
    for frame, entry in entries:
        index = entry.get("index")
        if isinstance(index, int):
            entry["index"] = top - index if reverse else 2 * index + 1
            frame.changed = True
    return True


# --- Anthropic: a tool_use start with input ----------------------------------------------------


def _anthropic_start_input(
    rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
) -> tuple[dict[str, Any], bytes] | None:
    if protocol != "anthropic":
        return None
    frames = _frames(body)
    for frame in frames:
        payload = frame.payload or {}
        block = _dict(payload.get("content_block"))
        if payload.get("type") != "content_block_start" or not block:
            continue
        if block.get("type") != "tool_use":
            continue
        if rng.random() < 0.5:
            block["input"] = {"lg_start": "from the start event"}
        else:
            index = payload.get("index")
            text = "".join(
                str(_dict(f.payload.get("delta") or {}).get("partial_json", ""))  # type: ignore[union-attr]
                for f in frames
                if f.payload
                and f.payload.get("type") == "content_block_delta"
                and f.payload.get("index") == index
            )
            parsed = _parse(text)
            block["input"] = parsed if isinstance(parsed, dict) and parsed else {"lg_start": 1}
        frame.changed = True
        return request, _join(frames)
    return None


# --- Responses: custom tools, namespaces, a call never done ------------------------------------


def _responses_no_item_done(
    rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
) -> tuple[dict[str, Any], bytes] | None:
    if protocol != "responses":
        return None
    frames = _frames(body)
    done = [
        f
        for f in frames
        if f.payload
        and f.payload.get("type") == "response.output_item.done"
        and (_dict(f.payload.get("item")) or {}).get("type") == "function_call"
    ]
    if not done:
        return None
    frames.remove(rng.choice(done))
    return request, _join(frames)


def _responses_namespace(
    rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
) -> tuple[dict[str, Any], bytes] | None:
    if protocol != "responses":
        return None
    frames = _frames(body)
    own = rng.random() < 0.5
    touched = False
    for frame in frames:
        payload = frame.payload
        if payload is None:
            continue
        items = [_dict(payload.get("item"))]
        items += [_dict(i) for i in _list(_at(payload.get("response"), "output"))]
        for item in items:
            if item is not None and item.get("type") == "function_call":
                item["namespace"] = item.get("name") if own else "lg_ns"
                frame.changed = touched = True
    return (request, _join(frames)) if touched else None


def _responses_custom_tool(
    rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
) -> tuple[dict[str, Any], bytes] | None:
    """A custom tool declared with a regex grammar, and a call to it (its input in the
    grammar or not) before the terminal, in the terminal's output too."""
    if protocol != "responses":
        return None
    frames = _frames(body)
    terminal = next(
        (
            (place, f)
            for place, f in enumerate(frames)
            if f.payload
            and f.payload.get("type") == "response.completed"
            and isinstance(_dict(f.payload.get("response")), dict)
        ),
        None,
    )
    if terminal is None:
        return None
    place, frame = terminal
    assert frame.payload is not None
    response = frame.payload["response"]
    output = response.setdefault("output", [])
    if not isinstance(output, list):
        return None
    text = rng.choice(["apply the patch", "rm -rf ~; echo PWNED", "Apply The Patch", ""])
    item = {
        "type": "custom_tool_call",
        "id": "ctc_lg",
        "call_id": "call_lg_custom",
        "name": CUSTOM_TOOL,
        "input": text,
        "status": "completed",
    }
    index = len(output)
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "input": ""},
        },
        {
            "type": "response.custom_tool_call_input.delta",
            "output_index": index,
            "item_id": "ctc_lg",
            "delta": text,
        },
        {
            "type": "response.custom_tool_call_input.done",
            "output_index": index,
            "item_id": "ctc_lg",
            "input": text,
        },
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]
    output.append(item)
    frame.changed = True
    inserted = []
    for event in events:
        added = _Frame(b"event: x\ndata: {}\n\n")
        added.payload = event
        added.changed = True
        inserted.append(added)
    frames[place:place] = inserted
    tools = (
        [t for t in request.get("tools", []) if isinstance(t, dict)]
        if isinstance(request.get("tools"), list)
        else []
    )
    declared = {
        "type": "custom",
        "name": CUSTOM_TOOL,
        "description": "Apply a patch.",
        "format": {"type": "grammar", "syntax": "regex", "definition": CUSTOM_GRAMMAR},
    }
    return {**request, "tools": [*tools, declared]}, _join(frames)


def custom_grammar_violation(request: dict[str, Any], name: str, text: str) -> bool:
    """Whether `text` is outside the regex grammar `request` declares for the custom tool
    `name` (False where it declares none this checks: a lark grammar, or no format)."""
    for declared in request.get("tools", []) if isinstance(request.get("tools"), list) else []:
        if not isinstance(declared, dict) or declared.get("type") != "custom":
            continue
        if declared.get("name") != name:
            continue
        form = _dict(declared.get("format")) or {}
        if form.get("type") == "grammar" and form.get("syntax") == "regex":
            definition = form.get("definition")
            if isinstance(definition, str):
                return re.fullmatch(definition, text) is None
    return False


# --- Gemini: the parts around a call ---------------------------------------------------------


def _gemini_shape(change: Callable[[random.Random, _Frame, dict[str, Any]], bool]) -> Shape:
    def shape(
        rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
    ) -> tuple[dict[str, Any], bytes] | None:
        if protocol != "gemini":
            return None
        frames = _frames(body)
        for frame in frames:
            for part in _gemini_parts(frame):
                if isinstance(part.get("functionCall"), dict) and change(rng, frame, part):
                    frame.changed = True
                    return request, _join(frames)
        return None

    return shape


def _part_with_text(rng: random.Random, frame: _Frame, part: dict[str, Any]) -> bool:
    part["text"] = "Here is the call."
    return True


def _part_thought(rng: random.Random, frame: _Frame, part: dict[str, Any]) -> bool:
    part["thought"] = True
    return True


def _args_null(rng: random.Random, frame: _Frame, part: dict[str, Any]) -> bool:
    part["functionCall"]["args"] = None
    return True


def _second_candidate(rng: random.Random, frame: _Frame, part: dict[str, Any]) -> bool:
    assert frame.payload is not None
    candidates = frame.payload.get("candidates")
    if not isinstance(candidates, list):
        return False
    call = {**part["functionCall"], "args": {"lg_other": "second candidate"}}
    candidates.append({"content": {"role": "model", "parts": [{"functionCall": call}]}, "index": 1})
    return True


SHAPES: dict[str, Shape] = {
    "args NaN/Infinity": _argument_shape(_nan),
    "args big integer": _argument_shape(_big_integer),
    "args lone surrogate": _argument_shape(_lone_surrogate),
    "args duplicate key": _argument_shape(_duplicate_key),
    "chat index null": _chat_shape(_index_null),
    "chat index missing": _chat_shape(_index_missing),
    "chat new id at index": _chat_shape(_new_id_at_index),
    "chat indexes gapped/reversed": _chat_shape(_indexes_moved),
    "anthropic start input": _anthropic_start_input,
    "responses no item done": _responses_no_item_done,
    "responses namespace": _responses_namespace,
    "responses custom tool": _responses_custom_tool,
    "gemini call part with text": _gemini_shape(_part_with_text),
    "gemini call part thought": _gemini_shape(_part_thought),
    "gemini args null": _gemini_shape(_args_null),
    "gemini second candidate": _gemini_shape(_second_candidate),
}
