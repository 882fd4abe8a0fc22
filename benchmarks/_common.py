"""Shared benchmark helpers: the loopback server subprocess, CPU timing, client factories
(lockgate, the SDKs' own clients, a naive httpx client), memory readings and the
MET / NOT MET report.

CPU is `time.process_time()` of this (the client) process only; the server runs in its
own process (`_server.py`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import openai

from benchmarks._streams import StreamSpec
from lockgate.client import StreamingModelClient
from lockgate.codec import StreamDecoder
from lockgate.conversation import Message
from lockgate.events import Observer, ignore_event
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import Decision, ResponseGate
from lockgate.providers import PROVIDERS, CodecOptions
from lockgate.sse import ServerSentEvent
from lockgate.transport import HttpBackend, Transport, TransportOptions

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "sk-benchmark-not-a-secret"
MODEL = "bench-model"
HISTORY = (Message("user", "Fix the bug in calculator.py."),)


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 65536)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


@contextlib.contextmanager
def server() -> Iterator[str]:
    """The benchmark server in its own process; yields its origin (`http://127.0.0.1:P`)."""
    process = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "_server.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"the benchmark server did not start ({line!r})")
        yield f"http://127.0.0.1:{line}"
    finally:
        assert process.stdin is not None
        process.stdin.close()  # the server stops when its stdin closes
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def base_url(origin: str, spec: StreamSpec) -> str:
    """The base URL the protocol's SDK takes for the server's stream `spec` (as the lab's
    renderer gives it: OpenAI's `…/v1`, Anthropic's host root)."""
    return PROVIDERS[spec.protocol].render().base_url(f"{origin}/{spec.name}")


def sdk_path(protocol: str) -> str:
    """The request path relative to the SDK's base URL (`/responses`, `/v1/messages`)."""
    renderer = PROVIDERS[protocol].render()
    return renderer.path.removeprefix(urllib.parse.urlsplit(renderer.base_url("")).path)


def endpoint(origin: str, spec: StreamSpec) -> str:
    return base_url(origin, spec) + sdk_path(spec.protocol)


# --- lockgate ---------------------------------------------------------------------------


def lockgate_transport(
    protocol: str, url: str, backend: HttpBackend = "aiohttp", timeout: float = 60.0
) -> Transport:
    options = TransportOptions(
        api_key=KEY, base_url=url, trust_env=False, backend=backend, timeout=timeout
    )
    return PROVIDERS[protocol].make_transport(options)


def lockgate_client(
    protocol: str,
    transport: Transport,
    observer: Observer = ignore_event,
    idle_timeout: float = 60.0,
) -> StreamingModelClient:
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model=MODEL))
    return StreamingModelClient(codec, transport, observer=observer, idle_timeout=idle_timeout)


def request_body(protocol: str) -> bytes:
    """The body lockgate sends for the benchmark history (for clients that send raw bytes)."""
    from lockgate.http import encode_body

    codec = PROVIDERS[protocol].make_codec(CodecOptions(model=MODEL))
    return encode_body(codec.encode(HISTORY, ALL_TOOLS))


# --- the SDKs' own clients --------------------------------------------------------------


def sdk_client(protocol: str, url: str, backend: HttpBackend) -> Any:
    """The protocol's official SDK client with its aiohttp-backed or default (httpx2)
    HTTP client, no retries, no proxies."""
    if protocol == "anthropic":
        http: httpx2.AsyncClient = (
            anthropic.DefaultAioHttpClient(trust_env=False)
            if backend == "aiohttp"
            else anthropic.DefaultAsyncHttpxClient(trust_env=False)
        )
        return anthropic.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0, http_client=http)
    http = (
        openai.DefaultAioHttpClient(trust_env=False)
        if backend == "aiohttp"
        else openai.DefaultAsyncHttpxClient(trust_env=False)
    )
    return openai.AsyncOpenAI(api_key=KEY, base_url=url, max_retries=0, http_client=http)


async def sdk_raw_post(client: Any, protocol: str, body: bytes) -> httpx2.Response:
    """The SDK's public raw POST: its request path, the body sent as given, the unread
    response back."""
    stream_cls = (
        anthropic.AsyncStream[object] if protocol == "anthropic" else openai.AsyncStream[object]
    )
    response: httpx2.Response = await client.post(
        sdk_path(protocol),
        cast_to=httpx2.Response,
        content=body,
        stream=True,
        stream_cls=stream_cls,
    )
    return response


# --- measurement ------------------------------------------------------------------------


async def cpu_of(run: Callable[[], Awaitable[object]]) -> float:
    """CPU seconds (this process) of one awaited run."""
    started = time.process_time()
    await run()
    return time.process_time() - started


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rss_kib() -> int:
    """Current resident set size (KiB), from /proc."""
    return _status_field("VmRSS")


def peak_rss_kib() -> int:
    """Peak resident set size of this process so far (KiB)."""
    return _status_field("VmHWM")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0); False if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def _status_field(name: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{name} not in /proc/self/status")


# --- lockgate's pipeline without the client -----------------------------------------------


def advance(
    sse_events: list[ServerSentEvent],
    decoder: StreamDecoder,
    gate: ResponseGate,
    decision: Decision | None,
) -> Decision | None:
    """What the client does with each read's SSE events (`client._advance`, without its
    deadline checks): decode each, hand every normalized event to the gate."""
    for sse_event in sse_events:
        for event in decoder.decode(sse_event):
            result = gate.accept(event)
            if result is not None:
                decision = result
    return decision


# --- the report -------------------------------------------------------------------------


@dataclass
class Report:
    """Collects target checks; prints one line per check and a summary."""

    title: str
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, name: str, met: bool, detail: str) -> bool:
        self.checks.append((name, met, detail))
        print(f"  [{'MET' if met else 'NOT MET'}] {name}: {detail}", flush=True)
        return met

    def summary(self) -> None:
        met = sum(1 for _, ok, _ in self.checks if ok)
        print(f"{self.title}: {met}/{len(self.checks)} targets met", flush=True)
        for name, ok, detail in self.checks:
            print(f"  {'MET    ' if ok else 'NOT MET'}  {name}: {detail}")


def heading(text: str) -> None:
    print(f"\n== {text} ==", flush=True)
