"""Google Gemini request encoding (`POST /v1beta/models/{model}:streamGenerateContent`).

Every request carries the full portable history (Gemini keeps no conversation state):

- `model` is the one field that is not part of the wire body: the transport takes it out
  and puts it in the URL path (`models/{model}`), as the API wants it.
- `systemInstruction {parts: [{text}]}`: the text of every system message, joined by a
  blank line.
- `contents` alternate `user` / `model`; consecutive messages of the same role are merged
  into one (their parts concatenated).
- An assistant message is replayed to the model that made it (`message.native_for(
  producer)`) as its parts in their original order: thought parts, provider-executed parts
  and standalone signature parts unchanged; text as `{text}` parts; calls as
  `{functionCall {name, args[, id]}}` with the parsed arguments object. A signature the
  decoder kept right after a text or call (`{"thoughtSignature": …}` alone) is put back on
  that part, byte for byte: Gemini 3 refuses a function call that comes back without its
  signature ("missing a thought_signature"). For any other producer only its text and its
  calls are sent, without signatures (never valid for another model) and without ids.
- Call ids: a `functionCall.id` is sent only where this producer's server sent one. The id
  lockgate synthesized for a call that had none (`synthesized_call_id(response_id, key)`,
  recognized here from the message's response id and the call's position) stays local:
  sending an id the model never produced would be a claim the server did not make.
- Tool results: all results answering one model turn go in ONE `user` turn, as
  `functionResponse {name, response, id?}` parts first, one per call in the calls' order,
  `response` being `{"result": <observation>}`, or `{"error": <observation>}` when the
  observation starts with `error:` (the loop's words for a call that failed or never ran).
  A user message that follows them is merged after them into that same turn. A result that
  answers no call of the model turn right before it, a second result for one call, or a
  call left without a result is refused (ValueError) before any request is made.
- Tools are `tools: [{functionDeclarations: [{name, description, parametersJsonSchema}]}]`
  (the ToolSpec's JSON Schema as it is; `parameters` would take only an OpenAPI subset).
- `generationConfig.maxOutputTokens` is `max_output_tokens`. With a thinking budget N
  (any positive number: the API's own minimum depends on the model),
  `thinkingConfig {thinkingBudget: N, includeThoughts: true}` is sent, and
  `maxOutputTokens` becomes `N + max_output_tokens`: Gemini counts thinking tokens against
  `maxOutputTokens`, so the answer keeps its own limit on top of the budget.

Known limits: a message lockgate wrote itself (a `--recover` observation's assistant
message) carries no producer, so its calls go back without signatures or ids; Gemini 3 may
refuse it when it is the last model turn of a tool loop.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...conversation import CallPart, Message, NativeItem, RefusalPart, TextPart, ToolCall, ToolSpec
from ...defaults import MAX_OUTPUT_TOKENS
from ..base import CodecOptions
from ..decoding import synthesized_call_id
from ..encoding import ERROR_PREFIX, route_history
from .decoder import SIGNATURE, GeminiDecoder
from .options import GeminiOptions

__all__ = [
    "API_VERSION",
    "GeminiCodec",
    "encode_contents",
    "encode_tool",
    "stream_path",
]

PROVIDER = "gemini"
API_VERSION = "v1beta"  # the documented REST surface, where every field sent here lives
_MODEL_PREFIX = "models/"


def stream_path(model: str) -> str:
    """`/v1beta/models/{model}:streamGenerateContent` (the query `alt=sse` goes beside it).
    A leading `models/` is the resource name's own prefix and is not doubled; anything that
    could leave the path segment (`/`, `?`, `#`, `:`, `..`) is percent-encoded."""
    name = model.removeprefix(_MODEL_PREFIX)
    return f"/{API_VERSION}/models/{urllib.parse.quote(name, safe='')}:streamGenerateContent"


class GeminiCodec:
    """The Gemini request encoder and stream decoder factory."""

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
            type(thinking_budget) is not int or thinking_budget < 1
        ):
            raise ValueError("thinking budget must be a positive whole number of tokens")
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.thinking_budget = thinking_budget

    @classmethod
    def from_options(cls, options: CodecOptions) -> GeminiCodec:
        own = options.own(GeminiOptions)
        return cls(
            options.model,
            max_output_tokens=options.max_output_tokens,
            thinking_budget=own.thinking_budget,
        )

    @property
    def producer(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def max_tokens(self) -> int:
        """What `maxOutputTokens` says: the output limit, plus the thinking budget if any."""
        return self.max_output_tokens + (self.thinking_budget or 0)

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model}
        system = "\n\n".join(m.content for m in history if m.role == "system" and m.content)
        if system:
            request["systemInstruction"] = {"parts": [{"text": system}]}
        request["contents"] = encode_contents(history, self.producer)
        if tools:
            request["tools"] = [{"functionDeclarations": [encode_tool(tool) for tool in tools]}]
        config: dict[str, Any] = {"maxOutputTokens": self.max_tokens}
        if self.thinking_budget is not None:
            config["thinkingConfig"] = {
                "thinkingBudget": self.thinking_budget,
                "includeThoughts": True,
            }
        request["generationConfig"] = config
        return request

    def new_decoder(self) -> GeminiDecoder:
        return GeminiDecoder()


def encode_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "parametersJsonSchema": dict(tool.parameters),
    }


@dataclass(frozen=True, slots=True)
class _SentCall:
    """A call of the model turn being answered: what its functionResponse must name."""

    call_id: str  # lockgate's id (the tool message's tool_call_id)
    name: str
    server_id: str  # the id the server sent, else ""


def _function_call(call: ToolCall, server_id: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": call.name, "args": dict(call.arguments)}
    if server_id:
        function["id"] = server_id
    return {"functionCall": function}


def _server_ids(message: Message) -> dict[str, str]:
    """Each call's id as the server sent it: "" for an id lockgate synthesized."""
    synthesized = (
        {synthesized_call_id(message.response_id, str(k)) for k in range(len(message.tool_calls))}
        if message.response_id
        else set()
    )
    return {call.id: "" if call.id in synthesized else call.id for call in message.tool_calls}


def _model_turn(message: Message, producer: str) -> tuple[list[dict[str, Any]], list[_SentCall]]:
    """The parts of an assistant message, and its calls (what the next results answer)."""
    original = message.native_for(producer)
    if not original:
        text = message.content or message.refusal
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        parts.extend(_function_call(call, "") for call in message.tool_calls)
        sent = [_SentCall(call.id, call.name, "") for call in message.tool_calls]
        return parts, sent
    calls = {call.id: call for call in message.tool_calls}
    server_ids = _server_ids(message)
    replayed: list[dict[str, Any]] = []
    sent = []
    signable = False  # the last replayed part is a text or call a signature may follow
    for part in original:
        if isinstance(part, NativeItem):
            item = dict(part.item)
            if signable and len(item) == 1 and SIGNATURE in item:
                replayed[-1][SIGNATURE] = item[SIGNATURE]  # back on the part it came on
                signable = False
                continue
            replayed.append(item)
            signable = False
        elif isinstance(part, CallPart):
            call = calls.get(part.call_id)
            if call is None:
                raise ValueError(
                    f"assistant output names call {part.call_id!r}, not among its calls"
                )
            server_id = server_ids[call.id]
            replayed.append(_function_call(call, server_id))
            sent.append(_SentCall(call.id, call.name, server_id))
            signable = True
        elif isinstance(part, TextPart | RefusalPart) and part.text:
            replayed.append({"text": part.text})
            signable = True
    return replayed, sent


def _function_response(call: _SentCall, observation: str) -> dict[str, Any]:
    key = "error" if observation.startswith(ERROR_PREFIX) else "result"
    response: dict[str, Any] = {"name": call.name, "response": {key: observation}}
    if call.server_id:
        response["id"] = call.server_id
    return {"functionResponse": response}


class _Contents:
    """Builds the alternating `contents` list."""

    def __init__(self) -> None:
        self.contents: list[dict[str, Any]] = []
        self.open_calls: list[_SentCall] = []  # the calls of the last model turn
        self.results: dict[str, dict[str, Any]] = {}  # their functionResponse parts by id

    def _last(self, role: str) -> list[dict[str, Any]]:
        """The parts of the last content if it has `role`, else of a new one."""
        if not self.contents or self.contents[-1]["role"] != role:
            self.contents.append({"role": role, "parts": []})
        parts: list[dict[str, Any]] = self.contents[-1]["parts"]
        return parts

    def _answer(self) -> None:
        """The results of the open calls, as one user turn in the calls' order (every call
        must have one)."""
        if not self.open_calls:
            return
        missing = [call.call_id for call in self.open_calls if call.call_id not in self.results]
        if missing:
            raise ValueError(f"functionCall {', '.join(missing)} has no result")
        self._last("user").extend(self.results[call.call_id] for call in self.open_calls)
        self.open_calls = []
        self.results = {}

    def model(self, parts: list[dict[str, Any]], calls: list[_SentCall]) -> None:
        if not parts:
            return
        self._answer()
        self._last("model").extend(parts)
        self.open_calls.extend(calls)

    def user(self, text: str) -> None:
        if not text:
            return
        self._answer()
        self._last("user").append({"text": text})

    def tool_result(self, message: Message) -> None:
        call_id = message.tool_call_id or ""
        call = next((c for c in self.open_calls if c.call_id == call_id), None)
        if call is None:
            raise ValueError(
                f"tool result {call_id!r} does not answer a functionCall of the model turn "
                "before it"
            )
        if call_id in self.results:
            raise ValueError(f"a second tool result for {call_id!r}")
        self.results[call_id] = _function_response(call, message.content)

    def finish(self) -> list[dict[str, Any]]:
        self._answer()
        return self.contents


def encode_contents(history: Sequence[Message], producer: str = "") -> list[dict[str, Any]]:
    """Portable history as Gemini `contents` (system messages go to `systemInstruction`)."""
    builder = _Contents()
    route_history(
        history,
        user=builder.user,
        tool_result=builder.tool_result,
        assistant=lambda message: builder.model(*_model_turn(message, producer)),
    )
    return builder.finish()
