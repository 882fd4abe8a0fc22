"""The Gemini decoder's rule, line 8: malformed chunks fail closed."""

from __future__ import annotations

import pytest

from lockgate.errors import FailureKind, ResponseFailure

from .streams import body, chunk, decide, text

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
