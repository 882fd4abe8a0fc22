"""Scripted provider turns: what a (mis)behaving provider does for each request.

A script is a list of turns, one per request the client makes. A turn either fails the
opening (an HTTP status with a body and headers, or a connection error) or streams native
events, optionally followed by a fault. The same scripts drive the in-process replay and
the loopback HTTP server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

StreamEnd = Literal["eof", "hang"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One request's scripted answer."""

    events: tuple[Mapping[str, Any], ...] = ()
    status: int = 200
    body: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    connection_error: bool = False
    end: StreamEnd = "eof"  # after the events: end the body, or go silent until cancelled
    close_fails: bool = False  # the in-process stream's close raises


def sse_bytes(event: Mapping[str, Any]) -> bytes:
    """One native event as an SSE frame (`event:` line, `data:` line, blank line)."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


def fragments(payload: bytes, sizes: Sequence[int] = (1, 7, 3, 29, 64, 5, 256)) -> Iterator[bytes]:
    """Cut bytes at deterministic, uneven boundaries (inside lines and UTF-8 characters)."""
    position = 0
    index = 0
    while position < len(payload):
        size = sizes[index % len(sizes)]
        yield payload[position : position + size]
        position += size
        index += 1


class ResponseBuilder:
    """Authors a realistic Responses event stream: sequence numbers, item ids, content
    parts, argument fragments and per-item `.done` events, as the live API sends them."""

    def __init__(self, response_id: str, model: str = "gpt-4.1-mini") -> None:
        self.response_id = response_id
        self.model = model
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def _emit(self, event: dict[str, Any]) -> ResponseBuilder:
        event["sequence_number"] = len(self.events)
        self.events.append(event)
        return self

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": self.response_id,
            "object": "response",
            "model": self.model,
            "status": status,
            "output": list(self.output) if status != "in_progress" else [],
            **extra,
        }

    def created(self, response_id: str | None = None) -> ResponseBuilder:
        response = self._response("in_progress")
        if response_id is not None:
            response["id"] = response_id
        self._emit({"type": "response.created", "response": response})
        return self._emit(
            {"type": "response.in_progress", "response": self._response("in_progress")}
        )

    def text(self, item_id: str, text: str, pieces: int = 4) -> ResponseBuilder:
        index = len(self.output)
        self._emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {
                    "id": item_id,
                    "type": "message",
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                },
            }
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        self._emit(
            {
                "type": "response.content_part.added",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "part": part,
            }
        )
        for piece in _split(text, pieces):
            self._emit(
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                    "logprobs": [],
                }
            )
        self._emit(
            {
                "type": "response.output_text.done",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "text": text,
            }
        )
        done_part = {"type": "output_text", "text": text, "annotations": []}
        self._emit(
            {
                "type": "response.content_part.done",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "part": done_part,
            }
        )
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

    def call(
        self,
        item_id: str,
        call_id: str,
        name: str,
        arguments: str | Mapping[str, Any],
        pieces: int = 5,
        *,
        finish: bool = True,
    ) -> ResponseBuilder:
        """A function call item; with `finish=False` the stream stops mid-arguments."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        index = len(self.output)
        self._emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {
                    "id": item_id,
                    "type": "function_call",
                    "status": "in_progress",
                    "call_id": call_id,
                    "name": name,
                    "arguments": "",
                },
            }
        )
        for piece in _split(text, pieces):
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
        item = {
            "id": item_id,
            "type": "function_call",
            "status": "completed",
            "call_id": call_id,
            "name": name,
            "arguments": text,
        }
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def output_item(self, item: dict[str, Any]) -> ResponseBuilder:
        """An output item of another type (e.g. reasoning), added and done at once."""
        index = len(self.output)
        self._emit({"type": "response.output_item.added", "output_index": index, "item": item})
        self.output.append(item)
        return self._emit(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )

    def completed(
        self, output: list[dict[str, Any]] | None = None, response_id: str | None = None
    ) -> ResponseBuilder:
        response = self._response("completed", usage=_usage(self.output))
        if output is not None:
            response["output"] = output
        if response_id is not None:
            response["id"] = response_id
        return self._emit({"type": "response.completed", "response": response})

    def incomplete(self, reason: str = "max_output_tokens") -> ResponseBuilder:
        response = self._response("incomplete", incomplete_details={"reason": reason})
        return self._emit({"type": "response.incomplete", "response": response})

    def failed(self, code: str, message: str) -> ResponseBuilder:
        response = self._response("failed", error={"code": code, "message": message})
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

    def turn(self, **options: Any) -> Turn:
        return Turn(events=tuple(self.events), **options)


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(output: list[dict[str, Any]]) -> dict[str, Any]:
    produced = sum(len(json.dumps(item)) for item in output) // 4
    return {
        "input_tokens": 320,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": produced,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 320 + produced,
    }
