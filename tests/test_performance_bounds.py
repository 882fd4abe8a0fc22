"""Memory bounds of the hot path, as deterministic properties (bounds, not timings).

- A gate fed its bounds in 1-character deltas (text, and every call's arguments) retains at
  most 2 bytes per character it holds; so does each protocol's whole pipeline (SSE decoder,
  provider decoder, gate) fed one frame per chunk.
- Empty deltas retain nothing that grows, in the gate and through every decoder.
- The pieces the hot path is built from keep their semantics: `TextBuffer` is the joined
  text with O(log n) blocks; `parse_event` (jiter first) gives exactly the standard
  library's answer or error; events built by `fast_init` keep their dataclass signature and
  value semantics.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import itertools
import json
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from benchmarks._common import advance
from benchmarks.bounds import started_gate
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate import events as events_module
from lockgate.events import (
    ReasoningDelta,
    StreamEvent,
    TextBuffer,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
    fast_init,
    ignore_event,
)
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import GateLimits, ResponseGate
from lockgate.jsonlimits import parse_event, parse_json
from lockgate.providers import PROVIDERS, CodecOptions
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.sse import ServerSentEvent, SSEDecoder

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
    markers = (b"delta", b'"tool_calls"', b'"content":"x"')
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
    sse = SSEDecoder()
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
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_empty_text_deltas_through_each_pipeline_retain_nothing(protocol: str) -> None:
    prelude, frame = EMPTY_TEXT[protocol]
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model="bounds-model"))
    sse = SSEDecoder()
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


# --- the pieces ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=70), max_size=600))
def test_text_buffer_is_the_joined_text_in_few_blocks(fragments: list[str]) -> None:
    buffer = TextBuffer()
    for fragment in fragments:
        buffer.append(fragment)
        blocks = buffer._blocks
        # Block lengths at least halve from one block to the next: O(log n) blocks.
        assert all(len(a) >= 2 * len(b) for a, b in itertools.pairwise(blocks))
        assert len(buffer._pending) < TextBuffer.FOLD
    assert buffer.chars == sum(map(len, fragments))
    assert buffer.value() == "".join(fragments)
    buffer.append("tail")
    assert buffer.value() == "".join(fragments) + "tail"


def reference_parse(data: bytes) -> tuple[str, str]:
    """The standard library's answer (the behaviour before jiter): value repr or error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ("error", "")
    try:
        return ("value", repr(parse_json(text, 64)))
    except ValueError:
        return ("error", "")


def our_parse(data: bytes) -> tuple[str, str]:
    try:
        return ("value", repr(parse_event(data)))
    except ValueError:
        return ("error", "")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
JSON_BYTES = st.sampled_from(list(b'{}[]",:0123456789.eE+-truefalsnNaI \t\n\r\\u\x00\xa0\xff\xc3'))


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(
        JSON_VALUES.map(lambda value: json.dumps(value).encode()),
        JSON_VALUES.map(
            lambda value: json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
        ),
        st.lists(JSON_BYTES, max_size=40).map(bytes),
        st.binary(max_size=40),
    )
)
def test_parse_event_gives_the_standard_librarys_answer(data: bytes) -> None:
    assert our_parse(data) == reference_parse(data)


@pytest.mark.parametrize(
    "data",
    [
        b'"\\ud800"',  # a lone surrogate escape: jiter refuses, the standard library accepts
        b"[" * 65 + b"]" * 65,  # one level past the bound
        b"[" * 64 + b"]" * 64,
        b"[" * 300 + b"]" * 300,  # past jiter's own recursion limit
        b'{"a": 1}  \n',
        b'\n {"a": 1}',
        b"NaN",
        b"1" * 5000,
        b'{"a":"\xed\xa0\x80"}',
        b'{"a":1,"b":2,"a":3}',  # a duplicate key: the last wins, in first-seen order
    ],
)
def test_parse_event_edge_cases_match_the_standard_library(data: bytes) -> None:
    assert our_parse(data) == reference_parse(data)


def fast_event_classes() -> Iterator[type[Any]]:
    for value in vars(events_module).values():
        if (
            isinstance(value, type)
            and dataclasses.is_dataclass(value)
            and value.__module__ == events_module.__name__
        ):
            yield value
    yield ServerSentEvent


@pytest.mark.parametrize("cls", list(fast_event_classes()), ids=lambda cls: cls.__name__)
def test_fast_init_keeps_the_dataclass_signature(cls: type[Any]) -> None:
    """Parameters in field order (kw-only ones after `*`), with the fields' defaults."""
    fields = dataclasses.fields(cls)
    expected = [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY
            if field.kw_only
            else inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=inspect.Parameter.empty
            if field.default is dataclasses.MISSING
            else field.default,
        )
        for field in fields
    ]
    expected.sort(key=lambda p: p.kind)  # kw-only after the positional ones, stable
    parameters = list(inspect.signature(cls).parameters.values())
    assert [(p.name, p.kind, p.default) for p in parameters] == [
        (p.name, p.kind, p.default) for p in expected
    ]


def test_fast_init_keeps_value_semantics() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Base:
        response_id: str | None = None

    @dataclasses.dataclass(frozen=True, slots=True)
    class Plain(Base):
        text: str
        kind: str = "summary"

    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Fast(Base):
        text: str
        kind: str = "summary"

    for args, kwargs in [(("a",), {}), (("a", "raw"), {"response_id": "r"}), ((), {"text": "b"})]:
        plain, fast = Plain(*args, **kwargs), Fast(*args, **kwargs)
        assert repr(fast) == repr(plain).replace("Plain", "Fast")
        assert fast == Fast(*args, **kwargs)
        assert hash(fast) == hash(Fast(*args, **kwargs))
        assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
        assert dataclasses.replace(fast, text="z") == Fast(
            "z", fast.kind, response_id=fast.response_id
        )
    assert Fast("a") != cast(Any, Plain("a"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        Fast("a").text = "b"  # type: ignore[misc]
    bad: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {}),
        (("a", "b", "c"), {}),
        (("a",), {"nope": 1}),
    ]
    for bad_args, bad_kwargs in bad:
        with pytest.raises(TypeError):
            Fast(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError):
            Plain(*bad_args, **bad_kwargs)


def test_fast_init_refuses_what_it_cannot_copy() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        text: str

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithPostInit:
        text: str

        def __post_init__(self) -> None:
            pass

    for cls in (NoSlots, WithPostInit):
        with pytest.raises(TypeError):
            fast_init(cls)


def test_chat_reasoning_details_are_bounded_while_they_stream() -> None:
    """Merged `reasoning_details` (concatenated `data`, which no event shows) are bounded
    as they arrive, not only when the response completes."""
    from lockgate.errors import FailureKind, ResponseFailure
    from lockgate.providers.chat.decoder import MAX_REASONING_DETAILS_CHARS, ChatDecoder

    decoder = ChatDecoder()
    piece = "d" * ((1 << 20) - 64)  # room for the entry's other fields, counted too
    chunk = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "reasoning": "r",
                    "reasoning_details": [{"type": "reasoning.encrypted", "data": piece}],
                },
            }
        ],
    }
    frame = ServerSentEvent(None, json.dumps(chunk).encode())
    fits = MAX_REASONING_DETAILS_CHARS // len(piece)
    for _ in range(fits):
        decoder.decode(frame)
    with pytest.raises(ResponseFailure) as caught:
        decoder.decode(frame)
    assert caught.value.kind is FailureKind.BOUND_EXCEEDED
