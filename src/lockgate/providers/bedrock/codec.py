"""Bedrock Converse request encoding (`POST /model/{modelId}/converse-stream`).

Every request carries the full portable history (Converse keeps no conversation state):

- `system` is top level: one `{text}` block per system message.
- `messages` alternate user / assistant, each `{role, content: [blocks]}`; consecutive
  messages of the same role are merged (their blocks concatenated).
- An assistant message is replayed to the model that made it (`message.native_for(
  producer)`) as its blocks in their original order: reasoning (`reasoningContent`, with its
  `signature`, or its `redactedContent`) and provider-run blocks (a `server_tool_use`
  `toolUse`, its `toolResult`) unchanged, text as `{text}`, calls as
  `{toolUse: {toolUseId, name, input}}` with the parsed arguments object. Any other
  producer gets only its text and its calls: reasoning never goes to another model.
- Tool results: every result answering one assistant message goes in ONE user message, as
  `{toolResult: {toolUseId, content: [{text}], status?}}` blocks first in its content;
  `status: "error"` when the observation starts with `error:`. A result that answers no
  `toolUse` of the assistant message right before it, a second result for one call, or a
  `toolUse` left without a result is refused (ValueError) before any request is made.
- Tools are `toolConfig.tools[].toolSpec {name, description, inputSchema: {json}}`, with
  `toolChoice: {auto: {}}`.
- `inferenceConfig.maxTokens` is `max_output_tokens`.

The model is not part of the body: the request names it as `model`, which the transport
takes out and puts in the path (`stream_path`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from ...conversation import CallPart, Message, NativeItem, RefusalPart, TextPart, ToolCall, ToolSpec
from ...defaults import MAX_OUTPUT_TOKENS
from ..base import CodecOptions
from .decoder import BedrockDecoder
from .framing import EventStreamFramer

__all__ = [
    "BedrockCodec",
    "encode_messages",
    "encode_tool",
    "stream_path",
    "whole_path",
]

PROVIDER = "bedrock"
ERROR_PREFIX = "error:"


def _model_segment(model: str) -> str:
    # A model id or an inference-profile ARN holds ':' and '/': one path segment, encoded.
    return quote(model, safe="")


def stream_path(model: str) -> str:
    """The ConverseStream path of `model`."""
    return f"/model/{_model_segment(model)}/converse-stream"


def whole_path(model: str) -> str:
    """The Converse (non-streaming) path of `model`."""
    return f"/model/{_model_segment(model)}/converse"


class BedrockCodec:
    """The Converse request encoder, and the decoder and framer of ConverseStream bodies."""

    provider = PROVIDER

    def __init__(self, model: str, *, max_output_tokens: int = MAX_OUTPUT_TOKENS) -> None:
        if not model:
            raise ValueError("model must not be empty")
        if type(max_output_tokens) is not int or max_output_tokens < 1:
            raise ValueError("max_output_tokens must be a positive whole number")
        self.model = model
        self.max_output_tokens = max_output_tokens

    @classmethod
    def from_options(cls, options: CodecOptions) -> BedrockCodec:
        return cls(options.model, max_output_tokens=options.max_output_tokens)

    @property
    def producer(self) -> str:
        return f"{self.provider}:{self.model}"

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model}
        system = [{"text": m.content} for m in history if m.role == "system" and m.content]
        if system:
            request["system"] = system
        request["messages"] = encode_messages(history, self.producer)
        request["inferenceConfig"] = {"maxTokens": self.max_output_tokens}
        if tools:
            request["toolConfig"] = {
                "tools": [encode_tool(tool) for tool in tools],
                "toolChoice": {"auto": {}},
            }
        return request

    def new_decoder(self) -> BedrockDecoder:
        return BedrockDecoder()

    def new_framer(self, max_event_bytes: int) -> EventStreamFramer:
        return EventStreamFramer(max_event_bytes)


def encode_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "toolSpec": {
            "name": tool.name,
            "description": tool.description or tool.name,  # Converse wants a non-empty one
            "inputSchema": {"json": dict(tool.parameters)},
        }
    }


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call.id, "name": call.name, "input": dict(call.arguments)}}


def _assistant_blocks(message: Message, producer: str) -> list[dict[str, Any]]:
    """Its original content for the same producer, else the portable text and calls."""
    original = message.native_for(producer)
    if not original:
        text = message.content or message.refusal
        blocks: list[dict[str, Any]] = [{"text": text}] if text else []
        blocks.extend(_tool_use(call) for call in message.tool_calls)
        return blocks
    calls = {call.id: call for call in message.tool_calls}
    replayed: list[dict[str, Any]] = []
    for part in original:
        if isinstance(part, NativeItem):
            replayed.append(dict(part.item))
        elif isinstance(part, CallPart):
            call = calls.get(part.call_id)
            if call is None:
                raise ValueError(
                    f"assistant output names call {part.call_id!r}, not among its calls"
                )
            replayed.append(_tool_use(call))
        elif isinstance(part, TextPart | RefusalPart) and part.text:
            replayed.append({"text": part.text})
    return replayed


class _Messages:
    """Builds the alternating message list."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.open_calls: list[str] = []  # toolUse ids of the last assistant, unanswered

    def _last(self, role: str) -> list[dict[str, Any]]:
        if not self.messages or self.messages[-1]["role"] != role:
            self.messages.append({"role": role, "content": []})
        content: list[dict[str, Any]] = self.messages[-1]["content"]
        return content

    def _check_answered(self) -> None:
        if self.open_calls:
            raise ValueError(f"toolUse {', '.join(self.open_calls)} has no toolResult")

    def assistant(self, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == "user":
            self._check_answered()
        self._last("assistant").extend(blocks)
        self.open_calls.extend(
            block["toolUse"]["toolUseId"]
            for block in blocks
            if "toolUse" in block and block["toolUse"].get("type") != "server_tool_use"
        )

    def user(self, text: str) -> None:
        if not text:
            return
        self._check_answered()
        self._last("user").append({"text": text})

    def tool_result(self, message: Message) -> None:
        call_id = message.tool_call_id or ""
        if call_id not in self.open_calls:
            raise ValueError(
                f"tool result {call_id!r} does not answer a toolUse of the assistant message "
                "before it"
            )
        self.open_calls.remove(call_id)
        result: dict[str, Any] = {"toolUseId": call_id, "content": [{"text": message.content}]}
        if message.content.startswith(ERROR_PREFIX):
            result["status"] = "error"
        content = self._last("user")
        position = 0
        while position < len(content) and "toolResult" in content[position]:
            position += 1
        content.insert(position, {"toolResult": result})

    def finish(self) -> list[dict[str, Any]]:
        self._check_answered()
        return self.messages


def encode_messages(history: Sequence[Message], producer: str = "") -> list[dict[str, Any]]:
    """Portable history as Converse `messages` (system messages go top level)."""
    builder = _Messages()
    for message in history:
        if message.role == "system":
            continue
        if message.role == "user":
            builder.user(message.content)
        elif message.role == "tool":
            builder.tool_result(message)
        else:
            builder.assistant(_assistant_blocks(message, producer))
    return builder.finish()
