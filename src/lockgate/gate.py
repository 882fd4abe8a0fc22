"""The gate: every stream rule, for every provider, on normalized events.

Text, refusal and reasoning deltas pass straight through to the observer (within bounds).
Tool calls are buffered by the decoder's key. Only the protocol's terminal success can
produce a decision, and only after the lifecycle checks and the whole batch validated: one
invalid call rejects every call of the response.

Lifecycle: the response starts first and once, with an id; every event that names its
response names the same one; nothing follows the terminal event (failure or success).
Completion: where the protocol's terminal event carries an output snapshot, its calls must be
exactly the streamed calls (ids, names, argument bytes); where it sends none, the decision is
built from the streamed parts. A stated finish reason must agree with the calls. Batch: call
ids non-empty and unique, every tool exposed, arguments a JSON object (bounded nesting)
matching the tool's schema, a custom tool's input a sentence of its declared grammar.
Provider output (server tools) and reasoning are kept opaque, in order, and never authorize
anything: only function calls reach the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .conversation import (
    CallPart,
    Message,
    NativeItem,
    OutputPart,
    RefusalPart,
    TextPart,
    ToolCall,
    ToolSpec,
    Usage,
)
from .errors import FailureKind, Recovery, ResponseFailure
from .events import (
    CALL_CUSTOM,
    CALL_FUNCTION,
    FINISH_PAUSED,
    FINISH_REFUSED,
    FINISH_WITH_CALLS,
    FINISH_WITHOUT_CALLS,
    MAX_NATIVE_BYTES,
    NativeOutput,
    Observer,
    OutputCall,
    OutputNative,
    OutputRefusal,
    OutputText,
    ProviderReportedFailure,
    ReasoningDelta,
    RefusalDelta,
    ResponseCompleted,
    ResponseProgress,
    ResponseStarted,
    StreamEvent,
    TextBuffer,
    TextDelta,
    ToolArgumentProgress,
    ToolArgumentsDelta,
    ToolCallIdentified,
    ToolCallStarted,
    UnsupportedOutput,
    UsageReported,
)
from .grammar import GrammarCheck, InputFormat, grammar_check
from .jsonlimits import MAX_ARGUMENT_DEPTH, parse_arguments
from .schemas import schema_validator

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "CallProblem",
    "Decision",
    "GateLimits",
    "InvalidBatch",
    "ResponseGate",
]


PROGRESS_STEP_CHARS = 256
# The finishes that refusal text overrides: every successful one but a pause (whose refusal
# text, if any, is part of the paused work), and none that is not a success.
_REFUSABLE = frozenset({None, FINISH_WITH_CALLS, FINISH_WITHOUT_CALLS, FINISH_REFUSED})


@dataclass(frozen=True, slots=True)
class GateLimits:
    """Bounds on what one response may make lockgate retain."""

    max_text_chars: int = 64_000
    max_reasoning_chars: int = 256_000
    max_calls: int = 8
    max_argument_chars: int = 16_000
    max_native_items: int = 64
    max_native_bytes: int = MAX_NATIVE_BYTES


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
    __slots__ = ("arguments", "call_id", "form", "key", "name", "namespace", "shown")

    def __init__(self, event: ToolCallStarted) -> None:
        self.key = event.key
        self.call_id = event.call_id
        self.name = event.name
        self.namespace = event.namespace
        self.form = event.form
        self.arguments = TextBuffer(event.arguments)
        self.shown = 0  # argument characters last published as progress

    def output(self) -> OutputCall:
        return OutputCall(
            self.key, self.call_id, self.name, self.arguments.value(), self.namespace, self.form
        )


def _qualified(namespace: str, name: str) -> str:
    return f"{namespace}.{name}" if namespace else name


def _pairable(calls: Sequence[OutputCall]) -> bool:
    """Calls can get paired observations only with non-empty, unique ids and names."""
    ids = [call.call_id for call in calls]
    return all(ids) and all(call.name for call in calls) and len(set(ids)) == len(ids)


def _failure(kind: FailureKind, message: str) -> ResponseFailure:
    return ResponseFailure(kind, message)


class ResponseGate:
    """Assembles one response from normalized events and validates it at completion."""

    def __init__(
        self,
        tools: Sequence[ToolSpec],
        observer: Observer,
        limits: GateLimits | None = None,
    ) -> None:
        # A call names a tool by its namespace, its name and its form (a function, a custom
        # tool, a built-in tool's item type).
        self._tools = {(tool.namespace, tool.name, tool.form): tool for tool in tools}
        # A function tool's schema validator, built when a call of it is first checked
        # (most responses call nothing: building one per declared tool cost ~70 µs each).
        self._validators: dict[tuple[str, str, str], Validator] = {}
        # A custom tool's declared grammar (`gateway.DeclaredTool.grammar`), compiled once
        # per distinct grammar and kept (`grammar.grammar_check`).
        self._grammars: dict[tuple[str, str, str], GrammarCheck] = {}
        for key, tool in self._tools.items():
            declared = getattr(tool, "grammar", None)
            if tool.form == CALL_CUSTOM and isinstance(declared, InputFormat):
                checker = grammar_check(declared)
                if isinstance(checker, GrammarCheck):
                    self._grammars[key] = checker
        self._observer = observer
        self._limits = limits or GateLimits()
        self.reset()

    def reset(self) -> None:
        """Forget everything streamed: a new attempt's response starts from nothing."""
        self._pending: dict[str, _PendingCall] = {}
        # The streamed output in order: ("text"|"refusal", TextBuffer), ("call", key),
        # ("native", item). Text is kept once, here.
        self._layout: list[tuple[str, object]] = []
        self._text_chars = 0
        self._reasoning_chars = 0
        self._native_bytes = 0
        self._natives = 0
        self.response_id: str | None = None
        # Any text, refusal, reasoning or call fragment arrived, or output kept but not
        # shown (a native item, `ResponseProgress(content=True)`).
        self.content_started = False
        self._finished = False

    @property
    def partial_text(self) -> str:
        """The text shown so far (for failure reports)."""
        return "".join(
            value.value()
            for kind, value in self._layout
            if kind == "text" and isinstance(value, TextBuffer)
        )

    def accept(self, event: StreamEvent) -> Decision | None:
        """Accept one event; return the decision only at validated completion.

        Raises ResponseFailure for any lifecycle, bound or validation failure.
        """
        if self._finished:
            raise _failure(FailureKind.LIFECYCLE, "event after the terminal event")
        # The hot path (nearly every event of a stream): the checks below, in their order.
        if type(event) is TextDelta:
            if self.response_id is None:
                raise _failure(FailureKind.LIFECYCLE, "response data before the response start")
            if event.response_id is not None and event.response_id != self.response_id:
                raise self._foreign(event)
            self._preview("text", event.text)
            self._observer(event)
            return None
        if type(event) is ToolArgumentsDelta:
            if self.response_id is None:
                raise _failure(FailureKind.LIFECYCLE, "response data before the response start")
            if event.response_id is not None and event.response_id != self.response_id:
                raise self._foreign(event)
            self._arguments(event)
            return None
        if isinstance(event, ResponseStarted):
            if self.response_id is not None:
                raise _failure(FailureKind.LIFECYCLE, "duplicate response start")
            if not event.response_id:
                raise _failure(FailureKind.LIFECYCLE, "response start has no id")
            self.response_id = event.response_id
            self._observer(event)
            return None
        if self.response_id is None:
            if isinstance(event, ProviderReportedFailure):
                # A provider may fail before it starts the response (an error as its first
                # event): that failure, with its kind and transience, is what happened.
                self._finished = True
                self._report_usage(event.usage)
                raise self._provider_failure(event)
            raise _failure(FailureKind.LIFECYCLE, "response data before the response start")
        if event.response_id is not None and event.response_id != self.response_id:
            raise self._foreign(event)
        if isinstance(event, RefusalDelta):
            self._preview("refusal", event.text)
            self._observer(event)
        elif isinstance(event, ReasoningDelta):
            self._reasoning(event)
        elif isinstance(event, ToolCallStarted):
            self._call_started(event)
        elif isinstance(event, ToolCallIdentified):
            self._call_identified(event)
        elif isinstance(event, NativeOutput):
            self._native(event)
        elif isinstance(event, ProviderReportedFailure):
            self._finished = True
            self._report_usage(event.usage)
            raise self._provider_failure(event)
        elif isinstance(event, ResponseCompleted):
            self._finished = True
            self._report_usage(event.usage)
            return self._completed(event)
        elif isinstance(event, ResponseProgress):
            if event.content:
                self.content_started = True
        else:
            raise _failure(FailureKind.LIFECYCLE, f"unknown event {type(event).__name__}")
        return None

    def _foreign(self, event: StreamEvent) -> ResponseFailure:
        return _failure(
            FailureKind.LIFECYCLE,
            f"event for response {event.response_id!r} inside response {self.response_id!r}",
        )

    # --- streaming ---------------------------------------------------------------------

    def _report_usage(self, usage: Usage | None) -> None:
        if usage is not None:
            self._observer(UsageReported(usage))

    def _provider_failure(self, event: ProviderReportedFailure) -> ResponseFailure:
        detail = f" [{event.code}]" if event.code else ""
        message = f"{event.message}{detail}; buffered calls discarded"
        recovery = None
        calls = [pending.output() for pending in self._pending.values()]
        if (
            event.kind is FailureKind.RESPONSE_INCOMPLETE
            and event.truncated
            and calls
            and _pairable(calls)
        ):
            note = (
                "error: the response was truncated by the output limit before this call's "
                "arguments were complete; the call was not executed. Reissue it with smaller "
                "arguments (for example, split a large edit)."
            )
            message_with_calls = Message(
                "assistant",
                self.partial_text,
                tuple(ToolCall(c.call_id, c.name, {}, c.arguments) for c in calls),
            )
            recovery = Recovery(message_with_calls, tuple(note for _ in calls))
        return ResponseFailure(event.kind, message, recovery=recovery, transient=event.transient)

    def _preview(self, kind: str, text: str) -> None:
        if not text:
            return
        self.content_started = True
        self._text_chars += len(text)
        if self._text_chars > self._limits.max_text_chars:
            raise _failure(
                FailureKind.BOUND_EXCEEDED,
                f"text preview exceeded {self._limits.max_text_chars} characters",
            )
        layout = self._layout
        if layout:
            tail_kind, tail = layout[-1]
            if tail_kind == kind:  # the text or refusal at the end of the layout grows
                tail.append(text)  # type: ignore[attr-defined]  # a TextBuffer
                return
        layout.append((kind, TextBuffer(text)))

    def _reasoning(self, event: ReasoningDelta) -> None:
        self.content_started = True
        self._reasoning_chars += len(event.text)
        if self._reasoning_chars > self._limits.max_reasoning_chars:
            raise _failure(
                FailureKind.BOUND_EXCEEDED,
                f"reasoning exceeded {self._limits.max_reasoning_chars} characters",
            )
        self._observer(event)

    def _native(self, event: NativeOutput) -> None:
        self.content_started = True
        self._natives += 1
        if self._natives > self._limits.max_native_items:
            raise _failure(
                FailureKind.BOUND_EXCEEDED,
                f"more than {self._limits.max_native_items} native output items",
            )
        self._native_bytes += event.size
        if self._native_bytes > self._limits.max_native_bytes:
            raise _failure(
                FailureKind.BOUND_EXCEEDED,
                f"native output exceeded {self._limits.max_native_bytes} bytes",
            )
        self._layout.append(("native", NativeItem(event.kind, event.item)))

    def _call_started(self, event: ToolCallStarted) -> None:
        self.content_started = True
        if event.key in self._pending:
            raise _failure(FailureKind.LIFECYCLE, f"duplicate tool item {event.key!r}")
        if len(self._pending) >= self._limits.max_calls:
            raise _failure(
                FailureKind.BOUND_EXCEEDED, f"more than {self._limits.max_calls} tool calls"
            )
        pending = _PendingCall(event)
        if pending.arguments.chars > self._limits.max_argument_chars:
            raise self._arguments_exceeded()
        self._pending[event.key] = pending
        self._layout.append(("call", event.key))
        self._observer(event)

    @staticmethod
    def _unknown_call(key: str, what: str) -> ResponseFailure:
        return _failure(FailureKind.LIFECYCLE, f"{what} for unknown tool item {key!r}")

    def _call_identified(self, event: ToolCallIdentified) -> None:
        pending = self._pending.get(event.key)
        if pending is None:
            raise self._unknown_call(event.key, "call identity")
        for field_name, value in (("call_id", event.call_id), ("name", event.name)):
            if not value:
                continue
            current = getattr(pending, field_name)
            if current and current != value:
                raise _failure(
                    FailureKind.LIFECYCLE,
                    f"tool item {event.key!r} changed its {field_name} from {current!r} "
                    f"to {value!r}",
                )
            setattr(pending, field_name, value)

    def _arguments(self, event: ToolArgumentsDelta) -> None:
        pending = self._pending.get(event.key)
        if pending is None:
            raise self._unknown_call(event.key, "argument delta")
        delta = event.delta
        if not delta:
            return
        arguments = pending.arguments
        arguments.append(delta)
        chars = arguments.chars
        if chars > self._limits.max_argument_chars:
            raise self._arguments_exceeded()
        # Progress is published when it moved by a step worth showing (the display
        # throttles further): every 256 characters, and the first fragment.
        if chars - pending.shown >= PROGRESS_STEP_CHARS or not pending.shown:
            pending.shown = chars
            self._observer(ToolArgumentProgress(pending.call_id, pending.name, chars))

    def _arguments_exceeded(self) -> ResponseFailure:
        return _failure(
            FailureKind.BOUND_EXCEEDED,
            f"tool arguments exceeded {self._limits.max_argument_chars} characters",
        )

    # --- completion ----------------------------------------------------------------------

    def _completed(self, event: ResponseCompleted) -> Decision:
        if event.response_id is not None and event.response_id != self.response_id:
            raise _failure(FailureKind.LIFECYCLE, "completed response has another id")
        for pending in self._pending.values():  # the last progress step, if not yet shown
            chars = pending.arguments.chars
            if chars != pending.shown:
                pending.shown = chars
                self._observer(ToolArgumentProgress(pending.call_id, pending.name, chars))
        if event.output is None:
            parts, calls = self._streamed_output(event.call_order)
        else:
            parts, calls = self._snapshot_output(event.output)
        text = "".join(p.text for p in parts if isinstance(p, TextPart))
        refusal = "".join(p.text for p in parts if isinstance(p, RefusalPart))
        if len(text) + len(refusal) > self._limits.max_text_chars:
            raise _failure(
                FailureKind.BOUND_EXCEEDED,
                f"response text exceeded {self._limits.max_text_chars} characters",
            )
        if refusal and event.finish_reason in _REFUSABLE:
            finish = FINISH_REFUSED  # a refusal, whatever the successful finish says
        else:
            finish = self._finish_reason(event.finish_reason, bool(calls))
        if finish == FINISH_REFUSED:
            # A refusal releases no call: calls are dropped from the message and its output.
            calls = []
            parts = [p for p in parts if not isinstance(p, CallPart)]
            # Why: the refusal text, else the provider's stated reason, else what it said.
            refusal = refusal or event.refusal_detail or text or "the model refused"
        tool_calls = self._validate_batch(calls, text)
        message = Message(
            "assistant",
            text,
            tool_calls,
            response_id=self.response_id,
            usage=event.usage,
            refusal=refusal,
            output=tuple(parts),
            paused=finish == FINISH_PAUSED,
        )
        return Decision(message, finish, event.usage)

    def _streamed_output(
        self, call_order: Sequence[str] | None
    ) -> tuple[list[OutputPart], list[OutputCall]]:
        """The streamed parts in order; the calls' places taken in `call_order`, if given."""
        order = iter(self._ordered_calls(call_order)) if call_order is not None else None
        parts: list[OutputPart] = []
        calls: list[OutputCall] = []
        for kind, value in self._layout:
            if kind == "call":
                assert isinstance(value, str)
                call = self._pending[next(order) if order is not None else value].output()
                calls.append(call)
                parts.append(CallPart(call.call_id))
            elif kind == "native":
                assert isinstance(value, NativeItem)
                parts.append(value)
            else:
                assert isinstance(value, TextBuffer)
                joined = value.value()
                parts.append(TextPart(joined) if kind == "text" else RefusalPart(joined))
        return parts, calls

    def _ordered_calls(self, call_order: Sequence[str]) -> Sequence[str]:
        if sorted(call_order) != sorted(self._pending):
            raise _failure(
                FailureKind.LIFECYCLE, "the completion orders calls that were not streamed"
            )
        return call_order

    def _snapshot_output(
        self, output: Sequence[object]
    ) -> tuple[list[OutputPart], list[OutputCall]]:
        parts: list[OutputPart] = []
        calls: list[OutputCall] = []
        for item in output:
            if isinstance(item, OutputText):
                parts.append(TextPart(item.text, item.item_id))
            elif isinstance(item, OutputRefusal):
                parts.append(RefusalPart(item.text, item.item_id))
            elif isinstance(item, OutputCall):
                calls.append(item)
                parts.append(CallPart(item.call_id, item.key))
            elif isinstance(item, OutputNative):
                parts.append(NativeItem(item.kind, item.item))
            elif isinstance(item, UnsupportedOutput):
                raise _failure(
                    FailureKind.UNSUPPORTED_OUTPUT,
                    f"output item {item.item_type!r} cannot be replayed; response rejected",
                )
            else:
                raise _failure(FailureKind.LIFECYCLE, f"unknown output item {item!r}")
        self._match_streamed(calls)
        return parts, calls

    @staticmethod
    def _finish_reason(stated: str | None, has_calls: bool) -> str:
        """A stated (normalized) finish reason must agree with the presence of calls; a
        provider that states none gets the one its calls imply. A pause carries no calls; a
        refusal releases none."""
        implied = FINISH_WITH_CALLS if has_calls else FINISH_WITHOUT_CALLS
        if stated is None or stated in (implied, FINISH_REFUSED):
            return implied if stated is None else stated
        if stated == FINISH_PAUSED:
            if has_calls:
                raise _failure(FailureKind.LIFECYCLE, "a paused response requested calls")
            return stated
        if stated in (FINISH_WITH_CALLS, FINISH_WITHOUT_CALLS):
            having = "has" if has_calls else "has no"
            raise _failure(
                FailureKind.LIFECYCLE, f"finish reason {stated!r} but the response {having} calls"
            )
        raise _failure(
            FailureKind.LIFECYCLE, f"finish reason {stated!r} is not a successful completion"
        )

    def _match_streamed(self, terminal_calls: list[OutputCall]) -> None:
        """The terminal call list must be exactly the calls that were streamed."""
        seen: set[str] = set()
        for call in terminal_calls:
            pending = self._pending.get(call.key)
            if pending is None or call.key in seen:
                raise _failure(
                    FailureKind.CALL_MISMATCH,
                    f"terminal call {call.call_id or call.key!r} was not streamed",
                )
            seen.add(call.key)
            if (
                pending.call_id,
                pending.name,
                pending.arguments.value(),
                pending.namespace,
                pending.form,
            ) != (call.call_id, call.name, call.arguments, call.namespace, call.form):
                raise _failure(
                    FailureKind.CALL_MISMATCH,
                    f"terminal call {call.call_id!r} differs from the streamed call",
                )
        if len(seen) != len(self._pending):
            missing = sorted(set(self._pending) - seen)
            raise _failure(
                FailureKind.CALL_MISMATCH,
                f"streamed call item(s) {', '.join(missing)} missing from the terminal response",
            )

    def _validate_batch(self, calls: list[OutputCall], content: str) -> tuple[ToolCall, ...]:
        problems: list[CallProblem] = []
        valid: list[ToolCall] = []
        call_ids: set[str] = set()
        for call in calls:
            problem, arguments = self._check(call, call_ids)
            call_ids.add(call.call_id)
            if problem is not None:
                problems.append(CallProblem(call.call_id, call.name, problem))
                continue
            valid.append(ToolCall(call.call_id, call.name, arguments, call.arguments))
        if problems:
            raise InvalidBatch(problems, self._batch_recovery(calls, problems, content))
        return tuple(valid)

    def _batch_recovery(
        self, calls: list[OutputCall], problems: list[CallProblem], content: str
    ) -> Recovery | None:
        if not _pairable(calls):
            return None
        by_id = {p.call_id: p.problem for p in problems}
        invalid = ", ".join(p.call_id for p in problems)
        observations = tuple(
            f"error: call rejected, not executed: {by_id[c.call_id]}"
            if c.call_id in by_id
            else f"error: not executed because another call in the same response was invalid "
            f"({invalid}); reissue this call if you still need it"
            for c in calls
        )
        replayed = tuple(
            ToolCall(c.call_id, c.name, _parsed_or_empty(c.arguments), c.arguments) for c in calls
        )
        return Recovery(Message("assistant", content, replayed), observations)

    def _check(
        self, call: OutputCall, earlier_ids: set[str]
    ) -> tuple[str | None, dict[str, object]]:
        """(problem, parsed arguments): problem None when the call is valid."""
        if not call.call_id:
            return "empty call id", {}
        if call.call_id in earlier_ids:
            return "duplicate call id", {}
        key = self._resolve(call)
        tool = self._tools.get(key) if key is not None else None
        if key is None or tool is None:
            return self._not_exposed(call), {}
        if call.form == CALL_CUSTOM:  # free text, a sentence of its grammar if it has one
            checker = self._grammars.get(key)
            problem = None if checker is None else checker.problem(call.arguments)
            if problem is not None:
                return f"custom tool {_qualified(call.namespace, call.name)!r} input {problem}", {}
            return None, {}
        text = call.arguments
        if not text.strip(" \t\n\r") and tool.takes_no_arguments:
            text = "{}"  # no arguments for a tool without parameters
        try:
            arguments = parse_arguments(text, MAX_ARGUMENT_DEPTH)
        except ValueError as exc:
            return f"arguments are not valid JSON ({exc})", {}
        if type(arguments) is not dict:
            return "arguments are not a JSON object", {}
        if call.form != CALL_FUNCTION:
            return None, arguments  # a built-in tool's action: its shape is the provider's
        validator = self._validators.get(key)
        if validator is None:
            validator = schema_validator(dict(tool.parameters), getattr(tool, "dialect", None))
            self._validators[key] = validator
        errors = sorted(validator.iter_errors(arguments), key=str)
        if errors:
            where = "/".join(str(part) for part in errors[0].absolute_path)
            at = f" at {where}" if where else ""
            return f"arguments do not match the schema{at}: {errors[0].message}", {}
        return None, arguments

    def _resolve(self, call: OutputCall) -> tuple[str, str, str] | None:
        """The declared tool a call names: its namespace, name and form exactly; else, for
        a call that states no namespace, the one tool of that name and form in any
        namespace (a client dispatches it by name: with two, which one would run is
        unknown, and the call names none); else, for a call whose namespace is its own name,
        the top-level tool of that name (a function loaded by tool search comes back so, as
        real Responses recordings show)."""
        key = (call.namespace, call.name, call.form)
        if key in self._tools:
            return key
        if not call.namespace:
            named = [k for k in self._tools if k[1] == call.name and k[2] == call.form]
            return named[0] if len(named) == 1 else None
        if call.namespace == call.name and ("", call.name, call.form) in self._tools:
            return "", call.name, call.form
        return None

    def _not_exposed(self, call: OutputCall) -> str:
        """Why a call names no tool of the request."""
        if call.form not in (CALL_FUNCTION, CALL_CUSTOM):
            return f"a {call.form} item, but the request declares no such built-in tool"
        exposed = ", ".join(
            sorted(
                _qualified(namespace, name)
                for namespace, name, form in self._tools
                if form in (CALL_FUNCTION, CALL_CUSTOM)
            )
        )
        what = "custom tool" if call.form == CALL_CUSTOM else "tool"
        qualified = _qualified(call.namespace, call.name)
        return f"{what} {qualified!r} is not exposed (exposed tools: {exposed or 'none'})"


def _parsed_or_empty(arguments: str) -> dict[str, object]:
    try:
        value = parse_arguments(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
