"""Idle timeout and total deadline, in-process and over loopback HTTP with the SDK."""

from __future__ import annotations

import random

import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.fixture import ALL_TOOLS
from lockgate.lab.server import serve_script
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder, ResponsesRenderer
from lockgate.scripted.script import Faults, Pause, Turn, body_actions

from .helpers import EDIT, replay_client, responses_transport

HISTORY = [Message("user", "go")]
RESPONSES = ResponsesRenderer()


def stalled(seconds: float = 30.0) -> Turn:
    builder = ResponseBuilder("resp_s").created().call("fc_1", "call_1", "edit", EDIT, finish=False)
    return builder.turn(faults=Faults(stall_after=3, stall_seconds=seconds))


async def test_idle_timeout_fails_the_response_promptly() -> None:
    client, transport, _ = replay_client([stalled()])
    client.idle_timeout = 0.3
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    # The stall outlasts any test (it would end in stream_ended): only the watchdog can
    # end the response as idle.
    assert caught.value.kind is FailureKind.IDLE_TIMEOUT
    assert transport.streams[0].closed
    assert len(transport.requests) == 1


async def test_a_steady_slow_drip_is_not_idle() -> None:
    builder = ResponseBuilder("resp_d").created().text("m", "drip " * 8).completed()
    turn = builder.turn(faults=Faults(drip_ms=40, fragment_sizes=(64,)))
    client, _, _ = replay_client([turn])
    client.idle_timeout = 0.2
    # By construction the drip lasts longer than the idle timeout (every gap is shorter).
    drips = sum(isinstance(action, Pause) for action in body_actions(turn, RESPONSES))
    assert drips * 0.040 > 2 * client.idle_timeout
    decision = await client.complete(HISTORY, ALL_TOOLS)
    assert decision.content == "drip " * 8


async def test_deadline_bounds_a_response_that_never_ends() -> None:
    endless = ResponseBuilder("resp_e").created().turn(faults=Faults(endless="unknown"))
    client, transport, _ = replay_client([endless])
    client.deadline = 0.5
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    # The events never end, never go silent and never grow anything: only the deadline.
    assert caught.value.kind is FailureKind.DEADLINE
    assert transport.streams[0].closed


async def test_endless_text_hits_the_text_bound() -> None:
    endless = ResponseBuilder("resp_t").created().turn(faults=Faults(endless="text"))
    client, _, _ = replay_client([endless])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.BOUND_EXCEEDED


def test_timeouts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        StreamingModelClient(ResponsesCodec("m"), object(), idle_timeout=0)  # type: ignore[arg-type]


async def test_idle_timeout_over_http_closes_the_connection() -> None:
    async with serve_script([stalled()]) as server:
        transport = responses_transport(
            api_key="sk-test", base_url=server.base_url, read_timeout=10
        )
        client = StreamingModelClient(
            ResponsesCodec("m"), transport, idle_timeout=0.5, rng=random.Random(0)
        )
        with pytest.raises(ResponseFailure) as caught:
            await client.complete(HISTORY, ALL_TOOLS)
        await transport.aclose()
        await server.settle()
    assert caught.value.kind is FailureKind.IDLE_TIMEOUT
    assert len(server.requests) == 1
    assert server.requests[0].client_closed_early
