"""The gate: one provider-neutral lifecycle and batch validator for every provider.

Text and refusal deltas pass straight through to the observer. Tool calls are buffered by
item id. Only a terminal success event can produce a decision, and only after the whole
batch validated: one invalid call rejects every call of the response.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from jsonschema import Draft202012Validator

from .conversation import Message, ToolCall, ToolSpec
from .errors import FailureKind, ResponseFailure
from .events import (
    Observer,
    OutputCall,
    OutputRefusal,
    OutputText,
    ProviderReportedFailure,
    RefusalDelta,
    ResponseCompleted,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolArgumentProgress,
    ToolArgumentsDelta,
    ToolCallStarted,
)


@dataclass(frozen=True, slots=True)
class GateLimits:
    """Bounds on what one response may make lockgate retain."""

    max_text_chars: int = 64_000
    max_calls: int = 8
    max_argument_chars: int = 16_000


@dataclass(frozen=True, slots=True)
class CallProblem:
    """Why one call of a completed batch was rejected."""

    call_id: str
    name: str
    problem: str


class InvalidBatch(ResponseFailure):
    """A completed response requested at least one invalid call; none may run."""

    def __init__(self, problems: Sequence[CallProblem]) -> None:
        self.problems = tuple(problems)
        summary = "; ".join(
            f"{p.name or '?'} ({p.call_id or 'no id'}): {p.problem}" for p in problems
        )
        super().__init__(FailureKind.INVALID_BATCH, f"batch rejected, nothing executed: {summary}")


class _PendingCall:
    __slots__ = ("call_id", "chars", "fragments", "name")

    def __init__(self, call_id: str, name: str, arguments: str) -> None:
        self.call_id = call_id
        self.name = name
        self.fragments = [arguments] if arguments else []
        self.chars = len(arguments)

    def arguments(self) -> str:
        joined = "".join(self.fragments)
        self.fragments = [joined]
        return joined


_FAILURE_KINDS = {
    "error": FailureKind.PROVIDER_ERROR,
    "failed": FailureKind.RESPONSE_FAILED,
    "incomplete": FailureKind.RESPONSE_INCOMPLETE,
}


class ResponseGate:
    """Assembles one response from normalized events and validates it at completion."""

    def __init__(
        self,
        tools: Sequence[ToolSpec],
        observer: Observer,
        limits: GateLimits | None = None,
    ) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._validators = {
            tool.name: Draft202012Validator(dict(tool.parameters)) for tool in tools
        }
        self._observer = observer
        self._limits = limits or GateLimits()
        self._pending: dict[str, _PendingCall] = {}
        self._text: list[str] = []
        self._text_chars = 0
        self.response_id: str | None = None
        self._finished = False

    @property
    def partial_text(self) -> str:
        """The text shown so far (for failure reports)."""
        return "".join(self._text)

    def accept(self, event: StreamEvent) -> Message | None:
        """Accept one event; return the decision only at validated completion.

        Raises ResponseFailure for any lifecycle, bound or validation failure.
        """
        if self._finished:
            raise ResponseFailure(FailureKind.LIFECYCLE, "event after the terminal event")
        if isinstance(event, ResponseStarted):
            if self.response_id is not None:
                raise ResponseFailure(FailureKind.LIFECYCLE, "duplicate response start")
            if not event.response_id:
                raise ResponseFailure(FailureKind.LIFECYCLE, "response start has no id")
            self.response_id = event.response_id
            self._observer(event)
            return None
        if self.response_id is None:
            raise ResponseFailure(FailureKind.LIFECYCLE, "response data before the response start")
        if event.response_id is not None and event.response_id != self.response_id:
            raise ResponseFailure(
                FailureKind.LIFECYCLE,
                f"event for response {event.response_id!r} inside response {self.response_id!r}",
            )
        if isinstance(event, ToolArgumentsDelta):
            self._arguments(event)
        elif isinstance(event, TextDelta | RefusalDelta):
            self._preview(event)
        elif isinstance(event, ToolCallStarted):
            self._call_started(event)
        elif isinstance(event, ProviderReportedFailure):
            self._finished = True
            detail = f" [{event.code}]" if event.code else ""
            raise ResponseFailure(
                _FAILURE_KINDS[event.kind],
                f"{event.message}{detail}; buffered calls discarded",
            )
        elif isinstance(event, ResponseCompleted):
            self._finished = True
            return self._completed(event)
        return None

    def _preview(self, event: TextDelta | RefusalDelta) -> None:
        self._text_chars += len(event.text)
        if self._text_chars > self._limits.max_text_chars:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"text preview exceeded {self._limits.max_text_chars} characters",
            )
        self._text.append(event.text)
        self._observer(event)

    def _call_started(self, event: ToolCallStarted) -> None:
        if event.item_id in self._pending:
            raise ResponseFailure(FailureKind.LIFECYCLE, f"duplicate tool item {event.item_id!r}")
        if len(self._pending) >= self._limits.max_calls:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED, f"more than {self._limits.max_calls} tool calls"
            )
        pending = _PendingCall(event.call_id, event.name, event.arguments)
        self._check_arguments(pending)
        self._pending[event.item_id] = pending
        self._observer(event)

    def _arguments(self, event: ToolArgumentsDelta) -> None:
        pending = self._pending.get(event.item_id)
        if pending is None:
            raise ResponseFailure(
                FailureKind.LIFECYCLE, f"argument delta for unknown tool item {event.item_id!r}"
            )
        pending.fragments.append(event.delta)
        pending.chars += len(event.delta)
        self._check_arguments(pending)
        self._observer(ToolArgumentProgress(pending.call_id, pending.name, pending.chars))

    def _check_arguments(self, pending: _PendingCall) -> None:
        if pending.chars > self._limits.max_argument_chars:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"tool arguments exceeded {self._limits.max_argument_chars} characters",
            )

    def _completed(self, event: ResponseCompleted) -> Message:
        if event.response_id != self.response_id:
            raise ResponseFailure(FailureKind.LIFECYCLE, "completed response has another id")
        if event.status != "completed":
            raise ResponseFailure(
                FailureKind.LIFECYCLE, f"terminal event has status {event.status!r}"
            )
        text: list[str] = []
        terminal_calls: list[OutputCall] = []
        for item in event.output:
            if isinstance(item, OutputText | OutputRefusal):
                text.append(item.text)
            elif isinstance(item, OutputCall):
                terminal_calls.append(item)
            else:
                raise ResponseFailure(
                    FailureKind.UNSUPPORTED_OUTPUT,
                    f"output item {item.item_type!r} cannot be replayed; response rejected",
                )
        content = "".join(text)
        if len(content) > self._limits.max_text_chars:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"response text exceeded {self._limits.max_text_chars} characters",
            )
        self._match_streamed(terminal_calls)
        return Message("assistant", content, self._validate_batch(terminal_calls))

    def _match_streamed(self, terminal_calls: list[OutputCall]) -> None:
        """The terminal call list must be exactly the calls that were streamed."""
        seen: set[str] = set()
        for call in terminal_calls:
            pending = self._pending.get(call.item_id)
            if pending is None or call.item_id in seen:
                raise ResponseFailure(
                    FailureKind.CALL_MISMATCH,
                    f"terminal call {call.call_id or call.item_id!r} was not streamed",
                )
            seen.add(call.item_id)
            if (pending.call_id, pending.name, pending.arguments()) != (
                call.call_id,
                call.name,
                call.arguments,
            ):
                raise ResponseFailure(
                    FailureKind.CALL_MISMATCH,
                    f"terminal call {call.call_id!r} differs from the streamed call",
                )
        if len(seen) != len(self._pending):
            missing = sorted(set(self._pending) - seen)
            raise ResponseFailure(
                FailureKind.CALL_MISMATCH,
                f"streamed call item(s) {', '.join(missing)} missing from the terminal response",
            )

    def _validate_batch(self, terminal_calls: list[OutputCall]) -> tuple[ToolCall, ...]:
        problems: list[CallProblem] = []
        calls: list[ToolCall] = []
        call_ids: set[str] = set()
        for call in terminal_calls:
            problem = self._problem(call, call_ids)
            call_ids.add(call.call_id)
            if problem is not None:
                problems.append(CallProblem(call.call_id, call.name, problem))
                continue
            calls.append(
                ToolCall(call.call_id, call.name, json.loads(call.arguments), call.arguments)
            )
        if problems:
            raise InvalidBatch(problems)
        return tuple(calls)

    def _problem(self, call: OutputCall, earlier_ids: set[str]) -> str | None:
        if not call.call_id:
            return "empty call id"
        if call.call_id in earlier_ids:
            return "duplicate call id"
        if call.name not in self._tools:
            return f"tool {call.name!r} is not exposed"
        try:
            arguments = json.loads(call.arguments)
        except ValueError as exc:
            return f"arguments are not valid JSON ({exc})"
        if type(arguments) is not dict:
            return "arguments are not a JSON object"
        errors = sorted(self._validators[call.name].iter_errors(arguments), key=str)
        if errors:
            return f"arguments do not match the schema: {errors[0].message}"
        return None
