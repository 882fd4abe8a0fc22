"""`lockgate proxy` on the wire: CPU per forwarded event against a plain aiohttp
pass-through proxy (the floor for a Python proxy) and LiteLLM's proxy, what the metrics
cost, the latency a text delta gains through it at 1, 100 and 1,000 concurrent streams, RSS
per stream, uvloop's event loop against asyncio's, and the events per second one and two
gunicorn workers deliver at saturation.

Everything is loopback, each party in a process of its own: the benchmark server
(`_server.py`, the upstream), each proxy (`_proxy.py`: lockgate's `serving` with its
defaults, `/metrics` on; the same with the metrics off; the same on uvloop, where
installed; the pass-through floor; LiteLLM's `litellm --config`, where installed), and the
client (this process: aiohttp, reading the raw SSE lines). The streams are Chat Completions
(`"stream": true`, lockgate's own request with the fixture's tools), the lab renderer's
native frames (`_streams.py`):

- **CPU per forwarded event**: the proxy process's user + system CPU (/proc/PID/stat, its
  descendants too) over a batch of streams read one after another, divided by the frames
  the upstream sent. Each stream: 2,000 text deltas (`text`), or 1,000 text deltas then one
  `edit` call in 1,000 argument deltas, whose frames lockgate holds to the end and then
  releases (`tool call`); the server pauses ~0.1 ms after each frame, so that each reaches
  the proxy in its own read (as events at model speed do). Median of 3 rounds, the proxies
  interleaved in each (LiteLLM, ~10x the others' CPU, reads 2 streams a batch); ratios
  against the floor of the same run. **The metrics' cost**: lockgate with `/metrics` on
  (its default) against the same with `metrics: false`, in the same rounds (each then
  says what `GET /metrics` answers: the series were kept, or were off).
- **Added latency of a text delta**: N streams at once (N = 1 and 100: 150 deltas at 50
  events/s each; N = 1,000: 40 deltas at 10 events/s), each delta stamped with its send
  time (`time.monotonic()`) by the server; a delta's lag is its arrival at the client minus
  that stamp. Each measured run follows a short one (5 deltas) on the same N connections
  (pools open, heap grown: a proxy already serving). Added latency = the percentile
  through the proxy minus the same percentile read directly from the server in the same
  run (p50, p99).
  The percentiles count the deltas that arrived once every stream was streaming (the
  opening burst apart; the whole run's p99 is printed beside).
- **RSS per stream**: (the proxy's peak RSS during the 1,000-stream run - its idle RSS,
  read once it has been warmed up) / 1,000; failures: any stream that was not a 200
  ending in `[DONE]` with every text delta.
- **Workers**: the real CLI, `lockgate proxy --workers N` (gunicorn, the `server` extra),
  N = 1 and 2 interleaved, 32 clients at once each sending a Chat stream of 2,004 events
  again as soon as the last ended, each on a new connection (the workers share one
  listening socket: connections opened at once and kept alive can all land on one
  worker), every body sent whole (as fast as loopback carries it: the proxy's capacity,
  not a model's pace); the events per second the clients received
  over 4 s after 1 s of warming up (median of 3), and how many cores the proxy's processes
  kept busy meanwhile. The clients only count events, so that they stay cheap beside the
  proxy; on a machine of 2 cores the server, the client and the workers share them.

Targets: lockgate <= 1.2x the floor's CPU per event; the metrics <= 5% of lockgate's CPU per
event; p99 added latency <= 2 ms at 100 streams; 1,000 concurrent streams through one
process with 0 failures and <= 200 KiB per stream; 2 workers >= 1.8x one worker's events
per second. uvloop's figures are printed beside, with no target. LiteLLM is a
benchmark-only install (never a project dependency), e.g.
`python3 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'`,
found through `LOCKGATE_BENCH_LITELLM=/tmp/litellm-venv/bin/litellm` or `litellm` on the
PATH, else skipped. Prints MET / NOT MET; exits 0 unless something failed to run.
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/proxy.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

import aiohttp

from benchmarks._common import Report, heading, raise_fd_limit, server
from benchmarks._proxy import (
    STAMP_CHARS,
    Outcome,
    Proxy,
    client_session,
    direct,
    drive,
    litellm_command,
    litellm_process,
    litellm_version,
    percentile,
    proxy_process,
    saturate,
    uvloop_version,
    workers_process,
)
from benchmarks._streams import PLACEHOLDER, StreamSpec, stream_frames

GAP_US = 100  # the server's pause after each frame in the CPU runs
CPU_LIMIT = 1.2  # x the floor
METRICS_LIMIT = 0.05  # the metrics' share of lockgate's CPU per event
P99_LIMIT_MS = 2.0  # at 100 streams
RSS_LIMIT_KIB = 200.0  # per stream at 1,000
WORKERS_LIMIT = 1.8  # 2 workers' events/s over one worker's
# The workers' runs: each body as fast as loopback carries it (the proxies' capacity).
SATURATING = StreamSpec("chat", "bulk", text=2000, arguments=0, style="openai")
STYLE = "openai"  # OpenAI's own chunks (`_streams.py`), not the lab renderer's leaner ones


@dataclass(frozen=True)
class Plan:
    rounds: int
    cpu_streams: int  # per batch, one after another
    text: int  # text deltas of a CPU stream
    latency: dict[int, tuple[int, int]]  # streams -> (events/s per stream, deltas each)
    worker_rounds: int  # 1 and 2 workers, interleaved
    worker_seconds: float  # measured, after 1 s of warming up
    worker_streams: int  # clients at once

    def cpu_specs(self) -> dict[str, StreamSpec]:
        half = self.text // 2
        return {
            "text": StreamSpec("chat", "chunks", self.text, 0, gap_us=GAP_US, style=STYLE),
            "tool call": StreamSpec("chat", "chunks", half, half, gap_us=GAP_US, style=STYLE),
        }


FULL = Plan(
    rounds=3,
    cpu_streams=5,
    text=2000,
    latency={1: (50, 150), 100: (50, 150), 1000: (10, 40)},
    worker_rounds=3,
    worker_seconds=4.0,
    worker_streams=32,
)
QUICK = Plan(
    rounds=1,
    cpu_streams=2,
    text=2000,
    latency={1: (50, 75), 100: (50, 75), 1000: (10, 20)},
    worker_rounds=1,
    worker_seconds=3.0,
    worker_streams=32,
)


async def warm(proxy: Proxy, specs: list[StreamSpec]) -> None:
    """First-use costs (imports, pools, caches) out of the way."""
    async with client_session(4) as session:
        for spec in specs:
            outcome = await drive(session, proxy, spec, 2, concurrent=False)
            if outcome.failures:
                raise RuntimeError(f"{proxy.name}: {outcome.failures[0]}")


async def cpu_batch(proxy: Proxy, spec: StreamSpec, streams: int) -> tuple[float, Outcome]:
    """The proxy's CPU µs per upstream frame over `streams` streams read in turn."""
    async with client_session(1) as session:
        before = proxy.cpu_seconds()
        outcome = await drive(session, proxy, spec, streams, concurrent=False)
        await asyncio.sleep(0.05)  # the proxy's bookkeeping after the last byte
        spent = proxy.cpu_seconds() - before
    frames = len(stream_frames(spec)) * streams
    return spent / frames * 1e6, outcome


async def latency_run(proxy: Proxy, streams: int, rate: int, deltas: int) -> Outcome:
    spec = StreamSpec("chat", "paced", text=deltas, arguments=0, rate=rate, style=STYLE)
    async with client_session(streams) as session:
        # Warm at this concurrency (the client's and the proxy's pools open, the heap
        # grown): a short stream on each of the N connections, then the measured run.
        short = StreamSpec("chat", "paced", text=5, arguments=0, rate=rate, style=STYLE)
        await drive(session, proxy, short, streams)
        return await drive(session, proxy, spec, streams, watch_rss=bool(proxy.pid))


def ms(value: float) -> str:
    return f"{value * 1000:6.2f}"


async def measure(origin: str, plan: Plan, report: Report) -> int:
    assert len(PLACEHOLDER) == STAMP_CHARS
    specs = plan.cpu_specs()
    command = litellm_command()
    errors = 0
    uvloop = uvloop_version()
    with contextlib.ExitStack() as stack:
        proxies = [
            stack.enter_context(proxy_process("passthrough", origin)),
            stack.enter_context(proxy_process("lockgate", origin)),
            stack.enter_context(proxy_process("lockgate-nometrics", origin)),
        ]
        if uvloop is None:
            print("uvloop: not installed (lockgate on uvloop skipped)")
        else:
            proxies.append(stack.enter_context(proxy_process("lockgate-uvloop", origin)))
            print(f"uvloop {uvloop}")
        if command is None:
            print("LiteLLM: not installed (skipped; set LOCKGATE_BENCH_LITELLM to its `litellm`)")
        else:
            try:
                proxies.append(
                    stack.enter_context(litellm_process(command, origin, list(specs.values())))
                )
                print(f"LiteLLM {litellm_version(command)}: {command}")
            except Exception as exc:
                print(f"LiteLLM: did not start (skipped): {exc}")
        for proxy in proxies:
            await warm(proxy, list(specs.values()))
        idle = {proxy.name: proxy.rss_kib() for proxy in proxies}  # after warming up
        print(
            "idle RSS after warming up: "
            + ", ".join(f"{name} {kib / 1024:.0f} MiB" for name, kib in idle.items())
        )

        # --- CPU per forwarded event ----------------------------------------------------
        heading("CPU per forwarded event (the proxy's process; Chat, one frame per read)")
        cpu: dict[tuple[str, str], list[float]] = {}
        for number in range(plan.rounds):
            for label, spec in specs.items():
                for proxy in proxies:
                    # LiteLLM's CPU per event is ~10x the others': fewer streams suffice
                    streams = min(2, plan.cpu_streams) if proxy.litellm else plan.cpu_streams
                    per_event, outcome = await cpu_batch(proxy, spec, streams)
                    if outcome.failures:
                        errors += 1
                        print(f"  {proxy.name} {label}: FAILED {outcome.failures[0]}")
                    cpu.setdefault((proxy.name, label), []).append(per_event)
                    print(
                        f"  round {number + 1} {label:9} {proxy.name:11} {per_event:7.1f} µs/event"
                        f" ({outcome.frames:,} frames received, {outcome.seconds:.1f} s)",
                        flush=True,
                    )
        frames = {label: len(stream_frames(spec)) for label, spec in specs.items()}
        print(f"\n  {'µs per event (median)':24}" + "".join(f"{label:>22}" for label in specs))
        median = {key: statistics.median(values) for key, values in cpu.items()}
        for proxy in proxies:
            cells = []
            for label in specs:
                value = median[(proxy.name, label)]
                ratio = value / median[("passthrough", label)]
                cells.append(f"{value:10.1f} ({ratio:5.2f}x floor)")
            print(f"  {proxy.name:24}" + "".join(f"{cell:>22}" for cell in cells))
        print(
            "  ("
            + ", ".join(f"{label}: {n:,} frames a stream" for label, n in frames.items())
            + f"; {plan.cpu_streams} streams a batch, median of {plan.rounds})"
        )

        print("  " + metrics_seen(proxies))

        # --- latency, RSS, failures -------------------------------------------------------
        heading("added latency of a text delta (through the proxy minus direct), RSS per stream")
        targets = [
            direct(origin),
            *(p for p in proxies if not p.litellm and p.name != "lockgate-nometrics"),
        ]
        runs: dict[tuple[str, int], Outcome] = {}
        for streams, (rate, deltas) in plan.latency.items():
            for target in targets:
                outcome = await latency_run(target, streams, rate, deltas)
                runs[(target.name, streams)] = outcome
                window = outcome.window_lags()
                whole = [lag for _, lag in outcome.lags]
                cpu_note = ""
                if target.pid and streams > 1:  # one stream: too few ticks to count
                    sent = streams * len(
                        stream_frames(StreamSpec("chat", "paced", deltas, 0, rate, style=STYLE))
                    )
                    per_event = outcome.cpu_seconds / sent * 1e6
                    cpu_note = f", proxy CPU {per_event:5.1f} µs/event"
                print(
                    f"  N={streams:5,} {target.name:11} lag p50 {ms(percentile(window, 0.5))}"
                    f" p99 {ms(percentile(window, 0.99))} ms ({len(window):,} deltas streaming;"
                    f" whole run p99 {ms(percentile(whole, 0.99))} ms){cpu_note},"
                    f" {len(outcome.failures)} failures {outcome.failures[:1]}",
                    flush=True,
                )
    print(
        f"\n  {'streams (events/s each)':24}{'direct p50/p99':>18}"
        + "".join(f"{t.name + ' +p50/+p99':>26}" for t in targets[1:])
        + f"{'RSS/stream':>16}"
    )
    added: dict[tuple[str, int], tuple[float, float]] = {}
    for streams, (rate, _) in plan.latency.items():
        base = runs[("direct", streams)].window_lags()
        b50, b99 = percentile(base, 0.5), percentile(base, 0.99)
        row = f"  {f'{streams:,} ({rate}/s)':24}{ms(b50) + ' /' + ms(b99) + ' ms':>18}"
        for target in targets[1:]:
            run = runs[(target.name, streams)]
            lags = run.window_lags()
            plus = (percentile(lags, 0.5) - b50, percentile(lags, 0.99) - b99)
            added[(target.name, streams)] = plus
            fail = f" {len(run.failures)}F" if run.failures else ""
            row += f"{ms(plus[0]) + ' /' + ms(plus[1]) + ' ms' + fail:>26}"
        rss = [
            f"{(runs[(t.name, streams)].peak_rss_kib - idle[t.name]) / streams:.0f}"
            for t in targets[1:]
        ]
        row += f"  {' / '.join(rss) + ' KiB':>16}"
        print(row)
    print(
        "  (lags once every stream is streaming; RSS/stream: "
        + " / ".join(t.name for t in targets[1:])
        + ")"
    )

    # --- gunicorn workers -------------------------------------------------------------------
    heading(
        f"throughput: `lockgate proxy --workers N` at saturation ({plan.worker_streams} clients"
        f" at once, each body of {len(stream_frames(SATURATING)):,} Chat events as fast as"
        " loopback carries it)"
    )
    rates: dict[int, list[float]] = {1: [], 2: []}
    cores: dict[int, list[float]] = {1: [], 2: []}
    for number in range(plan.worker_rounds):
        for workers in (1, 2):
            per_second, busy = await workers_run(origin, workers, plan)
            rates[workers].append(per_second)
            cores[workers].append(busy)
            print(
                f"  round {number + 1} {workers} worker{'s' if workers > 1 else ' '}"
                f" {per_second:9,.0f} events/s, the proxy's processes busy {busy:.2f} cores",
                flush=True,
            )
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    print(
        f"  median: 1 worker {one:,.0f} events/s ({statistics.median(cores[1]):.2f} cores),"
        f" 2 workers {two:,.0f} events/s ({statistics.median(cores[2]):.2f} cores);"
        f" {os.cpu_count()} cores on this machine, shared with the server and the client"
    )

    # --- the targets ----------------------------------------------------------------------
    print()
    for label in specs:
        lockgate, floor = median[("lockgate", label)], median[("passthrough", label)]
        extra = ""
        if ("litellm", label) in median:
            extra = f"; LiteLLM {median[('litellm', label)]:.1f} µs"
        report.check(
            f"CPU per event ({label}) <= {CPU_LIMIT}x the pass-through floor",
            lockgate <= CPU_LIMIT * floor,
            f"{lockgate:.1f} vs {floor:.1f} µs = {lockgate / floor:.2f}x{extra}",
        )
    costs = {
        label: median[("lockgate", label)] / median[("lockgate-nometrics", label)] - 1
        for label in specs
    }
    report.check(
        f"the metrics cost <= {METRICS_LIMIT:.0%} of lockgate's CPU per event",
        all(cost <= METRICS_LIMIT for cost in costs.values()),
        ", ".join(
            f"{label}: {median[('lockgate', label)]:.1f} on vs"
            f" {median[('lockgate-nometrics', label)]:.1f} µs off ({cost:+.1%})"
            for label, cost in costs.items()
        ),
    )
    if 100 in plan.latency:
        p50, p99 = added[("lockgate", 100)]
        report.check(
            f"p99 added latency <= {P99_LIMIT_MS:g} ms at 100 streams",
            p99 * 1000 <= P99_LIMIT_MS,
            f"+{p99 * 1000:.2f} ms p99, +{p50 * 1000:.2f} ms p50",
        )
    many = runs[("lockgate", 1000)]
    report.check(
        "1,000 concurrent streams: 0 failures",
        not many.failures,
        f"{len(many.failures)} failures {many.failures[:1]}".strip(),
    )
    per_stream = (many.peak_rss_kib - idle["lockgate"]) / 1000
    report.check(
        f"1,000 concurrent streams: <= {RSS_LIMIT_KIB:.0f} KiB per stream",
        per_stream <= RSS_LIMIT_KIB,
        f"{per_stream:.1f} KiB (peak {many.peak_rss_kib / 1024:.0f} MiB, "
        f"{idle['lockgate'] / 1024:.0f} MiB idle)",
    )
    report.check(
        f"2 gunicorn workers >= {WORKERS_LIMIT}x one worker's events/s",
        two >= WORKERS_LIMIT * one,
        f"{two:,.0f} vs {one:,.0f} events/s = {two / one:.2f}x"
        + (
            f" (only {os.cpu_count()} cores for the server, the client and the workers)"
            if (os.cpu_count() or 1) < 4
            else ""
        ),
    )
    if uvloop is not None:
        for label in specs:
            on, off = median[("lockgate-uvloop", label)], median[("lockgate", label)]
            print(
                f"  (uvloop, {label}: {on:.1f} vs {off:.1f} µs per event on asyncio's loop,"
                f" {on / off - 1:+.1%})"
            )
        if 100 in plan.latency:
            p50, p99 = added[("lockgate-uvloop", 100)]
            print(f"  (uvloop at 100 streams: +{p99 * 1000:.2f} ms p99, +{p50 * 1000:.2f} ms p50)")
    return errors


async def workers_run(origin: str, workers: int, plan: Plan) -> tuple[float, float]:
    """Events/s the clients received through `lockgate proxy --workers N` at saturation,
    and how many cores its processes kept busy meanwhile."""
    with workers_process(workers, origin) as proxy:
        # A connection per stream: the workers share one listening socket, and connections
        # opened at once and kept alive may all go to the worker that woke first.
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True),
            timeout=aiohttp.ClientTimeout(total=300, sock_connect=60, sock_read=60),
            trust_env=False,
        ) as session:
            outcome = await drive(session, proxy, SATURATING, plan.worker_streams)
            if outcome.failures:
                raise RuntimeError(f"{proxy.name}: {outcome.failures[0]}")
            rate, cpu, _ = await saturate(
                session, proxy, SATURATING, plan.worker_streams, 1.0, plan.worker_seconds
            )
    return rate, cpu / plan.worker_seconds


def metrics_seen(proxies: list[Proxy]) -> str:
    """What `GET /metrics` answers on each lockgate (a check that the metrics were on, or
    off, while it was measured)."""
    seen = []
    for proxy in proxies:
        if not proxy.name.startswith("lockgate"):
            continue
        try:
            with urllib.request.urlopen(proxy.origin + "/metrics", timeout=5) as response:
                text = response.read().decode()
            count = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("lockgate_proxy_requests_total{")
            )
            seen.append(f"{proxy.name}: /metrics counted {count:.0f} requests")
        except urllib.error.HTTPError as exc:
            seen.append(f"{proxy.name}: /metrics {exc.code}")
    return "; ".join(seen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one round, shorter streams")
    args = parser.parse_args()
    raise_fd_limit()  # the server and the proxies inherit it
    started = time.monotonic()
    report = Report("proxy")
    with server() as origin:
        errors = asyncio.run(measure(origin, QUICK if args.quick else FULL, report))
    print()
    report.summary()
    print(f"(proxy took {time.monotonic() - started:.0f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
