"""Chat Completions in the lab: replies rendered as OpenAI streams them (data-only chunks,
`data: [DONE]`), the non-streaming `chat.completion`, OpenAI error bodies, and the quirks of
compatible servers that decide whether a tool runs (`protocols.md` §2a), each as a scenario
on the accept side or the fail-closed side.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from ...scripted.renderer import (
    Frame,
    FunctionCallsOnly,
    StreamFlagRenderer,
    only_function_calls,
    walk,
)
from ...scripted.reply import (
    Call,
    OpeningError,
    ProviderTool,
    Refuse,
    Reply,
    ReplyUsage,
    Say,
    Think,
    argument_pieces,
    split,
)
from ...scripted.script import Turn
from ..openai.render import openai_error_body, openai_reset_headers

CREATED = 1_760_000_000
DONE: Frame = {"raw": "data: [DONE]\n\n"}
DEFAULT_USAGE = ReplyUsage()


def usage_object(usage: ReplyUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


class ChunkBuilder:
    """Authors a Chat Completions stream chunk by chunk, as OpenAI sends it."""

    def __init__(self, response_id: str, model: str = "gpt-4.1-mini") -> None:
        self.response_id = response_id
        self.model = model
        self.events: list[Frame] = []

    def chunk(
        self, delta: Mapping[str, Any] | None = None, finish: str | None = None, **extra: Any
    ) -> ChunkBuilder:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": dict(delta or {}),
            "logprobs": None,
            "finish_reason": finish,
        }
        return self.raw_chunk({"choices": [choice], **extra})

    def raw_chunk(self, body: Mapping[str, Any]) -> ChunkBuilder:
        self.events.append(
            {
                "id": self.response_id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": self.model,
                "system_fingerprint": "fp_lab",
                **body,
            }
        )
        return self

    def start(self, content: str | None = "") -> ChunkBuilder:
        return self.chunk({"role": "assistant", "content": content, "refusal": None})

    def text(self, text: str, pieces: int = 4) -> ChunkBuilder:
        for piece in split(text, pieces):
            self.chunk({"content": piece})
        return self

    def call(
        self,
        index: int,
        call_id: str,
        name: str,
        arguments: str,
        pieces: int = 5,
        *,
        cut: bool = False,
    ) -> ChunkBuilder:
        self.chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        )
        sent = argument_pieces(arguments, pieces, cut=cut)
        for piece in sent:
            self.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        return self

    def finish(
        self, reason: str, usage: ReplyUsage | None = DEFAULT_USAGE, *, done: bool = True
    ) -> ChunkBuilder:
        self.chunk({}, reason)
        if usage is not None:
            self.raw_chunk({"choices": [], "usage": usage_object(usage)})
        return self.done() if done else self

    def done(self) -> ChunkBuilder:
        self.events.append(DONE)
        return self

    def turn(self) -> Turn:
        return Turn(events=tuple(self.events))


class _Reply(FunctionCallsOnly):
    """A neutral reply, part by part, as OpenAI's Chat Completions streams it (`walk`)."""

    protocol_name = "Chat Completions"

    def __init__(self, reply: Reply) -> None:
        self.builder = ChunkBuilder(reply.response_id, reply.model)
        calls_only = reply.calls and not any(isinstance(p, Say) for p in reply.parts)
        self.builder.start(None if calls_only else "")
        self._index = 0

    def say(self, part: Say, number: int) -> None:
        self.builder.text(part.text, part.pieces)

    def think(self, part: Think, number: int) -> None:
        for piece in split(part.text, part.pieces):
            self.builder.chunk({"reasoning_content": piece})

    def refuse(self, part: Refuse, number: int) -> None:
        for piece in split(part.text, 2):
            self.builder.chunk({"refusal": piece})

    def call(self, part: Call, number: int) -> None:
        self.plain(part)
        self.builder.call(
            self._index, part.call_id, part.name, part.argument_text, part.pieces, cut=part.cut
        )
        self._index += 1

    def provider_tool(self, part: ProviderTool, number: int) -> None:
        raise ValueError("Chat Completions has no provider-executed tools")

    def broken(self, number: int) -> None:
        self.builder.events.append(
            {"raw": 'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "un\n\n'}
        )

    def end(self, reply: Reply) -> None:
        if reply.ending == "complete":
            self.builder.finish("tool_calls" if reply.calls else "stop", reply.usage)
        elif reply.ending == "truncated":
            self.builder.finish("length", reply.usage)
        elif reply.ending in ("error", "failed"):
            error = {
                "message": reply.error_message,
                "type": "server_error",
                "param": None,
                "code": reply.error_code,
            }
            self.builder.events.append({"error": error})
        elif reply.ending == "paused":
            raise ValueError("Chat Completions has no paused responses")


def render(reply: Reply) -> list[Frame]:
    """A neutral reply as OpenAI's Chat Completions streams it."""
    stream = _Reply(reply)
    walk(reply, stream)
    return stream.builder.events


class ChatRenderer(StreamFlagRenderer):
    """The Chat Completions side of the lab and of `lockgate serve --provider chat`."""

    provider = "chat"
    path = "/v1/chat/completions"

    def base_url(self, origin: str) -> str:
        return f"{origin}/v1"

    def events(self, reply: Reply) -> list[Frame]:
        return render(reply)

    def frame(self, event: Frame) -> bytes:
        if "raw" in event and len(event) == 1:
            return str(event["raw"]).encode()
        if "sse_event" in event:  # a named event (Groq's `event: error`)
            body = {k: v for k, v in event.items() if k != "sse_event"}
            data = json.dumps(body, separators=(",", ":"))
            return f"event: {event['sse_event']}\ndata: {data}\n\n".encode()
        return f"data: {json.dumps(event, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()

    def endless_event(self, kind: Literal["text", "unknown"]) -> Frame:
        if kind == "text":
            return {
                "id": "chatcmpl-endless",
                "choices": [{"index": 0, "delta": {"content": "more "}}],
            }
        return {"id": "chatcmpl-endless", "object": "chat.completion.chunk", "choices": []}

    def completion(self, reply: Reply) -> dict[str, Any]:
        """What the stream carries, in one `chat.completion`: the parts it sends (up to a
        cut call), a cut call's arguments cut where the stream cuts them (not valid JSON,
        beside `finish_reason: "length"`), as OpenAI answers a request cut by the limit."""
        sent = reply.sent_parts
        only_function_calls(sent, "Chat Completions")
        text = "".join(p.text for p in sent if isinstance(p, Say))
        refusal = "".join(p.text for p in sent if isinstance(p, Refuse))
        calls = [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.sent_argument_text},
            }
            for c in sent
            if isinstance(c, Call)
        ]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text or None,
            "refusal": refusal or None,
        }
        if calls:
            message["tool_calls"] = calls
        finish = {"complete": "tool_calls" if calls else "stop", "truncated": "length"}.get(
            reply.ending, "stop"
        )
        body: dict[str, Any] = {
            "id": reply.response_id,
            "object": "chat.completion",
            "created": CREATED,
            "model": reply.model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
        }
        if reply.usage is not None:
            body["usage"] = usage_object(reply.usage)
        return body

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        return openai_error_body(error)

    def reset_headers(self, seconds: float) -> dict[str, str]:
        return openai_reset_headers(seconds)

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        messages = list(request.get("messages", []))
        for index, message in enumerate(messages):
            calls = message.get("tool_calls") or []
            if message.get("role") != "assistant" or call_id not in [c.get("id") for c in calls]:
                continue
            for following in messages[index + 1 : index + 1 + len(calls)]:
                if following.get("role") == "tool" and following.get("tool_call_id") == call_id:
                    return str(following.get("content", ""))
            return None
        return None


RENDERER = ChatRenderer()
