"""Reasoning items, native continuation, finish reasons, usage and recovery contracts."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from lockgate.conversation import (
    CallPart,
    Message,
    NativeItem,
    TextPart,
    ToolCall,
    ToolSpec,
    Usage,
)
from lockgate.errors import FailureKind, Recovery, ResponseFailure
from lockgate.events import (
    Event,
    OutputCall,
    OutputNative,
    OutputText,
    ProviderReportedFailure,
    ReasoningDelta,
    ResponseCompleted,
    ResponseStarted,
    StreamEvent,
    ToolArgumentsDelta,
    ToolCallStarted,
    UsageReported,
)
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import Decision, InvalidBatch, ResponseGate
from lockgate.loop import run_agent
from lockgate.providers.responses.codec import ResponsesCodec, is_reasoning_model
from lockgate.tools import ToolError

RS_1 = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "enc-1"}
RS_2 = {"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "enc-2"}
USAGE = Usage(100, 60, 20, 12, 120)


def run_gate(events: Sequence[StreamEvent]) -> tuple[Decision | None, list[Event]]:
    seen: list[Event] = []
    gate = ResponseGate(ALL_TOOLS, seen.append)
    decision = None
    for event in events:
        decision = gate.accept(event)
    return decision, seen


def streamed(item: str, call: str, name: str, arguments: str) -> list[StreamEvent]:
    return [ToolCallStarted(item, call, name), ToolArgumentsDelta(item, arguments)]


START = ResponseStarted(response_id="r1")


def test_reasoning_attaches_to_the_call_it_preceded_and_trailing_reasoning_is_dropped() -> None:
    events = [
        START,
        ReasoningDelta("thinking about it", "summary"),
        *streamed("fc_1", "call_1", "discover", "{}"),
        ResponseCompleted(
            None,
            USAGE,
            (
                OutputNative("reasoning", RS_1),
                OutputText("Looking.", "msg_1"),
                OutputCall("fc_1", "call_1", "discover", "{}"),
                OutputNative("reasoning", RS_2),
            ),
            response_id="r1",
        ),
    ]
    decision, seen = run_gate(events)
    assert decision is not None
    # The output keeps its original order; the encoder drops the trailing reasoning item.
    assert decision.message.output == (
        NativeItem("reasoning", RS_1),
        TextPart("Looking.", "msg_1"),
        CallPart("call_1", "fc_1"),
        NativeItem("reasoning", RS_2),
    )
    codec = ResponsesCodec("o4-mini")
    replayed = codec.encode(
        [
            Message("user", "go"),
            dataclasses.replace(decision.message, producer=codec.producer),
            Message("tool", "files", tool_call_id="call_1"),
        ],
        ALL_TOOLS,
    )["input"]
    assert [item.get("id") for item in replayed] == [None, "rs_1", "msg_1", "fc_1", None]
    assert decision.message.usage == USAGE
    assert decision.usage == USAGE
    assert decision.finish_reason == "tool_calls"
    assert ReasoningDelta("thinking about it", "summary") in seen
    assert UsageReported(USAGE) in seen


@pytest.mark.parametrize(
    ("stated", "calls", "ok"),
    [
        ("stop", False, True),
        ("tool_calls", True, True),
        ("stop", True, False),
        ("tool_calls", False, False),
        ("length", False, False),
        ("end_turn", False, False),  # native reasons must be translated by the decoder
    ],
)
def test_finish_reason_must_agree_with_the_calls(stated: str, calls: bool, ok: bool) -> None:
    events: list[StreamEvent] = [START]
    output: tuple[Any, ...] = (OutputText("hi"),)
    if calls:
        events += streamed("fc_1", "call_1", "discover", "{}")
        output = (OutputCall("fc_1", "call_1", "discover", "{}"),)
    events.append(ResponseCompleted(stated, None, output, response_id="r1"))
    if ok:
        decision, _ = run_gate(events)
        assert decision is not None
        assert decision.finish_reason == stated
    else:
        with pytest.raises(ResponseFailure) as caught:
            run_gate(events)
        assert caught.value.kind is FailureKind.LIFECYCLE


def test_invalid_batch_carries_a_paired_recovery() -> None:
    bad = '{"path": "calculator.py"'
    events = [
        START,
        *streamed("fc_1", "call_1", "read", '{"path": "README.md"}'),
        *streamed("fc_2", "call_2", "edit", bad),
        ResponseCompleted(
            None,
            None,
            (
                OutputCall("fc_1", "call_1", "read", '{"path": "README.md"}'),
                OutputCall("fc_2", "call_2", "edit", bad),
            ),
            response_id="r1",
        ),
    ]
    with pytest.raises(InvalidBatch) as caught:
        run_gate(events)
    recovery = caught.value.recovery
    assert recovery is not None
    assert [c.id for c in recovery.message.tool_calls] == ["call_1", "call_2"]
    assert recovery.message.tool_calls[1].arguments_json == bad
    first, second = recovery.observations
    assert first.startswith(
        "error: not executed because another call in the same response was invalid (call_2)"
    )
    assert second.startswith("error: call rejected, not executed: arguments are not valid JSON")


def test_unpairable_batches_are_not_recoverable() -> None:
    events = [
        START,
        *streamed("fc_1", "", "read", "{}"),
        ResponseCompleted(None, None, (OutputCall("fc_1", "", "read", "{}"),), response_id="r1"),
    ]
    with pytest.raises(InvalidBatch) as caught:
        run_gate(events)
    assert caught.value.recovery is None


def test_truncation_with_buffered_calls_is_recoverable_other_failures_are_not() -> None:
    cut = [START, *streamed("fc_1", "call_1", "edit", '{"path": "calc')]
    with pytest.raises(ResponseFailure) as caught:
        run_gate(
            [
                *cut,
                ProviderReportedFailure(
                    FailureKind.RESPONSE_INCOMPLETE,
                    "response incomplete: max_output_tokens",
                    "max_output_tokens",
                    USAGE,
                    truncated=True,
                ),
            ]
        )
    recovery = caught.value.recovery
    assert recovery is not None
    assert recovery.message.tool_calls[0].arguments_json == '{"path": "calc'
    assert recovery.observations[0].startswith(
        "error: the response was truncated by the output limit"
    )
    for failure in (
        ProviderReportedFailure(
            FailureKind.RESPONSE_INCOMPLETE, "response incomplete: content_filter", "content_filter"
        ),
        ProviderReportedFailure(FailureKind.RESPONSE_FAILED, "response failed", "server_error"),
    ):
        with pytest.raises(ResponseFailure) as other:
            run_gate([*cut, failure])
        assert other.value.recovery is None
    with pytest.raises(ResponseFailure) as text_only:
        run_gate(
            [
                START,
                ProviderReportedFailure(
                    FailureKind.RESPONSE_INCOMPLETE, "cut", "x", truncated=True
                ),
            ]
        )
    assert text_only.value.recovery is None


# --- encoding -------------------------------------------------------------------------


def assistant_with_reasoning(producer: str, response_id: str = "resp_1") -> Message:
    call = ToolCall("call_1", "discover", {}, "{}")
    return Message(
        "assistant",
        "Looking.",
        (call,),
        producer=producer,
        response_id=response_id,
        output=(TextPart("Looking."), NativeItem("reasoning", RS_1), CallPart("call_1")),
    )


def test_reasoning_models_get_encrypted_reasoning_others_do_not() -> None:
    assert is_reasoning_model("o4-mini")
    assert is_reasoning_model("gpt-5")
    assert is_reasoning_model("o3")
    assert not is_reasoning_model("gpt-4.1-mini")
    assert not is_reasoning_model("gpt-5-chat-latest")
    history = [Message("user", "hi")]
    assert ResponsesCodec("o4-mini").encode(history, ALL_TOOLS)["include"] == [
        "reasoning.encrypted_content"
    ]
    assert "include" not in ResponsesCodec("gpt-4.1-mini").encode(history, ALL_TOOLS)
    assert "include" in ResponsesCodec("custom-model", encrypted_reasoning=True).encode(
        history, ALL_TOOLS
    )


def test_reasoning_is_replayed_unchanged_before_its_call_to_the_same_producer_only() -> None:
    codec = ResponsesCodec("o4-mini")
    history = [
        Message("user", "go"),
        assistant_with_reasoning(codec.producer),
        Message("tool", "files", tool_call_id="call_1"),
    ]
    items = codec.encode(history, ALL_TOOLS)["input"]
    assert [i.get("type") or i.get("role") for i in items] == [
        "user",
        "assistant",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert items[2] == RS_1
    switched = ResponsesCodec("gpt-5").encode(history, ALL_TOOLS)["input"]
    assert all(i.get("type") != "reasoning" for i in switched)
    assert [i.get("type") for i in switched if i.get("type")] == [
        "function_call",
        "function_call_output",
    ]


def test_native_continuation_sends_only_new_items() -> None:
    codec = ResponsesCodec("gpt-4.1-mini", continuation="native")
    first = codec.encode([Message("system", "s"), Message("user", "go")], ALL_TOOLS)
    assert first["store"] is True
    assert "previous_response_id" not in first
    history = [
        Message("system", "s"),
        Message("user", "go"),
        assistant_with_reasoning(codec.producer, "resp_7"),
        Message("tool", "files", tool_call_id="call_1"),
        Message("user", "also check the tests"),
    ]
    continued = codec.encode(history, ALL_TOOLS)
    assert continued["previous_response_id"] == "resp_7"
    assert continued["input"] == [
        {"type": "function_call_output", "call_id": "call_1", "output": "files"},
        {"role": "user", "content": "also check the tests"},
    ]
    assert "include" not in continued


def test_native_continuation_falls_back_to_full_history() -> None:
    codec = ResponsesCodec("gpt-4.1-mini", continuation="native")
    text_only = [
        Message("user", "go"),
        Message("assistant", "Hi.", producer=codec.producer, response_id="resp_1"),
        Message("user", "more"),
    ]
    other_model = [
        Message("user", "go"),
        assistant_with_reasoning("openai-responses:gpt-5", "resp_2"),
        Message("tool", "x", tool_call_id="call_1"),
    ]
    no_id = [
        Message("user", "go"),
        assistant_with_reasoning(codec.producer, ""),
        Message("tool", "x", tool_call_id="call_1"),
    ]
    for history in (text_only, other_model, no_id):
        request = codec.encode(history, ALL_TOOLS)
        assert "previous_response_id" not in request
        assert len(request["input"]) >= 3


def test_the_encoder_refuses_to_send_an_orphan_reasoning_item() -> None:
    from lockgate.providers.responses.codec import check_no_orphan_reasoning

    check_no_orphan_reasoning([RS_1, RS_2, {"type": "function_call"}])
    check_no_orphan_reasoning([RS_1, {"type": "message", "role": "assistant"}])
    orphans: list[list[dict[str, Any]]] = [
        [{"type": "function_call"}, RS_1],
        [RS_1, {"role": "user", "content": "next"}],
        [RS_1, {"type": "function_call_output", "call_id": "c", "output": "x"}],
    ]
    for orphan in orphans:
        with pytest.raises(ValueError, match="without its following item"):
            check_no_orphan_reasoning(orphan)


# --- the loop's recovery budget ---------------------------------------------------------


class Scripted:
    def __init__(self, replies: list[Message | ResponseFailure]) -> None:
        self.replies = replies

    async def complete(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        reply = self.replies.pop(0)
        if isinstance(reply, ResponseFailure):
            raise reply
        return reply


class Executor:
    def __init__(self) -> None:
        self.ran: list[str] = []

    async def execute(self, call: ToolCall) -> str:
        self.ran.append(call.id)
        if call.name == "fail":
            raise ToolError("nope")
        return "ok"


def rejected(call_id: str) -> ResponseFailure:
    call = ToolCall(call_id, "edit", {}, "{bad")
    recovery = Recovery(
        Message("assistant", "", (call,)), ("error: call rejected, not executed: bad JSON",)
    )
    return ResponseFailure(FailureKind.INVALID_BATCH, "batch rejected", recovery=recovery)


def good(call_id: str) -> Message:
    return Message("assistant", "", (ToolCall(call_id, "discover", {}, "{}"),), usage=USAGE)


async def test_recovery_keeps_pairs_and_resets_after_success() -> None:
    model = Scripted(
        [
            rejected("a"),
            rejected("b"),
            good("c"),
            rejected("d"),
            rejected("e"),
            Message("assistant", "done", usage=USAGE),
        ]
    )
    executor = Executor()
    result = await run_agent("go", model, ALL_TOOLS, executor, instructions="s", recovery_budget=2)
    assert result.stop_reason == "model_finished"
    assert executor.ran == ["c"]
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
    model = Scripted([rejected("a"), rejected("b"), rejected("c")])
    executor = Executor()
    with pytest.raises(ResponseFailure) as caught:
        await run_agent("go", model, ALL_TOOLS, executor, instructions="s", recovery_budget=2)
    assert caught.value.kind is FailureKind.INVALID_BATCH
    assert "recovery budget of 2 spent" in caught.value.message
    assert executor.ran == []


async def test_without_recovery_the_first_rejection_stops() -> None:
    model = Scripted([rejected("a")])
    with pytest.raises(ResponseFailure):
        await run_agent("go", model, ALL_TOOLS, Executor(), instructions="s")


def test_usage_line_format() -> None:
    assert (
        Usage(1, 2, 3, 4, 5) + Usage(1, 1, 1, 1, 1)
    ).line() == "usage: input=2 (cached=3) output=4 (reasoning=5) total=6"
