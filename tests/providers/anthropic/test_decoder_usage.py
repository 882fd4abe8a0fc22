"""Usage in an Anthropic Messages stream: cumulative, normalized, and attached to a truncation
but not to an error."""

from __future__ import annotations

from lockgate.conversation import Usage
from lockgate.events import Event, ProviderReportedFailure, UsageReported
from lockgate.providers.anthropic.decoder import USAGE_FIELDS
from lockgate.providers.decoding import usage_from

from .streams import decide, decode_all, error_event, start_event, text_stream

# --- usage --------------------------------------------------------------------------------


def test_usage_is_cumulative_and_normalized() -> None:
    events = text_stream()
    events[0] = start_event(
        usage={
            "input_tokens": 100,
            "output_tokens": 1,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 50,
        }
    )
    events[-2] = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {
            "output_tokens": 40,
            "input_tokens": 120,  # larger than at the start (server tools): it replaces
            "output_tokens_details": {"thinking_tokens": 12},
        },
    }
    observed: list[Event] = []
    decision = decide(events, observed=observed)
    expected = Usage(
        input_tokens=1170,
        cached_input_tokens=1000,
        output_tokens=40,
        reasoning_tokens=12,
        total_tokens=1210,
        cache_write_tokens=50,
    )
    assert decision.usage == expected
    assert [e for e in observed if isinstance(e, UsageReported)] == [UsageReported(expected)]


def test_usage_of_old_streams_with_only_output_tokens_in_message_delta() -> None:
    assert usage_from({"input_tokens": 9, "output_tokens": 3}, USAGE_FIELDS) == Usage(
        9, 0, 3, 0, 12, 0
    )


def test_usage_is_attached_to_a_truncation_and_not_to_an_error() -> None:
    truncated = decode_all(text_stream("max_tokens"))[-1]
    assert isinstance(truncated, ProviderReportedFailure)
    assert truncated.usage == Usage(10, 0, 5, 0, 15, 0)
    errored = decode_all([start_event(), error_event("api_error")])[-1]
    assert isinstance(errored, ProviderReportedFailure)
    assert errored.usage is None
