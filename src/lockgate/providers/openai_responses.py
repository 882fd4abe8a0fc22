"""OpenAI Responses: request encoding and stream decoding.

Encoding sends the full portable history every time (`store: false`, no
`previous_response_id`). Decoding maps native events to normalized events; it checks shape
(JSON object with a string `type`, typed fields) and leaves lifecycle and validation rules
to the provider-neutral gate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..conversation import Message, ToolSpec
from ..errors import FailureKind, ResponseFailure
from ..events import (
    OutputCall,
    OutputItem,
    OutputRefusal,
    OutputText,
    ProviderReportedFailure,
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
from ..sse import ServerSentEvent

DEFAULT_MAX_OUTPUT_TOKENS = 2048

_JSON = json.JSONDecoder()
_scan_json: Callable[[str, int], tuple[object, int]] = _JSON.scan_once  # type: ignore[attr-defined]


def _parse_json(text: str) -> object:
    """`json.loads` for UTF-8-decoded text, without its per-call overheads."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:  # leading whitespace, or nothing valid: the full decoder decides
        return _JSON.decode(text)
    if end != len(text) and text[end:].strip(" \t\n\r"):
        raise ValueError("extra data after the JSON value")
    return value


class ResponsesCodec:
    """The OpenAI Responses request encoder and stream decoder factory."""

    def __init__(self, model: str, *, max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS) -> None:
        self.model = model
        self.max_output_tokens = max_output_tokens

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        return {
            "model": self.model,
            "input": encode_input(history),
            "tools": [encode_tool(tool) for tool in tools],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "store": False,
            "stream": True,
            "max_output_tokens": self.max_output_tokens,
        }

    def new_decoder(self) -> ResponsesDecoder:
        return ResponsesDecoder()


def encode_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
        "strict": True,
    }


def encode_input(history: Sequence[Message]) -> list[dict[str, Any]]:
    """Translate portable history to Responses input items.

    Call ids survive translation; each assistant call becomes a `function_call` item with
    its arguments as a JSON string, and every `function_call_output` must follow its call.
    """
    items: list[dict[str, Any]] = []
    open_calls: set[str] = set()
    for message in history:
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            if call_id not in open_calls:
                raise ValueError(f"tool result {call_id!r} does not follow its call")
            open_calls.discard(call_id)
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": message.content}
            )
            continue
        if message.content or not message.tool_calls:
            items.append({"role": message.role, "content": message.content})
        for call in message.tool_calls:
            arguments = call.arguments_json or json.dumps(
                dict(call.arguments), separators=(",", ":")
            )
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": arguments,
                }
            )
            open_calls.add(call.id)
    return items


def _malformed(message: str) -> ResponseFailure:
    return ResponseFailure(FailureKind.MALFORMED_EVENT, message)


def _string(value: object, what: str) -> str:
    if type(value) is not str:
        raise _malformed(f"{what} must be a string")
    return value


def _optional_string(value: object, what: str) -> str:
    if value is None:
        return ""
    return _string(value, what)


def _object(value: object, what: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _malformed(f"{what} must be an object")
    return value


def _response_id(response: dict[str, Any]) -> str:
    return _optional_string(response.get("id"), "response.id")


class ResponsesDecoder:
    """Maps Responses stream events to normalized events."""

    __slots__ = ("_handlers",)

    def __init__(self) -> None:
        self._handlers: dict[str, Callable[[dict[str, Any]], StreamEvent | None]] = {
            "response.output_text.delta": self._text_delta,
            "response.function_call_arguments.delta": self._arguments_delta,
            "response.refusal.delta": self._refusal_delta,
            "response.output_item.added": self._item_added,
            "response.created": self._created,
            "response.in_progress": self._progress,
            "response.queued": self._progress,
            "response.completed": self._completed,
            "response.failed": self._failed,
            "response.incomplete": self._incomplete,
            "error": self._error,
        }

    def decode(self, event: ServerSentEvent) -> StreamEvent | None:
        data = event.data
        if data == b"[DONE]":
            return None
        try:
            payload = _parse_json(data.decode("utf-8"))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise _malformed(f"event data is not valid JSON ({exc.__class__.__name__})") from None
        if type(payload) is not dict:
            raise _malformed("event data is not a JSON object")
        kind = payload.get("type")
        if type(kind) is not str:
            raise _malformed("event has no string 'type'")
        if event.event is not None and event.event != kind:
            raise _malformed(f"SSE event name {event.event!r} disagrees with type {kind!r}")
        handler = self._handlers.get(kind)
        if handler is None:
            return None  # unknown types and per-item `.done` events are progress
        return handler(payload)

    # Identity: only a few native events name their response; pass it on when they do.
    @staticmethod
    def _identity(payload: dict[str, Any]) -> str | None:
        value = payload.get("response_id")
        return None if value is None else _string(value, "response_id")

    def _text_delta(self, payload: dict[str, Any]) -> StreamEvent:
        return TextDelta(
            _string(payload.get("delta"), "delta"), response_id=self._identity(payload)
        )

    def _refusal_delta(self, payload: dict[str, Any]) -> StreamEvent:
        return RefusalDelta(
            _string(payload.get("delta"), "delta"), response_id=self._identity(payload)
        )

    def _arguments_delta(self, payload: dict[str, Any]) -> StreamEvent:
        return ToolArgumentsDelta(
            _string(payload.get("item_id"), "item_id"),
            _string(payload.get("delta"), "delta"),
            response_id=self._identity(payload),
        )

    def _item_added(self, payload: dict[str, Any]) -> StreamEvent | None:
        item = _object(payload.get("item"), "item")
        if item.get("type") != "function_call":
            return None
        return ToolCallStarted(
            _optional_string(item.get("id"), "item.id"),
            _optional_string(item.get("call_id"), "item.call_id"),
            _optional_string(item.get("name"), "item.name"),
            _optional_string(item.get("arguments"), "item.arguments"),
            response_id=self._identity(payload),
        )

    def _created(self, payload: dict[str, Any]) -> StreamEvent:
        response = _object(payload.get("response"), "response")
        return ResponseStarted(response_id=_response_id(response))

    def _progress(self, payload: dict[str, Any]) -> StreamEvent:
        response = _object(payload.get("response"), "response")
        return ResponseProgress(response_id=_response_id(response))

    def _completed(self, payload: dict[str, Any]) -> StreamEvent:
        response = _object(payload.get("response"), "response")
        output = response.get("output", [])
        if type(output) is not list:
            raise _malformed("response.output must be a list")
        return ResponseCompleted(
            _optional_string(response.get("status"), "response.status"),
            tuple(item for raw in output for item in _output_items(_object(raw, "output item"))),
            response_id=_response_id(response),
        )

    def _failed(self, payload: dict[str, Any]) -> StreamEvent:
        response = _object(payload.get("response"), "response")
        error = response.get("error")
        code, message = _error_fields(error if type(error) is dict else {})
        return ProviderReportedFailure(
            "failed",
            f"response failed: {message or 'no message'}",
            code or None,
            response_id=_response_id(response),
        )

    def _incomplete(self, payload: dict[str, Any]) -> StreamEvent:
        response = _object(payload.get("response"), "response")
        details = response.get("incomplete_details")
        reason = details.get("reason") if type(details) is dict else None
        reason_text = reason if type(reason) is str and reason else "unknown"
        return ProviderReportedFailure(
            "incomplete",
            f"response incomplete: {reason_text}",
            reason_text,
            response_id=_response_id(response),
        )

    def _error(self, payload: dict[str, Any]) -> StreamEvent:
        nested = payload.get("error")
        code, message = _error_fields(nested if type(nested) is dict else payload)
        return ProviderReportedFailure(
            "error", f"provider error: {message or 'no message'}", code or None
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
    if kind == "message":
        content = item.get("content", [])
        if type(content) is not list:
            raise _malformed("message content must be a list")
        parts: list[OutputItem] = []
        for raw in content:
            part = _object(raw, "content part")
            if part.get("type") == "output_text":
                parts.append(OutputText(_string(part.get("text"), "output_text.text")))
            elif part.get("type") == "refusal":
                parts.append(OutputRefusal(_string(part.get("refusal"), "refusal")))
            else:
                parts.append(UnsupportedOutput(f"message content {part.get('type')!s}"))
        return parts
    return [UnsupportedOutput(str(kind))]
