"""Concurrent sessions on one event loop: CPU per event, peak RSS per session, failures.

Per protocol, N = 1, 100 and 1,000 sessions run at once on one loop, each a
`StreamingModelClient.complete` of its own (own client, codec, decoders and gate; one
transport, i.e. one SDK client and connection pool, shared, as a server running many agents
would), each in a fresh child process (`_sessions.py`) against the loopback server in
another process. Every event reaches the client in its own read:

- N = 1: one stream of 2,000 events, the server pausing ~0.1 ms after each (a busy loop,
  as under load: a single session paced at model speed would measure the machine's wake-up
  cost after each idle gap instead, several hundred µs per event on this VM);
- N = 100: 400 events each at 100 events/s; N = 1,000: 40 events each at 10 events/s
  (10,000 events/s in all, for about 4 s).

One session's figure is the median of 3 runs. The transport is lockgate's as it ships: no
SDK per-read timer (the client's one watchdog per response is the silence limit).

CPU per event is the client's `process_time` over the streaming window (from the moment
every session has received an event to the end) per event received in it; the whole run's
figure (openings included) is printed beside it. RSS per session: (peak RSS - RSS before the
sessions) / N. Targets at N = 1,000: CPU per event within 20% of one session's, 0 failures,
<= 150 KiB RSS per session. Prints MET / NOT MET; exits 0 unless something failed to run.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/concurrency.py`.
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

# sessions -> (events per second per session, events per session); rate 0: one unpaced
# stream, the server pausing ~0.1 ms after each event (`_sessions.run`)
RUNS: dict[int, tuple[int, int]] = {1: (0, 2000), 100: (100, 400), 1000: (10, 40)}
BASELINE_RUNS = 3  # one session's figure is the median of this many runs


def median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median streaming CPU per event (errors first, if any)."""
    for result in results:
        if "error" in result:
            return result
    ordered = sorted(results, key=lambda r: float(r["window_cpu_per_event_us"]))
    return ordered[len(ordered) // 2]


def show(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"ERROR {result['error']}"
    return (
        f"{result['events']:6,} events, {result['failures']} failures, CPU/event "
        f"{result['window_cpu_per_event_us']:6.1f} µs streaming "
        f"({result['cpu_per_event_us']:6.1f} µs whole run), RSS/session "
        f"{result['rss_per_session_kib']:6.1f} KiB, lag p99 {result['lag_p99_ms']:6.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--protocol", choices=PROTOCOLS, action="append")
    args = parser.parse_args()
    started = time.monotonic()
    report = Report("concurrency")
    errors = 0
    with server() as origin:
        for protocol in args.protocol or PROTOCOLS:
            heading(f"{protocol}: concurrent sessions on one loop")
            results: dict[int, dict[str, Any]] = {}
            for sessions, (rate, events) in RUNS.items():
                runs = BASELINE_RUNS if sessions == 1 else 1
                tries = [in_child(origin, protocol, sessions, rate, events) for _ in range(runs)]
                for result in tries:
                    print(f"  N={sessions:5,}: {show(result)}", flush=True)
                results[sessions] = median_run(tries)
            one, many = results[1], results[1000]
            if "error" in one or "error" in many:
                errors += 1
                report.check(f"{protocol}: 1,000 sessions ran", False, "see the errors above")
                continue
            ratio = many["window_cpu_per_event_us"] / one["window_cpu_per_event_us"]
            report.check(
                f"{protocol}, 1,000 sessions: CPU per event within 20% of one session's",
                ratio <= 1.2,
                f"{many['window_cpu_per_event_us']:.1f} vs {one['window_cpu_per_event_us']:.1f}"
                f" µs/event = {ratio:.2f}x (N=100: "
                f"{results[100].get('window_cpu_per_event_us', float('nan')):.1f} µs)",
            )
            report.check(
                f"{protocol}, 1,000 sessions: 0 failures",
                many["failures"] == 0,
                f"{many['failures']} failures {many['first_failure']}".strip(),
            )
            report.check(
                f"{protocol}, 1,000 sessions: <= 150 KiB RSS per session",
                many["rss_per_session_kib"] <= 150,
                f"{many['rss_per_session_kib']:.1f} KiB (peak {many['rss_peak_kib'] / 1024:.0f}"
                f" MiB, before {many['rss_before_kib'] / 1024:.0f} MiB)",
            )
    print()
    report.summary()
    print(f"(concurrency took {time.monotonic() - started:.0f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
