"""Hand-written Chat Completions chunks and a runner that feeds them through ChatDecoder and
the real gate, shared by the decoder tests (shapes: the wire facts in protocols.md §2/§2a)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import Event, StreamEvent
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import Decision, ResponseGate
from lockgate.providers.chat.decoder import ChatDecoder
from lockgate.sse import ServerSentEvent

DONE = "[DONE]"
EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
EDIT_JSON = json.dumps(EDIT)
READ_JSON = '{"path": "README.md"}'

Chunk = dict[str, Any] | str | ServerSentEvent


def sse(chunk: Chunk) -> ServerSentEvent:
    if isinstance(chunk, ServerSentEvent):
        return chunk
    if isinstance(chunk, str):
        return ServerSentEvent(None, chunk.encode())
    return ServerSentEvent(None, json.dumps(chunk).encode())


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    index: int = 0,
    chunk_id: str | None = "chatcmpl-1",
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"object": "chat.completion.chunk", "model": "m", **extra}
    if chunk_id is not None:
        body["id"] = chunk_id
    body["choices"] = [{"index": index, "delta": delta or {}, "finish_reason": finish}]
    return body


def text(piece: str, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return chunk({"content": piece}, finish, **extra)


def fragment(
    index: int | None = 0,
    call_id: str | None = None,
    name: str | None = None,
    arguments: Any = None,
) -> dict[str, Any]:
    """One `delta.tool_calls[]` entry; fields left None are omitted (the first fragment
    of a call, with an id, also carries `type: function`)."""
    entry: dict[str, Any] = {}
    if index is not None:
        entry["index"] = index
    if call_id is not None:
        entry["id"] = call_id
        entry["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        entry["function"] = function
    return entry


def calls(*fragments: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return chunk({"tool_calls": list(fragments)}, finish, **extra)


def usage_chunk(prompt: int = 10, completion: int = 5, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, **extra},
    }


def edit_call(index: int = 0, call_id: str = "call_1") -> list[dict[str, Any]]:
    half = len(EDIT_JSON) // 2
    return [
        calls(fragment(index, call_id, "edit", "")),
        calls(fragment(index, arguments=EDIT_JSON[:half])),
        calls(fragment(index, arguments=EDIT_JSON[half:])),
    ]


class Outcome:
    def __init__(self, result: Decision | ResponseFailure, seen: list[Event]) -> None:
        self.result = result
        self.seen = seen

    @property
    def decision(self) -> Decision:
        assert isinstance(self.result, Decision), f"expected a decision, got {self.result}"
        return self.result

    @property
    def failure(self) -> ResponseFailure:
        assert isinstance(self.result, ResponseFailure), f"expected a failure: {self.result}"
        return self.result

    def calls(self) -> list[tuple[str, str, dict[str, object]]]:
        return [(c.id, c.name, dict(c.arguments)) for c in self.decision.message.tool_calls]


def run(*chunks: Chunk, eof: bool = True) -> Outcome:
    """Feed hand-written chunks through ChatDecoder and a ResponseGate(ALL_TOOLS); `eof`:
    the body then ends cleanly (`end_of_stream`). Everything is fed, even after a decision
    (a later event must fail the response, as in the client)."""
    seen: list[Event] = []
    gate = ResponseGate(ALL_TOOLS, seen.append)
    decoder = ChatDecoder()
    decision: Decision | None = None
    try:
        for item in chunks:
            for event in decoder.decode(sse(item)):
                decision = gate.accept(event) or decision
        if eof:
            for event in decoder.end_of_stream():
                decision = gate.accept(event) or decision
    except ResponseFailure as exc:
        return Outcome(exc, seen)
    if decision is None:
        return Outcome(ResponseFailure(FailureKind.STREAM_ENDED, "client: no terminal"), seen)
    return Outcome(decision, seen)


def decode_all(*chunks: Chunk, eof: bool = False) -> list[StreamEvent]:
    """The decoder's own events (no gate)."""
    decoder = ChatDecoder()
    out: list[StreamEvent] = []
    for item in chunks:
        out.extend(decoder.decode(sse(item)))
    if eof:
        out.extend(decoder.end_of_stream())
    return out


def terminal(events: Sequence[StreamEvent]) -> StreamEvent:
    return events[-1]
