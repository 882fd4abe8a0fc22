"""Errors inside a 200 Chat Completions stream: error payloads, choice errors and SSE error
events fail the response at once as provider errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.conversation import Usage
from lockgate.errors import FailureKind
from lockgate.events import ProviderReportedFailure
from lockgate.sse import ServerSentEvent

from .streams import DONE, chunk, decode_all, edit_call, run, terminal, text

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
