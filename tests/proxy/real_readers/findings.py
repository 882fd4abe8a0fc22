"""What the gate released, and the findings: where what a reader holds differs from it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from lockgate.conversation import ToolCall
from lockgate.proxy import Accepted, GatingOptions

from ..support import Chunks, gate_stream
from .base import UNPARSED, HeldCall, Read

# --- what the gate released, and the findings ---------------------------------------------


async def released_calls(
    protocol: str, request: Mapping[str, Any], body: bytes, gating: GatingOptions
) -> tuple[ToolCall, ...] | None:
    """The calls the gate releases of `body` for `request` (None: it refuses it)."""
    gated = await gate_stream(protocol, request, Chunks([body]), gating)
    if isinstance(gated.outcome, Accepted):
        return tuple(gated.outcome.decision.message.tool_calls)
    return None


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _Duplicate("a duplicate key")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _lone_surrogate(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any(0xD800 <= ord(char) <= 0xDFFF for char in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def strict_problem(text: str) -> str | None:
    """Why `text` is not strict JSON as the gate's rules have it (RFC 8259 §4, §8.2, §6: a
    duplicate key, a lone surrogate, NaN or Infinity); None: it is. An integer beyond ±2⁵³
    is JSON, and every Python reader keeps it exactly as the gate validated it."""
    if text == "":
        return None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
        )
    except _Duplicate:
        return "a duplicate key"
    except (ValueError, RecursionError) as exc:
        return f"not JSON ({exc})"
    if _lone_surrogate(value):
        return "a lone surrogate"
    return None


def _value_problem(value: object) -> str | None:
    """What is not strict JSON in a value a reader parsed (NaN, Infinity, lone surrogates)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{item!r} (not JSON)"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    if _lone_surrogate(value):
        return "a lone surrogate"
    return None


def _same(a: object, b: object) -> bool:
    """Equal as JSON values, types kept (1 is not 1.0 nor true) and NaN equal to NaN."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _matches(held: HeldCall, call: ToolCall) -> bool:
    # A call without an id (none, or ""; Gemini's, some Chat servers') is given one by the
    # gate: it is the same call when its name and arguments are.
    if held.id and held.id != call.id:
        return False
    if held.name != call.name:
        return False
    if held.arguments is not None:
        return held.arguments == call.arguments_json or (
            call.arguments_json == "" and held.arguments in ("", "{}") and call.arguments == {}
        )
    return _same(held.value, call.arguments)


def _grammar(request: Mapping[str, Any], name: str | None) -> str | None:
    """The regex a custom tool of the request declares its input must match (None: none
    declared, or a grammar of another syntax)."""
    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        members = tool.get("tools") if tool.get("type") == "namespace" else [tool]
        for member in members if isinstance(members, list) else []:
            if not isinstance(member, dict) or member.get("type") != "custom":
                continue
            shape = member.get("format")
            if (
                member.get("name") == name
                and isinstance(shape, dict)
                and shape.get("type") == "grammar"
                and shape.get("syntax") == "regex"
            ):
                definition = shape.get("definition")
                return definition if isinstance(definition, str) else None
    return None


def findings(
    read_: Read, released: Sequence[ToolCall] | None, request: Mapping[str, Any]
) -> list[str]:
    """What `read_` ended with that the gate did not release: every call of a refused
    stream; on an accepted one, a call whose id, name or arguments differ from every call
    released (argument text byte for byte where the reader keeps it, else the parsed value,
    types kept; a reader that raised may hold a call whose text is not yet JSON: its client
    has nothing it could act on), a call whose arguments are not strict JSON, and a custom
    tool call whose input does not match its declared regex (the gate's rules release
    neither)."""
    found = []
    if released is None:
        for call in read_.calls:
            found.append(f"holds {_show(call)} of a refused stream")
        return found
    free = list(released)
    for call in read_.calls:
        match = next((kept for kept in free if _matches(call, kept)), None)
        if match is None and read_.raised is not None and call.value is UNPARSED:
            continue  # a call the reader was reading when it raised: nothing to act on
        if match is None:
            found.append(f"holds {_show(call)}, which the gate did not release")
            continue
        free.remove(match)
        if call.form == "custom":
            pattern = _grammar(request, call.name)
            if pattern is not None and re.fullmatch(pattern, call.arguments or "") is None:
                found.append(f"holds {_show(call)}: its input does not match {pattern!r}")
            continue
        if call.form != "function":
            continue
        problem = (
            strict_problem(call.arguments)
            if call.arguments is not None
            else _value_problem(call.value)
        )
        if problem is None and match.arguments_json:
            problem = strict_problem(match.arguments_json)
        if problem is not None:
            found.append(f"holds {_show(call)}: released arguments with {problem}")
    return found


def _show(call: HeldCall) -> str:
    shown = call.arguments if call.arguments is not None else repr(call.value)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate
    return f"{call.name!r} ({call.id!r}) {shown}"
