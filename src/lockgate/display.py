"""Observers that render events: human terminal output or JSON lines.

Display never authorizes anything; it only reports. Argument progress is throttled so a
stream of thousands of deltas stays readable and cheap. Every line passes through a
redactor so that secrets never reach the terminal.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from .events import (
    DecisionReady,
    Event,
    ReasoningDelta,
    Recovering,
    RefusalDelta,
    ResponseFailed,
    ResponseStarted,
    Retrying,
    RunStopped,
    TextDelta,
    ToolArgumentProgress,
    ToolCallStarted,
    ToolFinished,
    ToolStarted,
    UsageReported,
)

PROGRESS_INTERVAL_SECONDS = 0.25
RESULT_PREVIEW_CHARS = 400


class Redactor:
    """Replaces each secret with a fixed marker."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        self._secrets = tuple(secret for secret in secrets if len(secret) >= 4)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text


class _ProgressThrottle:
    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}

    def due(self, key: str) -> bool:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            return False
        self._last[key] = now
        return True


def _one_line(text: str, limit: int = RESULT_PREVIEW_CHARS) -> str:
    flat = text.replace("\n", "\\n")
    return flat if len(flat) <= limit else flat[:limit] + "…"


class HumanDisplay:
    """Text deltas to stdout as they arrive; progress, calls and results to stderr."""

    def __init__(
        self,
        stdout: TextIO,
        stderr: TextIO,
        *,
        redact: Redactor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.redact = redact or Redactor()
        self._throttle = _ProgressThrottle(PROGRESS_INTERVAL_SECONDS, clock)
        self._mid_text = False
        self._mid_reasoning = False

    def _end_lines(self) -> None:
        if self._mid_text:
            self.stdout.write("\n")
            self.stdout.flush()
            self._mid_text = False
        if self._mid_reasoning:
            self.stderr.write("\n")
            self._mid_reasoning = False

    def _status(self, line: str) -> None:
        self._end_lines()
        self.stderr.write(self.redact(line) + "\n")
        self.stderr.flush()

    def __call__(self, event: Event) -> None:
        if isinstance(event, ReasoningDelta):
            # Reasoning goes to stderr, apart from the answer, marked as such.
            if not self._mid_reasoning:
                self._end_lines()
                self.stderr.write(f"thinking ({event.kind}): ")
                self._mid_reasoning = True
            self.stderr.write(self.redact(event.text))
            self.stderr.flush()
        elif isinstance(event, TextDelta | RefusalDelta):
            if self._mid_reasoning:
                self.stderr.write("\n")
                self._mid_reasoning = False
            self.stdout.write(self.redact(event.text))
            self.stdout.flush()
            self._mid_text = not event.text.endswith("\n")
        elif isinstance(event, ToolArgumentProgress):
            if self._throttle.due(event.call_id):
                self._status(f"arguments buffered: {event.name} ({event.chars} chars)")
        elif isinstance(event, ToolCallStarted):
            self._status(f"tool call streaming: {event.name} ({event.call_id})")
        elif isinstance(event, Retrying):
            self._status(
                f"retry opening: attempt {event.attempt}/{event.max_attempts} "
                f"in {event.delay:.2f} s ({event.reason})"
            )
        elif isinstance(event, ResponseFailed):
            self._status(f"response failed: {event.kind}: {event.message}")
        elif isinstance(event, DecisionReady):
            calls = ", ".join(call.name for call in event.message.tool_calls) or "none"
            self._status(f"response complete ({event.finish_reason}): calls: {calls}")
        elif isinstance(event, Recovering):
            self._status(
                f"recovering from {event.kind}: {event.calls} call(s) answered with errors, "
                f"none executed ({event.consecutive}/{event.budget} in a row)"
            )
        elif isinstance(event, ToolStarted):
            arguments = json.dumps(dict(event.call.arguments), ensure_ascii=False)
            self._status(f"run {event.call.name} {_one_line(arguments)}")
        elif isinstance(event, ToolFinished):
            self._status(f"result {event.name}: {_one_line(event.output)}")
        elif isinstance(event, ResponseStarted | RunStopped | UsageReported):
            pass  # the CLI prints the stop and usage lines itself


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_jsonable(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return value


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def event_record(event: Any) -> dict[str, Any]:
    """The JSON form of an event: `{"event": "text_delta", ...fields}`."""
    record: dict[str, Any] = {"event": _snake(type(event).__name__)}
    record.update(_jsonable(event))
    return record


class JsonLinesDisplay:
    """Every event as one JSON object per line (argument progress throttled)."""

    def __init__(
        self,
        stdout: TextIO,
        *,
        redact: Redactor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stdout = stdout
        self.redact = redact or Redactor()
        self._throttle = _ProgressThrottle(PROGRESS_INTERVAL_SECONDS, clock)

    def __call__(self, event: Event) -> None:
        if isinstance(event, ToolArgumentProgress) and not self._throttle.due(event.call_id):
            return
        self.emit(event_record(event))

    def emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str)
        self.stdout.write(self.redact(line) + "\n")
        self.stdout.flush()
