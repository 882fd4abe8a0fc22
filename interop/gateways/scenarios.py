"""The faults both harnesses play, as `model.Scenario`s named by the model they answer.

`GATEWAY_FAULTS` are a gateway's everyday failures (issue 24's benchmark run): each but the
persistent 503 and the cut fails once, then answers well. `GATE_FAULTS` are the broken
answers the gate exists for. Every good answer carries text, then one valid `edit` call.
`expect` says what a client must end with: `success` (the full good answer: a retry or a
fall-back got it unseen) or `error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .model import EDIT_CALL, GOOD, Answer, Attempt, Scenario, ToolCall

__all__ = [
    "ALL_SCENARIOS",
    "FALLBACK_MODEL",
    "GATEWAY_FAULTS",
    "GATE_FAULTS",
    "Fault",
]

FALLBACK_MODEL = "healthy"
GOOD_ATTEMPT = Attempt()


@dataclass(frozen=True, slots=True)
class Fault:
    """A scenario, what a client must end with, and whether its route has a fall-back."""

    scenario: Scenario
    expect: Literal["success", "error"]
    fallback: bool = False

    @property
    def name(self) -> str:
        return self.scenario.name


def _once(name: str, first: Attempt, description: str) -> Fault:
    return Fault(Scenario(name, (first, GOOD_ATTEMPT), description), "success")


RATE_LIMITED = Attempt(
    status=429,
    headers=(("retry-after", "1"),),
    error_type="requests",
    message="Rate limit reached for requests. Please try again in 1s.",
)
GATEWAY_FAULTS: tuple[Fault, ...] = (
    _once("429-once", RATE_LIMITED, "429 with retry-after: 1, then a good stream"),
    _once("500-once", Attempt(status=500), "500, then a good stream"),
    _once(
        "reset-before-head-once",
        Attempt(reset_before_head=True),
        "a TCP reset before the response head, then a good stream",
    ),
    Fault(
        Scenario(
            "503-persistent",
            (Attempt(status=503, message="Service unavailable: overloaded"),),
            "503 on every attempt; the route's fall-back upstream is healthy",
        ),
        "success",
        fallback=True,
    ),
    Fault(
        Scenario(
            "503-persistent-no-fallback",
            (Attempt(status=503, message="Service unavailable: overloaded"),),
            "503 on every attempt, no fall-back: how many attempts every retry owner adds",
        ),
        "error",
    ),
    _once(
        "silence-once",
        Attempt(end="silent", after=None),
        "the head, then nothing (the route's idle timeout: 2 s), then a good stream",
    ),
    Fault(
        Scenario(
            "cut-mid-answer",
            (Attempt(end="reset", after="text", occurrence=2), GOOD_ATTEMPT),
            "text forwarded, then a TCP reset (a second request would be answered well)",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "eof-mid-answer",
            (Attempt(end="clean", after="text", occurrence=2), GOOD_ATTEMPT),
            "text forwarded, then a clean end of the body: no finish, no [DONE]",
        ),
        "error",
    ),
)

SECOND_CALL_MISSING = ToolCall("call_edit_2", "edit", ('{"path": "README.md"}',))
UNDECLARED = ToolCall("call_rm_1", "delete_repository", ('{"confirm": ', "true}"))
CUT_BY_LIMIT = ToolCall(
    "call_edit_1", "edit", ('{"path": "calculator.py", ', '"content": "def add(a, b):\\n    ret')
)
SECOND_EDIT = ToolCall(
    "call_edit_2", "edit", ('{"path": "README.md", ', '"content": "add adds.\\n"}')
)
TWO_CALLS = Answer(GOOD.text, (EDIT_CALL, SECOND_EDIT), "tool_calls")

GATE_FAULTS: tuple[Fault, ...] = (
    Fault(Scenario("control", (GOOD_ATTEMPT,), "a complete, valid tool call"), "success"),
    Fault(
        Scenario(
            "eof-in-arguments",
            (Attempt(end="clean", after="args"),),
            "a clean end of the body inside the call's arguments (no finish, no [DONE])",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "reset-in-arguments",
            (Attempt(end="reset", after="args"),),
            "a TCP reset inside the call's arguments",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "reset-between-calls",
            (Attempt(answer=TWO_CALLS, end="reset", after="args", occurrence=2),),
            "two edits; a TCP reset right after the first one's arguments are complete",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "eof-between-calls",
            (Attempt(answer=TWO_CALLS, end="clean", after="args", occurrence=2),),
            "two edits; a clean end of the body right after the first one's arguments",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "second-call-missing-argument",
            (Attempt(answer=Answer(GOOD.text, (EDIT_CALL, SECOND_CALL_MISSING), "tool_calls")),),
            "a complete stream: a valid edit, then an edit without its required `content`",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "undeclared-tool",
            (Attempt(answer=Answer(GOOD.text, (UNDECLARED,), "tool_calls")),),
            "a complete stream calling a tool the request did not declare",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "in-stream-error",
            (Attempt(end="error", after="args"),),
            "the protocol's in-stream error inside the call's arguments",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "output-limit",
            (Attempt(answer=Answer(GOOD.text, (CUT_BY_LIMIT,), "length")),),
            "finish_reason length (Anthropic: max_tokens) with the call's arguments cut",
        ),
        "error",
    ),
    Fault(
        Scenario(
            "silence-in-arguments",
            (Attempt(end="silent", after="args", silence_seconds=40.0),),
            "silence inside the call's arguments (the server waits up to 40 s)",
        ),
        "error",
    ),
)

HEALTHY = Scenario(FALLBACK_MODEL, (GOOD_ATTEMPT,), "always a good stream")
ALL_SCENARIOS: tuple[Scenario, ...] = (
    *(fault.scenario for fault in GATEWAY_FAULTS),
    *(fault.scenario for fault in GATE_FAULTS),
    HEALTHY,
)
