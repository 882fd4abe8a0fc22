"""A minimal custom provider for the lab: its wire events are normalized events in JSON.

It exists to prove that the gate's lifecycle check holds for *any* provider: a provider
whose decoder faithfully reports what it was sent, including a success that breaks the
rules, still cannot get an invalid decision past the gate.

Wire events (`type` field): `started {response_id}`, `text {delta}`,
`call {item_id, call_id, name}`, `arguments {item_id, delta}`,
`completed {response_id, finish_reason, text, calls: [{item_id, call_id, name,
arguments}]}`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..conversation import Message, ToolSpec
from ..errors import FailureKind, ResponseFailure
from ..events import (
    OutputCall,
    OutputItem,
    OutputText,
    ResponseCompleted,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
)
from ..sse import ServerSentEvent


class NeutralCodec:
    provider = "lab-custom"

    def __init__(self, model: str) -> None:
        self.model = model

    @property
    def producer(self) -> str:
        return f"{self.provider}:{self.model}"

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        return {
            "model": self.model,
            "stream": True,
            "input": [{"role": m.role, "content": m.content} for m in history],
            "tools": [
                {"type": "function", "name": t.name, "parameters": dict(t.parameters)}
                for t in tools
            ],
        }

    def new_decoder(self) -> NeutralDecoder:
        return NeutralDecoder()


def _field(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name, "")
    if not isinstance(value, str):
        raise ResponseFailure(FailureKind.MALFORMED_EVENT, f"{name} must be a string")
    return value


class NeutralDecoder:
    def end_of_stream(self) -> Sequence[StreamEvent]:
        return ()

    def canonical_data(self) -> bytes | None:
        return None  # every event is read alike as it came

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        decoded = self._decode(event)
        return () if decoded is None else (decoded,)

    def _decode(self, event: ServerSentEvent) -> StreamEvent | None:
        try:
            payload = json.loads(event.data)
        except ValueError:
            raise ResponseFailure(FailureKind.MALFORMED_EVENT, "event is not JSON") from None
        if not isinstance(payload, dict):
            raise ResponseFailure(FailureKind.MALFORMED_EVENT, "event is not an object")
        kind = payload.get("type")
        if kind == "started":
            return ResponseStarted(response_id=_field(payload, "response_id"))
        if kind == "text":
            return TextDelta(_field(payload, "delta"))
        if kind == "call":
            return ToolCallStarted(
                _field(payload, "item_id"), _field(payload, "call_id"), _field(payload, "name")
            )
        if kind == "arguments":
            return ToolArgumentsDelta(_field(payload, "item_id"), _field(payload, "delta"))
        if kind == "completed":
            output: list[OutputItem] = []
            if payload.get("text"):
                output.append(OutputText(_field(payload, "text")))
            for call in payload.get("calls", []):
                output.append(
                    OutputCall(
                        _field(call, "item_id"),
                        _field(call, "call_id"),
                        _field(call, "name"),
                        _field(call, "arguments"),
                    )
                )
            finish = payload.get("finish_reason")
            return ResponseCompleted(
                finish if isinstance(finish, str) else None,
                None,
                tuple(output),
                response_id=_field(payload, "response_id"),
            )
        return None
