"""The gateways as child processes: `lockgate proxy --config FILE` (`routes_config`
writes its routes) and LiteLLM's proxy.

Each starts on a free loopback port, is waited for until it answers, and is stopped (SIGTERM,
then SIGKILL) when its context ends; its output goes to a log file beside its config.
`Metrics` reads the proxy's `/metrics` counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

__all__ = [
    "Metrics",
    "Process",
    "free_port",
    "litellm_proxy",
    "lockgate_proxy",
    "read_metrics",
    "routes_config",
    "stop_on_sigterm",
]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN)$")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Process:
    """A running gateway: its origin (`http://127.0.0.1:PORT`) and its log file."""

    origin: str
    log: Path
    pid: int


@contextlib.asynccontextmanager
async def _child(
    command: Sequence[str],
    port: int,
    ready_path: str,
    log: Path,
    env: Mapping[str, str] | None = None,
    start_timeout: float = 120.0,
) -> AsyncIterator[Process]:
    output = await asyncio.to_thread(log.open, "wb")
    try:
        child = await asyncio.create_subprocess_exec(
            *command,
            stdout=output,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    finally:
        output.close()  # the child holds its own copy
    origin = f"http://127.0.0.1:{port}"
    try:
        await _wait_ready(origin + ready_path, child, log, start_timeout)
        yield Process(origin, log, child.pid)
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(child.wait(), 15)
            except TimeoutError:
                child.kill()
                await child.wait()


async def _wait_ready(url: str, child: asyncio.subprocess.Process, log: Path, limit: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    async with aiohttp.ClientSession() as session:
        while loop.time() < deadline:
            if child.returncode is not None:
                text = await asyncio.to_thread(log.read_text, errors="replace")
                raise RuntimeError(f"the child exited {child.returncode}:\n{text[-2000:]}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as answer:
                    if answer.status == 200:
                        return
            await asyncio.sleep(0.25)
    raise RuntimeError(f"{url} did not answer within {limit:g} s (log: {log})")


def routes_config(port: int, routes: Sequence[tuple[str, str, str]]) -> str:
    """`lockgate proxy`'s YAML on `port`: per (name, upstream, fall-back model) a route
    `/name` to the upstream (retries: 2, max_wait 5 s, idle timeout 2 s) and its twin
    `/name-fallback` (retries: 1, one fall-back to the same upstream asking that model)."""
    pairs = [
        f"""\
  - name: {name}
    prefix: /{name}
    upstream: {upstream}
    idle_timeout: 2
    retries: {{attempts: 2, max_wait: 5}}
  - name: {name}-fallback
    prefix: /{name}-fallback
    upstream: {upstream}
    idle_timeout: 2
    retries: {{attempts: 1, max_wait: 5}}
    fallbacks:
      - {{upstream: {upstream}, model: {fallback_model}}}
"""
        for name, upstream, fallback_model in routes
    ]
    return f"listen: {{host: 127.0.0.1, port: {port}}}\nroutes:\n" + "".join(pairs)


def lockgate_proxy(config: Path, port: int) -> contextlib.AbstractAsyncContextManager[Process]:
    """`lockgate proxy --config CONFIG` from this interpreter's environment."""
    command = [sys.executable, "-m", "lockgate", "proxy", "--config", str(config)]
    return _child(command, port, "/readyz", config.with_suffix(".log"))


def litellm_proxy(
    litellm: Path, config: Path, port: int, master_key: str
) -> contextlib.AbstractAsyncContextManager[Process]:
    """LiteLLM's proxy (`litellm --config CONFIG`) from its own virtualenv (`litellm` is the
    path of its `litellm` command); clients authenticate with `master_key` (a fake, random
    key: LiteLLM refuses to start without one)."""
    command = [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    env = {
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "NO_DOCS": "True",
        "DISABLE_SCHEMA_UPDATE": "True",
        "LITELLM_MASTER_KEY": master_key,
    }
    return _child(command, port, "/health/liveliness", config.with_suffix(".log"), env)


@dataclass(frozen=True, slots=True)
class Metrics:
    """Counter samples by name and labels (`{route="provider"}`)."""

    samples: Mapping[str, float]

    def _selected(self, name: str, labels: Mapping[str, str]) -> Iterator[tuple[str, float]]:
        """(label text, value) of each sample of `name` whose labels include `labels`."""
        for key, value in self.samples.items():
            sample_name, _, label_text = key.partition("{")
            if sample_name == name and all(
                f'{label}="{wanted}"' in label_text for label, wanted in labels.items()
            ):
                yield label_text, value

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`."""
        return sum((value for _, value in self._selected(name, labels)), 0.0)

    def kinds(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """`name`'s samples grouped by one label's value."""
        grouped: dict[str, float] = {}
        pattern = re.compile(label + r'="([^"]*)"')
        for label_text, value in self._selected(name, labels):
            found = pattern.search(label_text)
            if found:
                grouped[found.group(1)] = grouped.get(found.group(1), 0.0) + value
        return grouped

    def minus(self, before: Metrics) -> Metrics:
        return Metrics(
            {key: value - before.samples.get(key, 0.0) for key, value in self.samples.items()}
        )


async def read_metrics(origin: str) -> Metrics:
    async with aiohttp.ClientSession() as session, session.get(origin + "/metrics") as answer:
        text = await answer.text()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        found = _SAMPLE.match(line.strip())
        if found and not line.startswith("#"):
            samples[found.group(1) + (found.group(2) or "")] = float(found.group(3))
    return Metrics(samples)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM stops a harness as Ctrl-C does: its children are stopped on the way out (they
    run in sessions of their own, so no signal to the harness reaches them)."""
    signal.signal(signal.SIGTERM, _interrupt)
