"""The Gemini lab renderer's round trip through the decoder, and the same decision however the
bytes are fragmented."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.conversation import NativeItem, Usage
from lockgate.errors import ResponseFailure
from lockgate.providers.decoding import synthesized_call_id
from lockgate.providers.gemini.render import ChunkBuilder, base64_signature
from lockgate.scripted.reply import Call, Reply, ReplyUsage, Say, Think

from .streams import EDIT, LAB, SIG, body, decide

# --- the lab renderer's round trip and fragmentation ----------------------------------------------

ROUND_TRIP = Reply(
    "resp_round_trip",
    (
        Think("Check the README.", "sig-round-trip"),
        Say("Ünïcödé fix — "),
        Call("call_1", "edit", EDIT),
        Call("", "read", {"path": "README.md"}),
    ),
    usage=ReplyUsage(input_tokens=50, output_tokens=30, reasoning_tokens=10),
)


def test_a_rendered_reply_round_trips() -> None:
    decision = decide(LAB.events(ROUND_TRIP))
    message = decision.message
    assert message.content == "Ünïcödé fix — "
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
        ("call_1", "edit", EDIT),
        (synthesized_call_id("resp_round_trip", "1"), "read", {"path": "README.md"}),
    ]
    assert message.output[0] == NativeItem(
        "reasoning", {"text": "Check the README.", "thought": True}
    )
    signature = base64_signature("sig-round-trip")
    assert message.output[2] == NativeItem("reasoning", {"thoughtSignature": signature})
    assert decision.usage == Usage(50, 0, 30, 10, 80)


def outcome(payload: bytes, sizes: Sequence[int] | None = None) -> object:
    """A comparable outcome: the released shape, or the failure's kind and message."""
    try:
        decision = decide(payload, pieces=sizes)
    except ResponseFailure as failure:
        return (failure.kind, failure.message)
    message = decision.message
    calls = [(c.name, c.arguments_json) for c in message.tool_calls]
    return (message.content, calls, message.output[:1], decision.usage, decision.finish_reason)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 97), min_size=1, max_size=12),
    ending=st.sampled_from(["complete", "truncated", "error", "open"]),
    lf=st.booleans(),
)
def test_fragmenting_the_bytes_anywhere_gives_the_same_decision(
    sizes: list[int], ending: str, lf: bool
) -> None:
    reply = dataclasses.replace(ROUND_TRIP, ending=ending)  # type: ignore[arg-type]
    payload = body(LAB.events(reply))
    if lf:
        payload = payload.replace(b"\r\n", b"\n")
    whole = outcome(payload)
    assert outcome(payload, sizes) == whole
    assert isinstance(whole, tuple)
    assert (whole[0] == "Ünïcödé fix — ") == (ending == "complete")


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 31), min_size=1, max_size=8))
def test_fragmenting_a_late_signature_stream_gives_the_same_replayable_output(
    sizes: list[int],
) -> None:
    builder = ChunkBuilder("resp-late").call("edit", EDIT)
    builder.chunk([{"text": "", "thoughtSignature": SIG}], "STOP")
    payload = body(builder.events)
    assert decide(payload, pieces=sizes).message.output == decide(payload).message.output
