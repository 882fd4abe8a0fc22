"""The Responses side of the gating engine (`lockgate.proxy`): the function tools of a
native `POST /responses` body, the output items that begin an action, and the stream error
the `openai` SDK raises on.

- **Tools**: what a call may name, declared in the request's `tools` and in every
  `additional_tools` input item (Codex declares its tools there): flat function tools
  (`{"type": "function", "name", "description", "parameters"}`), custom (free-form) tools
  (`{"type": "custom", "name", "format"}`: a call's input must be a sentence of the
  declared `lark` or `regex` grammar, checked with llguidance as the provider constrains it
  (`grammar.py`); `{"type": "text"}` or none: any text), both also grouped under a
  `namespace` (`{"type": "namespace", "name", "tools": [...]}`: a call names the group and
  the tool), and the built-in tools a client
  executes itself (`shell`, `local_shell`, `apply_patch`, `computer_use_preview`,
  `computer`: their `shell_call`, … items are calls, valid only when the request declared
  that tool). Other built-in tools (`web_search`, `file_search`, `mcp`, …) are the
  provider's, and their items, like `compaction` items, are provider output, never calls.
  The decoder reads all of these (`ResponsesDecoder(client_items=True)`); lockgate's own
  loop does not, and refuses them.
- **Held from**: every event but the previews and parts of messages and reasoning
  (`_PREVIEW`) and the `response.output_item.added` / `.done` of a `message` or `reasoning`
  item: a function call, its arguments and `.done` events, a provider-executed tool, an item
  asking the client for an action (`computer_call`), and any type the gateway does not know
  hold the stream from there on. The event name says it without parsing (data-only
  gateways' frames are parsed for their `type`); holding early only delays.
- **The error**: two events, for the clients read different ones. First `event: error`
  with the nested form `{"type": "error", "error": {"type", "code", "message"}}`: the
  Python SDK raises `APIError` on a data object with a truthy `error` key and reads no
  further (the flat form and `response.failed` it only yields as events); then
  `response.failed` whose response's `error` holds the same `code` and `message`: Codex
  ignores every `error` event (it reports "stream closed before response.completed") and
  shows, and retries, a `response.failed` (tried with Codex 0.171, `interop/agents/frames.py`).
  Their `sequence_number`s follow the last event forwarded, as the stream would have
  numbered them. `type` is `server_error` when a new request may succeed (lockgate's own
  decoder then reads it as transient), `lockgate_refused` otherwise; `code` names the
  failure (`lockgate_<kind>`).
- **A whole response** (no `stream`) is judged as the stream `response.created`, an
  `response.output_item.added` and `.done` per output item at its place in `output` (a
  call's arguments whole), and the terminal its `status` names with the response as the
  snapshot; a refused one becomes `{"error": {…}}` (the stream error's object) as a 502
  body.
- **Keep-alives**: an SSE comment.
- **The WebSocket mode** (`websocket.py`, the proxy's relay): a refusal is one wrapped
  `error` message with a 5xx `status`, then the socket closes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...conversation import ToolSpec
from ...events import CALL_CUSTOM
from ...gateway import (
    ProtocolTarget,
    Refusal,
    body_model,
    declared_tool,
    event_object,
    sse_frame,
    suffix_target,
)
from ...sse import ServerSentEvent
from ..decoding import compact_json
from ..openai.errors import openai_error_body
from .decoder import CLIENT_BUILTIN_TOOLS, ResponsesDecoder
from .websocket import WIRE as WEBSOCKET_WIRE

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


class ResponsesGateway:
    """The OpenAI Responses gateway."""

    path_endings = ("/responses",)
    # The WebSocket mode's refusal (`websocket.py`; the proxy's relay).
    websocket = WEBSOCKET_WIRE

    def target(self, method: str, path: str, query: Mapping[str, str]) -> ProtocolTarget | None:
        return suffix_target(method, path, self.path_endings)

    def wants_stream(self, request: Mapping[str, Any], target: ProtocolTarget) -> bool:
        return request.get("stream") is True

    key_header = "authorization"

    # Under any base, like Chat: a model request, its token count, its compaction.
    keyed_paths = re.compile(r"/responses(?:/input_tokens|/compact)?$")

    def ungateable(self, method: str, path: str, query: Mapping[str, Sequence[str]]) -> str | None:
        """Resuming a response stream (`GET …/responses/{id}?stream=true`, `starting_after`
        or not): its events may carry calls, and the proxy never saw the request that
        named their tools."""
        if method.upper() != "GET":
            return None
        segments = path.rstrip("/").split("/")
        if len(segments) < 3 or segments[-2] != "responses" or not segments[-1]:
            return None
        values = query.get("stream", ())
        if not any(value.strip().lower() not in ("", "0", "false") for value in values):
            return None
        return (
            "resuming a response stream (GET …/responses/{id}?stream=true) cannot be "
            "gated: the proxy never saw the request that named its tools; stream the "
            "response from its POST instead"
        )

    def claims(self, path: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        return True  # OpenAI's form is the default for what no other protocol claims

    def client_error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        return openai_error_body(status, message, param)

    def request_problem(self, request: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None

    def with_model(
        self, path: str, request: Mapping[str, Any], model: str
    ) -> tuple[str, dict[str, Any]]:
        return path, {**request, "model": model}

    def request_model(self, path: str, request: Mapping[str, Any]) -> str | None:
        return body_model(request)

    def tools(
        self, request: Mapping[str, Any], *, validate_schemas: bool = False
    ) -> tuple[ToolSpec, ...]:
        found: list[ToolSpec] = []
        for tool, namespace in _declarations(request):
            spec = _declared(tool, namespace, validate_schemas)
            if spec is not None:
                found.append(spec)
        return tuple(found)

    def new_decoder(self) -> ResponsesDecoder:
        return ResponsesDecoder(client_items=True)

    def begins_hold(self, event: ServerSentEvent) -> bool:
        name = event.event
        if name is None:  # a data-only gateway: the type is in the data
            payload = event_object(event)
            if payload is None:
                return True
            kind = payload.get("type")
            name = kind if type(kind) is str else ""
        elif name in _PREVIEW:
            return False
        elif name not in _ITEM_EVENTS:
            return True
        else:
            payload = event_object(event)
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
            # Every item, at its place in the list the client reads, added and done: the
            # decoder holds the snapshot to exactly the items that were added (a call's
            # arguments whole; a built-in tool's item is a call once done).
            stated = {"output_index": place, "item": item}
            frames.append(_frame("response.output_item.added", stated))
            frames.append(_frame("response.output_item.done", stated))
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

    def keepalive_event(self) -> ServerSentEvent | None:
        return None  # the framing's own

    def refusal_frame(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        return b"".join(sse_frame(event) for event in self.refusal_events(refusal, last))

    def refusal_events(
        self, refusal: Refusal, last: ServerSentEvent | None
    ) -> list[ServerSentEvent]:
        error = _error(refusal)
        failed = {
            "id": _response_id(last) or "resp_lockgate_refused",
            "object": "response",
            "status": "failed",
            "error": {"code": error["code"], "message": error["message"]},
            "output": [],
        }
        first: dict[str, Any] = {"error": error}
        then: dict[str, Any] = {"response": failed}
        number = _sequence_number(last)
        if number is not None:
            first["sequence_number"] = number + 1
            then["sequence_number"] = number + 2
        return [_event("error", first), _event("response.failed", then)]


def _error(refusal: Refusal) -> dict[str, Any]:
    return {
        "type": "server_error" if refusal.transient else "lockgate_refused",
        "code": f"lockgate_{refusal.kind}",
        "message": refusal.message,
        "param": None,
    }


def _event(name: str, payload: Mapping[str, Any]) -> ServerSentEvent:
    """One event: its name as the `event:` line and as the data's `type`, first."""
    data = compact_json({"type": name, **payload}).encode("utf-8", "backslashreplace")
    return ServerSentEvent(name, data)


def _frame(name: str, payload: Mapping[str, Any]) -> bytes:
    return sse_frame(_event(name, payload))


def _response_id(event: ServerSentEvent | None) -> str | None:
    """The response's id, where the last event forwarded states it (`response.*`)."""
    payload = None if event is None else event_object(event)
    response = None if payload is None else payload.get("response")
    found = response.get("id") if type(response) is dict else None
    return found if type(found) is str and found else None


def _sequence_number(event: ServerSentEvent | None) -> int | None:
    if event is None:
        return None
    payload = event_object(event)
    number = None if payload is None else payload.get("sequence_number")
    return number if type(number) is int and number >= 0 else None


def _declarations(request: Mapping[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Every tool the request declares, with the namespace it is declared in ("": none):
    the `tools` list's and each `additional_tools` input item's, namespace groups opened."""
    lists: list[object] = [request.get("tools")]
    items = request.get("input")
    if isinstance(items, list):
        lists.extend(
            item.get("tools")
            for item in items
            if isinstance(item, dict) and item.get("type") == "additional_tools"
        )
    found: list[tuple[dict[str, Any], str]] = []
    for declared in lists:
        if not isinstance(declared, list):
            continue
        for tool in declared:
            if not isinstance(tool, dict):
                continue
            if tool.get("type") != "namespace":
                found.append((tool, ""))
                continue
            name, members = tool.get("name"), tool.get("tools")
            if isinstance(name, str) and name and isinstance(members, list):
                found.extend((member, name) for member in members if isinstance(member, dict))
    return found


def _declared(tool: dict[str, Any], namespace: str, validate_schemas: bool) -> ToolSpec | None:
    """The `ToolSpec` of one declared tool; None for a tool the provider runs itself."""
    kind = tool.get("type")
    if kind == "function":
        return declared_tool(
            tool.get("name"),
            tool.get("description"),
            tool.get("parameters"),
            validate_schemas=validate_schemas,
            namespace=namespace,
        )
    if kind == "custom":
        name, description = tool.get("name"), tool.get("description")
        return declared_tool(
            name,
            description,
            None,
            validate_schemas=validate_schemas,
            namespace=namespace,
            form=CALL_CUSTOM,
            input_format_declared=tool.get("format"),
        )
    item = CLIENT_BUILTIN_TOOLS.get(kind) if isinstance(kind, str) else None
    if kind == "tool_search" and tool.get("execution") != "client":
        item = None  # the provider searches: its items are provider output
    if item is not None and not namespace:
        return declared_tool(item, "", None, validate_schemas=False, form=item)
    return None


GATEWAY = ResponsesGateway()
