"""Hostile-server figures for `lockgate run`, measured on the real CLI in a subprocess.

One line per hostile shape: the peak RSS of `lockgate run` against it (kernel accounting of
the child, `wait4`), how long it took to fail, and how that peak compares with the peak of
the same command on a small successful run measured here too:

  1 GiB frame:        a frame that never ends (`data: xxxx…`), 1 GiB of it;
  endless events:     small unknown events forever, with `--deadline 3`;
  1 GiB error body:   HTTP 500 whose `content-length` body is 1 GiB (sent lazily);
  gzip bomb:          HTTP 500 with a 1 MB `content-encoding: gzip` body inflating to 1 GiB;
  header flood:       a response head that never ends: 100 MiB of short header lines, and
                      one header line of 100 MiB (the HTTP client must fail it quickly);
  stall:              silence mid-arguments with `--idle-timeout 2`: the time from the
                      server's last byte until the client closed (the server's own clock).

Every shape is measured for every protocol (`--provider` picks one), with each protocol's own
SDK transport and its own rendering of the streamed shapes. It exits 1 if any peak exceeds
`RSS_LIMIT_MIB` or any shape did not fail as it should.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/hostile.py [--repeats N]
[--provider P]`.

The raw loopback servers (`RawServer` and its handlers) are shared with the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from lockgate.lab.scenarios import EDIT_FIX
from lockgate.lab.server import ServerThread
from lockgate.providers import PROVIDERS
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Faults, Turn

KEY = "sk-benchmark-not-a-secret"
RSS_LIMIT_MIB = 200.0
GIB = 1 << 30
MIB = 1 << 20
BLOCK = 64 * 1024


# --- the CLI, measured -----------------------------------------------------------------


@dataclass
class Measured:
    exit_code: int
    stdout: str
    stderr: str
    peak_rss_mib: float
    seconds: float


# The child's peak RSS must be its own. Linux carries the high-water RSS of the memory a
# process had before `exec` into its `ru_maxrss`, and a child started with fork/vfork from
# this process begins with this process's memory: measured directly, a child of a big
# parent (a pytest worker) "peaks" at the parent's size. So a small launcher (`python -S`)
# forks the CLI from its own small memory, waits for it and reports its rusage.
_LAUNCHER = """\
import json, os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as report:
    json.dump({"maxrss_kib": usage.ru_maxrss, "status": status}, report)
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


def run_cli(
    base_url: str,
    *extra: str,
    key: str | None = KEY,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
    provider: str = "responses",
) -> Measured:
    """One `lockgate run --provider PROVIDER --base-url URL --allow-execution EXTRA` in a
    subprocess: its exit code, output, peak RSS (MiB, the kernel's accounting of that
    process alone) and wall time. Killed after `timeout` (exit code -9 then)."""
    variable = PROVIDERS[provider].key_variable
    environment = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", variable)}
    if key is not None:
        environment[variable] = key
    environment.update(env or {})
    command = [sys.executable, "-m", "lockgate", "run", "--provider", provider]
    command += ["--base-url", base_url]
    with (
        tempfile.TemporaryFile("w+b") as out,
        tempfile.TemporaryFile("w+b") as err,
        tempfile.TemporaryDirectory(prefix="lockgate-rss-") as folder,
    ):
        report = os.path.join(folder, "rusage.json")
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-S", "-c", _LAUNCHER, report, *command, "--allow-execution", *extra],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,  # a timeout kills the launcher and the CLI together
        )
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
        seconds = time.monotonic() - started
        try:
            with open(report) as handle:
                measured = json.load(handle)
            exit_code = os.waitstatus_to_exitcode(measured["status"])
            peak = measured["maxrss_kib"] / 1024
        except (OSError, ValueError):
            exit_code, peak = -9, float("nan")
        out.seek(0)
        err.seek(0)
        return Measured(
            exit_code,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            peak,
            seconds,
        )


# --- raw loopback servers ----------------------------------------------------------------


@dataclass
class RawRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[[RawRequest, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawServer:
    """A loopback HTTP/1.1 server on its own thread whose every request is answered by
    `handler` (after the request head and body were read), byte by byte as it likes.

        with RawServer(error_body(500, GIB)) as server:
            run_cli(server.base_url)
            server.requests, server.sent
    """

    handler: Handler
    accept_only: bool = False  # accept connections, read nothing, answer nothing
    requests: list[RawRequest] = field(default_factory=list)
    connections: int = 0
    sent: int = 0  # body or head bytes the handlers wrote
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def base_url_for(self, provider: str) -> str:
        """The base URL as `provider`'s SDK takes it (every path gets the same answer)."""
        return PROVIDERS[provider].render().base_url(f"http://127.0.0.1:{self.port}")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.accept_only:
                await reader.read()  # until the client leaves; never a byte back
                return
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = [*lines[0].split(" "), "", "", ""][:3]
            headers = {}
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if colon:
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            body = await reader.readexactly(length) if length else b""
            request = RawRequest(method, path, headers, body)
            self.requests.append(request)
            await self.handler(request, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.transport.abort()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0, limit=16 * MIB)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> RawServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the raw server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)


async def _send_lazily(
    server: RawServer, writer: asyncio.StreamWriter, pieces: Iterator[bytes]
) -> None:
    """Write `pieces` one by one, waiting for the socket each time (nothing piles up);
    stop quietly when the client leaves."""
    for piece in pieces:
        writer.write(piece)
        server.sent += len(piece)
        await writer.drain()


def _repeat(block: bytes, total: int) -> Iterator[bytes]:
    remaining = total
    while remaining > 0:
        yield block[: min(remaining, len(block))]
        remaining -= len(block)


def error_body(status: int, size: int) -> Callable[[RawServer], Handler]:
    """HTTP `status` with a `size`-byte JSON error body, generated as it is sent."""
    prefix = b'{"error": {"code": "server_error", "message": "'
    suffix = b'"}}'

    def make(server: RawServer) -> Handler:
        async def handle(
            request: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            head = (
                f"HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\n"
                f"content-length: {size}\r\nconnection: close\r\n\r\n"
            ).encode()
            filler = _repeat(b"x" * BLOCK, size - len(prefix) - len(suffix))
            await _send_lazily(server, writer, iter([head, prefix]))
            await _send_lazily(server, writer, filler)
            await _send_lazily(server, writer, iter([suffix]))

        return handle

    return make


@functools.cache
def gzip_bomb(inflated: int = GIB) -> bytes:
    """A gzip member of about inflated/1000 bytes that inflates to `inflated` spaces: one
    deflate block of a MiB of spaces ending in a full flush (so every copy is the same
    bytes), repeated, with the right CRC-32 and length trailer. Built in well under a
    second."""
    block = b" " * MIB
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    piece = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.flush()
    copies = inflated // MIB
    crc = 0
    for _ in range(copies):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, (copies * MIB) & 0xFFFFFFFF)
    return header + piece * copies + tail + trailer


def gzip_bomb_body(status: int, inflated: int = GIB) -> Callable[[RawServer], Handler]:
    """HTTP `status` with `content-encoding: gzip`: about 1 MB that inflates to 1 GiB."""

    def make(server: RawServer) -> Handler:
        bomb = gzip_bomb(inflated)

        async def handle(
            request: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            head = (
                f"HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\n"
                f"content-encoding: gzip\r\ncontent-length: {len(bomb)}\r\n"
                "connection: close\r\n\r\n"
            ).encode()
            await _send_lazily(server, writer, iter([head]))
            await _send_lazily(
                server, writer, (bomb[i : i + BLOCK] for i in range(0, len(bomb), BLOCK))
            )

        return handle

    return make


def header_flood(total: int, *, one_line: bool) -> Callable[[RawServer], Handler]:
    """A `200` head that never ends: `total` bytes of short header lines, or one header
    line of `total` bytes, then (if the client is still there) silence."""

    def make(server: RawServer) -> Handler:
        async def handle(
            request: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            if one_line:
                pieces: Iterator[bytes] = iter([head, b"x-flood: ", *_repeat(b"a" * BLOCK, total)])
            else:
                line = b"x-flood: " + b"a" * 90 + b"\r\n"
                pieces = iter([head, *_repeat(line * (BLOCK // len(line)), total)])
            await _send_lazily(server, writer, pieces)
            await reader.read()

        return handle

    return make


def raw_server(make: Callable[[RawServer], Handler] | None = None) -> RawServer:
    """A `RawServer` answering with `make`'s handler (None: accept, never answer)."""

    async def unused(
        request: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        return None

    server = RawServer(unused, accept_only=make is None)
    if make is not None:
        server.handler = make(server)
    return server


# --- the shapes ----------------------------------------------------------------------------


def partial_edit(faults: Faults) -> Turn:
    """Text, then an edit cut off mid-arguments, with no terminal event: any protocol."""
    reply = Reply("resp_bench", (Say("Editing."), Call("call_1", "edit", EDIT_FIX, cut=True)))
    return Turn(reply=dataclasses.replace(reply, ending="open"), faults=faults)


@dataclass
class Figure:
    shape: str
    peak_rss_mib: float
    seconds: float
    ok: bool  # failed the way it should
    note: str = ""


FAST_RETRY = ("--retry-base-delay", "0.05")


def _scripted(provider: str, turns: Sequence[Turn], *extra: str) -> tuple[Measured, ServerThread]:
    with ServerThread(turns, provider=provider) as running:
        result = run_cli(running.base_url, *extra, provider=provider)
    return result, running


def _failed(result: Measured, kind: str) -> bool:
    return result.exit_code == 1 and f"stopped: provider_failure ({kind}" in result.stdout


def baseline(provider: str) -> Figure:
    turn = Turn(reply=Reply("resp_ok", (Say("The bug is in add."),)))
    result, _ = _scripted(provider, [turn])
    return Figure(
        "small successful run", result.peak_rss_mib, result.seconds, result.exit_code == 0
    )


def giant_frame(provider: str) -> Figure:
    faults = Faults(giant_frame_bytes=GIB, fragment_sizes=(65536,))
    result, _ = _scripted(provider, [partial_edit(faults)])
    return Figure(
        "1 GiB frame", result.peak_rss_mib, result.seconds, _failed(result, "bound_exceeded")
    )


def endless_events(provider: str) -> Figure:
    turn = partial_edit(Faults(endless="unknown"))
    result, _ = _scripted(provider, [turn], "--deadline", "3")
    return Figure(
        "endless small events, --deadline 3",
        result.peak_rss_mib,
        result.seconds,
        _failed(result, "deadline"),
    )


def _raw(
    provider: str, make: Callable[[RawServer], Handler], *extra: str
) -> tuple[Measured, RawServer]:
    with raw_server(make) as server:
        result = run_cli(server.base_url_for(provider), *extra, provider=provider)
    return result, server


def huge_error_body(provider: str) -> Figure:
    result, server = _raw(provider, error_body(500, GIB), *FAST_RETRY)
    ok = _failed(result, "opening: HTTP 500") and len(server.requests) == 3
    note = f"{len(server.requests)} requests, server wrote {server.sent / MIB:.1f} MiB"
    return Figure("1 GiB error body (HTTP 500)", result.peak_rss_mib, result.seconds, ok, note)


def gzip_bomb_error(provider: str) -> Figure:
    result, server = _raw(provider, gzip_bomb_body(500), *FAST_RETRY)
    ok = _failed(result, "opening: HTTP 500") and len(server.requests) == 3
    note = f"{len(server.requests)} requests, {len(gzip_bomb()) / 1e6:.2f} MB inflating to 1 GiB"
    return Figure("gzip bomb error body (HTTP 500)", result.peak_rss_mib, result.seconds, ok, note)


def flood(one_line: bool, provider: str) -> Figure:
    result, server = _raw(provider, header_flood(100 * MIB, one_line=one_line), *FAST_RETRY)
    what = "one 100 MiB header line" if one_line else "100 MiB of header lines"
    note = f"server wrote {server.sent / MIB:.1f} MiB of head in {len(server.requests)} requests"
    return Figure(
        f"header flood: {what}",
        result.peak_rss_mib,
        result.seconds,
        _failed(result, "opening"),
        note,
    )


def stall(provider: str) -> Figure:
    turn = partial_edit(Faults(stall_after=4, stall_seconds=60))
    result, running = _scripted(provider, [turn], "--idle-timeout", "2")
    assert running.server is not None
    timeline = {label: at for at, label in running.server.requests[0].timeline}
    waited = timeline.get("client closed", float("nan")) - timeline.get("stall", float("nan"))
    return Figure(
        "stall, --idle-timeout 2",
        result.peak_rss_mib,
        waited,
        _failed(result, "idle_timeout") and 2.0 <= waited < 3.0,
        "time from the server's last byte until the client closed (server clock)",
    )


SHAPES: tuple[Callable[[str], Figure], ...] = (
    giant_frame,
    endless_events,
    huge_error_body,
    gzip_bomb_error,
    functools.partial(flood, False),
    functools.partial(flood, True),
    stall,
)


def _median(figures: list[Figure]) -> Figure:
    first = figures[0]
    return Figure(
        first.shape,
        statistics.median(f.peak_rss_mib for f in figures),
        statistics.median(f.seconds for f in figures),
        all(f.ok for f in figures),
        first.note,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3, help="runs per shape (median)")
    parser.add_argument(
        "--provider",
        choices=[*PROVIDERS, "all"],
        default="all",
        help="the protocols to measure (default all)",
    )
    args = parser.parse_args(argv)
    repeats = max(1, args.repeats)
    providers = list(PROVIDERS) if args.provider == "all" else [args.provider]
    failures = []
    for provider in providers:
        failures += _measure(provider, repeats)
    if failures:
        print(f"hostile: not as expected: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


def _measure(provider: str, repeats: int) -> list[str]:
    """Every shape against `provider`'s CLI; the shapes that were not as expected."""
    base = _median([baseline(provider) for _ in range(repeats)])
    print(
        f"\n== {provider} ==\n{base.shape}: peak RSS {base.peak_rss_mib:.1f} MiB, "
        f"{base.seconds:.2f} s (medians of {repeats} runs; times are the process's wall time "
        f"unless noted; limit {RSS_LIMIT_MIB:.0f} MiB)",
        flush=True,
    )
    failures = [] if base.ok else [f"{provider}: {base.shape}"]
    for shape in SHAPES:
        figure = _median([shape(provider) for _ in range(repeats)])
        ratio = figure.peak_rss_mib / base.peak_rss_mib
        verdict = "ok" if figure.ok else "NOT AS EXPECTED"
        if figure.peak_rss_mib > RSS_LIMIT_MIB:
            verdict = f"OVER {RSS_LIMIT_MIB:.0f} MiB"
        if verdict != "ok":
            failures.append(f"{provider}: {figure.shape}")
        note = f"; {figure.note}" if figure.note else ""
        print(
            f"{figure.shape}: peak RSS {figure.peak_rss_mib:.1f} MiB ({ratio:.2f}x baseline), "
            f"failed after {figure.seconds:.2f} s: {verdict}{note}",
            flush=True,
        )
    return failures


if __name__ == "__main__":
    sys.exit(main())
