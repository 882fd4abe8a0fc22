"""The Chat Completions decoder and its completion rule, through the real gate.

Every stream here is hand-written: shapes follow the wire facts in protocols.md §2/§2a
(OpenAI, Azure, OpenRouter, DeepSeek, Mistral, Gemini, Groq, Ollama, vLLM, Writer …)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.conversation import NativeItem, RefusalPart, TextPart, Usage
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import (
    Event,
    ProviderReportedFailure,
    ReasoningDelta,
    RefusalDelta,
    ResponseCompleted,
    ResponseProgress,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolCallIdentified,
    UsageReported,
)
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import Decision, ResponseGate
from lockgate.providers.chat.decoder import (
    MAX_REASONING_DETAILS_CHARS,
    MAX_REASONING_DETAILS_ENTRIES,
    ChatDecoder,
)
from lockgate.providers.decoding import synthesized_call_id
from lockgate.sse import ServerSentEvent

DONE = "[DONE]"
EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
EDIT_JSON = json.dumps(EDIT)
READ_JSON = '{"path": "README.md"}'

Chunk = dict[str, Any] | str | ServerSentEvent


def sse(chunk: Chunk) -> ServerSentEvent:
    if isinstance(chunk, ServerSentEvent):
        return chunk
    if isinstance(chunk, str):
        return ServerSentEvent(None, chunk.encode())
    return ServerSentEvent(None, json.dumps(chunk).encode())


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    index: int = 0,
    chunk_id: str | None = "chatcmpl-1",
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"object": "chat.completion.chunk", "model": "m", **extra}
    if chunk_id is not None:
        body["id"] = chunk_id
    body["choices"] = [{"index": index, "delta": delta or {}, "finish_reason": finish}]
    return body


def text(piece: str, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return chunk({"content": piece}, finish, **extra)


def fragment(
    index: int | None = 0,
    call_id: str | None = None,
    name: str | None = None,
    arguments: Any = None,
) -> dict[str, Any]:
    """One `delta.tool_calls[]` entry; fields left None are omitted (the first fragment
    of a call, with an id, also carries `type: function`)."""
    entry: dict[str, Any] = {}
    if index is not None:
        entry["index"] = index
    if call_id is not None:
        entry["id"] = call_id
        entry["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        entry["function"] = function
    return entry


def calls(*fragments: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return chunk({"tool_calls": list(fragments)}, finish, **extra)


def usage_chunk(prompt: int = 10, completion: int = 5, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, **extra},
    }


def edit_call(index: int = 0, call_id: str = "call_1") -> list[dict[str, Any]]:
    half = len(EDIT_JSON) // 2
    return [
        calls(fragment(index, call_id, "edit", "")),
        calls(fragment(index, arguments=EDIT_JSON[:half])),
        calls(fragment(index, arguments=EDIT_JSON[half:])),
    ]


class Outcome:
    def __init__(self, result: Decision | ResponseFailure, seen: list[Event]) -> None:
        self.result = result
        self.seen = seen

    @property
    def decision(self) -> Decision:
        assert isinstance(self.result, Decision), f"expected a decision, got {self.result}"
        return self.result

    @property
    def failure(self) -> ResponseFailure:
        assert isinstance(self.result, ResponseFailure), f"expected a failure: {self.result}"
        return self.result

    def calls(self) -> list[tuple[str, str, dict[str, object]]]:
        return [(c.id, c.name, dict(c.arguments)) for c in self.decision.message.tool_calls]


def run(*chunks: Chunk, eof: bool = True) -> Outcome:
    """Feed hand-written chunks through ChatDecoder and a ResponseGate(ALL_TOOLS); `eof`:
    the body then ends cleanly (`end_of_stream`). Everything is fed, even after a decision
    (a later event must fail the response, as in the client)."""
    seen: list[Event] = []
    gate = ResponseGate(ALL_TOOLS, seen.append)
    decoder = ChatDecoder()
    decision: Decision | None = None
    try:
        for item in chunks:
            for event in decoder.decode(sse(item)):
                decision = gate.accept(event) or decision
        if eof:
            for event in decoder.end_of_stream():
                decision = gate.accept(event) or decision
    except ResponseFailure as exc:
        return Outcome(exc, seen)
    if decision is None:
        return Outcome(ResponseFailure(FailureKind.STREAM_ENDED, "client: no terminal"), seen)
    return Outcome(decision, seen)


def decode_all(*chunks: Chunk, eof: bool = False) -> list[StreamEvent]:
    """The decoder's own events (no gate)."""
    decoder = ChatDecoder()
    out: list[StreamEvent] = []
    for item in chunks:
        out.extend(decoder.decode(sse(item)))
    if eof:
        out.extend(decoder.end_of_stream())
    return out


def terminal(events: Sequence[StreamEvent]) -> StreamEvent:
    return events[-1]


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


# --- errors inside a 200 stream ----------------------------------------------------------


def test_error_payload_without_choices_fails_at_once_with_usage_so_far() -> None:
    error = {
        "error": {
            "message": "The server had an error",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    events = decode_all(*edit_call(), chunk({}, None, usage={"prompt_tokens": 3}), error)
    last = terminal(events)
    assert isinstance(last, ProviderReportedFailure)
    assert last.kind is FailureKind.PROVIDER_ERROR
    assert last.message == "provider error: The server had an error"
    assert last.code == "server_error"
    assert last.transient
    assert last.usage == Usage(input_tokens=3, total_tokens=3)
    assert run(*edit_call(), error, chunk({}, "tool_calls"), DONE).failure.kind is (
        FailureKind.PROVIDER_ERROR
    )


def test_choice_error_fails_at_once() -> None:
    bad = {
        "id": "gen-1",
        "choices": [
            {
                "index": 0,
                "delta": {},
                "finish_reason": "error",
                "error": {"message": "upstream failed", "code": 502},
            }
        ],
    }
    outcome = run(*edit_call(), bad, DONE)
    assert outcome.failure.kind is FailureKind.PROVIDER_ERROR
    assert "upstream failed" in outcome.failure.message
    assert "[502]" in outcome.failure.message
    assert outcome.failure.transient


def test_sse_error_event_fails_at_once() -> None:
    # Groq: `event: error` in a data-only stream, after reasoning, without [DONE].
    frame = ServerSentEvent(
        "error",
        json.dumps(
            {
                "error": {
                    "message": "Tool call validation failed",
                    "type": "invalid_request_error",
                    "code": "tool_use_failed",
                    "failed_generation": '{"name": "edit"}',
                }
            }
        ).encode(),
    )
    outcome = run(chunk({"reasoning": "thinking"}), frame, text("never", "stop"), DONE)
    assert outcome.failure.kind is FailureKind.PROVIDER_ERROR
    assert "tool_use_failed" in outcome.failure.message
    assert not outcome.failure.transient


def test_sse_error_event_without_a_nested_error_uses_the_payload() -> None:
    frame = ServerSentEvent("error", b'{"message": "overloaded", "type": "overloaded_error"}')
    outcome = run(text("Hi"), frame)
    assert outcome.failure.kind is FailureKind.PROVIDER_ERROR
    assert outcome.failure.transient


@pytest.mark.parametrize(
    ("error", "transient", "code"),
    [
        ({"type": "server_error", "message": "m"}, True, "server_error"),
        ({"code": "rate_limit_exceeded", "message": "m"}, True, "rate_limit_exceeded"),
        ({"type": "api_error"}, True, "api_error"),
        ({"code": 503, "message": "m"}, True, "503"),
        ({"code": 429, "message": "m"}, True, "429"),
        ({"code": "timeout"}, True, "timeout"),
        ({"code": "service_unavailable"}, True, "service_unavailable"),
        ({"code": 400, "message": "Token limit reached"}, False, "400"),
        ({"type": "invalid_request_error", "message": "m"}, False, "invalid_request_error"),
        ({"message": "no code"}, False, None),
    ],
)
def test_transient_flag_and_code_come_from_the_error(
    error: dict[str, Any], transient: bool, code: str | None
) -> None:
    last = terminal(decode_all({"error": error}))
    assert isinstance(last, ProviderReportedFailure)
    assert (last.transient, last.code) == (transient, code)
    assert run({"error": error}).failure.transient is transient


def test_error_before_any_content_is_still_a_provider_error() -> None:
    outcome = run({"error": {"message": "boom", "type": "server_error"}})
    assert outcome.failure.kind is FailureKind.PROVIDER_ERROR
    assert outcome.failure.message.startswith("provider error: boom")


def test_error_object_after_a_length_finish_is_a_provider_error() -> None:
    # OpenRouter: length (twice), then a normal chunk with an error object and usage, [DONE].
    error_chunk = chunk(
        {"role": "assistant", "content": ""},
        None,
        error={"code": 400, "message": "Token limit reached"},
        usage={"prompt_tokens": 43, "completion_tokens": 10, "total_tokens": 53},
    )
    events = decode_all(text("We need"), chunk({}, "length"), chunk({}, "length"), error_chunk)
    last = terminal(events)
    assert isinstance(last, ProviderReportedFailure)
    assert (last.kind, last.code) == (FailureKind.PROVIDER_ERROR, "400")
    assert last.usage == Usage(43, 0, 10, 0, 53)
    outcome = run(text("We need"), chunk({}, "length"), chunk({}, "length"), error_chunk, DONE)
    assert outcome.failure.kind is FailureKind.PROVIDER_ERROR


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


def test_calls_in_index_order_are_released_in_that_order() -> None:
    outcome = run(
        calls(fragment(0, "call_a", "discover", "")),
        calls(fragment(1, "call_b", "read", READ_JSON[:5])),
        calls(fragment(0, arguments="{}")),
        calls(fragment(1, arguments=READ_JSON[5:])),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert [call[0] for call in outcome.calls()] == ["call_a", "call_b"]
    parts = outcome.decision.message.output
    assert [getattr(p, "call_id", None) for p in parts] == ["call_a", "call_b"]


# Issue 27: what the gate releases, every common reader must read as the same calls. The
# official SDKs key a call by `index` as a list position (openai-python inserts at it and
# concatenates every string field, openai-node assigns `tool_calls[index]` and replaces id
# and name), the AI SDK by index and id, litellm by index (absent: 0). Each shape below was
# run through all of them (docs/wire/chat.md §5): they read it as different calls, so the
# gate refuses it before anything is released.

AMOUNT = ['{"path": "1', '00"}']


@pytest.mark.parametrize("index", [None, "absent"])
def test_a_fragment_without_index_beside_indexed_ones_is_refused(index: object) -> None:
    # The gate joined it to the call; openai-node and the AI SDK dropped it and read
    # `{"path": "1` (the AI SDK executed it).
    tail: dict[str, Any] = {"function": {"arguments": AMOUNT[1]}}
    if index is None:
        tail["index"] = None
    outcome = run(
        calls(fragment(0, "call_1", "read", AMOUNT[0])), calls(tail), chunk({}, "tool_calls"), DONE
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "beside indexed fragments" in outcome.failure.message
    # And an indexed fragment after index-less calls.
    outcome = run(
        calls({"id": "c1", "function": {"name": "read", "arguments": READ_JSON}}),
        calls(fragment(0, arguments="")),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE


def test_a_new_id_or_name_at_an_index_in_use_is_refused() -> None:
    # Ollama 0.20 and LiteLLM's ollama_chat sent every call at index 0: openai-python read
    # one call `c1c2` `readread` with `{"path": "README.md"}{"path": "calculator.py"}`,
    # openai-node and litellm one call `c2` with those arguments, the AI SDK two calls.
    outcome = run(
        calls(fragment(0, "call_a", "read", READ_JSON)),
        calls(fragment(0, "call_b", "read", '{"path": "calculator.py"}')),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "a new call id 'call_b' at index 0" in outcome.failure.message
    # Both in one array, too.
    outcome = run(
        calls(fragment(0, "call_a", "read", READ_JSON), fragment(0, "call_b", "discover", "{}")),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    # Without ids, a new name: openai-python read `discovertest`, the AI SDK two calls.
    outcome = run(
        calls(fragment(0, None, "discover", "{}")),
        calls(fragment(0, None, "test", "")),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "a new name 'test' at index 0" in outcome.failure.message


def test_index_less_calls_in_two_chunks_are_refused() -> None:
    # litellm merged them into one call `c2` with both arguments concatenated.
    outcome = run(
        calls({"id": "c1", "function": {"name": "read", "arguments": READ_JSON}}),
        calls({"id": "c2", "function": {"name": "read", "arguments": READ_JSON}}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "in more than one chunk" in outcome.failure.message
    # A continuation without index, also in one array: litellm read `{"path":` only.
    outcome = run(
        calls(
            {"id": "c1", "function": {"name": "read", "arguments": READ_JSON[:9]}},
            {"function": {"arguments": READ_JSON[9:]}},
        ),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "without a name" in outcome.failure.message


@pytest.mark.parametrize(
    ("indexes", "problem"),
    [
        ((0, 2), "tool-call index 2 where at most 1 was due"),  # a gap
        ((1, 0), "tool-call index 1 where 0 was due"),  # reversed
        ((1,), "tool-call index 1 where 0 was due"),  # alone at 1
        ((-1,), "tool-call index -1 where 0 was due"),
        ((2**32,), "tool-call index 4294967296 where 0 was due"),
        ((3, 7), "tool-call index 3 where 0 was due"),  # sglang's tool positions
    ],
)
def test_indexes_out_of_order_are_refused(indexes: tuple[int, ...], problem: str) -> None:
    # openai-python raised IndexError (it inserts at the index and then looks it up);
    # openai-node read a sparse list (a hole it cannot finalize) or, at -1 and 2**32, no
    # call at all, while the AI SDK and litellm read the calls.
    names = ["read", "discover"]
    opened = [calls(fragment(i, f"call_{n}", names[n], "")) for n, i in enumerate(indexes)]
    rest = [
        calls(fragment(i, arguments=READ_JSON if n == 0 else "{}")) for n, i in enumerate(indexes)
    ]
    outcome = run(*opened, *rest, chunk({}, "tool_calls"), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert problem in outcome.failure.message


@pytest.mark.parametrize("index", [0.0, 1.5, "0", True])
def test_an_index_that_is_not_an_integer_is_malformed(index: object) -> None:
    outcome = run(
        calls({"index": index, "id": "c", "function": {"name": "discover", "arguments": "{}"}}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.MALFORMED_EVENT


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


# --- tool-call fragments --------------------------------------------------------------------------


def test_repeated_ids_and_names_are_set_not_concatenated() -> None:
    # DeepSeek, sglang: id and name on every fragment.
    pieces = [EDIT_JSON[:10], EDIT_JSON[10:30], EDIT_JSON[30:]]
    outcome = run(
        *(calls(fragment(0, "call_1", "edit", piece)) for piece in pieces),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]


def test_empty_and_null_ids_and_names_on_continuations_mean_absent() -> None:
    # Writer: id/type/name null; vLLM: id ""; LM Studio: name "".
    outcome = run(
        calls(
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "edit", "arguments": None},
            }
        ),
        calls(
            {
                "index": 0,
                "id": None,
                "type": None,
                "function": {"name": None, "arguments": EDIT_JSON[:20]},
            }
        ),
        calls({"index": 0, "id": "", "function": {"name": "", "arguments": EDIT_JSON[20:]}}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]


def test_fragments_without_index_mistral_two_calls_in_one_array() -> None:
    outcome = run(
        calls(
            {"id": "QAw0JBXkB", "function": {"name": "read", "arguments": READ_JSON}},
            {"id": "HlyhI5zAI", "function": {"name": "discover", "arguments": "{}"}},
            finish="tool_calls",
        ),
        DONE,
    )
    assert outcome.calls() == [
        ("QAw0JBXkB", "read", {"path": "README.md"}),
        ("HlyhI5zAI", "discover", {}),
    ]


def test_gemini_call_without_index_and_with_empty_id_gets_a_synthesized_id() -> None:
    gemini = {
        "choices": [
            {
                "delta": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "function": {"arguments": READ_JSON, "name": "read"},
                            "id": "",
                            "type": "function",
                        }
                    ],
                },
                "finish_reason": "stop",
                "index": 0,
            }
        ],
        "model": "gemini-2.0-flash",
        "object": "chat.completion.chunk",
    }
    outcome = run(gemini, DONE)
    ((call_id, name, arguments),) = outcome.calls()
    assert (name, arguments) == ("read", {"path": "README.md"})
    response_id = outcome.decision.message.response_id
    assert response_id is not None
    assert call_id == "call_" + hashlib.sha256(f"{response_id}:0".encode()).hexdigest()[:24]


def test_name_may_arrive_after_arguments() -> None:
    events = decode_all(
        calls(fragment(0, "call_1", "", EDIT_JSON[:12])),
        calls(fragment(0, None, "edit", EDIT_JSON[12:])),
    )
    assert ToolCallIdentified("0", "", "edit") in events
    outcome = run(
        calls(fragment(0, "call_1", "", EDIT_JSON[:12])),
        calls(fragment(0, None, "edit", EDIT_JSON[12:])),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]


def test_id_may_arrive_later() -> None:
    events = decode_all(
        calls(fragment(0, None, "read", READ_JSON[:4])),
        calls(fragment(0, "call_late", None, READ_JSON[4:])),
    )
    assert ToolCallIdentified("0", "call_late", "") in events
    outcome = run(
        calls(fragment(0, None, "read", READ_JSON[:4])),
        calls(fragment(0, "call_late", None, READ_JSON[4:])),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_late", "read", {"path": "README.md"})]


def test_same_tool_twice_at_index_zero_without_ids_merges_and_fails_closed() -> None:
    outcome = run(
        calls(fragment(0, None, "read", READ_JSON)),
        calls(fragment(0, None, "read", READ_JSON)),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.INVALID_BATCH


def test_arguments_as_a_json_object_are_serialized_once() -> None:
    # llama.cpp, MiniMax.
    outcome = run(
        calls(
            fragment(
                0,
                "call_1",
                "edit",
                {"path": "calculator.py", "old": "return a - b", "new": "return a + b"},
            )
        ),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]
    assert outcome.decision.message.tool_calls[0].arguments_json == json.dumps(
        EDIT, separators=(",", ":")
    )


@pytest.mark.parametrize("arguments", [None, ""])
@pytest.mark.parametrize("tool", ["discover", "test"])
def test_null_or_empty_arguments_for_a_tool_without_parameters(
    arguments: str | None, tool: str
) -> None:
    entry = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": tool, "arguments": arguments},
    }
    outcome = run(
        calls(entry),
        calls({"index": 0, "function": {"arguments": arguments}}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", tool, {})]


def test_null_arguments_for_a_tool_with_parameters_fail() -> None:
    outcome = run(calls(fragment(0, "call_1", "read", None)), chunk({}, "tool_calls"), DONE)
    assert outcome.failure.kind is FailureKind.INVALID_BATCH


def test_no_id_at_all_gets_a_stable_synthesized_id() -> None:
    stream: list[Chunk] = [
        calls(fragment(0, None, "read", READ_JSON), chunk_id="chatcmpl-x"),
        calls(fragment(1, None, "discover", "{}"), chunk_id="chatcmpl-x"),
        chunk({}, "tool_calls"),
        DONE,
    ]
    first, second = run(*stream), run(*stream)
    ids = [call_id for call_id, _, _ in first.calls()]
    assert ids == [synthesized_call_id("chatcmpl-x", "0"), synthesized_call_id("chatcmpl-x", "1")]
    assert ids == [call_id for call_id, _, _ in second.calls()]  # same response id and key
    assert ids[0] == "call_" + hashlib.sha256(b"chatcmpl-x:0").hexdigest()[:24]
    assert len(set(ids)) == 2
    assert synthesized_call_id("chatcmpl-y", "0") != ids[0]
    events = decode_all(*stream)
    assert isinstance(events[-2], ToolCallIdentified)
    assert isinstance(events[-1], ResponseCompleted)


def test_cut_off_arguments_with_finish_tool_calls_reject_the_batch() -> None:
    # vLLM: a call cut by the token limit, finished as tool_calls.
    outcome = run(
        calls(fragment(0, "call_1", "edit", EDIT_JSON[:30])), chunk({}, "tool_calls"), DONE
    )
    assert outcome.failure.kind is FailureKind.INVALID_BATCH


def test_text_and_a_call_in_one_response_keep_their_order() -> None:
    outcome = run(
        text("Reading."),
        calls(fragment(0, "call_1", "read", READ_JSON)),
        chunk({"content": "", "tool_calls": [fragment(0, arguments="")]}, "tool_calls"),
        DONE,
    )
    assert outcome.decision.message.content == "Reading."
    assert outcome.calls() == [("call_1", "read", {"path": "README.md"})]


# --- usage ---------------------------------------------------------------------------------------


def test_usage_last_non_null_wins_including_x_groq() -> None:
    outcome = run(
        text("A", usage={"prompt_tokens": 1, "completion_tokens": 1}),
        text("B", usage=None),
        chunk(
            {},
            "stop",
            x_groq={
                "id": "req_1",
                "usage": {
                    "prompt_tokens": 20,
                    "completion_tokens": 7,
                    "total_tokens": 27,
                    "prompt_tokens_details": {"cached_tokens": 4},
                    "completion_tokens_details": {"reasoning_tokens": 3},
                },
            },
        ),
        DONE,
    )
    assert outcome.decision.usage == Usage(20, 4, 7, 3, 27)
    assert UsageReported(Usage(20, 4, 7, 3, 27)) in outcome.seen
    later = run(
        text("A", "stop", x_groq={"usage": {"prompt_tokens": 2}}),
        usage_chunk(9, 1, total_tokens=11),
        DONE,
    )
    assert later.decision.usage == Usage(9, 0, 1, 0, 11)


def test_total_defaults_to_input_plus_output() -> None:
    outcome = run(text("A", "stop"), usage_chunk(10, 5), DONE)
    assert outcome.decision.usage == Usage(10, 0, 5, 0, 15)


def test_no_usage_is_none_never_zero() -> None:
    outcome = run(text("A", "stop", usage=None), DONE)
    assert outcome.decision.usage is None
    assert not any(isinstance(e, UsageReported) for e in outcome.seen)


# --- malformed chunks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'"text"',
        json.dumps({"choices": {"index": 0}}).encode(),
        json.dumps({"choices": ["x"]}).encode(),
        json.dumps({"choices": [{"index": "0", "delta": {}}]}).encode(),
        json.dumps({"choices": [{"index": 0, "delta": "hi"}]}).encode(),
        json.dumps({"choices": [{"index": 0, "delta": {"content": 5}}]}).encode(),
        json.dumps({"choices": [{"index": 0, "delta": {"content": {"a": 1}}}]}).encode(),
        json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]}).encode(),
        json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": ["x"]}}]}).encode(),
        json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]}).encode(),
        json.dumps(
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": 7}]}}]}
        ).encode(),
        json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"name": ["edit"]}}]},
                    }
                ]
            }
        ).encode(),
        json.dumps(
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "edit"}]}}]}
        ).encode(),
        json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 12}}]},
                    }
                ]
            }
        ).encode(),
        json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": 1}]}).encode(),
    ],
)
def test_malformed_shapes(data: bytes) -> None:
    outcome = run(text("before"), ServerSentEvent(None, data), text("after", "stop"), DONE)
    assert outcome.failure.kind is FailureKind.MALFORMED_EVENT


def test_deeply_nested_json_is_malformed_not_a_recursion_error() -> None:
    nested = b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    outcome = run(text("before"), ServerSentEvent(None, nested))
    assert outcome.failure.kind is FailureKind.MALFORMED_EVENT
    with pytest.raises(ResponseFailure) as caught:
        ChatDecoder().decode(ServerSentEvent(None, b'{"a":' * 5000 + b"1" + b"}" * 5000))
    assert caught.value.kind is FailureKind.MALFORMED_EVENT


# --- property: however the arguments are split, the same decision ---------------------------------

_ARGUMENT_VALUES = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


@st.composite
def responses(draw: st.DrawFn) -> tuple[str, list[tuple[str, str, str]], list[Chunk]]:
    """Text plus N read/edit calls, each call's argument text split at random points, the
    fragments of different calls interleaved, ids on the first fragment only."""
    answer = draw(st.text(alphabet="abc xyz", max_size=20))
    count = draw(st.integers(min_value=0, max_value=3))
    planned: list[tuple[str, str, str]] = []
    pieces: list[list[dict[str, Any]]] = []
    for index in range(count):
        name = draw(st.sampled_from(["read", "edit"]))
        keys = ["path"] if name == "read" else ["path", "old", "new"]
        arguments = json.dumps({key: draw(_ARGUMENT_VALUES) for key in keys}, ensure_ascii=False)
        cuts = sorted(draw(st.sets(st.integers(0, len(arguments)), max_size=6)))
        parts = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True)]
        call_id = f"call_{index}"
        planned.append((call_id, name, arguments))
        first = fragment(index, call_id, name, parts[0])
        pieces.append([first, *(fragment(index, arguments=part) for part in parts[1:])])
    stream: list[Chunk] = [chunk({"role": "assistant", "content": ""})]
    if answer:
        split = draw(st.integers(0, len(answer)))
        stream += [text(answer[:split]), text(answer[split:])]
    # Interleave calls whose first fragments come in index order (indexes are keys).
    queues = [list(p) for p in pieces]
    opened = 0
    while any(queues):
        candidates = [i for i, q in enumerate(queues) if q and i <= opened]
        chosen = draw(st.sampled_from(candidates))
        if chosen == opened:
            opened += 1
        stream.append(calls(queues[chosen].pop(0)))
    stream += [chunk({}, "tool_calls" if count else "stop"), usage_chunk(), DONE]
    return answer, planned, stream


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(responses())
def test_any_split_of_the_arguments_gives_the_same_decision(
    case: tuple[str, list[tuple[str, str, str]], list[Chunk]],
) -> None:
    answer, planned, stream = case
    decision = run(*stream).decision
    assert decision.message.content == answer
    assert [(c.id, c.name, c.arguments_json) for c in decision.message.tool_calls] == planned
    assert [dict(c.arguments) for c in decision.message.tool_calls] == [
        json.loads(arguments) for _, _, arguments in planned
    ]
    assert decision.usage == Usage(10, 0, 5, 0, 15)
    assert decision.finish_reason == ("tool_calls" if planned else "stop")


def test_text_deltas_are_the_same_events_as_sent() -> None:
    events = decode_all(text("a"), text("b"))
    assert events[1:] == [TextDelta("a"), TextDelta("b")]


@pytest.mark.parametrize(
    "error",
    [
        {"error": {"code": {"nested": 1}, "message": "odd"}},
        {"error": {"type": ["a"], "message": "odd"}},
        {"error": {"code": None, "type": None, "status": 7.5}},
    ],
)
def test_an_error_whose_code_is_not_text_is_still_a_provider_error(error: dict[str, Any]) -> None:
    # A code or type that is an object or a list crashed the decoder (unhashable) before
    # the decoding kit read errors once for every protocol.
    outcome = run(chunk({"role": "assistant", "content": ""}), error)
    assert outcome.failure.kind is FailureKind.PROVIDER_ERROR
    assert not outcome.failure.transient


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
