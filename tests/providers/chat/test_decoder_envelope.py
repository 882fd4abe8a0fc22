"""The Chat Completions envelope: the response start and its id, tolerated envelope noise and
the one choice a response may carry."""

from __future__ import annotations

import re

from lockgate.errors import FailureKind
from lockgate.events import ResponseCompleted, ResponseStarted

from .streams import (
    DONE,
    EDIT_JSON,
    Chunk,
    chunk,
    decode_all,
    edit_call,
    fragment,
    run,
    terminal,
    text,
    usage_chunk,
)

# --- the response start and its id ---------------------------------------------------------


def test_response_id_is_the_first_non_empty_chunk_id() -> None:
    azure_first = {
        "choices": [],
        "created": 0,
        "id": "",
        "model": "",
        "object": "",
        "prompt_filter_results": [{"prompt_index": 0}],
    }
    events = decode_all(
        azure_first,
        text("A", chunk_id="chatcmpl-az"),
        text("B", chunk_id="chatcmpl-other"),
        chunk({}, "stop"),
        DONE,
    )
    starts = [e for e in events if isinstance(e, ResponseStarted)]
    assert starts == [ResponseStarted(response_id="chatcmpl-az", model="m")]
    assert all(e.response_id is None for e in events if not isinstance(e, ResponseStarted))
    # A fresh id per chunk (Groq compound, proxies) is not a safety signal.
    assert run(*events_with_fresh_ids()).decision.message.content == "AB"


def events_with_fresh_ids() -> list[Chunk]:
    return [
        text("A", chunk_id="gen-1"),
        text("B", chunk_id="gen-2"),
        chunk({}, "stop", chunk_id="stub"),
        DONE,
    ]


def test_a_chunk_with_only_an_id_starts_the_response() -> None:
    events = decode_all(chunk({"role": "assistant"}, chunk_id="chatcmpl-9"))
    assert events == [ResponseStarted(response_id="chatcmpl-9", model="m")]


def test_response_id_is_synthesized_without_any_id() -> None:
    # Gemini: no id key; Snowflake: id "" on every chunk.
    first = decode_all(text("Hi", chunk_id=None), chunk({}, "stop", chunk_id=""), DONE)
    second = decode_all(text("Hi", chunk_id=""))
    start = first[0]
    assert isinstance(start, ResponseStarted)
    assert start.response_id is not None
    assert re.fullmatch(r"chatcmpl-lockgate-[0-9a-f]{12}", start.response_id)
    assert second[0] != start  # random per decoder
    assert isinstance(terminal(first), ResponseCompleted)


# --- envelope noise ------------------------------------------------------------------------


def test_envelope_noise_is_tolerated() -> None:
    outcome = run(
        {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],
        },
        chunk(
            {"role": "assistant", "content": None},
            usage=None,
            obfuscation="x1",
            system_fingerprint="fp",
            service_tier="default",
        ),
        text("Hello", p="abcdefghij", usage=None, x_groq={"id": "req"}),
        {
            "id": "chatcmpl-1",
            "choices": [{"index": 0, "finish_reason": None, "content_filter_results": {}}],
        },
        {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": None}]},
        chunk(
            {"content": ""},
            None,
            object="chat.completion.done",
            citations=[],
            message={"content": "Hello again"},
        ),
        chunk({}, "stop", native_finish_reason="STOP"),
        usage_chunk(),
        DONE,
    )
    assert outcome.decision.message.content == "Hello"


def test_message_is_never_read_only_delta() -> None:
    # Writer repeats each delta in `message`; Perplexity makes it cumulative.
    outcome = run(
        chunk({"content": "1"}, message={"content": "1"}),
        chunk({"content": " 2"}, message={"content": "1 2"}),
        chunk({"content": ""}, "stop", message={"content": "1 2"}),
    )
    assert outcome.decision.message.content == "1 2"


# --- choices ---------------------------------------------------------------------------------


def test_two_choices_carrying_content_fail() -> None:
    outcome = run(text("one", index=0), text("two", index=1), chunk({}, "stop"), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "two choices" in outcome.failure.message


def test_a_single_choice_at_index_one_is_accepted() -> None:
    outcome = run(text("The bug is in add.", index=1), chunk({}, "stop", index=1), DONE)
    assert outcome.decision.message.content == "The bug is in add."


def test_any_second_choice_index_fails_even_without_content() -> None:
    # Audit 3, L3: choice 0 opened (role, empty content) and never finished while choice 2
    # carries a call and a finish: lockgate asks for one choice, so the call never runs.
    second = chunk(
        {"tool_calls": [fragment(0, "call_2", "edit", EDIT_JSON)]}, "tool_calls", index=2
    )
    outcome = run(chunk({"role": "assistant", "content": ""}), second, DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "two choices in one stream (indexes 0 and 2)" in outcome.failure.message
    # …and a second index that only sends a finish is a second choice too.
    outcome = run(*edit_call(), chunk({}, "length", index=1), chunk({}, "tool_calls"), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE


def test_the_first_choice_index_seen_is_the_choice() -> None:
    outcome = run(chunk({}, "stop", index=2), DONE)
    assert outcome.decision.message.content == ""
    assert run(chunk({}, "stop", index=2), chunk({}, "length", index=3), DONE).failure.kind is (
        FailureKind.LIFECYCLE
    )
