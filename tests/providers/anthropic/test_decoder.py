"""The Anthropic Messages decoder: every line of its completion rule.

Each line accepted and failed closed (the numbered sections follow the rule's lines),
usage, the lab renderer's round trip and fragmentation anywhere (hand-written events only).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.conversation import CallPart, NativeItem, TextPart, ToolSpec, Usage
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import (
    FINISH_PAUSED,
    FINISH_REFUSED,
    FINISH_WITH_CALLS,
    FINISH_WITHOUT_CALLS,
    Event,
    NativeOutput,
    ProviderReportedFailure,
    ReasoningDelta,
    ResponseCompleted,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
    UsageReported,
)
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import Decision, InvalidBatch, ResponseGate
from lockgate.providers.anthropic.decoder import USAGE_FIELDS, AnthropicDecoder
from lockgate.providers.anthropic.render import AnthropicRenderer, MessageBuilder
from lockgate.providers.decoding import usage_from
from lockgate.scripted.reply import Call, ProviderTool, Reply, ReplyUsage, Say, Think
from lockgate.scripted.script import fragments
from lockgate.sse import ServerSentEvent, SSEDecoder

EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
LAB = AnthropicRenderer()


def body(events: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join(LAB.frame(event) for event in events)


def decode_all(events: Sequence[dict[str, Any]]) -> list[StreamEvent]:
    """Every normalized event of a stream (end of body included)."""
    sse = SSEDecoder()
    decoder = AnthropicDecoder()
    out: list[StreamEvent] = []
    for event in sse.feed(body(events)) + sse.finish():
        out.extend(decoder.decode(event))
    out.extend(decoder.end_of_stream())
    return out


def decide(
    events: Sequence[Mapping[str, Any]] | bytes,
    tools: Sequence[ToolSpec] = ALL_TOOLS,
    chunks: Sequence[int] | None = None,
    observed: list[Event] | None = None,
) -> Decision:
    """Bytes → SSE → AnthropicDecoder → ResponseGate, as the client runs them."""
    payload = events if isinstance(events, bytes) else body(events)
    sse = SSEDecoder()
    decoder = AnthropicDecoder()
    gate = ResponseGate(tools, observed.append if observed is not None else lambda e: None)
    decision: Decision | None = None
    pieces = [payload] if chunks is None else list(fragments(payload, chunks))
    for piece in pieces:
        for event in sse.feed(piece):
            for normalized in decoder.decode(event):
                decision = gate.accept(normalized) or decision
    for event in sse.finish():
        for normalized in decoder.decode(event):
            decision = gate.accept(normalized) or decision
    if decision is None:
        for normalized in decoder.end_of_stream():
            decision = gate.accept(normalized) or decision
    if decision is None:
        raise ResponseFailure(FailureKind.STREAM_ENDED, "no terminal event")
    return decision


def fails(
    events: Sequence[dict[str, Any]], tools: Sequence[ToolSpec] = ALL_TOOLS
) -> ResponseFailure:
    with pytest.raises(ResponseFailure) as caught:
        decide(events, tools)
    return caught.value


def edit_message(stop_reason: str = "tool_use") -> MessageBuilder:
    builder = MessageBuilder("msg_1").start().text("Fixing.")
    return builder.tool_use("toolu_1", "edit", EDIT).finish(stop_reason)


def start_event(message_id: str = "msg_1", **extra: Any) -> dict[str, Any]:
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
        **extra,
    }
    return {"type": "message_start", "message": message}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str | None, **delta_fields: Any) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None, **delta_fields},
        "usage": {"output_tokens": 5},
    }


MESSAGE_STOP = {"type": "message_stop"}
TEXT = block_start(0, {"type": "text", "text": ""})


def text_stream(stop_reason: str | None = "end_turn") -> list[dict[str, Any]]:
    return [
        start_event(),
        TEXT,
        delta(0, type="text_delta", text="Hello"),
        stop(0),
        message_delta(stop_reason),
        MESSAGE_STOP,
    ]


# --- 1. message_start ---------------------------------------------------------------------


def test_message_start_starts_the_response_with_its_id() -> None:
    events = decode_all(text_stream())
    assert events[0] == ResponseStarted(response_id="msg_1", model="m")
    assert all(e.response_id is None for e in events[1:])
    assert decide(text_stream()).message.response_id == "msg_1"


def test_a_second_message_start_fails_in_the_gate() -> None:
    events = text_stream()
    events.insert(1, start_event("msg_2"))
    assert fails(events).kind is FailureKind.LIFECYCLE


@pytest.mark.parametrize(
    "early",
    [TEXT, delta(0, type="text_delta", text="x"), stop(0), message_delta("end_turn"), MESSAGE_STOP],
)
def test_anything_but_ping_before_message_start_is_lifecycle(early: dict[str, Any]) -> None:
    assert fails([early, *text_stream()]).kind is FailureKind.LIFECYCLE


def test_ping_before_message_start_is_progress() -> None:
    assert decide([{"type": "ping"}, *text_stream()]).message.content == "Hello"


def test_message_start_with_content_is_lifecycle() -> None:
    events = text_stream()
    events[0] = start_event(content=[{"type": "tool_use", "id": "t", "name": "test", "input": {}}])
    assert fails(events).kind is FailureKind.LIFECYCLE


# --- 2. block order -----------------------------------------------------------------------


def test_a_block_starting_while_another_is_open_is_lifecycle() -> None:
    events = [start_event(), TEXT, block_start(1, {"type": "text", "text": ""})]
    assert fails(events).kind is FailureKind.LIFECYCLE


def test_a_block_index_out_of_order_is_lifecycle() -> None:
    events = [start_event(), block_start(1, {"type": "text", "text": ""})]
    assert fails(events).kind is FailureKind.LIFECYCLE


def test_a_delta_for_a_block_that_never_started_is_lifecycle() -> None:
    events = [start_event(), delta(0, type="text_delta", text="x"), MESSAGE_STOP]
    assert fails(events).kind is FailureKind.LIFECYCLE


def test_a_delta_after_its_block_stopped_is_lifecycle() -> None:
    events = [start_event(), TEXT, stop(0), delta(0, type="text_delta", text="late")]
    assert fails(events).kind is FailureKind.LIFECYCLE


def test_a_stop_for_a_block_that_is_not_open_is_lifecycle() -> None:
    assert fails([start_event(), TEXT, stop(0), stop(0)]).kind is FailureKind.LIFECYCLE


def test_a_delta_that_does_not_fit_its_block_is_malformed() -> None:
    tool = block_start(0, {"type": "tool_use", "id": "t1", "name": "test", "input": {}})
    events = [start_event(), tool, delta(0, type="text_delta", text="x")]
    assert fails(events).kind is FailureKind.MALFORMED_EVENT
    events = [start_event(), TEXT, delta(0, type="input_json_delta", partial_json="{")]
    assert fails(events).kind is FailureKind.MALFORMED_EVENT
    events = [start_event(), TEXT, delta(0, type="signature_delta", signature="s")]
    assert fails(events).kind is FailureKind.MALFORMED_EVENT


# --- 3. text ------------------------------------------------------------------------------


def test_text_deltas_stream_and_citations_are_progress() -> None:
    citation = {"type": "char_location", "cited_text": "x", "document_index": 0}
    events = [
        start_event(),
        block_start(0, {"type": "text", "text": "", "citations": []}),
        delta(0, type="citations_delta", citation=citation),
        delta(0, type="text_delta", text="Cited "),
        delta(0, type="text_delta", text="text."),
        stop(0),
        message_delta("end_turn"),
        MESSAGE_STOP,
    ]
    normalized = decode_all(events)
    assert [e for e in normalized if isinstance(e, TextDelta)] == [
        TextDelta("Cited "),
        TextDelta("text."),
    ]
    decision = decide(events)
    assert decision.message.content == "Cited text."
    assert decision.message.output == (TextPart("Cited text."),)


# --- 4. thinking --------------------------------------------------------------------------


def thinking_events(*signatures: str) -> list[dict[str, Any]]:
    events = [
        start_event(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="Look "),
        delta(0, type="thinking_delta", thinking=""),
        delta(0, type="thinking_delta", thinking="first."),
    ]
    events += [delta(0, type="signature_delta", signature=s) for s in signatures]
    return [
        *events,
        stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "discover", "input": {}}),
        delta(1, type="input_json_delta", partial_json=""),
        stop(1),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]


def test_thinking_streams_apart_and_becomes_a_native_item_at_its_stop() -> None:
    events = thinking_events("sig-A")
    normalized = decode_all(events)
    assert [e for e in normalized if isinstance(e, ReasoningDelta)] == [
        ReasoningDelta("Look ", "raw"),
        ReasoningDelta("first.", "raw"),
    ]
    natives = [e for e in normalized if isinstance(e, NativeOutput)]
    assert [(n.kind, dict(n.item)) for n in natives] == [
        ("reasoning", {"type": "thinking", "thinking": "Look first.", "signature": "sig-A"})
    ]
    assert natives[0].size > 0
    decision = decide(events)
    assert decision.message.content == ""  # reasoning is never answer text
    assert decision.message.output == (
        NativeItem(
            "reasoning", {"type": "thinking", "thinking": "Look first.", "signature": "sig-A"}
        ),
        CallPart("toolu_1"),
    )


def test_a_later_signature_delta_replaces_the_earlier_one() -> None:
    output = decide(thinking_events("first-sig", "second-sig")).message.output
    assert isinstance(output[0], NativeItem)
    assert output[0].item["signature"] == "second-sig"


def test_a_thinking_block_with_only_a_signature_is_kept() -> None:
    events = [
        start_event(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="signature_delta", signature="sig"),
        stop(0),
        block_start(1, {"type": "text", "text": ""}),
        delta(1, type="text_delta", text="Hi"),
        stop(1),
        message_delta("end_turn"),
        MESSAGE_STOP,
    ]
    output = decide(events).message.output
    assert output[0] == NativeItem(
        "reasoning", {"type": "thinking", "thinking": "", "signature": "sig"}
    )


def test_redacted_thinking_is_kept_unchanged() -> None:
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy+opaque=="}
    builder = MessageBuilder("msg_1").start().redacted_thinking(redacted["data"])
    decision = decide(builder.text("Hello").finish("end_turn").events)
    assert decision.message.output == (NativeItem("reasoning", redacted), TextPart("Hello"))


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


# --- 7. stop reasons at message_stop ---------------------------------------------------------


def test_nothing_is_released_before_message_stop() -> None:
    events = edit_message().events[:-1]  # message_delta tool_use arrived, message_stop not
    assert fails(events).kind is FailureKind.STREAM_ENDED


def test_tool_use_without_a_tool_use_block_is_lifecycle() -> None:
    assert fails(text_stream("tool_use")).kind is FailureKind.LIFECYCLE


@pytest.mark.parametrize("reason", ["end_turn", "stop_sequence"])
def test_a_stop_with_a_call_is_lifecycle(reason: str) -> None:
    assert fails(edit_message(reason).events).kind is FailureKind.LIFECYCLE


@pytest.mark.parametrize("reason", ["end_turn", "stop_sequence"])
def test_a_stop_without_calls_completes(reason: str) -> None:
    decision = decide(text_stream(reason))
    assert (decision.finish_reason, decision.message.content) == (FINISH_WITHOUT_CALLS, "Hello")


@pytest.mark.parametrize("reason", ["max_tokens", "model_context_window_exceeded"])
def test_truncation_releases_nothing_but_is_recoverable(reason: str) -> None:
    builder = MessageBuilder("msg_1").start().text("Editing.")
    builder.tool_use("toolu_1", "edit", EDIT, finish=False, close=True)
    failure = fails(builder.finish(reason).events)
    assert failure.kind is FailureKind.RESPONSE_INCOMPLETE
    assert failure.recovery is not None  # --recover answers the cut call, never runs it
    assert [c.id for c in failure.recovery.message.tool_calls] == ["toolu_1"]
    events = decode_all(builder.events)
    terminal = events[-1]
    assert isinstance(terminal, ProviderReportedFailure)
    assert terminal.truncated


def test_refusal_releases_no_call_and_names_the_explanation() -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": "Declined."}
    builder = MessageBuilder("msg_1").start().text("Sure: ")
    events = builder.tool_use("toolu_1", "edit", EDIT).finish("refusal", details).events
    decision = decide(events)
    assert decision.finish_reason == FINISH_REFUSED
    assert decision.message.tool_calls == ()
    assert decision.message.refusal == "Declined."
    assert not any(isinstance(p, CallPart) for p in decision.message.output)


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        ({"type": "refusal", "category": "bio"}, "bio"),
        (None, "Hello"),  # no details: the text streamed
    ],
)
def test_refusal_detail_falls_back_to_category_then_text(
    details: dict[str, Any] | None, expected: str
) -> None:
    events = text_stream("refusal")
    if details is not None:
        events[-2] = message_delta("refusal", stop_details=details)
    # The decoder states the provider's reason; without one, the gate gives the text.
    terminal = decode_all(events)[-1]
    assert isinstance(terminal, ResponseCompleted)
    assert terminal.refusal_detail == ("" if details is None else expected)
    decision = decide(events)
    assert decision.finish_reason == FINISH_REFUSED
    assert decision.message.refusal == expected


def test_pause_turn_is_a_paused_decision_without_calls() -> None:
    builder = MessageBuilder("msg_1").start().text("Searching.").web_search("s1", "q")
    decision = decide(builder.finish("pause_turn").events)
    assert decision.finish_reason == FINISH_PAUSED
    assert decision.message.paused
    assert decision.message.tool_calls == ()


def test_pause_turn_with_a_call_is_lifecycle() -> None:
    assert fails(edit_message("pause_turn").events).kind is FailureKind.LIFECYCLE


def test_an_unknown_stop_reason_is_lifecycle() -> None:
    assert fails(text_stream("future_reason")).kind is FailureKind.LIFECYCLE


def test_message_stop_without_message_delta_or_stop_reason_is_lifecycle() -> None:
    events = text_stream()
    del events[-2]
    assert "without a message_delta" in fails(events).message
    assert "without a stop_reason" in fails(text_stream(None)).message


def test_message_stop_while_a_block_is_open_is_lifecycle() -> None:
    events = [start_event(), TEXT, MESSAGE_STOP]
    assert "still open" in fails(events).message


def test_a_message_delta_while_a_block_is_open_is_lifecycle() -> None:
    # Audit 3, L6: the message_delta describes blocks that have all stopped.
    events = [start_event(), TEXT, message_delta("end_turn"), MESSAGE_STOP]
    failure = fails(events)
    assert failure.kind is FailureKind.LIFECYCLE
    assert "message_delta while content block 0 is open" in failure.message


def test_a_block_after_the_message_delta_is_lifecycle() -> None:
    # Audit 3, L6: a message_delta before the blocks it describes.
    events = [start_event(), message_delta("tool_use")]
    events += MessageBuilder("msg_1").tool_use("toolu_1", "edit", EDIT).events
    events.append(MESSAGE_STOP)
    failure = fails(events)
    assert failure.kind is FailureKind.LIFECYCLE
    assert "content block 0 started after the message_delta" in failure.message


def test_a_second_message_delta_with_another_stop_reason_is_lifecycle() -> None:
    # Audit 3, L6: it no longer silently replaces the first.
    events = text_stream("tool_use")
    events.insert(-1, message_delta("end_turn"))
    failure = fails(events)
    assert failure.kind is FailureKind.LIFECYCLE
    assert "stop_reason changed from 'tool_use' to 'end_turn'" in failure.message


def test_a_repeated_or_null_stop_reason_keeps_the_first() -> None:
    events = text_stream("end_turn")
    events.insert(-1, message_delta("end_turn"))
    events.insert(-1, message_delta(None))
    assert decide(events).finish_reason == FINISH_WITHOUT_CALLS


def data_only(event: Mapping[str, Any]) -> bytes:
    """A frame without an `event:` line."""
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def test_a_frame_without_an_event_line_is_skipped_as_the_sdk_skips_it() -> None:
    # Audit 3, L5: a data-only input_json_delta or message_delta must not change the
    # decision (the official SDK never reads such a frame).
    message = edit_message()
    stream = body(message.events[:-2])  # up to the tool_use's stop
    stream += data_only(message_delta("end_turn"))  # would contradict tool_use
    stream += data_only(delta(1, type="input_json_delta", partial_json=', "x": 1}'))
    stream += body(message.events[-2:])
    assert [call.arguments for call in decide(stream).message.tool_calls] == [EDIT]
    # …and a data-only message_stop ends nothing.
    events = message.events
    cut = body(events[:-1]) + data_only(events[-1])
    with pytest.raises(ResponseFailure) as caught:
        decide(cut)
    assert caught.value.kind is FailureKind.STREAM_ENDED


# --- 8. error events ---------------------------------------------------------------------


def error_event(kind: str, message: str = "Overloaded") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


@pytest.mark.parametrize(
    ("kind", "transient"),
    [
        ("overloaded_error", True),
        ("api_error", True),
        ("rate_limit_error", True),
        ("timeout_error", True),
        ("invalid_request_error", False),
    ],
)
def test_an_error_event_fails_the_response(kind: str, transient: bool) -> None:
    events = [start_event(), TEXT, delta(0, type="text_delta", text="Hi"), error_event(kind)]
    terminal = decode_all(events)[-1]
    assert terminal == ProviderReportedFailure(
        FailureKind.PROVIDER_ERROR, "provider error: Overloaded", kind, transient=transient
    )
    failure = fails(events)
    assert failure.kind is FailureKind.PROVIDER_ERROR
    assert failure.transient is transient


def test_an_error_before_message_start_is_a_transient_provider_error() -> None:
    with pytest.raises(ResponseFailure) as caught:
        decode_all([{"type": "ping"}, error_event("overloaded_error")])
    assert caught.value.kind is FailureKind.PROVIDER_ERROR
    assert caught.value.transient
    assert "overloaded_error" in caught.value.message


# --- 9. end of body -----------------------------------------------------------------------


def test_a_body_ending_before_message_stop_releases_nothing() -> None:
    terminal = decode_all(edit_message().events[:-2])[-1]
    assert isinstance(terminal, ProviderReportedFailure)
    assert terminal.kind is FailureKind.STREAM_ENDED
    assert AnthropicDecoder().end_of_stream() == ()  # nothing started: the client reports it


# --- 10. progress --------------------------------------------------------------------------


def test_ping_unknown_events_and_unknown_deltas_are_progress() -> None:
    events = text_stream()
    events.insert(2, {"type": "ping"})
    events.insert(3, {"type": "future_event", "x": 1})
    events.insert(4, delta(0, type="future_delta", stuff=[1]))
    decoder = AnthropicDecoder()
    assert decoder.decode(ServerSentEvent("ping", b'{"type": "ping"}')) == ()
    assert decide(events).message.content == "Hello"


def test_anything_after_message_stop_fails_the_response() -> None:
    for late in ({"type": "ping"}, {"type": "future_event"}, TEXT):
        with pytest.raises(ResponseFailure) as caught:
            decide([*text_stream(), late])
        assert caught.value.kind is FailureKind.LIFECYCLE


# --- 11. malformed events -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("message_start", b"{not json"),
        ("message_start", b"[1, 2]"),
        ("message_start", b'{"no": "type"}'),
        ("ping", b'{"type": "message_stop"}'),  # the name disagrees with the type
        ("message_start", b'{"type": "message_start", "message": "nope"}'),
        ("message_start", b'{"type": "message_start", "message": {"id": 7}}'),
        ("message_start", b"[" * 100 + b"]" * 100),
        ("message_start", b'{"type": "message_start", "message": {"id": "\xff"}}'),
    ],
)
def test_malformed_events(name: str | None, data: bytes) -> None:
    with pytest.raises(ResponseFailure) as caught:
        AnthropicDecoder().decode(ServerSentEvent(name, data))
    assert caught.value.kind is FailureKind.MALFORMED_EVENT


@pytest.mark.parametrize(
    "bad",
    [
        block_start(0, {"type": "tool_use", "id": 5, "name": "edit", "input": {}}),
        block_start(0, {"type": "tool_use", "id": "t", "name": "edit", "input": "{}"}),
        {"type": "content_block_start", "index": "0", "content_block": {"type": "text"}},
        {"type": "content_block_start", "index": 0, "content_block": []},
        delta(0, type="text_delta", text=3),
    ],
)
def test_malformed_shapes(bad: dict[str, Any]) -> None:
    opened = [start_event(), TEXT] if bad["type"] == "content_block_delta" else [start_event()]
    assert fails([*opened, bad]).kind is FailureKind.MALFORMED_EVENT


def test_a_data_only_stream_releases_nothing() -> None:
    # The official SDK reads none of these frames: neither does lockgate (audit 3, L5).
    payload = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in text_stream())
    with pytest.raises(ResponseFailure) as caught:
        decide(payload)
    assert caught.value.kind is FailureKind.STREAM_ENDED


# --- usage --------------------------------------------------------------------------------


def test_usage_is_cumulative_and_normalized() -> None:
    events = text_stream()
    events[0] = start_event(
        usage={
            "input_tokens": 100,
            "output_tokens": 1,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 50,
        }
    )
    events[-2] = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {
            "output_tokens": 40,
            "input_tokens": 120,  # larger than at the start (server tools): it replaces
            "output_tokens_details": {"thinking_tokens": 12},
        },
    }
    observed: list[Event] = []
    decision = decide(events, observed=observed)
    expected = Usage(
        input_tokens=1170,
        cached_input_tokens=1000,
        output_tokens=40,
        reasoning_tokens=12,
        total_tokens=1210,
        cache_write_tokens=50,
    )
    assert decision.usage == expected
    assert [e for e in observed if isinstance(e, UsageReported)] == [UsageReported(expected)]


def test_usage_of_old_streams_with_only_output_tokens_in_message_delta() -> None:
    assert usage_from({"input_tokens": 9, "output_tokens": 3}, USAGE_FIELDS) == Usage(
        9, 0, 3, 0, 12, 0
    )


def test_usage_is_attached_to_a_truncation_and_not_to_an_error() -> None:
    truncated = decode_all(text_stream("max_tokens"))[-1]
    assert isinstance(truncated, ProviderReportedFailure)
    assert truncated.usage == Usage(10, 0, 5, 0, 15, 0)
    errored = decode_all([start_event(), error_event("api_error")])[-1]
    assert isinstance(errored, ProviderReportedFailure)
    assert errored.usage is None


# --- the lab renderer round trip and fragmentation ------------------------------------------


ROUND_TRIP = Reply(
    "msg_round",
    (
        Say("Ünïcödé ✓ first, "),
        Think("Thinking about 修正.", "sig-round"),
        ProviderTool("add subtracts"),
        Call("toolu_a", "read", {"path": "README.md"}),
        Say("then more."),
        Call("toolu_b", "edit", EDIT, pieces=9),
    ),
    usage=ReplyUsage(input_tokens=500, cached_input_tokens=300, output_tokens=20),
)


def test_a_rendered_reply_decodes_to_the_same_text_and_calls() -> None:
    decision = decide(LAB.events(ROUND_TRIP))
    assert decision.message.content == "Ünïcödé ✓ first, then more."
    assert [(c.id, c.name, dict(c.arguments)) for c in decision.message.tool_calls] == [
        ("toolu_a", "read", {"path": "README.md"}),
        ("toolu_b", "edit", EDIT),
    ]
    kinds = [type(p).__name__ for p in decision.message.output]
    assert kinds == [
        "TextPart",
        "NativeItem",
        "NativeItem",
        "NativeItem",
        "CallPart",
        "TextPart",
        "CallPart",
    ]
    assert decision.usage == Usage(500, 300, 20, 0, 520, 0)


def outcome(payload: bytes, chunks: Sequence[int] | None = None) -> object:
    """The decision, or the failure's kind and message."""
    try:
        return decide(payload, chunks=chunks)
    except ResponseFailure as failure:
        return (failure.kind, failure.message)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 97), min_size=1, max_size=12),
    ending=st.sampled_from(["complete", "truncated", "error", "open", "paused"]),
    crlf=st.booleans(),
)
def test_fragmenting_the_bytes_anywhere_gives_the_same_decision(
    sizes: list[int], ending: str, crlf: bool
) -> None:
    reply = dataclasses.replace(ROUND_TRIP, ending=ending)  # type: ignore[arg-type]
    payload = body(LAB.events(reply))
    if crlf:
        payload = payload.replace(b"\n", b"\r\n")
    whole = outcome(payload)
    assert outcome(payload, sizes) == whole
    assert isinstance(whole, Decision) == (ending == "complete")
