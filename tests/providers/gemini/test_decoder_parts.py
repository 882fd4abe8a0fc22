"""The Gemini decoder's rule, lines 6-7: one candidate, and its parts (text, thoughts,
signatures, calls, provider parts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from lockgate.conversation import CallPart, NativeItem, TextPart
from lockgate.errors import FailureKind
from lockgate.events import (
    FINISH_WITH_CALLS,
    NativeOutput,
    ReasoningDelta,
    ResponseCompleted,
    TextDelta,
    ToolCallIdentified,
    ToolCallStarted,
)
from lockgate.providers.decoding import synthesized_call_id, usage_from
from lockgate.providers.gemini.decoder import USAGE_FIELDS

from .streams import (
    EDIT,
    EDIT_JSON,
    EMPTY,
    SIG,
    USAGE,
    call,
    chunk,
    decide,
    decode_all,
    fails,
    text,
)

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
