"""OpenAI Responses stream decoding: native events to normalized events.

THE COMPLETION RULE is written once, in `docs/wire/responses.md` (each line with the lab
scenario that proves it); this module implements it. In short: a decision only at
`response.completed` with status `completed`, whose output snapshot lists exactly the calls
that streamed (the gate compares them); `response.failed`, `response.incomplete` and `error`
fail; a call the provider marks incomplete fails closed; provider-executed items are kept
opaque and replayed, never executed; items asking the client for an action lockgate cannot
take fail closed; anything after the terminal event fails (a gateway's `data: [DONE]` is a
sentinel, not an event).

The decoder checks shape (through the decoding kit, `providers/decoding.py`) and leaves
lifecycle and validation rules to the gate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...conversation import Usage
from ...errors import FailureKind
from ...events import (
    OutputCall,
    OutputItem,
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
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
    UnsupportedOutput,
)
from ...sse import ServerSentEvent
from ..decoding import (
    AFTER_END,
    CONTENT_BEGAN,
    NOTHING,
    UsageFields,
    malformed,
    object_field,
    optional_string_field,
    provider_error,
    read_error,
    string_field,
    typed_event,
    usage_from,
)

# Output items the provider executes itself: never a request for a local action.
PROVIDER_EXECUTED_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
    }
)


_TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})


def _response_id(response: dict[str, Any]) -> str:
    return optional_string_field(response.get("id"), "response.id")


class ResponsesDecoder:
    """Maps one Responses stream's events to normalized events."""

    __slots__ = ("_ended", "_handlers", "_incomplete_calls", "_started")

    def __init__(self) -> None:
        self._started = False
        self._ended = False  # a terminal event was decoded
        self._incomplete_calls: list[str] = []  # calls whose item.done said `incomplete`
        self._handlers: dict[str, Callable[[dict[str, Any]], Sequence[StreamEvent]]] = {
            "response.output_text.delta": self._text_delta,
            "response.function_call_arguments.delta": self._arguments_delta,
            "response.refusal.delta": self._refusal_delta,
            "response.reasoning_summary_text.delta": self._reasoning_summary_delta,
            "response.reasoning_text.delta": self._reasoning_raw_delta,
            "response.output_item.added": self._item_added,
            "response.output_item.done": self._item_done,
            "response.created": self._created,
            "response.in_progress": self._progress,
            "response.queued": self._progress,
            "response.completed": self._completed,
            "response.failed": self._failed,
            "response.incomplete": self._incomplete,
            "error": self._error,
        }

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        if event.data == b"[DONE]":
            return NOTHING  # a gateway's sentinel, not an event
        payload, kind = typed_event(event)
        if self._ended:
            return AFTER_END  # whatever it is, the gate refuses it after the terminal event
        handler = self._handlers.get(kind)
        if handler is None:
            return NOTHING  # unknown types and per-item `.done` events are progress
        if kind in _TERMINAL:
            self._ended = True
        return handler(payload)

    def end_of_stream(self) -> Sequence[StreamEvent]:
        return NOTHING  # only `response.completed` completes a Responses stream

    # Identity: only a few native events name their response; pass it on when they do.
    @staticmethod
    def _identity(payload: dict[str, Any]) -> str | None:
        value = payload.get("response_id")
        return None if value is None else string_field(value, "response_id")

    # The two hot handlers (nearly every event of a stream) check inline what `_string`
    # and `_identity` check.
    def _text_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = payload.get("delta")
        if type(text) is not str:
            raise malformed("delta must be a string")
        if payload.get("response_id") is None:
            return (TextDelta(text),)
        return (TextDelta(text, response_id=self._identity(payload)),)

    def _refusal_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = string_field(payload.get("delta"), "delta")
        return (RefusalDelta(text, response_id=self._identity(payload)),)

    def _reasoning_summary_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = string_field(payload.get("delta"), "delta")
        return (ReasoningDelta(text, "summary", response_id=self._identity(payload)),)

    def _reasoning_raw_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = string_field(payload.get("delta"), "delta")
        return (ReasoningDelta(text, "raw", response_id=self._identity(payload)),)

    def _arguments_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        key = payload.get("item_id")
        if type(key) is not str:
            raise malformed("item_id must be a string")
        delta = payload.get("delta")
        if type(delta) is not str:
            raise malformed("delta must be a string")
        if payload.get("response_id") is None:
            return (ToolArgumentsDelta(key, delta),)
        return (ToolArgumentsDelta(key, delta, response_id=self._identity(payload)),)

    def _item_added(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        item = object_field(payload.get("item"), "item")
        if item.get("type") != "function_call":
            # Output began (a message, reasoning that may be encrypted only, a tool the
            # provider runs itself): the response is no longer a stream that never started.
            return CONTENT_BEGAN
        return (
            ToolCallStarted(
                optional_string_field(item.get("id"), "item.id"),
                optional_string_field(item.get("call_id"), "item.call_id"),
                optional_string_field(item.get("name"), "item.name"),
                optional_string_field(item.get("arguments"), "item.arguments"),
                response_id=self._identity(payload),
            ),
        )

    def _item_done(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        item = object_field(payload.get("item"), "item")
        if item.get("type") == "function_call" and item.get("status") not in (None, "completed"):
            self._incomplete_calls.append(
                optional_string_field(item.get("call_id"), "item.call_id")
            )
        return NOTHING

    def _start(self, payload: dict[str, Any], *, created: bool) -> Sequence[StreamEvent]:
        response_id = _response_id(object_field(payload.get("response"), "response"))
        if not self._started or created:
            # A second `response.created` reaches the gate as a second start (a failure).
            self._started = True
            return (ResponseStarted(response_id=response_id),)
        return (ResponseProgress(response_id=response_id),)

    def _created(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        return self._start(payload, created=True)

    def _progress(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        return self._start(payload, created=False)

    def _completed(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        response = object_field(payload.get("response"), "response")
        response_id = _response_id(response)
        usage = _usage(response.get("usage"))
        status = optional_string_field(response.get("status"), "response.status")
        if status != "completed":
            return (
                ProviderReportedFailure(
                    FailureKind.LIFECYCLE,
                    f"terminal event has status {status!r}",
                    usage=usage,
                    response_id=response_id,
                ),
            )
        output = response.get("output", [])
        if type(output) is not list:
            raise malformed("response.output must be a list")
        items = tuple(
            item for raw in output for item in _output_items(object_field(raw, "output item"))
        )
        incomplete = self._incomplete_calls + [
            call_id
            for raw in output
            if raw.get("type") == "function_call" and raw.get("status") not in (None, "completed")
            for call_id in [str(raw.get("call_id"))]
        ]
        if incomplete:
            return (
                ProviderReportedFailure(
                    FailureKind.RESPONSE_INCOMPLETE,
                    f"the provider marks call(s) {', '.join(sorted(set(incomplete)))} incomplete",
                    usage=usage,
                    response_id=response_id,
                ),
            )
        # Responses states no finish reason: the calls imply it.
        return (ResponseCompleted(None, usage, items, response_id=response_id),)

    def _failed(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        response = object_field(payload.get("response"), "response")
        error = read_error(response.get("error"))
        return (
            ProviderReportedFailure(
                FailureKind.RESPONSE_FAILED,
                f"response failed: {error.message or 'no message'}",
                error.code,
                _usage(response.get("usage")),
                transient=error.transient,
                response_id=_response_id(response),
            ),
        )

    def _incomplete(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        response = object_field(payload.get("response"), "response")
        details = response.get("incomplete_details")
        reason = details.get("reason") if type(details) is dict else None
        reason_text = reason if type(reason) is str and reason else "unknown"
        return (
            ProviderReportedFailure(
                FailureKind.RESPONSE_INCOMPLETE,
                f"response incomplete: {reason_text}",
                reason_text,
                _usage(response.get("usage")),
                truncated=reason_text == "max_output_tokens",
                response_id=_response_id(response),
            ),
        )

    def _error(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        # Nested (`{"type": "error", "error": {...}}`) or flat (`{"type": "error", "code",
        # "message"}`): the flat form's own `type` is the event's, not an error type.
        nested = payload.get("error")
        error = nested if type(nested) is dict else {**payload, "type": None}
        return (provider_error(error),)


def _output_items(item: dict[str, Any]) -> list[OutputItem]:
    kind = item.get("type")
    if kind == "function_call":
        return [
            OutputCall(
                optional_string_field(item.get("id"), "item.id"),
                optional_string_field(item.get("call_id"), "item.call_id"),
                optional_string_field(item.get("name"), "item.name"),
                optional_string_field(item.get("arguments"), "item.arguments"),
            )
        ]
    if kind == "reasoning":
        return [OutputNative("reasoning", item)]
    if kind in PROVIDER_EXECUTED_ITEMS and item.get("execution") != "client":
        return [OutputNative("provider_output", item)]
    if kind == "message":
        content = item.get("content", [])
        if type(content) is not list:
            raise malformed("message content must be a list")
        parts: list[OutputItem] = []
        item_id = optional_string_field(item.get("id"), "item.id")
        for raw in content:
            part = object_field(raw, "content part")
            if part.get("type") == "output_text":
                parts.append(
                    OutputText(string_field(part.get("text"), "output_text.text"), item_id)
                )
            elif part.get("type") == "refusal":
                parts.append(OutputRefusal(string_field(part.get("refusal"), "refusal"), item_id))
            else:
                parts.append(UnsupportedOutput(f"message content {part.get('type')!s}"))
        return parts
    return [UnsupportedOutput(str(kind))]


# Responses' usage fields in lockgate's terms (`input_tokens` counts cached input already).
USAGE_FIELDS = UsageFields(
    input=(("input_tokens",),),
    output=(("output_tokens",),),
    cached=(("input_tokens_details", "cached_tokens"),),
    reasoning=(("output_tokens_details", "reasoning_tokens"),),
    cache_write=(("input_tokens_details", "cache_write_tokens"),),
    total=(("total_tokens",),),
)


def _usage(raw: object) -> Usage | None:
    return usage_from(raw, USAGE_FIELDS)
