"""The client side (`lockgate run`): one model turn, read from the normalized events an
observer sees, becomes a `TurnSummary` for a `TurnTracing` (the OpenTelemetry tracer: a
CLIENT span `chat {model}` and the `gen_ai.client.*` metrics).

A turn begins when the run or the previous turn's tools are done (no event says a request
was opened: the first event after that moment belongs to the next turn) and ends at its
`DecisionReady` or `ResponseFailed`. Only names, counts, times and kinds are kept: never
text, arguments or tool output.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..conversation import Usage
from ..events import (
    DecisionReady,
    Event,
    Recovering,
    ResponseFailed,
    ResponseStarted,
    RunStopped,
    ToolCallStarted,
    ToolFinished,
    ToolStarted,
    UsageReported,
)
from . import TokenUsage

__all__ = [
    "TurnObserver",
    "TurnSummary",
    "TurnTracing",
    "error_type",
    "operation_name",
]

# Events outside a model turn: after each, the next turn's clock starts.
_BETWEEN_TURNS = (ToolStarted, ToolFinished, Recovering, RunStopped)


@dataclass(frozen=True, slots=True)
class TurnSummary:
    """One model turn as the client saw it (times on `time.monotonic()`'s clock)."""

    protocol: str | None
    operation: str
    started: float
    ended: float
    request_model: str | None = None
    response_model: str | None = None
    finish_reasons: tuple[str, ...] = ()
    usage: TokenUsage | None = None
    error_type: str | None = None
    released_calls: int = 0
    withheld_calls: int = 0


class TurnTracing(Protocol):
    """What the client observer reports to (`OtelTracing.turn`)."""

    def turn(self, summary: TurnSummary) -> None: ...


def operation_name(protocol: str | None) -> str:
    """The conventions' `gen_ai.operation.name` for a lockgate protocol's inference call."""
    return "generate_content" if protocol == "gemini" else "chat"


def error_type(kind: str) -> str:
    """A lockgate failure kind as a low-cardinality `error.type` (`lockgate.invalid_batch`)."""
    return f"lockgate.{kind}"


def _usage(usage: Usage | None) -> TokenUsage | None:
    if usage is None:
        return None
    return TokenUsage(usage.input_tokens, usage.output_tokens)


class TurnObserver:
    """An `Observer` that reports each model turn to `tracing`. It never raises."""

    __slots__ = (
        "_calls",
        "_clock",
        "_in_turn",
        "_model",
        "_protocol",
        "_response_model",
        "_started",
        "_tracing",
        "_usage",
    )

    def __init__(
        self,
        tracing: TurnTracing,
        *,
        protocol: str | None,
        model: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tracing = tracing
        self._protocol = protocol
        self._model = model
        self._clock = clock
        self._started = clock()
        self._in_turn = False
        self._calls = 0
        self._response_model: str | None = None
        self._usage: Usage | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, _BETWEEN_TURNS):
            self._started = self._clock()
            self._in_turn = False
            return
        if not self._in_turn:
            self._in_turn = True
            self._calls = 0
            self._response_model = None
            self._usage = None
        if isinstance(event, ResponseStarted):
            self._response_model = event.model
        elif isinstance(event, ToolCallStarted):
            self._calls += 1
        elif isinstance(event, UsageReported):
            self._usage = event.usage
        elif isinstance(event, DecisionReady):
            usage = event.usage if event.usage is not None else self._usage
            calls = len(event.message.tool_calls)
            self._report(
                finish_reasons=(event.finish_reason,) if event.finish_reason else (),
                usage=usage,
                error=None,
                released=calls,
                withheld=0,
            )
        elif isinstance(event, ResponseFailed):
            self._report(
                finish_reasons=(),
                usage=self._usage,
                error=error_type(event.kind),
                released=0,
                withheld=self._calls,
            )

    def _report(
        self,
        *,
        finish_reasons: tuple[str, ...],
        usage: Usage | None,
        error: str | None,
        released: int,
        withheld: int,
    ) -> None:
        ended = self._clock()
        summary = TurnSummary(
            protocol=self._protocol,
            operation=operation_name(self._protocol),
            started=self._started,
            ended=ended,
            request_model=self._model,
            response_model=self._response_model,
            finish_reasons=finish_reasons,
            usage=_usage(usage),
            error_type=error,
            released_calls=released,
            withheld_calls=withheld,
        )
        self._started = ended
        self._in_turn = False
        with contextlib.suppress(Exception):  # an observer never fails a run
            self._tracing.turn(summary)
