"""End to end when reads coalesce: one chunk per event flushed back to back, and the
whole body as one chunk.

The same contenders and stream as `endtoend.py` (see there). Here the server writes every
event in its own chunked-transfer chunk without pausing (its frames are ready, so it always
outpaces the client): the aiohttp-backed client then hands over whatever is buffered (up to
16 KiB) in one read, while httpx2 still yields one piece per HTTP chunk; the read counts
printed show how much coalesced. (A server that renders each event as it goes, as `lockgate
serve` does, runs at about the client's speed, and the reads then flip between one per
event and coalesced from run to run; this shape keeps them stable.) The targets are
checked for the back-to-back shape too (labelled so); the bulk shape is for reference.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/endtoend_bulk.py [--repeats N]`.
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
    parser.add_argument("--budget", type=float, default=12.0, help="seconds per protocol")
    args = parser.parse_args()
    started = time.monotonic()
    report = asyncio.run(
        run_regimes(
            ["flushed", "bulk"],
            args.protocol or list(PROTOCOLS),
            args.repeats,
            args.budget,
            "endtoend_bulk",
        )
    )
    print()
    report.summary()
    print(f"(endtoend_bulk took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
