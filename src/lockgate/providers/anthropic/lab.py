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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from ...errors import FailureKind
from ...lab.protocol import Frame, typed_sse_frame
from ...lab.reply import (
    LAB_MODEL,
    Broken,
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
from ...lab.scenario import (
    EDIT_FIX,
    Expectation,
    LabOptions,
    Observation,
    Scenario,
    answered,
    failure,
    finished,
    own,
    result_of,
    text_turn,
    waited,
)
from ...lab.script import Turn

__all__ = [
    "ANTHROPIC_SCENARIOS",
    "AnthropicLab",
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


def render(reply: Reply) -> MessageBuilder:
    """A neutral reply as the Anthropic Messages API streams it."""
    builder = MessageBuilder(reply.response_id, reply.model, reply.usage).start()
    suffix = reply.response_id.removeprefix("resp_")
    refusal: str | None = None
    for number, part in enumerate(reply.sent_parts, start=1):
        if isinstance(part, Say):
            builder.text(part.text, part.pieces)
        elif isinstance(part, Think):
            builder.thinking(part.text, part.opaque, part.pieces)
        elif isinstance(part, Refuse):
            refusal = part.text  # a stop reason with details, no content block
        elif isinstance(part, Call):
            builder.tool_use(
                part.call_id,
                part.name,
                part.argument_text,
                part.pieces,
                finish=not part.cut,
                close=reply.ending == "truncated",
            )
        elif isinstance(part, ProviderTool):
            builder.web_search(f"srvtoolu_{suffix}_{number}", part.query)
        elif isinstance(part, Broken):
            index = len(builder.content)
            data = (
                '{"type": "content_block_delta", "index": '
                f'{index}, "delta": {{"type": "text_delta", "text": "unterminat'
            )
            builder.raw(f"event: content_block_delta\ndata: {data}\n\n")
    if reply.ending == "complete":
        if refusal is not None:
            builder.finish("refusal", {"type": "refusal", "explanation": refusal})
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
    return builder


def sse_bytes(event: Frame) -> bytes:
    """One Anthropic event as an SSE frame (`event:` line, `data:` line, blank line)."""
    return AnthropicLab().frame(event)


class AnthropicLab:
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
        return render(reply).message()

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        return anthropic_error_body(error)

    def reset_headers(self, seconds: float) -> dict[str, str]:
        return anthropic_reset_headers(seconds)

    def is_streaming(self, body: object) -> bool:
        return isinstance(body, dict) and body.get("stream") is True

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        """The result for `call_id`, only if it is in the user message right after the
        assistant message with that tool_use, and that message's tool_result blocks all
        come first."""
        messages = list(request.get("messages", []))
        for index, message in enumerate(messages):
            if message.get("role") != "assistant" or not _has_tool_use(message, call_id):
                continue
            following = messages[index + 1] if index + 1 < len(messages) else {}
            content = following.get("content")
            if following.get("role") != "user" or not isinstance(content, list):
                return None
            leading = 0
            while leading < len(content) and content[leading].get("type") == "tool_result":
                leading += 1
            if any(block.get("type") == "tool_result" for block in content[leading:]):
                return None  # a result after other content
            for block in content[:leading]:
                if block.get("tool_use_id") == call_id:
                    return _result_text(block.get("content"))
            return None
        return None

    @property
    def scenarios(self) -> Sequence[Scenario]:
        return ANTHROPIC_SCENARIOS


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


# --- Anthropic-only scenarios ----------------------------------------------------------------

THINKING_BUDGET = 2048
THOUGHT = 'Look at the files first — the README names the bug; "add" may subtract.'
SIGNATURE = "EuYBCkQIBxgCKkCf+/Zq9w==sig-lab-thinking-replay"
REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP+redacted==",
    "EqgBCkYIBxgCKkBxN2vNq/0oXh+second-redacted-block-do-not-touch==",
)
SEARCH_QUERY = "python add function subtracts"


def _message(request: Mapping[str, Any], call_id: str) -> list[dict[str, Any]]:
    """The content of the assistant message with `call_id`'s tool_use."""
    for message in request.get("messages", []):
        if message.get("role") == "assistant" and _has_tool_use(message, call_id):
            return list(message["content"])
    raise KeyError(f"no assistant message with tool_use {call_id}")


def _exact(block: object) -> str:
    return json.dumps(block, ensure_ascii=False, separators=(",", ":"))


def _thinking_turns() -> list[Turn]:
    first = Reply("msg_think_1", (Think(THOUGHT, SIGNATURE, 4), Call("call_1", "discover", {})))
    return [Turn(reply=first), text_turn("msg_think_2", "The bug is in add.")]


def check_thinking_replay(observation: Observation) -> list[str]:
    problems = []
    first, second = observation.requests[0], observation.requests[1]
    if first.get("thinking") != {"type": "enabled", "budget_tokens": THINKING_BUDGET}:
        problems.append(f"the first request asked for thinking {first.get('thinking')}")
    if first.get("max_tokens") != THINKING_BUDGET + 2048:
        problems.append("max_tokens must be the thinking budget plus the output limit")
    content = _message(second, "call_1")
    expected = {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE}
    thinking = [block for block in content if block.get("type") == "thinking"]
    if len(thinking) != 1 or _exact(thinking[0]) != _exact(expected):
        problems.append("the thinking block was not replayed exactly once, byte for byte")
    if content[0].get("type") != "thinking":
        problems.append("the thinking block is not first in the assistant message")
    elif content[1].get("id") != "call_1":
        problems.append("the thinking block does not immediately precede its tool_use")
    return problems


def _redacted_turns() -> list[Turn]:
    builder = MessageBuilder("msg_redacted_1").start()
    for data in REDACTED:
        builder.redacted_thinking(data)
    builder.tool_use("call_1", "discover", {}).finish("tool_use")
    return [builder.turn(), text_turn("msg_redacted_2", "Done.")]


def check_redacted_replay(observation: Observation) -> list[str]:
    content = _message(observation.requests[1], "call_1")
    expected = [{"type": "redacted_thinking", "data": data} for data in REDACTED]
    if [_exact(block) for block in content[:2]] != [_exact(block) for block in expected]:
        return ["the redacted_thinking blocks were not replayed unchanged, first, in order"]
    if content[2].get("id") != "call_1":
        return ["the redacted_thinking blocks do not precede their tool_use"]
    return []


INTERLEAVED = (
    Think("Read the README first.", "EuYBsig-interleaved-1=="),
    Call("call_1", "read", {"path": "README.md"}),
    Think("Now the implementation.", "EuYBsig-interleaved-2=="),
    Call("call_2", "read", {"path": "calculator.py"}),
)


def _interleaved_turns() -> list[Turn]:
    return [
        Turn(reply=Reply("msg_interleaved_1", INTERLEAVED)),
        text_turn("msg_interleaved_2", "add subtracts."),
    ]


def check_interleaved(observation: Observation) -> list[str]:
    second = observation.requests[1]
    content = _message(second, "call_1")
    expected = [
        {"type": "thinking", "thinking": part.text, "signature": part.opaque}
        if isinstance(part, Think)
        else {"type": "tool_use", "id": part.call_id, "name": part.name, "input": part.arguments}
        for part in INTERLEAVED
        if isinstance(part, Think | Call)
    ]
    problems = []
    if [_exact(block) for block in content] != [_exact(block) for block in expected]:
        problems.append("the interleaved thinking blocks were not replayed in place, unchanged")
    for call_id in ("call_1", "call_2"):
        if not result_of(observation, 1, call_id):
            problems.append(f"{call_id}'s result is not first in the next user message")
    return problems


def _parallel_turns() -> list[Turn]:
    reply = Reply(
        "msg_parallel_1",
        (
            Say("Reading both files."),
            Call("call_1", "read", {"path": "README.md"}),
            Call("call_2", "read", {"path": "calculator.py"}),
        ),
    )
    return [Turn(reply=reply), text_turn("msg_parallel_2", "Both read.")]


def check_parallel(observation: Observation) -> list[str]:
    messages = list(observation.requests[1]["messages"])
    if messages[-2].get("role") != "assistant" or messages[-1].get("role") != "user":
        return ["the results do not follow the assistant message in one user message"]
    content = messages[-1]["content"]
    kinds = [(block.get("type"), block.get("tool_use_id")) for block in content]
    if kinds != [("tool_result", "call_1"), ("tool_result", "call_2")]:
        return [f"the user message after the calls holds {kinds}"]
    if any(block.get("is_error") for block in content):
        return ["a successful result is marked is_error"]
    return []


def _overload_start(message_id: str) -> Turn:
    return MessageBuilder(message_id).start().ping().error().turn()


def _overload_turns() -> list[Turn]:
    return [_overload_start("msg_overload_1"), text_turn("msg_never", "No.")]


def _overload_retried_turns() -> list[Turn]:
    answer = Reply("msg_overload_2", (Say("Answered after the overload."),))
    return [_overload_start("msg_overload_1"), Turn(reply=answer)]


def _overload_after_text_turns() -> list[Turn]:
    reply = Reply("msg_overload_text", (Say("Starting the fix."),), "error")
    return [Turn(reply=reply), text_turn("msg_never", "No.")]


def _max_tokens_turns() -> list[Turn]:
    reply = Reply(
        "msg_max_tokens",
        (Say("Editing."), Call("call_1", "edit", EDIT_FIX, cut=True)),
        "truncated",
    )
    return [Turn(reply=reply)]


def check_max_tokens(observation: Observation) -> list[str]:
    if "max_tokens" not in observation.stopped:
        return [f"the stop does not name max_tokens: {observation.stopped!r}"]
    return []


def _tool_use_without_call_turns() -> list[Turn]:
    builder = MessageBuilder("msg_no_call").start().text("I'll call a tool.")
    return [builder.finish("tool_use").turn()]


def _end_turn_with_call_turns() -> list[Turn]:
    builder = MessageBuilder("msg_end_turn_call").start().text("Editing.")
    builder.tool_use("call_1", "edit", EDIT_FIX)
    return [builder.finish("end_turn").turn()]


PAUSED_TEXT = "Searching the web first."


def _pause_turns() -> list[Turn]:
    paused = Reply("msg_paused_1", (Say(PAUSED_TEXT), ProviderTool(SEARCH_QUERY)), "paused")
    answer = Reply("msg_paused_2", (Say("The search agrees: add must add."),))
    return [Turn(reply=paused), Turn(reply=answer)]


def check_pause(observation: Observation) -> list[str]:
    first, second = observation.requests
    last = second["messages"][-1]
    tool_id = "srvtoolu_msg_paused_1_2"
    search = {"query": SEARCH_QUERY}
    expected = [
        {"type": "text", "text": PAUSED_TEXT},
        {"type": "server_tool_use", "id": tool_id, "name": "web_search", "input": search},
        web_search_result(tool_id, SEARCH_QUERY),
    ]
    problems = []
    if last.get("role") != "assistant":
        problems.append("the request after pause_turn does not end with the paused message")
    elif [_exact(b) for b in last.get("content", [])] != [_exact(b) for b in expected]:
        problems.append("the paused response was not sent back unchanged")
    if second["messages"][:-1] != first["messages"]:
        problems.append("the continuation changed the history before the paused message")
    return problems


REFUSAL_EXPLANATION = "This request was declined by the safety system."


def _refusal_turns() -> list[Turn]:
    builder = MessageBuilder("msg_refusal").start().text("I'll edit the file.")
    builder.tool_use("call_1", "edit", EDIT_FIX)
    details = {"type": "refusal", "category": "cyber", "explanation": REFUSAL_EXPLANATION}
    return [builder.finish("refusal", details).turn()]


def check_refusal(observation: Observation) -> list[str]:
    if REFUSAL_EXPLANATION not in observation.stopped:
        return [f"the stop does not carry the refusal explanation: {observation.stopped!r}"]
    return []


def _missing_stop_turns() -> list[Turn]:
    builder = MessageBuilder("msg_no_stop").start().text("Editing.")
    builder.tool_use("call_1", "edit", EDIT_FIX)
    return [builder.finish("tool_use", message_stop=False).turn()]


def _data_only_frames_turns() -> list[Turn]:
    # Frames without an `event:` line, which the official SDK never reads: a message_delta
    # that would contradict the tool_use, an argument fragment, a second message_stop.
    builder = MessageBuilder("msg_data_only").start().text("Editing.")
    builder.tool_use("call_1", "edit", EDIT_FIX)
    contradicting = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}
    builder.raw(f"data: {json.dumps(contradicting)}\n\n")
    fragment = {"type": "input_json_delta", "partial_json": ', "path": "README.md"'}
    builder.raw(
        f"data: {json.dumps({'type': 'content_block_delta', 'index': 1, 'delta': fragment})}\n\n"
    )
    builder.finish("tool_use")
    return [builder.turn(), text_turn("msg_data_only_2", "Fixed.")]


def _stop_reason_changed_turns() -> list[Turn]:
    builder = MessageBuilder("msg_two_reasons").start().tool_use("call_1", "edit", EDIT_FIX)
    builder.finish("tool_use", message_stop=False).finish("end_turn")
    return [builder.turn()]


def _message_delta_first_turns() -> list[Turn]:
    # A message_delta before the blocks it describes.
    builder = MessageBuilder("msg_delta_first").start().finish("tool_use", message_stop=False)
    builder.tool_use("call_1", "edit", EDIT_FIX).emit({"type": "message_stop"})
    return [builder.turn()]


def _empty_input_turns() -> list[Turn]:
    builder = MessageBuilder("msg_empty_input").start()
    block = {"type": "tool_use", "id": "call_1", "name": "discover", "input": {}}
    builder.emit({"type": "content_block_start", "index": 0, "content_block": block})
    builder.ping()
    builder.emit(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        }
    )
    builder.emit({"type": "content_block_stop", "index": 0})
    builder.calls = 1
    builder.content.append(block)
    return [
        builder.finish("tool_use").turn(),
        text_turn("msg_empty_input_2", "Listed."),
    ]


def check_empty_input(observation: Observation) -> list[str]:
    content = _message(observation.requests[1], "call_1")
    uses = [block for block in content if block.get("type") == "tool_use"]
    if [block.get("input") for block in uses] != [{}]:
        return [f"the no-parameter call was replayed with input {uses}"]
    if not result_of(observation, 1, "call_1"):
        return ["the no-parameter call has no result"]
    return []


def _server_tool_turns() -> list[Turn]:
    first = Reply("msg_search_1", (ProviderTool(SEARCH_QUERY), Call("call_1", "edit", EDIT_FIX)))
    return [Turn(reply=first), text_turn("msg_search_2", "Fixed.")]


def check_server_tool(observation: Observation) -> list[str]:
    content = _message(observation.requests[1], "call_1")
    tool_id = "srvtoolu_msg_search_1_1"
    expected = [
        {
            "type": "server_tool_use",
            "id": tool_id,
            "name": "web_search",
            "input": {"query": SEARCH_QUERY},
        },
        web_search_result(tool_id, SEARCH_QUERY),
    ]
    if [_exact(b) for b in content[:2]] != [_exact(b) for b in expected]:
        return ["the provider-executed blocks were not replayed unchanged before the call"]
    if content[2].get("id") != "call_1":
        return ["the call lost its place after the provider blocks"]
    return []


def _overloaded_529_turns() -> list[Turn]:
    error = OpeningError(529, "overloaded", "Overloaded")
    answer = Reply("msg_after_529", (Say("Answered after the overload."),))
    return [Turn(error=error, headers={"retry-after": "3"}), Turn(reply=answer)]


def _billing_turns() -> list[Turn]:
    error = OpeningError(
        402, "quota", "Your credit balance is too low to access the Anthropic API."
    )
    return [Turn(error=error), text_turn("msg_never", "No.")]


_THINKING = LabOptions(thinking_budget=THINKING_BUDGET)

ANTHROPIC_SCENARIOS: tuple[Scenario, ...] = own(
    "anthropic",
    Scenario(
        "anthropic-thinking-replay",
        "thinking (with signature) + call: replayed byte for byte, first, before its tool_use",
        finished(2, 1),
        _thinking_turns,
        options=_THINKING,
        check=check_thinking_replay,
    ),
    Scenario(
        "anthropic-redacted-thinking",
        "two redacted_thinking blocks + call: replayed unchanged, in order, before it",
        finished(2, 1),
        _redacted_turns,
        options=_THINKING,
        check=check_redacted_replay,
    ),
    Scenario(
        "anthropic-interleaved-thinking",
        "thinking, call, thinking, call: each thinking block replayed in place",
        finished(2, 2),
        _interleaved_turns,
        options=_THINKING,
        check=check_interleaved,
    ),
    Scenario(
        "anthropic-parallel-results",
        "two calls in one response: both tool_results first, in one user message",
        finished(2, 2),
        _parallel_turns,
        check=check_parallel,
    ),
    Scenario(
        "anthropic-overload-before-content",
        "event: error overloaded_error before any content: fails, no second request",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        _overload_turns,
    ),
    Scenario(
        "anthropic-overload-retry-unstarted",
        "the same overload with retry_unstarted: retried once, then answered",
        answered(2, "Answered after the overload."),
        _overload_retried_turns,
        options=LabOptions(retry_unstarted=True),
    ),
    Scenario(
        "anthropic-overload-after-text",
        "an overload after a text delta, retry_unstarted on: content arrived, never retried",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        _overload_after_text_turns,
        options=LabOptions(retry_unstarted=True),
    ),
    Scenario(
        "anthropic-max-tokens-in-tool-use",
        "stop_reason max_tokens inside a tool_use's input: nothing runs",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        _max_tokens_turns,
        check=check_max_tokens,
    ),
    Scenario(
        "anthropic-tool-use-without-call",
        "stop_reason tool_use, but no tool_use block",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _tool_use_without_call_turns,
    ),
    Scenario(
        "anthropic-end-turn-with-call",
        "stop_reason end_turn, but a tool_use block: the call does not run",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _end_turn_with_call_turns,
    ),
    Scenario(
        "anthropic-pause-turn",
        "pause_turn after a web search: sent back unchanged as the last message, nothing runs",
        answered(2, "The search agrees: add must add."),
        _pause_turns,
        check=check_pause,
    ),
    Scenario(
        "anthropic-refusal",
        "stop_reason refusal with stop_details after a complete tool_use: no call runs",
        Expectation("model_refused", attempts=1, tools_executed=0, closed_early=0),
        _refusal_turns,
        check=check_refusal,
    ),
    Scenario(
        "anthropic-missing-message-stop",
        "message_delta tool_use, then the body ends without message_stop",
        failure(FailureKind.STREAM_ENDED, closed_early=0),
        _missing_stop_turns,
    ),
    Scenario(
        "anthropic-data-only-frames",
        "frames without an event: line (a contradicting message_delta, an argument "
        "fragment): skipped, as the SDK skips them; the call runs as streamed",
        finished(2, 1, fixed=True),
        _data_only_frames_turns,
    ),
    Scenario(
        "anthropic-stop-reason-changed",
        "message_delta tool_use, then a second message_delta end_turn: not silently replaced",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _stop_reason_changed_turns,
    ),
    Scenario(
        "anthropic-message-delta-first",
        "a message_delta before the blocks it describes",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _message_delta_first_turns,
    ),
    Scenario(
        "anthropic-empty-input",
        'a no-parameter tool whose only partial_json is "": runs with {}',
        finished(2, 1),
        _empty_input_turns,
        check=check_empty_input,
    ),
    Scenario(
        "anthropic-server-tool-blocks",
        "server_tool_use + web_search_tool_result before a call: replayed, never executed",
        finished(2, 1, fixed=True),
        _server_tool_turns,
        check=check_server_tool,
    ),
    Scenario(
        "anthropic-529-retry-after",
        "529 overloaded_error with retry-after: 3 while opening: retried after that wait",
        answered(2, "Answered after the overload."),
        _overloaded_529_turns,
        check=waited(3.0),
    ),
    Scenario(
        "anthropic-billing-error",
        "402 billing_error: the quota is exhausted, one request",
        failure(FailureKind.QUOTA_EXHAUSTED, closed_early=0),
        _billing_turns,
    ),
)
