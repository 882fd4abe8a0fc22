"""The engine's own behaviour, on every protocol: what is forwarded at once and what is held,
keep-alives while holding, the silence limit and the deadline; and the helpers the engine's
other tests share (a body played step by step, a reply in the provider's frames). Refusals,
a stream's end, what is not gated, what a client reads and the bounds on what is held are
test_engine_refusals.py, test_engine_lifecycle.py, test_engine_ungated.py,
test_engine_canonical_output.py and test_engine_held_bounds.py. Time is virtual
(`support.VirtualTimeLoop`): waits cost nothing, and no assertion reads a clock."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from lockgate.providers import provider as registry_entry
from lockgate.proxy import (
    Accepted,
    GatingStream,
    Refused,
)
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.scenario import EDIT_FIX

from .support import (
    PROTOCOLS,
    Gated,
    canonical,
    ends_with_refusal,
    gate_stream,
    keepalive_count,
    options,
    request_for,
    run,
    sdk_raises,
    sdk_reads,
    tool_events,
    without_keepalives,
)

HANG = object()


class Upstream:
    """A body played step by step: bytes (a read), a number (that many seconds of silence),
    `HANG` (silent until cancelled) or an exception (raised)."""

    def __init__(self, steps: Sequence[object], *, close_error: bool = False) -> None:
        self.steps = list(steps)
        self.close_error = close_error
        self.yielded = 0
        self.ended = False
        self.cancelled = False
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            for step in self.steps:
                if isinstance(step, bytes):
                    await asyncio.sleep(0)
                    self.yielded += 1
                    yield step
                elif isinstance(step, int | float):
                    await asyncio.sleep(step)
                elif step is HANG:
                    await asyncio.Event().wait()
                elif isinstance(step, BaseException):
                    raise step
            self.ended = True
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    async def aclose(self) -> None:
        self.closed = True
        if self.close_error:
            raise OSError("simulated failure while closing")


def native_frames(provider: str, reply: Reply) -> list[bytes]:
    """The frames of `reply` as the provider sends them (Gemini's with CRLF line ends: a
    client receives them in the canonical form, `support.canonical`)."""
    renderer = registry_entry(provider).render()
    return [renderer.frame(event) for event in renderer.events(reply)]


def edit_reply(*, pieces: int = 5, arguments: Any = EDIT_FIX, name: str = "edit") -> Reply:
    return Reply("resp_engine", (Say("Fixing it now."), Call("call_1", name, arguments, pieces)))


def split_at_hold(frames: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The frames before the first that carries a tool call, and the rest."""
    for index, frame in enumerate(frames):
        if tool_events(frame):
            return frames[:index], frames[index:]
    raise AssertionError("no tool event")


def gate(provider: str, upstream: Any, **overrides: Any) -> Gated:
    gating = options(**{"deadline": 600.0, **overrides})
    return run(gate_stream(provider, request_for(provider), upstream, gating))


def refusal_of(gated: Gated) -> tuple[str, bool, str]:
    assert isinstance(gated.outcome, Refused)
    refusal = gated.outcome.refusal
    return refusal.kind, refusal.transient, refusal.message


# --- forwarded at once, held from the first call ---------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_text_is_forwarded_before_the_upstream_sends_more(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    before, after = split_at_hold(frames)
    seen = asyncio.Event()

    class Waiting(Upstream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b"".join(before)
            await seen.wait()  # until the client has the text (else: the silence limit)
            for frame in after:
                yield frame

    async def consume() -> tuple[bytes, Accepted | Refused | None]:
        stream = GatingStream(registry_entry(provider), request_for(provider), Waiting([]))
        got = b""
        async for piece in stream:
            got += piece
            if got.startswith(canonical(before)):
                seen.set()
        return got, stream.outcome

    output, outcome = run(consume())
    assert isinstance(outcome, Accepted)
    assert output == canonical(frames)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_held_frames_come_out_only_once_the_body_ended(provider: str) -> None:
    frames = native_frames(provider, edit_reply(pieces=8))
    upstream = Upstream(frames)
    early: list[bytes] = []

    async def consume() -> bytes:
        stream = GatingStream(registry_entry(provider), request_for(provider), upstream)
        got = b""
        async for piece in stream:
            if not upstream.ended:
                early.append(piece)
            got += piece
        return got

    output = run(consume())
    assert output == canonical(frames)
    assert early  # the text went out early …
    assert not any(tool_events(piece) for piece in early)  # … and no call did
    before, _ = split_at_hold(frames)
    assert b"".join(early) == canonical(before)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_refused_stream_drops_what_it_held_and_ends_with_one_error(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    before, after = split_at_hold(frames)
    # A clean end too early: inside the call's events, or (Gemini, whose calls come whole,
    # one chunk each) right after the call, before the finish.
    gated = gate(provider, Upstream([*before, *after[: min(2, len(after) - 1)]]))
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("stream_ended", True)
    assert message.startswith("lockgate withheld 1 tool call: stream_ended: ")
    assert gated.output.startswith(canonical(before))
    assert tool_events(gated.output) == []
    assert ends_with_refusal(gated.output, provider)
    assert gated.pieces[-1] == gated.output[len(canonical(before)) :]
    assert run(sdk_raises(provider, gated.output)) == []


# --- keep-alives ------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_silent_upstream_gets_keepalives_while_frames_are_held(provider: str) -> None:
    frames = native_frames(provider, edit_reply())
    before, after = split_at_hold(frames)
    upstream = Upstream([*before, after[0], 100.0, *after[1:]])
    gated = gate(provider, upstream, idle_timeout=200.0, keepalive_interval=15.0, deadline=600.0)
    assert isinstance(gated.outcome, Accepted)
    assert keepalive_count(gated.output, gated.gateway) >= 6  # 100 s / 15 s
    assert gated.gateway.keepalive() in gated.pieces
    assert without_keepalives(gated.output, gated.gateway) == without_keepalives(
        b"".join(frames), gated.gateway
    )
    assert run(sdk_reads(provider, gated.output)) == []  # keep-alives disturb no SDK


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_keepalives_go_out_while_held_events_flow_without_pause(provider: str) -> None:
    reply = edit_reply(pieces=12)
    if provider == "gemini":  # its call is one chunk: what flows held is the text after it
        reply = dataclasses.replace(reply, parts=(*reply.parts, Say("Then a note.", 12)))
    frames = native_frames(provider, reply)
    before, after = split_at_hold(frames)
    steps: list[object] = [*before]
    for frame in after:
        steps.extend([frame, 5.0])  # upstream busy all along, every event held
    gated = gate(provider, Upstream(steps), idle_timeout=10.0, keepalive_interval=15.0)
    assert isinstance(gated.outcome, Accepted)
    assert keepalive_count(gated.output, gated.gateway) >= 3


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_no_keepalive_is_added_while_frames_are_forwarded(provider: str) -> None:
    frames = native_frames(provider, Reply("resp_text", (Say("Just text, slowly.", 6),)))
    steps: list[object] = []
    for number, frame in enumerate(frames, 1):
        # Slow text; the finish and the terminal (held until the end) come together.
        steps.extend([frame, 20.0] if number < len(frames) - 3 else [frame])
    gated = gate(provider, Upstream(steps), idle_timeout=30.0, keepalive_interval=15.0)
    assert isinstance(gated.outcome, Accepted)
    assert gated.output == canonical(frames)


def test_upstream_keepalives_pass_at_once_even_while_held() -> None:
    frames = native_frames("anthropic", edit_reply())
    before, after = split_at_hold(frames)
    ping = b'event: ping\ndata: {"type": "ping"}\n\n'
    comment = b": upstream keep-alive\n\n"
    upstream = Upstream([*before, after[0], ping, comment, *after[1:]])
    pieces: list[bytes] = []

    async def consume() -> None:
        stream = GatingStream(registry_entry("anthropic"), request_for("anthropic"), upstream)
        async for piece in stream:
            pieces.append(piece)

    run(consume())
    # Sent at once, not held: the ping as it came, the comment as the gateway's own
    # keep-alive (a ping too) …
    assert pieces.count(ping) == 2
    assert pieces.index(ping) < len(pieces) - 2  # … before the release at the end
    assert comment not in b"".join(pieces)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_an_upstream_comment_while_held_is_the_gateways_keepalive_at_once(provider: str) -> None:
    before, after = split_at_hold(native_frames(provider, edit_reply()))
    upstream = Upstream([*before, after[0], b": upstream keep-alive\n\n", *after[1:]])
    pieces: list[bytes] = []

    async def consume() -> None:
        stream = GatingStream(registry_entry(provider), request_for(provider), upstream)
        async for piece in stream:
            pieces.append(piece)

    run(consume())
    gateway = registry_entry(provider).gateway
    assert gateway is not None
    keepalive = gateway().keepalive()  # Gemini's: a blank line; the others': a comment
    assert pieces[-2] == keepalive  # at once, before the release …
    assert b"".join(pieces[:-2]) == canonical(before)  # … after the text
    assert b"upstream keep-alive" not in b"".join(pieces)


# --- the silence limit and the deadline --------------------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_silence_while_holding_is_the_idle_timeout(provider: str) -> None:
    before, after = split_at_hold(native_frames(provider, edit_reply()))
    upstream = Upstream([*before, after[0], HANG])
    gated = gate(provider, upstream)
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("idle_timeout", True)
    assert "no bytes for 1 s" in message
    assert upstream.cancelled
    assert upstream.closed
    assert run(sdk_raises(provider, gated.output)) == []


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_silence_before_holding_is_the_idle_timeout_too(provider: str) -> None:
    before, _ = split_at_hold(native_frames(provider, edit_reply()))
    upstream = Upstream([*before, HANG])
    gated = gate(provider, upstream)
    assert refusal_of(gated)[:2] == ("idle_timeout", True)
    assert gated.output.startswith(canonical(before))
    assert upstream.closed


@pytest.mark.parametrize("holding", [False, True])
def test_the_deadline_bounds_a_stream_that_never_goes_silent(holding: bool) -> None:
    frames = native_frames("responses", edit_reply())
    before, after = split_at_hold(frames)
    drip = [b": tick\n\n", 2.0] * 100
    steps = [*before, after[0], *drip] if holding else [*before[:2], *drip]
    gated = gate("responses", Upstream(steps), idle_timeout=10.0, deadline=30.0)
    kind, transient, message = refusal_of(gated)
    assert (kind, transient) == ("deadline", True)
    assert "30 s deadline" in message
