"""Hand-written Gemini chunks and the runners that decode them through the real gate, shared
by the decoder tests (each module follows lines of the completion rule)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from lockgate.conversation import ToolSpec
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import StreamEvent
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import Decision, ResponseGate
from lockgate.providers.gemini.decoder import GeminiDecoder
from lockgate.providers.gemini.render import GeminiRenderer
from lockgate.scripted.script import fragments
from lockgate.sse import SSEDecoder

EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
EDIT_JSON = json.dumps(EDIT, separators=(",", ":"))
LAB = GeminiRenderer()
SIG = "EpwICpkIAXLI2nx-signature=="
USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


def body(chunks: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join(LAB.frame(chunk) for chunk in chunks)


def decode_all(chunks: Sequence[Mapping[str, Any]]) -> list[StreamEvent]:
    """Every normalized event of a stream (end of body included)."""
    sse = SSEDecoder()
    decoder = GeminiDecoder()
    out: list[StreamEvent] = []
    for event in sse.feed(body(chunks)) + sse.finish():
        out.extend(decoder.decode(event))
    out.extend(decoder.end_of_stream())
    return out


def decide(
    chunks: Sequence[Mapping[str, Any]] | bytes,
    tools: Sequence[ToolSpec] = ALL_TOOLS,
    pieces: Sequence[int] | None = None,
) -> Decision:
    """Bytes → SSE → GeminiDecoder → ResponseGate, as the client runs them: the decision is
    released only after the body ended cleanly."""
    payload = chunks if isinstance(chunks, bytes) else body(chunks)
    sse = SSEDecoder()
    decoder = GeminiDecoder()
    gate = ResponseGate(tools, lambda event: None)
    decision: Decision | None = None
    for piece in [payload] if pieces is None else list(fragments(payload, pieces)):
        for event in sse.feed(piece):
            for normalized in decoder.decode(event):
                decision = gate.accept(normalized) or decision
    for event in sse.finish():
        for normalized in decoder.decode(event):
            decision = gate.accept(normalized) or decision
    assert decision is None, "a decision before the end of the body"
    for normalized in decoder.end_of_stream():
        decision = gate.accept(normalized) or decision
    if decision is None:
        raise ResponseFailure(FailureKind.STREAM_ENDED, "no terminal event")
    return decision


def fails(
    chunks: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec] = ALL_TOOLS
) -> ResponseFailure:
    with pytest.raises(ResponseFailure) as caught:
        decide(chunks, tools)
    return caught.value


def chunk(
    *parts: Mapping[str, Any],
    finish: str | None = None,
    index: int | None = 0,
    response_id: str | None = "resp-g1",
    usage: Mapping[str, Any] | None = USAGE,
    **candidate_fields: Any,
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}}
    if finish is not None:
        candidate["finishReason"] = finish
    if index is not None:
        candidate["index"] = index
    candidate.update(candidate_fields)
    payload: dict[str, Any] = {"candidates": [candidate]}
    if usage is not None:
        payload["usageMetadata"] = dict(usage)
    payload["modelVersion"] = "gemini-test"
    if response_id is not None:
        payload["responseId"] = response_id
    return payload


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"text": value, **extra}


def call(name: str = "edit", args: object = EDIT, **extra: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if args is not None:
        function["args"] = args
    function.update({k: v for k, v in extra.items() if k in ("id", "partialArgs", "willContinue")})
    part: dict[str, Any] = {"functionCall": function}
    part.update({k: v for k, v in extra.items() if k not in function})
    return part


EMPTY = text("")
