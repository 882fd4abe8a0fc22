"""The Responses protocol in the lab: replies rendered as the live API streams them, the
non-streaming response object, OpenAI error bodies, and the scenarios only Responses has
(its output snapshot, response identity, background mode, reasoning items, native
continuation, provider-executed items).

`ResponseBuilder` authors realistic streams: sequence numbers, item ids, content parts,
argument fragments and per-item `.done` events, and complete `response` objects (every
field the SDK's types require).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ...errors import FailureKind
from ...lab.protocol import Frame, typed_sse_frame
from ...lab.reply import (
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
    LabOptions,
    Observation,
    Scenario,
    answered,
    failure,
    finished,
    own,
)
from ...lab.script import Faults, Turn
from ..openai.lab import openai_error_body, openai_reset_headers

CREATED_AT = 1_760_000_000


def _usage_object(usage: ReplyUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


class ResponseBuilder:
    """Authors a realistic Responses event stream."""

    def __init__(self, response_id: str, model: str = "gpt-4.1-mini") -> None:
        self.response_id = response_id
        self.model = model
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def _emit(self, event: dict[str, Any]) -> ResponseBuilder:
        event["sequence_number"] = len(self.events)
        self.events.append(event)
        return self

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

    def _message(
        self, item_id: str, kind: Literal["output_text", "refusal"], text: str, pieces: int
    ) -> ResponseBuilder:
        index = len(self.output)
        added = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        if kind == "output_text":
            empty: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
            done_part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        else:
            empty = {"type": "refusal", "refusal": ""}
            done_part = {"type": "refusal", "refusal": text}
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        self._emit({"type": "response.content_part.added", **where, "part": empty})
        delta_type = (
            "response.output_text.delta" if kind == "output_text" else "response.refusal.delta"
        )
        for piece in split(text, pieces):
            event: dict[str, Any] = {"type": delta_type, **where, "delta": piece}
            if kind == "output_text":
                event["logprobs"] = []
            self._emit(event)
        if kind == "output_text":
            self._emit({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
        else:
            self._emit({"type": "response.refusal.done", **where, "refusal": text})
        self._emit({"type": "response.content_part.done", **where, "part": done_part})
        item = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [done_part],
        }
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def text(self, item_id: str, text: str, pieces: int = 4) -> ResponseBuilder:
        return self._message(item_id, "output_text", text, pieces)

    def refusal(self, item_id: str, text: str) -> ResponseBuilder:
        return self._message(item_id, "refusal", text, 2)

    def call(
        self,
        item_id: str,
        call_id: str,
        name: str,
        arguments: str | Mapping[str, Any],
        pieces: int = 5,
        *,
        finish: bool = True,
        status: str = "completed",
    ) -> ResponseBuilder:
        """A function call item; with `finish=False` the stream stops mid-arguments."""
        text = argument_text(arguments)
        index = len(self.output)
        base = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name}
        added = {**base, "status": "in_progress", "arguments": ""}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        sent = argument_pieces(text, pieces, cut=not finish)
        for piece in sent:
            self._emit(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item_id,
                    "output_index": index,
                    "delta": piece,
                }
            )
        if not finish:
            return self
        self._emit(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": index,
                "name": name,
                "arguments": text,
            }
        )
        item = {**base, "status": status, "arguments": text}
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def reasoning(self, item: dict[str, Any], pieces: int = 3) -> ResponseBuilder:
        """A reasoning item: added (empty), its summary as deltas, then done (whole item)."""
        index = len(self.output)
        added = {"id": item["id"], "type": "reasoning", "summary": []}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        for part_index, part in enumerate(item.get("summary", [])):
            for piece in split(str(part.get("text", "")), pieces):
                self._emit(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "summary_index": part_index,
                        "delta": piece,
                    }
                )
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def output_item(self, item: dict[str, Any]) -> ResponseBuilder:
        """An output item of any other type, added and done at once."""
        index = len(self.output)
        self._emit({"type": "response.output_item.added", "output_index": index, "item": item})
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def web_search(self, item_id: str, query: str) -> ResponseBuilder:
        """A provider-executed web search, with its progress events and complete item."""
        index = len(self.output)
        item = {
            "id": item_id,
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": query},
        }
        added = {**item, "status": "in_progress"}
        self._emit({"type": "response.output_item.added", "output_index": index, "item": added})
        for stage in ("in_progress", "searching", "completed"):
            self._emit(
                {
                    "type": f"response.web_search_call.{stage}",
                    "item_id": item_id,
                    "output_index": index,
                }
            )
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
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


def reasoning_item(item_id: str, text: str, opaque: str = "") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": opaque or f"gAAAAB-opaque-{item_id}-do-not-touch==",
    }


def render(reply: Reply) -> ResponseBuilder:
    """A neutral reply as the Responses API streams it."""
    builder = ResponseBuilder(reply.response_id, reply.model).created()
    suffix = reply.response_id.removeprefix("resp_")
    for number, part in enumerate(reply.sent_parts, start=1):
        if isinstance(part, Say):
            builder.text(f"msg_{suffix}_{number}", part.text, part.pieces)
        elif isinstance(part, Refuse):
            builder.refusal(f"msg_{suffix}_{number}", part.text)
        elif isinstance(part, Think):
            builder.reasoning(
                reasoning_item(f"rs_{suffix}_{number}", part.text, part.opaque), part.pieces
            )
        elif isinstance(part, Call):
            builder.call(
                f"fc_{suffix}_{number}",
                part.call_id,
                part.name,
                part.argument_text,
                part.pieces,
                finish=not part.cut,
            )
        elif isinstance(part, ProviderTool):
            builder.web_search(f"ws_{suffix}_{number}", part.query)
        elif isinstance(part, Broken):
            broken = (
                '{"type": "response.output_text.delta", "item_id": "msg_x", "delta": "unterminat'
            )
            builder.raw({"raw": f"event: response.output_text.delta\ndata: {broken}\n\n"})
    usage = _usage_object(reply.usage) if reply.usage is not None else None
    if reply.ending == "complete":
        builder.completed(usage=usage)
    elif reply.ending == "truncated":
        builder.incomplete("max_output_tokens", usage)
    elif reply.ending == "error":
        builder.error(reply.error_code, reply.error_message, nested=True)
    elif reply.ending == "failed":
        builder.failed(reply.error_code, reply.error_message)
    # "paused" has no Responses form; "open" sends no terminal event.
    return builder


class ResponsesLab:
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
        builder = render(reply)
        terminal = builder.events[-1] if builder.events else {}
        response = terminal.get("response")
        if isinstance(response, dict):
            return response
        return builder.response(
            "failed", error={"code": reply.error_code, "message": reply.error_message}
        )

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        return openai_error_body(error)

    def reset_headers(self, seconds: float) -> dict[str, str]:
        return openai_reset_headers(seconds)

    def is_streaming(self, body: object) -> bool:
        return isinstance(body, dict) and body.get("stream") is True

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

    @property
    def scenarios(self) -> Sequence[Scenario]:
        return RESPONSES_SCENARIOS


def sse_bytes(event: Frame) -> bytes:
    """One Responses event as an SSE frame (`event:` line, `data:` line, blank line)."""
    return ResponsesLab().frame(event)


# --- Responses-only scenarios ----------------------------------------------------------------


def _edit_stream(response_id: str) -> ResponseBuilder:
    return ResponseBuilder(response_id).created().text("msg_1", "I'll fix the bug now.")


def changed_call_turns() -> list[Turn]:
    builder = _edit_stream("resp_changed").call("fc_1", "call_1", "edit", EDIT_FIX)
    changed = [dict(item) for item in builder.output]
    changed[-1]["arguments"] = '{"path": "calculator.py", "old": "return a - b", "new": "return 0"}'
    return [builder.completed(output=changed).turn()]


def missing_call_turns() -> list[Turn]:
    builder = _edit_stream("resp_missing")
    builder.call("fc_1", "call_1", "read", {"path": "calculator.py"})
    builder.call("fc_2", "call_2", "edit", EDIT_FIX)
    return [builder.completed(output=builder.output[:-1]).turn()]


def duplicate_start_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_dup").created().created()
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed().turn()]


def wrong_response_id_turns() -> list[Turn]:
    builder = _edit_stream("resp_right").call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed(response_id="resp_other").turn()]


def unsupported_item_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_unsupported").created()
    builder.output_item(
        {
            "id": "cu_1",
            "type": "computer_call",
            "call_id": "call_cu",
            "action": {"type": "screenshot"},
            "pending_safety_checks": [],
            "status": "completed",
        }
    )
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed().turn()]


def incomplete_call_turns() -> list[Turn]:
    builder = _edit_stream("resp_incomplete_item")
    builder.call("fc_1", "call_1", "edit", EDIT_FIX, status="incomplete")
    return [builder.completed().turn()]


def response_failed_turns() -> list[Turn]:
    builder = _edit_stream("resp_failed")
    builder.call("fc_1", "call_1", "edit", EDIT_FIX, finish=False)
    return [builder.failed("server_error", "Something went wrong.").turn()]


def done_sentinel_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_done").created().text("msg_1", "A gateway's [DONE] is fine.")
    return [builder.completed().turn(faults=Faults(done_sentinel=True))]


def data_only_turns() -> list[Turn]:
    """A gateway that sends no `event:` lines and ends with `data: [DONE]` (Bedrock, OpenRouter)."""
    builder = ResponseBuilder("resp_gateway").created()
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    builder.completed()
    frames: list[Frame] = [
        {"raw": f"data: {json.dumps(event, separators=(',', ':'))}\n\n"} for event in builder.events
    ]
    frames.append({"raw": "data: [DONE]\n\n"})
    answer = ResponseBuilder("resp_gateway_2").created().text("msg_1", "Fixed.").completed()
    return [Turn(events=tuple(frames)), answer.turn()]


def background_start_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_background").queued()
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    answer = ResponseBuilder("resp_background_2").created().text("msg_1", "Fixed.").completed()
    return [builder.completed().turn(), answer.turn()]


def provider_tool_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_search").created()
    builder.web_search("ws_1", "python add function subtracts")
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    answer = ResponseBuilder("resp_search_2").created().text("msg_1", "Fixed.").completed()
    return [builder.completed().turn(), answer.turn()]


def check_provider_tool(observation: Observation) -> list[str]:
    items = list(observation.requests[1].get("input", []))
    types = [item.get("type") for item in items]
    if "web_search_call" not in types:
        return ["the provider-executed web_search_call was not replayed"]
    searched = items[types.index("web_search_call")]
    if searched.get("action") != {"type": "search", "query": "python add function subtracts"}:
        return ["the web_search_call was not replayed unchanged"]
    if types.index("web_search_call") > types.index("function_call"):
        return ["the web_search_call lost its place before the call"]
    return []


REASONING_MODEL = "o4-mini"


def reasoning_replay_turns() -> list[Turn]:
    first = ResponseBuilder("resp_reason_1", REASONING_MODEL).created()
    first.reasoning(reasoning_item("rs_1", "Look at the files first."))
    first.call("fc_1", "call_1", "discover", {})
    answer = (
        ResponseBuilder("resp_reason_2", REASONING_MODEL)
        .created()
        .text("msg_1", "The bug is in add.")
    )
    return [first.completed().turn(), answer.completed().turn()]


def reasoning_orphan_guard_turns() -> list[Turn]:
    first = ResponseBuilder("resp_orphan_1", REASONING_MODEL).created()
    first.reasoning(reasoning_item("rs_1", "Discover first."))
    first.call("fc_1", "call_1", "discover", {})
    first.reasoning(reasoning_item("rs_2", "A trailing thought with no call after it."))
    answer = ResponseBuilder("resp_orphan_2", REASONING_MODEL).created().text("msg_1", "Done.")
    return [first.completed().turn(), answer.completed().turn()]


def _input_types(request: Mapping[str, Any]) -> list[str]:
    return [str(item.get("type") or item.get("role")) for item in request.get("input", [])]


def check_reasoning_replay(observation: Observation) -> list[str]:
    problems = []
    first, second = observation.requests[0], observation.requests[1]
    if first.get("include") != ["reasoning.encrypted_content"] or first.get("store") is not False:
        problems.append("the first request must ask for encrypted reasoning with store: false")
    items = list(second.get("input", []))
    expected = reasoning_item("rs_1", "Look at the files first.")
    positions = [i for i, item in enumerate(items) if item.get("type") == "reasoning"]
    if len(positions) != 1 or items[positions[0]] != expected:
        problems.append("the reasoning item was not replayed exactly once, unchanged")
    elif items[positions[0] + 1].get("call_id") != "call_1":
        problems.append("the reasoning item does not immediately precede its call")
    return problems


def check_orphan_guard(observation: Observation) -> list[str]:
    items = list(observation.requests[1].get("input", []))
    reasoning = [item.get("id") for item in items if item.get("type") == "reasoning"]
    problems = (
        [] if reasoning == ["rs_1"] else [f"replayed reasoning {reasoning}, expected ['rs_1']"]
    )
    for index, item in enumerate(items):
        following = items[index + 1] if index + 1 < len(items) else {}
        if item.get("type") == "reasoning" and following.get("type") != "function_call":
            problems.append(f"orphan reasoning item {item.get('id')} was sent")
    return problems


def _call_turn(number: int, name: str, arguments: dict[str, str]) -> Turn:
    builder = ResponseBuilder(f"resp_repair_{number}").created()
    builder.call(f"fc_repair_{number}", f"call_repair_{number}", name, arguments)
    return builder.completed().turn()


def native_continuation_turns() -> list[Turn]:
    return [
        _call_turn(1, "discover", {}),
        _call_turn(2, "read", {"path": "README.md"}),
        ResponseBuilder("resp_repair_3")
        .created()
        .text("msg_3", "The bug is in add.")
        .completed()
        .turn(),
    ]


def check_native_continuation(observation: Observation) -> list[str]:
    problems = []
    first, second, third = observation.requests
    if first.get("store") is not True or "previous_response_id" in first:
        problems.append("the first request must store and carry no previous_response_id")
    if len(first.get("input", [])) != 2:
        problems.append("the first request must carry the full history (system + user)")
    for request, previous, call_id in (
        (second, "resp_repair_1", "call_repair_1"),
        (third, "resp_repair_2", "call_repair_2"),
    ):
        if request.get("previous_response_id") != previous:
            got = request.get("previous_response_id")
            problems.append(f"expected previous_response_id {previous}, got {got}")
        items = list(request.get("input", []))
        if [i.get("type") for i in items] != ["function_call_output"] or items[0].get(
            "call_id"
        ) != call_id:
            problems.append(f"expected only the output of {call_id}, got {_input_types(request)}")
    return problems


def lifecycle_violation_turns() -> list[Turn]:
    # A custom provider streams a read, then claims success with a different call list.
    events: list[Mapping[str, Any]] = [
        {"type": "started", "response_id": "cr_1"},
        {"type": "text", "delta": "Reading the README."},
        {"type": "call", "item_id": "it_1", "call_id": "call_1", "name": "read"},
        {"type": "arguments", "item_id": "it_1", "delta": '{"path": "README.md"}'},
        {
            "type": "completed",
            "response_id": "cr_1",
            "finish_reason": "tool_calls",
            "text": "Reading the README.",
            "calls": [
                {
                    "item_id": "it_2",
                    "call_id": "call_2",
                    "name": "edit",
                    "arguments": json.dumps(EDIT_FIX),
                }
            ],
        },
    ]
    return [Turn(events=tuple(events))]


_FIXED = finished(2, 1, fixed=True)

RESPONSES_SCENARIOS: tuple[Scenario, ...] = own(
    "responses",
    Scenario(
        "changed-call",
        "terminal arguments differ from the streamed ones",
        failure(FailureKind.CALL_MISMATCH, closed_early=0),
        changed_call_turns,
    ),
    Scenario(
        "missing-call",
        "the terminal output omits a streamed call",
        failure(FailureKind.CALL_MISMATCH, closed_early=0),
        missing_call_turns,
    ),
    Scenario(
        "duplicate-start",
        "response.created twice",
        failure(FailureKind.LIFECYCLE),
        duplicate_start_turns,
    ),
    Scenario(
        "wrong-response-id",
        "response.completed names another response",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        wrong_response_id_turns,
    ),
    Scenario(
        "unsupported-item",
        "an output item asking for a client action lockgate cannot run (computer_call)",
        failure(FailureKind.UNSUPPORTED_OUTPUT, closed_early=0),
        unsupported_item_turns,
    ),
    Scenario(
        "incomplete-call-item",
        "a completed response whose function_call item the provider marks incomplete",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        incomplete_call_turns,
    ),
    Scenario(
        "response-failed",
        "response.failed mid-arguments",
        failure(FailureKind.RESPONSE_FAILED, closed_early=0),
        response_failed_turns,
    ),
    Scenario(
        "done-sentinel",
        "a gateway's trailing data: [DONE] after response.completed",
        answered(answer="A gateway's [DONE] is fine."),
        done_sentinel_turns,
    ),
    Scenario(
        "data-only-gateway",
        "no event: lines (the type only in the JSON), then data: [DONE]",
        _FIXED,
        data_only_turns,
    ),
    Scenario(
        "background-start",
        "background mode: response.queued first, no response.created",
        _FIXED,
        background_start_turns,
    ),
    Scenario(
        "provider-tool-item",
        "a web_search_call the provider ran itself: accepted, replayed in place, never executed",
        _FIXED,
        provider_tool_turns,
        check=check_provider_tool,
    ),
    Scenario(
        "reasoning-replay",
        "reasoning item + call, then an answer: the item is replayed before its call",
        finished(2, 1),
        reasoning_replay_turns,
        options=LabOptions(model=REASONING_MODEL),
        check=check_reasoning_replay,
    ),
    Scenario(
        "reasoning-orphan-guard",
        "a trailing reasoning item with no item after it is never sent",
        finished(2, 1),
        reasoning_orphan_guard_turns,
        options=LabOptions(model=REASONING_MODEL),
        check=check_orphan_guard,
    ),
    Scenario(
        "native-continuation",
        "store: true; continued requests carry previous_response_id and only new items",
        finished(3, 2),
        native_continuation_turns,
        options=LabOptions(continuation="native"),
        check=check_native_continuation,
    ),
    Scenario(
        "lifecycle-violation",
        "a custom provider reports success with a call list other than it streamed",
        failure(FailureKind.CALL_MISMATCH, closed_early=0),
        lifecycle_violation_turns,
        options=LabOptions(custom=True),
    ),
)

__all__ = ["ResponseBuilder", "ResponsesLab", "reasoning_item", "render", "sse_bytes"]
