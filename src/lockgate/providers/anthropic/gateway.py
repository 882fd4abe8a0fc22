"""The Anthropic Messages side of the gating engine (`lockgate.proxy`): the client tools of
a native `POST /v1/messages` body, the content blocks that begin an action, and the stream
error the `anthropic` SDK raises on.

- **Requests**: a `POST …/messages` (the body's `stream` asks for a stream), or Messages on
  Vertex AI, `POST …/publishers/anthropic/models/{model}:streamRawPredict` (a stream) or
  `:rawPredict` (a whole answer; the `count-tokens` model is no Messages request).
- **Tools**: `{name, description, input_schema}` (with no `type`, or `type: "custom"`);
  server tools (`web_search_20250305`, …) are the provider's, and their blocks are provider
  output, never calls.
- **Actions**: a `content_block_start` of any block but `text`, `thinking` and
  `redacted_thinking`: a `tool_use`, and every provider-executed block (`server_tool_use`,
  `mcp_tool_use`, `*_tool_result`, …); the `message_delta`, which states the stop reason;
  and any event that is not a preview (`_PREVIEW`). The engine holds the stream from there
  on. (A tool's `input_json_delta` holds it too: the decoder reports it as arguments.)
- **A whole response** (no `stream`) is judged as the stream `message_start` (the message
  without its content and stop reason), one `content_block_start` (the whole block, which
  the decoder reads as its content) and `content_block_stop` per block, `message_delta`
  (the stop reason) and `message_stop`; a `tool_use` block starts with `input: {}` as the
  API streams it, its input following as one `input_json_delta` (the decoder refuses any
  other start: the stream readers disagree on it); a `content` that is not a list is
  malformed; a refused one becomes the same error object as the stream's, as a 502 body.
- **Keep-alives**: `ping` events pass at once, even while the stream is held; the engine's
  own keep-alive is a `ping` too.
- **The error**: `event: error` with `{"type": "error", "error": {"type", "message"}}`:
  the SDK raises `APIStatusError` on any `event: error` frame. Its type is
  `overloaded_error` when a new request may succeed, `api_error` otherwise. (lockgate's own
  transience rule, `decoding.read_error`, reads both as transient: `api_error` is what
  Anthropic sends for an internal error.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...conversation import ToolSpec
from ...gateway import (
    ProtocolTarget,
    Refusal,
    body_model,
    declared_tools,
    event_object,
    sse_frame,
    suffix_target,
)
from ...sse import ServerSentEvent
from ..decoding import compact_json, malformed
from .decoder import AnthropicDecoder

__all__ = ["GATEWAY", "AnthropicGateway"]

_NOT_ACTIONS = frozenset({"text", "thinking", "redacted_thinking"})
# Events forwarded at once (a `content_block_start` only for a text or thinking block);
# every other event holds the stream: `message_delta` (the stop reason), an unnamed frame
# (the SDK skips it, a naive client might not), an event added to the API later.
_PREVIEW = frozenset({"message_start", "content_block_delta", "content_block_stop", "ping"})
KEEPALIVE = b'event: ping\ndata: {"type": "ping"}\n\n'
_KEEPALIVE_EVENT = ServerSentEvent("ping", b'{"type": "ping"}')  # KEEPALIVE, as an event
# Messages on Vertex AI (Claude Code with CLAUDE_CODE_USE_VERTEX, the SDK's AnthropicVertex):
# `…/publishers/anthropic/models/{model}:streamRawPredict` streams, `:rawPredict` does not.
_VERTEX = re.compile(
    r"/publishers/anthropic/models/(?P<model>[^/:]+):(?P<specifier>streamRawPredict|rawPredict)$"
)
# The proxy's own errors in Anthropic's shape: the error type by status.
_PROXY_ERRORS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}
_STREAMED = ProtocolTarget(stream=True)
_WHOLE = ProtocolTarget(stream=False)


class AnthropicGateway:
    """The Anthropic Messages gateway."""

    path_endings = ("/messages", ":streamRawPredict", ":rawPredict")

    def target(self, method: str, path: str, query: Mapping[str, str]) -> ProtocolTarget | None:
        found = suffix_target(method, path, ("/messages",))
        if found is not None or method.upper() != "POST":
            return found
        vertex = _VERTEX.search(path.rstrip("/"))
        if vertex is None or vertex.group("model") == "count-tokens":
            return None  # not a Messages request (Vertex's token count is one too)
        return _STREAMED if vertex.group("specifier") == "streamRawPredict" else _WHOLE

    def wants_stream(self, request: Mapping[str, Any], target: ProtocolTarget) -> bool:
        if target.stream is not None:
            return target.stream  # Vertex AI: the path says it
        return request.get("stream") is True

    key_header = "x-api-key"

    # `/v1/messages` (or `/messages` under an upstream URL that ends in `/v1`), its token
    # count, and Vertex AI's `…/publishers/anthropic/models/{m}:rawPredict` (its token count
    # is the model `count-tokens`).
    keyed_paths = re.compile(
        r"(?:^|/v1)/messages(?:/count_tokens)?$"
        r"|/publishers/anthropic/models/[^/:]+:(?:streamRawPredict|rawPredict)$"
    )

    def ungateable(self, method: str, path: str, query: Mapping[str, Sequence[str]]) -> str | None:
        return None

    def claims(self, path: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        # Every Anthropic SDK request carries `anthropic-version`; its paths have `messages`.
        return "anthropic-version" in headers or "messages" in path.split("/")

    def client_error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        kind = _PROXY_ERRORS.get(status, "invalid_request_error" if status < 500 else "api_error")
        return compact_json({"type": "error", "error": {"type": kind, "message": message}}).encode(
            "utf-8", "backslashreplace"
        )

    def request_problem(self, request: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None

    def with_model(
        self, path: str, request: Mapping[str, Any], model: str
    ) -> tuple[str, dict[str, Any]]:
        vertex = _VERTEX.search(path.rstrip("/"))
        if vertex is None:
            return path, {**request, "model": model}
        start, end = vertex.span("model")  # Vertex AI names the model in the path
        return path[:start] + model + path[end:], dict(request)

    def request_model(self, path: str, request: Mapping[str, Any]) -> str | None:
        vertex = _VERTEX.search(path.rstrip("/"))
        return body_model(request) if vertex is None else vertex.group("model")

    def tools(
        self, request: Mapping[str, Any], *, validate_schemas: bool = False
    ) -> tuple[ToolSpec, ...]:
        return declared_tools(request.get("tools"), _client_tool, validate_schemas=validate_schemas)

    def new_decoder(self) -> AnthropicDecoder:
        return AnthropicDecoder()

    def begins_hold(self, event: ServerSentEvent) -> bool:
        name = event.event
        if name in _PREVIEW:
            return False
        if name != "content_block_start":
            return True  # the stop reason (`message_delta`), and any other or unnamed event
        payload = event_object(event)
        block = payload.get("content_block") if payload is not None else None
        return type(block) is not dict or block.get("type") not in _NOT_ACTIONS

    def unreadable_action(self, event: ServerSentEvent) -> str | None:
        return None  # a block type the decoder cannot replay fails in the decoder

    def is_finish(self, event: ServerSentEvent) -> bool:
        return event.event == "message_delta"

    def whole_stream(self, response: Mapping[str, Any]) -> bytes:
        if response.get("type") == "error":
            return _frame("error", response)
        content = response.get("content")
        if content is not None and not isinstance(content, list):
            # Read as no blocks, the gate would judge nothing of what a client reads here.
            raise malformed("the response's content must be a list of blocks")
        blocks = content or []
        start = {**response, "content": [], "stop_reason": None, "stop_sequence": None}
        frames = [_frame("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(blocks):
            streamed = _streamed_input(block)
            if streamed is not None:
                block = {**block, "input": {}}
            frames.append(
                _frame(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": block},
                )
            )
            if streamed:
                piece = {"type": "input_json_delta", "partial_json": streamed}
                frames.append(
                    _frame(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": piece},
                    )
                )
            frames.append(
                _frame("content_block_stop", {"type": "content_block_stop", "index": index})
            )
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": response.get("stop_reason"),
                "stop_sequence": response.get("stop_sequence"),
            },
            "usage": response.get("usage") or {},
        }
        frames.append(_frame("message_delta", delta))
        frames.append(_frame("message_stop", {"type": "message_stop"}))
        return b"".join(frames)

    def error_body(self, refusal: Refusal) -> bytes:
        return compact_json(_error(refusal)).encode("utf-8", "backslashreplace")

    def skipped(self, event: ServerSentEvent) -> bool:
        return event.event is None  # the SDK and the decoder skip it; litellm would not

    def is_keepalive(self, event: ServerSentEvent) -> bool:
        return event.event == "ping"

    def keepalive(self) -> bytes:
        return KEEPALIVE

    def keepalive_event(self) -> ServerSentEvent | None:
        return _KEEPALIVE_EVENT

    def refusal_frame(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        return b"".join(sse_frame(event) for event in self.refusal_events(refusal, last))

    def refusal_events(
        self, refusal: Refusal, last: ServerSentEvent | None
    ) -> list[ServerSentEvent]:
        return [_event("error", _error(refusal))]


def _error(refusal: Refusal) -> dict[str, Any]:
    error = {
        "type": "overloaded_error" if refusal.transient else "api_error",
        "message": refusal.message,
    }
    return {"type": "error", "error": error}


def _event(name: str, payload: Mapping[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(name, compact_json(dict(payload)).encode("utf-8", "backslashreplace"))


def _frame(name: str, payload: Mapping[str, Any]) -> bytes:
    return sse_frame(_event(name, payload))


def _client_tool(tool: dict[str, Any]) -> tuple[object, object, object] | None:
    """A client tool's (name, description, input_schema); None for a server tool."""
    if tool.get("type") not in (None, "custom") or "input_schema" not in tool:
        return None
    return tool.get("name"), tool.get("description"), tool.get("input_schema")


GATEWAY = AnthropicGateway()


def _streamed_input(block: object) -> str | None:
    """A whole `tool_use` block's input as the stream states it, one `input_json_delta`
    after a start with `input: {}` (`""` for an empty input); None for any other block,
    and for an input that is absent or no object (the decoder judges those as they are)."""
    if type(block) is not dict or block.get("type") != "tool_use":
        return None
    value = block.get("input")
    if type(value) is not dict:
        return None
    return compact_json(value) if value else ""
