"""What the engine's tests share: a virtual-time event loop, the oracle (`lockgate run`'s own
client on the same bytes), the engine run on a scripted turn or raw chunks, and the official
SDKs' stream parsers on the engine's output."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anthropic
import httpx2
import openai

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
from lockgate.sse import SSEDecoder, SSEFramer
from lockgate.transport import ByteStream

T = TypeVar("T")

PROTOCOLS = ("responses", "chat", "anthropic")
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


# --- reading the engine's output --------------------------------------------------------------


def frames(data: bytes) -> list[Any]:
    """The raw frames of `data` and its tail (`SSEFramer`, checked against `SSEDecoder` in
    test_framer.py)."""
    framer = SSEFramer(1 << 30)
    found = framer.feed(data)
    found.extend(framer.finish())
    return found


def without_keepalives(data: bytes, gateway: Gateway) -> list[tuple[str | None, object]]:
    """The events a client reads of `data`, in order: (name, data as a JSON value, or the
    bytes where it is not JSON), keep-alives (comment-only frames, the protocol's keep-alive
    events) and the events the gateway skips unread left out. Equal for a stream and its
    canonical re-framing (`sse.canonical_frame` writes equal JSON on one line)."""
    events: list[tuple[str | None, object]] = []
    for frame in frames(data):
        event = frame.event
        if event is None or gateway.is_keepalive(event) or gateway.skipped(event):
            continue
        try:
            value: object = json.loads(event.data)
        except ValueError:
            value = event.data
        events.append((event.event, value))
    return events


# One canonical event frame (what the engine sends): an optional `event:` line with a
# printable ASCII name, one `data:` line, LF line ends; and none of the characters that
# some readers split or strip lines on.
_CANONICAL = re.compile(rb"(?:event: [!-~]+\n)?data: [^\n\r]*\n\n")
_AMBIGUOUS = re.compile(rb"[\x00\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]|\xef\xbb\xbf")


def not_canonical(data: bytes, gateway: Gateway) -> list[bytes]:
    """The pieces of the engine's output that are neither the gateway's keep-alive nor one
    canonical event frame (and any tail no blank line ended)."""
    framer = SSEFramer(1 << 30)
    found = framer.feed(data)
    found.extend(framer.finish())
    odd = [
        frame.raw
        for frame in found
        if frame.raw != gateway.keepalive()
        and (_CANONICAL.fullmatch(frame.raw) is None or _AMBIGUOUS.search(frame.raw))
    ]
    if framer.tail or data.startswith(b"\xef\xbb\xbf"):
        odd.append(framer.tail or data[:3])
    return odd


def keepalive_count(data: bytes, gateway: Gateway) -> int:
    return sum(
        1
        for frame in frames(data)
        if frame.keepalive or (frame.event is not None and gateway.is_keepalive(frame.event))
    )


_TOOL_TYPES = frozenset(
    {
        "function_call",
        "tool_use",
        "server_tool_use",
        "mcp_tool_use",
        "input_json_delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    }
)
_TOOL_FINISHES = frozenset({"tool_calls", "tool_use", "function_call"})


def _tool_marker(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            kind = item.get("type")
            if isinstance(kind, str) and (
                kind in _TOOL_TYPES
                or kind.endswith(("_call", "_tool_result"))
                or "function_call" in kind
            ):
                return True
            if item.get("tool_calls") or item.get("function_call"):
                return True
            if item.get("finish_reason") in _TOOL_FINISHES:
                return True
            if item.get("stop_reason") in _TOOL_FINISHES:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def decoded_events(data: bytes) -> list[Any]:
    """The events an SSE client decodes from `data` (lockgate's `SSEDecoder`)."""
    decoder = SSEDecoder(1 << 30)
    events = decoder.feed(data)
    events.extend(decoder.finish())
    return events


def tool_events(data: bytes) -> list[bytes]:
    """The data of every event in `data` that carries a tool call or an action."""
    found = []
    for event in decoded_events(data):
        try:
            payload = json.loads(event.data)
        except ValueError:
            continue
        if _tool_marker(payload):
            found.append(event.data)
    return found


def ends_with_refusal(data: bytes, provider: str) -> bool:
    """The last event is the protocol's stream error, and nothing follows it."""
    found = frames(data)
    if not found or found[-1].event is None or not data.endswith(found[-1].raw):
        return False
    event = found[-1].event
    payload = json.loads(event.data)
    if provider == "chat":
        return event.event is None and isinstance(payload.get("error"), dict)
    return (
        event.event == "error"
        and payload.get("type") == "error"
        and isinstance(payload.get("error"), dict)
    )


# --- the official SDKs on the engine's output -----------------------------------------------


def _serving(body: bytes) -> httpx2.AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


def _openai(body: bytes) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="http://proxy.test/v1",
        max_retries=0,
        http_client=_serving(body),
    )


async def _openai_chat(body: bytes) -> None:
    client = _openai(body)
    async with client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        async for _ in stream:
            pass


async def _openai_responses_raw(body: bytes) -> None:
    client = _openai(body)
    async with client:
        stream = await client.responses.create(model="m", input="x", stream=True)
        async for _ in stream:
            pass


async def _openai_responses_helper(body: bytes) -> None:
    client = _openai(body)
    async with client, client.responses.stream(model="m", input="x") as stream:
        async for _ in stream:
            pass


async def _anthropic_messages(body: bytes) -> None:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test",
        base_url="http://proxy.test",
        max_retries=0,
        http_client=_serving(body),
    )
    async with (
        client,
        client.messages.stream(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "x"}]
        ) as stream,
    ):
        async for _ in stream:
            pass


SDK_READERS: dict[str, tuple[Callable[[bytes], Awaitable[None]], ...]] = {
    "chat": (_openai_chat,),
    "responses": (_openai_responses_raw, _openai_responses_helper),
    "anthropic": (_anthropic_messages,),
}
SDK_ERRORS: dict[str, type[Exception]] = {
    "chat": openai.APIError,
    "responses": openai.APIError,
    "anthropic": anthropic.APIStatusError,
}


async def sdk_raises(provider: str, body: bytes) -> list[str]:
    """Problems (empty: none): every official SDK parser for the protocol must raise its
    stream error, carrying lockgate's message, on `body`."""
    problems = []
    for reader in SDK_READERS[provider]:
        try:
            await reader(body)
        except SDK_ERRORS[provider] as exc:
            if "lockgate" not in str(exc):
                problems.append(f"{reader.__name__} raised without lockgate's message: {exc}")
        except Exception as exc:
            problems.append(f"{reader.__name__} raised {type(exc).__name__}: {exc}")
        else:
            problems.append(f"{reader.__name__} did not raise")
    return problems


async def sdk_reads(provider: str, body: bytes) -> list[str]:
    """Problems (empty: none): every official SDK parser for the protocol must read `body`
    to its end without raising."""
    problems = []
    for reader in SDK_READERS[provider]:
        try:
            await reader(body)
        except Exception as exc:
            problems.append(f"{reader.__name__} raised {type(exc).__name__}: {exc}")
    return problems
