"""OpenAI Responses stream decoding: native events to normalized events.

The completion rule for Responses: a decision is released only at `response.completed`
whose `status` is `completed`; its `output` snapshot must list exactly the function calls
that streamed (the gate compares them). `response.failed`, `response.incomplete` and
`error` (flat or nested) fail the response; a body that ends without a terminal event
releases nothing.

As reality sends it: the response starts with the first lifecycle event that carries the
`response` object (`response.created`, or `response.queued` / `response.in_progress` in
background mode); data-only gateways (no `event:` lines) and a trailing `data: [DONE]` are
tolerated. Items the provider executed itself (`web_search_call`, `file_search_call`,
`mcp_list_tools` …) are provider-side output: kept opaque and replayed, never executed.
A function call the provider marks `incomplete` fails closed. A refusal is kept apart from
the answer text. The decoder checks shape (a JSON object with a string `type`, typed fields,
bounded nesting) and leaves lifecycle and validation rules to the gate.
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
from ...jsonlimits import parse_event
from ...sse import ServerSentEvent
from ..decoding import AFTER_END, CONTENT_BEGAN, NOTHING, provider_error_message
from ..decoding import malformed as _malformed
from ..decoding import object_field as _object
from ..decoding import optional_string_field as _optional_string
from ..decoding import string_field as _string
from ..decoding import token_count as _count

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
    return _optional_string(response.get("id"), "response.id")


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
        data = event.data
        if data == b"[DONE]":
            return NOTHING
        try:
            payload = parse_event(data)
        except ValueError as exc:
            raise _malformed(f"event data is not valid JSON ({exc})") from None
        if type(payload) is not dict:
            raise _malformed("event data is not a JSON object")
        kind = payload.get("type")
        if type(kind) is not str:
            raise _malformed("event has no string 'type'")
        if event.event is not None and event.event != kind:
            raise _malformed(f"SSE event name {event.event!r} disagrees with type {kind!r}")
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
        return None if value is None else _string(value, "response_id")

    # The two hot handlers (nearly every event of a stream) check inline what `_string`
    # and `_identity` check.
    def _text_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = payload.get("delta")
        if type(text) is not str:
            raise _malformed("delta must be a string")
        if payload.get("response_id") is None:
            return (TextDelta(text),)
        return (TextDelta(text, response_id=self._identity(payload)),)

    def _refusal_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = _string(payload.get("delta"), "delta")
        return (RefusalDelta(text, response_id=self._identity(payload)),)

    def _reasoning_summary_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = _string(payload.get("delta"), "delta")
        return (ReasoningDelta(text, "summary", response_id=self._identity(payload)),)

    def _reasoning_raw_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = _string(payload.get("delta"), "delta")
        return (ReasoningDelta(text, "raw", response_id=self._identity(payload)),)

    def _arguments_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        key = payload.get("item_id")
        if type(key) is not str:
            raise _malformed("item_id must be a string")
        delta = payload.get("delta")
        if type(delta) is not str:
            raise _malformed("delta must be a string")
        if payload.get("response_id") is None:
            return (ToolArgumentsDelta(key, delta),)
        return (ToolArgumentsDelta(key, delta, response_id=self._identity(payload)),)

    def _item_added(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        item = _object(payload.get("item"), "item")
        if item.get("type") != "function_call":
            # Output began (a message, reasoning that may be encrypted only, a tool the
            # provider runs itself): the response is no longer a stream that never started.
            return CONTENT_BEGAN
        return (
            ToolCallStarted(
                _optional_string(item.get("id"), "item.id"),
                _optional_string(item.get("call_id"), "item.call_id"),
                _optional_string(item.get("name"), "item.name"),
                _optional_string(item.get("arguments"), "item.arguments"),
                response_id=self._identity(payload),
            ),
        )

    def _item_done(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        item = _object(payload.get("item"), "item")
        if item.get("type") == "function_call" and item.get("status") not in (None, "completed"):
            self._incomplete_calls.append(_optional_string(item.get("call_id"), "item.call_id"))
        return NOTHING

    def _start(self, payload: dict[str, Any], *, created: bool) -> Sequence[StreamEvent]:
        response_id = _response_id(_object(payload.get("response"), "response"))
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
        response = _object(payload.get("response"), "response")
        response_id = _response_id(response)
        usage = _usage(response.get("usage"))
        status = _optional_string(response.get("status"), "response.status")
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
            raise _malformed("response.output must be a list")
        items = tuple(item for raw in output for item in _output_items(_object(raw, "output item")))
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
        response = _object(payload.get("response"), "response")
        error = response.get("error")
        code, message = _error_fields(error if type(error) is dict else {})
        return (
            ProviderReportedFailure(
                FailureKind.RESPONSE_FAILED,
                f"response failed: {message or 'no message'}",
                code or None,
                _usage(response.get("usage")),
                response_id=_response_id(response),
            ),
        )

    def _incomplete(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        response = _object(payload.get("response"), "response")
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
        nested = payload.get("error")
        code, message = _error_fields(nested if type(nested) is dict else payload)
        return (
            ProviderReportedFailure(
                FailureKind.PROVIDER_ERROR,
                provider_error_message(message),
                code or None,
            ),
        )


def _error_fields(error: dict[str, Any]) -> tuple[str, str]:
    code = error.get("code")
    if type(code) is not str:
        code = error.get("type")
    message = error.get("message")
    return (
        code if type(code) is str else "",
        message if type(message) is str else "",
    )


def _output_items(item: dict[str, Any]) -> list[OutputItem]:
    kind = item.get("type")
    if kind == "function_call":
        return [
            OutputCall(
                _optional_string(item.get("id"), "item.id"),
                _optional_string(item.get("call_id"), "item.call_id"),
                _optional_string(item.get("name"), "item.name"),
                _optional_string(item.get("arguments"), "item.arguments"),
            )
        ]
    if kind == "reasoning":
        return [OutputNative("reasoning", item)]
    if kind in PROVIDER_EXECUTED_ITEMS and item.get("execution") != "client":
        return [OutputNative("provider_output", item)]
    if kind == "message":
        content = item.get("content", [])
        if type(content) is not list:
            raise _malformed("message content must be a list")
        parts: list[OutputItem] = []
        item_id = _optional_string(item.get("id"), "item.id")
        for raw in content:
            part = _object(raw, "content part")
            if part.get("type") == "output_text":
                parts.append(OutputText(_string(part.get("text"), "output_text.text"), item_id))
            elif part.get("type") == "refusal":
                parts.append(OutputRefusal(_string(part.get("refusal"), "refusal"), item_id))
            else:
                parts.append(UnsupportedOutput(f"message content {part.get('type')!s}"))
        return parts
    return [UnsupportedOutput(str(kind))]


def _usage(raw: object) -> Usage | None:
    """Typed usage from a Responses `usage` object (missing or odd fields count as 0)."""
    if type(raw) is not dict:
        return None
    input_details = raw.get("input_tokens_details")
    input_details = input_details if type(input_details) is dict else {}
    output_details = raw.get("output_tokens_details")
    output_details = output_details if type(output_details) is dict else {}
    return Usage(
        input_tokens=_count(raw.get("input_tokens")),
        cached_input_tokens=_count(input_details.get("cached_tokens")),
        output_tokens=_count(raw.get("output_tokens")),
        reasoning_tokens=_count(output_details.get("reasoning_tokens")),
        total_tokens=_count(raw.get("total_tokens")),
        cache_write_tokens=_count(input_details.get("cache_write_tokens")),
    )
