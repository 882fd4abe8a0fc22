"""Anthropic Messages request encoding (`POST /v1/messages`, `stream: true`).

Every request carries the full portable history (Anthropic keeps no conversation state):

- `system` is top level: the text of every system message, joined by a blank line.
- `messages` alternate user / assistant; consecutive messages of the same role are merged
  into one (their content blocks concatenated).
- An assistant message is replayed to the model that made it (`message.native_for(
  producer)`) as its content blocks in their original order: `thinking` /
  `redacted_thinking` blocks and provider-executed blocks (`server_tool_use`, every
  `*_tool_result`) unchanged, text as `text` blocks, calls as `tool_use {id, name, input}`
  with the parsed arguments object. Text citations are not kept (the text is replayed
  without them). For any other producer only its text and its calls are sent: thinking
  never goes to another model.
- Tool results: all results answering one assistant message go in ONE user message, as
  `tool_result {tool_use_id, content, is_error?}` blocks first in its content, one per
  tool_use. `is_error: true` when the observation starts with `error:` (the loop's words
  for a call that failed, or was never run). A user message that follows them is merged
  after them into that same user message. A result that answers no tool_use of the
  assistant message right before it, a second result for one call, or a tool_use left
  without a result is refused (ValueError) before any request is made.
- A paused assistant message (`pause_turn`) is sent back as it is; when it is the last
  message the request ends with it, which is how Anthropic continues a paused turn. A
  continuation that follows it is merged into the same assistant message.
- Tools are `{name, description, input_schema}`; `tool_choice` is `{"type": "auto",
  "disable_parallel_tool_use": true}` (lockgate executes calls one at a time; with thinking
  only `auto` is allowed, which this is).
- `max_tokens` (required by the API) is `max_output_tokens`. With `--thinking-budget N`
  (`thinking {"type": "enabled", "budget_tokens": N}`, N ≥ 1024 as the API requires)
  `max_tokens` must exceed the budget, so `N + max_output_tokens` is sent: the answer keeps
  its own `max_output_tokens` on top of the thinking budget.

Known limits: a `tool_use` is rebuilt from the call (its `caller` and other extra fields
are not kept); with thinking enabled, an assistant message without thinking blocks (one
lockgate wrote itself for a `--recover` observation, or one from another model) may be
refused by the API when it is the last assistant turn of a tool loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...conversation import Message, ToolCall, ToolSpec
from ...defaults import MAX_OUTPUT_TOKENS
from ..base import CodecOptions
from ..encoding import BlockMessages, replayed_blocks
from .decoder import AnthropicDecoder
from .options import MIN_THINKING_BUDGET, AnthropicOptions

__all__ = [
    "AnthropicCodec",
    "encode_messages",
    "encode_tool",
]

PROVIDER = "anthropic"


class AnthropicCodec:
    """The Anthropic Messages request encoder and stream decoder factory."""

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        max_output_tokens: int = MAX_OUTPUT_TOKENS,
        thinking_budget: int | None = None,
    ) -> None:
        if not model:
            raise ValueError("model must not be empty")
        if type(max_output_tokens) is not int or max_output_tokens < 1:
            raise ValueError("max_output_tokens must be a positive whole number")
        if thinking_budget is not None and (
            type(thinking_budget) is not int or thinking_budget < MIN_THINKING_BUDGET
        ):
            raise ValueError(
                f"thinking budget must be a whole number of at least {MIN_THINKING_BUDGET} "
                "tokens (the API's minimum)"
            )
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.thinking_budget = thinking_budget

    @classmethod
    def from_options(cls, options: CodecOptions) -> AnthropicCodec:
        return cls(
            options.model,
            max_output_tokens=options.max_output_tokens,
            thinking_budget=options.own(AnthropicOptions).thinking_budget,
        )

    @property
    def producer(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def max_tokens(self) -> int:
        """What `max_tokens` says: the output limit, plus the thinking budget if any."""
        return self.max_output_tokens + (self.thinking_budget or 0)

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        system = "\n\n".join(m.content for m in history if m.role == "system" and m.content)
        if system:
            request["system"] = system
        request["messages"] = encode_messages(history, self.producer)
        if tools:
            request["tools"] = [encode_tool(tool) for tool in tools]
            request["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
        if self.thinking_budget is not None:
            request["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        request["stream"] = True
        return request

    def new_decoder(self) -> AnthropicDecoder:
        return AnthropicDecoder()


def encode_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": dict(tool.parameters),
    }


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}


def _assistant_blocks(message: Message, producer: str) -> list[dict[str, Any]]:
    return replayed_blocks(message, producer, text=_text, call=_tool_use)


class _Messages(BlockMessages):
    call_name = "tool_use"
    result_name = "tool_result"

    def text_block(self, text: str) -> dict[str, Any]:
        return _text(text)

    def call_ids(self, blocks: list[dict[str, Any]]) -> list[str]:
        return [block["id"] for block in blocks if block.get("type") == "tool_use"]

    def result_block(self, call_id: str, observation: str, error: bool) -> dict[str, Any]:
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": call_id,
            "content": observation,
        }
        if error:
            block["is_error"] = True
        return block

    def is_result(self, block: dict[str, Any]) -> bool:
        return bool(block.get("type") == "tool_result")


def encode_messages(history: Sequence[Message], producer: str = "") -> list[dict[str, Any]]:
    """Portable history as Anthropic `messages` (system messages go top level)."""
    return _Messages().build(history, lambda message: _assistant_blocks(message, producer))
