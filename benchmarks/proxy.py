"""`lockgate proxy` on the wire, against a plain aiohttp pass-through proxy (the floor for a
Python proxy) and LiteLLM's proxy, all in the same run: CPU per forwarded event, what the
metrics (and OpenTelemetry, once wired) cost, the latency a text delta gains at 100 and
1,000 concurrent streams, RSS per stream, the latency a whole (non-streaming) answer gains
at a fixed 3,000 requests/s, and the event loop the proxy runs on; last, the Responses
WebSocket relay's rows (`websocket.py`: CPU per event through the relay against a WebSocket
pass-through, the same targets).

The first line says the event loop `lockgate proxy` runs on here (`lockgate.proxy.loop_policy`:
uvloop's where it is installed, asyncio's elsewhere). Everything is loopback, each party in
a process of its own: the benchmark server (`_server.py`, the upstream), each proxy
(`_proxy.py`: lockgate's `serving` with its defaults, `/metrics` on, on that loop; the same
with the metrics off; the same on asyncio's loop; the pass-through on each loop; LiteLLM's
`litellm --config`, where installed), and the client (this process: aiohttp, reading the
raw SSE lines, one read per event). The streams are Chat Completions shaped as OpenAI sends
them (`_streams.py`, style `openai`, after the recordings of `../shared/real-streams`: the
role chunk, `system_fingerprint`, `logprobs: null`, `obfuscation`, 1-8 character deltas,
the usage chunk, `[DONE]`), lockgate's own request with the fixture's tools.

- **CPU per forwarded event**: the proxy process's user + system CPU (/proc/PID/stat) over
  a batch of streams read one after another, divided by the frames the upstream sent. Each
  stream: 2,000 text deltas (`text`), or 1,000 text deltas then one `edit` call in 1,000
  argument deltas, which lockgate holds to the end and then releases (`tool call`); the same
  two as Bedrock ConverseStream event streams (`es text`, `es tool call`: the lab renderer's
  binary messages to `/model/{id}/converse-stream`, the client checking every CRC); the
  server writes each frame on its own and pauses ~0.1 ms after it, so that each reaches
  the proxy in its own read (as events at model speed do). Paired rounds: in each round
  every proxy reads the same batch, one after another; a ratio is taken within each round
  (lockgate / the pass-through on the same loop) and the median of the rounds' ratios is
  the figure. **Metrics + OTel**: lockgate with `/metrics` on (its default) against the
  same with `metrics: false`, paired the same way; `--otel` adds a lockgate with an
  OpenTelemetry tracer exporting to a loopback OTLP sink, where `serving` takes a tracer
  (otherwise the row says it is not measured, and why).
- **Added latency of a text delta**: N streams at once (100 at 50 events/s, 150 deltas
  each; 1,000 at 10 events/s, 40 each), each delta stamped with its send time by the
  server; a delta's lag is its arrival at the client minus that stamp. Each measured run
  follows a short one (5 deltas) on the same N connections. Added = the percentile through
  the proxy minus the same percentile read directly in the same round (p50, p99; the
  deltas that arrived once every stream was streaming). Rounds alternate direct, the
  pass-through and lockgate; the median of the rounds' added p99 is the figure.
- **1,000 streams**: 0 failures (a stream that is not a 200 ending in `[DONE]` with every
  text delta) and the RSS per stream: (the proxy process's peak RSS during the run,
  sampled every 20 ms from /proc - its RSS once warmed up, idle) / 1,000. RSS, not
  tracemalloc: it counts aiohttp's and the C buffers too.
- **Whole answers at a fixed rate**: `"stream": false` requests on an absolute schedule of
  3,000 per second over 32 kept-alive connections, 3 s; each latency from the request's
  slot in the schedule (a proxy that falls behind shows its queue); added = through the
  proxy minus direct, p50 and p99, lockgate and LiteLLM. No target: the figure gateways
  are compared by.
- `--workers-scaling`: `lockgate proxy --workers 1` and `2` at saturation (events/s).

Targets: uvloop by default where it exists; CPU per event <= 1.2x the pass-through for text
and <= 1.1x for a held tool call, on the Chat route and on Bedrock's ConverseStream route
alike (`es text`, `es tool call`: the binary event stream, each message's CRCs checked and
its JSON judged, against the same pass-through on the same route); p99 added <= 1 ms at
100 streams x 50 events/s; 1,000 streams with 0 failures and <= 64 KiB each; metrics +
OTel <= 5% of lockgate's CPU per event; LiteLLM's CPU per event >= 8x lockgate's (on the
Chat route). LiteLLM is a benchmark-only install (never a project dependency), e.g.
`python3 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'`,
given as `--litellm-python /tmp/litellm-venv/bin/python` (or
`LOCKGATE_BENCH_LITELLM=/path/to/litellm`, or `litellm` on the PATH), else its rows say
SKIPPED. Prints MET / NOT MET with the figure and the baseline of the same run; exits 0
unless something failed to run. Run: `python3 dev.py bench` or `.venv/bin/python
benchmarks/proxy.py [--quick] [--otel] [--only cpu] [--litellm-python PATH]` (`--only cpu`:
the CPU rows and the targets they decide, nothing else).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

import aiohttp

from benchmarks._common import Report, heading, raise_fd_limit, server
from benchmarks._load import (
    Outcome,
    Paced,
    client_session,
    drive,
    fixed_rate,
    percentile,
    saturate,
)
from benchmarks._proxy import (
    STAMP_CHARS,
    Proxy,
    direct,
    litellm_command,
    litellm_process,
    litellm_version,
    proxy_process,
    tracing_wired,
    uvloop_version,
    workers_process,
)
from benchmarks._streams import PLACEHOLDER, StreamSpec, stream_frames
from lockgate.proxy.loop_policy import loop_name

GAP_US = 100  # the server's pause after each frame in the CPU runs
STYLE = "openai"  # OpenAI's own chunks (`_streams.py`), not the lab renderer's leaner ones
TEXT_LIMIT = 1.2  # x the pass-through, text
TOOL_LIMIT = 1.1  # x the pass-through, a held tool call
OVERHEAD_LIMIT = 0.05  # metrics + OTel, of lockgate's CPU per event
P99_LIMIT_MS = 1.0  # added, at 100 streams x 50 events/s
RSS_LIMIT_KIB = 64.0  # per stream at 1,000
LITELLM_FACTOR = 8.0  # LiteLLM's CPU per event over lockgate's, at least
WORKERS_LIMIT = 1.8  # 2 workers' events/s over one worker's (`--workers-scaling`)
EVENTSTREAM_TEXT = "es text"  # Bedrock ConverseStream (`application/vnd.amazon.eventstream`)
EVENTSTREAM_TOOL = "es tool call"
# Each CPU row's target: x the pass-through (an event-stream route: the same as its SSE row).
CPU_LIMITS = {
    "text": TEXT_LIMIT,
    "tool call": TOOL_LIMIT,
    EVENTSTREAM_TEXT: TEXT_LIMIT,
    EVENTSTREAM_TOOL: TOOL_LIMIT,
}
SATURATING = StreamSpec("chat", "bulk", text=2000, arguments=0, style=STYLE)
WHOLE = StreamSpec("chat", "json", text=120, arguments=0, style=STYLE)


@dataclass(frozen=True)
class Plan:
    rounds: int
    cpu_streams: int  # per batch, one after another
    text: int  # text deltas of a CPU stream
    latency_rounds: int  # at 100 streams
    latency: dict[int, tuple[int, int]]  # streams -> (events/s per stream, deltas each)
    rate: int  # whole answers per second
    rate_seconds: float
    connections: int
    worker_seconds: float

    def cpu_specs(self) -> dict[str, StreamSpec]:
        half = self.text // 2
        return {
            "text": StreamSpec("chat", "chunks", self.text, 0, gap_us=GAP_US, style=STYLE),
            "tool call": StreamSpec("chat", "chunks", half, half, gap_us=GAP_US, style=STYLE),
            EVENTSTREAM_TEXT: StreamSpec("bedrock", "chunks", self.text, 0, gap_us=GAP_US),
            EVENTSTREAM_TOOL: StreamSpec("bedrock", "chunks", half, half, gap_us=GAP_US),
        }


FULL = Plan(
    rounds=5,
    cpu_streams=3,
    text=2000,
    latency_rounds=3,
    latency={100: (50, 150), 1000: (10, 40)},
    rate=3000,
    rate_seconds=3.0,
    connections=32,
    worker_seconds=4.0,
)
QUICK = Plan(
    rounds=1,
    cpu_streams=1,
    text=600,
    latency_rounds=1,
    latency={100: (50, 50), 1000: (10, 15)},
    rate=3000,
    rate_seconds=1.0,
    connections=32,
    worker_seconds=2.0,
)


def serves(proxy: Proxy, spec: StreamSpec) -> bool:
    """Whether `proxy` takes `spec`'s route (LiteLLM is given the Chat streams only)."""
    return not (proxy.litellm and spec.protocol != "chat")


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
    return f"{value * 1000:.2f}"


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    """A loopback OTLP/HTTP receiver that accepts every export and keeps nothing."""

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=sink.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sink.server_address[1]}"
    finally:
        sink.shutdown()


@dataclass
class Pairs:
    """Each proxy's CPU µs per event for each stream, round by round."""

    values: dict[tuple[str, str], list[float]]

    def median(self, name: str, label: str) -> float:
        return statistics.median(self.values[(name, label)])

    def ratio(self, name: str, base: str, label: str) -> float:
        """The median over rounds of name / base within each round (paired)."""
        ours, theirs = self.values[(name, label)], self.values[(base, label)]
        return statistics.median(a / b for a, b in zip(ours, theirs, strict=False))

    def has(self, name: str, label: str) -> bool:
        return bool(self.values.get((name, label)))


async def measure(origin: str, plan: Plan, args: argparse.Namespace, report: Report) -> int:
    assert len(PLACEHOLDER) == STAMP_CHARS
    specs = plan.cpu_specs()
    loop = loop_name()
    command = litellm_command(args.litellm_python)
    errors = 0
    with contextlib.ExitStack() as stack:
        proxies = [
            stack.enter_context(proxy_process("passthrough", origin)),
            stack.enter_context(proxy_process("lockgate", origin)),
            stack.enter_context(proxy_process("lockgate-nometrics", origin)),
        ]
        if loop != "asyncio":
            proxies.append(stack.enter_context(proxy_process("passthrough-asyncio", origin)))
            proxies.append(stack.enter_context(proxy_process("lockgate-asyncio", origin)))
        otel_skip = tracing_wired() if args.otel else "not asked for (--otel)"
        if otel_skip is None:
            endpoint = stack.enter_context(otlp_sink())
            env = {"LOCKGATE_BENCH_OTLP": endpoint}
            try:
                proxies.append(stack.enter_context(proxy_process("lockgate-otel", origin, env)))
            except Exception as exc:
                otel_skip = f"the traced proxy did not start ({exc})"
        litellm_skip = ""
        if command is None:
            litellm_skip = (
                "not installed (give --litellm-python PATH of a venv with litellm[proxy])"
            )
        else:
            try:
                proxies.append(
                    stack.enter_context(litellm_process(command, origin, [*specs.values(), WHOLE]))
                )
                print(f"LiteLLM {litellm_version(command)}: {command}")
            except Exception as exc:
                litellm_skip = f"did not start: {str(exc)[:300]}"
        if litellm_skip:
            print(f"LiteLLM: {litellm_skip}")
        for proxy in proxies:
            await warm(proxy, [spec for spec in specs.values() if serves(proxy, spec)])
        idle = {proxy.name: proxy.rss_kib() for proxy in proxies}  # after warming up
        print(
            "idle RSS after warming up: "
            + ", ".join(f"{name} {kib / 1024:.0f} MiB" for name, kib in idle.items())
        )

        # --- CPU per forwarded event ----------------------------------------------------
        heading(
            "CPU per forwarded event (the proxy's process, one frame per read; Chat, and"
            " Bedrock ConverseStream's event stream: es)"
        )
        values: dict[tuple[str, str], list[float]] = {}
        for number in range(plan.rounds):
            for label, spec in specs.items():
                for proxy in proxies:
                    if not serves(proxy, spec) or (proxy.litellm and number >= 3):
                        continue  # ~10x the others' CPU: 3 rounds suffice
                    streams = 1 if proxy.litellm else plan.cpu_streams
                    per_event, outcome = await cpu_batch(proxy, spec, streams)
                    if outcome.failures:
                        errors += 1
                        print(f"  {proxy.name} {label}: FAILED {outcome.failures[0]}")
                    values.setdefault((proxy.name, label), []).append(per_event)
                    print(
                        f"  round {number + 1} {label:9} {proxy.name:19} {per_event:7.1f} µs/event"
                        f" ({outcome.frames:,} frames, {outcome.seconds:.1f} s)",
                        flush=True,
                    )
        cpu = Pairs(values)
        frames = {label: len(stream_frames(spec)) for label, spec in specs.items()}
        print(f"\n  {'µs per event (median)':28}" + "".join(f"{label:>26}" for label in specs))
        for proxy in proxies:
            floor = "passthrough-asyncio" if proxy.name.endswith("-asyncio") else "passthrough"
            row = []
            for label in specs:
                if not cpu.has(proxy.name, label):
                    row.append("-")  # LiteLLM: the Chat routes only
                    continue
                ratio = cpu.ratio(proxy.name, floor, label)
                row.append(f"{cpu.median(proxy.name, label):8.1f} ({ratio:5.2f}x {floor[:11]})")
            print(f"  {proxy.name:28}" + "".join(f"{cell:>26}" for cell in row))
        print(
            "  (ratios: the median of each round's ratio to the pass-through on the same loop; "
            + ", ".join(f"{label}: {n:,} frames a stream" for label, n in frames.items())
            + f"; {plan.cpu_streams} streams a batch, {plan.rounds} rounds)"
        )
        print("  " + metrics_seen(proxies))

        if args.only == "cpu":
            print()
            return errors + report_cpu(cpu, specs, loop, plan, otel_skip, litellm_skip, report)

        # --- latency, RSS, failures -------------------------------------------------------
        heading("added latency of a text delta (through the proxy minus direct), RSS per stream")
        targets = [direct(origin), *(p for p in proxies if p.name in ("passthrough", "lockgate"))]
        added: dict[tuple[str, int], list[tuple[float, float]]] = {}
        runs: dict[tuple[str, int], Outcome] = {}
        for streams, (rate, deltas) in plan.latency.items():
            repeat = plan.latency_rounds if streams == 100 else 1
            for number in range(repeat):
                direct_lag: tuple[float, float] = (0.0, 0.0)
                for target in targets:
                    if streams > 100 and target.name == "passthrough":
                        continue
                    outcome = await latency_run(target, streams, rate, deltas)
                    runs[(target.name, streams)] = outcome
                    window = outcome.window_lags()
                    p50, p99 = percentile(window, 0.5), percentile(window, 0.99)
                    if target.name == "direct":
                        direct_lag = (p50, p99)
                        plus = ""
                    else:
                        d50, d99 = p50 - direct_lag[0], p99 - direct_lag[1]
                        added.setdefault((target.name, streams), []).append((d50, d99))
                        plus = f" (added +{ms(d50)} / +{ms(d99)} ms)"
                    print(
                        f"  N={streams:5,} round {number + 1} {target.name:11}"
                        f" p50 {ms(p50)} p99 {ms(p99)} ms{plus}, {len(window):,} deltas,"
                        f" {len(outcome.failures)} failures {outcome.failures[:1]}",
                        flush=True,
                    )

        # --- whole answers at a fixed rate ------------------------------------------------
        heading(
            f"whole answers (`stream: false`) at a fixed {plan.rate:,} requests/s over"
            f" {plan.connections} connections, {plan.rate_seconds:g} s"
        )
        paced: dict[str, Paced] = {}
        whole_targets = [direct(origin), *(p for p in proxies if p.name == "lockgate")]
        whole_targets += [p for p in proxies if p.litellm]
        for target in whole_targets:
            result = await fixed_rate(target, WHOLE, plan.rate, plan.connections, plan.rate_seconds)
            paced[target.name] = result
            print(
                f"  {target.name:11} p50 {ms(percentile(result.latencies, 0.5))}"
                f" p99 {ms(percentile(result.latencies, 0.99))} ms,"
                f" {len(result.latencies) / result.seconds:,.0f} answered/s,"
                f" {result.failed} failed {result.failures[:1]}, {result.missed} not sent in time"
                + (
                    f", proxy CPU {result.cpu_seconds / result.seconds:.2f} cores"
                    if target.pid
                    else ""
                ),
                flush=True,
            )

    # --- workers (optional) -------------------------------------------------------------
    scaling: tuple[float, float] | None = None
    if args.workers_scaling:
        heading("`lockgate proxy --workers N` at saturation (32 clients, bodies sent whole)")
        one = await workers_run(origin, 1, plan)
        two = await workers_run(origin, 2, plan)
        print(f"  1 worker {one[0]:,.0f} events/s ({one[1]:.2f} cores)")
        print(f"  2 workers {two[0]:,.0f} events/s ({two[1]:.2f} cores)")
        scaling = (one[0], two[0])

    # --- the targets ----------------------------------------------------------------------
    print()
    report_cpu(cpu, specs, loop, plan, otel_skip, litellm_skip, report, checks="loop")
    if 100 in plan.latency:
        lags = added[("lockgate", 100)]
        p99 = statistics.median(p for _, p in lags)
        p50 = statistics.median(p for p, _ in lags)
        floor99 = statistics.median(p for _, p in added[("passthrough", 100)])
        report.check(
            f"p99 added <= {P99_LIMIT_MS:g} ms at 100 streams x 50 events/s",
            p99 * 1000 <= P99_LIMIT_MS,
            f"+{ms(p99)} ms p99, +{ms(p50)} ms p50 (median of {len(lags)} rounds:"
            f" {', '.join('+' + ms(p) for _, p in lags)}); the pass-through +{ms(floor99)} ms p99",
        )
    many = runs[("lockgate", 1000)]
    per_stream = (many.peak_rss_kib - idle["lockgate"]) / 1000
    report.check(
        f"1,000 streams: 0 failures, <= {RSS_LIMIT_KIB:.0f} KiB each",
        not many.failures and per_stream <= RSS_LIMIT_KIB,
        f"{len(many.failures)} failures{' ' + many.failures[0] if many.failures else ''},"
        f" {per_stream:.1f} KiB per stream (RSS: peak {many.peak_rss_kib / 1024:.0f} MiB,"
        f" {idle['lockgate'] / 1024:.0f} MiB idle)",
    )
    report_cpu(cpu, specs, loop, plan, otel_skip, litellm_skip, report, checks="costs")
    baseline = paced["direct"].latencies
    b50, b99 = percentile(baseline, 0.5), percentile(baseline, 0.99)
    cells = []
    for name, result in paced.items():
        if name == "direct":
            continue
        got = len(result.latencies) / result.seconds
        cells.append(
            f"{name} +{ms(percentile(result.latencies, 0.5) - b50)} /"
            f" +{ms(percentile(result.latencies, 0.99) - b99)} ms"
            f" ({got:,.0f}/s answered, {result.failed} failed, {result.missed} not sent in time)"
        )
    if "litellm" not in paced:
        cells.append(f"LiteLLM {litellm_skip}")
    print(
        f"  [REPORT] whole answers at {plan.rate:,}/s over {plan.connections} connections,"
        f" p50 / p99 added: " + "; ".join(cells) + f" (direct {ms(b50)} / {ms(b99)} ms)",
        flush=True,
    )
    if scaling is not None:
        single, double = scaling
        report.check(
            f"2 gunicorn workers >= {WORKERS_LIMIT}x one worker's events/s",
            double >= WORKERS_LIMIT * single,
            f"{double:,.0f} vs {single:,.0f} events/s = {double / single:.2f}x",
        )
    return errors


def report_cpu(
    cpu: Pairs,
    specs: dict[str, StreamSpec],
    loop: str,
    plan: Plan,
    otel_skip: str | None,
    litellm_skip: str,
    report: Report,
    checks: str = "all",
) -> int:
    """The targets the CPU rows decide: the loop and the CPU ratios (`checks="loop"`), what
    the metrics, OTel and LiteLLM cost (`"costs"`), or all of them (`--only cpu`)."""
    if checks in ("all", "loop"):
        uvloop = uvloop_version()
        expected = "asyncio" if sys.platform == "win32" or uvloop is None else "uvloop"
        report.check(
            "uvloop by default where it exists",
            loop == expected,
            f"`lockgate proxy` runs on {loop}"
            + (f" (uvloop {uvloop} installed)" if uvloop else " (uvloop not installed here)"),
        )
        for label, limit in CPU_LIMITS.items():
            if not cpu.has("lockgate", label):
                continue
            ratio = cpu.ratio("lockgate", "passthrough", label)
            note = ""
            if cpu.has("lockgate-asyncio", label):
                note = (
                    f"; on asyncio {cpu.median('lockgate-asyncio', label):.1f} vs"
                    f" {cpu.median('passthrough-asyncio', label):.1f} µs ="
                    f" {cpu.ratio('lockgate-asyncio', 'passthrough-asyncio', label):.2f}x"
                )
            report.check(
                f"CPU per event ({label}) <= {limit}x the pass-through ({loop})",
                ratio <= limit,
                f"{cpu.median('lockgate', label):.1f} vs {cpu.median('passthrough', label):.1f} µs"
                f" = {ratio:.2f}x (paired median of {plan.rounds}){note}",
            )
        if cpu.has("passthrough-asyncio", "text"):
            print(
                "  (lockgate on uvloop against the pass-through on asyncio's loop,"
                " aiohttp's default: "
                + ", ".join(
                    f"{label} {cpu.ratio('lockgate', 'passthrough-asyncio', label):.2f}x"
                    for label in specs
                )
                + ")"
            )
    if checks in ("all", "costs"):
        costs = {label: cpu.ratio("lockgate", "lockgate-nometrics", label) - 1 for label in specs}
        metrics_text = ", ".join(f"{label} {cost:+.1%}" for label, cost in costs.items())
        if otel_skip is None:
            otel = {
                label: cpu.ratio("lockgate-otel", "lockgate-nometrics", label) - 1
                for label in specs
            }
            report.check(
                f"metrics + OTel <= {OVERHEAD_LIMIT:.0%} of lockgate's CPU per event",
                all(cost <= OVERHEAD_LIMIT for cost in otel.values()),
                "metrics and a tracer on vs both off: "
                + ", ".join(f"{label} {cost:+.1%}" for label, cost in otel.items())
                + f" (metrics alone: {metrics_text})",
            )
        else:  # half of the target measured: not met, with the half that was
            report.check(
                f"metrics + OTel <= {OVERHEAD_LIMIT:.0%} of lockgate's CPU per event",
                False,
                f"OTel not measured: {otel_skip}; metrics on vs off: {metrics_text}"
                f" ({'within' if all(c <= OVERHEAD_LIMIT for c in costs.values()) else 'over'}"
                f" {OVERHEAD_LIMIT:.0%})",
            )
        if cpu.has("litellm", "text"):
            factors = {
                label: cpu.median("litellm", label) / cpu.median("lockgate", label)
                for label in specs
                if cpu.has("litellm", label)
            }
            report.check(
                f"LiteLLM's CPU per event >= {LITELLM_FACTOR:g}x lockgate's",
                all(factor >= LITELLM_FACTOR for factor in factors.values()),
                ", ".join(
                    f"{label}: {cpu.median('litellm', label):.1f} vs"
                    f" {cpu.median('lockgate', label):.1f} µs = {factor:.1f}x"
                    for label, factor in factors.items()
                ),
            )
        else:
            report.check(
                f"LiteLLM's CPU per event >= {LITELLM_FACTOR:g}x lockgate's (SKIPPED)",
                False,
                f"LiteLLM {litellm_skip}",
            )
    return 0


async def workers_run(origin: str, workers: int, plan: Plan) -> tuple[float, float]:
    """Events/s the clients received through `lockgate proxy --workers N` at saturation,
    and how many cores its processes kept busy meanwhile."""
    with workers_process(workers, origin) as proxy:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True),
            timeout=aiohttp.ClientTimeout(total=300, sock_connect=60, sock_read=60),
            trust_env=False,
        ) as session:
            outcome = await drive(session, proxy, SATURATING, 32)
            if outcome.failures:
                raise RuntimeError(f"{proxy.name}: {outcome.failures[0]}")
            rate, cpu, _ = await saturate(session, proxy, SATURATING, 32, 1.0, plan.worker_seconds)
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
    parser.add_argument("--otel", action="store_true", help="also lockgate with a tracer")
    parser.add_argument(
        "--only", choices=("cpu",), help="only the CPU rows (and the targets they decide)"
    )
    parser.add_argument(
        "--litellm-python", metavar="PATH", help="the python of a venv with litellm[proxy]"
    )
    parser.add_argument(
        "--workers-scaling", action="store_true", help="also 1 and 2 gunicorn workers"
    )
    args = parser.parse_args()
    uvloop = uvloop_version()
    print(
        f"event loop: {loop_name()} (`lockgate proxy`'s;"
        f" uvloop {uvloop or 'not installed'}; {sys.platform}); {os.cpu_count()} cores,"
        f" load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    raise_fd_limit()  # the server and the proxies inherit it
    started = time.monotonic()
    report = Report("proxy")
    with server() as origin:
        errors = asyncio.run(measure(origin, QUICK if args.quick else FULL, args, report))
    print()
    report.summary()
    # The Responses WebSocket relay's rows (issue 30): CPU per event through the relay
    # against a WebSocket pass-through in the same run, held to the same targets.
    from . import websocket

    print("\nthe Responses WebSocket relay (benchmarks/websocket.py):", flush=True)
    relay = argparse.Namespace(
        quick=args.quick, rounds=1 if args.quick else 5, responses=4, passthrough=None
    )
    failed = asyncio.run(websocket.run(relay))
    print(
        f"(proxy took {time.monotonic() - started:.0f} s; load average now"
        f" {' '.join(f'{x:.2f}' for x in os.getloadavg())})"
    )
    return 1 if errors or failed else 0


if __name__ == "__main__":
    sys.exit(main())
