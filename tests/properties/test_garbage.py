"""Garbage events, for every protocol: decoders and the gate only raise ResponseFailure.

Each registered provider's stream decoder, and the gate behind it, fed random bytes, random
JSON, deep nesting and mutated real events, return events or raise `ResponseFailure`, never
anything else; so does the SSE decoder fed random bytes.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.errors import ResponseFailure
from lockgate.events import ignore_event
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import ResponseGate
from lockgate.providers import PROVIDERS
from lockgate.providers.base import CodecOptions
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.sse import ServerSentEvent, SSEDecoder

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)


def _real_events() -> list[dict[str, Any]]:
    builder = ResponseBuilder("resp_fuzz").created().text("msg", "Hello there", 3)
    builder.reasoning(
        {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "thinking"}],
        }
    )
    builder.call("fc_1", "call_1", "edit", {"path": "calculator.py", "old": "a", "new": "b"})
    builder.error("boom", "bad", nested=True)
    return builder.completed().events


REAL_EVENTS = _real_events()
FIELD_NAMES = sorted({key for event in REAL_EVENTS for key in event} | {"item", "response"})


@st.composite
def mutated_event(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(json.dumps(draw(st.sampled_from(REAL_EVENTS))))
    for _ in range(draw(st.integers(0, 3))):
        target = event
        if "response" in event and draw(st.booleans()) and isinstance(event["response"], dict):
            target = event["response"]
        elif "item" in event and draw(st.booleans()) and isinstance(event["item"], dict):
            target = event["item"]
        key = draw(st.sampled_from([*target, *FIELD_NAMES, "status", "output", "id"]))
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(json_values)
    return event


def _deep(levels: int) -> bytes:
    return (
        b'{"type":"response.output_text.delta","delta":"x","n":'
        + b"[" * levels
        + b"]" * levels
        + b"}"
    )


sse_data = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_event().map(lambda e: json.dumps(e).encode()),
    mutated_event().map(lambda e: json.dumps(e).encode()[: len(json.dumps(e)) // 2]),
    st.integers(30, 3000).map(_deep),
    st.sampled_from([b"[DONE]", b"", b"null", b"NaN", b'{"type": 1}', b"\xff\xfe", b'"\\ud800"']),
)
sse_event = st.builds(
    ServerSentEvent,
    st.one_of(st.none(), st.sampled_from([e["type"] for e in REAL_EVENTS]), st.text(max_size=8)),
    sse_data,
)
DECODER_FACTORIES: dict[str, Any] = {
    name: (lambda entry=entry: entry.make_codec(CodecOptions("m")).new_decoder())
    for name, entry in PROVIDERS.items()
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.parametrize("name", list(DECODER_FACTORIES))
@given(events=st.lists(sse_event, max_size=12), ends=st.booleans())
def test_decoders_and_the_gate_only_ever_raise_response_failure(
    name: str, events: list[ServerSentEvent], ends: bool
) -> None:
    decoder = DECODER_FACTORIES[name]()
    gate = ResponseGate(ALL_TOOLS, ignore_event)
    gate_open = True
    try:
        for sse in events:
            for event in decoder.decode(sse):
                if gate_open:
                    try:
                        gate.accept(event)
                    except ResponseFailure:
                        gate_open = False
        if ends:
            for event in decoder.end_of_stream():
                if gate_open:
                    with contextlib.suppress(ResponseFailure):
                        gate.accept(event)
    except ResponseFailure:
        pass


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.sampled_from([b"\r", b"\n", b"\r\n", b"data: ", b"event: x\n", b":", b"\n\n"]),
        ),
        max_size=30,
    )
)
def test_the_sse_decoder_only_ever_raises_response_failure(chunks: list[bytes]) -> None:
    decoder = SSEDecoder(max_event_bytes=256)
    with contextlib.suppress(ResponseFailure):
        for chunk in chunks:
            for event in decoder.feed(chunk):
                assert isinstance(event.data, bytes)
        decoder.finish()
