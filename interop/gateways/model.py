"""What the fault server plays and the harnesses expect, shared by `upstream` (which plays
it) and `scenarios` (which names it): a scenario's attempts, the answer an attempt streams,
its calls, the one `edit` tool every request declares, and the good answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "EDIT_CALL",
    "EDIT_TOOL",
    "GOOD",
    "Answer",
    "Attempt",
    "Ending",
    "Finish",
    "Scenario",
    "ToolCall",
]

Finish = Literal["stop", "tool_calls", "length"]
# How an attempt's body ends: all of it; a clean end of the HTTP body (chunked terminator)
# after `after`; a TCP reset there; silence there (until the peer leaves, bounded); the
# protocol's in-stream error there, then a clean end.
Ending = Literal["complete", "clean", "reset", "silent", "error"]

# The one tool every request declares: both arguments required.
EDIT_TOOL: dict[str, Any] = {
    "name": "edit",
    "description": "Replace a file's content.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    },
}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call as it streams: its arguments in the pieces they arrive in."""

    id: str
    name: str
    arguments: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """What the model says: text pieces, then calls, then its finish."""

    text: tuple[str, ...]
    calls: tuple[ToolCall, ...] = ()
    finish: Finish = "stop"


EDIT_CALL = ToolCall(
    "call_edit_1",
    "edit",
    ('{"path": "calculator.py", ', '"content": "def add(a, b):\\n    return a + b\\n"}'),
)
GOOD = Answer(("Fixing ", "the bug in add."), (EDIT_CALL,), "tool_calls")


@dataclass(frozen=True, slots=True)
class Attempt:
    """What the server does with one request.

    `status` other than 200: that status, `headers`, and an error body (`error_type`,
    `message`). `reset_before_head`: the request is read, then the connection reset.
    Otherwise the answer streams, and `end` happens after the `occurrence`-th frame labelled
    `after` (`start`, `text`, `call`, `args`, `finish`, `done`; None: right after the head).
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    error_type: str = "server_error"
    message: str = "The server had an error processing your request."
    reset_before_head: bool = False
    answer: Answer = GOOD
    end: Ending = "complete"
    after: str | None = None
    occurrence: int = 1
    silence_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named list of attempts; the n-th request gets the n-th (the last repeats)."""

    name: str
    attempts: tuple[Attempt, ...]
    description: str = ""

    def attempt(self, index: int) -> Attempt:
        return self.attempts[min(index, len(self.attempts) - 1)]
