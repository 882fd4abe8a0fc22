"""How a Chat Completions stream ends, through the real gate: `[DONE]`, the end of the body,
the finish reasons and repeated or conflicting finishes."""

from __future__ import annotations

import pytest

from lockgate.conversation import Usage
from lockgate.errors import FailureKind
from lockgate.events import ProviderReportedFailure, ResponseCompleted, UsageReported

from .streams import (
    DONE,
    EDIT,
    EDIT_JSON,
    READ_JSON,
    Chunk,
    calls,
    chunk,
    decode_all,
    edit_call,
    fragment,
    run,
    terminal,
    text,
    usage_chunk,
)

# --- the end of the stream ---------------------------------------------------------------


def test_done_after_finish_releases_the_text() -> None:
    outcome = run(
        chunk({"role": "assistant", "content": ""}),
        text("Hel"),
        text("lo"),
        chunk({}, "stop"),
        DONE,
        eof=False,
    )
    assert outcome.decision.message.content == "Hello"
    assert outcome.decision.finish_reason == "stop"


def test_clean_end_of_body_after_finish_completes_without_done() -> None:
    # Writer, GPUStack, Perplexity: no [DONE]; the end of the body after the finish.
    outcome = run(*edit_call(), chunk({}, "tool_calls"), usage_chunk())
    assert outcome.calls() == [("call_1", "edit", EDIT)]


def test_finish_without_a_clean_end_releases_nothing() -> None:
    outcome = run(*edit_call(), chunk({}, "tool_calls"), eof=False)
    assert outcome.failure.message == "client: no terminal"


def test_end_of_body_before_any_finish_is_stream_ended() -> None:
    outcome = run(*edit_call())
    assert outcome.failure.kind is FailureKind.STREAM_ENDED
    assert "without a finish_reason" in outcome.failure.message


def test_empty_body_is_stream_ended() -> None:
    assert run().failure.kind is FailureKind.STREAM_ENDED


def test_done_without_any_finish_is_lifecycle() -> None:
    # Snowflake: no finish_reason key at all, then usage and [DONE].
    outcome = run(text("15"), usage_chunk(), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "[DONE] arrived without any finish_reason" in outcome.failure.message


def test_done_twice_and_a_chunk_after_done_are_refused_by_the_gate() -> None:
    for after in (DONE, usage_chunk(), text("more")):
        outcome = run(text("Hi", "stop"), DONE, after)
        assert outcome.failure.kind is FailureKind.LIFECYCLE
        assert "after the terminal event" in outcome.failure.message


# --- finish reasons ------------------------------------------------------------------------


def test_finish_tool_calls_releases_the_calls() -> None:
    outcome = run(*edit_call(), chunk({}, "tool_calls"), DONE)
    assert outcome.calls() == [("call_1", "edit", EDIT)]
    assert outcome.decision.finish_reason == "tool_calls"


def test_finish_stop_with_calls_releases_the_calls() -> None:
    # OpenAI with a named tool_choice, Gemini, Ollama.
    events = decode_all(*edit_call(), chunk({}, "stop"), DONE)
    last = terminal(events)
    assert isinstance(last, ResponseCompleted)
    assert last.finish_reason is None
    outcome = run(*edit_call(), chunk({}, "stop"), DONE)
    assert outcome.calls() == [("call_1", "edit", EDIT)]
    assert outcome.decision.finish_reason == "tool_calls"


def test_finish_stop_without_calls_is_text() -> None:
    last = terminal(decode_all(text("Done.", "stop"), DONE))
    assert isinstance(last, ResponseCompleted)
    assert last.finish_reason == "stop"


def test_finish_tool_calls_without_a_call_fails() -> None:
    outcome = run(text("I will call a tool."), chunk({}, "tool_calls"), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "has no calls" in outcome.failure.message


def test_finish_length_is_truncated_with_buffered_calls_discarded() -> None:
    stream: list[Chunk] = [*edit_call()[:2], chunk({}, "length"), usage_chunk(7, 50), DONE]
    last = terminal(decode_all(*stream))
    assert isinstance(last, ProviderReportedFailure)
    assert (last.kind, last.code, last.truncated) == (
        FailureKind.RESPONSE_INCOMPLETE,
        "length",
        True,
    )
    assert last.usage == Usage(7, 0, 50, 0, 57)  # the usage sent after the finish
    outcome = run(*stream)
    assert outcome.failure.kind is FailureKind.RESPONSE_INCOMPLETE
    assert outcome.failure.recovery is not None  # the cut call can be paired (--recover)
    assert outcome.failure.recovery.message.tool_calls[0].id == "call_1"
    assert UsageReported(Usage(7, 0, 50, 0, 57)) in outcome.seen


def test_finish_content_filter_is_incomplete_not_truncated() -> None:
    stream: list[Chunk] = [text("Some"), chunk({}, "content_filter"), DONE]
    last = terminal(decode_all(*stream))
    assert isinstance(last, ProviderReportedFailure)
    assert (last.kind, last.code, last.truncated) == (
        FailureKind.RESPONSE_INCOMPLETE,
        "content_filter",
        False,
    )
    assert run(*stream).failure.kind is FailureKind.RESPONSE_INCOMPLETE


def test_finish_error_is_provider_error() -> None:
    outcome = run(*edit_call(), chunk({}, "error"), DONE)
    assert outcome.failure.kind is FailureKind.PROVIDER_ERROR


@pytest.mark.parametrize("finish", ["function_call", "end_turn", "weird"])
def test_other_finish_reasons_are_not_a_successful_completion(finish: str) -> None:
    outcome = run(*edit_call(), chunk({}, finish), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert f"finish_reason {finish!r} is not a successful completion" in outcome.failure.message


def test_failing_finish_without_done_is_reported_at_the_end_of_body() -> None:
    events = decode_all(text("cut"), chunk({}, "length"))
    assert not any(isinstance(e, ProviderReportedFailure) for e in events)  # not yet
    outcome = run(text("cut"), chunk({}, "length"), usage_chunk())
    assert outcome.failure.kind is FailureKind.RESPONSE_INCOMPLETE


# --- several finish chunks --------------------------------------------------------------------


def test_the_same_finish_twice_is_idempotent() -> None:
    outcome = run(*edit_call(), chunk({}, "tool_calls"), chunk({}, "tool_calls"), DONE)
    assert outcome.calls() == [("call_1", "edit", EDIT)]


def test_a_later_null_finish_keeps_the_earlier_one() -> None:
    outcome = run(
        text("Hi", "stop"),
        chunk({"role": "assistant", "content": ""}, None, usage={"prompt_tokens": 1}),
        DONE,
    )
    assert outcome.decision.message.content == "Hi"


def test_a_conflicting_later_finish_fails() -> None:
    outcome = run(*edit_call(), chunk({}, "length"), chunk({}, "tool_calls"), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "changed from 'length' to 'tool_calls'" in outcome.failure.message


def test_content_between_repeated_finishes_is_accepted() -> None:
    # Gemini through proxies: finish_reason on every chunk; each chunk's finish covers it.
    outcome = run(text("A", "stop"), text("B", "stop"), DONE)
    assert outcome.decision.message.content == "AB"


def test_content_after_the_finish_without_a_finish_of_its_own_fails_at_once() -> None:
    # Audit 3, M1: the finish moved before the last fragments; [DONE] does not cover them.
    outcome = run(text("A", "stop"), text("B"), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "content arrived after finish_reason 'stop'" in outcome.failure.message
    outcome = run(text("A", "stop"), text("B"), eof=True)
    assert outcome.failure.kind is FailureKind.LIFECYCLE


def test_a_call_after_the_finish_fails_even_with_a_finish_of_its_own() -> None:
    # Audit 3, M1: a read call, finish tool_calls, then a NEW call at index 0 (a new id)
    # with another finish tool_calls and [DONE]: a gateway splicing a retried attempt.
    read = calls(fragment(0, "call_1", "read", READ_JSON), finish="tool_calls")
    spliced = calls(fragment(0, "call_2", "edit", EDIT_JSON), finish="tool_calls")
    outcome = run(read, spliced, DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    # (A new id at an index in use is refused before the finish is even looked at.)
    assert "a new call id 'call_2' at index 0" in outcome.failure.message
    spliced = calls(fragment(1, "call_2", "edit", EDIT_JSON), finish="tool_calls")
    outcome = run(read, spliced, DONE)
    assert "a tool-call fragment arrived after finish_reason 'tool_calls'" in (
        outcome.failure.message
    )
    # Text with finish stop, then a complete call, then [DONE].
    outcome = run(text("Done.", "stop"), calls(fragment(0, "call_1", "edit", EDIT_JSON)), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    # An argument fragment for the open call after the finish, too.
    outcome = run(*edit_call()[:2], chunk({}, "tool_calls"), *edit_call()[2:], DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE


def test_a_role_only_delta_or_usage_after_the_finish_is_not_content() -> None:
    outcome = run(
        *edit_call(),
        chunk({}, "tool_calls"),
        chunk({"role": "assistant"}, "tool_calls"),
        chunk({"role": "assistant", "content": ""}),
        usage_chunk(),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]
