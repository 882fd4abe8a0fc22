"""The Anthropic Messages decoder's rule, line 11: malformed events and shapes fail closed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.errors import FailureKind, ResponseFailure
from lockgate.providers.anthropic.decoder import AnthropicDecoder
from lockgate.sse import ServerSentEvent

from .streams import TEXT, block_start, decide, delta, fails, start_event, text_stream

# --- 11. malformed events -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("message_start", b"{not json"),
        ("message_start", b"[1, 2]"),
        ("message_start", b'{"no": "type"}'),
        ("ping", b'{"type": "message_stop"}'),  # the name disagrees with the type
        ("message_start", b'{"type": "message_start", "message": "nope"}'),
        ("message_start", b'{"type": "message_start", "message": {"id": 7}}'),
        ("message_start", b"[" * 100 + b"]" * 100),
        ("message_start", b'{"type": "message_start", "message": {"id": "\xff"}}'),
    ],
)
def test_malformed_events(name: str | None, data: bytes) -> None:
    with pytest.raises(ResponseFailure) as caught:
        AnthropicDecoder().decode(ServerSentEvent(name, data))
    assert caught.value.kind is FailureKind.MALFORMED_EVENT


@pytest.mark.parametrize(
    "bad",
    [
        block_start(0, {"type": "tool_use", "id": 5, "name": "edit", "input": {}}),
        block_start(0, {"type": "tool_use", "id": "t", "name": "edit", "input": "{}"}),
        {"type": "content_block_start", "index": "0", "content_block": {"type": "text"}},
        {"type": "content_block_start", "index": 0, "content_block": []},
        delta(0, type="text_delta", text=3),
    ],
)
def test_malformed_shapes(bad: dict[str, Any]) -> None:
    opened = [start_event(), TEXT] if bad["type"] == "content_block_delta" else [start_event()]
    assert fails([*opened, bad]).kind is FailureKind.MALFORMED_EVENT


def test_a_data_only_stream_releases_nothing() -> None:
    # The official SDK reads none of these frames: neither does lockgate (audit 3, L5).
    payload = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in text_stream())
    with pytest.raises(ResponseFailure) as caught:
        decide(payload)
    assert caught.value.kind is FailureKind.STREAM_ENDED
