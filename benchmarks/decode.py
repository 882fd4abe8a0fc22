"""Decode throughput: lockgate's pipeline vs the SDK's typed events vs a bare floor.

One recorded-shape Responses stream of 40,000+ events (text deltas and 1-character
argument deltas, two edit calls, then response.completed) is decoded by:

  (a) lockgate: bounded SSE decoder + Responses decoder + gate, through the real boundary
      (`StreamingModelClient.complete`) over an in-memory transport;
  (b) the SDK's typed event path: `responses.create(stream=True)` over httpx.MockTransport;
  (c) a floor: `bytes.split` + `json.loads` per event, nothing else.

Prints events/s for each (median of 5 runs) and the ratios a/c and a/b.
Target: a/c >= 0.6 (MET / NOT MET printed). This is the bulk, in-memory view: the end-to-end
figures over HTTP, one chunk per event, are `endtoend.py` and `endtoend_bulk.py`.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/decode.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

import httpx2 as httpx
import openai

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.fixture import ALL_TOOLS
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder, sse_bytes

CHUNK_BYTES = 16 * 1024
TEXT_DELTAS = 20_000
ARGUMENT_CHARS_PER_CALL = 10_000


def edit_arguments(length: int, marker: str) -> str:
    skeleton = json.dumps({"path": "calculator.py", "old": "", "new": marker})
    filler = "x" * (length - len(skeleton))
    text = json.dumps({"path": "calculator.py", "old": filler, "new": marker})
    assert len(text) == length
    return text


def build_stream() -> tuple[bytes, int]:
    builder = ResponseBuilder("resp_bench").created()
    text = "".join(f"w{i % 10}." for i in range(TEXT_DELTAS))  # 3-character deltas
    builder.text("msg_1", text, pieces=TEXT_DELTAS)
    for number in (1, 2):
        arguments = edit_arguments(ARGUMENT_CHARS_PER_CALL, f"fix {number}")
        builder.call(f"fc_{number}", f"call_{number}", "edit", arguments, pieces=len(arguments))
    builder.completed()
    payload = b"".join(sse_bytes(event) for event in builder.events)
    return payload, len(builder.events)


class MemoryStream:
    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.payload), CHUNK_BYTES):
            yield self.payload[start : start + CHUNK_BYTES]

    async def aclose(self) -> None:
        pass


class MemoryTransport:
    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> MemoryStream:
        return MemoryStream(self.payload)

    async def aclose(self) -> None:
        pass


def run_lockgate(payload: bytes) -> int:
    client = StreamingModelClient(ResponsesCodec("bench"), MemoryTransport(payload))
    decision = asyncio.run(client.complete([Message("user", "go")], ALL_TOOLS))
    assert len(decision.tool_calls) == 2
    return 1


class ChunkedBody(httpx.AsyncByteStream):
    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.payload), CHUNK_BYTES):
            yield self.payload[start : start + CHUNK_BYTES]


def run_sdk(payload: bytes) -> int:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=ChunkedBody(payload))

    async def consume() -> int:
        http_client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        client = openai.AsyncOpenAI(
            api_key="sk-bench",
            base_url="http://bench.test/v1",
            max_retries=0,
            http_client=cast(Any, http_client),  # the SDK also takes legacy httpx clients
        )
        count = 0
        stream = await client.responses.create(model="bench", input="go", stream=True)
        async for _event in stream:
            count += 1
        await client.close()
        return count

    return asyncio.run(consume())


def run_floor(payload: bytes) -> int:
    count = 0
    for frame in payload.split(b"\n\n"):
        if frame:
            json.loads(frame[frame.index(b"data: ") + 6 :])
            count += 1
    return count


def median_rate(run: Callable[[bytes], int], payload: bytes, events: int, repeats: int) -> float:
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        run(payload)
        rates.append(events / (time.perf_counter() - started))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    payload, events = build_stream()
    assert run_floor(payload) == events
    assert run_sdk(payload) == events  # the SDK path really decoded every event
    print(f"stream: {events} events, {len(payload) / 1e6:.1f} MB, {CHUNK_BYTES // 1024} KiB chunks")
    floor = median_rate(run_floor, payload, events, args.repeats)
    ours = median_rate(run_lockgate, payload, events, args.repeats)
    sdk = median_rate(run_sdk, payload, events, args.repeats)
    print(f"(a) lockgate SSE + Responses decoder + gate: {ours:12,.0f} events/s")
    print(f"(b) SDK typed events (responses.create):     {sdk:12,.0f} events/s")
    print(f"(c) floor bytes.split + json.loads:          {floor:12,.0f} events/s")
    met = "MET" if ours / floor >= 0.6 else "NOT MET"
    print(f"  [{met}] in memory, 16 KiB chunks: a/c = {ours / floor:.2f} (target >= 0.60)")
    print(f"a/b = {ours / sdk:.1f}")


if __name__ == "__main__":
    main()
