"""End to end, one chunk per event, each event on its own read: CPU per event of lockgate
against the parse floors, the official SDKs' typed streams and a naive httpx client.

A real server flushes each SSE event as the model produces it, so each event arrives in its
own HTTP chunk and, at model speed, in its own read: every per-read cost counts. Here the
server (`_server.py`, another process) writes each event in its own chunked-transfer chunk
and pauses about 0.1 ms after it, so that every client reads each event on its own (the
read counts are printed). Per protocol (Responses, Chat Completions, Anthropic Messages),
the same ~2,000-event stream (`_streams.py`) for every contender:

  lockgate          `StreamingModelClient.complete` through the provider's transport: the
                    SDK's aiohttp-backed client (the default), its httpx2 client, and two
                    proposed transport read paths (A: `aiter_raw()`, B: aiohttp directly);
  pipeline          lockgate's SSE decoder + provider decoder + gate on the same frames,
                    in memory (what lockgate itself costs per event);
  floor (a)         in memory: `bytes.split` + `json.loads` of the same body, no HTTP;
  floor (b)         HTTP: the same aiohttp-backed SDK client (`post(..., stream=True)`)
                    reading the raw body, splitting frames, `json.loads` of each;
  raw read          the SDK's raw POST reading the body only (aiohttp vs the default httpx2);
  SDK typed         Responses `responses.create(stream=True)` iterated and
                    `responses.stream()`; Chat `chat.completions.stream()`
                    (ChatCompletionStreamState); Anthropic `messages.stream()`
                    (MessageStream) — with the SDK's default client and its aiohttp one;
  naive             `httpx2.AsyncClient().stream("POST", …)` + `aiter_lines()` +
                    `json.loads` of every `data:` line.

CPU is `time.process_time()` of this process only (the server's is never counted), the
median of interleaved runs. Targets: lockgate >= 0.6x floor (b) (floor (a) printed beside
it), >= 2.5x the naive client, >= 15x the SDK's typed path (its default client). Prints MET
/ NOT MET; exits 0 unless something failed to run.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/endtoend.py [--repeats N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from benchmarks._endtoend import run_regimes
from benchmarks._streams import PROTOCOLS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--protocol", choices=PROTOCOLS, action="append")
    parser.add_argument("--budget", type=float, default=25.0, help="seconds per protocol")
    args = parser.parse_args()
    started = time.monotonic()
    report = asyncio.run(
        run_regimes(
            ["chunks"], args.protocol or list(PROTOCOLS), args.repeats, args.budget, "endtoend"
        )
    )
    print()
    report.summary()
    print(f"(endtoend took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
