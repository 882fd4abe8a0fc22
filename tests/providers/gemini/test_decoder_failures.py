"""The Gemini decoder's rule, lines 3-5: every other finish fails closed at once, error objects
inside the stream, and a blocked prompt."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.conversation import Usage
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import ProviderReportedFailure
from lockgate.providers.decoding import synthesized_call_id, usage_from
from lockgate.providers.gemini.decoder import FAILED_FINISHES, USAGE_FIELDS, GeminiDecoder
from lockgate.sse import SSEDecoder

from .streams import USAGE, body, call, chunk, decide, decode_all, fails, text

# --- 3. every other finish fails closed at once ---------------------------------------------------


@pytest.mark.parametrize("reason", sorted(FAILED_FINISHES))
def test_every_failing_finish_fails_closed_with_its_kind(reason: str) -> None:
    finish = FAILED_FINISHES[reason]
    kind, truncated = finish.failure, finish.truncated
    assert kind is not None
    assert finish.completed is None
    decoder = GeminiDecoder()
    sse = SSEDecoder()
    events = [
        e
        for ev in sse.feed(body([chunk(text("Editing."), call(), finish=reason)]))
        for e in decoder.decode(ev)
    ]
    failure = events[-1]
    assert isinstance(failure, ProviderReportedFailure)
    assert (failure.kind, failure.code, failure.truncated) == (kind, reason, truncated)
    assert failure.usage == usage_from(USAGE, USAGE_FIELDS)
    assert decoder.end_of_stream() == ()
    with pytest.raises(ResponseFailure) as caught:
        decide([chunk(text("Editing."), call(), finish=reason)])
    assert caught.value.kind is kind


def test_the_failure_table_is_the_documented_one() -> None:
    kinds = {reason: finish.failure for reason, finish in FAILED_FINISHES.items()}
    assert kinds["MAX_TOKENS"] is FailureKind.RESPONSE_INCOMPLETE
    for reason in ("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "LANGUAGE"):
        assert kinds[reason] is FailureKind.RESPONSE_INCOMPLETE
    for reason in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"):
        assert kinds[reason] is FailureKind.INVALID_BATCH
    for reason in ("MISSING_THOUGHT_SIGNATURE", "OTHER"):
        assert kinds[reason] is FailureKind.RESPONSE_FAILED
    assert {reason for reason, finish in FAILED_FINISHES.items() if finish.truncated} == {
        "MAX_TOKENS",
        "CONTINUATION",
    }
    assert "STOP" not in FAILED_FINISHES


def test_an_unknown_finish_is_lifecycle() -> None:
    failure = fails([chunk(call(), finish="SOMETHING_NEW")])
    assert failure.kind is FailureKind.LIFECYCLE
    assert "SOMETHING_NEW" in failure.message


def test_the_finish_message_is_part_of_the_failure() -> None:
    said = "Malformed function call: print(default_api.edit("
    failure = fails([chunk(finish="MALFORMED_FUNCTION_CALL", finishMessage=said)])
    assert failure.kind is FailureKind.INVALID_BATCH
    assert said in failure.message


def test_a_parsed_call_does_not_run_under_malformed_function_call() -> None:
    failure = fails([chunk(call(id="fc1")), chunk(finish="MALFORMED_FUNCTION_CALL")])
    assert failure.kind is FailureKind.INVALID_BATCH
    assert failure.recovery is None


def test_max_tokens_with_a_call_offers_a_recovery_with_the_synthesized_id() -> None:
    failure = fails([chunk(text("Editing."), call(), finish="MAX_TOKENS")])
    assert failure.kind is FailureKind.RESPONSE_INCOMPLETE
    assert failure.recovery is not None
    [recovered] = failure.recovery.message.tool_calls
    assert recovered.id == synthesized_call_id("resp-g1", "0")
    assert failure.recovery.observations[0].startswith("error: the response was truncated")


def test_a_safety_finish_on_a_chunk_without_content_fails_closed() -> None:
    chunks = [chunk(call(id="fc1")), {"candidates": [{"finishReason": "SAFETY", "index": 0}]}]
    assert fails(chunks).kind is FailureKind.RESPONSE_INCOMPLETE


# --- 4. error objects inside the stream -----------------------------------------------------------


def error_chunk(code: int, status: str, message: str = "failed", **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, **extra}}


def test_an_error_chunk_after_content_is_provider_error() -> None:
    decoder = GeminiDecoder()
    sse = SSEDecoder()
    frames = sse.feed(
        body([chunk(text("Starting.")), error_chunk(503, "UNAVAILABLE", "Overloaded")])
    )
    events = [e for ev in frames for e in decoder.decode(ev)]
    failure = events[-1]
    assert isinstance(failure, ProviderReportedFailure)
    assert failure.kind is FailureKind.PROVIDER_ERROR
    assert (failure.message, failure.code, failure.transient) == (
        "provider error: Overloaded",
        "503",  # the one rule's code: the code, as text (decoding.read_error)
        True,
    )
    assert failure.usage == usage_from(USAGE, USAGE_FIELDS)


def test_an_error_before_anything_else_is_raised_by_the_decoder() -> None:
    decoder = GeminiDecoder()
    [event] = SSEDecoder().feed(body([error_chunk(500, "INTERNAL", "An internal error")]))
    with pytest.raises(ResponseFailure) as caught:
        decoder.decode(event)
    assert caught.value.kind is FailureKind.PROVIDER_ERROR
    assert caught.value.transient
    assert str(caught.value) == "provider_error: provider error: An internal error [500]"


QUOTA_DAY = {
    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
    "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}],
}


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (error_chunk(503, "UNAVAILABLE"), True),
        (error_chunk(500, "INTERNAL"), True),
        (error_chunk(504, "DEADLINE_EXCEEDED"), True),
        (error_chunk(429, "RESOURCE_EXHAUSTED"), True),
        (error_chunk(429, "RESOURCE_EXHAUSTED", details=[QUOTA_DAY]), False),
        (error_chunk(400, "INVALID_ARGUMENT"), False),
        (error_chunk(403, "PERMISSION_DENIED"), False),
        ({"error": {"code": 502, "message": "bad gateway"}}, True),
        ({"error": {"code": 429}}, True),
        ({"error": "plain words"}, False),
    ],
)
def test_error_chunk_transience(error: dict[str, Any], transient: bool) -> None:
    with pytest.raises(ResponseFailure) as caught:
        decide([chunk(text("Hi")), error])
    assert caught.value.kind is FailureKind.PROVIDER_ERROR
    assert caught.value.transient is transient


# --- 5. a blocked prompt --------------------------------------------------------------------------


def test_a_blocked_prompt_is_response_incomplete_with_its_reason() -> None:
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY", "blockReasonMessage": "unsafe prompt"},
        "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
        "responseId": "resp-g1",
    }
    events = decode_all([blocked])
    failure = events[-1]
    assert isinstance(failure, ProviderReportedFailure)
    assert (failure.kind, failure.code) == (FailureKind.RESPONSE_INCOMPLETE, "SAFETY")
    assert "unsafe prompt" in failure.message
    assert failure.usage == Usage(9, 0, 0, 0, 9)
    assert fails([blocked]).kind is FailureKind.RESPONSE_INCOMPLETE


def test_prompt_feedback_without_a_block_reason_is_progress() -> None:
    first = chunk(text("Hi"), finish="STOP")
    first["promptFeedback"] = {"safetyRatings": []}
    assert decide([first]).message.content == "Hi"
