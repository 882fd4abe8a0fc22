"""The gate's CPU per event in-process, without the wire: `GatingStream` over the proxy
benchmark's generated streams (`_streams.py`, OpenAI-shaped Chat chunks), one frame per
read, as `benchmarks/proxy.py`'s CPU rows feed them. Prints µs per event (best of N runs)
and, with `--profile`, cProfile's top functions by own time.

`--wire`: cProfile inside the proxy's own process instead (`_proxy.py lockgate`, with
`LOCKGATE_BENCH_PROFILE`), the benchmark's client reading the streams through it from the
benchmark server (aiohttp's share included).

`--protocol bedrock`: Bedrock ConverseStream's binary event stream (the lab renderer's
messages) through the event-stream framing instead of Chat's SSE.

Run: `.venv/bin/python benchmarks/profile_gate.py [--protocol chat|bedrock] [--profile |
--wire] [--runs N] [--text N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import pstats
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from benchmarks._common import request_body
from benchmarks._streams import StreamSpec, stream_frames
from lockgate.providers import PROVIDERS

if TYPE_CHECKING:
    from benchmarks._proxy import Proxy
from lockgate.proxy.engine import Accepted, GatingStream


class _Body:
    """The upstream body as the proxy's (`engine.ResumableBody`): one frame a read."""

    def __init__(self, frames: list[bytes]) -> None:
        self._frames = iter(frames)

    async def read_chunk(self) -> bytes:
        return next(self._frames, b"")

    async def aclose(self) -> None:
        pass

    async def __aiter__(self) -> AsyncIterator[bytes]:  # unused: read_chunk is
        while chunk := await self.read_chunk():
            yield chunk


async def one(frames: list[bytes], request: dict[str, object], protocol: str = "chat") -> int:
    framing = "eventstream" if protocol == "bedrock" else "sse"
    stream = GatingStream(PROVIDERS[protocol], request, _Body(frames), framing=framing)
    out = 0
    async for piece in stream:
        out += len(piece)
    assert isinstance(stream.outcome, Accepted), stream.outcome
    return out


async def run(
    frames: list[bytes], request: dict[str, object], streams: int, protocol: str = "chat"
) -> float:
    started = time.process_time()
    for _ in range(streams):
        await one(frames, request, protocol)
    return (time.process_time() - started) / (len(frames) * streams) * 1e6


def wire(label: str, spec: StreamSpec, streams: int, kind: str = "lockgate") -> None:
    """cProfile inside `lockgate proxy`'s process (`_proxy.py`) while the benchmark's client
    reads `streams` streams of `spec` through it from the benchmark server."""
    from benchmarks._common import server
    from benchmarks._load import client_session, drive
    from benchmarks._proxy import proxy_process

    async def read(proxy: Proxy) -> None:
        async with client_session(1) as session:
            outcome = await drive(session, proxy, spec, streams, concurrent=False)
            assert not outcome.failures, outcome.failures[:1]

    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        path = str(Path(folder) / "proxy.prof")
        env = {"LOCKGATE_BENCH_PROFILE": path}
        if kind == "lockgate-otel":
            from benchmarks.proxy import otlp_sink

            env["LOCKGATE_BENCH_OTLP"] = stack.enter_context(otlp_sink())
        with server() as origin, proxy_process(kind, origin, env) as proxy:
            asyncio.run(read(proxy))
        print(f"--- {label}, in the proxy's process")
        stats = pstats.Stats(path)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(r"lockgate/proxy|aiohttp/web_|http_writer", 30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--wire", action="store_true", help="profile the proxy's process")
    parser.add_argument(
        "--kind",
        default="lockgate",
        choices=("lockgate", "lockgate-nometrics", "lockgate-otel"),
        help="which proxy of _proxy.py --wire profiles",
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--streams", type=int, default=5)
    parser.add_argument("--text", type=int, default=2000)
    parser.add_argument(
        "--protocol",
        default="chat",
        choices=("chat", "bedrock"),
        help="OpenAI-shaped Chat chunks, or Bedrock ConverseStream's binary event stream",
    )
    args = parser.parse_args()
    protocol = args.protocol
    request = json.loads(request_body(protocol))
    if protocol == "bedrock":
        request.pop("model", None)  # the model is in the path
    half = args.text // 2
    style = "openai" if protocol == "chat" else "lab"
    specs = {
        "text": StreamSpec(protocol, "chunks", args.text, 0, style=style),
        "tool call": StreamSpec(protocol, "chunks", half, half, style=style),
    }
    for label, spec in specs.items():
        if args.wire:
            wire(
                label,
                StreamSpec(protocol, "chunks", spec.text, spec.arguments, gap_us=100, style=style),
                args.streams,
                args.kind,
            )
            continue
        frames = stream_frames(spec)
        asyncio.run(run(frames, request, 1, protocol))  # warm
        if args.profile:
            profile = cProfile.Profile(time.process_time)
            profile.enable()
            asyncio.run(run(frames, request, args.streams, protocol))
            profile.disable()
            print(f"--- {label}")
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            continue
        best = min(
            asyncio.run(run(frames, request, args.streams, protocol)) for _ in range(args.runs)
        )
        print(f"{label:9} {best:6.2f} µs/event ({len(frames):,} frames a stream)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
