"""The Anthropic lab renderer's round trip through the decoder, and the same decision however
the bytes are fragmented."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.conversation import Usage
from lockgate.errors import ResponseFailure
from lockgate.gate import Decision
from lockgate.scripted.reply import Call, ProviderTool, Reply, ReplyUsage, Say, Think

from .streams import EDIT, LAB, body, decide

# --- the lab renderer round trip and fragmentation ------------------------------------------


ROUND_TRIP = Reply(
    "msg_round",
    (
        Say("Ünïcödé ✓ first, "),
        Think("Thinking about 修正.", "sig-round"),
        ProviderTool("add subtracts"),
        Call("toolu_a", "read", {"path": "README.md"}),
        Say("then more."),
        Call("toolu_b", "edit", EDIT, pieces=9),
    ),
    usage=ReplyUsage(input_tokens=500, cached_input_tokens=300, output_tokens=20),
)


def test_a_rendered_reply_decodes_to_the_same_text_and_calls() -> None:
    decision = decide(LAB.events(ROUND_TRIP))
    assert decision.message.content == "Ünïcödé ✓ first, then more."
    assert [(c.id, c.name, dict(c.arguments)) for c in decision.message.tool_calls] == [
        ("toolu_a", "read", {"path": "README.md"}),
        ("toolu_b", "edit", EDIT),
    ]
    kinds = [type(p).__name__ for p in decision.message.output]
    assert kinds == [
        "TextPart",
        "NativeItem",
        "NativeItem",
        "NativeItem",
        "CallPart",
        "TextPart",
        "CallPart",
    ]
    assert decision.usage == Usage(500, 300, 20, 0, 520, 0)


def outcome(payload: bytes, chunks: Sequence[int] | None = None) -> object:
    """The decision, or the failure's kind and message."""
    try:
        return decide(payload, chunks=chunks)
    except ResponseFailure as failure:
        return (failure.kind, failure.message)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 97), min_size=1, max_size=12),
    ending=st.sampled_from(["complete", "truncated", "error", "open", "paused"]),
    crlf=st.booleans(),
)
def test_fragmenting_the_bytes_anywhere_gives_the_same_decision(
    sizes: list[int], ending: str, crlf: bool
) -> None:
    reply = dataclasses.replace(ROUND_TRIP, ending=ending)  # type: ignore[arg-type]
    payload = body(LAB.events(reply))
    if crlf:
        payload = payload.replace(b"\n", b"\r\n")
    whole = outcome(payload)
    assert outcome(payload, sizes) == whole
    assert isinstance(whole, Decision) == (ending == "complete")
