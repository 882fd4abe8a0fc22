"""What one protocol request body costs `lockgate proxy` to read, at its worst (issue 22, M5).

A protocol request's body (up to the proxy's 32 MiB limit) is read as JSON before anything
is sent upstream: `jsonlimits.check_document` counts its values and measures its depth in a
few passes of C code over the bytes, refuses it beyond 1,000,000 values or 256 levels, and
only then does jiter build it (with the cyclic collector paused); a body over 256 KiB is
parsed on one worker thread, off the event loop.

For each shape, filling the 32 MiB limit (those within the bounds padded with one long
string to the limit), this prints: the verdict (parsed, or refused and why), the median CPU
time of the whole read (`server._request_object`, `--repeats` runs), the peak memory the
Python allocator traced during one read (the body itself excluded), and the longest the
event loop went without running while the server's own path read it (a task ticking every
millisecond; inline for a small body, on the parse thread for a large one: the thread
holds the interpreter during each C pass, so the longest pass is what the loop waits).

Targets: at most 1 s of CPU and 256 MiB traced for any body within the limit, and the
event loop never held up longer than 0.5 s. `--previous` also measures the parse the proxy
used before (`jsonlimits.parse_json` on the decoded text, then its depth walk) on the
smallest shapes that cost it most, at a quarter of the limit (it took about 14 s and 1.8 GB
on the full 32 MiB of empty arrays).

Prints MET / NOT MET; exits 0 unless something failed to run.
Run: `.venv/bin/python benchmarks/request_parse.py [--repeats N] [--previous]`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

import contextlib

from benchmarks._common import Report, heading, median
from lockgate.jsonlimits import TooComplex, parse_json
from lockgate.proxy.server import (
    DEFAULT_MAX_REQUEST_BYTES,
    MAX_REQUEST_DEPTH,
    MAX_REQUEST_VALUES,
    PARSE_INLINE_BYTES,
    _request_object,
)

LIMIT = DEFAULT_MAX_REQUEST_BYTES - 1024  # room for the envelope
CPU_TARGET_SECONDS = 1.0
MEMORY_TARGET_MIB = 256
STALL_TARGET_SECONDS = 0.5


def _filled(items: bytes, count: int, size: int = LIMIT) -> bytes:
    """A request whose `pad` array holds `count` copies of `items` (comma-separated), and
    whose `text` string fills the rest of `size`."""
    values = b",".join([items] * count)
    head = b'{"model": "m", "stream": true, "values": [' + values + b'], "text": "'
    tail = b'"}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail


def _repeated(unit: bytes, size: int = LIMIT) -> bytes:
    """A request whose `values` array repeats `unit` (a value and a comma) to `size`."""
    head = b'{"model": "m", "values": ['
    tail = b"0]}"
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


def _string(unit: bytes, size: int = LIMIT) -> bytes:
    """A request whose one string repeats `unit` to `size`."""
    head = b'{"model": "m", "input": "'
    tail = b'"}'
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


def _nested(depth: int, size: int = LIMIT) -> bytes:
    """Arrays `depth` levels deep (the envelope's two included), repeated to `size`."""
    unit = b"[" * (depth - 2) + b"]" * (depth - 2) + b","
    return _repeated(unit, size)


def _deepest(count: int) -> bytes:
    """`count` arrays nested as deep as the bound allows, padded to the limit."""
    levels = MAX_REQUEST_DEPTH - 2  # the request object and its `values` array
    return _filled(b"[" * levels + b"]" * levels, count)


def _conversation(size: int = LIMIT) -> bytes:
    """A long chat: tool calls and results, as an agent's history grows."""
    system = {"role": "system", "content": "You fix bugs. " * 200}
    messages = [json.dumps(system)]
    used = len(messages[0]) + 64
    turn = 0
    while used < size - 4096:
        turn += 1
        call = {"name": "read", "arguments": '{"path": "a.py"}'}
        for message in (
            {"role": "user", "content": f"Step {turn}: " + "look at it. " * 40},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "line\n" * 300},
        ):
            text = json.dumps(message)
            messages.append(text)
            used += len(text) + 2
    body = '{"model": "m", "stream": true, "messages": [' + ", ".join(messages) + "]}"
    return body.encode()


SHAPES: dict[str, Callable[[], bytes]] = {
    # refused by the pre-scan: the shapes that cost the old parse most
    "empty arrays, 32 MiB": lambda: _repeated(b"[],"),
    "empty objects, 32 MiB": lambda: _repeated(b"{},"),
    "zeros, 32 MiB": lambda: _repeated(b"0,"),
    "short strings, 32 MiB": lambda: _repeated(b'"ab",'),
    "deep (257 levels)": lambda: _nested(MAX_REQUEST_DEPTH + 1, 64 * 1024),
    # at the bound: 1,000,000 values of each kind, padded to the limit
    "1M empty arrays + pad": lambda: _filled(b"[]", MAX_REQUEST_VALUES - 12),
    "1M empty objects + pad": lambda: _filled(b"{}", MAX_REQUEST_VALUES - 12),
    "1M values + 1, 32 MiB": lambda: _filled(b"0", MAX_REQUEST_VALUES - 8),
    "500k one-key objects + pad": lambda: _filled(b'{"k":1}', MAX_REQUEST_VALUES // 3 - 4),
    "1M distinct strings + pad": lambda: _filled(b'"s123456789"', MAX_REQUEST_VALUES - 12),
    "1M floats + pad": lambda: _filled(b"1.5e300", MAX_REQUEST_VALUES - 12),
    "256 levels, 1M arrays + pad": lambda: _deepest(MAX_REQUEST_VALUES // 254 - 1),
    # one long string: escapes, backslashes, characters beyond the BMP
    "\\u escapes, 32 MiB": lambda: _string(b"\\u00e9"),
    "escaped backslashes, 32 MiB": lambda: _string(b"\\\\"),
    "4-byte characters, 32 MiB": lambda: _string("\U0001f600".encode()),
    "a long conversation, 32 MiB": _conversation,
}
PREVIOUS = ("empty arrays, 32 MiB", "empty objects, 32 MiB")


@dataclass
class Measured:
    verdict: str
    cpu_seconds: float
    traced_mib: float
    stall_seconds: float


def _verdict(body: bytes) -> str:
    try:
        value = _request_object(body)
    except TooComplex as exc:
        return f"refused: {exc}"
    return "parsed" if value is not None else "not a JSON object"


def _traced(read: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


async def _stall(body: bytes) -> float:
    """The longest gap between ticks of a 1 ms ticker while the server's path reads
    `body` (inline when small, else on one worker thread)."""
    import concurrent.futures

    loop = asyncio.get_running_loop()
    longest = 0.0
    done = False

    async def tick() -> None:
        nonlocal longest
        last = loop.time()
        while not done:
            await asyncio.sleep(0.001)
            now = loop.time()
            longest = max(longest, now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.01)
    with concurrent.futures.ThreadPoolExecutor(1) as parser:
        try:
            if len(body) <= PARSE_INLINE_BYTES:
                _request_object(body)
            else:
                await loop.run_in_executor(parser, _request_object, body)
        except TooComplex:
            pass
    done = True
    await ticker
    return longest


def measure(body: bytes, repeats: int) -> Measured:
    verdict = _verdict(body)

    def read() -> None:
        with contextlib.suppress(TooComplex):
            _request_object(body)

    times = []
    for _ in range(repeats):
        gc.collect()
        started = time.process_time()
        read()
        times.append(time.process_time() - started)
    traced = _traced(read)
    stall = asyncio.run(_stall(body))
    return Measured(verdict, median(times), traced, stall)


def previous(body: bytes) -> tuple[float, float]:
    """The proxy's parse before issue 22: the decoded text through `parse_json`."""

    def read() -> None:
        with contextlib.suppress(ValueError, RecursionError):
            parse_json(body.decode("utf-8"), MAX_REQUEST_DEPTH)

    gc.collect()
    started = time.process_time()
    read()
    cpu = time.process_time() - started
    return cpu, _traced(read)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=5, help="runs per shape (median)")
    parser.add_argument(
        "--previous", action="store_true", help="also measure the parse used before"
    )
    args = parser.parse_args(argv)
    report = Report("request parse")
    heading(
        f"one request body, up to {DEFAULT_MAX_REQUEST_BYTES // 2**20} MiB "
        f"(median of {args.repeats})"
    )
    columns = ("CPU s", "MiB traced", "stall s")
    print(
        f"  {'shape':30} {'MiB':>6} {'verdict':44} {columns[0]:>7} {columns[1]:>10} {columns[2]:>8}"
    )
    worst_cpu = worst_memory = worst_stall = 0.0
    for name, make in SHAPES.items():
        body = make()
        assert len(body) <= DEFAULT_MAX_REQUEST_BYTES, name
        measured = measure(body, args.repeats)
        worst_cpu = max(worst_cpu, measured.cpu_seconds)
        worst_memory = max(worst_memory, measured.traced_mib)
        worst_stall = max(worst_stall, measured.stall_seconds)
        print(
            f"  {name:30} {len(body) / 2**20:6.1f} {measured.verdict[:44]:44} "
            f"{measured.cpu_seconds:7.3f} {measured.traced_mib:10.1f} "
            f"{measured.stall_seconds:8.3f}",
            flush=True,
        )
        del body
    report.check(
        "CPU of the worst body within the limit",
        worst_cpu <= CPU_TARGET_SECONDS,
        f"{worst_cpu:.3f} s (target <= {CPU_TARGET_SECONDS:g} s)",
    )
    report.check(
        "memory the worst body's read traced",
        worst_memory <= MEMORY_TARGET_MIB,
        f"{worst_memory:.1f} MiB (target <= {MEMORY_TARGET_MIB} MiB)",
    )
    report.check(
        "the event loop's longest wait while a body is read",
        worst_stall <= STALL_TARGET_SECONDS,
        f"{worst_stall:.3f} s (target <= {STALL_TARGET_SECONDS:g} s)",
    )
    if args.previous:
        heading("the parse used before (parse_json on the decoded text), at 8 MiB")
        for name in PREVIOUS:
            body = SHAPES[name]()[: LIMIT // 4]
            cut = body.rfind(b",")
            body = body[:cut] + b"]}"
            cpu, traced = previous(body)
            print(f"  {name.replace('32', '8'):30} {cpu:7.3f} s CPU {traced:8.1f} MiB traced")
    report.summary()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
