from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from lockgate.context import GUIDANCE_LIMIT_CHARS, build_instructions
from lockgate.conversation import Message, ToolCall, ToolSpec
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import Event, RunStopped, ToolFinished
from lockgate.fixture import ALL_TOOLS, EDIT, create_fixture
from lockgate.loop import run_agent
from lockgate.tools import ToolError


class ScriptedModel:
    def __init__(self, replies: list[Message | Exception]) -> None:
        self.replies = replies
        self.histories: list[tuple[Message, ...]] = []

    async def complete(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        self.histories.append(tuple(history))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


class ListExecutor:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def execute(self, call: ToolCall) -> str:
        self.calls.append(call.id)
        if call.name == "edit":
            raise ToolError("old text occurs 0 times")
        return f"ran {call.name}"


def calls(*names: str) -> Message:
    return Message(
        "assistant", "", tuple(ToolCall(f"c_{n}_{i}", n, {}) for i, n in enumerate(names))
    )


async def test_calls_execute_in_order_and_results_carry_call_ids() -> None:
    model = ScriptedModel([calls("discover", "edit"), Message("assistant", "done")])
    executor = ListExecutor()
    events: list[Event] = []
    result = await run_agent(
        "go", model, ALL_TOOLS, executor, instructions="sys", observer=events.append
    )
    assert result.stop_reason == "model_finished"
    assert executor.calls == ["c_discover_0", "c_edit_1"]
    roles = [(m.role, m.tool_call_id, m.content) for m in result.history]
    assert roles == [
        ("system", None, "sys"),
        ("user", None, "go"),
        ("assistant", None, ""),
        ("tool", "c_discover_0", "ran discover"),
        ("tool", "c_edit_1", "error: old text occurs 0 times"),
        ("assistant", None, "done"),
    ]
    assert model.histories[1] == result.history[:5]
    assert [e.output for e in events if isinstance(e, ToolFinished)][1].startswith("error:")
    assert events[-1] == RunStopped("model_finished")


async def test_turn_limit() -> None:
    model = ScriptedModel([calls("discover"), calls("discover")])
    result = await run_agent("go", model, ALL_TOOLS, ListExecutor(), instructions="s", max_turns=2)
    assert result.stop_reason == "turn_limit"
    assert len(model.histories) == 2


async def test_provider_failure_propagates_and_nothing_runs() -> None:
    executor = ListExecutor()
    model = ScriptedModel([ResponseFailure(FailureKind.STREAM_ENDED, "cut")])
    with pytest.raises(ResponseFailure):
        await run_agent("go", model, ALL_TOOLS, executor, instructions="s")
    assert executor.calls == []


async def test_max_turns_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        await run_agent(
            "go", ScriptedModel([]), ALL_TOOLS, ListExecutor(), instructions="s", max_turns=0
        )


def test_instructions_include_catalog_and_bounded_guidance(tmp_path: Path) -> None:
    project = create_fixture(tmp_path)
    text = build_instructions("BASE", ALL_TOOLS, project)
    assert text.startswith("BASE")
    for tool in ALL_TOOLS:
        assert f"- {tool.name}: {tool.description}" in text
    assert "Do not edit the tests" in text
    (project / "AGENTS.md").write_text("g" * (GUIDANCE_LIMIT_CHARS + 100))
    bounded = build_instructions("BASE", ALL_TOOLS, project)
    assert "g" * GUIDANCE_LIMIT_CHARS in bounded
    assert "g" * (GUIDANCE_LIMIT_CHARS + 1) not in bounded
    assert "[guidance truncated]" in bounded


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
