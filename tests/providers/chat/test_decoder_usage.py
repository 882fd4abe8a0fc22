"""Usage in a Chat Completions stream: the last non-null report wins, totals default, and no
usage is None, never zero."""

from __future__ import annotations

from lockgate.conversation import Usage
from lockgate.events import UsageReported

from .streams import DONE, chunk, run, text, usage_chunk

# --- usage ---------------------------------------------------------------------------------------


def test_usage_last_non_null_wins_including_x_groq() -> None:
    outcome = run(
        text("A", usage={"prompt_tokens": 1, "completion_tokens": 1}),
        text("B", usage=None),
        chunk(
            {},
            "stop",
            x_groq={
                "id": "req_1",
                "usage": {
                    "prompt_tokens": 20,
                    "completion_tokens": 7,
                    "total_tokens": 27,
                    "prompt_tokens_details": {"cached_tokens": 4},
                    "completion_tokens_details": {"reasoning_tokens": 3},
                },
            },
        ),
        DONE,
    )
    assert outcome.decision.usage == Usage(20, 4, 7, 3, 27)
    assert UsageReported(Usage(20, 4, 7, 3, 27)) in outcome.seen
    later = run(
        text("A", "stop", x_groq={"usage": {"prompt_tokens": 2}}),
        usage_chunk(9, 1, total_tokens=11),
        DONE,
    )
    assert later.decision.usage == Usage(9, 0, 1, 0, 11)


def test_total_defaults_to_input_plus_output() -> None:
    outcome = run(text("A", "stop"), usage_chunk(10, 5), DONE)
    assert outcome.decision.usage == Usage(10, 0, 5, 0, 15)


def test_no_usage_is_none_never_zero() -> None:
    outcome = run(text("A", "stop", usage=None), DONE)
    assert outcome.decision.usage is None
    assert not any(isinstance(e, UsageReported) for e in outcome.seen)
