"""Driving the engine in the tests: a virtual-time event loop (`run`), byte sources of given
chunks, the oracle (`lockgate run`'s own client on the same bytes) and the engine run on a
scripted turn or raw chunks (`gate_turn`, `gate_stream`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lockgate.cassette.judge import VirtualTimeLoop
from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import OpenFailure, ResponseFailure, StreamInterrupted
from lockgate.events import Event, ToolCallStarted
from lockgate.fixture import ALL_TOOLS
from lockgate.gateway import Gateway
from lockgate.lab.replay import InstrumentedTransport, ReplayTransport
from lockgate.providers import provider as registry_entry
from lockgate.providers.base import CodecOptions, Provider
from lockgate.proxy import Accepted, GatingOptions, GatingStream, Refused
from lockgate.retry import RetryPolicy
from lockgate.scripted.script import Turn, body_actions
from lockgate.transport import ByteStream

T = TypeVar("T")

PROTOCOLS = ("responses", "chat", "anthropic", "gemini")
# The protocols whose request body asks for the stream (Gemini's path does): what the server
# and transport tests were written for, until they speak Gemini too.
BODY_STREAMED_PROTOCOLS = PROTOCOLS[:3]
IDLE = 1.0  # the lab's idle timeout (virtual seconds: nothing here waits on the wall clock)
DEADLINE = 30.0
HISTORY = (Message("system", "You fix bugs."), Message("user", "Fix the bug in add."))


# --- virtual time ---------------------------------------------------------------------------


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(coroutine)


# --- byte sources ---------------------------------------------------------------------------


class Chunks:
    """A body of given chunks (a read each), then a clean end or a reset."""

    def __init__(self, chunks: Sequence[bytes], *, reset: bool = False) -> None:
        self.chunks = list(chunks)
        self.reset = reset
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            await asyncio.sleep(0)
            yield chunk
        if self.reset:
            raise StreamInterrupted("simulated connection reset by peer")

    async def aclose(self) -> None:
        self.closed = True


class ChunkTransport:
    """A transport whose one stream is `Chunks`."""

    def __init__(self, body: Chunks) -> None:
        self.body = body

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> ByteStream:
        return self.body

    async def aclose(self) -> None:
        pass


def turn_bytes(turn: Turn, provider: str) -> bytes:
    """Every byte a streaming turn sends (its pauses, resets and hangs left out)."""
    protocol = registry_entry(provider).render()
    return b"".join(a for a in body_actions(turn, protocol) if isinstance(a, bytes))


def is_streaming(turn: Turn, provider: str) -> bool:
    protocol = registry_entry(provider).render()
    return not turn.connection_error and turn.opening_error(protocol) is None


# --- the oracle and the engine --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """What `lockgate run`'s client decided: accepted (releasing every call that streamed),
    or the failure kind (`model_refused`: a decision that withheld streamed calls)."""

    accepted: bool
    kind: str
    calls: int  # tool calls that began


def request_for(provider: str, *, model: str = "lab-model", options: object = None) -> Any:
    codec = registry_entry(provider).make_codec(CodecOptions(model, provider_options=options))
    return codec.encode(HISTORY, ALL_TOOLS)


async def _judge(client: StreamingModelClient, calls: list[Event]) -> Verdict:
    def started() -> int:
        return sum(isinstance(event, ToolCallStarted) for event in calls)

    try:
        message = await client.complete(HISTORY, ALL_TOOLS)
    except OpenFailure:
        raise
    except ResponseFailure as failure:
        return Verdict(False, str(failure.kind), started())
    if len(message.tool_calls) != started():
        return Verdict(False, "model_refused", started())
    return Verdict(True, "accepted", started())


def _client(
    provider: str, transport: Any, model: str, options: object, observer: Callable[[Event], None]
) -> StreamingModelClient:
    codec = registry_entry(provider).make_codec(CodecOptions(model, provider_options=options))
    return StreamingModelClient(
        codec,
        transport,
        observer=observer,
        retry=RetryPolicy(attempts=1),
        idle_timeout=IDLE,
        deadline=DEADLINE,
    )


async def oracle_turn(
    provider: str,
    turn: Turn,
    *,
    model: str = "lab-model",
    options: object = None,
    close_fails: bool = False,
) -> Verdict:
    events: list[Event] = []
    transport = InstrumentedTransport(
        ReplayTransport([turn], provider), frozenset({0}) if close_fails else frozenset()
    )
    client = _client(provider, transport, model, options, events.append)
    return await _judge(client, events)


async def oracle_chunks(provider: str, chunks: Sequence[bytes], *, reset: bool = False) -> Verdict:
    events: list[Event] = []
    client = _client(
        provider, ChunkTransport(Chunks(chunks, reset=reset)), "m", None, events.append
    )
    return await _judge(client, events)


@dataclass(frozen=True, slots=True)
class Gated:
    output: bytes
    pieces: tuple[bytes, ...]
    outcome: Accepted | Refused
    gateway: Gateway


def options(**overrides: Any) -> GatingOptions:
    base: dict[str, Any] = {"idle_timeout": IDLE, "deadline": DEADLINE, "validate_schemas": True}
    return GatingOptions(**{**base, **overrides})


async def gate_stream(
    provider: str,
    request: Mapping[str, Any],
    upstream: Any,
    gating: GatingOptions | None = None,
) -> Gated:
    entry: Provider = registry_entry(provider)
    stream = GatingStream(entry, request, upstream, gating or options())
    pieces = tuple([piece async for piece in stream])
    assert stream.outcome is not None
    return Gated(b"".join(pieces), pieces, stream.outcome, stream.gateway)


async def gate_turn(
    provider: str,
    turn: Turn,
    request: Mapping[str, Any],
    gating: GatingOptions | None = None,
    *,
    close_fails: bool = False,
) -> Gated:
    transport = InstrumentedTransport(
        ReplayTransport([turn], provider), frozenset({0}) if close_fails else frozenset()
    )
    upstream = await transport.open(request)
    return await gate_stream(provider, request, upstream, gating)
