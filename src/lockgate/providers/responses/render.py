"""The Responses protocol in the lab: replies rendered as the live API streams them, the
non-streaming response object, OpenAI error bodies, and the scenarios only Responses has
(its output snapshot, response identity, background mode, reasoning items, native
continuation, provider-executed items, and the shapes a client other than lockgate may run:
custom tool calls, namespaced calls, client-executed `shell_call` items; `compaction` items).

`ResponseBuilder` authors realistic streams: the output items `render_items` streams
(sequence numbers, item ids, content parts, argument fragments and per-item `.done` events)
inside the response's lifecycle events, and complete `response` objects (every field the
SDK's types require).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ...scripted.renderer import Frame, StreamFlagRenderer, typed_sse_frame, walk
from ...scripted.reply import (
    Call,
    Compaction,
    CustomCall,
    OpeningError,
    ProviderTool,
    Refuse,
    Reply,
    ReplyUsage,
    Say,
    ShellCall,
    Think,
)
from ...scripted.script import Faults, Turn
from ..openai.render import openai_error_body, openai_reset_headers
from . import lab_websocket
from .render_items import STREAMED_CALLS, OutputItemEvents
from .render_items import reasoning_item as reasoning_item  # re-exported

CREATED_AT = 1_760_000_000


def _usage_object(usage: ReplyUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


class ResponseBuilder(OutputItemEvents):
    """Authors a realistic Responses event stream: its output items (`OutputItemEvents`)
    between the response's opening and terminal events."""

    def __init__(self, response_id: str, model: str = "gpt-4.1-mini") -> None:
        super().__init__()
        self.response_id = response_id
        self.model = model

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        """A complete response object (the fields the SDK's `Response` type requires)."""
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": CREATED_AT,
            "model": self.model,
            "status": status,
            "output": list(self.output) if status != "in_progress" else [],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "temperature": 1.0,
            "top_p": 1.0,
            "usage": None,
            **extra,
        }

    def created(self, response_id: str | None = None) -> ResponseBuilder:
        response = self.response("in_progress")
        if response_id is not None:
            response["id"] = response_id
        self._emit({"type": "response.created", "response": response})
        return self._emit(
            {"type": "response.in_progress", "response": self.response("in_progress")}
        )

    def queued(self) -> ResponseBuilder:
        """Background mode: `response.queued`, then `response.in_progress`, no `created`."""
        self._emit({"type": "response.queued", "response": self.response("queued")})
        return self._emit(
            {"type": "response.in_progress", "response": self.response("in_progress")}
        )

    def completed(
        self,
        output: list[dict[str, Any]] | None = None,
        response_id: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> ResponseBuilder:
        response = self.response("completed", usage=usage or _usage_object(ReplyUsage()))
        if output is not None:
            response["output"] = output
        if response_id is not None:
            response["id"] = response_id
        return self._emit({"type": "response.completed", "response": response})

    def incomplete(
        self, reason: str = "max_output_tokens", usage: dict[str, Any] | None = None
    ) -> ResponseBuilder:
        response = self.response("incomplete", incomplete_details={"reason": reason}, usage=usage)
        return self._emit({"type": "response.incomplete", "response": response})

    def failed(self, code: str, message: str) -> ResponseBuilder:
        response = self.response("failed", error={"code": code, "message": message})
        return self._emit({"type": "response.failed", "response": response})

    def error(self, code: str, message: str, *, nested: bool = False) -> ResponseBuilder:
        if nested:
            body: dict[str, Any] = {
                "error": {"type": "server_error", "code": code, "message": message, "param": None}
            }
        else:
            body = {"code": code, "message": message, "param": None}
        return self._emit({"type": "error", **body})

    def raw(self, event: dict[str, Any]) -> ResponseBuilder:
        return self._emit(dict(event))

    def turn(self, faults: Faults | None = None, **options: Any) -> Turn:
        return Turn(events=tuple(self.events), faults=faults or Faults(), **options)


class _Reply:
    """A neutral reply, part by part, as the Responses API streams it (`walk`)."""

    def __init__(self, reply: Reply) -> None:
        self.builder = ResponseBuilder(reply.response_id, reply.model).created()
        self._suffix = reply.response_id.removeprefix("resp_")
        # A cut call's item, as the whole response states it: the arguments (a custom call's
        # input) the stream sent before the cut, `status: "incomplete"`.
        self.cut_items: list[dict[str, Any]] = []

    def say(self, part: Say, number: int) -> None:
        self.builder.text(f"msg_{self._suffix}_{number}", part.text, part.pieces)

    def refuse(self, part: Refuse, number: int) -> None:
        self.builder.refusal(f"msg_{self._suffix}_{number}", part.text)

    def think(self, part: Think, number: int) -> None:
        item = reasoning_item(f"rs_{self._suffix}_{number}", part.text, part.opaque)
        self.builder.reasoning(item, part.pieces)

    def call(self, part: Call, number: int) -> None:
        item_id = f"fc_{self._suffix}_{number}"
        self._call(item_id, "function_call", part, part.argument_text, part.sent_argument_text)

    def custom_call(self, part: CustomCall, number: int) -> None:
        item_id = f"ctc_{self._suffix}_{number}"
        self._call(item_id, "custom_tool_call", part, part.input, part.sent_input)

    def _call(self, item_id: str, kind: str, part: Call | CustomCall, text: str, sent: str) -> None:
        """A call item of `kind` (`STREAMED_CALLS`), its text streamed; a cut one's item
        also kept as the whole response states it (`sent`: the text sent before the cut)."""
        if part.cut:
            item = {"id": item_id, "type": kind, "call_id": part.call_id, "name": part.name}
            if part.namespace:
                item["namespace"] = part.namespace
            field = STREAMED_CALLS[kind][0]
            self.cut_items.append({**item, field: sent, "status": "incomplete"})
        self.builder.streamed_call(
            kind,
            item_id,
            part.call_id,
            part.name,
            text,
            part.pieces,
            not part.cut,
            "completed",
            part.namespace or None,
        )

    def shell_call(self, part: ShellCall, number: int) -> None:
        self.builder.shell_call(f"sh_{self._suffix}_{number}", part.call_id, list(part.commands))

    def compaction(self, part: Compaction, number: int) -> None:
        self.builder.compaction(f"cmp_{self._suffix}_{number}", part.opaque)

    def provider_tool(self, part: ProviderTool, number: int) -> None:
        self.builder.web_search(f"ws_{self._suffix}_{number}", part.query)

    def broken(self, number: int) -> None:
        broken = '{"type": "response.output_text.delta", "item_id": "msg_x", "delta": "unterminat'
        self.builder.raw({"raw": f"event: response.output_text.delta\ndata: {broken}\n\n"})

    def end(self, reply: Reply) -> None:
        usage = _usage_object(reply.usage) if reply.usage is not None else None
        if reply.ending == "complete":
            self.builder.completed(usage=usage)
        elif reply.ending == "truncated":
            self.builder.incomplete("max_output_tokens", usage)
        elif reply.ending == "error":
            self.builder.error(reply.error_code, reply.error_message, nested=True)
        elif reply.ending == "failed":
            self.builder.failed(reply.error_code, reply.error_message)
        # "paused" has no Responses form; "open" sends no terminal event.


def _rendered(reply: Reply) -> _Reply:
    stream = _Reply(reply)
    walk(reply, stream)
    return stream


def render(reply: Reply) -> ResponseBuilder:
    """A neutral reply as the Responses API streams it."""
    return _rendered(reply).builder


class ResponsesRenderer(StreamFlagRenderer):
    """The Responses side of the lab and of `lockgate serve --provider responses`."""

    provider = "responses"
    path = "/v1/responses"

    def base_url(self, origin: str) -> str:
        return f"{origin}/v1"

    def events(self, reply: Reply) -> list[Frame]:
        return list(render(reply).events)

    def frame(self, event: Frame) -> bytes:
        return typed_sse_frame(event)

    def endless_event(self, kind: Literal["text", "unknown"]) -> Frame:
        if kind == "text":
            return {
                "type": "response.output_text.delta",
                "item_id": "msg_endless",
                "delta": "more ",
            }
        return {"type": "response.future_event", "note": "unknown events are progress"}

    def completion(self, reply: Reply) -> dict[str, Any]:
        """The response object the stream ends with, holding what the stream sent: a call
        the stream cut is in its output as sent (arguments cut, not valid JSON, or a custom
        call's input cut; `status: "incomplete"`), as the API answers a response cut by
        `max_output_tokens`."""
        stream = _rendered(reply)
        builder = stream.builder
        terminal = builder.events[-1] if builder.events else {}
        response = terminal.get("response")
        if not isinstance(response, dict):
            response = builder.response(
                "failed", error={"code": reply.error_code, "message": reply.error_message}
            )
        return {**response, "output": [*response["output"], *stream.cut_items]}

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        return openai_error_body(error)

    def reset_headers(self, seconds: float) -> dict[str, str]:
        return openai_reset_headers(seconds)

    def websocket_request(self, message: object) -> dict[str, Any] | None:
        return lab_websocket.request_of(message)

    def websocket_error(
        self, status: int, body: Mapping[str, Any], headers: Mapping[str, str]
    ) -> dict[str, Any]:
        return lab_websocket.wrapped_error(status, body, headers)

    def ends_response(self, message: bytes) -> bool:
        return lab_websocket.ends_response(message)

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        items = list(request.get("input", []))
        for index, item in enumerate(items):
            if item.get("type") == "function_call" and item.get("call_id") == call_id:
                following = items[index + 1] if index + 1 < len(items) else {}
                if (
                    following.get("type") == "function_call_output"
                    and following.get("call_id") == call_id
                ):
                    return str(following.get("output", ""))
        return None


def sse_bytes(event: Frame) -> bytes:
    """One Responses event as an SSE frame (`event:` line, `data:` line, blank line)."""
    return ResponsesRenderer().frame(event)


RENDERER = ResponsesRenderer()
