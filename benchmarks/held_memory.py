"""The memory a held stream costs, against the bytes the held budget counts (issue 27).

One stream per protocol through `GatingStream`, in memory: 8 `edit` calls, each with
16,000-character arguments in `PIECE`-character deltas (1 by default: the gate's worst case
at its default bounds), read as 16 KiB slices of the body. Each case runs in a process of
its own and reports the held budget's peak, the growth of the peak RSS (VmHWM, reset before
the stream), the RSS left after the stream ended (after gc), and tracemalloc's peak (a
second run). Target: the peak RSS within 1.25x what the budget counts, and nothing of it
left resident. Linux only (it reads /proc/self).

Run: `.venv/bin/python benchmarks/held_memory.py` (`PIECE=8` for 8-character deltas).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

PIECE = int(os.environ.get("PIECE", "1"))
READ = 16 * 1024
HELD_PROTOCOLS = ("chat", "responses", "anthropic")  # Gemini sends arguments whole
TARGET = 1.25


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # VmHWM from here


def _status(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _body(protocol: str) -> bytes:
    from benchmarks._streams import edit_arguments
    from lockgate.providers import PROVIDERS
    from lockgate.scripted.reply import Call, Reply, Say

    arguments = edit_arguments(16000)
    calls = tuple(
        Call(f"call_{n}", "edit", arguments, pieces=len(arguments) // PIECE) for n in range(8)
    )
    lab = PROVIDERS[protocol].render()
    frames = [lab.frame(event) for event in lab.events(Reply("r", (Say("Fixing."), *calls)))]
    if protocol == "chat":
        frames.append(b"data: [DONE]\n\n")
    return b"".join(frames)


async def _one(protocol: str, trace: bool) -> dict[str, int]:
    from benchmarks._common import HISTORY
    from lockgate.fixture import ALL_TOOLS
    from lockgate.providers import PROVIDERS, CodecOptions
    from lockgate.proxy.engine import GatingOptions, GatingStream, HeldBudget

    entry = PROVIDERS[protocol]
    request = entry.make_codec(CodecOptions("m")).encode(HISTORY, ALL_TOOLS)
    body = _body(protocol)
    peak = 0

    def seen(held: int) -> None:
        nonlocal peak
        peak = max(peak, held)

    async def reads() -> AsyncIterator[bytes]:  # a socket's reads: fresh slices
        for start in range(0, len(body), READ):
            yield body[start : start + READ]

    gc.collect()
    base = _status("VmRSS")
    _reset_peak()
    if trace:
        tracemalloc.start()
    stream = GatingStream(
        entry, request, reads(), GatingOptions(), budget=HeldBudget(1 << 40, seen)
    )
    sent = 0
    async for piece in stream:
        sent += len(piece)
    traced = tracemalloc.get_traced_memory()[1] if trace else 0
    tracemalloc.stop()
    high = _status("VmHWM")
    del stream
    gc.collect()
    return {
        "held": peak,
        "rss_peak": high - base,
        "rss_after": _status("VmRSS") - base,
        "traced_peak": traced,
    }


def main() -> int:
    if not sys.platform.startswith("linux"):  # pragma: no cover
        print("held_memory: Linux only (reads /proc/self)")
        return 0
    print(f"held memory: 8 calls x 16,000 characters in {PIECE}-character deltas")
    for protocol in (*HELD_PROTOCOLS, "gemini"):
        runs = [
            json.loads(subprocess.check_output([sys.executable, __file__, protocol, mode]))
            for mode in ("rss", "trace")
        ]
        held, rss, traced = runs[0]["held"], runs[0], runs[1]["traced_peak"]
        verdict = ""
        if protocol in HELD_PROTOCOLS:
            verdict = " MET" if rss["rss_peak"] <= TARGET * held else " NOT MET"
        print(
            f"  {protocol:10} held {held / 1e6:6.2f} MB; peak RSS +{rss['rss_peak'] / 1e6:6.2f} MB"
            f" ({rss['rss_peak'] / held:.2f}x); left after the end "
            f"+{rss['rss_after'] / 1e6:5.2f} MB; tracemalloc peak {traced / 1e6:6.2f} MB"
            f"{verdict}"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(asyncio.run(_one(sys.argv[1], sys.argv[2] == "trace"))))
        sys.exit(0)
    sys.exit(main())
