"""The Bedrock ConverseStream protocol in the lab: replies rendered as the live API streams
them, as binary `application/vnd.amazon.eventstream` messages (`lockgate.eventstream`):
`messageStart`, text and reasoning blocks that begin with their first delta (no
`contentBlockStart`, as recorded), `toolUse` blocks with a `contentBlockStart` and their
input as string fragments, `contentBlockStop`, `messageStop` with the stop reason, then
`metadata` with usage and metrics; every payload carries Bedrock's random padding field
`p`. Also the non-streaming `converse` answer, Bedrock's JSON error bodies, and where
Converse wants tool results. The same server answers InvokeModel for Anthropic models
(`/model/{id}/invoke-with-response-stream`, `/model/{id}/invoke`) with `lab_invoke`'s
renderer (`BedrockRenderer.for_path`).

How neutral reply parts render:

- `Say`: a text block; `Think`: a reasoning block (`reasoningContent.text` deltas, then its
  `signature`: the part's opaque value); `Refuse`: Converse has no refusal signal, so a
  refusal is answer text.
- `Call`: a `toolUse` block; a call cut off by the output limit sends about half of its
  input, and its block is closed only when the reply ends `truncated` (`max_tokens`).
- `ProviderTool`: Nova's web grounding, as Bedrock streams it (a `toolUse` of `type:
  "server_tool_use"` and its `toolResult`).
- `Broken`: a message whose JSON payload is cut off (its CRCs are right).
- Endings: `complete` → `tool_use` / `end_turn`, `truncated` → `max_tokens`, `error` → a
  `serviceUnavailableException` message, `failed` → an `internalServerException`, `open` →
  nothing; Converse has no paused responses (`paused` raises).

A native event here is a dict: `{"type": <event type>, …payload}`, `{"exception": <type>,
"message": …}`, or `{"raw": bytes}` sent verbatim (the faults: cut and corrupt messages).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from ...eventstream import MEDIA_TYPE, encode_message
from ...scripted.renderer import Frame, FunctionCallsOnly, leading_results, walk
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
from .codec import stream_path
from .framing import message_headers

if TYPE_CHECKING:
    pass

__all__ = [
    "RENDERER",
    "BedrockRenderer",
    "ConverseBuilder",
    "bedrock_error_body",
    "frame_bytes",
    "render",
]

PATH = stream_path(LAB_MODEL)
DEFAULT_USAGE = ReplyUsage()
_PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

# neutral kind → Bedrock error type (the `x-amzn-errortype` name, also stated as `__type`)
_ERROR_TYPES: dict[str, str] = {
    "auth": "UnrecognizedClientException",
    "quota": "ServiceQuotaExceededException",
    "rate_limit": "ThrottlingException",
    "overloaded": "ServiceUnavailableException",
    "server": "InternalServerException",
    "unavailable": "ServiceUnavailableException",
    "exhausted": "ValidationException",
    "invalid": "ValidationException",
}


def bedrock_error_body(error: OpeningError) -> dict[str, Any]:
    return {"message": error.message, "__type": _ERROR_TYPES.get(error.kind, "ValidationException")}


def _usage(usage: ReplyUsage | None) -> dict[str, Any]:
    if usage is None:
        return {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    fresh = max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens)
    rendered: dict[str, Any] = {
        "inputTokens": fresh,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.input_tokens + usage.output_tokens,
    }
    if usage.cached_input_tokens:
        rendered["cacheReadInputTokens"] = usage.cached_input_tokens
    if usage.cache_write_tokens:
        rendered["cacheWriteInputTokens"] = usage.cache_write_tokens
    return rendered


def frame_bytes(event: Frame) -> bytes:
    """One native event as an event-stream message (`{"raw": …}` verbatim)."""
    if "raw" in event:
        raw = event["raw"]
        return raw if isinstance(raw, bytes) else str(raw).encode("latin-1")
    if "exception" in event:
        payload = json.dumps({"message": event.get("message", "")}).encode()
        return encode_message(message_headers(str(event["exception"]), "exception"), payload)
    name = str(event["type"])
    body = {key: value for key, value in event.items() if key != "type"}
    body["p"] = _PADDING[: 1 + len(name) * 3 % len(_PADDING)]  # Bedrock's random padding
    payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return encode_message(message_headers(name), payload)


class ConverseBuilder:
    """Authors a realistic ConverseStream, block by block, and keeps the final content."""

    def __init__(self, usage: ReplyUsage | None = DEFAULT_USAGE) -> None:
        self.usage = usage
        self.events: list[dict[str, Any]] = []
        self.content: list[dict[str, Any]] = []  # the final content blocks
        self.calls = 0
        self.stop_reason: str | None = None

    def emit(self, event: dict[str, Any]) -> ConverseBuilder:
        self.events.append(event)
        return self

    def start(self) -> ConverseBuilder:
        return self.emit({"type": "messageStart", "role": "assistant"})

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        self.emit({"type": "contentBlockDelta", "contentBlockIndex": index, "delta": delta})

    def _stop(self, index: int) -> ConverseBuilder:
        return self.emit({"type": "contentBlockStop", "contentBlockIndex": index})

    def text(self, text: str, pieces: int = 4) -> ConverseBuilder:
        index = len(self.content)
        self.content.append({"text": text})
        for piece in split(text, pieces) or [""]:
            self._delta(index, {"text": piece})
        return self._stop(index)

    def reasoning(self, text: str, signature: str, pieces: int = 3) -> ConverseBuilder:
        index = len(self.content)
        self.content.append(
            {"reasoningContent": {"reasoningText": {"text": text, "signature": signature}}}
        )
        for piece in split(text, pieces):
            self._delta(index, {"reasoningContent": {"text": piece}})
        self._delta(index, {"reasoningContent": {"signature": signature}})
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
        kind: str | None = None,
    ) -> ConverseBuilder:
        """A toolUse block. `finish=False`: only about half of the input is sent; the block
        is then left open unless `close` (the output limit closes it)."""
        index = len(self.content)
        start: dict[str, Any] = {"toolUseId": call_id, "name": name}
        if kind is not None:
            start["type"] = kind
        self.emit(
            {"type": "contentBlockStart", "contentBlockIndex": index, "start": {"toolUse": start}}
        )
        text = argument_text(arguments)
        for piece in argument_pieces(text, pieces, cut=not finish):
            self._delta(index, {"toolUse": {"input": piece}})
        try:
            value = json.loads(text) if finish else {}
        except ValueError:
            value = {}
        self.content.append(
            {"toolUse": {**start, "input": value if isinstance(value, dict) else {}}}
        )
        if kind is None:
            self.calls += 1
        if finish or close:
            self._stop(index)
        return self

    def grounding(self, tool_id: str, query: str) -> ConverseBuilder:
        """Nova's web grounding, run by the provider: its toolUse, then its toolResult."""
        self.tool_use(tool_id, "nova_grounding", {"query": query}, 2, kind="server_tool_use")
        index = len(self.content)
        result = {"toolUseId": tool_id, "type": "nova_grounding_result", "status": "success"}
        self.emit(
            {
                "type": "contentBlockStart",
                "contentBlockIndex": index,
                "start": {"toolResult": result},
            }
        )
        found = [{"text": f"About {query}: see https://example.com/{'-'.join(query.split())}"}]
        self._delta(index, {"toolResult": found})
        self.content.append({"toolResult": {**result, "content": found}})
        return self._stop(index)

    def finish(self, stop_reason: str, *, metadata: bool = True) -> ConverseBuilder:
        """`messageStop` with the stop reason, then `metadata` (usage, metrics)."""
        self.stop_reason = stop_reason
        self.emit({"type": "messageStop", "stopReason": stop_reason})
        if metadata:
            self.emit(
                {"type": "metadata", "usage": _usage(self.usage), "metrics": {"latencyMs": 412}}
            )
        return self

    def exception(self, kind: str, message: str) -> ConverseBuilder:
        return self.emit({"exception": kind, "message": message})

    def raw(self, data: bytes) -> ConverseBuilder:
        return self.emit({"raw": data})

    def response(self) -> dict[str, Any]:
        """The whole `converse` answer for the same content."""
        return {
            "output": {"message": {"role": "assistant", "content": list(self.content)}},
            "stopReason": self.stop_reason,
            "usage": _usage(self.usage),
            "metrics": {"latencyMs": 412},
        }

    def turn(self, **options: Any) -> Turn:
        return Turn(events=tuple(self.events), **options)


class _Reply(FunctionCallsOnly):
    """A neutral reply, part by part, as ConverseStream streams it (`walk`)."""

    protocol_name = "Bedrock Converse"

    def __init__(self, reply: Reply) -> None:
        self.builder = ConverseBuilder(reply.usage).start()
        self._suffix = reply.response_id.removeprefix("resp_")
        self._truncated = reply.ending == "truncated"

    def say(self, part: Say, number: int) -> None:
        self.builder.text(part.text, part.pieces)

    def think(self, part: Think, number: int) -> None:
        self.builder.reasoning(part.text, part.opaque, part.pieces)

    def refuse(self, part: Refuse, number: int) -> None:
        self.builder.text(part.text)  # Converse has no refusal signal: it is answer text

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
        self.builder.grounding(f"tooluse_{self._suffix}_{number}", part.query)

    def broken(self, number: int) -> None:
        index = len(self.builder.content)
        payload = b'{"contentBlockIndex":%d,"delta":{"text":"unterminat' % index
        self.builder.raw(encode_message(message_headers("contentBlockDelta"), payload))

    def end(self, reply: Reply) -> None:
        builder = self.builder
        if reply.ending == "complete":
            builder.finish("tool_use" if builder.calls else "end_turn")
        elif reply.ending == "truncated":
            builder.finish("max_tokens")
        elif reply.ending == "paused":
            raise ValueError("Bedrock Converse has no paused responses")
        elif reply.ending == "error":
            builder.exception("serviceUnavailableException", "The service is unavailable.")
        elif reply.ending == "failed":
            builder.exception("internalServerException", reply.error_message)
        # "open": no terminal event at all.


def render(reply: Reply) -> ConverseBuilder:
    """A neutral reply as ConverseStream streams it."""
    stream = _Reply(reply)
    walk(reply, stream)
    return stream.builder


class BedrockRenderer:
    """The Bedrock side of the lab and of `lockgate serve --provider bedrock`: Converse
    (`server_render.BedrockServerRenderer` adds the InvokeModel paths)."""

    provider = "bedrock"
    path = PATH
    stream_query = ""
    media_type = MEDIA_TYPE  # the body is binary, not SSE

    def answers(self, path: str) -> bool:
        """ConverseStream and Converse, and InvokeModel (with response stream) for
        Anthropic models (`for_path` gives those their own renderer)."""
        parts = path.split("?", 1)[0].split("/")
        return (
            len(parts) == 4
            and parts[0] == ""
            and parts[1] == "model"
            and bool(unquote(parts[2]))
            and parts[3] in ("converse-stream", "converse", "invoke-with-response-stream", "invoke")
        )

    def is_streaming(self, path: str, body: object) -> bool:
        return path.split("?", 1)[0].endswith("/converse-stream")

    def base_url(self, origin: str) -> str:
        return origin  # clients append /model/{id}/converse-stream themselves

    def events(self, reply: Reply) -> list[Frame]:
        return list(render(reply).events)

    def frame(self, event: Frame) -> bytes:
        return frame_bytes(event)

    def endless_event(self, kind: Literal["text", "unknown"]) -> Frame:
        if kind == "text":
            return {"type": "contentBlockDelta", "contentBlockIndex": 0, "delta": {"text": "more "}}
        return {"type": "futureEvent", "note": "unknown events are progress"}

    def completion(self, reply: Reply) -> dict[str, Any]:
        return render(reply).response()

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        return bedrock_error_body(error)

    def reset_headers(self, seconds: float) -> dict[str, str]:
        return {}  # Bedrock states no rate-limit reset time

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        """The result for `call_id`, only if it is in the user message right after the
        assistant message with that toolUse, among the toolResult blocks that come first."""
        results = leading_results(
            request,
            lambda message: _has_tool_use(message, call_id),
            lambda block: "toolResult" in block,
        )
        for block in results:
            result = block["toolResult"]
            if result.get("toolUseId") == call_id:
                return "".join(
                    str(item.get("text", ""))
                    for item in result.get("content") or []
                    if isinstance(item, dict)
                )
        return None


def _has_tool_use(message: Mapping[str, Any], call_id: str) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict)
        and isinstance(block.get("toolUse"), dict)
        and block["toolUse"].get("toolUseId") == call_id
        for block in content
    )


RENDERER = BedrockRenderer()
