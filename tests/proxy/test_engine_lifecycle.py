"""A gated stream from its start to its end: what follows the last frame, a consumer that
abandons the stream or is cancelled (the pending read cancelled, the upstream closed), a
stream iterated once, an empty body, and the observer that sees the calls. Time is virtual
(`support.run`)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted, GatingOptions, GatingStream

from .support import PROTOCOLS, canonical, options, request_for, run, sdk_raises
from .test_engine import HANG, Upstream, edit_reply, gate, native_frames, refusal_of, split_at_hold


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_what_follows_the_last_frame_is_not_released(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    body = [*frames, b": bye"]  # a comment without its blank line: not a cut …
    gated = gate(provider, Upstream(body))
    assert isinstance(gated.outcome, Accepted)
    assert gated.output == canonical(frames)  # … but nothing a client should read either


@pytest.mark.parametrize("holding", [False, True])
def test_an_abandoned_stream_stops_reading_and_closes_the_upstream(holding: bool) -> None:
    before, after = split_at_hold(native_frames("responses", edit_reply()))
    upstream = Upstream([b"".join(before), *(after[:1] if holding else []), HANG])

    async def consume() -> None:
        stream = GatingStream(
            registry_entry("responses"),
            request_for("responses"),
            upstream,
            options(idle_timeout=100.0, keepalive_interval=5.0),
        )
        iterator = aiter(stream)
        await anext(iterator)  # the text …
        if holding:
            assert await anext(iterator) == b": lockgate keep-alive\n\n"
        await iterator.aclose()  # type: ignore[attr-defined]
        assert stream.outcome is None

    run(consume())
    assert upstream.closed
    assert upstream.cancelled == holding  # a pending read is cancelled


def test_a_cancelled_consumer_cancels_the_pending_read_and_closes_the_upstream() -> None:
    before, after = split_at_hold(native_frames("chat", edit_reply()))
    upstream = Upstream([*before, after[0], HANG])

    async def consume() -> None:
        stream = GatingStream(
            registry_entry("chat"),
            request_for("chat"),
            upstream,
            options(idle_timeout=1000.0, keepalive_interval=10.0, deadline=600.0),
        )
        async for _ in stream:
            pass

    async def main() -> None:
        task = asyncio.create_task(consume())
        await asyncio.sleep(35.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert upstream.cancelled
    assert upstream.closed


def test_a_stream_is_iterated_once_and_needs_a_gateway() -> None:
    entry = registry_entry("responses")
    stream = GatingStream(entry, request_for("responses"), Upstream([]))
    aiter(stream)
    with pytest.raises(RuntimeError, match="once"):
        aiter(stream)
    with pytest.raises(ValueError, match="no gateway"):
        GatingStream(dataclasses.replace(entry, gateway=None), {}, Upstream([]))
    with pytest.raises(ValueError, match="keepalive_interval"):
        GatingOptions(keepalive_interval=0)
    with pytest.raises(ValueError, match="idle_timeout"):
        GatingOptions(idle_timeout=float("nan"))


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_an_empty_body_releases_nothing(provider: str) -> None:
    gated = gate(provider, Upstream([]))
    kind, transient, _ = refusal_of(gated)
    assert (kind, transient) == ("stream_ended", True)
    assert gated.pieces == (gated.output,)  # the refusal, alone
    assert run(sdk_raises(provider, gated.output)) == []


def test_the_gate_observer_sees_the_calls() -> None:
    seen: list[object] = []
    frames = native_frames("responses", edit_reply())

    async def consume() -> None:
        stream = GatingStream(
            registry_entry("responses"),
            request_for("responses"),
            Upstream(frames),
            observer=seen.append,
        )
        async for _ in stream:
            pass

    run(consume())
    assert any(type(event).__name__ == "ToolCallStarted" for event in seen)
