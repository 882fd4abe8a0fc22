"""Helpers for `proxy.py`: the proxies under test, each in a process of its own, and the
readings of that process (CPU time and RSS from /proc); the loopback client that drives
streams through them is `_load.py`.

`python benchmarks/_proxy.py lockgate|passthrough UPSTREAM` runs one proxy in front of
`UPSTREAM` (the benchmark server, `_server.py`), prints its port on stdout and serves until
its stdin closes (the parent exited) or it gets SIGTERM:

- `lockgate`: `lockgate.proxy.server.serving` with its defaults (the gate holds from the
  first tool call on, `/metrics` on), `max_streams` raised to 2,000 for the concurrency
  run, on the event loop `lockgate proxy` picks (`lockgate.proxy.loop_policy`: uvloop's
  where it is installed); `lockgate-nometrics`: the same with the metrics off (config key
  `metrics: false`); `lockgate-otel`: the same with an OpenTelemetry tracer exporting to a
  loopback OTLP sink; `lockgate-asyncio`: the same
  on asyncio's loop;
- `passthrough`: the floor for a Python proxy, on the same loop: an aiohttp server whose
  handler sends the request to the upstream with one pooled `aiohttp.ClientSession` and
  writes each chunk of the upstream body back unchanged as it arrives (`iter_any`), nothing
  parsed; `passthrough-asyncio`: the same on asyncio's loop.

`workers_process(N, UPSTREAM)` runs the real CLI, `lockgate proxy --workers N` (gunicorn,
the `server` extra), its records on stdout going to a temporary file.

LiteLLM's proxy (`litellm --config CFG`, a benchmark-only install, never a project
dependency) runs from `LOCKGATE_BENCH_LITELLM` (the path of its `litellm` command) or
`litellm` on the PATH, with one model per stream shape whose `api_base` is the benchmark
server's stream (`litellm_config`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

import aiohttp

if TYPE_CHECKING:
    from benchmarks._streams import StreamSpec

# The proxies' processes import only what they run (aiohttp; lockgate's proxy): the
# client's helpers (`_common`, with the SDKs) are imported where the client uses them.

HERE = Path(__file__).resolve().parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
LITELLM_ENV = "LOCKGATE_BENCH_LITELLM"
STAMP = b'"content":"'
STAMP_CHARS = 18  # len(_streams.PLACEHOLDER): the paced server's send-time stamp
LATE_SECONDS = 2.0  # a fixed-rate run stops sending this long after its last slot
# A ConverseStream path (the model id's `:` encoded, as boto3 sends it).
BEDROCK_PATH = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"


# --- the proxies' processes ------------------------------------------------------------


async def _serve_passthrough(upstream: str, stop: asyncio.Event) -> None:
    from aiohttp import web

    base = upstream.rstrip("/")
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=60, sock_read=60)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, trust_env=False, auto_decompress=True
    ) as session:

        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            headers = {"content-type": request.headers.get("content-type", "application/json")}
            if "authorization" in request.headers:
                headers["authorization"] = request.headers["authorization"]
            async with session.request(
                request.method, base + request.rel_url.raw_path_qs, data=body, headers=headers
            ) as upstream_response:
                response = web.StreamResponse(
                    status=upstream_response.status,
                    headers={
                        "content-type": upstream_response.headers.get(
                            "content-type", "application/octet-stream"
                        )
                    },
                )
                await response.prepare(request)
                async for chunk in upstream_response.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        server = site._server
        assert server is not None
        print(server.sockets[0].getsockname()[1], flush=True)  # type: ignore[attr-defined]
        try:
            await stop.wait()
        finally:
            await runner.cleanup()


def tracing_wired() -> str | None:
    """None where the tracer can be made (the `otel` extra is installed); else why the OTel
    row is not measured."""
    try:
        importlib.import_module("lockgate.telemetry.otel")
    except ImportError as exc:
        return f"lockgate.telemetry.otel does not import ({exc}; the `otel` extra)"
    return None


def _otel_tracing(endpoint: str) -> Any:
    """The OpenTelemetry tracer the proxy reports to, exporting traces and metrics over
    OTLP/HTTP to `endpoint` (a loopback sink), as `OTEL_*` would configure it."""
    from lockgate.telemetry.config import tracing_from_environment

    return tracing_from_environment(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "lockgate-benchmark",
        }
    )


async def _serve_lockgate(
    upstream: str, stop: asyncio.Event, metrics: bool = True, otlp: str | None = None
) -> None:
    from lockgate.proxy.server import ProxyConfig, serving

    config = ProxyConfig(upstream=upstream, port=0, max_streams=2000, metrics=metrics)
    extra: dict[str, Any] = {} if otlp is None else {"tracing": _otel_tracing(otlp)}
    async with serving(config, **extra) as running:
        print(running.url.rsplit(":", 1)[1], flush=True)
        await stop.wait()


def raise_fd_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 65536)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def _serve(kind: str, upstream: str) -> None:
    raise_fd_limit()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(sys.stdin.fileno(), stop.set)  # stdin closed (or written): stop
    if kind in ("lockgate", "lockgate-asyncio"):
        await _serve_lockgate(upstream, stop)
    elif kind == "lockgate-nometrics":
        await _serve_lockgate(upstream, stop, metrics=False)
    elif kind == "lockgate-otel":
        await _serve_lockgate(upstream, stop, otlp=os.environ["LOCKGATE_BENCH_OTLP"])
    else:
        await _serve_passthrough(upstream, stop)


def uvloop_version() -> str | None:
    """uvloop's version where it is installed (None: it is not); `lockgate proxy` then
    runs on it."""
    from importlib import metadata

    try:
        return metadata.version("uvloop")
    except metadata.PackageNotFoundError:
        return None


@dataclass
class Proxy:
    """A proxy under test, in its own process: where to send each stream, and its pid."""

    name: str
    pid: int
    origin: str
    litellm: bool = False
    models: dict[str, str] = field(default_factory=dict)  # LiteLLM: stream name -> model
    pids: list[int] = field(default_factory=list)  # the process and its descendants

    def url(self, spec: StreamSpec) -> str:
        if self.litellm:
            return f"{self.origin}/v1/chat/completions"
        if spec.protocol == "bedrock":
            return f"{self.origin}/{spec.name}{BEDROCK_PATH}"
        return f"{self.origin}/{spec.name}/v1/chat/completions"

    def body(self, spec: StreamSpec) -> bytes:
        if spec.protocol == "bedrock":
            return bedrock_body()
        whole = spec.shape == "json"
        if not self.litellm:
            return whole_chat_body() if whole else chat_body()
        request = json.loads(whole_chat_body() if whole else chat_body())
        request["model"] = self.models[spec.name]
        return json.dumps(request).encode()

    def __post_init__(self) -> None:
        if self.pid and not self.pids:
            self.pids = family(self.pid)

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def rss_kib(self) -> int:
        return sum(rss_kib(pid) for pid in self.pids)


@cache
def chat_body() -> bytes:
    """lockgate's own Chat request for the benchmark history: the tools, `"stream": true`."""
    from benchmarks._common import request_body

    return request_body("chat")


@cache
def whole_chat_body() -> bytes:
    """The same request for a whole answer: `"stream": false`, no `stream_options`."""
    request = json.loads(chat_body())
    request["stream"] = False
    request.pop("stream_options", None)
    return json.dumps(request).encode()


@cache
def bedrock_body() -> bytes:
    """lockgate's own ConverseStream request for the benchmark history (the model is in the
    path, not the body)."""
    from benchmarks._common import request_body

    request = json.loads(request_body("bedrock"))
    request.pop("model", None)
    return json.dumps(request).encode()


def api_key() -> str:
    from benchmarks._common import KEY

    return KEY


def direct(origin: str) -> Proxy:
    """No proxy: the client reads the benchmark server itself (the latency baseline)."""
    return Proxy("direct", 0, origin)


@contextlib.contextmanager
def proxy_process(kind: str, upstream: str, env: dict[str, str] | None = None) -> Iterator[Proxy]:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "_proxy.py"), kind, upstream],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"the {kind} proxy did not start ({line!r})")
        yield Proxy(kind, process.pid, f"http://127.0.0.1:{line}")
    finally:
        assert process.stdin is not None
        process.stdin.close()
        _reap(process)


@contextlib.contextmanager
def workers_process(workers: int, upstream: str) -> Iterator[Proxy]:
    """`lockgate proxy --workers N` in front of `upstream`, ready once every worker answers
    (its pids: the gunicorn master and its workers)."""
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-workers-") as folder:
        out_path = Path(folder) / "out.jsonl"
        with open(out_path, "wb") as out:
            process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "lockgate", "proxy", "--upstream", upstream),
                    *("--workers", str(workers), "--port", "0", "--max-streams", "2000"),
                    "--json",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=folder,
            )
        try:
            origin = _listening(process, out_path)
            deadline = time.monotonic() + 60
            while len(family(process.pid)) < workers + 1 or not _answers(origin + "/healthz"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{workers} workers did not start")
                time.sleep(0.1)
            yield Proxy(f"{workers} worker{'s' if workers > 1 else ''}", process.pid, origin)
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            _reap(process)


def _listening(process: subprocess.Popen[bytes], out_path: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in out_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("event") == "listening":
                    return str(record["url"])
        if process.poll() is not None:
            break
        time.sleep(0.1)
    tail = out_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"lockgate proxy --workers did not start:\n{tail}")


def litellm_command(python: str | None = None) -> str | None:
    """LiteLLM's `litellm` command, where it is installed: beside `python` (a venv's
    interpreter, `--litellm-python`), else `LOCKGATE_BENCH_LITELLM`, else on the PATH;
    None when it is not."""
    if python:
        command = Path(python).parent / "litellm"
        return str(command) if os.access(command, os.X_OK) else None
    given = os.environ.get(LITELLM_ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which("litellm")


def litellm_config(upstream: str, specs: list[StreamSpec]) -> tuple[str, dict[str, str]]:
    """LiteLLM's config (YAML, which JSON is): one model per stream, its `api_base` that
    stream's base URL on the benchmark server."""
    models = {spec.name: f"bench-{number}" for number, spec in enumerate(specs)}
    config = {
        "model_list": [
            {
                "model_name": models[spec.name],
                "litellm_params": {
                    "model": "openai/bench-model",
                    "api_base": f"{upstream}/{spec.name}/v1",
                    "api_key": api_key(),
                },
            }
            for spec in specs
        ],
        "litellm_settings": {"drop_params": True, "telemetry": False},
    }
    return json.dumps(config, indent=1), models


@contextlib.contextmanager
def litellm_process(command: str, upstream: str, specs: list[StreamSpec]) -> Iterator[Proxy]:
    """LiteLLM's proxy with no master key (its cheapest path: no key check, no database),
    its cost map local, its log in a temporary file (shown if it does not start)."""
    text, models = litellm_config(upstream, specs)
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-litellm-") as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(text)
        log_path = Path(folder) / "litellm.log"
        port = _free_port()
        env = dict(os.environ)
        env.update(
            LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY="true",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            LITELLM_TELEMETRY="False",
            LITELLM_LOG="ERROR",
            NO_PROXY="*",
        )
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=folder,
                env=env,
                start_new_session=True,
            )
        try:
            origin = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while not _answers(origin + "/health/liveliness"):
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"LiteLLM did not start:\n{tail}")
                time.sleep(0.25)
            yield Proxy("litellm", process.pid, origin, litellm=True, models=models)
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            _reap(process)


def litellm_version(command: str) -> str:
    python = Path(command).parent / "python"
    if not python.exists():
        return "?"
    result = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() or "?"


def _reap(process: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status) == 200
    except (OSError, urllib.error.URLError):
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --- /proc readings --------------------------------------------------------------------


def family(pid: int) -> list[int]:
    """`pid` and its descendants (LiteLLM may run workers of its own)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, ()))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process (all its threads, the dead ones too) and of its
    waited-for children."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # fields[0] is the state (field 3 of stat(5)); utime, stime, cutime, cstime: 14-17
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE_KIB
    except OSError:
        return 0


def _main() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        if sys.argv[1].endswith("-asyncio"):
            asyncio.run(_serve(sys.argv[1], sys.argv[2]))
        else:  # the loop `lockgate proxy` runs on
            from lockgate.proxy import loop_policy

            loop_policy.run(_serve(sys.argv[1], sys.argv[2]))


if __name__ == "__main__":
    profile_to = os.environ.get("LOCKGATE_BENCH_PROFILE")  # `profile_gate.py --wire`
    if profile_to:
        import cProfile

        profiler = cProfile.Profile(time.process_time)  # CPU time, as the benchmark counts
        profiler.runcall(_main)
        profiler.dump_stats(profile_to)
    else:
        _main()
