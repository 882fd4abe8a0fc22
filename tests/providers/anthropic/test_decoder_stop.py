"""The Anthropic Messages decoder's rule, lines 7-10: stop reasons at `message_stop`, error
events, the end of the body and progress."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from lockgate.conversation import CallPart
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import (
    FINISH_PAUSED,
    FINISH_REFUSED,
    FINISH_WITHOUT_CALLS,
    ProviderReportedFailure,
    ResponseCompleted,
)
from lockgate.providers.anthropic.decoder import AnthropicDecoder
from lockgate.providers.anthropic.render import MessageBuilder
from lockgate.sse import ServerSentEvent

from .streams import (
    EDIT,
    MESSAGE_STOP,
    TEXT,
    body,
    decide,
    decode_all,
    delta,
    edit_message,
    error_event,
    fails,
    message_delta,
    start_event,
    text_stream,
)

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
