"""A minimal loopback streaming server for the benchmarks, run in its own process (its CPU is
never counted): `python benchmarks/_server.py` prints `PORT` on stdout and serves until its
stdin closes (the parent exited) or it gets SIGTERM.

The bytes are the lab renderers' own native frames (`PROVIDERS[p].render().frame(event)` of
`.events(Reply)`), rendered once per stream shape. The first path segment of each request
selects what is sent (`_streams.StreamSpec.name`), e.g.
`POST /responses.chunks.1500.500.50.20/v1/responses`:

- `<protocol>.chunks.…`: every SSE event in its own chunked-transfer chunk, each written and
  drained at once (a server that flushes every event); with a gap (µs, the spec's last
  field) the server sleeps that long after each event (blocking: for one stream at a
  time), so that each event reaches the client in its own read, as events generated at
  model speed do; without one, back to back;
- `<protocol>.bulk.…`: the same body as one chunk (everything in as few reads as possible);
- `<protocol>.paced.…`: one event per chunk at `rate` events/s on an absolute schedule,
  each text delta carrying its send time (`time.monotonic()`, a clock shared by processes
  on one machine) in place of a placeholder of the same length, so the client can measure
  its own lag;
- `<protocol>.tiny`: a short complete answer (for request-opening measurements);
- `bedrock.…`: the same shapes as a binary event stream (`application/vnd.amazon.eventstream`,
  ConverseStream's messages), e.g. `POST /bedrock.chunks.600.0.50.100/model/M/converse-stream`;
- `chat.json.…`: a whole Chat Completions answer (`application/json`, `text` words), for a
  request with `"stream": false`.

Requests are read whole (up to 64 MiB), answered, and the connection stays open for the
next request (HTTP/1.1 keep-alive) until the client closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from functools import cache

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._streams import PLACEHOLDER, StreamSpec, parse_spec, stream_frames, whole_body

MAX_BODY = 64 * 1024 * 1024


@cache
def _frames(spec: StreamSpec) -> tuple[bytes, ...]:
    return tuple(stream_frames(spec))


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_EVENTSTREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_END = b"0\r\n\r\n"


async def _read_request(reader: asyncio.StreamReader) -> str | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if not 0 <= length <= MAX_BODY:
        return None
    if length:
        await reader.readexactly(length)
    return parts[1]


@cache
def _whole(spec: StreamSpec) -> bytes:
    body = whole_body(spec)
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


async def _send_stream(writer: asyncio.StreamWriter, path: str) -> None:
    spec = parse_spec(path.lstrip("/").split("/", 1)[0])
    if spec.shape == "json":
        writer.write(_whole(spec))
        await writer.drain()
        return
    frames = _frames(spec)
    writer.write(_EVENTSTREAM_HEAD if spec.protocol == "bedrock" else _HEAD)
    if spec.shape == "bulk":
        writer.write(_chunk(b"".join(frames)))
    elif spec.shape == "paced":
        period = 1.0 / spec.rate
        loop = asyncio.get_running_loop()
        start = loop.time()
        for number, frame in enumerate(frames):
            delay = start + number * period - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if PLACEHOLDER in frame:
                stamp = f"{time.monotonic():0{len(PLACEHOLDER)}.6f}".encode()
                frame = frame.replace(PLACEHOLDER, stamp, 1)
            writer.write(_chunk(frame))
            await writer.drain()
    elif spec.gap_us:
        # Blocking on purpose: one stream at a time, each event leaves before the next is
        # written, so the client reads every event on its own (no coalescing in a buffer).
        gap = spec.gap_us / 1e6
        for frame in frames:
            writer.write(_chunk(frame))
            await writer.drain()
            time.sleep(gap)  # noqa: ASYNC251 - blocking on purpose (see above)
    else:  # chunks, tiny
        for frame in frames:
            writer.write(_chunk(frame))
            await writer.drain()
    writer.write(_END)
    await writer.drain()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            path = await _read_request(reader)
            if path is None:
                return
            await _send_stream(writer, path)
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass  # the client left, or the server is stopping
    finally:
        writer.transport.abort()


async def _main() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(sys.stdin.fileno(), stop.set)  # stdin closed (or written): stop
    server = await asyncio.start_server(_handle, "127.0.0.1", 0, backlog=4096, limit=1 << 20)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main())
