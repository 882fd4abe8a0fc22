"""The bounds on what the engine holds: the calls beyond the bound counted in the refusal,
the bytes one stream holds (even where the gate sees nothing), one held-bytes budget shared
by every stream and given back, and the memory of what is held (issue 27: held in mapped
segments, released in bounded pieces, never copied on the heap). Time is virtual
(`support.run`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted, GatingStream, HeldBudget, Refused
from lockgate.scripted.reply import Call, Reply
from lockgate.scripted.scenario import EDIT_FIX

from .support import PROTOCOLS, Gated, canonical, options, request_for, run, tool_events
from .test_engine import Upstream, edit_reply, gate, native_frames, refusal_of, split_at_hold


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_refusal_counts_the_call_beyond_the_bound_too(provider: str) -> None:
    calls = tuple(Call(f"call_{n}", "edit", EDIT_FIX, 1) for n in range(9))
    gated = gate(provider, Upstream(native_frames(provider, Reply("resp_engine", calls))))
    kind, _, message = refusal_of(gated)
    assert kind == "bound_exceeded"
    assert message.startswith("lockgate withheld 9 tool calls: bound_exceeded: ")


def test_what_a_stream_holds_is_bounded_even_where_the_gate_sees_nothing() -> None:
    frames = native_frames("responses", edit_reply())
    before, held = split_at_hold(frames)
    junk = b'event: response.x\ndata: {"type":"response.x","pad":"' + b"x" * 4000 + b'"}\n\n'
    body = [*before, held[0], *([junk] * 100), *held[1:]]
    bounded = gate("responses", Upstream(body), max_held_bytes=100_000)
    kind, _, message = refusal_of(bounded)
    assert kind == "bound_exceeded"
    assert "100000 bytes held" in message
    assert tool_events(bounded.output) == []
    assert isinstance(gate("responses", Upstream(body)).outcome, Accepted)  # the default: 64 MiB


def test_one_held_bytes_budget_bounds_every_stream_and_is_given_back() -> None:
    frames = native_frames("chat", edit_reply(pieces=8))
    before, after = split_at_hold(frames)
    held = sum(len(frame) for frame in after)
    budget = HeldBudget(held + held // 2)  # room for one held response, not two

    async def both() -> tuple[Gated, Gated, int]:
        first_holds = asyncio.Event()
        second_ended = asyncio.Event()

        class Paced(Upstream):
            def __init__(self, wait_for: asyncio.Event | None, signal: asyncio.Event) -> None:
                super().__init__([])
                self.wait_for, self.signal = wait_for, signal

            async def __aiter__(self) -> AsyncIterator[bytes]:
                for frame in [*before, *after[:-1]]:
                    yield frame
                self.signal.set()
                if self.wait_for is not None:
                    await self.wait_for.wait()
                yield after[-1]

        async def one(upstream: Upstream) -> Gated:
            stream = GatingStream(
                registry_entry("chat"), request_for("chat"), upstream, options(), budget=budget
            )
            pieces = tuple([piece async for piece in stream])
            assert stream.outcome is not None
            return Gated(b"".join(pieces), pieces, stream.outcome, stream.gateway)

        first = asyncio.ensure_future(one(Paced(second_ended, first_holds)))
        await first_holds.wait()
        second = await one(Paced(None, asyncio.Event()))
        second_ended.set()
        return await first, second, budget.held

    first, second, left = run(both())
    assert isinstance(first.outcome, Accepted)
    assert isinstance(second.outcome, Refused)
    assert second.outcome.refusal.kind == "bound_exceeded"
    assert second.outcome.refusal.transient  # a new request may find room
    assert "the proxy holds" in second.outcome.refusal.message
    assert left == 0  # both streams gave back what they held


@pytest.mark.parametrize("provider", ["chat", "anthropic", "responses"])
def test_a_large_held_stream_is_released_whole_in_pieces_and_never_copied_on_the_heap(
    provider: str,
) -> None:
    # 16,000 one-character argument deltas: megabytes of small held frames. Held as Python
    # objects they cost a third more than their bytes and the release joined them into a
    # second copy (peak RSS 3x what the budget counted); held in mapped segments, the Python
    # heap never holds them, and the release goes out in bounded pieces.
    import tracemalloc

    from lockgate.proxy.engine import RELEASE_SLICE_BYTES

    arguments = json.dumps({"path": "calculator.py", "old": "x" * 15950, "new": "y"})
    frames = native_frames(provider, edit_reply(pieces=len(arguments), arguments=arguments))
    body = b"".join(frames)
    held: list[int] = []
    budget = HeldBudget(1 << 40, held.append)

    async def reads() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 16384):
            yield body[start : start + 16384]

    async def consume() -> tuple[list[bytes], object, int]:
        entry = registry_entry(provider)
        stream = GatingStream(entry, request_for(provider), reads(), options(), budget=budget)
        tracemalloc.start()
        try:
            pieces = [piece async for piece in stream]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return pieces, stream.outcome, peak

    pieces, outcome, peak = run(consume())
    assert isinstance(outcome, Accepted)
    assert b"".join(pieces) == canonical(body)
    assert max(held) > 1024 * 1024
    assert max(map(len, pieces)) <= RELEASE_SLICE_BYTES + 64 * 1024
    # The pieces the test keeps are the one copy on the heap (the client's writes would
    # free them as they go): nothing else of the held bytes.
    assert peak < sum(map(len, pieces)) + max(held) // 2
    assert held[-1] == 0  # every byte given back to the budget


def test_held_bytes_come_out_in_order_across_segments() -> None:
    from lockgate.proxy.engine import _HeldBytes

    held = _HeldBytes()
    frames = [bytes([65 + n % 26]) * (1000 + n * 7) for n in range(3000)]
    for frame in frames:
        held.append(frame)
    assert held.size == sum(map(len, frames))
    assert held.size > 2 * _HeldBytes.SEGMENT  # it spans several segments
    out = list(held.pieces(100_000))
    assert b"".join(out) == b"".join(frames)
    assert max(map(len, out)) <= 100_000
    assert held.size == 0
    held.close()  # nothing left to give back: idempotent
