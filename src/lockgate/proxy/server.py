"""`lockgate proxy`'s server: the gate on the wire, between any client and its providers.

An aiohttp server, the HTTP listener: each request (but the reserved paths, answered here) is
one `ProxyExchange` (`exchange.py`) with its `Flow` (`flow.py`), taken once through the
stages in the order `pipeline.run` writes: admitted or refused (`admit.py`), sent upstream
and its answer sorted, gated or judged (`attempt.py`), every answer, the proxy's own too,
written by `respond.py`; the proxy's hooks (the log, the metrics) and its tracer observe it.
The stages get what they need of the process in `admit.Shared`, never through the server:

- **Reserved paths**, never forwarded: `GET /healthz` (200 while the process serves),
  `GET /readyz` (200 when the routes are configured and the proxy is not stopping, 503
  while it drains) and `GET /metrics` (Prometheus' text format, `metrics.py`; it needs the
  client token like every other request when one is set).
- **Routes** (`ProxySettings.routes`): the longest prefix that matches the request's plain
  path (`routes.plain_path`: `%69` is `i`) serves it, the prefix removed; a path no route
  serves is 404. Each route has its upstream(s), the key it holds for them, how its answers
  are gated and retried.
- **Admission** (`admit.py`, in this order): stopping (503), a path the upstream could route
  differently (400), the client token (401, `access.py`), a WebSocket upgrade on a gated
  path not relayed (426: `websocket: refuse`, or no Responses path; Codex then falls back to
  HTTP at once; on a Responses path it is relayed, each response gated: `relay.py`,
  `docs/websocket.md`), a protocol request
  the gate cannot judge (400: Gemini without `alt=sse`), a held key's rules (403: a browser,
  a rebound `Host`, a path that is no model request), resuming a Responses stream (400: the
  request that named its tools was never seen), the limit of requests at once
  (`max_streams`: 503 with `retry-after`).
- **Bounds**: a request head must arrive within `head_timeout` of the connection or of the
  previous answer on it (else the connection is closed); request bodies
  (`max_request_bytes`, 413 beyond) and their JSON (1,000,000 values, 256 levels);
  aiohttp's request-head limits (8190-byte lines and fields, 128 headers; a head it cannot
  parse gets a JSON 400 and a record); silence, a deadline per gated response, error bodies
  capped, the bytes every held stream may hold at once (`max_held_bytes`). At the
  file-descriptor limit, new connections wait (accepting resumes as descriptors free up)
  and one line says so, at most every 10 s.
- **Stopping** (`RunningProxy.stop`, or the runner's cleanup under gunicorn): first the
  drain, still listening: `/readyz` answers 503 and every new request 503 with
  `connection: close`, while the requests in flight may finish within the grace period;
  then no new connection is accepted, and what is still in flight is cut (recorded as
  `cut`). A relayed WebSocket closes (1001) when idle, else after its response in flight.

`serving` runs one in-process; `app_factory` builds one from the environment for gunicorn's
aiohttp worker (`environment.py`). The proxy keeps no state between requests: several
processes can stand behind one load balancer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from ..cassette.recorder import CassetteRecorder
from ..credentials import Redactor
from ..grammar import prepare as prepare_grammars
from ..telemetry import NO_TRACING, Tracing
from ..telemetry.config import tracing_from_environment
from . import pipeline
from .access import TOKEN_HEADER, Access, host_name_problem
from .admit import MAX_REQUEST_DEPTH, MAX_REQUEST_VALUES, Shared
from .admit import MAX_SCHEMA_NOTES as MAX_SCHEMA_NOTES
from .admit import PARSE_INLINE_BYTES as PARSE_INLINE_BYTES
from .admit import _request_object as _request_object
from .admit import _upgrades as _upgrades
from .config import (
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_MAX_HELD_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_STREAMS,
    ConfigError,
    ProxyConfig,
    ProxySettings,
    upstream_problem,
)
from .engine import HeldBudget
from .environment import config_from_environment, startup_settings
from .exchange import ProxyExchange
from .flow import Flow, FlowHook, LogHook, Outcome, ProxyRecord, notify_done
from .respond import malformed, reserved
from .routes import PathProblem, plain_path
from .upstream import RouteRuntime as RouteRuntime
from .upstream import UpstreamRuntime as UpstreamRuntime
from .upstream import open_session, route_runtime

__all__ = [
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_MAX_HELD_BYTES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_STREAMS",
    "MAX_REQUEST_DEPTH",
    "MAX_REQUEST_VALUES",
    "RESERVED_PATHS",
    "TOKEN_HEADER",
    "Outcome",
    "ProxyConfig",
    "ProxyRecord",
    "ProxyServer",
    "RunningProxy",
    "app_factory",
    "build_app",
    "config_from_environment",
    "host_name_problem",
    "serving",
    "upstream_problem",
]

ACCEPT_WARNING_SECONDS = 10.0  # at most one line this often about connections not accepted
APP_LOAD_ERROR = 4  # gunicorn's exit code for an application that cannot load: it stops
# The proxy's own paths: never forwarded.
RESERVED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

_log = logging.getLogger("lockgate.proxy")


class RunningProxy:
    """A proxy that is serving: its `url`, how many requests it has answered and holds
    now, and `stop`."""

    def __init__(self, url: str, state: ProxyServer, runner: web.AppRunner) -> None:
        self.url = url
        self._state = state
        self._runner = runner
        self._stopped = False

    @property
    def requests(self) -> int:
        return self._state.answered

    @property
    def active(self) -> int:
        return self._state.active

    @property
    def recorder(self) -> CassetteRecorder | None:
        """Where exchanges are recorded (`ProxySettings.record`), or None."""
        return self._state.recorder

    @property
    def server(self) -> ProxyServer:
        return self._state

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting (new connections; a request on an open one gets 503), let the
        requests in flight end within `grace` seconds (default: the settings'), then cut
        the rest and close the upstream session. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._state.stopping = True
        if grace is not None:
            self._state.grace = max(0.0, grace)
        await self._runner.cleanup()  # sites, idle connections, then `wind_down`


def _process(
    settings: ProxySettings,
    warn: Callable[[str], None],
    log: Callable[[ProxyRecord], None] | None,
    hooks: Sequence[FlowHook],
) -> tuple[Shared, tuple[str, ...], list[FlowHook], Callable[[], tuple[bytes, str]] | None]:
    """One process's state, secrets read once: what the stages share, the secrets, the
    hooks that see every flow (the log first, the metrics last) and `GET /metrics`' page."""
    secrets: list[str] = []
    routes = tuple(route_runtime(route, secrets) for route in settings.routes)
    token = settings.client_token.read() if settings.client_token is not None else None
    if token is not None:
        secrets.append(token)
    redact = Redactor(secrets)
    access = Access(
        token=token,
        holds_key=any(
            upstream.holds_credentials for route in routes for upstream in route.upstreams
        ),
        allow_hosts=settings.allow_hosts,
        key_on_any_path=settings.key_on_any_path,
    )
    held = HeldBudget(settings.max_held_bytes)
    prepare_grammars()  # llguidance loaded now, not on the loop at the first grammar
    seen: list[FlowHook] = list(hooks)
    if log is not None:
        seen.insert(0, LogHook(log, redact))
    metrics: Callable[[], tuple[bytes, str]] | None = None
    if settings.metrics:
        from .metrics import ProxyMetrics

        series = ProxyMetrics()
        series.set_held_limit(held.limit)
        seen.append(series)
        metrics = series.render
        held.on_change = series.held_bytes
    recorder = (
        CassetteRecorder(settings.record, secrets=[*secrets, *settings.redact])
        if settings.record is not None
        else None
    )
    shared = Shared(settings, routes, access, held, redact, recorder, warn)
    return shared, tuple(secrets), seen, metrics


class _AcceptWatch:
    """The listening socket's failures to accept (at the file-descriptor limit; asyncio
    tries again every second): one line says so, at most every 10 s, and one when accepting
    resumes."""

    __slots__ = ("_failing", "_failures", "_warn", "_warned_at")

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._failing = False
        self._failures = 0  # since the last line said so
        self._warned_at: float | None = None

    def failed(self, exc: OSError, now: float) -> None:
        self._failing = True
        self._failures += 1
        if self._warned_at is not None and now - self._warned_at < ACCEPT_WARNING_SECONDS:
            return
        self._warned_at = now
        name = errno.errorcode.get(exc.errno or 0, "error")
        again = self._failures - 1
        since = f"; {again} more since the last line" if again else ""
        self._failures = 0
        self._warn(
            f"lockgate proxy: cannot accept new connections: {exc.strerror or name} ({name}); "
            f"they wait and are accepted as descriptors free up{since}"
        )

    def accepted(self) -> None:
        """A connection was accepted: after failures, one line says accepting resumed."""
        if self._failing:
            self._failing = False
            self._failures = 0
            self._warned_at = None
            self._warn("lockgate proxy: accepting connections again")


class ProxyServer:
    """The server's state: its settings (secrets read once), the upstream session, the
    hooks, requests in flight; `handle` answers one request."""

    def __init__(
        self,
        settings: ProxySettings | ProxyConfig,
        log: Callable[[ProxyRecord], None] | None = None,
        warn: Callable[[str], None] | None = None,
        hooks: Sequence[FlowHook] = (),
        tracing: Tracing = NO_TRACING,
    ) -> None:
        if isinstance(settings, ProxyConfig):
            settings = settings.settings()
        self.settings = settings
        self.warn = warn or _log.warning
        # What the stages need of this process (they never reach back into the server).
        shared, self.secrets, self.hooks, self.metrics = _process(settings, self.warn, log, hooks)
        self.shared = shared
        self.routes = shared.routes
        self.redact = shared.redact
        self.access = shared.access
        self.held = shared.held  # shared by every gated stream
        self.unusable_schemas = shared.unusable_schemas  # (tool, problem) said once
        self.recorder = shared.recorder
        self.accepts = _AcceptWatch(self.warn)
        shared.tracing = tracing
        shared.grace = settings.grace_seconds
        from .metrics import ProxyMetrics

        # the series that says whether this process is ready (`/metrics`), if any
        self.series = next((h for h in self.hooks if isinstance(h, ProxyMetrics)), None)
        self._started = False
        self.drain_until: float | None = None  # when the drain's grace ends (loop time)

    # --- in flight (kept in `Shared`: the pipeline counts, admission reads) ---------------

    @property
    def stopping(self) -> bool:
        return self.shared.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self.shared.stopping = value
        self._readiness_changed()

    @property
    def started(self) -> bool:
        """The upstream session is open (the application is running)."""
        return self._started

    @started.setter
    def started(self, value: bool) -> None:
        self._started = value
        self._readiness_changed()

    def _readiness_changed(self) -> None:
        if self.series is not None:
            self.series.set_ready(self.ready)

    @property
    def grace(self) -> float:
        return self.shared.grace

    @grace.setter
    def grace(self, value: float) -> None:
        self.shared.grace = value

    @property
    def cutting(self) -> bool:
        return self.shared.cutting

    @property
    def active(self) -> int:
        """The requests admitted and not ended."""
        return self.shared.active

    @property
    def answered(self) -> int:
        """The requests answered (a reserved path's not counted)."""
        return self.shared.answered

    @property
    def tasks(self) -> set[asyncio.Task[Any]]:
        """The tasks of the requests in flight."""
        return self.shared.tasks

    @property
    def session(self) -> aiohttp.ClientSession | None:
        """The upstream session, open while the application runs."""
        return self.shared.session

    @property
    def parser(self) -> concurrent.futures.ThreadPoolExecutor | None:
        """The pool that parses large request bodies, open while the application runs."""
        return self.shared.parser

    # --- the application ---------------------------------------------------------------

    async def session_context(self, app: web.Application) -> AsyncIterator[None]:
        longest = max(route.settings.gating.idle_timeout for route in self.routes)
        session = self.shared.session = open_session(self.settings.max_streams, longest)
        # One parse of a large request body at a time: its memory is bounded once.
        parser = concurrent.futures.ThreadPoolExecutor(1, "lockgate-request-parse")
        self.shared.parser = parser
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()

        def exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            accepting = context.get("message") == "socket.accept() out of system resource"
            if accepting and isinstance(exc, OSError):  # asyncio tries again in 1 s
                self.accepts.failed(exc, loop.time())
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(exception_handler)
        self.started = True
        try:
            yield
        finally:
            self.started = False
            loop.set_exception_handler(previous)
            parser.shutdown(wait=False, cancel_futures=True)
            await session.close()
            close = getattr(self.shared.tracing, "close", None)
            if close is not None:  # the tracer flushes what is pending (off the loop)
                with contextlib.suppress(Exception):
                    await loop.run_in_executor(None, close)

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_request_bytes)
        app.cleanup_ctx.append(self.session_context)
        app.on_shutdown.append(self.wind_down)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def runner(self) -> ProxyRunner:
        """The application's runner: no access log (each request is a record), the head
        timeout (aiohttp closes a connection whose next head has not arrived by then),
        handlers cancelled when their client leaves."""
        return ProxyRunner(
            self,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=1.0,
            keepalive_timeout=self.settings.head_timeout,
        )

    async def drain(self) -> None:
        """Draining, before the listening sockets close (`ProxyRunner.cleanup`): `/readyz`
        answers 503 and a new request 503 (`connection: close`), on a new connection too,
        so that a load balancer's check reads it; the requests in flight may end within the
        grace period. Once."""
        if self.drain_until is not None:
            return
        self.stopping = True
        self.drain_until = asyncio.get_running_loop().time() + self.grace
        for socket in list(self.shared.relays):  # relayed WebSockets close when idle
            with contextlib.suppress(Exception):
                socket.drain()
        pending = set(self.tasks)
        if pending and self.grace > 0:
            await asyncio.wait(pending, timeout=self.grace)

    async def wind_down(self, app: web.Application) -> None:
        """Stopping (after the drain, the listening sockets and idle connections closed):
        a request on an open connection gets 503; those in flight may end within what is
        left of the grace period; then the rest are cut."""
        self.stopping = True
        for socket in list(self.shared.relays):
            with contextlib.suppress(Exception):
                socket.drain()
        loop = asyncio.get_running_loop()
        left = self.grace
        if self.drain_until is not None:
            left = max(0.0, self.drain_until - loop.time())
        pending = set(self.tasks)
        if pending and left > 0:
            await asyncio.wait(pending, timeout=left)
        if self.tasks:
            self.shared.cutting = True
            for task in self.tasks:
                task.cancel()
            await asyncio.wait(set(self.tasks), timeout=5)

    @property
    def ready(self) -> bool:
        """The routes are configured, the upstream session is open, it is not stopping."""
        return self.started and not self.stopping and bool(self.routes)

    # --- one request -----------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """One request: a reserved path answered here, any other as one `ProxyExchange`
        through the stages (`pipeline.run`)."""
        raw_path = request.rel_url.raw_path
        try:
            path = plain_path(raw_path)
            path_problem: str | None = None
        except PathProblem as exc:
            path, path_problem = raw_path, str(exc)
        if path_problem is None and path in RESERVED_PATHS:
            return self.handle_reserved(request, path)
        flow = Flow(request.method, path, None, time.monotonic())
        exchange = ProxyExchange(request, flow, raw_path, path_problem)
        return await pipeline.run(exchange, self.shared, self.hooks)

    def handle_reserved(self, request: web.Request, path: str) -> web.Response:
        """The proxy's own paths: health, readiness, metrics (never forwarded)."""

        def authorized() -> bool:
            query = {name: value for name, value in request.rel_url.query.items()}
            return self.access.authorized(request.headers, query)

        return reserved(
            request,
            path,
            ready=self.ready,
            stopping=self.stopping,
            routes=len(self.routes),
            authorized=authorized,
            metrics=self.metrics,
        )

    def malformed(
        self, request: BaseRequest, status: int, exc: BaseException | None, message: str | None
    ) -> web.Response:
        """aiohttp's answer to a request it could not parse (or, never expected, a handler
        that failed): the proxy's JSON error (`respond.malformed`), and a record."""
        flow = Flow("-", "-", None, time.monotonic())
        response = malformed(flow, status, exc, message)
        flow.ended = time.monotonic()
        self.shared.answered += 1
        notify_done(self.hooks, flow)
        return response


# --- aiohttp's server, with the proxy's answer to a request it cannot parse ------------------


class _ProxyRequestHandler(RequestHandler):
    """aiohttp's connection handler; a request its parser rejects gets the proxy's JSON
    error and a record (aiohttp's own: a plain-text 400 and a logged traceback)."""

    def __init__(self, manager: web.Server, *, proxy: ProxyServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._lockgate = proxy

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: an answer already began
            raise ConnectionError("the response was already being sent")
        return self._lockgate.malformed(request, status, exc, message)


class _ProxyHTTPServer(web.Server):
    """aiohttp's server, making `_ProxyRequestHandler`s; each connection accepted tells the
    proxy (after accept failures, one line says accepting resumed)."""

    def __init__(self, proxy: ProxyServer, made: web.Server) -> None:
        super().__init__(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=asyncio.get_running_loop(),
            **made._kwargs,
        )
        self._lockgate = proxy

    def __call__(self) -> RequestHandler:
        self._lockgate.accepts.accepted()
        return _ProxyRequestHandler(
            self, proxy=self._lockgate, loop=asyncio.get_running_loop(), **self._kwargs
        )


class ProxyRunner(web.AppRunner):
    """The proxy's application runner (in-process and under gunicorn's aiohttp worker,
    which uses a runner the factory returns as it is)."""

    def __init__(self, proxy: ProxyServer, **kwargs: Any) -> None:
        super().__init__(proxy.application(), **kwargs)
        self.proxy = proxy

    async def cleanup(self) -> None:
        """Drain while still listening (`ProxyServer.drain`: `/readyz` is 503 to a new
        connection), then aiohttp's own: the sockets close, idle connections close, the
        rest of the grace period, the cut."""
        if self.server is not None and self.proxy.started:
            await self.proxy.drain()
        await super().cleanup()

    async def _make_server(self) -> web.Server:
        return _ProxyHTTPServer(self.proxy, await super()._make_server())


# --- running it ------------------------------------------------------------------------------


def build_app(
    config: ProxySettings | ProxyConfig, log: Callable[[ProxyRecord], None] | None = None
) -> web.Application:
    """The aiohttp application of one proxy (its upstream session opens with the app). Run
    it with its own runner (`serving`, `app_factory`) for the head timeout and the proxy's
    answer to a request aiohttp cannot parse."""
    return ProxyServer(config, log).application()


@contextlib.asynccontextmanager
async def serving(
    config: ProxySettings | ProxyConfig,
    log: Callable[[ProxyRecord], None] | None = None,
    warn: Callable[[str], None] | None = None,
    hooks: Sequence[FlowHook] = (),
    tracing: Tracing = NO_TRACING,
) -> AsyncIterator[RunningProxy]:
    """A proxy listening on its host and port for the duration of the block (then stopped
    with its grace). `log` is called once per request, when it ends; `warn` with a line
    about the server itself (connections it cannot accept, a schema it cannot use; default:
    the `lockgate.proxy` logger); `hooks` see every flow; `tracing` is told of each admitted
    request and its attempts (default: off). An address that cannot be bound
    raises OSError before the block; a secret that cannot be read, `config.ConfigError`."""
    state = ProxyServer(config, log, warn, hooks, tracing)
    runner = state.runner()
    await runner.setup()
    settings = state.settings
    site = web.TCPSite(runner, settings.host, settings.port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    running = RunningProxy(f"http://{host}:{port}", state, runner)
    try:
        yield running
    finally:
        await running.stop()


# --- gunicorn ---------------------------------------------------------------------------------


def _environment_log(record: ProxyRecord) -> None:
    _log.info(
        "%s %s %s %s %d %d %.0f ms%s",
        record.method,
        record.path,
        record.protocol or "-",
        record.outcome,
        record.withheld,
        record.status,
        record.duration * 1000,
        f" ({record.reason})" if record.reason else "",
    )


async def app_factory() -> web.AppRunner:
    """The proxy for gunicorn's aiohttp worker, configured from the environment
    (`environment.settings_from_environment`: the config file `LOCKGATE_CONFIG` names, or
    `LOCKGATE_UPSTREAM` and the rest): `gunicorn lockgate.proxy.server:app_factory
    --worker-class aiohttp.GunicornWebWorker`. It returns the proxy's own runner (the worker
    uses it as it is): the head timeout is `LOCKGATE_HEAD_TIMEOUT` (not gunicorn's
    `--keep-alive`) and the grace period `LOCKGATE_GRACE` (keep it below gunicorn's
    `--graceful-timeout`). Each request is logged on the `lockgate.proxy` logger. A secret
    read from a variable leaves `os.environ`, but the environment block every gunicorn
    process was started with (what /proc/PID/environ shows) keeps it:
    `LOCKGATE_API_KEY_FILE` and `LOCKGATE_CLIENT_TOKEN_FILE` keep it out of every process's
    environment.

    A setting it cannot use (a metrics folder that is not there among them): one line on
    stderr (`lockgate proxy: REASON`) and exit 4, gunicorn's code for an application that
    cannot load (its master stops instead of starting workers again). With several workers
    each says it, and gunicorn's master may trip over the second exit (a traceback, exit
    1): `gunicorn -c python:lockgate.proxy.gunicorn_config` checks the settings in the
    master, before any worker starts (`gunicorn_config.on_starting`)."""
    try:
        settings, variables = startup_settings(os.environ)
        for variable in variables:
            os.environ.pop(variable, None)  # read once (/proc/PID/environ still shows it)
        # each worker its own exporter, made after the fork (its thread would not survive one)
        tracing = tracing_from_environment(os.environ)
        return ProxyServer(settings, _environment_log, tracing=tracing).runner()
    except (ValueError, ConfigError) as exc:  # TelemetryConfigError is a ValueError
        print(f"lockgate proxy: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(APP_LOAD_ERROR) from None
