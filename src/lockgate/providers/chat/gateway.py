"""The Chat Completions side of the gating engine (`lockgate.proxy`): the function tools of
a native `POST /chat/completions` body, and the stream error the `openai` SDK raises on.

- **Tools**: `{"type": "function", "function": {"name", "description", "parameters"}}`
  (absent `parameters`: a tool without parameters).
- **Held from**: tool-call fragments show in the decoder's events; besides them, the
  engine holds from the first non-null `finish_reason` (only the end marker confirms a
  finish, so a client never sees the finish of a refused response); a key spelled with
  JSON escapes is found by parsing.
- **Refused**: a legacy `function_call` (in a delta, or a whole response's message): the
  decoder does not read it and the request's `functions` are not checked, so no client may
  receive it (`unsupported_output`).
- **The error**: a `data: {"error": {…}}` chunk, and no `[DONE]`: the SDK raises
  `APIError` on a data object with a truthy `error` key (and `[DONE]` would end its
  iteration as a success). `type` is `server_error` when a new request may succeed
  (lockgate's own decoder then reads it as transient), `lockgate_refused` otherwise;
  `code` names the failure (`lockgate_<kind>`).
- **A whole response** (no `stream`) is judged as one chunk (each choice's `message` as
  its `delta`; each choice and each call indexed by its place in its list, as a client
  reads them, whatever `index` it states) with the choice's finish, a usage chunk, and
  `[DONE]`; a refused one becomes the same error object as the stream's, as a 502 body.
- **Keep-alives**: an SSE comment.
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
from ..decoding import compact_json
from ..openai.errors import openai_error_body
from .decoder import ChatDecoder

__all__ = ["GATEWAY", "ChatGateway"]

KEEPALIVE = b": lockgate keep-alive\n\n"
# A `finish_reason` that is not null. JSON text never holds `"finish_reason"` with both its
# quotes unescaped inside a string, so only the key itself matches.
_FINISH = re.compile(rb'"finish_reason"\s*:(?!\s*null)')
_LEGACY = b'"function_call"'
_ESCAPE = b"\\u"  # a key may be spelled with escapes: then the data is parsed


def _choices(payload: object) -> list[dict[str, Any]]:
    choices = payload.get("choices") if type(payload) is dict else None
    if type(choices) is not list:
        return []
    return [choice for choice in choices if type(choice) is dict]


class ChatGateway:
    """The OpenAI Chat Completions gateway."""

    path_endings = ("/chat/completions",)

    def target(self, method: str, path: str, query: Mapping[str, str]) -> ProtocolTarget | None:
        return suffix_target(method, path, self.path_endings)

    def wants_stream(self, request: Mapping[str, Any], target: ProtocolTarget) -> bool:
        return request.get("stream") is True

    key_header = "authorization"

    # Under any base (`/v1`, Azure's `/openai/deployments/{d}`, a gateway's own): the
    # OpenAI-compatible servers mount it anywhere.
    keyed_paths = re.compile(r"/chat/completions$")

    def ungateable(self, method: str, path: str, query: Mapping[str, Sequence[str]]) -> str | None:
        return None

    def claims(self, path: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        return True  # OpenAI's form is the default for what no other protocol claims

    def client_error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        return openai_error_body(status, message, param)

    def request_problem(self, request: Mapping[str, Any]) -> tuple[str, str | None] | None:
        count = request.get("n")
        if isinstance(count, int | float) and not isinstance(count, bool) and count > 1:
            return (
                f"n = {count:g} asks for {count:g} choices; the gate judges one choice per "
                "response: send n = 1 or leave n out",
                "n",
            )
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
        return declared_tools(
            request.get("tools"), _function_tool, validate_schemas=validate_schemas
        )

    def new_decoder(self) -> ChatDecoder:
        return ChatDecoder()

    def begins_hold(self, event: ServerSentEvent) -> bool:
        data = event.data
        if _FINISH.search(data) is not None:
            return True  # a finish: only the end marker may confirm it
        if _ESCAPE not in data:
            return False  # the fast path: no key can hide behind an escape
        return any(
            choice.get("finish_reason") is not None for choice in _choices(event_object(event))
        )

    def unreadable_action(self, event: ServerSentEvent) -> str | None:
        data = event.data
        if _LEGACY not in data and _ESCAPE not in data:
            return None
        for choice in _choices(event_object(event)):
            for field in ("delta", "message"):
                part = choice.get(field)
                if type(part) is dict and part.get("function_call") is not None:
                    return (
                        "a legacy `function_call` (the functions API): lockgate cannot "
                        "validate it against the request's tools, so the response is refused"
                    )
        return None

    def is_finish(self, event: ServerSentEvent) -> bool:
        return self.begins_hold(event)

    def whole_stream(self, response: Mapping[str, Any]) -> bytes:
        chunk: dict[str, Any] = {
            key: value for key, value in response.items() if key not in ("choices", "usage")
        }
        chunk["object"] = "chat.completion.chunk"
        choices = response.get("choices")
        if isinstance(choices, list):
            chunk["choices"] = [
                _as_chunk_choice(choice, place) for place, choice in enumerate(choices)
            ]
        elif choices is not None:
            chunk["choices"] = choices  # the decoder refuses what is not a list
        frames = [_frame(chunk)]
        usage = response.get("usage")
        if usage is not None:
            frames.append(_frame({"id": response.get("id"), "choices": [], "usage": usage}))
        frames.append(b"data: [DONE]\n\n")
        return b"".join(frames)

    def error_body(self, refusal: Refusal) -> bytes:
        return compact_json(_error(refusal)).encode("utf-8", "backslashreplace")

    def skipped(self, event: ServerSentEvent) -> bool:
        return False

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
        return [ServerSentEvent(None, _frame_data(_error(refusal)))]


def _error(refusal: Refusal) -> dict[str, Any]:
    error = {
        "message": refusal.message,
        "type": "server_error" if refusal.transient else "lockgate_refused",
        "code": f"lockgate_{refusal.kind}",
        "param": None,
    }
    return {"error": error}


def _frame_data(payload: Mapping[str, Any]) -> bytes:
    return compact_json(dict(payload)).encode("utf-8", "backslashreplace")


def _frame(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + _frame_data(payload) + b"\n\n"


def _as_chunk_choice(choice: object, place: int) -> object:
    """A whole response's choice as the one chunk that streams it: its `message` as the
    `delta`. A client reads `choices` and `message.tool_calls` as lists, entry by entry, so
    each entry's `index` is its place in its list, whatever `index` the entry states: a
    stream's rules would merge two entries that name one index (a choice into another, a
    call's fragments into one call) or order calls by the index, and the client would read
    entries the gate never judged."""
    if not isinstance(choice, dict):
        return choice  # the decoder refuses it
    converted = {key: value for key, value in choice.items() if key != "message"}
    converted["index"] = place
    message = choice.get("message")
    if isinstance(message, dict):
        delta = dict(message)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [
                {**call, "index": number} if isinstance(call, dict) else call
                for number, call in enumerate(calls)
            ]
        converted["delta"] = delta
    elif message is not None:
        converted["delta"] = message
    return converted


def _function_tool(tool: dict[str, Any]) -> tuple[object, object, object] | None:
    """A function tool's (name, description, parameters), from its nested `function`."""
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict):
        return None
    return function.get("name"), function.get("description"), function.get("parameters")


GATEWAY = ChatGateway()
