"""What the engine's tests share: a virtual-time event loop, the oracle (`lockgate run`'s own
client on the same bytes), the engine run on a scripted turn or raw chunks, and the official
SDKs' stream parsers on the engine's output (google-genai's both ways it reads a stream: over
httpx2, served in process, and over aiohttp, its default, from a loopback server)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, TypeVar

import anthropic
import httpx2
import openai
from aiohttp import web
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

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
from lockgate.sse import SSEDecoder, SSEFramer, canonical_frame
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


def as_released(
    events: list[tuple[str | None, object]], provider: str
) -> list[tuple[str | None, object]]:
    """The events (`without_keepalives`) a client reads of an accepted upstream stream: the
    upstream's, with the calls in Chat's canonical form (docs/wire/chat.md §5), written here
    apart from the decoder: a call's id or name stated again, identical, on a later fragment
    is left out, a whole call without an index is given its position as its index (and the
    type `function` where it states none), and arguments sent as a JSON value go out as its
    compact text."""
    if provider != "chat":
        return events
    calls: list[dict[str, object]] = []  # the id and name each call stated, by position
    released: list[tuple[str | None, object]] = []
    for name, value in events:
        value = json.loads(json.dumps(value)) if isinstance(value, dict) else value
        choices = value.get("choices") if isinstance(value, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
            for fragment in fragments if isinstance(fragments, list) else ():
                index = fragment.get("index")
                if index is None:
                    index = fragment["index"] = len(calls)
                    if fragment.get("type") is None:
                        fragment["type"] = "function"
                if index == len(calls):
                    calls.append({})
                stated = calls[index]
                function = fragment.get("function") or {}
                if isinstance(function.get("arguments"), dict | list):  # a value: its text
                    function["arguments"] = json.dumps(
                        function["arguments"], ensure_ascii=False, separators=(",", ":")
                    )
                for holder, key in ((fragment, "id"), (function, "name")):
                    given = holder.get(key)
                    if given and stated.get(key) == given:
                        del holder[key]
                    elif given:
                        stated[key] = given
        released.append((name, value))
    return released


def canonical(raw: bytes | Iterable[bytes]) -> bytes:
    """What a client receives of an accepted upstream body that holds no keep-alive: each of
    its events in the canonical form (`sse.canonical_frame`), nothing else. The same bytes as
    the body when every frame is canonical already (Responses, Chat and Anthropic as the lab
    renders them); Gemini's CRLF frames come out with LF line ends."""
    body = raw if isinstance(raw, bytes) else b"".join(raw)
    return b"".join(
        canonical_frame(frame.event) for frame in frames(body) if frame.event is not None
    )


def _blank_keepalive(gateway: Gateway) -> bool:
    """Whether the gateway's keep-alive is a bare blank line (Gemini's: its clients read no
    SSE comment), which a framer merges into the frame that follows it."""
    return not gateway.keepalive().strip(b"\r\n")


# One canonical event frame (what the engine sends): an optional `event:` line with a
# printable ASCII name, one `data:` line, LF line ends; and none of the characters that
# some readers split or strip lines on.
_CANONICAL = re.compile(rb"(?:event: [!-~]+\n)?data: [^\n\r]*\n\n")
_AMBIGUOUS = re.compile(rb"[\x00\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]|\xef\xbb\xbf")


def not_canonical(data: bytes, gateway: Gateway) -> list[bytes]:
    """The pieces of the engine's output that are neither the gateway's keep-alive nor one
    canonical event frame (and any tail no blank line ended). A blank-line keep-alive
    (Gemini's) is read as what it is wherever the framer put it: before a frame, or alone."""
    framer = SSEFramer(1 << 30)
    found = framer.feed(data)
    found.extend(framer.finish())
    blank = gateway.keepalive() if _blank_keepalive(gateway) else None
    odd = []
    for frame in found:
        raw = frame.raw
        if raw == gateway.keepalive():
            continue
        if blank is not None:
            raw = raw.lstrip(blank)
            if not raw:
                continue  # keep-alives only
        if _CANONICAL.fullmatch(raw) is None or _AMBIGUOUS.search(raw):
            odd.append(frame.raw)
    tail = framer.tail
    if blank is not None:
        tail = tail.lstrip(blank)
    if tail or data.startswith(b"\xef\xbb\xbf"):
        odd.append(tail or data[:3])
    return odd


_LINES = re.compile(rb"\r\n|\r|\n")


def _blank_keepalives(data: bytes) -> int:
    """Keep-alives where a keep-alive is a blank line: every frame of comments only (the
    engine sends one keep-alive for it) and every blank line that ends no frame."""
    count = 0
    content = False  # a line of the frame so far is a field, not a comment
    for line in _LINES.split(data)[:-1]:  # the last piece ends no line
        if line:
            content = content or not line.startswith(b":")
        elif content:
            content = False  # the blank line that ends a frame
        else:
            count += 1  # it ends a frame of comments, or stands on its own
    return count


def keepalive_count(data: bytes, gateway: Gateway) -> int:
    """The keep-alives in `data`: comment-only frames, the protocol's keep-alive events;
    where the keep-alive is a blank line (Gemini), also every blank line that ends no
    frame."""
    if _blank_keepalive(gateway):
        return _blank_keepalives(data)
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
# Gemini's parts that carry an action: the client's call, and what the provider ran.
_GEMINI_ACTIONS = (
    "functionCall",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
)


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
            if any(item.get(key) is not None for key in _GEMINI_ACTIONS):
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
    if provider == "gemini":  # Google's error object alone, in a frame of data only
        error = payload.get("error")
        return (
            event.event is None
            and list(payload) == ["error"]
            and isinstance(error, dict)
            and {"code", "message", "status"} <= set(error)
        )
    if provider == "responses":  # `error` (the SDKs raise on it), then `response.failed`
        if len(found) < 2 or found[-2].event is None or found[-2].event.event != "error":
            return False
        error = json.loads(found[-2].event.data).get("error")
        response = payload.get("response")
        return (
            event.event == "response.failed"
            and isinstance(error, dict)
            and isinstance(response, dict)
            and response.get("status") == "failed"
            and response.get("error") == {"code": error["code"], "message": error["message"]}
        )
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


GEMINI_MODEL = "lab-model"
GEMINI_KEY = "lab-key-not-a-secret"


@dataclass(frozen=True, slots=True)
class GenaiRead:
    """What google-genai made of a stream: every chunk it yielded, and what it raised
    then (None: it read to the end)."""

    chunks: tuple[genai_types.GenerateContentResponse, ...]
    raised: Exception | None

    def calls(self) -> list[tuple[str | None, str | None, object]]:
        """The calls it reports, in order: (id, name, args)."""
        return [
            (call.id, call.name, call.args)
            for chunk in self.chunks
            for call in chunk.function_calls or []
        ]


async def _genai_stream(http_options: genai_types.HttpOptions) -> GenaiRead:
    """google-genai as a user makes it (on the documented REST surface, `v1beta`; no
    retries, its default), streaming one answer."""
    client = genai.Client(api_key=GEMINI_KEY, http_options=http_options)
    got: list[genai_types.GenerateContentResponse] = []
    try:
        stream = await client.aio.models.generate_content_stream(model=GEMINI_MODEL, contents="x")
        async for chunk in stream:
            got.append(chunk)
    except Exception as exc:
        return GenaiRead(tuple(got), exc)
    finally:
        await client.aio.aclose()
    return GenaiRead(tuple(got), None)


async def genai_over_httpx(
    body: bytes, status: int = 200, content_type: str = "text/event-stream"
) -> GenaiRead:
    """google-genai's stream parser over httpx2 (`_aiter_sse_lines`: lines split at CR, LF
    and CRLF only), the body served in process."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers={"content-type": content_type}, content=body)

    transport = httpx2.MockTransport(handler)
    with httpx2.Client(transport=transport) as sync_http:  # given, so that it makes none
        async with httpx2.AsyncClient(transport=transport) as http:
            options = genai_types.HttpOptions(
                base_url="http://proxy.test",
                api_version="v1beta",
                httpx_async_client=http,
                httpx_client=sync_http,
            )
            return await _genai_stream(options)


async def _serve_once(body: bytes, status: int, content_type: str) -> tuple[asyncio.Server, str]:
    """A loopback HTTP/1.1 server answering each request with `body` (and `status`), then
    closing the connection."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(
                f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\n"
                "connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def aiohttp_loopback(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    """An aiohttp server on a free loopback port answering every method and path with
    `handler`, for the time of the block; its root URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _genai_aiohttp_session(body: bytes, status: int, content_type: str) -> GenaiRead:
    server, base_url = await _serve_once(body, status, content_type)
    async with server:
        return await _genai_stream(genai_types.HttpOptions(base_url=base_url, api_version="v1beta"))


async def genai_over_aiohttp(
    body: bytes, status: int = 200, content_type: str = "text/event-stream"
) -> GenaiRead:
    """google-genai's stream parser over aiohttp, what it uses by default when aiohttp is
    installed (`_aiter_aiohttp_lines`: lines split at LF only, then right-stripped), the
    body served by a loopback server of its own: on a real event loop, in a worker thread
    (sockets have no place on the tests' virtual-time loop)."""
    return await asyncio.to_thread(asyncio.run, _genai_aiohttp_session(body, status, content_type))


async def _genai_httpx(body: bytes) -> None:
    read = await genai_over_httpx(body)
    if read.raised is not None:
        raise read.raised


async def _genai_aiohttp(body: bytes) -> None:
    read = await genai_over_aiohttp(body)
    if read.raised is not None:
        raise read.raised


SDK_READERS: dict[str, tuple[Callable[[bytes], Awaitable[None]], ...]] = {
    "chat": (_openai_chat,),
    "responses": (_openai_responses_raw, _openai_responses_helper),
    "anthropic": (_anthropic_messages,),
    "gemini": (_genai_httpx, _genai_aiohttp),
}
SDK_ERRORS: dict[str, type[Exception]] = {
    "chat": openai.APIError,
    "responses": openai.APIError,
    "anthropic": anthropic.APIStatusError,
    "gemini": genai_errors.APIError,
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
