"""Malformed Chat Completions chunks fail the response as malformed, deep nesting included."""

from __future__ import annotations

import json

import pytest

from lockgate.errors import FailureKind, ResponseFailure
from lockgate.providers.chat.decoder import ChatDecoder
from lockgate.sse import ServerSentEvent

from .streams import DONE, run, text

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
