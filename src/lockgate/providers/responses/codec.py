"""OpenAI Responses: request encoding and stream decoding.

Encoding sends the full portable history every time (`store: false`, no
`previous_response_id`). Decoding maps native events to normalized events; it checks shape
(JSON object with a string `type`, typed fields) and leaves lifecycle and validation rules
to the provider-neutral gate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..conversation import Message, ToolSpec, Usage
from ..errors import FailureKind, ResponseFailure
from ..events import (
    OutputCall,
    OutputItem,
    OutputReasoning,
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


Continuation = Literal["stateless", "native"]
REASONING_MODEL_PREFIXES = ("o1", "o3", "o4", "gpt-5", "codex")


def is_reasoning_model(model: str) -> bool:
    """A best guess from the model name: encrypted reasoning is requested only for
    reasoning models, since other models reject the `include` with HTTP 400."""
    name = model.rsplit("/", 1)[-1].lower()
    return name.startswith(REASONING_MODEL_PREFIXES) and "-chat" not in name


class ResponsesCodec:
    """The OpenAI Responses request encoder and stream decoder factory.

    Stateless (default): every request carries the full portable history with
    `store: false`; reasoning items come back encrypted (`include`) and are replayed
    unchanged immediately before the call they preceded, only to the same producer.
    Native continuation (`store: true`): a request that continues a stored response whose
    calls it answers sends `previous_response_id` and only the new items; after a
    text-only turn, or with another producer, it falls back to the full history.
    """

    provider = "openai-responses"

    def __init__(
        self,
        model: str,
        *,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        continuation: Continuation = "stateless",
        encrypted_reasoning: bool | None = None,
    ) -> None:
        if continuation not in ("stateless", "native"):
            raise ValueError("continuation must be 'stateless' or 'native'")
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.continuation = continuation
        self.encrypted_reasoning = (
            is_reasoning_model(model) if encrypted_reasoning is None else encrypted_reasoning
        )

    @property
    def producer(self) -> str:
        return f"{self.provider}:{self.model}"

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "tools": [encode_tool(tool) for tool in tools],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "store": self.continuation == "native",
            "stream": True,
            "max_output_tokens": self.max_output_tokens,
        }
        anchor = self._continuation_anchor(history) if self.continuation == "native" else None
        if anchor is None:
            request["input"] = encode_input(history, self.producer)
            if self.encrypted_reasoning and self.continuation == "stateless":
                request["include"] = ["reasoning.encrypted_content"]
        else:
            previous = history[anchor]
            request["previous_response_id"] = previous.response_id
            request["input"] = encode_input(
                history[anchor + 1 :], self.producer, answered={c.id for c in previous.tool_calls}
            )
        return request

    def _continuation_anchor(self, history: Sequence[Message]) -> int | None:
        """The index of the last assistant message, if the request can continue it."""
        for index in range(len(history) - 1, -1, -1):
            message = history[index]
            if message.role != "assistant":
                continue
            if message.response_id and message.producer == self.producer and message.tool_calls:
                return index
            return None
        return None

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


def encode_input(
    history: Sequence[Message], producer: str = "", *, answered: set[str] | None = None
) -> list[dict[str, Any]]:
    """Translate portable history to Responses input items.

    Call ids survive translation; each assistant call becomes a `function_call` item with
    its arguments as a JSON string, and every `function_call_output` must follow its call
    (or answer a call of the continued response, `answered`). Reasoning items are replayed
    unchanged immediately before the call they preceded, only when `producer` made them:
    never an orphan, never to another model.
    """
    items: list[dict[str, Any]] = []
    open_calls: set[str] = set(answered or ())
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
        replay = message.reasoning if producer and message.producer == producer else ()
        for call in message.tool_calls:
            items.extend(dict(r.item) for r in replay if r.before_call == call.id)
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
    _check_no_orphan_reasoning(items)
    return items


def _check_no_orphan_reasoning(items: list[dict[str, Any]]) -> None:
    """Every run of reasoning items must be followed by a function call."""
    kinds = [item.get("type") for item in items]
    for index, kind in enumerate(kinds):
        following = kinds[index + 1] if index + 1 < len(kinds) else None
        if kind == "reasoning" and following not in ("reasoning", "function_call"):
            raise ValueError("refusing to send a reasoning item without its following call")


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
            "response.reasoning_summary_text.delta": self._reasoning_summary_delta,
            "response.reasoning_text.delta": self._reasoning_raw_delta,
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

    def _reasoning_summary_delta(self, payload: dict[str, Any]) -> StreamEvent:
        text = _string(payload.get("delta"), "delta")
        return ReasoningDelta(text, "summary", response_id=self._identity(payload))

    def _reasoning_raw_delta(self, payload: dict[str, Any]) -> StreamEvent:
        text = _string(payload.get("delta"), "delta")
        return ReasoningDelta(text, "raw", response_id=self._identity(payload))

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
            _usage(response.get("usage")),
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
            _usage(response.get("usage")),
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
            _usage(response.get("usage")),
            truncated=reason_text == "max_output_tokens",
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
    if kind == "reasoning":
        return [OutputReasoning(item)]
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


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def _usage(raw: object) -> Usage | None:
    """Typed usage from a Responses `usage` object (missing or odd fields count as 0)."""
    if type(raw) is not dict:
        return None
    input_details = raw.get("input_tokens_details")
    output_details = raw.get("output_tokens_details")
    return Usage(
        input_tokens=_count(raw.get("input_tokens")),
        cached_input_tokens=_count(
            input_details.get("cached_tokens") if type(input_details) is dict else 0
        ),
        output_tokens=_count(raw.get("output_tokens")),
        reasoning_tokens=_count(
            output_details.get("reasoning_tokens") if type(output_details) is dict else 0
        ),
        total_tokens=_count(raw.get("total_tokens")),
    )
