"""Memory bounds of the hot path, as deterministic properties (bounds, not timings).

- A gate fed its bounds in 1-character deltas (text, and every call's arguments) retains at
  most 2 bytes per character it holds; so does each protocol's whole pipeline (SSE decoder,
  provider decoder, gate) fed one frame per chunk.
- Empty deltas retain nothing that grows, in the gate and through every decoder.

(The pieces the hot path is built from keep their semantics: `TextBuffer` and `fast_init` in
test_events.py, `parse_event` in test_jsonlimits.py.)
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable

import pytest
from benchmarks._common import advance
from benchmarks.bounds import started_gate

from lockgate.codec import FramedCodec, Framer
from lockgate.events import (
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
    ignore_event,
)
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import GateLimits, ResponseGate
from lockgate.providers import PROVIDERS, CodecOptions
from lockgate.providers.bedrock.render import frame_bytes
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.sse import SSEDecoder

LIMITS = GateLimits()
PROTOCOLS = tuple(PROVIDERS)


def retained_by(feed: Callable[[Callable[[], None]], None]) -> list[int]:
    """Run `feed(mark)` under tracemalloc; each `mark()` records the bytes allocated since
    the start and still alive (after a collection)."""
    marks: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]

        def mark() -> None:
            gc.collect()
            marks.append(tracemalloc.get_traced_memory()[0] - before)

        feed(mark)
    finally:
        tracemalloc.stop()
    return marks


# --- the gate at its bounds ----------------------------------------------------------------


@pytest.mark.parametrize("fragment", ["x", "é", "✓"])
def test_gate_at_its_text_bound_retains_at_most_twice_the_characters(fragment: str) -> None:
    gate = started_gate()
    delta = TextDelta(fragment)
    count = LIMITS.max_text_chars

    def feed(mark: Callable[[], None]) -> None:
        for _ in range(count):
            gate.accept(delta)
        mark()

    (retained,) = retained_by(feed)
    # What the characters themselves need (1 byte each up to U+00FF, 2 up to U+FFFF).
    width = 1 if ord(fragment) < 256 else 2
    assert retained <= 2 * width * count, retained
    assert gate.partial_text == fragment * count


def test_gate_at_its_argument_bounds_retains_at_most_twice_the_characters() -> None:
    gate = started_gate()
    count = LIMITS.max_argument_chars

    def feed(mark: Callable[[], None]) -> None:
        for number in range(LIMITS.max_calls):
            key = f"fc_{number}"
            gate.accept(ToolCallStarted(key, f"call_{number}", "edit"))
            delta = ToolArgumentsDelta(key, "x")
            for _ in range(count):
                gate.accept(delta)
        mark()

    (retained,) = retained_by(feed)
    assert retained <= 2 * LIMITS.max_calls * count, retained


def test_gate_fragments_of_two_characters_stay_compact() -> None:
    """Fragments that are separate objects (not one-character singletons) are joined as
    they arrive: no object per fragment is kept."""
    gate = started_gate()
    count = LIMITS.max_text_chars // 2

    def feed(mark: Callable[[], None]) -> None:
        for number in range(count):
            gate.accept(TextDelta(f"{number % 100:02d}"))
        mark()

    (retained,) = retained_by(feed)
    assert retained <= 2 * 2 * count, retained


# --- every protocol's pipeline ------------------------------------------------------------


def bound_reply(text: int, calls: int, arguments: int) -> Reply:
    body = json.dumps({"path": "calculator.py", "old": "", "new": ""})
    filler = "x" * (arguments - len(body))
    call_text = json.dumps({"path": "calculator.py", "old": filler, "new": ""})
    parts: list[Say | Call] = [Say("x" * text, text)]
    parts += [Call(f"call_{n}", "edit", call_text, pieces=arguments) for n in range(calls)]
    return Reply("resp_bounds", tuple(parts))


def split_at_last_delta(frames: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    # The last frame that carries content, in any protocol's words (Gemini sends whole
    # chunks: text parts and whole calls).
    markers = (b"delta", b'"tool_calls"', b'"content":"x"', b'"text":"x"', b'"functionCall"')
    last = max(i for i, frame in enumerate(frames) if any(m in frame for m in markers))
    return frames[: last + 1], frames[last + 1 :]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_pipeline_retains_at_most_twice_the_characters_it_holds(protocol: str) -> None:
    """Text at its bound and two calls at theirs, all in 1-character deltas, one frame per
    chunk, measured before the terminal events; the response still completes."""
    text, calls, arguments = LIMITS.max_text_chars, 2, LIMITS.max_argument_chars
    lab = PROVIDERS[protocol].render()
    frames = [lab.frame(event) for event in lab.events(bound_reply(text, calls, arguments))]
    head, tail = split_at_last_delta(frames)
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model="bounds-model"))
    sse: Framer = (
        codec.new_framer(4 * 1024 * 1024) if isinstance(codec, FramedCodec) else SSEDecoder()
    )
    decoder = codec.new_decoder()
    gate = ResponseGate(ALL_TOOLS, ignore_event)
    warm = 8  # first frames outside the measurement (first-use caches)
    for frame in head[:warm]:
        advance(sse.feed(frame), decoder, gate, None)

    def feed(mark: Callable[[], None]) -> None:
        for frame in head[warm:]:
            advance(sse.feed(frame), decoder, gate, None)
        mark()

    (retained,) = retained_by(feed)
    assert retained <= 2 * (text + calls * arguments), retained
    decision = None
    for frame in tail:
        decision = advance(sse.feed(frame), decoder, gate, decision)
    for event in decoder.end_of_stream():
        decision = gate.accept(event) or decision
    assert decision is not None
    assert len(decision.message.tool_calls) == calls


# --- empty deltas --------------------------------------------------------------------------


def test_a_million_empty_deltas_retain_nothing_that_grows() -> None:
    gate = started_gate()
    gate.accept(ToolCallStarted("fc_1", "call_1", "edit"))
    empties: tuple[StreamEvent, ...] = (
        TextDelta(""),
        ToolArgumentsDelta("fc_1", ""),
        ReasoningDelta(""),
    )
    total = 1_000_000

    def feed(mark: Callable[[], None]) -> None:
        for number in range(total):
            gate.accept(empties[number % 3])
            if number + 1 in (total // 10, total):
                mark()

    early, late = retained_by(feed)
    assert late - early <= 256, (early, late)
    assert gate.partial_text == ""


EMPTY_TEXT = {
    "responses": (
        [
            b'event: response.created\ndata: {"type":"response.created","response":'
            b'{"id":"r","status":"in_progress","output":[]}}\n\n'
        ],
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"item_id":"m","output_index":0,"content_index":0,"delta":""}\n\n',
    ),
    "chat": (
        [],
        b'data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":""},'
        b'"finish_reason":null}]}\n\n',
    ),
    "anthropic": (
        [
            b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
            b'"content":[]}}\n\n',
            b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
            b'"content_block":{"type":"text","text":""}}\n\n',
        ],
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":""}}\n\n',
    ),
    "gemini": (
        [],
        b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":""}]}}],'
        b'"responseId":"g"}\r\n\r\n',
    ),
    "bedrock": (  # binary event-stream messages
        [frame_bytes({"type": "messageStart", "role": "assistant"})],
        frame_bytes({"type": "contentBlockDelta", "contentBlockIndex": 0, "delta": {"text": ""}}),
    ),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_empty_text_deltas_through_each_pipeline_retain_nothing(protocol: str) -> None:
    prelude, frame = EMPTY_TEXT[protocol]
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model="bounds-model"))
    sse: Framer = (
        codec.new_framer(4 * 1024 * 1024) if isinstance(codec, FramedCodec) else SSEDecoder()
    )
    decoder = codec.new_decoder()
    gate = ResponseGate(ALL_TOOLS, ignore_event)
    for first in [*prelude, frame, frame]:
        advance(sse.feed(first), decoder, gate, None)
    total = 100_000

    def feed(mark: Callable[[], None]) -> None:
        for number in range(total):
            advance(sse.feed(frame), decoder, gate, None)
            if number + 1 in (total // 10, total):
                mark()

    early, late = retained_by(feed)
    assert late - early <= 256, (early, late)
