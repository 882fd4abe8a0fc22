"""The Anthropic Messages decoder's rule, lines 1-3: `message_start`, the order of content
blocks, and text (hand-written events only)."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.conversation import TextPart
from lockgate.errors import FailureKind
from lockgate.events import ResponseStarted, TextDelta

from .streams import (
    MESSAGE_STOP,
    TEXT,
    block_start,
    decide,
    decode_all,
    delta,
    fails,
    message_delta,
    start_event,
    stop,
    text_stream,
)

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
