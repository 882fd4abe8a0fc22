"""Display is an observer: it renders, throttles and redacts, and decides nothing."""

from __future__ import annotations

import io
import json

from lockgate.conversation import Message, ToolCall, Usage
from lockgate.display import HumanDisplay, JsonLinesDisplay, Redactor, event_record
from lockgate.events import (
    DecisionReady,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolArgumentProgress,
    UsageReported,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_argument_progress_is_throttled_per_call() -> None:
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    display = HumanDisplay(out, err, clock=clock)
    for chars in range(1, 5001):
        display(ToolArgumentProgress("call_1", "edit", chars))
    clock.now = 0.3
    display(ToolArgumentProgress("call_1", "edit", 5001))
    display(ToolArgumentProgress("call_2", "read", 7))
    assert err.getvalue().splitlines() == [
        "arguments buffered: edit (1 chars)",
        "arguments buffered: edit (5001 chars)",
        "arguments buffered: read (7 chars)",
    ]


def test_text_to_stdout_reasoning_and_status_to_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    display = HumanDisplay(out, err)
    display(ReasoningDelta("plan", "summary"))
    display(TextDelta("Hello"))
    display(TextDelta(" world"))
    display(Retrying(2, 3, 0.4, "HTTP 429"))
    assert out.getvalue() == "Hello world\n"
    assert (
        err.getvalue()
        == "thinking (summary): plan\nretry opening: attempt 2/3 in 0.40 s (HTTP 429)\n"
    )


def test_secrets_are_redacted_everywhere() -> None:
    redact = Redactor(["sk-secret-123"])
    out, err = io.StringIO(), io.StringIO()
    HumanDisplay(out, err, redact=redact)(TextDelta("key sk-secret-123"))
    JsonLinesDisplay(out, redact=redact)(Retrying(2, 3, 1.0, "echo sk-secret-123"))
    assert "sk-secret-123" not in out.getvalue() + err.getvalue()
    assert out.getvalue().count("[redacted]") == 2


def test_json_records_carry_every_field() -> None:
    call = ToolCall("call_1", "read", {"path": "README.md"}, '{"path": "README.md"}')
    usage = Usage(10, 5, 3, 1, 13)
    record = event_record(DecisionReady(Message("assistant", "x", (call,)), "tool_calls", usage))
    assert record["event"] == "decision_ready"
    assert record["finish_reason"] == "tool_calls"
    assert record["usage"] == {
        "input_tokens": 10,
        "cached_input_tokens": 5,
        "output_tokens": 3,
        "reasoning_tokens": 1,
        "total_tokens": 13,
    }
    assert record["message"]["tool_calls"][0]["arguments"] == {"path": "README.md"}
    out = io.StringIO()
    JsonLinesDisplay(out)(UsageReported(usage))
    assert json.loads(out.getvalue()) == {"event": "usage_reported", "usage": record["usage"]}
