"""The Anthropic Messages side of the gating engine (`lockgate.proxy`): the client tools of
a native `POST /v1/messages` body, the content blocks that begin an action, and the stream
error the `anthropic` SDK raises on.

- **Tools**: `{name, description, input_schema}` (with no `type`, or `type: "custom"`);
  server tools (`web_search_20250305`, …) are the provider's, and their blocks are provider
  output, never calls.
- **Actions**: a `content_block_start` of any block but `text`, `thinking` and
  `redacted_thinking`: a `tool_use`, and every provider-executed block (`server_tool_use`,
  `mcp_tool_use`, `*_tool_result`, …); and the `message_delta`, which states the stop
  reason. The engine holds the stream from there on.
- **Keep-alives**: `ping` events pass at once, even while the stream is held; the engine's
  own keep-alive is a `ping` too.
- **The error**: `event: error` with `{"type": "error", "error": {"type", "message"}}`:
  the SDK raises `APIStatusError` on any `event: error` frame. Its type is
  `overloaded_error` when a new request may succeed, `api_error` otherwise. (lockgate's own
  transience rule, `decoding.read_error`, reads both as transient: `api_error` is what
  Anthropic sends for an internal error.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...conversation import ToolSpec
from ...gateway import Refusal, declared_tool
from ...jsonlimits import parse_event
from ...sse import ServerSentEvent
from ..decoding import compact_json
from .decoder import AnthropicDecoder

__all__ = ["GATEWAY", "AnthropicGateway"]

_NOT_ACTIONS = frozenset({"text", "thinking", "redacted_thinking"})
KEEPALIVE = b'event: ping\ndata: {"type": "ping"}\n\n'


class AnthropicGateway:
    """The Anthropic Messages gateway."""

    def wants_stream(self, request: Mapping[str, Any]) -> bool:
        return request.get("stream") is True

    def tools(
        self, request: Mapping[str, Any], *, validate_schemas: bool = False
    ) -> tuple[ToolSpec, ...]:
        declared = request.get("tools")
        if not isinstance(declared, list):
            return ()
        tools = (
            declared_tool(
                tool.get("name"),
                tool.get("description"),
                tool.get("input_schema"),
                validate_schemas=validate_schemas,
            )
            for tool in declared
            if isinstance(tool, dict)
            and tool.get("type") in (None, "custom")
            and "input_schema" in tool
        )
        return tuple(tool for tool in tools if tool is not None)

    def new_decoder(self) -> AnthropicDecoder:
        return AnthropicDecoder()

    def begins_hold(self, event: ServerSentEvent) -> bool:
        name = event.event
        if name == "message_delta":
            return True  # the stop reason: only `message_stop` may confirm it
        if name != "content_block_start":
            return False
        try:
            payload = parse_event(event.data)
        except ValueError:
            return False
        block = payload.get("content_block") if type(payload) is dict else None
        return type(block) is dict and block.get("type") not in _NOT_ACTIONS

    def is_keepalive(self, event: ServerSentEvent) -> bool:
        return event.event == "ping"

    def keepalive(self) -> bytes:
        return KEEPALIVE

    def refusal_frame(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        error = {
            "type": "overloaded_error" if refusal.transient else "api_error",
            "message": refusal.message,
        }
        body = {"type": "error", "error": error}
        return (
            b"event: error\ndata: "
            + compact_json(body).encode("utf-8", "backslashreplace")
            + b"\n\n"
        )


GATEWAY = AnthropicGateway()
