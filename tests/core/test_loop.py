"""The agent loop (`loop.py`): call order and pairing, the turn limit, the recovery budget."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from lockgate.conversation import Message, ToolCall, ToolSpec, Usage
from lockgate.errors import FailureKind, Recovery, ResponseFailure
from lockgate.events import Event, RunStopped, ToolFinished
from lockgate.fixture import ALL_TOOLS
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


# --- the recovery budget ----------------------------------------------------------------

USAGE = Usage(100, 60, 20, 12, 120)


def rejected(call_id: str) -> ResponseFailure:
    call = ToolCall(call_id, "edit", {}, "{bad")
    recovery = Recovery(
        Message("assistant", "", (call,)), ("error: call rejected, not executed: bad JSON",)
    )
    return ResponseFailure(FailureKind.INVALID_BATCH, "batch rejected", recovery=recovery)


def good(call_id: str) -> Message:
    return Message("assistant", "", (ToolCall(call_id, "discover", {}, "{}"),), usage=USAGE)


async def test_recovery_keeps_pairs_and_resets_after_success() -> None:
    model = ScriptedModel(
        [
            rejected("a"),
            rejected("b"),
            good("c"),
            rejected("d"),
            rejected("e"),
            Message("assistant", "done", usage=USAGE),
        ]
    )
    executor = ListExecutor()
    result = await run_agent("go", model, ALL_TOOLS, executor, instructions="s", recovery_budget=2)
    assert result.stop_reason == "model_finished"
    assert executor.calls == ["c"]
    pairs = [
        (m.role, m.tool_call_id or (m.tool_calls[0].id if m.tool_calls else None))
        for m in result.history[2:]
    ]
    assert pairs == [
        ("assistant", "a"),
        ("tool", "a"),
        ("assistant", "b"),
        ("tool", "b"),
        ("assistant", "c"),
        ("tool", "c"),
        ("assistant", "d"),
        ("tool", "d"),
        ("assistant", "e"),
        ("tool", "e"),
        ("assistant", None),
    ]
    assert result.usage == USAGE + USAGE


async def test_recovery_budget_spent_stops_with_the_failure() -> None:
    model = ScriptedModel([rejected("a"), rejected("b"), rejected("c")])
    executor = ListExecutor()
    with pytest.raises(ResponseFailure) as caught:
        await run_agent("go", model, ALL_TOOLS, executor, instructions="s", recovery_budget=2)
    assert caught.value.kind is FailureKind.INVALID_BATCH
    assert "recovery budget of 2 spent" in caught.value.message
    assert executor.calls == []


async def test_without_recovery_the_first_rejection_stops() -> None:
    model = ScriptedModel([rejected("a")])
    with pytest.raises(ResponseFailure):
        await run_agent("go", model, ALL_TOOLS, ListExecutor(), instructions="s")
