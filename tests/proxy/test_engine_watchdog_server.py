"""The engine's one timer per stream through the real proxy: the upstream body the proxy
hands the engine (`upstream.ResumableUpstreamBody`, aiohttp's `readany`) is resumable, so
that a keep-alive due while a held stream is silent wakes the read, goes out, and the read
goes on without losing a byte; silence beyond the limit is still the idle timeout, and a
held key is still redacted before the gate judges. Loopback servers of the test's own; the
waits are the proxy's own limits (fractions of a second), no assertion reads a clock."""

from __future__ import annotations

import dataclasses

from lockgate.credentials import REDACTED
from lockgate.gateway import Gateway
from lockgate.providers import provider as registry_entry
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Faults, Turn

from .support import ends_with_refusal, keepalive_count, request_for, tool_events
from .support import without_keepalives as events_of
from .test_engine import native_frames, split_at_hold
from .test_server import ACCEPTED, HELD_KEY, PATHS, gating, post, scripted


def chat() -> Gateway:
    make = registry_entry("chat").gateway
    assert make is not None
    return make()


def held_from() -> int:
    """The event of ACCEPTED's Chat stream from which the proxy holds (1-based)."""
    assert ACCEPTED.reply is not None
    before, _ = split_at_hold(native_frames("chat", ACCEPTED.reply))
    return len(before) + 1


async def test_a_held_stream_that_pauses_gets_keepalives_and_loses_nothing() -> None:
    assert ACCEPTED.reply is not None
    paused = dataclasses.replace(
        ACCEPTED, faults=Faults(stall_after=held_from(), stall_seconds=1.0)
    )
    async with scripted(
        "chat", [paused], gating=gating(keepalive_interval=0.05, idle_timeout=10.0)
    ) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
    assert status == 200
    assert keepalive_count(body, chat()) >= 1
    assert body.endswith(b"data: [DONE]\n\n")  # released whole, no refusal
    sent = b"".join(native_frames("chat", ACCEPTED.reply))
    assert events_of(body, chat()) == events_of(sent, chat())
    assert [record.outcome for record in proxied.records] == ["passed"]


async def test_a_held_stream_that_falls_silent_is_the_idle_timeout() -> None:
    silent = dataclasses.replace(ACCEPTED, faults=Faults(stall_after=held_from(), stall_seconds=60))
    async with scripted(
        "chat", [silent], gating=gating(keepalive_interval=0.05, idle_timeout=0.5)
    ) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
    assert status == 200
    assert ends_with_refusal(body, "chat")
    assert b"idle_timeout" in body
    assert keepalive_count(body, chat()) >= 1
    assert tool_events(body) == []
    assert [record.outcome for record in proxied.records] == ["withheld"]


async def test_a_forwarded_stream_that_falls_silent_is_the_idle_timeout() -> None:
    silent = dataclasses.replace(ACCEPTED, faults=Faults(stall_after=1, stall_seconds=60))
    async with scripted("chat", [silent], gating=gating(idle_timeout=0.5)) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
    assert status == 200
    assert ends_with_refusal(body, "chat")
    assert b"idle_timeout" in body
    assert [record.outcome for record in proxied.records] == ["refused"]


async def test_a_paused_stream_that_echoes_the_held_key_is_redacted_and_accepted() -> None:
    # The key in the text, sent in small fragments (read across several reads), then a
    # pause while the call is held: the redaction between reads survives the keep-alives.
    arguments = {"path": "calculator.py", "old": f"key={HELD_KEY}", "new": "x"}
    reply = Reply("r1", (Say(f"Your key is {HELD_KEY}.", pieces=1), Call("c1", "edit", arguments)))
    before, _ = split_at_hold(native_frames("chat", reply))
    turn = Turn(
        reply=reply,
        faults=Faults(stall_after=len(before) + 1, stall_seconds=0.5, fragment_sizes=(7,)),
    )
    async with scripted(
        "chat", [turn], gating=gating(keepalive_interval=0.05), api_key=HELD_KEY
    ) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
    assert status == 200
    assert HELD_KEY.encode() not in body
    assert REDACTED.encode() in body
    assert keepalive_count(body, chat()) >= 1
    assert tool_events(body)  # the call was released, its arguments redacted
    assert [record.outcome for record in proxied.records] == ["passed"]
