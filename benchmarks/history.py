"""Opening a request against history length: encode + open CPU, per protocol.

For histories of 10, 100 and 1,000 items (a user request, then assistant turns that call a
tool and the tool results, ~400-character results), the client CPU
(`time.process_time()`) from the history to the open response head:

  lockgate      `codec.encode(history, tools)` + `transport.open(request)` (the body is
                sent as the codec built it: one `json.dumps`, none of the SDK's per-field
                request transform), aiohttp-backed SDK client; the encoding alone (codec
                + `json.dumps`, no I/O) is printed as "(of which encode)";
  SDK raw post  the SDK's public `post(..., content=bytes, stream=True)` with the same
                body, already encoded (the HTTP path alone);
  SDK typed     the SDK's own `create(**request, stream=True)` with the same native
                request (its request transform included).

The body is read and the stream closed outside the measurement. Medians of interleaved
runs, against the loopback server in another process. Target: <= 20 ms of CPU to open a
request with a 1,000-item history. Prints MET / NOT MET; exits 0 unless something failed.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/history.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from benchmarks._common import (
    MODEL,
    Report,
    base_url,
    heading,
    lockgate_transport,
    median,
    sdk_client,
    sdk_raw_post,
    server,
)
from benchmarks._streams import PROTOCOLS, StreamSpec
from lockgate.conversation import Message, ToolCall
from lockgate.fixture import ALL_TOOLS
from lockgate.http import encode_body
from lockgate.providers import PROVIDERS, CodecOptions

LENGTHS = (10, 100, 1000)
TARGET_MS = 20.0


def history(items: int) -> list[Message]:
    """`items` messages: a user request, then (assistant call, tool result) pairs, an
    assistant answer at the end when the count is even."""
    messages = [Message("user", "Fix the bug in calculator.py; run the tests after.")]
    number = 0
    while len(messages) + 2 <= items:
        number += 1
        call_id = f"call_{number}"
        arguments = '{"path": "calculator.py"}'
        call = ToolCall(call_id, "read", {"path": "calculator.py"}, arguments)
        messages.append(Message("assistant", f"Reading it ({number}).", (call,)))
        content = f"def add(a, b):  # version {number}\n" + "    return a - b\n" * 22
        messages.append(Message("tool", content, tool_call_id=call_id))
    if len(messages) < items:
        messages.append(Message("assistant", "Done."))
    return messages


Closer = Callable[[], Awaitable[None]]


async def read_and_close(stream: Any) -> None:
    async for _chunk in stream:
        pass
    await stream.aclose()


def sdk_typed_call(client: Any, protocol: str, request: dict[str, Any]) -> Awaitable[Any]:
    if protocol == "responses":
        return client.responses.create(**request)  # type: ignore[no-any-return]
    if protocol == "chat":
        return client.chat.completions.create(**request)  # type: ignore[no-any-return]
    return client.messages.create(**request)  # type: ignore[no-any-return]


async def length_figures(
    codec: Any, transport: Any, sdk: Any, protocol: str, items: int, rounds: int
) -> dict[str, float]:
    """Median CPU ms per way of opening, for one history length."""
    messages = history(items)
    native = codec.encode(messages, ALL_TOOLS)
    body = encode_body(native)

    async def encode_only() -> Closer:
        encode_body(codec.encode(messages, ALL_TOOLS))
        return _nothing

    async def lockgate_open() -> Closer:
        request = codec.encode(messages, ALL_TOOLS)
        stream = await transport.open(request)
        return lambda: read_and_close(stream)

    async def raw_open() -> Closer:
        response = await sdk_raw_post(sdk, protocol, body)
        return lambda: read_and_close(_Raw(response))

    async def typed_open() -> Closer:
        stream = await sdk_typed_call(sdk, protocol, dict(native))
        return stream.close  # type: ignore[no-any-return]

    runs: dict[str, Callable[[], Awaitable[Closer]]] = {
        "lockgate encode + open": lockgate_open,
        "(of which encode)": encode_only,
        "SDK raw post (same bytes)": raw_open,
        "SDK typed create (transform)": typed_open,
    }
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    count = rounds if items < 1000 else max(3, rounds // 2)
    for round_number in range(count + 1):
        for name, run in runs.items():
            gc.collect()
            started = time.process_time()
            close = await run()
            spent = time.process_time() - started
            await close()
            if round_number:  # the first round warms up
                cpu[name].append(spent)
    figures = {name: median(values) * 1e3 for name, values in cpu.items()}
    figures["body kB"] = len(body) / 1e3
    return figures


async def _nothing() -> None:
    return None


async def protocol_figures(origin: str, protocol: str, rounds: int) -> dict[int, dict[str, float]]:
    spec = StreamSpec(protocol, "tiny")
    url = base_url(origin, spec)
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model=MODEL))
    transport = lockgate_transport(protocol, url)
    sdk = sdk_client(protocol, url, "aiohttp")
    try:
        return {
            items: await length_figures(codec, transport, sdk, protocol, items, rounds)
            for items in LENGTHS
        }
    finally:
        await transport.aclose()
        await sdk.close()


class _Raw:
    def __init__(self, response: Any) -> None:
        self.response = response

    async def __aiter__(self) -> Any:
        async for chunk in self.response.aiter_bytes():
            yield chunk

    async def aclose(self) -> None:
        await self.response.aclose()


async def main_async(rounds: int, protocols: list[str]) -> Report:
    report = Report("history")
    with server() as origin:
        for protocol in protocols:
            heading(f"{protocol}: CPU to open a request (ms), against history length")
            figures = await protocol_figures(origin, protocol, rounds)
            for items, row in figures.items():
                cells = ", ".join(f"{k} {v:7.2f}" for k, v in row.items() if k != "body kB")
                print(f"  {items:5,} items ({row['body kB']:6.0f} kB body): {cells}")
            ours = figures[1000]["lockgate encode + open"]
            typed = figures[1000]["SDK typed create (transform)"]
            report.check(
                f"{protocol}: opening with a 1,000-item history <= {TARGET_MS:g} ms CPU",
                ours <= TARGET_MS,
                f"{ours:.2f} ms (SDK raw post {figures[1000]['SDK raw post (same bytes)']:.2f}"
                f" ms, SDK typed create {typed:.2f} ms = {typed / ours:.1f}x lockgate)",
            )
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--protocol", choices=PROTOCOLS, action="append")
    args = parser.parse_args()
    started = time.monotonic()
    report = asyncio.run(main_async(args.rounds, args.protocol or list(PROTOCOLS)))
    print()
    report.summary()
    print(f"(history took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
