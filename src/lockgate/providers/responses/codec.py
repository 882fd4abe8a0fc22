"""OpenAI Responses request encoding.

Stateless (default): every request carries the full portable history with `store: false`.
A response's output is replayed to the producer that made it in its original order: text,
calls, reasoning items (with their `encrypted_content`) and provider-executed items,
unchanged; a reasoning item with nothing after it is never sent (the API answers 400). For
any other producer only the portable text and calls are sent. Native continuation
(`store: true`): a request that continues a stored response whose calls it answers sends
`previous_response_id` and only the new items; after a text-only turn, or with another
producer, it falls back to the full history.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...conversation import CallPart, Message, NativeItem, RefusalPart, TextPart, ToolCall, ToolSpec
from ...defaults import MAX_OUTPUT_TOKENS
from ..base import CodecOptions
from ..openai.history import answered_call
from ..openai.models import REASONING_MODEL_PREFIXES as REASONING_MODEL_PREFIXES
from ..openai.models import is_reasoning_model as is_reasoning_model
from .decoder import ResponsesDecoder
from .options import Continuation, ResponsesOptions

PROVIDER = "responses"


class ResponsesCodec:
    """The OpenAI Responses request encoder and stream decoder factory."""

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        max_output_tokens: int = MAX_OUTPUT_TOKENS,
        continuation: Continuation = "stateless",
        encrypted_reasoning: bool | None = None,
    ) -> None:
        if continuation not in ("stateless", "native"):
            raise ValueError("continuation must be 'stateless' or 'native'")
        if not model:
            raise ValueError("model must not be empty")
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.continuation = continuation
        self.encrypted_reasoning = (
            is_reasoning_model(model) if encrypted_reasoning is None else encrypted_reasoning
        )

    @classmethod
    def from_options(cls, options: CodecOptions) -> ResponsesCodec:
        own = options.own(ResponsesOptions)
        return cls(
            options.model,
            max_output_tokens=options.max_output_tokens,
            continuation=own.continuation,
            encrypted_reasoning=own.encrypted_reasoning,
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
    """The flat function-tool shape; strict mode only when the schema qualifies."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
        "strict": tool.strict,
    }


def _arguments(call: ToolCall) -> str:
    return call.arguments_json or json.dumps(dict(call.arguments), separators=(",", ":"))


def _call_item(call: ToolCall, item_id: str = "") -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": _arguments(call),
    }
    if item_id:  # the same producer gets its own item back (reasoning is linked to it)
        item = {"type": "function_call", "id": item_id, **item, "status": "completed"}
    return item


def _message_item(parts: list[TextPart | RefusalPart]) -> dict[str, Any]:
    """Text and refusal parts of one original output message, with its id."""
    content = [
        {"type": "output_text", "text": part.text, "annotations": []}
        if isinstance(part, TextPart)
        else {"type": "refusal", "refusal": part.text}
        for part in parts
    ]
    return {
        "type": "message",
        "id": parts[0].item_id,
        "role": "assistant",
        "status": "completed",
        "content": content,
    }


def _assistant_items(message: Message, producer: str) -> list[dict[str, Any]]:
    """One assistant message as input items: its original output for the same producer
    (ids included: a reasoning item is linked to the item that followed it), else the
    portable text (or refusal) and calls."""
    original = message.native_for(producer)
    if not original:
        items: list[dict[str, Any]] = []
        text = message.content or message.refusal
        if text or not message.tool_calls:
            items.append({"role": "assistant", "content": text})
        items.extend(_call_item(call) for call in message.tool_calls)
        return items
    calls = {call.id: call for call in message.tool_calls}
    replayed: list[dict[str, Any]] = []
    group: list[TextPart | RefusalPart] = []  # consecutive parts of one output message
    for part in original:
        if isinstance(part, TextPart | RefusalPart) and part.item_id:
            if group and group[0].item_id != part.item_id:
                replayed.append(_message_item(group))
                group = []
            group.append(part)
            continue
        if group:
            replayed.append(_message_item(group))
            group = []
        if isinstance(part, TextPart | RefusalPart):
            replayed.append({"role": "assistant", "content": part.text})
        elif isinstance(part, CallPart):
            replayed.append(_call_item(calls[part.call_id], part.item_id))
        elif isinstance(part, NativeItem):
            replayed.append(dict(part.item))
    if group:
        replayed.append(_message_item(group))
    # A reasoning item needs the item that followed it: drop trailing reasoning.
    while replayed and replayed[-1].get("type") == "reasoning":
        replayed.pop()
    return replayed


def encode_input(
    history: Sequence[Message], producer: str = "", *, answered: set[str] | None = None
) -> list[dict[str, Any]]:
    """Translate portable history to Responses input items.

    Call ids survive translation; each assistant call becomes a `function_call` item with
    its arguments as a JSON string (the exact bytes the model produced), and every
    `function_call_output` must follow its call (or answer a call of the continued
    response, `answered`). Native items are replayed only when `producer` made them.
    """
    items: list[dict[str, Any]] = []
    open_calls: set[str] = set(answered or ())
    for message in history:
        if message.role == "tool":
            call_id = answered_call(message, open_calls)
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": message.content}
            )
            continue
        if message.role != "assistant":
            items.append({"role": message.role, "content": message.content})
            continue
        items.extend(_assistant_items(message, producer))
        open_calls.update(call.id for call in message.tool_calls)
    check_no_orphan_reasoning(items)
    return items


def check_no_orphan_reasoning(items: list[dict[str, Any]]) -> None:
    """Every reasoning item must be followed by an item of the same assistant output: not
    by nothing, a function call's output or a user, system or developer message. (Judged by
    the items lockgate itself writes: opaque provider items are never read.)"""
    for index, item in enumerate(items):
        if item.get("type") != "reasoning":
            continue
        following = items[index + 1] if index + 1 < len(items) else None
        if following is None or following.get("type") == "function_call_output":
            raise ValueError("refusing to send a reasoning item without its following item")
        if "type" not in following and following.get("role") != "assistant":
            raise ValueError("refusing to send a reasoning item without its following item")
