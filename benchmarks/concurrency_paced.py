"""Paced sessions at model speed: how many sessions one event loop sustains at 50 events/s
each with a p99 lag under 250 ms.

Per protocol, N sessions (each its own `StreamingModelClient.complete`, one shared
transport; a fresh child process per N, `_sessions.py`) each read a stream of 150 text
deltas sent at 50 events/s on an absolute schedule by the loopback server (another process).
Every delta carries its send time; the lag of an event is its arrival in the gate minus that
time (the machine's monotonic clock). The steady-state p99 counts the events that arrived
once every session was streaming (the opening burst of N requests is reported apart, as the
whole run's p99). N goes 100, 300, 500, 700, 1,000 and stops at the first N that misses
(p99 >= 250 ms or any failure). Target: >= 300 sessions. Prints MET / NOT MET; exits 0
unless something failed to run.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/concurrency_paced.py`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from benchmarks._common import Report, heading, server
from benchmarks._sessions import in_child
from benchmarks._streams import PROTOCOLS

RATE = 50
EVENTS = 150
LAG_LIMIT_MS = 250.0
STEPS = (100, 300, 500, 700, 1000)


def sustained(result: dict[str, Any]) -> bool:
    return (
        "error" not in result
        and result["failures"] == 0
        and result["window_lag_p99_ms"] < LAG_LIMIT_MS
    )


def show(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"ERROR {result['error']}"
    return (
        f"lag p50 {result['lag_p50_ms']:6.1f} ms, steady p99 {result['window_lag_p99_ms']:7.1f} "
        f"ms ({result['window_lag_events']:,} events), whole-run p99 "
        f"{result['lag_p99_ms']:7.1f} ms, max {result['lag_max_ms']:7.1f} ms, "
        f"{result['failures']} failures, CPU {result['cpu_seconds']:.1f} s in "
        f"{result['wall_seconds']:.1f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--protocol", choices=PROTOCOLS, action="append")
    args = parser.parse_args()
    started = time.monotonic()
    report = Report("concurrency_paced")
    with server() as origin:
        for protocol in args.protocol or PROTOCOLS:
            heading(f"{protocol}: sessions at {RATE} events/s on one loop")
            best = 0
            for sessions in STEPS:
                result = in_child(origin, protocol, sessions, RATE, EVENTS)
                print(f"  N={sessions:5,}: {show(result)}", flush=True)
                if not sustained(result):
                    break
                best = sessions
            report.check(
                f"{protocol}: one loop sustains >= 300 sessions at {RATE} events/s "
                f"(p99 lag < {LAG_LIMIT_MS:g} ms)",
                best >= 300,
                f"largest N sustained: {best:,}"
                + (" (the largest tried)" if best == STEPS[-1] else ""),
            )
    print()
    report.summary()
    print(f"(concurrency_paced took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
