"""The six protocols as the hostile server speaks them: a `Script` (calls or a text answer,
how the events end) rendered as the body's frames.

Each renderer writes the events a real provider streams, in its order, with the fields the
agents read: OpenAI Responses (function calls and custom, freeform calls, with their
`…delta`/`…done` events and an `output_item.done` per item), Chat Completions (tool-call
deltas by index, `[DONE]`), Anthropic Messages (`tool_use` blocks with `input_json_delta`)
and Gemini native (`functionCall` parts, whole, one chunk each). Every argument string is
sent in two fragments, so that `cut` can end the body between them.

The terminal events: Responses `response.completed` / `response.incomplete`
(`max_output_tokens`) / `response.failed` (`server_error`); Chat `finish_reason`
`tool_calls`/`stop`/`length` then `[DONE]`, its error a `data: {"error": …}` chunk; Anthropic
`message_delta` + `message_stop` (`tool_use`/`end_turn`/`max_tokens`), its error `event:
error` (`overloaded_error`); Gemini a last chunk with `finishReason` `STOP`/`MAX_TOKENS`, its
error a `data: {"error": …}` chunk.

Bedrock's InvokeModelWithResponseStream (`bedrock`: the Anthropic events in `chunk` messages)
and ConverseStream (`converse`) are in the AWS event stream (`eventstream_wire`, with the
event stream's own faults, `Script.fault`); their whole answers and errors are here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from . import eventstream_wire
from .eventstream_wire import (
    bedrock_chunk,
    converse_event,
    eventstream_exception,
    eventstream_message,
)
from .outcomes import Terminal
from .script import Call, Script

__all__ = [
    "CONTENT_TYPES",
    "PAUSE",
    "RENDERERS",
    "Call",
    "Script",
    "bedrock_chunk",
    "converse_event",
    "eventstream_exception",
    "eventstream_message",
    "sse_event",
    "whole_calls",
    "whole_error",
    "whole_text",
]

# Where the server waits (`--pause`): right after each call, before whatever follows it.
PAUSE = b""


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def sse_event(name: str | None, payload: object) -> bytes:
    """One SSE event: `event: NAME` (None: no such line) and its data, compact JSON."""
    head = b"" if name is None else b"event: " + name.encode() + b"\n"
    return head + b"data: " + _json(payload) + b"\n\n"


# --- OpenAI Responses ------------------------------------------------------------------------


def _responses(script: Script, serial: int) -> list[bytes]:
    frames: list[bytes] = []
    sequence = 0

    def emit(name: str, payload: dict[str, Any]) -> None:
        nonlocal sequence
        frames.append(sse_event(name, {"type": name, **payload, "sequence_number": sequence}))
        sequence += 1

    response_id = f"resp_hostile_{serial}"
    base: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": script.model,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    emit("response.created", {"response": base})
    emit("response.in_progress", {"response": base})
    done: list[dict[str, Any]] = []
    if script.text is not None:
        item_id = f"msg_hostile_{serial}"
        part = {"type": "output_text", "text": "", "annotations": []}
        item: dict[str, Any] = {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        emit("response.output_item.added", {"output_index": 0, "item": item})
        place = {"item_id": item_id, "output_index": 0, "content_index": 0}
        emit("response.content_part.added", {**place, "part": part})
        emit("response.output_text.delta", {**place, "delta": script.text, "logprobs": []})
        emit("response.output_text.done", {**place, "text": script.text, "logprobs": []})
        whole_part = {**part, "text": script.text}
        emit("response.content_part.done", {**place, "part": whole_part})
        item = {**item, "status": "completed", "content": [whole_part]}
        emit("response.output_item.done", {"output_index": 0, "item": item})
        done.append(item)
    for index, call in enumerate(script.calls):
        last = index == len(script.calls) - 1
        first_half, second_half = call.halves()
        kind, prefix, field, events = (
            ("custom_tool_call", "ctc", "input", "response.custom_tool_call_input")
            if call.custom
            else ("function_call", "fc", "arguments", "response.function_call_arguments")
        )
        item_id = f"{prefix}_hostile_{serial}_{index}"
        item = {
            "id": item_id,
            "type": kind,
            "status": "in_progress",
            "call_id": f"call_hostile_{serial}_{index}",
            "name": call.name,
            field: "",
        }
        if call.namespace is not None:
            item["namespace"] = call.namespace
        delta_event, done_event = f"{events}.delta", f"{events}.done"
        output_index = len(done)
        emit("response.output_item.added", {"output_index": output_index, "item": item})
        place = {"item_id": item_id, "output_index": output_index}
        emit(delta_event, {**place, "delta": first_half})
        if script.cut and last:
            return [*frames, PAUSE]
        emit(delta_event, {**place, "delta": second_half})
        emit(done_event, {**place, field: call.arguments})
        item = {**item, "status": "completed", field: call.arguments}
        emit("response.output_item.done", {"output_index": output_index, "item": item})
        frames.append(PAUSE)
        done.append(item)
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120,
    }
    final = {**base, "output": done, "usage": usage}
    if script.terminal is Terminal.SUCCESS:
        emit("response.completed", {"response": {**final, "status": "completed"}})
    elif script.terminal is Terminal.LIMIT:
        details = {"reason": "max_output_tokens"}
        incomplete = {**final, "status": "incomplete", "incomplete_details": details}
        emit("response.incomplete", {"response": incomplete})
    elif script.terminal is Terminal.ERROR:
        error = {
            "code": "server_error",
            "message": "The server had an error while processing your request (hostile).",
        }
        emit("response.failed", {"response": {**final, "status": "failed", "error": error}})
    return frames


# --- OpenAI Chat Completions -----------------------------------------------------------------


def _chat(script: Script, serial: int) -> list[bytes]:
    frames: list[bytes] = []
    base = {
        "id": f"chatcmpl-hostile-{serial}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": script.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        frames.append(sse_event(None, {**base, "choices": [choice]}))

    chunk({"role": "assistant", "content": None if script.text is None else ""})
    if script.text is not None:
        chunk({"content": script.text})
    for index, call in enumerate(script.calls):
        last = index == len(script.calls) - 1
        first_half, second_half = call.halves()
        head = {
            "index": index,
            "id": f"call_hostile_{serial}_{index}",
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        chunk({"tool_calls": [head]})
        chunk({"tool_calls": [{"index": index, "function": {"arguments": first_half}}]})
        if script.cut and last:
            return [*frames, PAUSE]
        chunk({"tool_calls": [{"index": index, "function": {"arguments": second_half}}]})
        frames.append(PAUSE)
    if script.terminal is Terminal.ERROR:
        error: dict[str, Any] = {
            "message": "hostile server error",
            "type": "server_error",
            "code": None,
        }
        frames.append(sse_event(None, {"error": error}))
        return frames
    if script.terminal is Terminal.NONE:
        return frames
    if script.terminal is Terminal.LIMIT:
        finish = "length"
    else:
        finish = "tool_calls" if script.calls else "stop"
    chunk({}, finish)
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    frames.append(sse_event(None, {**base, "choices": [], "usage": usage}))
    frames.append(b"data: [DONE]\n\n")
    return frames


# --- Anthropic Messages ----------------------------------------------------------------------


def _anthropic(script: Script, serial: int) -> list[bytes]:
    frames: list[bytes] = []

    def emit(name: str, payload: dict[str, Any]) -> None:
        frames.append(sse_event(name, {"type": name, **payload}))

    message: dict[str, Any] = {
        "id": f"msg_hostile_{serial}",
        "type": "message",
        "role": "assistant",
        "model": script.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 1},
    }
    emit("message_start", {"message": message})
    index = 0
    if script.text is not None:
        opening = {"type": "text", "text": ""}
        emit("content_block_start", {"index": 0, "content_block": opening})
        delta = {"type": "text_delta", "text": script.text}
        emit("content_block_delta", {"index": 0, "delta": delta})
        emit("content_block_stop", {"index": 0})
        index = 1
    for number, call in enumerate(script.calls):
        last = number == len(script.calls) - 1
        first_half, second_half = call.halves()
        block = {
            "type": "tool_use",
            "id": f"toolu_hostile_{serial}_{number}",
            "name": call.name,
            "input": {},
        }
        emit("content_block_start", {"index": index, "content_block": block})
        for piece in (first_half, second_half):
            delta = {"type": "input_json_delta", "partial_json": piece}
            emit("content_block_delta", {"index": index, "delta": delta})
            if script.cut and last:
                return [*frames, PAUSE]
        emit("content_block_stop", {"index": index})
        frames.append(PAUSE)
        index += 1
    if script.terminal is Terminal.ERROR:
        error = {"type": "overloaded_error", "message": "Overloaded (hostile)"}
        emit("error", {"error": error})
        return frames
    if script.terminal is Terminal.NONE:
        return frames
    if script.terminal is Terminal.LIMIT:
        stop = "max_tokens"
    elif script.terminal is Terminal.MALFORMED:
        stop = "malformed_tool_use"  # Bedrock's own verdict on the call
    else:
        stop = "tool_use" if script.calls else "end_turn"
    finish: dict[str, Any] = {"stop_reason": stop, "stop_sequence": None}
    emit("message_delta", {"delta": finish, "usage": {"output_tokens": 20}})
    emit("message_stop", {})
    return frames


# --- Gemini native ---------------------------------------------------------------------------


def _gemini(script: Script, serial: int) -> list[bytes]:
    frames: list[bytes] = []
    usage = {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120}

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": script.model,
            "responseId": f"hostile-{serial}",
        }

    if script.text is not None:
        frames.append(sse_event(None, chunk([{"text": script.text}])))
    for number, call in enumerate(script.calls):
        last = number == len(script.calls) - 1
        part = {"functionCall": {"name": call.name, "args": call.argument_object()}}
        frame = sse_event(None, chunk([part]))
        if script.cut and last:
            return [*frames, frame[: len(frame) // 2], PAUSE]
        frames.append(frame)
        frames.append(PAUSE)
    if script.terminal is Terminal.ERROR:
        error = {
            "code": 503,
            "message": "hostile: the model is overloaded",
            "status": "UNAVAILABLE",
        }
        frames.append(sse_event(None, {"error": error}))
        return frames
    if script.terminal is Terminal.NONE:
        return frames
    finish = "MAX_TOKENS" if script.terminal is Terminal.LIMIT else "STOP"
    frames.append(sse_event(None, chunk([{"text": ""}], finish)))
    return frames


def _bedrock(script: Script, serial: int) -> list[bytes]:
    return eventstream_wire.bedrock(script, serial, _anthropic)


RENDERERS: dict[str, Callable[[Script, int], list[bytes]]] = {
    "responses": _responses,
    "chat": _chat,
    "anthropic": _anthropic,
    "gemini": _gemini,
    "bedrock": _bedrock,
    "converse": eventstream_wire.converse,
}
# A stream's media type, where it is not SSE.
CONTENT_TYPES = {
    "bedrock": "application/vnd.amazon.eventstream",
    "converse": "application/vnd.amazon.eventstream",
}


def _converse_whole(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 100, "outputTokens": 20, "totalTokens": 120},
        "metrics": {"latencyMs": 10},
    }


def whole_text(protocol: str, text: str, model: str, serial: int) -> dict[str, Any]:
    """A whole (non-streaming) text answer in `protocol`."""
    if protocol == "converse":
        return _converse_whole([{"text": text}], "end_turn")
    if protocol == "responses":
        message: dict[str, Any] = {
            "id": f"msg_hostile_{serial}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return {
            "id": f"resp_hostile_{serial}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": [message],
            "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
        }
    if protocol == "chat":
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }
        return {
            "id": f"chatcmpl-hostile-{serial}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
    if protocol in ("anthropic", "bedrock"):
        return {
            "id": f"msg_hostile_{serial}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
    candidate = {
        "content": {"role": "model", "parts": [{"text": text}]},
        "finishReason": "STOP",
        "index": 0,
    }
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 1, "totalTokenCount": 11}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": model}


def whole_calls(protocol: str, script: Script, serial: int) -> dict[str, Any]:
    """A whole (non-streaming) answer with the script's calls, its stop reason the success
    or (`Terminal.LIMIT`) the output-token limit."""
    limit = script.terminal is Terminal.LIMIT
    if protocol == "converse":
        uses = [
            {
                "toolUse": {
                    "toolUseId": f"tooluse_hostile_{serial}_{number}",
                    "name": call.name,
                    "input": call.argument_object(),
                }
            }
            for number, call in enumerate(script.calls)
        ]
        malformed = script.terminal is Terminal.MALFORMED
        stop = "max_tokens" if limit else "malformed_tool_use" if malformed else "tool_use"
        return _converse_whole(uses, stop)
    if protocol == "responses":
        output: list[dict[str, Any]] = []
        for number, call in enumerate(script.calls):
            item: dict[str, Any] = {
                "id": f"fc_hostile_{serial}_{number}",
                "type": "custom_tool_call" if call.custom else "function_call",
                "status": "completed",
                "call_id": f"call_hostile_{serial}_{number}",
                "name": call.name,
                "input" if call.custom else "arguments": call.arguments,
            }
            if call.namespace is not None:
                item["namespace"] = call.namespace
            output.append(item)
        return {
            "id": f"resp_hostile_{serial}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if limit else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if limit else None,
            "model": script.model,
            "output": output,
            "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
        }
    if protocol == "chat":
        calls = [
            {
                "id": f"call_hostile_{serial}_{number}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for number, call in enumerate(script.calls)
        ]
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": None, "tool_calls": calls},
            "finish_reason": "length" if limit else "tool_calls",
        }
        return {
            "id": f"chatcmpl-hostile-{serial}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": script.model,
            "choices": [choice],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }
    if protocol in ("anthropic", "bedrock"):
        blocks = [
            {
                "type": "tool_use",
                "id": f"toolu_hostile_{serial}_{number}",
                "name": call.name,
                "input": call.argument_object(),
            }
            for number, call in enumerate(script.calls)
        ]
        return {
            "id": f"msg_hostile_{serial}",
            "type": "message",
            "role": "assistant",
            "model": script.model,
            "content": blocks,
            "stop_reason": "max_tokens"
            if limit
            else "malformed_tool_use"
            if script.terminal is Terminal.MALFORMED
            else "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
    parts = [
        {"functionCall": {"name": call.name, "args": call.argument_object()}}
        for call in script.calls
    ]
    candidate = {
        "content": {"role": "model", "parts": parts},
        "finishReason": "MAX_TOKENS" if limit else "STOP",
        "index": 0,
    }
    usage = {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": script.model}


def whole_error(protocol: str) -> tuple[int, dict[str, Any]]:
    """The protocol's transient HTTP error: its status and body."""
    if protocol in ("bedrock", "converse"):
        return 503, {"message": "hostile: service unavailable"}
    if protocol == "anthropic":
        error = {"type": "overloaded_error", "message": "Overloaded (hostile)"}
        return 529, {"type": "error", "error": error}
    if protocol == "gemini":
        return 503, {"error": {"code": 503, "message": "hostile", "status": "UNAVAILABLE"}}
    return 500, {"error": {"message": "hostile server error", "type": "server_error"}}
