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

from ...conversation import Message, ToolCall, ToolSpec
from ...defaults import MAX_OUTPUT_TOKENS
from ..base import CodecOptions
from ..encoding import BlockMessages, replayed_blocks
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


def _text(text: str) -> dict[str, Any]:
    return {"text": text}


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call.id, "name": call.name, "input": dict(call.arguments)}}


def _assistant_blocks(message: Message, producer: str) -> list[dict[str, Any]]:
    return replayed_blocks(message, producer, text=_text, call=_tool_use)


class _Messages(BlockMessages):
    call_name = "toolUse"
    result_name = "toolResult"

    def text_block(self, text: str) -> dict[str, Any]:
        return _text(text)

    def call_ids(self, blocks: list[dict[str, Any]]) -> list[str]:
        return [
            block["toolUse"]["toolUseId"]
            for block in blocks
            if "toolUse" in block and block["toolUse"].get("type") != "server_tool_use"
        ]

    def result_block(self, call_id: str, observation: str, error: bool) -> dict[str, Any]:
        result: dict[str, Any] = {"toolUseId": call_id, "content": [{"text": observation}]}
        if error:
            result["status"] = "error"
        return {"toolResult": result}

    def is_result(self, block: dict[str, Any]) -> bool:
        return "toolResult" in block


def encode_messages(history: Sequence[Message], producer: str = "") -> list[dict[str, Any]]:
    """Portable history as Converse `messages` (system messages go top level)."""
    return _Messages().build(history, lambda message: _assistant_blocks(message, producer))
