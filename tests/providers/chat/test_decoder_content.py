"""Text, refusal and reasoning in a Chat Completions stream: what is shown, what is kept for
replay, and the bounds on merged `reasoning_details`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.conversation import NativeItem, RefusalPart, TextPart
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import (
    ReasoningDelta,
    RefusalDelta,
    ResponseProgress,
    ResponseStarted,
    TextDelta,
)
from lockgate.providers.chat.decoder import (
    MAX_REASONING_DETAILS_CHARS,
    MAX_REASONING_DETAILS_ENTRIES,
    ChatDecoder,
)
from lockgate.sse import ServerSentEvent

from .streams import DONE, READ_JSON, calls, chunk, decode_all, fragment, run, text

# --- text, refusal and reasoning ---------------------------------------------------------------


def test_null_absent_and_empty_content_are_alike() -> None:
    events = decode_all(chunk({"content": None}), chunk({"content": ""}), chunk({"role": "x"}))
    assert [type(e) for e in events] == [ResponseStarted]


def test_mistral_typed_content_parts() -> None:
    outcome = run(
        chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "4."}]}]}),
        chunk(
            {
                "content": [
                    {
                        "type": "thinking",
                        "thinking": [{"type": "text", "text": "!"}],
                        "closed": True,
                    },
                    {"type": "text", "text": "1"},
                ]
            }
        ),
        chunk(
            {
                "content": [
                    {"type": "image_url", "image_url": "x"},
                    {"type": "thinking", "thinking": []},
                ]
            }
        ),
        chunk({"content": "44"}, "stop"),
        DONE,
    )
    assert outcome.decision.message.content == "144"
    assert [e.text for e in outcome.seen if isinstance(e, ReasoningDelta)] == ["4.", "!"]


def test_refusal_is_kept_apart_from_text() -> None:
    outcome = run(
        chunk({"role": "assistant", "content": None, "refusal": ""}),
        chunk({"refusal": "I'm"}),
        chunk({"refusal": " sorry"}),
        chunk({}, "stop"),
        DONE,
    )
    message = outcome.decision.message
    assert (message.content, message.refusal) == ("", "I'm sorry")
    assert message.output == (RefusalPart("I'm sorry"),)
    assert [e.text for e in outcome.seen if isinstance(e, RefusalDelta)] == ["I'm", " sorry"]


def test_reasoning_content_is_shown_and_replayed() -> None:
    # DeepSeek / llama.cpp: reasoning_content pieces, then the call.
    outcome = run(
        chunk({"reasoning_content": "Let me "}),
        chunk({"reasoning_content": "read."}),
        calls(fragment(0, "call_1", "read", READ_JSON)),
        chunk({}, "tool_calls"),
        DONE,
    )
    message = outcome.decision.message
    assert message.content == ""
    assert [(e.text, e.kind) for e in outcome.seen if isinstance(e, ReasoningDelta)] == [
        ("Let me ", "raw"),
        ("read.", "raw"),
    ]
    natives = [p for p in message.output if isinstance(p, NativeItem)]
    assert natives == [NativeItem("reasoning", {"reasoning_content": "Let me read."})]


def test_reasoning_field_is_shown_not_replayed() -> None:
    outcome = run(chunk({"reasoning": "hmm"}), text("Answer", "stop"), DONE)
    assert [e.text for e in outcome.seen if isinstance(e, ReasoningDelta)] == ["hmm"]
    assert outcome.decision.message.output == (TextPart("Answer"),)


def test_reasoning_details_are_merged_for_replay_and_shown_once() -> None:
    def detail(**entry: Any) -> dict[str, Any]:
        return {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0, **entry}

    outcome = run(
        chunk(
            {"content": "", "reasoning": "The user", "reasoning_details": [detail(text="The user")]}
        ),
        chunk({"reasoning_details": [detail(text=" asks")], "reasoning": " asks"}),
        chunk({"reasoning": None, "reasoning_details": [detail(signature="EvsC")]}),
        chunk({"reasoning_details": [{"type": "reasoning.summary", "summary": "Sum", "index": 1}]}),
        chunk(
            {"reasoning_details": [{"type": "reasoning.summary", "summary": "mary", "index": 1}]}
        ),
        chunk(
            {
                "reasoning_details": [
                    {
                        "type": "reasoning.encrypted",
                        "data": "B7o",
                        "id": "rs_1",
                        "format": "xai-responses-v1",
                        "index": 2,
                    }
                ]
            }
        ),
        chunk({"reasoning_details": []}),
        text("Berlin", "stop"),
        DONE,
    )
    shown = [(e.text, e.kind) for e in outcome.seen if isinstance(e, ReasoningDelta)]
    assert shown == [("The user", "raw"), (" asks", "raw"), ("Sum", "summary"), ("mary", "summary")]
    natives = [p for p in outcome.decision.message.output if isinstance(p, NativeItem)]
    assert natives == [
        NativeItem(
            "reasoning",
            {
                "reasoning_details": [
                    detail(text="The user asks", signature="EvsC"),
                    {"type": "reasoning.summary", "summary": "Summary", "index": 1},
                    {
                        "type": "reasoning.encrypted",
                        "data": "B7o",
                        "id": "rs_1",
                        "format": "xai-responses-v1",
                        "index": 2,
                    },
                ]
            },
        )
    ]
    assert outcome.decision.message.content == "Berlin"


def test_encrypted_reasoning_alone_is_content_kept_but_not_shown() -> None:
    entry = {"type": "reasoning.encrypted", "data": "B7o", "index": 0}
    events = decode_all(chunk({"reasoning_details": [entry]}))
    assert events[-1] == ResponseProgress(content=True)
    outcome = run(chunk({"reasoning_details": [entry]}), text("t", "stop"), DONE)
    assert outcome.decision.message.content == "t"


def test_reasoning_details_entries_are_bounded_in_number() -> None:
    entries = [
        {"type": "reasoning.encrypted", "data": "x", "index": i}
        for i in range(MAX_REASONING_DETAILS_ENTRIES + 1)
    ]
    outcome = run(chunk({"reasoning_details": entries}), text("t", "stop"), DONE)
    assert outcome.failure.kind is FailureKind.BOUND_EXCEEDED
    fits = entries[:MAX_REASONING_DETAILS_ENTRIES]
    assert run(chunk({"reasoning_details": fits}), text("t", "stop"), DONE).decision


def test_reasoning_details_fields_that_are_not_concatenated_count_against_the_bound() -> None:
    big = "s" * (MAX_REASONING_DETAILS_CHARS // 2 + 1)
    once = {"type": "reasoning.text", "index": 0, "signature": big}
    # Sent again, a field replaces its value: only the change counts ...
    assert run(*[chunk({"reasoning_details": [once]})] * 3, text("t", "stop"), DONE).decision
    # ... two entries each holding half the bound do not fit.
    other = {**once, "index": 1}
    outcome = run(chunk({"reasoning_details": [once, other]}), text("t", "stop"), DONE)
    assert outcome.failure.kind is FailureKind.BOUND_EXCEEDED
    assert "reasoning_details exceeded" in outcome.failure.message  # the decoder's own bound


def test_reasoning_details_field_names_count_against_the_bound() -> None:
    # Many distinct keys with empty values: each name is retained, so each counts.
    names = {f"k{i:07d}": "" for i in range(50_000)}
    entry = {"type": "reasoning.text", "index": 0, **names}
    pieces = [chunk({"reasoning_details": [{**entry, "index": i}]}) for i in range(12)]
    outcome = run(*pieces, text("t", "stop"), DONE)
    assert outcome.failure.kind is FailureKind.BOUND_EXCEEDED
    assert "reasoning_details exceeded" in outcome.failure.message


def test_reasoning_natives_come_just_before_the_completion() -> None:
    events = decode_all(chunk({"reasoning_content": "r"}), text("t", "stop"), DONE)
    assert [type(e).__name__ for e in events[-2:]] == ["NativeOutput", "ResponseCompleted"]


def test_text_deltas_are_the_same_events_as_sent() -> None:
    events = decode_all(text("a"), text("b"))
    assert events[1:] == [TextDelta("a"), TextDelta("b")]


def test_reasoning_details_are_bounded_while_they_stream() -> None:
    """Merged `reasoning_details` (concatenated `data`, which no event shows) are bounded
    as they arrive, not only when the response completes."""
    decoder = ChatDecoder()
    piece = "d" * ((1 << 20) - 64)  # room for the entry's other fields, counted too
    payload = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "reasoning": "r",
                    "reasoning_details": [{"type": "reasoning.encrypted", "data": piece}],
                },
            }
        ],
    }
    frame = ServerSentEvent(None, json.dumps(payload).encode())
    fits = MAX_REASONING_DETAILS_CHARS // len(piece)
    for _ in range(fits):
        decoder.decode(frame)
    with pytest.raises(ResponseFailure) as caught:
        decoder.decode(frame)
    assert caught.value.kind is FailureKind.BOUND_EXCEEDED
