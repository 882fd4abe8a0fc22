"""The Anthropic Messages protocol in the lab: replies rendered as the live API streams them
(named events, content blocks by index, `input_json_delta` fragments whose first is `""`,
`signature_delta` last in a thinking block, `ping`s, `message_delta` with the stop reason
and cumulative usage, `message_stop`), the non-streaming `Message`, Anthropic error bodies
and rate-limit headers, and the scenarios only Anthropic has (thinking replay, tool_result
placement, in-stream overloads, stop reasons that contradict the blocks, `pause_turn`,
refusals with details, provider-executed blocks).

`MessageBuilder` authors such streams, block by block, and keeps the final content (every
field the SDK's `Message` type requires).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from ...scripted.renderer import (
    Frame,
    FunctionCallsOnly,
    StreamFlagRenderer,
    leading_results,
    typed_sse_frame,
    walk,
)
from ...scripted.reply import (
    LAB_MODEL,
    Call,
    OpeningError,
    ProviderTool,
    Refuse,
    Reply,
    ReplyUsage,
    Say,
    Think,
    argument_pieces,
    argument_text,
    split,
)
from ...scripted.script import Turn

__all__ = [
    "AnthropicRenderer",
    "MessageBuilder",
    "anthropic_error_body",
    "anthropic_reset_headers",
    "render",
    "sse_bytes",
]

PATH = "/v1/messages"
DEFAULT_USAGE = ReplyUsage()

# neutral kind → Anthropic error type
_ERROR_TYPES: dict[str, str] = {
    "auth": "authentication_error",
    "quota": "billing_error",
    "rate_limit": "rate_limit_error",
    "overloaded": "overloaded_error",
    "server": "api_error",
    "unavailable": "api_error",
    "exhausted": "invalid_request_error",
    "invalid": "invalid_request_error",
}


def anthropic_error_body(error: OpeningError) -> dict[str, Any]:
    kind = _ERROR_TYPES[error.kind]
    if error.kind == "unavailable" and error.status == 529:
        kind = "overloaded_error"
    return {
        "type": "error",
        "error": {"type": kind, "message": error.message},
        "request_id": f"req_lab_{error.status}_{kind}",
    }


def _rfc3339(moment: float) -> str:
    stamp = datetime.fromtimestamp(moment, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def anthropic_reset_headers(seconds: float, now: float | None = None) -> dict[str, str]:
    """Requests exhausted, resetting `seconds` from now; tokens with capacity left (their
    later reset must not count). Anthropic states resets as RFC 3339 timestamps."""
    now = time.time() if now is None else now
    return {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": _rfc3339(now + seconds),
        "anthropic-ratelimit-tokens-limit": "40000",
        "anthropic-ratelimit-tokens-remaining": "39000",
        "anthropic-ratelimit-tokens-reset": _rfc3339(now + 360),
    }


def _input_tokens(usage: ReplyUsage) -> int:
    """Anthropic's `input_tokens` excludes cache reads and writes."""
    return max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens)


def _start_usage(usage: ReplyUsage | None) -> dict[str, Any]:
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    return {
        "input_tokens": _input_tokens(usage),
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_input_tokens,
        "output_tokens": 1,  # a placeholder, as the API sends it
        "service_tier": "standard",
    }


def _final_usage(usage: ReplyUsage | None) -> dict[str, Any]:
    if usage is None:
        return {"output_tokens": 0}
    final: dict[str, Any] = {
        "input_tokens": _input_tokens(usage),
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_input_tokens,
        "output_tokens": usage.output_tokens,
    }
    if usage.reasoning_tokens:
        final["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    return final


def _parsed_or_empty(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class MessageBuilder:
    """Authors a realistic Anthropic Messages event stream."""

    def __init__(
        self,
        message_id: str,
        model: str = LAB_MODEL,
        usage: ReplyUsage | None = DEFAULT_USAGE,  # None: zeros (the API always reports)
    ) -> None:
        self.message_id = message_id
        self.model = model
        self.usage = usage
        self.events: list[dict[str, Any]] = []
        self.content: list[dict[str, Any]] = []  # the final content blocks
        self.calls = 0
        self.stop_reason: str | None = None
        self.stop_details: dict[str, Any] | None = None
        self._pinged = False

    def emit(self, event: dict[str, Any]) -> MessageBuilder:
        self.events.append(event)
        return self

    def message(self, content: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """A complete `Message` object (the fields the SDK's type requires)."""
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": list(self.content) if content is None else content,
            "stop_reason": self.stop_reason,
            "stop_sequence": None,
            "stop_details": self.stop_details,
            "usage": {**_start_usage(self.usage), **_final_usage(self.usage)},
        }

    def start(self, message_id: str | None = None) -> MessageBuilder:
        message = self.message([])
        message["stop_reason"] = None
        message["stop_details"] = None
        message["usage"] = _start_usage(self.usage)
        if message_id is not None:
            message["id"] = message_id
        return self.emit({"type": "message_start", "message": message})

    def ping(self) -> MessageBuilder:
        return self.emit({"type": "ping"})

    def _block_start(self, block: dict[str, Any]) -> int:
        index = len(self.content)
        self.content.append(block)
        self.emit({"type": "content_block_start", "index": index, "content_block": block})
        if not self._pinged:  # the API pings right after the first block starts
            self._pinged = True
            self.ping()
        return index

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        self.emit({"type": "content_block_delta", "index": index, "delta": delta})

    def _stop(self, index: int) -> MessageBuilder:
        return self.emit({"type": "content_block_stop", "index": index})

    def text(self, text: str, pieces: int = 4) -> MessageBuilder:
        index = self._block_start({"type": "text", "text": ""})
        for piece in split(text, pieces):
            self._delta(index, {"type": "text_delta", "text": piece})
        self.content[index] = {"type": "text", "text": text}
        return self._stop(index)

    def thinking(self, text: str, signature: str, pieces: int = 3) -> MessageBuilder:
        index = self._block_start({"type": "thinking", "thinking": "", "signature": ""})
        for piece in split(text, pieces):
            self._delta(index, {"type": "thinking_delta", "thinking": piece})
        self._delta(index, {"type": "signature_delta", "signature": signature})
        self.content[index] = {"type": "thinking", "thinking": text, "signature": signature}
        return self._stop(index)

    def redacted_thinking(self, data: str) -> MessageBuilder:
        index = self._block_start({"type": "redacted_thinking", "data": data})
        return self._stop(index)

    def tool_use(
        self,
        call_id: str,
        name: str,
        arguments: str | Mapping[str, Any],
        pieces: int = 5,
        *,
        finish: bool = True,
        close: bool | None = None,
    ) -> MessageBuilder:
        """A client tool call. `finish=False`: only about half of the arguments are sent;
        the block is then left open unless `close` (the output limit closes it)."""
        text = argument_text(arguments)
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        index = self._block_start(block)
        sent = argument_pieces(text, pieces, cut=not finish)
        for piece in ["", *sent]:  # the API's first fragment is always empty
            self._delta(index, {"type": "input_json_delta", "partial_json": piece})
        self.content[index] = {**block, "input": _parsed_or_empty(text if finish else "")}
        self.calls += 1
        if finish or close:
            self._stop(index)
        return self

    def server_tool_use(
        self, tool_id: str, name: str, tool_input: Mapping[str, Any], pieces: int = 3
    ) -> MessageBuilder:
        """A provider-executed tool call: its input streams like a client call's."""
        block = {"type": "server_tool_use", "id": tool_id, "name": name, "input": {}}
        index = self._block_start(block)
        for piece in ["", *split(json.dumps(tool_input), pieces)]:
            self._delta(index, {"type": "input_json_delta", "partial_json": piece})
        self.content[index] = {**block, "input": dict(tool_input)}
        return self._stop(index)

    def whole_block(self, block: dict[str, Any]) -> MessageBuilder:
        """A block that arrives whole in its start (provider tool results)."""
        return self._stop(self._block_start(block))

    def web_search(self, tool_id: str, query: str) -> MessageBuilder:
        """A web search the provider ran: `server_tool_use` + `web_search_tool_result`."""
        self.server_tool_use(tool_id, "web_search", {"query": query})
        return self.whole_block(web_search_result(tool_id, query))

    def finish(
        self,
        stop_reason: str | None,
        stop_details: dict[str, Any] | None = None,
        *,
        usage: dict[str, Any] | None = None,
        message_stop: bool = True,
    ) -> MessageBuilder:
        """`message_delta` with the stop reason and final usage, then `message_stop`."""
        self.stop_reason = stop_reason
        self.stop_details = stop_details
        delta: dict[str, Any] = {"stop_reason": stop_reason, "stop_sequence": None}
        if stop_details is not None:
            delta["stop_details"] = stop_details
        self.emit(
            {
                "type": "message_delta",
                "delta": delta,
                "usage": _final_usage(self.usage) if usage is None else usage,
            }
        )
        if message_stop:
            self.emit({"type": "message_stop"})
        return self

    def error(
        self, error_type: str = "overloaded_error", message: str = "Overloaded"
    ) -> MessageBuilder:
        return self.emit({"type": "error", "error": {"type": error_type, "message": message}})

    def raw(self, text: str) -> MessageBuilder:
        self.events.append({"raw": text})
        return self

    def turn(self, **options: Any) -> Turn:
        return Turn(events=tuple(self.events), **options)


def web_search_result(tool_id: str, query: str) -> dict[str, Any]:
    slug = "-".join(query.split())[:40]
    return {
        "type": "web_search_tool_result",
        "tool_use_id": tool_id,
        "content": [
            {
                "type": "web_search_result",
                "title": f"About {query}",
                "url": f"https://example.com/{slug}",
                "encrypted_content": f"EqgfCioIARgB-opaque-{tool_id}-do-not-touch==",
                "page_age": "3 days ago",
            }
        ],
    }


class _Reply(FunctionCallsOnly):
    """A neutral reply, part by part, as the Anthropic Messages API streams it (`walk`)."""

    protocol_name = "Anthropic Messages"

    def __init__(self, reply: Reply) -> None:
        self.builder = MessageBuilder(reply.response_id, reply.model, reply.usage).start()
        self._suffix = reply.response_id.removeprefix("resp_")
        self._truncated = reply.ending == "truncated"
        self._refusal: str | None = None

    def say(self, part: Say, number: int) -> None:
        self.builder.text(part.text, part.pieces)

    def think(self, part: Think, number: int) -> None:
        self.builder.thinking(part.text, part.opaque, part.pieces)

    def refuse(self, part: Refuse, number: int) -> None:
        self._refusal = part.text  # a stop reason with details, no content block

    def call(self, part: Call, number: int) -> None:
        self.plain(part)
        self.builder.tool_use(
            part.call_id,
            part.name,
            part.argument_text,
            part.pieces,
            finish=not part.cut,
            close=self._truncated,
        )

    def provider_tool(self, part: ProviderTool, number: int) -> None:
        self.builder.web_search(f"srvtoolu_{self._suffix}_{number}", part.query)

    def broken(self, number: int) -> None:
        index = len(self.builder.content)
        data = (
            '{"type": "content_block_delta", "index": '
            f'{index}, "delta": {{"type": "text_delta", "text": "unterminat'
        )
        self.builder.raw(f"event: content_block_delta\ndata: {data}\n\n")

    def end(self, reply: Reply) -> None:
        builder = self.builder
        if reply.ending == "complete":
            if self._refusal is not None:
                builder.finish("refusal", {"type": "refusal", "explanation": self._refusal})
            else:
                builder.finish("tool_use" if builder.calls else "end_turn")
        elif reply.ending == "truncated":
            builder.finish("max_tokens")
        elif reply.ending == "paused":
            builder.finish("pause_turn")
        elif reply.ending == "error":
            builder.error("overloaded_error", "Overloaded")
        elif reply.ending == "failed":
            builder.error("api_error", reply.error_message)
        # "open": no terminal event at all.


def render(reply: Reply) -> MessageBuilder:
    """A neutral reply as the Anthropic Messages API streams it."""
    stream = _Reply(reply)
    walk(reply, stream)
    return stream.builder


def sse_bytes(event: Frame) -> bytes:
    """One Anthropic event as an SSE frame (`event:` line, `data:` line, blank line)."""
    return AnthropicRenderer().frame(event)


class AnthropicRenderer(StreamFlagRenderer):
    """The Anthropic side of the lab and of `lockgate serve --provider anthropic`."""

    provider = "anthropic"
    path = PATH

    def base_url(self, origin: str) -> str:
        return origin  # the SDK takes the host root and appends /v1/messages

    def events(self, reply: Reply) -> list[Frame]:
        return list(render(reply).events)

    def frame(self, event: Frame) -> bytes:
        return typed_sse_frame(event)

    def endless_event(self, kind: Literal["text", "unknown"]) -> Frame:
        if kind == "text":
            return {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "more "},
            }
        return {"type": "future_event", "note": "unknown events are progress"}

    def completion(self, reply: Reply) -> dict[str, Any]:
        """The `Message` the stream builds, no more: a `tool_use` the stream cut off keeps
        `input: {}` beside `stop_reason: "max_tokens"` (its `input` must be an object, and
        the cut JSON is none; the SDK's stream helper reads the cut JSON leniently, a
        partial parse, so the whole answer never states more than the stream)."""
        return render(reply).message()

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        return anthropic_error_body(error)

    def reset_headers(self, seconds: float) -> dict[str, str]:
        return anthropic_reset_headers(seconds)

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        """The result for `call_id`, only if it is in the user message right after the
        assistant message with that tool_use, and that message's tool_result blocks all
        come first."""
        results = leading_results(
            request,
            lambda message: _has_tool_use(message, call_id),
            lambda block: block.get("type") == "tool_result",
        )
        for block in results:
            if block.get("tool_use_id") == call_id:
                return _result_text(block.get("content"))
        return None


def _has_tool_use(message: Mapping[str, Any], call_id: str) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        block.get("type") == "tool_use" and block.get("id") == call_id for block in content
    )


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


RENDERER = AnthropicRenderer()
