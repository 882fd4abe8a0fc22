"""The end-to-end comparison shared by `endtoend.py` (one chunk per event, each on its own
read) and `endtoend_bulk.py` (the same chunks flushed back to back, and one bulk chunk).

For each protocol one stream of about 2,000 events (1,500 four-character text deltas, one
`edit` call whose arguments arrive in 500 eight-character pieces, the terminal events) is
served by `_server.py` in another process. Every contender runs the whole request (open,
read, decode, close) once to warm up and then `repeats` times, all interleaved round by
round; the figure is the median CPU of this process (`time.process_time()`) per SSE event.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from benchmarks._common import (
    HISTORY,
    KEY,
    MODEL,
    Report,
    advance,
    base_url,
    endpoint,
    heading,
    lockgate_client,
    lockgate_transport,
    median,
    request_body,
    sdk_client,
    sdk_raw_post,
    server,
)
from benchmarks._streams import StreamSpec, stream_body, stream_frames
from lockgate.errors import StreamInterrupted
from lockgate.events import ignore_event
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import ResponseGate
from lockgate.providers import PROVIDERS, CodecOptions
from lockgate.sse import SSEDecoder
from lockgate.transport import ByteStream, Transport

Run = Callable[[], Awaitable[object]]
GAP_US = 20  # `chunks`: the server sleeps after each event (~0.1 ms: one read per event)

SHAPE_TITLES = {
    "chunks": "one chunk per event, each event on its own read (server pauses ~0.1 ms)",
    "flushed": "one chunk per event, flushed back to back (the server outpaces the client)",
    "bulk": "bulk: the whole body as one chunk",
}

LOCKGATE = "lockgate (SDK aiohttp client, default)"
LOCKGATE_HTTPX = "lockgate (SDK httpx2 client)"
LOCKGATE_RAW = "lockgate + proposal A: transport reads aiter_raw()"
LOCKGATE_DIRECT = "lockgate + proposal B: transport reads aiohttp directly"
PIPELINE = "lockgate pipeline in memory (SSE+decoder+gate)"
FLOOR_A = "floor (a): in memory, split + json.loads"
FLOOR_B = "floor (b): HTTP, SDK aiohttp raw + split + json.loads"
RAW_AIO = "raw body read only, SDK aiohttp client"
RAW_HTTPX = "raw body read only, SDK httpx2 client (default)"
NAIVE = "naive: httpx2 stream + aiter_lines + json.loads"


# --- contenders ---------------------------------------------------------------------------


def parse_floor(body: bytes) -> int:
    """Floor (a): split the body into frames and `json.loads` every frame's data."""
    count = 0
    loads = json.loads
    for frame in body.split(b"\n\n"):
        if not frame:
            continue
        data = frame[frame.index(b"data: ") + 6 :]
        if data != b"[DONE]":
            loads(data)
        count += 1
    return count


def pipeline(protocol: str, frames: list[bytes]) -> int:
    """lockgate's own work on the same frames, one chunk each, without HTTP."""
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model=MODEL))
    sse = SSEDecoder()
    decoder = codec.new_decoder()
    gate = ResponseGate(ALL_TOOLS, ignore_event)
    decision = None
    for frame in frames:
        decision = advance(sse.feed(frame), decoder, gate, decision)
    for event in decoder.end_of_stream():
        decision = gate.accept(event) or decision
    assert decision is not None
    return len(frames)


async def http_floor(client: Any, protocol: str, body: bytes) -> int:
    """Floor (b): the SDK's aiohttp-backed client, raw body, frames split, `json.loads`."""
    response = await sdk_raw_post(client, protocol, body)
    count = 0
    rest = b""
    loads = json.loads
    try:
        async for chunk in response.aiter_bytes():
            frames = (rest + chunk if rest else chunk).split(b"\n\n")
            rest = frames.pop()
            for frame in frames:
                data = frame[frame.index(b"data: ") + 6 :]
                if data != b"[DONE]":
                    loads(data)
                count += 1
    finally:
        await response.aclose()
    return count


async def raw_read(client: Any, protocol: str, body: bytes) -> int:
    """The SDK's raw POST, the body read and dropped: the HTTP stack's own cost."""
    response = await sdk_raw_post(client, protocol, body)
    reads = 0
    try:
        async for _chunk in response.aiter_bytes():
            reads += 1
    finally:
        await response.aclose()
    return reads


async def naive(client: httpx2.AsyncClient, url: str, body: bytes) -> int:
    """A naive client: httpx2 stream, `aiter_lines`, `json.loads` on `data:` lines."""
    count = 0
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    async with client.stream("POST", url, content=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                if data != "[DONE]":
                    json.loads(data)
                count += 1
    return count


def sdk_tools(protocol: str) -> list[dict[str, Any]]:
    from lockgate.providers.anthropic.codec import encode_tool as anthropic_tool
    from lockgate.providers.chat.codec import encode_tool as chat_tool
    from lockgate.providers.responses.codec import encode_tool as responses_tool

    encode = {"responses": responses_tool, "chat": chat_tool, "anthropic": anthropic_tool}
    return [encode[protocol](tool) for tool in ALL_TOOLS]


TYPED_LABELS = {
    ("responses", False): "responses.create(stream=True)",
    ("responses", True): "responses.stream()",
    ("chat", True): "chat.completions.stream()",
    ("anthropic", True): "messages.stream()",
}


async def sdk_typed(client: Any, protocol: str, helper: bool) -> int:
    """The official SDK's typed stream, every event iterated, the final value built."""
    tools: Any = sdk_tools(protocol)
    count = 0
    if protocol == "responses" and not helper:
        stream = await client.responses.create(
            model=MODEL, input="Fix the bug.", tools=tools, stream=True
        )
        async for _event in stream:
            count += 1
        return count
    if protocol == "responses":
        async with client.responses.stream(model=MODEL, input="Fix the bug.", tools=tools) as s:
            async for _event in s:
                count += 1
            final = await s.get_final_response()
        assert final.output
        return count
    if protocol == "chat":
        async with client.chat.completions.stream(
            model=MODEL, messages=[{"role": "user", "content": "Fix the bug."}], tools=tools
        ) as s:
            async for _event in s:
                count += 1
            completion = await s.get_final_completion()
        assert completion.choices[0].message.tool_calls
        return count
    async with client.messages.stream(
        model=MODEL,
        max_tokens=2048,
        messages=[{"role": "user", "content": "Fix the bug."}],
        tools=tools,
    ) as s:
        async for _event in s:
            count += 1
        message = await s.get_final_message()
    assert message.content
    return count


# --- proposals for the transports (measured here; the transports are not changed) -------


class ProposedStream:
    """A transport's `RawStream` as proposed: iterate the body without httpx2's decoding
    layers when the body is not content-encoded. `direct`: read aiohttp's response content
    itself (private attributes of the SDKs' vendored httpx-aiohttp); else `aiter_raw()`."""

    def __init__(self, response: httpx2.Response, direct: bool) -> None:
        self._response = response
        self._direct = direct

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            if self._direct:
                stream: Any = self._response.stream  # httpx2's BoundAsyncStream
                content = stream._stream._aiohttp_response.content
                async for chunk in content.iter_any():
                    yield chunk
            else:
                async for chunk in self._response.aiter_raw():
                    yield chunk
        except Exception as exc:
            raise StreamInterrupted(f"{type(exc).__name__}: {exc}") from None

    async def aclose(self) -> None:
        await self._response.aclose()


class ProposedTransport:
    """Wraps lockgate's own transport; only the body iteration differs."""

    def __init__(self, inner: Transport, direct: bool) -> None:
        self.inner = inner
        self.direct = direct

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> ByteStream:
        stream = await self.inner.open(request)
        response: httpx2.Response = stream._response  # type: ignore[attr-defined]
        if response.headers.get("content-encoding", "identity") != "identity":
            return stream
        return ProposedStream(response, self.direct)

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountingTransport:
    """Counts the reads lockgate's client sees (diagnostics: never in a timed run)."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.reads = 0

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> ByteStream:
        return _Counted(await self.inner.open(request), self)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Counted:
    def __init__(self, inner: ByteStream, owner: CountingTransport) -> None:
        self.inner = inner
        self.owner = owner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.owner.reads += 1
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


# --- the measurement ----------------------------------------------------------------------


@dataclass
class Contender:
    name: str
    run: Run
    cpu: list[float] = field(default_factory=list)


SLOW_SECONDS = 0.15  # a contender whose warm-up took longer runs every other round


async def measure(contenders: list[Contender], repeats: int, budget: float) -> None:
    """1 warm-up each, then interleaved rounds until each contender has `repeats` runs
    (slow contenders, the SDKs' typed paths: 3); after `budget` seconds, only contenders
    with fewer than 3 runs go on."""
    slow: set[str] = set()
    for contender in contenders:
        before = time.process_time()
        await contender.run()
        if time.process_time() - before > SLOW_SECONDS:
            slow.add(contender.name)
    started = time.monotonic()
    while True:
        due = [c for c in contenders if len(c.cpu) < (3 if c.name in slow else repeats)]
        if time.monotonic() - started > budget:
            due = [c for c in due if len(c.cpu) < 3]
        if not due and all(len(c.cpu) >= min(3, repeats) for c in contenders):
            break
        for contender in due:
            gc.collect()
            before = time.process_time()
            await contender.run()
            contender.cpu.append(time.process_time() - before)


def lockgate_contender(name: str, protocol: str, transport: Transport) -> tuple[Contender, Run]:
    client = lockgate_client(protocol, transport)

    async def run() -> int:
        message = await client.complete(HISTORY, ALL_TOOLS)
        assert message.tool_calls, message
        assert message.tool_calls[0].name == "edit", message
        return 1

    return Contender(name, run), client.aclose


async def figures_for(
    origin: str, protocol: str, shape: str, repeats: int, budget: float
) -> tuple[dict[str, float], str]:
    """Median CPU µs per SSE event of every contender, and a line of read counts."""
    gap = GAP_US if shape == "chunks" else 0
    spec = StreamSpec(protocol, "bulk" if shape == "bulk" else "chunks", gap_us=gap)
    frames = stream_frames(spec)
    events = len(frames)
    body = stream_body(spec)
    url = base_url(origin, spec)
    request = request_body(protocol)
    contenders: list[Contender] = []
    closers: list[Run] = []

    def add_lockgate(name: str, transport: Transport) -> None:
        contender, close = lockgate_contender(name, protocol, transport)
        contenders.append(contender)
        closers.append(close)

    add_lockgate(LOCKGATE, lockgate_transport(protocol, url, "aiohttp"))
    add_lockgate(LOCKGATE_HTTPX, lockgate_transport(protocol, url, "httpx"))
    add_lockgate(LOCKGATE_RAW, ProposedTransport(lockgate_transport(protocol, url), False))
    add_lockgate(LOCKGATE_DIRECT, ProposedTransport(lockgate_transport(protocol, url), True))

    async def in_memory() -> int:
        return pipeline(protocol, frames)

    async def floor_a() -> int:
        return parse_floor(body)

    contenders.append(Contender(PIPELINE, in_memory))
    contenders.append(Contender(FLOOR_A, floor_a))
    sdks = {backend: sdk_client(protocol, url, backend) for backend in ("aiohttp", "httpx")}
    aio, default = sdks["aiohttp"], sdks["httpx"]
    for client in sdks.values():
        closers.append(client.close)
    contenders.append(Contender(FLOOR_B, lambda: http_floor(aio, protocol, request)))
    contenders.append(Contender(RAW_AIO, lambda: raw_read(aio, protocol, request)))
    contenders.append(Contender(RAW_HTTPX, lambda: raw_read(default, protocol, request)))
    helpers = (False, True) if protocol == "responses" else (True,)
    for helper in helpers:
        label = TYPED_LABELS[(protocol, helper)]
        for backend_name, client in (("httpx2, default", default), ("aiohttp", aio)):

            def typed(c: Any = client, h: bool = helper) -> Awaitable[int]:
                return sdk_typed(c, protocol, h)

            contenders.append(Contender(f"SDK typed {label} ({backend_name})", typed))
    naive_client = httpx2.AsyncClient(trust_env=False, timeout=60.0)
    closers.append(naive_client.aclose)
    contenders.append(
        Contender(NAIVE, lambda: naive(naive_client, endpoint(origin, spec), request))
    )
    try:
        await measure(contenders, repeats, budget)
        counting = CountingTransport(lockgate_transport(protocol, url))
        counted = lockgate_client(protocol, counting)
        await counted.complete(HISTORY, ALL_TOOLS)
        await counted.aclose()
        reads_aio = await raw_read(aio, protocol, request)
        reads_httpx = await raw_read(default, protocol, request)
    finally:
        for close in closers:
            await close()
    figures = {c.name: median(c.cpu) / events * 1e6 for c in contenders}
    fewest, most = min(len(c.cpu) for c in contenders), max(len(c.cpu) for c in contenders)
    reads = (
        f"{events} events, {len(body) / 1e3:.0f} kB, medians of {fewest}-{most} runs; reads per "
        f"event: lockgate {counting.reads / events:.2f}, SDK aiohttp {reads_aio / events:.2f}, "
        f"SDK httpx2 {reads_httpx / events:.2f}"
    )
    return figures, reads


def typed_baselines(figures: dict[str, float]) -> tuple[str, str]:
    """The cheapest SDK typed path with the SDK's default client, and with any client."""
    typed = {k: v for k, v in figures.items() if k.startswith("SDK typed")}
    default = {k: v for k, v in typed.items() if "default" in k}
    return min(default, key=default.__getitem__), min(typed, key=typed.__getitem__)


def print_figures(protocol: str, figures: dict[str, float], reads: str) -> None:
    print(f"-- {protocol}: {reads}")
    ours = figures[LOCKGATE]
    for name, value in figures.items():
        print(f"   {name:58s} {value:8.2f} µs/event   (lockgate = {value / ours:5.2f}x)")
    default_typed, any_typed = typed_baselines(figures)
    print(
        f"   lockgate's speed: {figures[FLOOR_B] / ours:.2f}x floor (b), "
        f"{figures[FLOOR_A] / ours:.2f}x floor (a), {figures[NAIVE] / ours:.2f}x naive, "
        f"{figures[default_typed] / ours:.1f}x SDK typed (default client), "
        f"{figures[any_typed] / ours:.1f}x SDK typed (aiohttp client); "
        f"SDK aiohttp vs httpx2: lockgate {figures[LOCKGATE_HTTPX] / ours:.2f}x, raw read "
        f"{figures[RAW_HTTPX] / figures[RAW_AIO]:.2f}x cheaper",
        flush=True,
    )


def check_targets(report: Report, protocol: str, regime: str, figures: dict[str, float]) -> None:
    ours = figures[LOCKGATE]
    floor_a, floor_b, naive_cost = figures[FLOOR_A], figures[FLOOR_B], figures[NAIVE]
    default_typed, any_typed = typed_baselines(figures)
    where = f"{protocol}, {regime}"
    report.check(
        f"{where}: lockgate >= 0.6x the HTTP parse floor (b)",
        floor_b / ours >= 0.6,
        f"{floor_b / ours:.2f}x (floor b {floor_b:.2f} µs/event, lockgate {ours:.2f}; "
        f"in-memory floor a {floor_a:.2f} µs/event: {floor_a / ours:.2f}x)",
    )
    report.check(
        f"{where}: lockgate >= 2.5x the naive httpx client",
        naive_cost / ours >= 2.5,
        f"{naive_cost / ours:.2f}x (naive {naive_cost:.2f} µs/event); with "
        + ", ".join(
            f"{label} {naive_cost / figures[name]:.2f}x"
            for label, name in (("proposal A", LOCKGATE_RAW), ("proposal B", LOCKGATE_DIRECT))
        ),
    )
    report.check(
        f"{where}: lockgate >= 15x the SDK's typed path",
        figures[default_typed] / ours >= 15,
        f"{figures[default_typed] / ours:.1f}x against {default_typed} "
        f"({figures[default_typed]:.2f} µs/event); against {any_typed} "
        f"{figures[any_typed] / ours:.1f}x; with proposal B "
        f"{figures[default_typed] / figures[LOCKGATE_DIRECT]:.1f}x",
    )


async def run_regimes(
    shapes: list[str], protocols: list[str], repeats: int, budget: float, title: str
) -> Report:
    report = Report(title)
    with server() as origin:
        for shape in shapes:
            heading(SHAPE_TITLES[shape])
            for protocol in protocols:
                figures, reads = await figures_for(origin, protocol, shape, repeats, budget)
                print_figures(protocol, figures, reads)
                if shape != "bulk":
                    regime = "one chunk per event" + (
                        " (own read)" if shape == "chunks" else " (back to back)"
                    )
                    check_targets(report, protocol, regime, figures)
    return report
