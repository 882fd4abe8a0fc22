"""The conversation's values (`conversation.py`): messages, tool specs, calls, usage."""

from __future__ import annotations

import pytest

from lockgate.conversation import Message, ToolCall, ToolSpec, Usage
from lockgate.fixture import EDIT


def test_message_and_tool_spec_invariants() -> None:
    with pytest.raises(ValueError, match="only assistant"):
        Message("user", "x", (ToolCall("c", "read", {}),))
    with pytest.raises(ValueError, match="tool_call_id"):
        Message("tool", "x")
    with pytest.raises(ValueError, match="role must be one of"):
        Message("moderator", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="object schema"):
        ToolSpec("t", "d", {"type": "string"})
    with pytest.raises(ValueError, match="invalid parameter schema"):
        ToolSpec("t", "d", {"type": "object", "properties": {"a": {"type": 7}}})
    for bad_name in ("", "has space", "ünï", "x" * 65):
        with pytest.raises(ValueError, match="tool name"):
            ToolSpec(bad_name, "d")


def test_tool_specs_accept_any_object_schema_and_say_when_it_is_strict() -> None:
    strict = ToolSpec("edit", "d", EDIT.parameters)
    assert strict.strict
    optional = ToolSpec(
        "search",
        "d",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "mode": {"enum": ["fast", "deep"]},
                "filter": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "scope": {"type": "object", "properties": {"dir": {"type": "string"}}},
            },
            "required": ["query"],
        },
    )
    assert not optional.strict
    nested_open = ToolSpec(
        "t",
        "d",
        {
            "type": "object",
            "properties": {"inner": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "required": ["inner"],
            "additionalProperties": False,
        },
    )
    assert not nested_open.strict  # a nested object that is not closed
    assert ToolSpec("t", "d").strict
    assert ToolSpec("t", "d").takes_no_arguments
    assert not optional.takes_no_arguments

    with pytest.raises(ValueError, match="tool call needs"):
        ToolCall("", "read", {})


def test_usage_line_format() -> None:
    assert (
        Usage(1, 2, 3, 4, 5) + Usage(1, 1, 1, 1, 1)
    ).line() == "usage: input=2 (cached=3) output=4 (reasoning=5) total=6"
