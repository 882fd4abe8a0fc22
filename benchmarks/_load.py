"""The loopback client of `proxy.py`: it drives Chat Completions (and Bedrock ConverseStream)
streams through a proxy under test (`_proxy.Proxy`) and reads what the client saw: frames,
failures, each stamped delta's lag, the proxy process's CPU time and peak RSS over a batch
(`drive`, `saturate`), and whole answers sent at a fixed rate (`fixed_rate`)."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

import aiohttp

if TYPE_CHECKING:
    from benchmarks._streams import StreamSpec

# The proxies' processes import only what they run (aiohttp; lockgate's proxy): the
# client's helpers (`_common`, with the SDKs) are imported where the client uses them.


from benchmarks._proxy import (
    LATE_SECONDS,
    STAMP,
    STAMP_CHARS,
    Proxy,
    api_key,
)


@dataclass
class Outcome:
    """What the client saw of a batch of streams."""

    streams: int
    frames: int = 0  # SSE data lines received
    failures: list[str] = field(default_factory=list)
    lags: list[tuple[float, float]] = field(default_factory=list)  # (arrival, lag) s
    firsts: list[float] = field(default_factory=list)  # each stream's first stamped delta
    seconds: float = 0.0
    peak_rss_kib: int = 0
    cpu_seconds: float = 0.0  # the proxy's, over the batch

    def window_lags(self) -> list[float]:
        """The lags of the deltas that arrived once every stream was streaming (the opening
        burst left out)."""
        if len(self.firsts) < self.streams:
            return [lag for _, lag in self.lags]
        opened = max(self.firsts)
        return [lag for arrival, lag in self.lags if arrival >= opened]


def client_session(streams: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=False),
        timeout=aiohttp.ClientTimeout(total=300, sock_connect=60, sock_read=60),
        trust_env=False,
    )


async def _one_eventstream(
    session: aiohttp.ClientSession,
    proxy: Proxy,
    spec: StreamSpec,
    outcome: Outcome,
    expect_text: int,
) -> None:
    """One ConverseStream stream: its messages decoded as they arrive (each CRC checked),
    complete when `metadata` ended it after `messageStop`, with every text delta."""
    from lockgate.eventstream import EventStreamDecoder

    headers = {"content-type": "application/json", "authorization": f"Bearer {api_key()}"}
    decoder = EventStreamDecoder()
    names: list[str | None] = []
    try:
        async with session.post(proxy.url(spec), data=proxy.body(spec), headers=headers) as resp:
            if resp.status != 200:
                body = (await resp.read())[:200]
                outcome.failures.append(f"HTTP {resp.status}: {body!r}")
                return
            async for chunk in resp.content.iter_any():
                for message in decoder.feed(chunk):
                    names.append(message.string(":event-type"))
            decoder.finish()
    except Exception as exc:
        outcome.failures.append(f"{type(exc).__name__}: {exc}")
        return
    outcome.frames += len(names)
    text = sum(1 for name in names if name == "contentBlockDelta")
    if names[-2:] != ["messageStop", "metadata"]:
        outcome.failures.append(f"the stream ended with {names[-2:]}, not messageStop, metadata")
    elif text < expect_text:
        outcome.failures.append(f"{text} of {expect_text} deltas")


async def _one(
    session: aiohttp.ClientSession,
    proxy: Proxy,
    spec: StreamSpec,
    outcome: Outcome,
    expect_text: int,
) -> None:
    if spec.protocol == "bedrock":
        await _one_eventstream(session, proxy, spec, outcome, expect_text)
        return
    headers = {"content-type": "application/json", "authorization": f"Bearer {api_key()}"}
    text = 0
    done = False
    lags_seen = False
    lags = outcome.lags
    try:
        async with session.post(proxy.url(spec), data=proxy.body(spec), headers=headers) as resp:
            if resp.status != 200:
                body = (await resp.read())[:200]
                outcome.failures.append(f"HTTP {resp.status}: {body!r}")
                return
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                now = time.monotonic()
                outcome.frames += 1
                if line.startswith(b"data: [DONE]"):
                    done = True
                    continue
                at = line.find(STAMP)
                if at < 0:
                    continue
                start = at + len(STAMP)
                if line[start : start + 1] == b'"':
                    continue  # the opening frame's empty content
                text += 1
                value = line[start : start + STAMP_CHARS]
                end = start + STAMP_CHARS
                if value[:1].isdigit() and line[end : end + 1] == b'"':
                    if not lags_seen:
                        lags_seen = True
                        outcome.firsts.append(now)
                    lags.append((now, now - float(value)))
    except Exception as exc:
        outcome.failures.append(f"{type(exc).__name__}: {exc}")
        return
    if not done:
        outcome.failures.append("the stream ended without [DONE]")
    elif text < expect_text:
        outcome.failures.append(f"{text} of {expect_text} text deltas")


async def drive(
    session: aiohttp.ClientSession,
    proxy: Proxy,
    spec: StreamSpec,
    streams: int,
    concurrent: bool = True,
    watch_rss: bool = False,
) -> Outcome:
    """`streams` requests of `spec` through `proxy`, all at once (or one after another);
    with `watch_rss`, the proxy's peak RSS while they run (sampled every 20 ms)."""
    outcome = Outcome(streams)
    expect = spec.text
    sampling = True

    async def sample() -> None:
        while sampling:
            outcome.peak_rss_kib = max(outcome.peak_rss_kib, proxy.rss_kib())
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample()) if watch_rss else None
    started = time.monotonic()
    cpu_before = proxy.cpu_seconds()
    if concurrent:
        await asyncio.gather(*(_one(session, proxy, spec, outcome, expect) for _ in range(streams)))
    else:
        for _ in range(streams):
            await _one(session, proxy, spec, outcome, expect)
    outcome.seconds = time.monotonic() - started
    outcome.cpu_seconds = proxy.cpu_seconds() - cpu_before
    sampling = False
    if sampler is not None:
        await sampler
    return outcome


async def saturate(
    session: aiohttp.ClientSession,
    proxy: Proxy,
    spec: StreamSpec,
    streams: int,
    warmup: float,
    seconds: float,
) -> tuple[float, float, Outcome]:
    """`streams` clients, each sending `spec` again as soon as its stream ended, for
    `warmup` + `seconds`: the events per second the clients received over the last
    `seconds`, and the proxy's CPU seconds over them."""
    outcome = Outcome(streams)
    running = True
    headers = {"content-type": "application/json", "authorization": f"Bearer {api_key()}"}
    url, body = proxy.url(spec), proxy.body(spec)

    async def one() -> None:
        """One stream, its SSE events counted as they arrive (no line parsing: the client
        stays cheap beside the proxy)."""
        async with session.post(url, data=body, headers=headers) as response:
            if response.status != 200:
                outcome.failures.append(f"HTTP {response.status}")
                return
            tail = b""
            async for chunk in response.content.iter_any():
                outcome.frames += chunk.count(b"\n\n")
                tail = (tail + chunk)[-16:]
            if not tail.endswith(b"data: [DONE]\n\n"):
                outcome.failures.append("the stream ended without [DONE]")

    async def client() -> None:
        while running:
            await one()

    tasks = [asyncio.create_task(client()) for _ in range(streams)]
    try:
        await asyncio.sleep(warmup)
        frames, cpu, started = outcome.frames, proxy.cpu_seconds(), time.monotonic()
        await asyncio.sleep(seconds)
        rate = (outcome.frames - frames) / (time.monotonic() - started)
        spent = proxy.cpu_seconds() - cpu
    finally:
        running = False
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return rate, spent, outcome


@dataclass
class Paced:
    """What a fixed-rate run of whole (non-streaming) requests saw."""

    latencies: list[float] = field(default_factory=list)  # s, from each request's slot
    failures: list[str] = field(default_factory=list)  # the first few
    failed: int = 0
    missed: int = 0  # slots not sent: the client was more than LATE_SECONDS behind
    sent: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the proxy's


async def fixed_rate(
    proxy: Proxy, spec: StreamSpec, rate: float, connections: int, seconds: float
) -> Paced:
    """Whole requests at `rate` per second on an absolute schedule over `connections`
    kept-alive connections, for `seconds` (after 0.3 s of the same to open them). Each
    latency counts from the request's slot in the schedule, not from when a connection was
    free to send it (a proxy that falls behind shows its queue); the slots still unsent
    `LATE_SECONDS` after the last one are counted as missed, not sent."""
    outcome = Paced()
    headers = {"content-type": "application/json", "authorization": f"Bearer {api_key()}"}
    url, body = proxy.url(spec), proxy.body(spec)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=60),
        trust_env=False,
    ) as session:

        async def run(duration: float, record: bool) -> None:
            start = time.monotonic() + 0.01
            cutoff = start + duration + LATE_SECONDS
            total = int(duration * rate)
            slots = iter(range(total))

            async def worker() -> None:
                for number in slots:
                    slot = start + number / rate
                    if time.monotonic() > cutoff:  # too far behind: not sent, counted
                        if record:
                            outcome.missed += 1
                        continue
                    delay = slot - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    problem = ""
                    try:
                        async with session.post(url, data=body, headers=headers) as response:
                            await response.read()
                            if response.status != 200:
                                problem = f"HTTP {response.status}"
                    except Exception as exc:
                        problem = f"{type(exc).__name__}: {exc}"
                    if not record:
                        continue
                    outcome.sent += 1
                    if problem:
                        outcome.failed += 1
                        if len(outcome.failures) < 3:
                            outcome.failures.append(problem)
                    else:
                        outcome.latencies.append(time.monotonic() - slot)

            await asyncio.gather(*(worker() for _ in range(connections)))

        await run(0.3, record=False)
        cpu = proxy.cpu_seconds()
        started = time.monotonic()
        await run(seconds, record=True)
        outcome.seconds = time.monotonic() - started
        outcome.cpu_seconds = proxy.cpu_seconds() - cpu
    return outcome


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
