"""The Gemini decoder's rule, lines 1-2: the start and the response id, and completion by STOP
and then a clean end (hand-written chunks only)."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.conversation import TextPart, Usage
from lockgate.errors import FailureKind
from lockgate.events import (
    FINISH_WITH_CALLS,
    FINISH_WITHOUT_CALLS,
    ResponseCompleted,
    ResponseProgress,
    ResponseStarted,
)
from lockgate.providers.gemini.decoder import GeminiDecoder
from lockgate.sse import SSEDecoder

from .streams import (
    EDIT_JSON,
    EMPTY,
    SIG,
    USAGE,
    body,
    call,
    chunk,
    decide,
    decode_all,
    fails,
    text,
)

# --- 1. the start and the response id ----------------------------------------------------------


def test_the_first_chunk_starts_the_response_with_its_response_id() -> None:
    events = decode_all([chunk(text("Hi"), finish="STOP")])
    assert events[0] == ResponseStarted(response_id="resp-g1", model="gemini-test")
    assert all(event.response_id is None for event in events[1:])
    assert decide([chunk(text("Hi"), finish="STOP")]).message.response_id == "resp-g1"


def test_a_response_without_an_id_gets_a_synthesized_one() -> None:
    started = decode_all([chunk(text("Hi"), finish="STOP", response_id=None)])[0]
    assert isinstance(started, ResponseStarted)
    assert started.response_id is not None
    assert started.response_id.startswith("gemini-lockgate-")
    assert len(started.response_id.removeprefix("gemini-lockgate-")) == 12


def test_a_usage_only_first_chunk_starts_the_response_too() -> None:
    first = {"usageMetadata": USAGE, "responseId": "resp-g1"}
    decision = decide([first, chunk(text("Hi")), chunk(EMPTY, finish="STOP")])
    assert decision.message.content == "Hi"


def test_a_chunk_naming_another_response_is_lifecycle() -> None:
    failure = fails([chunk(text("Hi")), chunk(EMPTY, finish="STOP", response_id="resp-other")])
    assert failure.kind is FailureKind.LIFECYCLE
    assert "resp-other" in failure.message


def test_later_chunks_without_a_response_id_are_the_same_response() -> None:
    chunks = [chunk(text("Hi")), chunk(text("!"), finish="STOP", response_id=None)]
    assert decide(chunks).message.content == "Hi!"


def test_a_first_chunk_without_an_id_does_not_bind_later_ones() -> None:
    chunks = [chunk(text("Hi"), response_id=None), chunk(EMPTY, finish="STOP")]
    assert decide(chunks).message.content == "Hi"


# --- 2. completion: STOP and then a clean end ----------------------------------------------------


def test_text_with_stop_and_a_clean_end_completes_without_calls() -> None:
    chunks = [chunk(text("The bug ")), chunk(text("is in add."), finish="STOP")]
    decision = decide(chunks)
    assert decision.finish_reason == FINISH_WITHOUT_CALLS
    assert decision.message.content == "The bug is in add."
    assert decision.message.output == (TextPart("The bug is in add."),)


def test_a_call_with_stop_completes_with_calls() -> None:
    decision = decide([chunk(text("Fixing."), call(id="fc1"), finish="STOP")])
    assert decision.finish_reason == FINISH_WITH_CALLS
    [released] = decision.message.tool_calls
    assert (released.id, released.name, released.arguments_json) == ("fc1", "edit", EDIT_JSON)


def test_nothing_is_released_at_the_stop_chunk_itself() -> None:
    decoder = GeminiDecoder()
    sse = SSEDecoder()
    at_stop = [
        e for ev in sse.feed(body([chunk(call(), finish="STOP")])) for e in decoder.decode(ev)
    ]
    assert not any(isinstance(event, ResponseCompleted) for event in at_stop)
    assert any(isinstance(event, ResponseCompleted) for event in decoder.end_of_stream())


def test_a_clean_end_before_any_finish_is_stream_ended() -> None:
    failure = fails([chunk(text("Fixing.")), chunk(call())])
    assert failure.kind is FailureKind.STREAM_ENDED


def test_an_empty_body_releases_nothing_from_the_decoder() -> None:
    assert GeminiDecoder().end_of_stream() == ()


def test_a_usage_only_chunk_may_follow_the_finish_and_its_usage_counts() -> None:
    late = {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}
    chunks = [chunk(text("Hi"), finish="STOP"), {"usageMetadata": late, "responseId": "resp-g1"}]
    decision = decide(chunks)
    assert decision.usage == Usage(12, 0, 7, 0, 19)


@pytest.mark.parametrize(
    "after",
    [
        chunk(EMPTY),
        chunk(),
        chunk(EMPTY, finish="STOP"),
        {"candidates": [{"index": 0}], "responseId": "resp-g1"},
        {"candidates": [], "responseId": "resp-g1"},
    ],
)
def test_content_free_chunks_and_the_same_finish_may_follow(after: dict[str, Any]) -> None:
    assert decide([chunk(text("Hi"), finish="STOP"), after]).message.content == "Hi"


@pytest.mark.parametrize(
    "after",
    [
        chunk(text("more")),
        chunk(call()),
        chunk(text("", thoughtSignature=SIG)),
        chunk({"executableCode": {"language": "PYTHON", "code": "1"}}),
        chunk(text("x", thought=True)),
    ],
)
def test_content_after_the_finish_is_lifecycle_at_once(after: dict[str, Any]) -> None:
    failure = fails([chunk(text("Hi"), finish="STOP"), after])
    assert failure.kind is FailureKind.LIFECYCLE
    assert "after finishReason STOP" in failure.message


def test_another_finish_after_stop_is_lifecycle() -> None:
    failure = fails([chunk(call(), finish="STOP"), chunk(EMPTY, finish="MAX_TOKENS")])
    assert failure.kind is FailureKind.LIFECYCLE
    assert "changed from STOP" in failure.message


def test_anything_after_the_terminal_event_reaches_the_gate_as_progress() -> None:
    decoder = GeminiDecoder()
    sse = SSEDecoder()
    events = sse.feed(body([chunk(text("Hi"), finish="STOP")]))
    for event in events:
        decoder.decode(event)
    assert any(isinstance(e, ResponseCompleted) for e in decoder.end_of_stream())
    assert decoder.decode(events[0]) == (ResponseProgress(),)
