"""OpenAI Chat Completions request encoding.

Every request carries the full portable history (Chat has no stored continuation):

- system and user messages: `{"role", "content"}`;
- an assistant message: `{"role": "assistant", "content": <text, else its refusal, else
  null when it made calls, else "">, "tool_calls": [{"id", "type": "function",
  "function": {"name", "arguments"}}]}` — no `tool_calls` key when it made none. The
  arguments are the exact bytes the model produced (`ToolCall.arguments_json`), or the
  compact JSON of the parsed arguments when those are empty (empty arguments become `{}`);
- one `{"role": "tool", "tool_call_id", "content"}` per call: it must follow its call and
  answer it once (ValueError otherwise, as for Responses);
- reasoning a server wants back: for the SAME producer only (`Message.native_for`), the
  `reasoning` native items holding `reasoning_content` (DeepSeek's thinking mode requires
  it on turns that made calls) or `reasoning_details` (OpenRouter) are put back, unchanged,
  on that assistant message; never to another producer.

Tools: `{"type": "function", "function": {"name", "description", "parameters"}}`, plus
`"strict": true` in `function` only when the schema qualifies (`ToolSpec.strict`).

Request: `model`, `messages`, `stream: true`, `stream_options: {"include_usage": true}`, and,
when tools are given, `tools`, `tool_choice: "auto"` and `parallel_tool_calls: false`
(OpenAI rejects `parallel_tool_calls` without tools).

Token cap: `CodecOptions.max_output_tokens` is sent as `max_completion_tokens` for OpenAI
reasoning model names (`is_reasoning_model`: o1, o3, o4…, gpt-5… except -chat, codex…),
which reject `max_tokens`, and as `max_tokens` for every other model: every compatible
server knows `max_tokens`, many know nothing else, and OpenAI still accepts it for its
non-reasoning models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...conversation import Message, NativeItem, ToolCall, ToolSpec
from ...defaults import MAX_OUTPUT_TOKENS
from ..base import CodecOptions
from ..decoding import compact_json
from ..openai.history import answered_call
from ..openai.models import is_reasoning_model
from .decoder import ChatDecoder

__all__ = [
    "PROVIDER",
    "REPLAYED_REASONING_FIELDS",
    "ChatCodec",
    "encode_messages",
    "encode_tool",
    "token_cap_field",
]

PROVIDER = "chat"
# Reasoning fields of an assistant message that a server wants back unchanged.
REPLAYED_REASONING_FIELDS = ("reasoning_content", "reasoning_details")


def token_cap_field(model: str) -> str:
    """The request field that caps output tokens for `model`."""
    return "max_completion_tokens" if is_reasoning_model(model) else "max_tokens"


class ChatCodec:
    """The OpenAI Chat Completions request encoder and stream decoder factory."""

    provider = PROVIDER

    def __init__(self, model: str, *, max_output_tokens: int = MAX_OUTPUT_TOKENS) -> None:
        if not model:
            raise ValueError("model must not be empty")
        self.model = model
        self.max_output_tokens = max_output_tokens

    @classmethod
    def from_options(cls, options: CodecOptions) -> ChatCodec:
        return cls(options.model, max_output_tokens=options.max_output_tokens)

    @property
    def producer(self) -> str:
        return f"{self.provider}:{self.model}"

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": encode_messages(history, self.producer),
            "stream": True,
            "stream_options": {"include_usage": True},
            token_cap_field(self.model): self.max_output_tokens,
        }
        if tools:
            request["tools"] = [encode_tool(tool) for tool in tools]
            request["tool_choice"] = "auto"
            request["parallel_tool_calls"] = False
        return request

    def new_decoder(self) -> ChatDecoder:
        return ChatDecoder()


def encode_tool(tool: ToolSpec) -> dict[str, Any]:
    """The nested function-tool shape; strict mode only when the schema qualifies."""
    function: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
    }
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _arguments(call: ToolCall) -> str:
    """The exact argument bytes the model produced; `{}` (compact JSON) when empty."""
    if call.arguments_json.strip(" \t\n\r"):
        return call.arguments_json
    return compact_json(dict(call.arguments))


def _assistant(message: Message, producer: str) -> dict[str, Any]:
    text = message.content or message.refusal
    encoded: dict[str, Any] = {
        "role": "assistant",
        "content": text or (None if message.tool_calls else ""),
    }
    if message.tool_calls:
        encoded["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for call in message.tool_calls
        ]
    for part in message.native_for(producer):
        if isinstance(part, NativeItem) and part.kind == "reasoning":
            for field in REPLAYED_REASONING_FIELDS:
                if field in part.item:
                    encoded[field] = part.item[field]
    return encoded


def encode_messages(history: Sequence[Message], producer: str = "") -> list[dict[str, Any]]:
    """Translate portable history to Chat messages. Call ids survive translation; each tool
    result must follow its call and answer it once. Reasoning fields are replayed only when
    `producer` made the message."""
    messages: list[dict[str, Any]] = []
    open_calls: set[str] = set()
    for message in history:
        if message.role == "tool":
            call_id = answered_call(message, open_calls)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": message.content})
        elif message.role == "assistant":
            messages.append(_assistant(message, producer))
            open_calls.update(call.id for call in message.tool_calls)
        else:
            messages.append({"role": message.role, "content": message.content})
    return messages
