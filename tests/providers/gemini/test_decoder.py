"""The Gemini decoder: every line of its completion rule, accepted and failed closed, usage,
the lab renderer's round trip and fragmentation anywhere (hand-written chunks only)."""

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
    FINISH_WITH_CALLS,
    FINISH_WITHOUT_CALLS,
    NativeOutput,
    ProviderReportedFailure,
    ReasoningDelta,
    ResponseCompleted,
    ResponseProgress,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolCallIdentified,
    ToolCallStarted,
)
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import Decision, ResponseGate
from lockgate.providers.decoding import synthesized_call_id, usage_from
from lockgate.providers.gemini.decoder import FAILED_FINISHES, USAGE_FIELDS, GeminiDecoder
from lockgate.providers.gemini.render import ChunkBuilder, GeminiRenderer, base64_signature
from lockgate.scripted.reply import Call, Reply, ReplyUsage, Say, Think
from lockgate.scripted.script import fragments
from lockgate.sse import SSEDecoder

EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
EDIT_JSON = json.dumps(EDIT, separators=(",", ":"))
LAB = GeminiRenderer()
SIG = "EpwICpkIAXLI2nx-signature=="
USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


def body(chunks: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join(LAB.frame(chunk) for chunk in chunks)


def decode_all(chunks: Sequence[Mapping[str, Any]]) -> list[StreamEvent]:
    """Every normalized event of a stream (end of body included)."""
    sse = SSEDecoder()
    decoder = GeminiDecoder()
    out: list[StreamEvent] = []
    for event in sse.feed(body(chunks)) + sse.finish():
        out.extend(decoder.decode(event))
    out.extend(decoder.end_of_stream())
    return out


def decide(
    chunks: Sequence[Mapping[str, Any]] | bytes,
    tools: Sequence[ToolSpec] = ALL_TOOLS,
    pieces: Sequence[int] | None = None,
) -> Decision:
    """Bytes → SSE → GeminiDecoder → ResponseGate, as the client runs them: the decision is
    released only after the body ended cleanly."""
    payload = chunks if isinstance(chunks, bytes) else body(chunks)
    sse = SSEDecoder()
    decoder = GeminiDecoder()
    gate = ResponseGate(tools, lambda event: None)
    decision: Decision | None = None
    for piece in [payload] if pieces is None else list(fragments(payload, pieces)):
        for event in sse.feed(piece):
            for normalized in decoder.decode(event):
                decision = gate.accept(normalized) or decision
    for event in sse.finish():
        for normalized in decoder.decode(event):
            decision = gate.accept(normalized) or decision
    assert decision is None, "a decision before the end of the body"
    for normalized in decoder.end_of_stream():
        decision = gate.accept(normalized) or decision
    if decision is None:
        raise ResponseFailure(FailureKind.STREAM_ENDED, "no terminal event")
    return decision


def fails(
    chunks: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec] = ALL_TOOLS
) -> ResponseFailure:
    with pytest.raises(ResponseFailure) as caught:
        decide(chunks, tools)
    return caught.value


def chunk(
    *parts: Mapping[str, Any],
    finish: str | None = None,
    index: int | None = 0,
    response_id: str | None = "resp-g1",
    usage: Mapping[str, Any] | None = USAGE,
    **candidate_fields: Any,
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}}
    if finish is not None:
        candidate["finishReason"] = finish
    if index is not None:
        candidate["index"] = index
    candidate.update(candidate_fields)
    payload: dict[str, Any] = {"candidates": [candidate]}
    if usage is not None:
        payload["usageMetadata"] = dict(usage)
    payload["modelVersion"] = "gemini-test"
    if response_id is not None:
        payload["responseId"] = response_id
    return payload


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"text": value, **extra}


def call(name: str = "edit", args: object = EDIT, **extra: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if args is not None:
        function["args"] = args
    function.update({k: v for k, v in extra.items() if k in ("id", "partialArgs", "willContinue")})
    part: dict[str, Any] = {"functionCall": function}
    part.update({k: v for k, v in extra.items() if k not in function})
    return part


EMPTY = text("")


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


# --- 6. one candidate -----------------------------------------------------------------------------


def test_a_candidate_without_an_index_is_candidate_zero() -> None:
    decision = decide([chunk(call(), finish="STOP", index=None)])
    assert decision.message.tool_calls[0].name == "edit"


@pytest.mark.parametrize("index", [1, 2, -1])
def test_a_candidate_with_another_index_is_lifecycle(index: int) -> None:
    failure = fails([chunk(text("Hi")), chunk(call(), finish="STOP", index=index)])
    assert failure.kind is FailureKind.LIFECYCLE
    assert "second candidate" in failure.message


def test_two_candidates_in_one_chunk_are_lifecycle() -> None:
    two = chunk(text("A"), finish="STOP")
    two["candidates"].append({"content": {"parts": [text("B")]}, "index": 1})
    assert fails([two]).kind is FailureKind.LIFECYCLE


# --- 7. parts -------------------------------------------------------------------------------------


def test_empty_text_parts_are_nothing() -> None:
    events = decode_all([chunk(EMPTY), chunk(text("Hi"), EMPTY, finish="STOP")])
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta("Hi")]


def test_thoughts_are_reasoning_never_answer_text_and_one_native_item_per_run() -> None:
    chunks = [
        chunk(text("Look ", thought=True)),
        chunk(text("first.", thought=True)),
        chunk(text("The bug is in add.")),
        chunk(EMPTY, finish="STOP"),
    ]
    events = decode_all(chunks)
    assert [e for e in events if isinstance(e, ReasoningDelta)] == [
        ReasoningDelta("Look ", "summary"),
        ReasoningDelta("first.", "summary"),
    ]
    natives = [e for e in events if isinstance(e, NativeOutput)]
    assert [(n.kind, dict(n.item)) for n in natives] == [
        ("reasoning", {"text": "Look first.", "thought": True})
    ]
    decision = decide(chunks)
    assert decision.message.content == "The bug is in add."
    assert decision.message.output == (
        NativeItem("reasoning", {"text": "Look first.", "thought": True}),
        TextPart("The bug is in add."),
    )


def test_a_thought_run_at_the_end_is_kept_before_the_completion() -> None:
    output = decide([chunk(text("Thinking.", thought=True), finish="STOP")]).message.output
    assert output == (NativeItem("reasoning", {"text": "Thinking.", "thought": True}),)


def test_a_thought_signature_stays_with_its_thought() -> None:
    chunks = [
        chunk(text("Plan.", thought=True, thoughtSignature=SIG)),
        chunk(call(), finish="STOP"),
    ]
    output = decide(chunks).message.output
    assert output[0] == NativeItem(
        "reasoning", {"text": "Plan.", "thought": True, "thoughtSignature": SIG}
    )


def test_two_signed_thoughts_stay_two_parts() -> None:
    chunks = [
        chunk(text("One.", thought=True, thoughtSignature="s1")),
        chunk(text("Two.", thought=True, thoughtSignature="s2")),
        chunk(text("Done."), finish="STOP"),
    ]
    natives = [p for p in decide(chunks).message.output if isinstance(p, NativeItem)]
    assert [dict(n.item)["thoughtSignature"] for n in natives] == ["s1", "s2"]


def test_a_call_arrives_whole_with_compact_arguments() -> None:
    args = {"path": "café.py", "nested": {"a": [1, 2]}}
    events = decode_all([chunk(call("read", args, id="fc9"), finish="STOP")])
    assert ToolCallStarted("0", "fc9", "read", '{"path":"café.py","nested":{"a":[1,2]}}') in events
    assert not any(isinstance(e, ToolCallIdentified) for e in events)


@pytest.mark.parametrize("args", [None, {}])
def test_absent_or_empty_args_are_an_empty_object(args: object) -> None:
    part = call("discover", args)
    if args is None:
        part["functionCall"]["args"] = None
    decision = decide([chunk(part, finish="STOP")])
    assert decision.message.tool_calls[0].arguments_json == "{}"
    missing = {"functionCall": {"name": "discover"}}
    assert decide([chunk(missing, finish="STOP")]).message.tool_calls[0].arguments_json == "{}"


def test_calls_without_ids_get_synthesized_ids_just_before_the_terminal_event() -> None:
    events = decode_all(
        [chunk(call("read", {"path": "a"}), call("read", {"path": "b"}), finish="STOP")]
    )
    assert [e.key for e in events if isinstance(e, ToolCallStarted)] == ["0", "1"]
    assert events[-3:] == [
        ToolCallIdentified("0", synthesized_call_id("resp-g1", "0")),
        ToolCallIdentified("1", synthesized_call_id("resp-g1", "1")),
        ResponseCompleted(FINISH_WITH_CALLS, usage_from(USAGE, USAGE_FIELDS)),
    ]


def test_a_server_id_is_kept_and_a_missing_one_synthesized_beside_it() -> None:
    chunks = [
        chunk(call("read", {"path": "a"}, id="srv1"), call("read", {"path": "b"}), finish="STOP")
    ]
    ids = [c.id for c in decide(chunks).message.tool_calls]
    assert ids == ["srv1", synthesized_call_id("resp-g1", "1")]


def test_a_signature_on_a_call_is_kept_right_after_it() -> None:
    decision = decide([chunk(call(id="fc1", thoughtSignature=SIG), finish="STOP")])
    assert decision.message.output == (
        CallPart("fc1"),
        NativeItem("reasoning", {"thoughtSignature": SIG}),
    )


def test_a_signature_on_text_is_kept_right_after_that_text() -> None:
    chunks = [
        chunk(text("Fixing", thoughtSignature=SIG)),
        chunk(text(" add.")),
        chunk(EMPTY, finish="STOP"),
    ]
    decision = decide(chunks)
    assert decision.message.content == "Fixing add."
    assert decision.message.output == (
        TextPart("Fixing"),
        NativeItem("reasoning", {"thoughtSignature": SIG}),
        TextPart(" add."),
    )


def test_a_late_signature_signs_the_unsigned_call_before_it() -> None:
    chunks = [chunk(call(id="fc1")), chunk(text("", thoughtSignature=SIG), finish="STOP")]
    assert decide(chunks).message.output == (
        CallPart("fc1"),
        NativeItem("reasoning", {"thoughtSignature": SIG}),
    )


def test_a_part_with_only_a_signature_is_a_late_signature_too() -> None:
    chunks = [chunk(call(id="fc1")), chunk({"thoughtSignature": SIG}, finish="STOP")]
    assert decide(chunks).message.output[1] == NativeItem("reasoning", {"thoughtSignature": SIG})


@pytest.mark.parametrize(
    "before",
    [
        [chunk(text("Answer."))],
        [chunk(call(id="fc1", thoughtSignature="first"))],
        [],
    ],
)
def test_a_late_signature_after_anything_else_is_a_part_of_its_own(
    before: list[dict[str, Any]],
) -> None:
    output = decide([*before, chunk(text("", thoughtSignature=SIG), finish="STOP")]).message.output
    assert output[-1] == NativeItem("reasoning", {"text": "", "thoughtSignature": SIG})


@pytest.mark.parametrize(
    "part",
    [
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}},
        {"toolCall": {"toolType": "GOOGLE_SEARCH_WEB", "id": "t1"}, "thoughtSignature": SIG},
        {"toolResponse": {"toolType": "GOOGLE_SEARCH_WEB", "id": "t1"}},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"fileData": {"mimeType": "image/png", "fileUri": "gs://b/f.png"}},
    ],
)
def test_provider_parts_are_kept_unchanged_and_never_calls(part: dict[str, Any]) -> None:
    events = decode_all([chunk(part), chunk(text("Done."), finish="STOP")])
    assert not any(isinstance(e, ToolCallStarted) for e in events)
    [native] = [e for e in events if isinstance(e, NativeOutput)]
    assert (native.kind, dict(native.item)) == ("provider_output", part)
    assert native.size > 0
    decision = decide([chunk(part), chunk(text("Done."), finish="STOP")])
    assert decision.message.tool_calls == ()
    assert decision.message.output[0] == NativeItem("provider_output", part)


def test_a_function_response_from_the_model_cannot_be_replayed() -> None:
    part = {"functionResponse": {"name": "edit", "response": {}}}
    assert fails([chunk(part, finish="STOP")]).kind is FailureKind.UNSUPPORTED_OUTPUT


def test_an_unknown_part_kind_cannot_be_replayed() -> None:
    assert fails([chunk({"hologram": {}}, finish="STOP")]).kind is FailureKind.UNSUPPORTED_OUTPUT


@pytest.mark.parametrize("extra", [{"partialArgs": [{"jsonPath": "$.a"}]}, {"willContinue": True}])
def test_streamed_call_arguments_are_unsupported(extra: dict[str, Any]) -> None:
    assert fails([chunk(call(**extra), finish="STOP")]).kind is FailureKind.UNSUPPORTED_OUTPUT


def test_a_part_with_only_metadata_is_nothing() -> None:
    chunks = [chunk({"partMetadata": {"x": 1}}), chunk(text("Hi"), finish="STOP")]
    assert decide(chunks).message.output == (TextPart("Hi"),)


def test_a_call_to_an_unexposed_tool_is_the_gates_business() -> None:
    assert fails([chunk(call("shell", {"command": "rm"}), finish="STOP")]).kind is (
        FailureKind.INVALID_BATCH
    )


def _client_calls(chunks: Sequence[Mapping[str, Any]]) -> list[tuple[str | None, object]]:
    """The calls google-genai reports for these chunks (`GenerateContentResponse.function_calls`
    of each chunk, as `generate_content_stream` yields them)."""
    from google.genai import types

    found: list[tuple[str | None, object]] = []
    for payload in chunks:
        response = types.GenerateContentResponse.model_validate(payload)
        found.extend((c.name, c.args) for c in response.function_calls or [])
    return found


def test_a_call_in_a_thought_part_is_read_and_judged_as_google_genai_reads_it() -> None:
    # google-genai's `function_calls` takes every part's `function_call`, whatever its
    # `thought` flag (which only keeps text out of `.text`): a client runs it, so the gate
    # judges it, as a call.
    chunks = [chunk({"thought": True, **call()}, finish="STOP")]
    assert _client_calls(chunks) == [("edit", EDIT)]
    decision = decide(chunks)
    assert [(c.name, c.arguments) for c in decision.message.tool_calls] == [("edit", EDIT)]
    unexposed = [chunk({"thought": True, **call("shell", {"command": "rm -rf /"})}, finish="STOP")]
    assert fails(unexposed).kind is FailureKind.INVALID_BATCH


def test_a_signed_call_in_a_thought_part_keeps_its_signature() -> None:
    events = decode_all([chunk({"thought": True, **call(thoughtSignature=SIG)}, finish="STOP")])
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    assert [(e.name, e.arguments) for e in started] == [("edit", EDIT_JSON)]
    assert NativeOutput("reasoning", {"thoughtSignature": SIG}, len(SIG)) in events


@pytest.mark.parametrize(
    "part",
    [
        {"text": "Done.", **call()},
        {"text": "", **call()},
        {"thought": True, "text": "Let me edit.", **call()},
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}, **call()},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}, "text": "1"},
    ],
)
def test_a_part_with_two_kinds_of_data_is_refused(part: dict[str, Any]) -> None:
    # The API's Part holds one of its data fields (a oneof), so Google never sends this;
    # google-genai would read each field (the text as text, the call as a call), which no
    # single judged part could replay. Refused, never read as text alone.
    chunks = [chunk(part, finish="STOP")]
    if "functionCall" in part:
        assert _client_calls(chunks) == [("edit", EDIT)]
    failure = fails(chunks)
    assert failure.kind is FailureKind.MALFORMED_EVENT
    assert "one kind of data" in failure.message


def test_a_provider_part_marked_thought_is_kept_whole() -> None:
    part = {"thought": True, "executableCode": {"language": "PYTHON", "code": "print(1)"}}
    decision = decide([chunk(part), chunk(text("Done."), finish="STOP")])
    assert decision.message.output[0] == NativeItem("provider_output", part)


def test_null_data_fields_are_absent() -> None:
    decision = decide([chunk({"text": "Hi", "functionCall": None}, finish="STOP")])
    assert (decision.message.content, decision.message.tool_calls) == ("Hi", ())


# --- 8. malformed chunks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[1, 2]",
        '{"candidates": {}}',
        '{"candidates": "x"}',
        '{"candidates": [7]}',
        '{"candidates": [{"index": "0"}]}',
        '{"candidates": [{"content": []}]}',
        '{"candidates": [{"content": {"parts": {}}}]}',
        '{"candidates": [{"content": {"parts": [7]}}]}',
        '{"candidates": [{"content": {"parts": [{"text": 7}]}}]}',
        '{"candidates": [{"content": {"parts": [{"text": 7, "thought": true}]}}]}',
        '{"candidates": [{"content": {"parts": [{"text": "x", "thoughtSignature": 7}]}}]}',
        '{"candidates": [{"content": {"parts": [{"functionCall": []}]}}]}',
        '{"candidates": [{"content": {"parts": [{"functionCall": {"name": 7}}]}}]}',
        '{"candidates": [{"content": {"parts": [{"functionCall": {"name": "a", "id": 7}}]}}]}',
        '{"candidates": [{"content": {"parts": [{"functionCall": {"name": "a", "args": "{}"}}]}}]}',
        '{"candidates": [{"content": {"parts": [{"functionCall": {"name": "a", "args": []}}]}}]}',
        '{"candidates": [{"finishReason": 1}]}',
        '{"usageMetadata": []}',
        '{"responseId": 7}',
        '{"promptFeedback": []}',
        '{"promptFeedback": {"blockReason": 3}}',
        "[" * 200 + "]" * 200,
    ],
)
def test_malformed_chunks(payload: str) -> None:
    first = 'data: {"candidates": [{"content": {"parts": [{"text": "ok"}]}}]}\r\n\r\n'
    raw = f"{first}data: {payload}\r\n\r\n"
    with pytest.raises(ResponseFailure) as caught:
        decide(raw.encode())
    assert caught.value.kind is FailureKind.MALFORMED_EVENT


def test_a_cut_frame_at_the_end_of_the_body_is_malformed() -> None:
    payload = body([chunk(text("Hi"), finish="STOP")]) + b'data: {"candidates": [{"con\r\n\r\n'
    with pytest.raises(ResponseFailure) as caught:
        decide(payload)
    assert caught.value.kind is FailureKind.MALFORMED_EVENT


def test_a_named_event_is_malformed_for_gemini_clients_read_data_lines_only() -> None:
    payload = b"event: message\r\n" + body([chunk(text("Hi"), finish="STOP")])
    with pytest.raises(ResponseFailure) as caught:
        decide(payload)
    assert caught.value.kind is FailureKind.MALFORMED_EVENT
    assert "'message'" in caught.value.message


# --- usage ----------------------------------------------------------------------------------------


def test_usage_maps_every_field() -> None:
    raw = {
        "promptTokenCount": 147,
        "cachedContentTokenCount": 40,
        "toolUsePromptTokenCount": 360,
        "candidatesTokenCount": 108,
        "thoughtsTokenCount": 168,
        "totalTokenCount": 783,
    }
    assert usage_from(raw, USAGE_FIELDS) == Usage(
        input_tokens=507,
        cached_input_tokens=40,
        output_tokens=276,
        reasoning_tokens=168,
        total_tokens=783,
    )


def test_usage_total_falls_back_to_input_plus_output() -> None:
    assert usage_from(
        {"candidatesTokenCount": 23, "thoughtsTokenCount": 67}, USAGE_FIELDS
    ) == Usage(0, 0, 90, 67, 90)
    assert (
        usage_from({"promptTokenCount": "x", "candidatesTokenCount": -3}, USAGE_FIELDS) == Usage()
    )


def test_the_last_usage_counts_never_the_sum() -> None:
    first = {"promptTokenCount": 8, "candidatesTokenCount": 3, "totalTokenCount": 11}
    last = {"promptTokenCount": 427, "candidatesTokenCount": 9, "totalTokenCount": 436}
    chunks = [chunk(text("a"), usage=first), chunk(text("b"), finish="STOP", usage=last)]
    assert decide(chunks).usage == Usage(427, 0, 9, 0, 436)


def test_no_usage_reported_is_none() -> None:
    assert decide([chunk(text("Hi"), finish="STOP", usage=None)]).usage is None


# --- the lab renderer's round trip and fragmentation ----------------------------------------------

ROUND_TRIP = Reply(
    "resp_round_trip",
    (
        Think("Check the README.", "sig-round-trip"),
        Say("Ünïcödé fix — "),
        Call("call_1", "edit", EDIT),
        Call("", "read", {"path": "README.md"}),
    ),
    usage=ReplyUsage(input_tokens=50, output_tokens=30, reasoning_tokens=10),
)


def test_a_rendered_reply_round_trips() -> None:
    decision = decide(LAB.events(ROUND_TRIP))
    message = decision.message
    assert message.content == "Ünïcödé fix — "
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
        ("call_1", "edit", EDIT),
        (synthesized_call_id("resp_round_trip", "1"), "read", {"path": "README.md"}),
    ]
    assert message.output[0] == NativeItem(
        "reasoning", {"text": "Check the README.", "thought": True}
    )
    signature = base64_signature("sig-round-trip")
    assert message.output[2] == NativeItem("reasoning", {"thoughtSignature": signature})
    assert decision.usage == Usage(50, 0, 30, 10, 80)


def outcome(payload: bytes, sizes: Sequence[int] | None = None) -> object:
    """A comparable outcome: the released shape, or the failure's kind and message."""
    try:
        decision = decide(payload, pieces=sizes)
    except ResponseFailure as failure:
        return (failure.kind, failure.message)
    message = decision.message
    calls = [(c.name, c.arguments_json) for c in message.tool_calls]
    return (message.content, calls, message.output[:1], decision.usage, decision.finish_reason)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 97), min_size=1, max_size=12),
    ending=st.sampled_from(["complete", "truncated", "error", "open"]),
    lf=st.booleans(),
)
def test_fragmenting_the_bytes_anywhere_gives_the_same_decision(
    sizes: list[int], ending: str, lf: bool
) -> None:
    reply = dataclasses.replace(ROUND_TRIP, ending=ending)  # type: ignore[arg-type]
    payload = body(LAB.events(reply))
    if lf:
        payload = payload.replace(b"\r\n", b"\n")
    whole = outcome(payload)
    assert outcome(payload, sizes) == whole
    assert isinstance(whole, tuple)
    assert (whole[0] == "Ünïcödé fix — ") == (ending == "complete")


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 31), min_size=1, max_size=8))
def test_fragmenting_a_late_signature_stream_gives_the_same_replayable_output(
    sizes: list[int],
) -> None:
    builder = ChunkBuilder("resp-late").call("edit", EDIT)
    builder.chunk([{"text": "", "thoughtSignature": SIG}], "STOP")
    payload = body(builder.events)
    assert decide(payload, pieces=sizes).message.output == decide(payload).message.output
