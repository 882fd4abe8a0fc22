"""Normalized events: the only vocabulary between provider decoders, the gate, the loop and
observers (the terminal display and `--json`).

Provider decoders turn native wire events into `StreamEvent`s. The gate consumes those and
publishes progress; the boundary and the loop publish the rest. Observers see `Event`s and
never authorize anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .conversation import JSONObject, Message, StopReason, ToolCall, Usage

# --- produced by provider decoders -------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEvent:
    """Base of decoder output. `response_id` is set when the native event named its response."""

    response_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseStarted(StreamEvent):
    """The provider opened a response (must come first, exactly once, with an id)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseProgress(StreamEvent):
    """A lifecycle heartbeat (e.g. in-progress); carries identity, nothing else."""


@dataclass(frozen=True, slots=True)
class TextDelta(StreamEvent):
    text: str


@dataclass(frozen=True, slots=True)
class RefusalDelta(StreamEvent):
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta(StreamEvent):
    """Reasoning progress, kept apart from answer text: a summary or raw reasoning text."""

    text: str
    kind: Literal["summary", "raw"] = "summary"


@dataclass(frozen=True, slots=True)
class ToolCallStarted(StreamEvent):
    """A function-call item began. `item_id` keys its argument fragments."""

    item_id: str
    call_id: str
    name: str
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolArgumentsDelta(StreamEvent):
    item_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class ProviderReportedFailure(StreamEvent):
    """The provider said the response failed: an error event, failed or incomplete.
    `truncated`: it was cut off by the output-token limit (the decoder's translation)."""

    kind: Literal["error", "failed", "incomplete"]
    message: str
    code: str | None = None
    usage: Usage | None = None
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class OutputText:
    text: str


@dataclass(frozen=True, slots=True)
class OutputRefusal:
    text: str


@dataclass(frozen=True, slots=True)
class OutputCall:
    item_id: str
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class OutputReasoning:
    """A native reasoning item, opaque to lockgate, replayed unchanged."""

    item: JSONObject


@dataclass(frozen=True, slots=True)
class UnsupportedOutput:
    item_type: str


OutputItem = OutputText | OutputRefusal | OutputCall | OutputReasoning | UnsupportedOutput


@dataclass(frozen=True, slots=True)
class ResponseCompleted(StreamEvent):
    """The provider's terminal success event with its final output list. `finish_reason`
    is the provider's stated reason translated by its decoder to `stop` or `tool_calls`
    (anything else is not a success), or None if the provider states none."""

    status: str
    output: tuple[OutputItem, ...]
    usage: Usage | None = None
    finish_reason: str | None = None


# --- published by the gate, the boundary and the loop -------------------------------------


@dataclass(frozen=True, slots=True)
class ToolArgumentProgress:
    """Argument characters buffered so far for one call; execution still waits."""

    call_id: str
    name: str
    chars: int


@dataclass(frozen=True, slots=True)
class Retrying:
    """Opening failed retryably; another attempt follows after `delay` seconds."""

    attempt: int
    max_attempts: int
    delay: float
    reason: str


@dataclass(frozen=True, slots=True)
class UsageReported:
    """Token usage of one response (completed, incomplete or failed)."""

    usage: Usage


@dataclass(frozen=True, slots=True)
class DecisionReady:
    """A complete, validated response whose stream was closed cleanly."""

    message: Message
    finish_reason: str
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class Recovering:
    """A rejected batch or a truncated response became `error:` observations (`--recover`)."""

    kind: str
    calls: int
    consecutive: int
    budget: int


@dataclass(frozen=True, slots=True)
class ResponseFailed:
    """A response failed; nothing it requested runs."""

    kind: str
    message: str
    partial_text: str


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    name: str
    output: str


@dataclass(frozen=True, slots=True)
class RunStopped:
    reason: StopReason | Literal["provider_failure", "interrupted"]
    detail: str = ""


Event = (
    ResponseStarted
    | TextDelta
    | RefusalDelta
    | ReasoningDelta
    | UsageReported
    | Recovering
    | ToolCallStarted
    | ToolArgumentProgress
    | Retrying
    | DecisionReady
    | ResponseFailed
    | ToolStarted
    | ToolFinished
    | RunStopped
)

Observer = Callable[[Event], None]


def ignore_event(event: Event) -> None:
    """An observer that discards everything."""


class UsageMeter:
    """An observer that sums every reported usage (completed, incomplete or failed)."""

    def __init__(self) -> None:
        self.total = Usage()

    def __call__(self, event: Event) -> None:
        if isinstance(event, UsageReported):
            self.total += event.usage


def fan_out(*observers: Observer) -> Observer:
    """One observer that forwards each event to every observer, in order."""

    def forward(event: Event) -> None:
        for observer in observers:
            observer(event)

    return forward
