"""Many concurrent sessions on one event loop, in a child process of its own (so that its
peak RSS and its loop are its own), shared by `concurrency.py` and `concurrency_paced.py`.

Each session is one `StreamingModelClient.complete` (its own client, codec, gate and
decoders; one transport, i.e. one SDK client and connection pool, shared by all, as a
server running many agents would) reading a paced stream: `events` text deltas at `rate`
events/s, each carrying the server's send time, so the observer measures each event's lag
(arrival in the gate minus send time, on the machine's monotonic clock).

`python benchmarks/_sessions.py ORIGIN PROTOCOL SESSIONS RATE EVENTS VARIANT` prints one
JSON object: failures, CPU per event over the streaming window (all sessions open) and over
the whole run, lag percentiles, RSS before and at the peak. VARIANT `default` is lockgate
as it is; the others are proposed transport changes, measured (`variant_transport`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from benchmarks._common import (
    HISTORY,
    base_url,
    lockgate_client,
    lockgate_transport,
    peak_rss_kib,
    raise_fd_limit,
    reset_peak_rss,
    rss_kib,
)
from benchmarks._streams import PLACEHOLDER, StreamSpec
from lockgate.events import Event, TextDelta
from lockgate.fixture import ALL_TOOLS
from lockgate.transport import Transport

STAMP_CHARS = len(PLACEHOLDER)


class Window:
    """The streaming window: from the moment every session has received an event."""

    def __init__(self, sessions: int) -> None:
        self.waiting = sessions
        self.cpu_started: float | None = None
        self.events_before = 0
        self.sessions: list[Session] = []
        self.lags: list[float] = []  # lags of the events that arrived inside the window

    def opened(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self.cpu_started = time.process_time()
            self.events_before = sum(s.events for s in self.sessions)


class Session:
    """One session's observer: counts text deltas and records their lag."""

    __slots__ = ("events", "lags", "started", "window")

    def __init__(self, lags: list[float], window: Window | None = None) -> None:
        self.events = 0
        self.lags = lags
        self.started = False
        self.window = window

    def __call__(self, event: Event) -> None:
        if type(event) is TextDelta:
            now = time.monotonic()
            self.events += 1
            if not self.started:
                self.started = True
                if self.window is not None:
                    self.window.opened()
            text = event.text
            if len(text) == STAMP_CHARS and text[0] != "@":
                lag = now - float(text)
                self.lags.append(lag)
                if self.window is not None and self.window.cpu_started is not None:
                    self.window.lags.append(lag)


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def variant_transport(protocol: str, url: str, variant: str) -> Transport:
    """lockgate's transport, or a proposed change to it (measured, not adopted): `raw` /
    `direct`: `_endtoend.ProposedTransport`."""
    transport = lockgate_transport(protocol, url, timeout=120.0)
    if "raw" in variant or "direct" in variant:
        from benchmarks._endtoend import ProposedTransport

        return ProposedTransport(transport, "direct" in variant)
    return transport


async def run(
    origin: str, protocol: str, sessions: int, rate: int, events: int, variant: str = "default"
) -> dict[str, Any]:
    """`rate` 0: one stream of `events` chunks, each on its own read (the server pauses
    ~0.1 ms after each), for one session's baseline."""
    raise_fd_limit()
    if rate:
        spec = StreamSpec(protocol, "paced", text=events, arguments=0, rate=rate)
    else:
        spec = StreamSpec(protocol, "chunks", text=events, arguments=0, gap_us=20)
    transport = variant_transport(protocol, base_url(origin, spec), variant)
    lags: list[float] = []
    # Warm up (imports, the SDK client and its pool, first-use caches): one session on the
    # same transport, cancelled after its first event; measure from here.
    probe = Session([])
    warm = asyncio.create_task(
        lockgate_client(protocol, transport, probe).complete(HISTORY, ALL_TOOLS)
    )
    for _ in range(500):
        if probe.started or warm.done():
            break
        await asyncio.sleep(0.01)
    warm.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await warm
    del warm
    gc.collect()
    reset_peak_rss()
    rss_before = rss_kib()
    window = Window(sessions)
    observers = [Session(lags, window) for _ in range(sessions)]
    window.sessions = observers
    clients = [lockgate_client(protocol, transport, observer) for observer in observers]
    failures: list[str] = []

    async def one(number: int) -> None:
        try:
            message = await clients[number].complete(HISTORY, ALL_TOOLS)
            assert message.content, "empty answer"
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")

    cpu_started = time.process_time()
    wall_started = time.monotonic()
    tasks = [asyncio.create_task(one(number)) for number in range(sessions)]
    await asyncio.gather(*tasks)
    cpu = time.process_time() - cpu_started
    wall = time.monotonic() - wall_started
    total_events = sum(o.events for o in observers)
    window_cpu = 0.0
    window_events = 0
    if window.cpu_started is not None:
        window_cpu = time.process_time() - window.cpu_started
        window_events = total_events - window.events_before
    peak = peak_rss_kib()
    await transport.aclose()
    return {
        "protocol": protocol,
        "sessions": sessions,
        "rate": rate,
        "events": total_events,
        "failures": len(failures),
        "first_failure": failures[0] if failures else "",
        "cpu_per_event_us": cpu / max(1, total_events) * 1e6,
        "window_cpu_per_event_us": (
            window_cpu / window_events * 1e6 if window_events else float("nan")
        ),
        "window_events": window_events,
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "lag_p50_ms": percentile(lags, 0.50) * 1e3,
        "lag_p99_ms": percentile(lags, 0.99) * 1e3,
        "lag_max_ms": max(lags) * 1e3 if lags else float("nan"),
        "window_lag_p99_ms": percentile(window.lags, 0.99) * 1e3,
        "window_lag_events": len(window.lags),
        "rss_before_kib": rss_before,
        "rss_peak_kib": peak,
        "rss_per_session_kib": (peak - rss_before) / sessions,
    }


def in_child(
    origin: str,
    protocol: str,
    sessions: int,
    rate: int,
    events: int,
    variant: str = "default",
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Run `run` in a fresh process; its JSON result (or the failure as a result)."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        origin,
        protocol,
        str(sessions),
        str(rate),
        str(events),
        variant,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s", "sessions": sessions}
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {done.returncode}: {tail[0]}", "sessions": sessions}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    origin, protocol, sessions, rate, events, variant = sys.argv[1:7]
    with contextlib.suppress(KeyboardInterrupt):
        result = asyncio.run(run(origin, protocol, int(sessions), int(rate), int(events), variant))
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
