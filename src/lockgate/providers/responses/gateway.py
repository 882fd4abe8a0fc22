"""The Responses side of the gating engine (`lockgate.proxy`): the function tools of a
native `POST /responses` body, the output items that begin an action, and the stream error
the `openai` SDK raises on.

- **Tools**: the flat function tools (`{"type": "function", "name", "description",
  "parameters"}`); built-in tools (`web_search`, `file_search`, `mcp`, …) are the
  provider's, and their items are provider output, never calls.
- **Held from**: every event but the previews and parts of messages and reasoning
  (`_PREVIEW`) and the `response.output_item.added` / `.done` of a `message` or `reasoning`
  item: a function call, its arguments and `.done` events, a provider-executed tool, an item
  asking the client for an action (`computer_call`), and any type the gateway does not know
  hold the stream from there on. The event name says it without parsing (data-only
  gateways' frames are parsed for their `type`); holding early only delays.
- **The error**: `event: error` with the nested form `{"type": "error", "error": {"type",
  "code", "message"}}`: the SDK raises `APIError` on a data object with a truthy `error`
  key (the flat form and `response.failed` are only yielded as events). Its
  `sequence_number` is the one after the last event forwarded, as the stream would have
  numbered it. `type` is `server_error` when a new request may succeed (lockgate's own
  decoder then reads it as transient), `lockgate_refused` otherwise; `code` names the
  failure (`lockgate_<kind>`).
- **A whole response** (no `stream`) is judged as the stream `response.created`, one
  `response.output_item.added` per output item at its place in `output` (a call's
  arguments whole), and the terminal its `status` names with the response as the
  snapshot; a refused one becomes `{"error": {…}}` (the stream error's object) as a 502
  body.
- **Keep-alives**: an SSE comment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...conversation import ToolSpec
from ...gateway import Refusal, declared_tools
from ...jsonlimits import parse_event
from ...sse import ServerSentEvent
from ..decoding import compact_json
from .decoder import ResponsesDecoder

__all__ = ["GATEWAY", "ResponsesGateway"]

_ITEM_EVENTS = frozenset({"response.output_item.added", "response.output_item.done"})
# The events forwarded at once (previews, the start, message and reasoning parts): every
# other event type holds the stream, known or not — a function call's arguments or `.done`
# events, a provider tool's progress, a type added to the API later.
_PREVIEW = frozenset(
    {
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.content_part.added",
        "response.content_part.done",
        "response.refusal.delta",
        "response.refusal.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
    }
)
_NOT_ACTIONS = frozenset({"message", "reasoning"})
KEEPALIVE = b": lockgate keep-alive\n\n"
# A whole response's status, and the terminal event that states it.
_TERMINALS = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}


def _payload(event: ServerSentEvent) -> dict[str, Any] | None:
    try:
        payload = parse_event(event.data)
    except ValueError:
        return None
    return payload if type(payload) is dict else None


class ResponsesGateway:
    """The OpenAI Responses gateway."""

    def wants_stream(self, request: Mapping[str, Any]) -> bool:
        return request.get("stream") is True

    def tools(
        self, request: Mapping[str, Any], *, validate_schemas: bool = False
    ) -> tuple[ToolSpec, ...]:
        return declared_tools(request, _function_tool, validate_schemas=validate_schemas)

    def new_decoder(self) -> ResponsesDecoder:
        return ResponsesDecoder()

    def begins_hold(self, event: ServerSentEvent) -> bool:
        name = event.event
        if name is None:  # a data-only gateway: the type is in the data
            payload = _payload(event)
            if payload is None:
                return True
            kind = payload.get("type")
            name = kind if type(kind) is str else ""
        elif name in _PREVIEW:
            return False
        elif name not in _ITEM_EVENTS:
            return True
        else:
            payload = _payload(event)
        if name in _PREVIEW:
            return False
        if name not in _ITEM_EVENTS or payload is None:
            return True
        item = payload.get("item")
        return type(item) is not dict or item.get("type") not in _NOT_ACTIONS

    def unreadable_action(self, event: ServerSentEvent) -> str | None:
        return None  # an item the decoder cannot replay fails at the terminal's snapshot

    def is_finish(self, event: ServerSentEvent) -> bool:
        return False  # the terminal states the finish, and the decoder reports it

    def whole_stream(self, response: Mapping[str, Any]) -> bytes:
        output = response.get("output")
        items = output if isinstance(output, list) else []
        start = {**response, "output": [], "status": "in_progress"}
        frames = [_frame("response.created", {"response": start})]
        for place, item in enumerate(items):
            # Every item, at its place in the list the client reads: the decoder holds the
            # snapshot to exactly the items that were added (a call's arguments whole).
            added = {"output_index": place, "item": item}
            frames.append(_frame("response.output_item.added", added))
        status = response.get("status")
        terminal = _TERMINALS.get(status, "response.completed") if type(status) is str else None
        frames.append(_frame(terminal or "response.completed", {"response": response}))
        return b"".join(frames)

    def error_body(self, refusal: Refusal) -> bytes:
        return compact_json({"error": _error(refusal)}).encode("utf-8", "backslashreplace")

    def skipped(self, event: ServerSentEvent) -> bool:
        return event.data == b"[DONE]"  # a gateway's sentinel, never an event here

    def is_keepalive(self, event: ServerSentEvent) -> bool:
        return False

    def keepalive(self) -> bytes:
        return KEEPALIVE

    def refusal_frame(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        body: dict[str, Any] = {"error": _error(refusal)}
        number = _sequence_number(last)
        if number is not None:
            body["sequence_number"] = number + 1
        return _frame("error", body)


def _error(refusal: Refusal) -> dict[str, Any]:
    return {
        "type": "server_error" if refusal.transient else "lockgate_refused",
        "code": f"lockgate_{refusal.kind}",
        "message": refusal.message,
        "param": None,
    }


def _frame(name: str, payload: Mapping[str, Any]) -> bytes:
    """One event: its name as the `event:` line and as the data's `type`, first."""
    data = compact_json({"type": name, **payload}).encode("utf-8", "backslashreplace")
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


def _sequence_number(event: ServerSentEvent | None) -> int | None:
    if event is None:
        return None
    payload = _payload(event)
    number = None if payload is None else payload.get("sequence_number")
    return number if type(number) is int and number >= 0 else None


def _function_tool(tool: dict[str, Any]) -> tuple[object, object, object] | None:
    """A flat function tool's (name, description, parameters); None for a built-in tool."""
    if tool.get("type") != "function":
        return None
    return tool.get("name"), tool.get("description"), tool.get("parameters")


GATEWAY = ResponsesGateway()
