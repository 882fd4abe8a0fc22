"""Usage in a Gemini stream: every field mapped, the total's fallback, the last report counts
and none is None."""

from __future__ import annotations

from lockgate.conversation import Usage
from lockgate.providers.decoding import usage_from
from lockgate.providers.gemini.decoder import USAGE_FIELDS

from .streams import chunk, decide, text

# --- usage ----------------------------------------------------------------------------------------


def test_usage_maps_every_field() -> None:
    raw = {
        "promptTokenCount": 147,
        "cachedContentTokenCount": 40,
        "toolUsePromptTokenCount": 360,
        "candidatesTokenCount": 108,
        "thoughtsTokenCount": 168,
        "totalTokenCount": 783,
    }
    assert usage_from(raw, USAGE_FIELDS) == Usage(
        input_tokens=507,
        cached_input_tokens=40,
        output_tokens=276,
        reasoning_tokens=168,
        total_tokens=783,
    )


def test_usage_total_falls_back_to_input_plus_output() -> None:
    assert usage_from(
        {"candidatesTokenCount": 23, "thoughtsTokenCount": 67}, USAGE_FIELDS
    ) == Usage(0, 0, 90, 67, 90)
    assert (
        usage_from({"promptTokenCount": "x", "candidatesTokenCount": -3}, USAGE_FIELDS) == Usage()
    )


def test_the_last_usage_counts_never_the_sum() -> None:
    first = {"promptTokenCount": 8, "candidatesTokenCount": 3, "totalTokenCount": 11}
    last = {"promptTokenCount": 427, "candidatesTokenCount": 9, "totalTokenCount": 436}
    chunks = [chunk(text("a"), usage=first), chunk(text("b"), finish="STOP", usage=last)]
    assert decide(chunks).usage == Usage(427, 0, 9, 0, 436)


def test_no_usage_reported_is_none() -> None:
    assert decide([chunk(text("Hi"), finish="STOP", usage=None)]).usage is None
