"""Bounds and per-chunk costs: retained memory at the bounds, empty deltas, the silence
watchdog, the SSE decoder's paths, event construction, argument progress.

Everything runs in memory (no network):

- retained memory at the bounds (tracemalloc): a gate fed its text bound in 1-character
  deltas and 8 calls x 16,000 1-character argument deltas; then the same (and the text
  bound alone) through each protocol's whole pipeline (SSE decoder + provider decoder +
  gate, one frame per chunk, the lab renderer's native frames), measured just before the
  terminal events: retained bytes per character held (target <= 2x);
- 1,000,000 empty deltas (text, arguments, reasoning): retained after 100,000 and after
  1,000,000 (target: nothing that grows); empty text deltas through each decoder too;
- the watchdog: timers scheduled on the loop while a 100,000-chunk stream is read (one per
  stream, whatever the chunk count), memory retained per chunk, the per-chunk CPU of
  `touch()` against an `asyncio.timeout` per read, and the idle timeout / deadline firing
  times (target: within 0.5 s of the setting);
- the SSE decoder: µs per event for one frame per chunk (the fast path), CRLF line ends and
  comments (the general path), 7-byte fragments;
- event construction: lockgate's events (`events.fast_init`) against the same frozen,
  slotted dataclass with its generated `__init__`;
- argument progress: events published for 16,000 1-character argument deltas.

Prints MET / NOT MET; exits 0 unless something failed to run.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/bounds.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import timeit
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from benchmarks._common import HISTORY, Report, advance, heading, lockgate_client, median
from benchmarks._streams import PROTOCOLS, edit_arguments
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import (
    Event,
    ReasoningDelta,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolArgumentProgress,
    ToolArgumentsDelta,
    ToolCallStarted,
    ignore_event,
)
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import GateLimits, ResponseGate
from lockgate.providers import PROVIDERS, CodecOptions
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.sse import ServerSentEvent, SSEDecoder

LIMITS = GateLimits()
TEXT_CHARS = LIMITS.max_text_chars
CALLS = LIMITS.max_calls
ARGUMENT_CHARS = LIMITS.max_argument_chars


# --- retained memory ------------------------------------------------------------------


def retained(feed: Callable[[], object]) -> tuple[int, object]:
    """Bytes still allocated (tracemalloc) after `feed()` runs, and what it returned (kept
    alive while measuring)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = feed()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before, kept


def started_gate() -> ResponseGate:
    gate = ResponseGate(ALL_TOOLS, ignore_event)
    gate.accept(ResponseStarted(response_id="resp_bound"))
    return gate


def gate_text() -> ResponseGate:
    gate = started_gate()
    delta = TextDelta("x")
    for _ in range(TEXT_CHARS):
        gate.accept(delta)
    return gate


def gate_arguments() -> ResponseGate:
    gate = started_gate()
    for number in range(CALLS):
        key = f"fc_{number}"
        gate.accept(ToolCallStarted(key, f"call_{number}", "edit"))
        delta = ToolArgumentsDelta(key, "x")
        for _ in range(ARGUMENT_CHARS):
            gate.accept(delta)
    return gate


def bound_reply(calls: int = CALLS) -> Reply:
    """The text bound in 1-character deltas, then `calls` calls of 16,000 argument
    characters in 1-character deltas."""
    arguments = edit_arguments(ARGUMENT_CHARS)
    parts = tuple(Call(f"call_{n}", "edit", arguments, pieces=ARGUMENT_CHARS) for n in range(calls))
    return Reply("resp_bound", (Say("x" * TEXT_CHARS, TEXT_CHARS), *parts))


def delta_frames(protocol: str, calls: int = CALLS) -> tuple[list[bytes], list[bytes]]:
    """The protocol's frames of `bound_reply`, split into (everything up to the last
    delta, the terminal rest)."""
    lab = PROVIDERS[protocol].render()
    frames = [lab.frame(event) for event in lab.events(bound_reply(calls))]
    markers = (b"delta", b'"tool_calls"', b'"content":"x"')
    last = max(i for i, frame in enumerate(frames) if any(m in frame for m in markers))
    return frames[: last + 1], frames[last + 1 :]


def pipeline_retained(protocol: str, calls: int = CALLS) -> tuple[float, int]:
    """Bytes retained per character by SSE decoder + provider decoder + gate, fed the
    bound reply (`calls` calls) one frame per chunk (measured before the terminal
    events), and the characters held."""
    head, tail = delta_frames(protocol, calls)
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model="bench-model"))

    def feed() -> tuple[SSEDecoder, Any, ResponseGate]:
        sse = SSEDecoder()
        decoder = codec.new_decoder()
        gate = ResponseGate(ALL_TOOLS, ignore_event)
        for frame in head:
            advance(sse.feed(frame), decoder, gate, None)
        return sse, decoder, gate

    size, kept = retained(feed)
    sse, decoder, gate = cast(tuple[SSEDecoder, Any, ResponseGate], kept)
    decision = None
    for frame in tail:  # the response still completes as it should
        decision = advance(sse.feed(frame), decoder, gate, decision)
    for event in decoder.end_of_stream():
        decision = gate.accept(event) or decision
    assert decision is not None
    assert len(decision.message.tool_calls) == calls
    chars = TEXT_CHARS + calls * ARGUMENT_CHARS
    return size / chars, chars


def empty_deltas(count: int) -> tuple[int, int]:
    """Bytes retained after 10% and after all of `count` rounds of empty text, argument
    and reasoning deltas."""
    gate = started_gate()
    gate.accept(ToolCallStarted("fc_1", "call_1", "edit"))
    events: tuple[StreamEvent, ...] = (
        TextDelta(""),
        ToolArgumentsDelta("fc_1", ""),
        ReasoningDelta(""),
    )
    marks: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for number in range(count):
            for event in events:
                gate.accept(event)
            if number + 1 in (count // 10, count):
                gc.collect()
                marks.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    return marks[0], marks[1]


EMPTY_TEXT_FRAMES = {
    "responses": (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":"","sequence_number":3}'
        b"\n\n"
    ),
    "chat": (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,'
        b'"delta":{"content":""},"finish_reason":null}]}\n\n'
    ),
    "anthropic": (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":""}}\n\n'
    ),
}
EMPTY_PRELUDE = {
    "responses": [
        b'event: response.created\ndata: {"type":"response.created","response":{"id":"r",'
        b'"status":"in_progress","output":[]}}\n\n'
    ],
    "chat": [],
    "anthropic": [
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
        b'"content":[]}}\n\n',
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n',
    ],
}


def empty_pipeline(protocol: str, count: int) -> tuple[int, int]:
    """Bytes retained after 10% and after all of `count` empty text deltas through the
    protocol's whole pipeline."""
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model="bench-model"))
    sse = SSEDecoder()
    decoder = codec.new_decoder()
    gate = ResponseGate(ALL_TOOLS, ignore_event)
    for frame in EMPTY_PRELUDE[protocol]:
        advance(sse.feed(frame), decoder, gate, None)
    frame = EMPTY_TEXT_FRAMES[protocol]
    marks: list[int] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for number in range(count):
            advance(sse.feed(frame), decoder, gate, None)
            if number + 1 in (count // 10, count):
                gc.collect()
                marks.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    return marks[0], marks[1]


def memory_section(report: Report) -> None:
    heading("retained memory at the bounds (tracemalloc)")
    size, _ = retained(gate_text)
    text_ratio = size / TEXT_CHARS
    print(f"  gate, {TEXT_CHARS:,} 1-char text deltas: {size:,} B = {text_ratio:.2f} B/char")
    size, _ = retained(gate_arguments)
    argument_ratio = size / (CALLS * ARGUMENT_CHARS)
    print(
        f"  gate, {CALLS} calls x {ARGUMENT_CHARS:,} 1-char argument deltas: {size:,} B = "
        f"{argument_ratio:.2f} B/char"
    )
    report.check(
        "gate at its text bound (1-char deltas): retained <= 2x the characters",
        text_ratio <= 2.0,
        f"{text_ratio:.2f} B/char",
    )
    report.check(
        "gate at its argument bounds (8 x 16,000 1-char deltas): retained <= 2x",
        argument_ratio <= 2.0,
        f"{argument_ratio:.2f} B/char",
    )
    for protocol in PROTOCOLS:
        ratio, chars = pipeline_retained(protocol)
        report.check(
            f"{protocol} pipeline (SSE + decoder + gate) at all bounds: retained <= 2x",
            ratio <= 2.0,
            f"{ratio:.2f} B/char over {chars:,} characters held",
        )
        ratio, chars = pipeline_retained(protocol, calls=0)
        report.check(
            f"{protocol} pipeline at the text bound alone: retained <= 2x",
            ratio <= 2.0,
            f"{ratio:.2f} B/char over {chars:,} characters held",
        )
    count = 1_000_000
    early, late = empty_deltas(count)
    report.check(
        f"{count:,} x 3 empty deltas (text, arguments, reasoning) into a gate: nothing grows",
        late - early <= 1024,
        f"retained {early:,} B after {count // 10:,}, {late:,} B after {count:,}",
    )
    for protocol in PROTOCOLS:
        count = 200_000
        early, late = empty_pipeline(protocol, count)
        report.check(
            f"{protocol}: {count:,} empty text deltas through the pipeline: nothing grows",
            late - early <= 1024,
            f"retained {early:,} B after {count // 10:,}, {late:,} B after {count:,}",
        )


# --- the watchdog -----------------------------------------------------------------------


class MemoryStream:
    """An in-memory body: `chunks` then `tail`, optionally paced; `stall` after it."""

    def __init__(
        self,
        chunks: Iterator[bytes],
        on_chunk: Callable[[int], None] | None = None,
        pause: float = 0.0,
        stall: float = 0.0,
    ) -> None:
        self.chunks = chunks
        self.on_chunk = on_chunk
        self.pause = pause
        self.stall = stall

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for number, chunk in enumerate(self.chunks):
            if self.on_chunk is not None:
                self.on_chunk(number)
            if self.pause:
                await asyncio.sleep(self.pause)
            yield chunk
        if self.stall:
            await asyncio.sleep(self.stall)

    async def aclose(self) -> None:
        return None


class MemoryTransport:
    def __init__(self, make: Callable[[], MemoryStream]) -> None:
        self.make = make

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> MemoryStream:
        return self.make()

    async def aclose(self) -> None:
        return None


def responses_frames(text_pieces: int) -> list[bytes]:
    lab = PROVIDERS["responses"].render()
    reply = Reply("resp_watch", (Say("w" * text_pieces, text_pieces),))
    return [lab.frame(event) for event in lab.events(reply)]


def keepalives_then(frames: list[bytes], count: int) -> Iterator[bytes]:
    yield frames[0]
    for _ in range(count):
        yield b": keep-alive\n\n"
    yield from frames[1:]


async def watch_timers(chunks: int) -> tuple[list[int], list[int]]:
    """Timers on the loop (sampled every 10% of the chunks) while a stream of `chunks`
    keep-alive comments is read, and tracemalloc's retained bytes at the same points."""
    loop = asyncio.get_running_loop()
    frames = responses_frames(4)
    timers: list[int] = []
    memory: list[int] = []
    step = chunks // 10

    def sample(number: int) -> None:
        if number and number % step == 0:
            timers.append(len(loop._scheduled))  # type: ignore[attr-defined]
            gc.collect()
            memory.append(tracemalloc.get_traced_memory()[0])

    transport = MemoryTransport(lambda: MemoryStream(keepalives_then(frames, chunks), sample))
    client = lockgate_client("responses", transport)
    tracemalloc.start()
    try:
        message = await client.complete(HISTORY, ALL_TOOLS)
    finally:
        tracemalloc.stop()
    assert message.content == "wwww"
    return timers, memory


async def per_read_costs(reads: int) -> dict[str, float]:
    """µs per read of an in-memory async iterator: bare, with the watchdog's touch (a
    clock read), and with an `asyncio.timeout` around each read (a timer per read)."""
    loop = asyncio.get_running_loop()

    async def source() -> AsyncIterator[bytes]:
        for _ in range(reads):
            yield b"x"

    async def bare() -> None:
        async for _chunk in source():
            pass

    async def touched() -> None:
        last = 0.0
        async for _chunk in source():
            last = loop.time()
        del last

    async def timeout_per_read() -> None:
        iterator = source().__aiter__()
        while True:
            try:
                async with asyncio.timeout(60):
                    await iterator.__anext__()
            except StopAsyncIteration:
                return

    costs: dict[str, list[float]] = {"bare": [], "touch": [], "timeout": []}
    runs = {"bare": bare, "touch": touched, "timeout": timeout_per_read}
    for _ in range(5):
        for name, run in runs.items():
            started = time.process_time()
            await run()
            costs[name].append((time.process_time() - started) / reads * 1e6)
    return {name: median(values) for name, values in costs.items()}


async def firing_times() -> dict[str, float]:
    """Seconds until the idle timeout (1 s) and the deadline (1.5 s) fire, and how long a
    drip of chunks 0.6 s apart ran before it completed (never idle)."""
    frames = responses_frames(4)
    results: dict[str, float] = {}

    async def timed(stream: Callable[[], MemoryStream], idle: float, deadline: float) -> float:
        client = lockgate_client("responses", MemoryTransport(stream), idle_timeout=idle)
        client.deadline = deadline
        started = time.monotonic()
        try:
            await client.complete(HISTORY, ALL_TOOLS)
            results["outcome"] = 0
        except ResponseFailure as failure:
            results[str(failure.kind)] = time.monotonic() - started
        return time.monotonic() - started

    # Idle: three frames, then silence.
    await timed(lambda: MemoryStream(iter(frames[:3]), stall=30.0), 1.0, 60.0)
    # Deadline: a keep-alive every 0.1 s forever (never idle).
    forever = (b": keep-alive\n\n" for _ in range(10**9))
    await timed(lambda: MemoryStream(forever, pause=0.1), 1.0, 1.5)
    # A drip: 3 chunks 0.6 s apart (1.8 s in all), each within the 1 s idle timeout.
    drip = [frames[0], b"".join(frames[1:5]), b"".join(frames[5:])]
    results["drip"] = await timed(lambda: MemoryStream(iter(drip), pause=0.6), 1.0, 60.0)
    return results


def watchdog_section(report: Report) -> None:
    heading("the silence watchdog (one per stream)")
    chunks = 100_000
    timers, memory = asyncio.run(watch_timers(chunks))
    growth = (memory[-1] - memory[0]) / (chunks - chunks // 10)
    print(f"  timers on the loop while reading {chunks:,} chunks (every 10%): {timers}")
    report.check(
        "one silence timer per stream, whatever the chunk count",
        max(timers) == min(timers) and max(timers) <= 2,
        f"{min(timers)}..{max(timers)} scheduled handles over {chunks:,} chunks",
    )
    report.check(
        "nothing retained per chunk (tracemalloc, 90,000 chunks)",
        growth < 1.0,
        f"{growth:.3f} B per chunk ({memory[0]:,} B after 10%, {memory[-1]:,} B at the end)",
    )
    costs = asyncio.run(per_read_costs(100_000))
    print(
        f"  per read: bare {costs['bare']:.2f} µs, + watchdog touch "
        f"{costs['touch'] - costs['bare']:+.2f} µs, + asyncio.timeout per read "
        f"{costs['timeout'] - costs['bare']:+.2f} µs"
    )
    fired = asyncio.run(firing_times())
    idle = fired.get(str(FailureKind.IDLE_TIMEOUT), float("nan"))
    deadline = fired.get(str(FailureKind.DEADLINE), float("nan"))
    report.check(
        "idle timeout (1 s) fires within 0.5 s of the setting",
        1.0 <= idle < 1.5,
        f"after {idle:.3f} s",
    )
    report.check(
        "deadline (1.5 s) fires within 0.5 s of the setting, a steady drip never idle",
        1.5 <= deadline < 2.0,
        f"after {deadline:.3f} s",
    )
    report.check(
        "a drip every 0.6 s (idle timeout 1 s) is never idle",
        "drip" in fired and fired.get("outcome") == 0,
        f"completed after {fired.get('drip', float('nan')):.2f} s",
    )


# --- the SSE decoder, event construction, progress ---------------------------------------


def sse_costs() -> dict[str, float]:
    frames = responses_frames(2000)
    crlf = [frame.replace(b"\n", b"\r\n") for frame in frames]
    commented = [b": keep-alive\n" + frame for frame in frames]
    body = b"".join(frames)
    fragments = [body[i : i + 7] for i in range(0, len(body), 7)]
    shapes = {
        "one frame per chunk (fast path)": frames,
        "one frame per chunk, CRLF (general path)": crlf,
        "one frame per chunk, with a comment line (general path)": commented,
        "7-byte fragments (general path)": fragments,
        "whole body in one chunk": [body],
    }
    costs: dict[str, float] = {}
    for name, chunks in shapes.items():
        runs = []
        for _ in range(7):
            decoder = SSEDecoder()
            started = time.process_time()
            events = 0
            for chunk in chunks:
                events += len(decoder.feed(chunk))
            runs.append((time.process_time() - started) / len(frames) * 1e6)
            assert events == len(frames), (name, events)
        costs[name] = median(runs)
    return costs


@dataclass(frozen=True, slots=True)
class _Base:
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class _PlainTextDelta(_Base):  # what TextDelta was: the dataclass's own __init__
    text: str = ""


@dataclass(frozen=True, slots=True)
class _PlainSSE:
    event: str | None
    data: bytes


def construction_costs() -> dict[str, float]:
    statements: dict[str, Callable[[], object]] = {
        "TextDelta (fast_init)": lambda: TextDelta("abcd"),
        "TextDelta-shaped dataclass, generated __init__": lambda: _PlainTextDelta(text="abcd"),
        "ServerSentEvent (fast_init)": lambda: ServerSentEvent("e", b"d"),
        "ServerSentEvent-shaped dataclass, generated __init__": lambda: _PlainSSE("e", b"d"),
    }
    costs: dict[str, float] = {}
    for name, statement in statements.items():
        runs = timeit.repeat(statement, number=50_000, repeat=7)
        costs[name] = median(runs) / 50_000 * 1e9
    return costs


def progress_events() -> tuple[int, int]:
    seen: list[Event] = []
    gate = ResponseGate(ALL_TOOLS, seen.append)
    gate.accept(ResponseStarted(response_id="r"))
    gate.accept(ToolCallStarted("fc_1", "call_1", "edit"))
    delta = ToolArgumentsDelta("fc_1", "x")
    for _ in range(ARGUMENT_CHARS):
        gate.accept(delta)
    published = sum(1 for event in seen if isinstance(event, ToolArgumentProgress))
    return published, ARGUMENT_CHARS


def paths_section(report: Report) -> None:
    heading("SSE decoder paths (µs per event, 2,000-event Responses stream)")
    for name, cost in sse_costs().items():
        print(f"  {name:58s} {cost:6.2f} µs/event")
    heading("event construction (ns per event, median of 7)")
    costs = construction_costs()
    for name, cost in costs.items():
        print(f"  {name:58s} {cost:6.0f} ns")
    report.check(
        "fast_init events construct faster than the dataclass's generated __init__",
        costs["TextDelta (fast_init)"] < costs["TextDelta-shaped dataclass, generated __init__"],
        f"{costs['TextDelta (fast_init)']:.0f} ns vs "
        f"{costs['TextDelta-shaped dataclass, generated __init__']:.0f} ns",
    )
    published, deltas = progress_events()
    report.check(
        "argument progress published in steps (not per delta)",
        published <= deltas // 256 + 2,
        f"{published} progress events for {deltas:,} 1-char argument deltas",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.parse_args()
    started = time.monotonic()
    report = Report("bounds")
    memory_section(report)
    watchdog_section(report)
    paths_section(report)
    print()
    report.summary()
    print(f"(bounds took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
