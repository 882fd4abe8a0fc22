"""The Anthropic Messages decoder's rule, line 4: thinking streams apart from the answer and is
kept, signed or redacted, for replay."""

from __future__ import annotations

from typing import Any

from lockgate.conversation import CallPart, NativeItem, TextPart
from lockgate.events import NativeOutput, ReasoningDelta
from lockgate.providers.anthropic.render import MessageBuilder

from .streams import (
    MESSAGE_STOP,
    block_start,
    decide,
    decode_all,
    delta,
    message_delta,
    start_event,
    stop,
)

# --- 4. thinking --------------------------------------------------------------------------


def thinking_events(*signatures: str) -> list[dict[str, Any]]:
    events = [
        start_event(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="Look "),
        delta(0, type="thinking_delta", thinking=""),
        delta(0, type="thinking_delta", thinking="first."),
    ]
    events += [delta(0, type="signature_delta", signature=s) for s in signatures]
    return [
        *events,
        stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "discover", "input": {}}),
        delta(1, type="input_json_delta", partial_json=""),
        stop(1),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]


def test_thinking_streams_apart_and_becomes_a_native_item_at_its_stop() -> None:
    events = thinking_events("sig-A")
    normalized = decode_all(events)
    assert [e for e in normalized if isinstance(e, ReasoningDelta)] == [
        ReasoningDelta("Look ", "raw"),
        ReasoningDelta("first.", "raw"),
    ]
    natives = [e for e in normalized if isinstance(e, NativeOutput)]
    assert [(n.kind, dict(n.item)) for n in natives] == [
        ("reasoning", {"type": "thinking", "thinking": "Look first.", "signature": "sig-A"})
    ]
    assert natives[0].size > 0
    decision = decide(events)
    assert decision.message.content == ""  # reasoning is never answer text
    assert decision.message.output == (
        NativeItem(
            "reasoning", {"type": "thinking", "thinking": "Look first.", "signature": "sig-A"}
        ),
        CallPart("toolu_1"),
    )


def test_a_later_signature_delta_replaces_the_earlier_one() -> None:
    output = decide(thinking_events("first-sig", "second-sig")).message.output
    assert isinstance(output[0], NativeItem)
    assert output[0].item["signature"] == "second-sig"


def test_a_thinking_block_with_only_a_signature_is_kept() -> None:
    events = [
        start_event(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="signature_delta", signature="sig"),
        stop(0),
        block_start(1, {"type": "text", "text": ""}),
        delta(1, type="text_delta", text="Hi"),
        stop(1),
        message_delta("end_turn"),
        MESSAGE_STOP,
    ]
    output = decide(events).message.output
    assert output[0] == NativeItem(
        "reasoning", {"type": "thinking", "thinking": "", "signature": "sig"}
    )


def test_redacted_thinking_is_kept_unchanged() -> None:
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy+opaque=="}
    builder = MessageBuilder("msg_1").start().redacted_thinking(redacted["data"])
    decision = decide(builder.text("Hello").finish("end_turn").events)
    assert decision.message.output == (NativeItem("reasoning", redacted), TextPart("Hello"))
