"""The gate: one provider-neutral lifecycle and batch validator for every provider.

Text, refusal and reasoning deltas pass straight through to the observer. Tool calls are
buffered by item id. Only a terminal success event can produce a decision, and only after
the lifecycle checks and the whole batch validated: one invalid call rejects every call of
the response. The lifecycle rules hold for any provider's normalized events: started first
and once, nothing after the terminal event, consistent identity, the terminal call list
equal to the streamed calls, and a stated finish reason that agrees with the calls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from jsonschema import Draft202012Validator

from .conversation import Message, ReasoningItem, ToolCall, ToolSpec, Usage
from .errors import FailureKind, Recovery, ResponseFailure
from .events import (
    Observer,
    OutputCall,
    OutputReasoning,
    OutputRefusal,
    OutputText,
    ProviderReportedFailure,
    ReasoningDelta,
    RefusalDelta,
    ResponseCompleted,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolArgumentProgress,
    ToolArgumentsDelta,
    ToolCallStarted,
    UsageReported,
)

# Normalized finish reasons of a successful completion (decoders translate native ones).
FINISH_WITH_CALLS = "tool_calls"
FINISH_WITHOUT_CALLS = "stop"


@dataclass(frozen=True, slots=True)
class GateLimits:
    """Bounds on what one response may make lockgate retain."""

    max_text_chars: int = 64_000
    max_calls: int = 8
    max_argument_chars: int = 16_000


@dataclass(frozen=True, slots=True)
class Decision:
    """A validated response: the assistant message, its finish reason and usage."""

    message: Message
    finish_reason: str
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class CallProblem:
    """Why one call of a completed batch was rejected."""

    call_id: str
    name: str
    problem: str


class InvalidBatch(ResponseFailure):
    """A completed response requested at least one invalid call; none may run."""

    def __init__(self, problems: Sequence[CallProblem], recovery: Recovery | None) -> None:
        self.problems = tuple(problems)
        summary = "; ".join(
            f"{p.name or '?'} ({p.call_id or 'no id'}): {p.problem}" for p in problems
        )
        super().__init__(
            FailureKind.INVALID_BATCH,
            f"batch rejected, nothing executed: {summary}",
            recovery=recovery,
        )


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


def _pairable(calls: Sequence[tuple[str, str]]) -> bool:
    """Calls can get paired observations only with non-empty, unique ids and names."""
    ids = [call_id for call_id, _ in calls]
    return all(ids) and all(name for _, name in calls) and len(set(ids)) == len(ids)


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

    def accept(self, event: StreamEvent) -> Decision | None:
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
        elif isinstance(event, ReasoningDelta):
            self._observer(event)
        elif isinstance(event, ToolCallStarted):
            self._call_started(event)
        elif isinstance(event, ProviderReportedFailure):
            self._finished = True
            self._report_usage(event.usage)
            raise self._provider_failure(event)
        elif isinstance(event, ResponseCompleted):
            self._finished = True
            self._report_usage(event.usage)
            return self._completed(event)
        return None

    def _report_usage(self, usage: Usage | None) -> None:
        if usage is not None:
            self._observer(UsageReported(usage))

    def _provider_failure(self, event: ProviderReportedFailure) -> ResponseFailure:
        detail = f" [{event.code}]" if event.code else ""
        kind = _FAILURE_KINDS[event.kind]
        message = f"{event.message}{detail}; buffered calls discarded"
        recovery = None
        calls = list(self._pending.values())
        if (
            kind is FailureKind.RESPONSE_INCOMPLETE
            and event.truncated
            and calls
            and _pairable([(c.call_id, c.name) for c in calls])
        ):
            note = (
                "error: the response was truncated by the output limit before this call's "
                "arguments were complete; the call was not executed. Reissue it with smaller "
                "arguments (for example, split a large edit)."
            )
            message_with_calls = Message(
                "assistant",
                self.partial_text,
                tuple(ToolCall(c.call_id, c.name, {}, c.arguments()) for c in calls),
            )
            recovery = Recovery(message_with_calls, tuple(note for _ in calls))
        return ResponseFailure(kind, message, recovery=recovery)

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

    def _completed(self, event: ResponseCompleted) -> Decision:
        if event.response_id != self.response_id:
            raise ResponseFailure(FailureKind.LIFECYCLE, "completed response has another id")
        if event.status != "completed":
            raise ResponseFailure(
                FailureKind.LIFECYCLE, f"terminal event has status {event.status!r}"
            )
        text: list[str] = []
        terminal_calls: list[OutputCall] = []
        reasoning: list[ReasoningItem] = []
        waiting: list[OutputReasoning] = []  # reasoning items not yet followed by a call
        for item in event.output:
            if isinstance(item, OutputText | OutputRefusal):
                text.append(item.text)
            elif isinstance(item, OutputCall):
                terminal_calls.append(item)
                reasoning.extend(ReasoningItem(item.call_id, r.item) for r in waiting)
                waiting = []
            elif isinstance(item, OutputReasoning):
                waiting.append(item)
            else:
                raise ResponseFailure(
                    FailureKind.UNSUPPORTED_OUTPUT,
                    f"output item {item.item_type!r} cannot be replayed; response rejected",
                )
        # Reasoning not followed by any call is never replayed: it would be an orphan.
        content = "".join(text)
        if len(content) > self._limits.max_text_chars:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"response text exceeded {self._limits.max_text_chars} characters",
            )
        self._match_streamed(terminal_calls)
        finish_reason = self._finish_reason(event.finish_reason, bool(terminal_calls))
        calls = self._validate_batch(terminal_calls, content)
        message = Message(
            "assistant",
            content,
            calls,
            response_id=self.response_id,
            usage=event.usage,
            reasoning=tuple(reasoning),
        )
        return Decision(message, finish_reason, event.usage)

    @staticmethod
    def _finish_reason(stated: str | None, has_calls: bool) -> str:
        """A stated (normalized) finish reason must agree with the presence of calls; a
        provider that states none gets the one its calls imply."""
        implied = FINISH_WITH_CALLS if has_calls else FINISH_WITHOUT_CALLS
        if stated is None or stated == implied:
            return implied
        if stated in (FINISH_WITH_CALLS, FINISH_WITHOUT_CALLS):
            having = "has" if has_calls else "has no"
            raise ResponseFailure(
                FailureKind.LIFECYCLE, f"finish reason {stated!r} but the response {having} calls"
            )
        raise ResponseFailure(
            FailureKind.LIFECYCLE, f"finish reason {stated!r} is not a successful completion"
        )

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

    def _validate_batch(
        self, terminal_calls: list[OutputCall], content: str
    ) -> tuple[ToolCall, ...]:
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
            raise InvalidBatch(problems, self._batch_recovery(terminal_calls, problems, content))
        return tuple(calls)

    def _batch_recovery(
        self, terminal_calls: list[OutputCall], problems: list[CallProblem], content: str
    ) -> Recovery | None:
        if not _pairable([(c.call_id, c.name) for c in terminal_calls]):
            return None
        by_id = {p.call_id: p.problem for p in problems}
        invalid = ", ".join(p.call_id for p in problems)
        observations = tuple(
            f"error: call rejected, not executed: {by_id[c.call_id]}"
            if c.call_id in by_id
            else f"error: not executed because another call in the same response was invalid "
            f"({invalid}); reissue this call if you still need it"
            for c in terminal_calls
        )
        calls = tuple(
            ToolCall(c.call_id, c.name, _parsed_or_empty(c.arguments), c.arguments)
            for c in terminal_calls
        )
        return Recovery(Message("assistant", content, calls), observations)

    def _problem(self, call: OutputCall, earlier_ids: set[str]) -> str | None:
        if not call.call_id:
            return "empty call id"
        if call.call_id in earlier_ids:
            return "duplicate call id"
        if call.name not in self._tools:
            exposed = ", ".join(sorted(self._tools)) or "none"
            return f"tool {call.name!r} is not exposed (exposed tools: {exposed})"
        try:
            arguments = json.loads(call.arguments)
        except ValueError as exc:
            return f"arguments are not valid JSON ({exc})"
        if type(arguments) is not dict:
            return "arguments are not a JSON object"
        errors = sorted(self._validators[call.name].iter_errors(arguments), key=str)
        if errors:
            where = "/".join(str(part) for part in errors[0].absolute_path)
            at = f" at {where}" if where else ""
            return f"arguments do not match the schema{at}: {errors[0].message}"
        return None


def _parsed_or_empty(arguments: str) -> dict[str, object]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
