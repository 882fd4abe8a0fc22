"""The idle timeout and the total deadline: in-process, over HTTP, on the command line."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from benchmarks.hostile import raw_server

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.fixture import ALL_TOOLS
from lockgate.lab.server import serve_script
from lockgate.providers import PROVIDERS
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder, ResponsesRenderer
from lockgate.scripted.script import Faults, Pause, Turn, body_actions

from ..helpers import CLI, EDIT, KEY, failed_as, replay_client, responses_transport, retry_lines

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


# --- timers the client refuses, floods, silent heads -------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"idle_timeout": math.nan},
        {"idle_timeout": math.inf},
        {"idle_timeout": 0},
        {"idle_timeout": -1.0},
        {"deadline": math.inf},
        {"deadline": math.nan},
        {"deadline": 0.0},
    ],
)
def test_the_client_refuses_timers_that_never_or_always_fire(options: dict[str, float]) -> None:
    from lockgate.lab.replay import ReplayTransport

    with pytest.raises(ValueError, match="positive, finite"):
        StreamingModelClient(ResponsesCodec("m"), ReplayTransport([]), **options)  # type: ignore[arg-type]


async def test_the_deadline_holds_while_one_read_carries_an_event_flood() -> None:
    from lockgate.providers.base import CodecOptions

    frame = b'data: {"id":"c","object":"chat.completion.chunk","choices":[]}\n\n'

    class Flood:
        async def __aiter__(self) -> Any:
            yield frame * 400_000  # one decompressed read holding 400,000 events

        async def aclose(self) -> None:
            return None

    class FloodTransport:
        async def open(self, request: Any, *, attempt: int = 0) -> Flood:
            return Flood()

        async def aclose(self) -> None:
            return None

    codec = PROVIDERS["chat"].make_codec(CodecOptions("m"))
    client = StreamingModelClient(codec, FloodTransport(), deadline=0.2, max_event_bytes=1 << 26)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete([Message("user", "go")], ALL_TOOLS)
    # The flood never ends and never exceeds a bound: only the deadline can stop it.
    assert caught.value.kind is FailureKind.DEADLINE


def test_the_idle_timeout_applies_while_waiting_for_the_response_head(cli: CLI) -> None:
    with raw_server() as server:  # accepts, never answers
        result = cli(
            "run",
            "--base-url",
            server.base_url,
            "--idle-timeout",
            "1",
            "--retry-attempts",
            "2",
            key=KEY,
        )
    # The server never answers: only the silence limit can end each opening.
    ending = failed_as(result, FailureKind.IDLE_TIMEOUT)
    silence = "no response head within the 1 s idle timeout"
    assert ending.stopped == f"provider_failure (idle_timeout: {silence})"
    [retry] = retry_lines(result.err)
    assert (retry.attempt, retry.max_attempts, retry.reason) == (2, 2, silence)
    assert server.connections == 2
