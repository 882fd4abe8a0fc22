"""Hand-written Anthropic Messages events and the runners that decode them through the real
gate, shared by the decoder tests (each module follows lines of the completion rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from lockgate.conversation import ToolSpec
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import Event, StreamEvent
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import Decision, ResponseGate
from lockgate.providers.anthropic.decoder import AnthropicDecoder
from lockgate.providers.anthropic.render import AnthropicRenderer, MessageBuilder
from lockgate.scripted.script import fragments
from lockgate.sse import SSEDecoder

EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
LAB = AnthropicRenderer()


def body(events: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join(LAB.frame(event) for event in events)


def decode_all(events: Sequence[dict[str, Any]]) -> list[StreamEvent]:
    """Every normalized event of a stream (end of body included)."""
    sse = SSEDecoder()
    decoder = AnthropicDecoder()
    out: list[StreamEvent] = []
    for event in sse.feed(body(events)) + sse.finish():
        out.extend(decoder.decode(event))
    out.extend(decoder.end_of_stream())
    return out


def decide(
    events: Sequence[Mapping[str, Any]] | bytes,
    tools: Sequence[ToolSpec] = ALL_TOOLS,
    chunks: Sequence[int] | None = None,
    observed: list[Event] | None = None,
) -> Decision:
    """Bytes → SSE → AnthropicDecoder → ResponseGate, as the client runs them."""
    payload = events if isinstance(events, bytes) else body(events)
    sse = SSEDecoder()
    decoder = AnthropicDecoder()
    gate = ResponseGate(tools, observed.append if observed is not None else lambda e: None)
    decision: Decision | None = None
    pieces = [payload] if chunks is None else list(fragments(payload, chunks))
    for piece in pieces:
        for event in sse.feed(piece):
            for normalized in decoder.decode(event):
                decision = gate.accept(normalized) or decision
    for event in sse.finish():
        for normalized in decoder.decode(event):
            decision = gate.accept(normalized) or decision
    if decision is None:
        for normalized in decoder.end_of_stream():
            decision = gate.accept(normalized) or decision
    if decision is None:
        raise ResponseFailure(FailureKind.STREAM_ENDED, "no terminal event")
    return decision


def fails(
    events: Sequence[dict[str, Any]], tools: Sequence[ToolSpec] = ALL_TOOLS
) -> ResponseFailure:
    with pytest.raises(ResponseFailure) as caught:
        decide(events, tools)
    return caught.value


def edit_message(stop_reason: str = "tool_use") -> MessageBuilder:
    builder = MessageBuilder("msg_1").start().text("Fixing.")
    return builder.tool_use("toolu_1", "edit", EDIT).finish(stop_reason)


def start_event(message_id: str = "msg_1", **extra: Any) -> dict[str, Any]:
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
        **extra,
    }
    return {"type": "message_start", "message": message}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str | None, **delta_fields: Any) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None, **delta_fields},
        "usage": {"output_tokens": 5},
    }


MESSAGE_STOP = {"type": "message_stop"}
TEXT = block_start(0, {"type": "text", "text": ""})


def text_stream(stop_reason: str | None = "end_turn") -> list[dict[str, Any]]:
    return [
        start_event(),
        TEXT,
        delta(0, type="text_delta", text="Hello"),
        stop(0),
        message_delta(stop_reason),
        MESSAGE_STOP,
    ]


def error_event(kind: str, message: str = "Overloaded") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
