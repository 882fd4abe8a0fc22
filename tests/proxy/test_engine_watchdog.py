"""The engine's one timer per stream: the silence limit, the deadline and (while frames are
held) the keep-alives share a single timer that is re-armed only when it fires before what
is due, so that a read costs no timer and no task of its own; a body that can be read again
after a cancelled wait (`ResumableBody`, the proxy's upstream body) is read in the engine's
own task even while frames are held. What the timers decide is what `test_engine.py` states
(the same streams here, through both kinds of body). Time is virtual: nothing waits on the
wall clock, and no assertion reads a clock; the timers and tasks an event loop was asked
for are counted."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar, TypeVarTuple, Unpack

import pytest

from lockgate.cassette.judge import VirtualTimeLoop
from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted, GatingStream, Refused
from lockgate.scripted.reply import Reply, Say

from .support import canonical, keepalive_count, options, request_for, without_keepalives
from .test_engine import HANG, Upstream, edit_reply, native_frames, split_at_hold

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
READS = 300


class CountingLoop(VirtualTimeLoop):
    """A virtual-time loop that counts the timers and tasks it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.timers = 0
        self.tasks = 0

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        self.timers += 1
        return super().call_at(when, callback, *args, context=context)

    def create_task(self, coro: Any, **kwargs: Any) -> Any:
        self.tasks += 1
        return super().create_task(coro, **kwargs)


def counted(work: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, int, int]:
    """`work()` run on a counting loop; what it returned, then the timers and tasks asked for
    while it ran (the loop's own start-up left out)."""
    loop = CountingLoop()
    try:
        loop.timers = loop.tasks = 0

        async def main() -> tuple[T, int, int]:
            timers, tasks = loop.timers, loop.tasks
            result = await work()
            return result, loop.timers - timers, loop.tasks - tasks

        return loop.run_until_complete(main())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


class Resumable:
    """A body played step by step like `test_engine.Upstream` (bytes: a read; a number: that
    many seconds of silence; `HANG`; an exception), read by `read_chunk`, whose wait may be
    cancelled without losing anything: a silence ends when it would have, however often its
    wait was cancelled, and a chunk is taken only once it is returned."""

    def __init__(self, steps: Sequence[object]) -> None:
        self.steps = list(steps)
        self.index = 0
        self.silent_until: float | None = None
        self.reads = 0
        self.cancelled_waits = 0
        self.closed = False

    async def read_chunk(self) -> bytes:
        loop = asyncio.get_running_loop()
        try:
            while self.index < len(self.steps):
                step = self.steps[self.index]
                if isinstance(step, bytes):
                    await asyncio.sleep(0)
                    self.index += 1
                    self.reads += 1
                    return step
                if isinstance(step, int | float):
                    if self.silent_until is None:
                        self.silent_until = loop.time() + step
                    await asyncio.sleep(max(0.0, self.silent_until - loop.time()))
                    self.silent_until = None
                    self.index += 1
                elif step is HANG:
                    await asyncio.Event().wait()
                elif isinstance(step, BaseException):
                    raise step
            return b""
        except asyncio.CancelledError:
            self.cancelled_waits += 1
            raise

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.read_chunk():
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


def body(kind: str, steps: Sequence[object]) -> Upstream | Resumable:
    return Resumable(steps) if kind == "resumable" else Upstream(steps)


async def gated(provider: str, upstream: object, **overrides: Any) -> tuple[bytes, Any]:
    stream = GatingStream(
        registry_entry(provider),
        request_for(provider),
        upstream,  # type: ignore[arg-type]
        options(**{"deadline": 600.0, **overrides}),
    )
    output = b"".join([piece async for piece in stream])
    return output, stream


KINDS = ("iterable", "resumable")


def test_a_body_with_read_chunk_is_resumable_and_a_plain_iterable_is_not() -> None:
    from lockgate.proxy.engine import ResumableBody

    assert isinstance(Resumable([]), ResumableBody)
    assert not isinstance(Upstream([]), ResumableBody)


# --- one timer, no task, per stream -------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_forwarded_reads_arm_no_timer_of_their_own(kind: str) -> None:
    frames = native_frames("chat", Reply("resp_text", (Say("w " * READS, READS),)))
    assert len(frames) > READS
    # Each text delta a read; the finish, the usage and `[DONE]` (held) in the last one.
    upstream = body(kind, [*frames[:-3], b"".join(frames[-3:])])
    (output, stream), timers, tasks = counted(lambda: gated("chat", upstream))
    assert isinstance(stream.outcome, Accepted)
    assert output == canonical(frames)
    # One timer for the stream (re-armed once at most), not one per read; the end of a
    # plain iterable, read while holding, in a task of its own with its own timer.
    assert timers <= (2 if kind == "resumable" else 3)
    assert tasks == (0 if kind == "resumable" else 1)


def test_held_reads_of_a_resumable_body_arm_no_timer_and_start_no_task() -> None:
    arguments = {"path": "calc.py", "old": "x" * 4 * READS, "new": "y" * 4 * READS}
    frames = native_frames("chat", edit_reply(pieces=2 * READS, arguments=arguments))
    assert len(split_at_hold(frames)[1]) > READS  # the reads held
    upstream = Resumable(frames)
    (output, stream), timers, tasks = counted(lambda: gated("chat", upstream))
    assert isinstance(stream.outcome, Accepted)
    assert output == canonical(frames)
    assert timers <= 3
    assert tasks == 0
    assert upstream.cancelled_waits == 0


# --- what the one timer decides, through either kind of body -------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", ["responses", "chat", "anthropic", "gemini"])
def test_a_silent_upstream_gets_keepalives_while_held_and_loses_nothing(
    kind: str, provider: str
) -> None:
    frames = native_frames(provider, edit_reply())
    before, after = split_at_hold(frames)
    upstream = body(kind, [*before, after[0], 100.0, *after[1:]])
    (output, stream), _, _ = counted(
        lambda: gated(provider, upstream, idle_timeout=200.0, keepalive_interval=15.0)
    )
    assert isinstance(stream.outcome, Accepted)
    native = keepalive_count(b"".join(frames), stream.gateway)  # Anthropic's own pings
    assert keepalive_count(output, stream.gateway) == native + 6  # at 15, 30, … 90 s of 100 s
    assert without_keepalives(output, stream.gateway) == without_keepalives(
        b"".join(frames), stream.gateway
    )
    if isinstance(upstream, Resumable):
        assert upstream.cancelled_waits == 6  # each keep-alive woke the wait, and it went on
        assert upstream.reads == len(frames)


@pytest.mark.parametrize("kind", KINDS)
def test_keepalives_go_out_while_held_events_flow_without_pause(kind: str) -> None:
    frames = native_frames("responses", edit_reply(pieces=12))
    before, after = split_at_hold(frames)
    steps: list[object] = [*before]
    for frame in after:
        steps.extend([frame, 5.0])  # busy all along: each wait shorter than the interval
    (output, stream), _, _ = counted(
        lambda: gated("responses", body(kind, steps), idle_timeout=10.0, keepalive_interval=15.0)
    )
    assert isinstance(stream.outcome, Accepted)
    assert keepalive_count(output, stream.gateway) >= 3


@pytest.mark.parametrize("kind", KINDS)
def test_no_keepalive_while_frames_are_forwarded(kind: str) -> None:
    frames = native_frames("chat", Reply("resp_text", (Say("Just text, slowly.", 6),)))
    steps: list[object] = []
    for number, frame in enumerate(frames, 1):
        steps.extend([frame, 20.0] if number < len(frames) - 3 else [frame])
    (output, stream), _, _ = counted(
        lambda: gated("chat", body(kind, steps), idle_timeout=30.0, keepalive_interval=15.0)
    )
    assert isinstance(stream.outcome, Accepted)
    assert output == canonical(frames)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("holding", [False, True])
def test_silence_is_the_idle_timeout_and_reads_restart_it(kind: str, holding: bool) -> None:
    frames = native_frames("chat", edit_reply())
    before, after = split_at_hold(frames)
    # Slow reads, each within the limit, then a silence beyond it.
    steps: list[object] = []
    for frame in before:
        steps.extend([frame, 0.9])
    split = 2 if holding else 0
    steps.extend([*after[:split], 5.0, *after[split:]])
    upstream = body(kind, steps)
    (output, stream), _, _ = counted(
        lambda: gated("chat", upstream, idle_timeout=1.0, keepalive_interval=0.4)
    )
    assert isinstance(stream.outcome, Refused)
    assert stream.outcome.refusal.kind == "idle_timeout"
    assert upstream.closed
    if holding:
        assert keepalive_count(output, stream.gateway) >= 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("holding", [False, True])
def test_the_deadline_bounds_a_stream_that_never_goes_silent(kind: str, holding: bool) -> None:
    frames = native_frames("responses", edit_reply(pieces=50))
    before, after = split_at_hold(frames)
    steps: list[object] = []
    for frame in before if not holding else [*before, *after[:-1]]:
        steps.extend([frame, 2.0])
    steps.append(HANG)
    (_, stream), _, _ = counted(
        lambda: gated("responses", body(kind, steps), idle_timeout=10.0, deadline=30.0)
    )
    assert isinstance(stream.outcome, Refused)
    assert stream.outcome.refusal.kind == "deadline"
    assert "30 s deadline" in stream.outcome.refusal.message


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("holding", [False, True])
def test_timers_run_only_while_the_engine_reads(kind: str, holding: bool) -> None:
    """A consumer that takes longer than the silence limit over each piece (a slow client)
    does not make the upstream silent: the limit counts from the start of each read."""
    frames = native_frames("chat", edit_reply())
    before, after = split_at_hold(frames)
    split = 2 if holding else 0
    steps: list[object] = [*before, *after[:split], 0.5, *after[split:]]
    upstream = body(kind, steps)

    async def slow_consumer() -> tuple[bytes, GatingStream]:
        stream = GatingStream(
            registry_entry("chat"),
            request_for("chat"),
            upstream,
            options(idle_timeout=1.0, keepalive_interval=0.3, deadline=600.0),
        )
        pieces = []
        async for piece in stream:
            pieces.append(piece)
            await asyncio.sleep(3.0)  # three silence limits, spent outside the engine
        return b"".join(pieces), stream

    (output, stream), _, _ = counted(slow_consumer)
    assert isinstance(stream.outcome, Accepted)
    assert without_keepalives(output, stream.gateway) == without_keepalives(
        b"".join(frames), stream.gateway
    )


@pytest.mark.parametrize("kind", KINDS)
def test_the_engines_cancellations_are_taken_back(kind: str) -> None:
    """After keep-alives and a silence refused, the consumer's task is not left cancelled."""
    frames = native_frames("chat", edit_reply())
    before, after = split_at_hold(frames)
    upstream = body(kind, [*before, after[0], 50.0, *after[1:2], HANG])

    async def consume() -> tuple[int, object]:
        _, stream = await gated("chat", upstream, idle_timeout=20.0, keepalive_interval=5.0)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling(), stream.outcome

    (cancelling, outcome), _, _ = counted(consume)
    assert cancelling == 0
    assert isinstance(outcome, Refused)
    assert outcome.refusal.kind == "idle_timeout"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("holding", [False, True])
def test_a_cancelled_consumer_is_cancelled_and_the_upstream_closed(
    kind: str, holding: bool
) -> None:
    before, after = split_at_hold(native_frames("chat", edit_reply()))
    upstream = body(kind, [*before, *(after[:1] if holding else []), HANG])

    async def main() -> None:
        task = asyncio.create_task(
            gated("chat", upstream, idle_timeout=1000.0, keepalive_interval=10.0)
        )
        await asyncio.sleep(35.0)  # keep-alives meanwhile, while holding
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    counted(main)
    assert upstream.closed


def test_a_resumable_body_that_breaks_is_a_transport_refusal() -> None:
    frames = native_frames("chat", edit_reply())
    before, after = split_at_hold(frames)
    upstream = Resumable([*before, after[0], ConnectionResetError("reset by peer")])
    (_, stream), _, _ = counted(lambda: gated("chat", upstream))
    assert isinstance(stream.outcome, Refused)
    assert stream.outcome.refusal.kind == "transport"
    assert "reset by peer" in stream.outcome.refusal.message
    assert upstream.closed


def test_an_abandoned_stream_closes_a_resumable_body() -> None:
    before, after = split_at_hold(native_frames("responses", edit_reply()))
    upstream = Resumable([b"".join(before), after[0], HANG])

    async def consume() -> None:
        stream = GatingStream(
            registry_entry("responses"),
            request_for("responses"),
            upstream,
            options(idle_timeout=100.0, keepalive_interval=5.0),
        )
        iterator = aiter(stream)
        await anext(iterator)  # the text …
        assert await anext(iterator) == b": lockgate keep-alive\n\n"
        await iterator.aclose()  # type: ignore[attr-defined]
        assert stream.outcome is None

    counted(consume)
    assert upstream.closed
