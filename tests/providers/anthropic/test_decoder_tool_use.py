"""The Anthropic Messages decoder's rule, lines 5-6: `tool_use` blocks become calls, and
provider-executed blocks stay opaque output, never calls."""

from __future__ import annotations

import json

import pytest

from lockgate.conversation import CallPart, NativeItem, TextPart
from lockgate.errors import FailureKind
from lockgate.events import FINISH_WITH_CALLS, ToolArgumentsDelta, ToolCallStarted
from lockgate.gate import InvalidBatch
from lockgate.providers.anthropic.render import MessageBuilder

from .streams import (
    EDIT,
    MESSAGE_STOP,
    block_start,
    decide,
    decode_all,
    delta,
    fails,
    message_delta,
    start_event,
    stop,
)

# --- 5. tool_use --------------------------------------------------------------------------


def test_tool_use_streams_argument_progress_and_completes_at_its_stop() -> None:
    builder = MessageBuilder("msg_1").start().text("Fixing.").tool_use("toolu_1", "edit", EDIT)
    events = builder.finish("tool_use").events
    normalized = decode_all(events)
    started = [e for e in normalized if isinstance(e, ToolCallStarted)]
    assert started == [ToolCallStarted("1", "toolu_1", "edit")]
    pieces = [e.delta for e in normalized if isinstance(e, ToolArgumentsDelta)]
    assert len(pieces) > 1
    assert "".join(pieces) == json.dumps(EDIT)
    decision = decide(events)
    assert decision.finish_reason == FINISH_WITH_CALLS
    assert [(c.id, c.name, dict(c.arguments)) for c in decision.message.tool_calls] == [
        ("toolu_1", "edit", EDIT)
    ]
    assert decision.message.output == (TextPart("Fixing."), CallPart("toolu_1"))


def test_empty_partial_json_means_an_empty_object() -> None:
    events = [
        start_event(),
        block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "discover", "input": {}}),
        delta(0, type="input_json_delta", partial_json=""),
        stop(0),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]
    call = decide(events).message.tool_calls[0]
    assert (call.name, dict(call.arguments), call.arguments_json) == ("discover", {}, "{}")


@pytest.mark.parametrize(
    "deltas",
    [[], [""], ['{"path": "calculator.py"}']],
    ids=["no delta", "an empty delta", "an input streamed too"],
)
def test_a_tool_use_that_starts_with_a_non_empty_input_is_refused(deltas: list[str]) -> None:
    # Issue 27: the API starts every tool_use with `input: {}` (every recording does). With
    # a start input the readers disagree: anthropic-python kept it, @anthropic-ai/sdk read
    # `{}` after an empty delta, litellm `{}` always, the AI SDK prefixed it to the deltas.
    start = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "README.md"}}
    events = [
        start_event(),
        block_start(0, start),
        *(delta(0, type="input_json_delta", partial_json=piece) for piece in deltas),
        stop(0),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]
    failure = fails(events)
    assert failure.kind is FailureKind.LIFECYCLE
    assert "tool_use 'toolu_1' starts with a non-empty input" in failure.message


def test_a_tool_use_without_any_input_is_refused() -> None:
    # No `input` at the start and none streamed: anthropic-python read None,
    # @anthropic-ai/sdk undefined, litellm and the AI SDK `{}`.
    events = [
        start_event(),
        block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "discover"}),
        stop(0),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]
    failure = fails(events)
    assert failure.kind is FailureKind.LIFECYCLE
    assert "carried no input" in failure.message
    # Streamed, it is read alike.
    events[2:2] = [delta(0, type="input_json_delta", partial_json="{}")]
    assert dict(decide(events).message.tool_calls[0].arguments) == {}


def test_a_provider_block_with_a_start_input_stays_opaque() -> None:
    # server_tool_use blocks start with `input: {}` in every recording too, but no reader
    # reads them as calls: they stay opaque, whatever their start.
    block = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    events = [
        start_event(),
        block_start(0, {**block, "input": {"query": "lockgate"}}),
        stop(0),
        block_start(1, {"type": "text", "text": ""}),
        delta(1, type="text_delta", text="Found it."),
        stop(1),
        message_delta("end_turn"),
        MESSAGE_STOP,
    ]
    decision = decide(events)
    assert decision.message.tool_calls == ()


def test_empty_input_for_a_tool_with_required_parameters_is_rejected() -> None:
    events = [
        start_event(),
        block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "edit", "input": {}}),
        delta(0, type="input_json_delta", partial_json=""),
        stop(0),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]
    failure = fails(events)
    assert isinstance(failure, InvalidBatch)
    assert "required" in failure.message


def test_a_tool_use_that_never_stopped_is_lifecycle_at_message_stop() -> None:
    builder = MessageBuilder("msg_1").start().tool_use("toolu_1", "edit", EDIT, finish=False)
    assert fails(builder.finish("tool_use").events).kind is FailureKind.LIFECYCLE


def test_cut_off_arguments_of_a_stopped_tool_use_are_an_invalid_batch() -> None:
    builder = MessageBuilder("msg_1").start().tool_use("toolu_1", "edit", '{"path": "calc')
    assert fails(builder.finish("tool_use").events).kind is FailureKind.INVALID_BATCH


# --- 6. provider-executed blocks -----------------------------------------------------------


def test_provider_blocks_are_opaque_output_and_never_calls() -> None:
    builder = MessageBuilder("msg_1").start().web_search("srvtoolu_1", "add subtracts")
    builder.whole_block(
        {
            "type": "advisor_tool_result",
            "tool_use_id": "srvtoolu_2",
            "content": {"type": "advisor_result", "text": "ok"},
        }
    )
    events = builder.text("Found it.").finish("end_turn").events
    normalized = decode_all(events)
    assert not [e for e in normalized if isinstance(e, ToolCallStarted | ToolArgumentsDelta)]
    decision = decide(events)
    assert decision.message.tool_calls == ()
    kinds = [(p.kind, p.item["type"]) for p in decision.message.output if isinstance(p, NativeItem)]
    assert kinds == [
        ("provider_output", "server_tool_use"),
        ("provider_output", "web_search_tool_result"),
        ("provider_output", "advisor_tool_result"),
    ]
    first = decision.message.output[0]
    assert isinstance(first, NativeItem)
    assert dict(first.item) == {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "add subtracts"},
    }


def test_a_provider_block_whose_input_is_not_json_fails_at_message_stop() -> None:
    events = [
        start_event(),
        block_start(0, {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}),
        delta(0, type="input_json_delta", partial_json='{"query": "cut'),
        stop(0),
        message_delta("end_turn"),
        MESSAGE_STOP,
    ]
    assert fails(events).kind is FailureKind.MALFORMED_EVENT
    events[-2] = message_delta("max_tokens")
    assert fails(events).kind is FailureKind.RESPONSE_INCOMPLETE


def test_the_streamed_input_of_a_provider_block_is_bounded() -> None:
    piece = delta(0, type="input_json_delta", partial_json="x" * 60_000)
    events = [
        start_event(),
        block_start(0, {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}),
        *[piece] * 80,
    ]
    assert fails(events).kind is FailureKind.BOUND_EXCEEDED


def test_an_unknown_block_type_cannot_be_replayed() -> None:
    events = [start_event(), block_start(0, {"type": "computer_action", "id": "x"})]
    assert fails(events).kind is FailureKind.UNSUPPORTED_OUTPUT
