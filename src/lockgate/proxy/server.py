"""`lockgate proxy`'s server: the gate on the wire, between any client and one upstream.

An aiohttp server that takes the client's requests and sends each to the upstream (its plain
path, `routes.plain_path`, and its query appended to `ProxyConfig.upstream`), with one pooled
client session per server: no redirect is followed, nothing is retried (the client owns its
retries), and every body is decoded (`auto_decompress`) before it is judged or passed on.

- **Routing** (`routes.route`, on the plain path: `%69` is `i`): a `POST …/responses`,
  `…/chat/completions` or `…/messages` is a protocol request; anything else (another path,
  another method: `GET /v1/models`) passes unchanged, its answer streamed back as it comes
  (hop-by-hop headers dropped). A path the upstream could route differently (an encoded `/`,
  a dot or empty segment, a `;`, a gated route in other letter case) is refused (400), and
  so is resuming a Responses stream (`GET …/responses/{id}?stream=true`: the request that
  named its tools was never seen) and a Chat request for several choices (`n` > 1: the gate
  judges one choice).
- **A protocol request** is read as JSON: within 1,000,000 values and 256 levels
  (`jsonlimits.check_document`, a few C passes; beyond, 413 before anything is sent), parsed
  with jiter, off the event loop when large. Its answer: an error status passes with its
  headers (`retry-after`, rate limits, request ids) and its body under the error-body cap; a
  2xx stream goes through the engine (`GatingStream`): forwarded as it comes until the
  first tool call, then held, released when the whole batch is valid, else ended with the
  protocol's stream error; a 2xx whole response is judged (`judge_whole`) and passes
  unchanged, or becomes a 502 with the protocol's error body. A body that is not a JSON
  object is sent as it is (the upstream's API owns request validation) and its error passes
  back; a 2xx answer to it cannot be judged and is refused (502).
- **Credentials**: the client's own (`Authorization`, `x-api-key`, `anthropic-version`, …)
  go to the configured upstream only. With `api_key` the proxy holds the key: the client's
  credentials are dropped and the key sent instead, as `Authorization: Bearer KEY` on the
  OpenAI routes and as `x-api-key: KEY` on Anthropic's (`…/messages`); on a pass-through
  path, Anthropic's form when the path has a `/messages` segment or the request carries
  `anthropic-version` (every Anthropic SDK request does), else the bearer form. The key goes
  only with model requests, model listings and token counts (`routes.takes_held_key`;
  `key_on_any_path` lifts that), never with a browser's request (an `Origin`, a `Sec-Fetch-*`
  header other than the `Sec-Fetch-Mode: cors` Node's fetch sends) nor to a `Host` that is
  not an IP literal, a `localhost` name or one of `allow_hosts` (DNS rebinding). Whatever
  the upstream echoes of the key (headers, bodies, streams) reaches the client as
  `[redacted]`, and a stream or whole answer is redacted before it is judged. The key is
  never logged: the reasons in records are redacted of it and of the client token.
- **Client token** (`client_token`): every request must carry it, in `x-lockgate-token`,
  or, when the proxy holds the key, as the client's own API key (`Authorization: Bearer
  TOKEN` or `x-api-key: TOKEN`: an SDK pointed at the proxy is given the token as its key).
  Else 401. `x-lockgate-token` never reaches the upstream.
- **Bounds**: a request head must arrive within `head_timeout` of the connection or of the
  previous answer on it (else the connection is closed); request bodies (`max_request_bytes`,
  413 beyond), aiohttp's request-head limits (8190-byte lines and fields, 128 headers; a head
  it cannot parse gets a JSON 400 and a record), concurrent requests (`max_streams`: beyond,
  503 with `retry-after`), silence (the gating idle timeout, also on connecting and on
  pass-through bodies), a deadline per gated response, error bodies capped. At the
  file-descriptor limit, new connections wait (accepting resumes as descriptors free up)
  and one line says so, at most every 10 s.
- **Stopping** (`RunningProxy.stop`, or the runner's cleanup under gunicorn): no new
  connection is accepted and a request on an open one gets 503; requests in flight may
  finish within the grace period, then are cut (recorded as `cut`).

`serving` runs one in-process; `app_factory` builds it from the environment for gunicorn's
aiohttp worker (`gunicorn lockgate.proxy.server:app_factory --worker-class
aiohttp.GunicornWebWorker`). The proxy is stateless: several processes can stand behind one
load balancer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import errno
import functools
import hmac
import ipaddress
import logging
import math
import os
import re
import stat
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from multidict import CIMultiDict
from yarl import URL

from ..cassette.format import Verdict
from ..cassette.recorder import CassetteRecorder, Exchange
from ..conversation import ToolSpec
from ..credentials import Redactor, api_key_problem
from ..gate import GateLimits
from ..gateway import HOP_BY_HOP, Gateway, ProtocolTarget, Refusal
from ..http import describe
from ..jsonlimits import TooComplex, parse_document
from ..providers.base import Provider
from .engine import (
    MAX_WHOLE_BYTES,
    Accepted,
    GatingOptions,
    GatingStream,
    HeldBudget,
    Hold,
    Refused,
    capped_body,
    forwarded_headers,
    gates,
    judge_whole,
)
from .routes import (
    PathProblem,
    owner,
    plain_path,
    resumes_response_stream,
    route,
    takes_held_key,
)

__all__ = [
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_MAX_HELD_BYTES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_STREAMS",
    "MAX_REQUEST_DEPTH",
    "MAX_REQUEST_VALUES",
    "TOKEN_HEADER",
    "Outcome",
    "ProxyConfig",
    "ProxyRecord",
    "RunningProxy",
    "app_factory",
    "build_app",
    "config_from_environment",
    "host_name_problem",
    "serving",
    "upstream_problem",
]

DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_STREAMS = 256
DEFAULT_HEAD_TIMEOUT = 30.0  # beyond the keep-alive of every client pool measured (15 s)
# The bytes every gated stream of the process may hold at once (each stream: at most
# `GatingOptions.max_held_bytes`, 64 MiB): beyond, the stream that would go over is refused
# (transient) and the others go on.
DEFAULT_MAX_HELD_BYTES = 256 * 1024 * 1024
TOKEN_HEADER = "x-lockgate-token"
MAX_REQUEST_DEPTH = 256  # JSON nesting of a protocol request body
MAX_REQUEST_VALUES = 1_000_000  # JSON values (keys counted) of a protocol request body
PARSE_INLINE_BYTES = 256 * 1024  # a request body this large is parsed off the event loop
READ_MARGIN_SECONDS = 1.0  # the socket's read timeout is this much beyond the engine's own
MAX_SCHEMA_NOTES = 1000  # the unusable schemas said once each (then no more notes)
OFFLOAD_BYTES = 1024 * 1024  # a whole response this large is judged off the event loop
ACCEPT_WARNING_SECONDS = 10.0  # at most one line this often about connections not accepted
MAX_SECRET_FILE_BYTES = 64 * 1024
APP_LOAD_ERROR = 4  # gunicorn's exit code for an application that cannot load: it stops

# What a request is recorded as: passed (accepted by the gate), withheld (refused, tool calls
# withheld), refused (refused, none streamed), forwarded (not judged: an error status, a
# pass-through path), error (the upstream could not be reached, failed before its answer or
# broke off a pass-through), rejected (by the proxy itself: token, browser, path, size,
# capacity, stopping, a request it cannot parse), abandoned (the client left), cut (the
# proxy stopped and its grace period ran out).
Outcome = Literal[
    "passed", "withheld", "refused", "forwarded", "error", "rejected", "abandoned", "cut"
]

# Request headers never sent upstream: hop-by-hop (RFC 9110 §7.6.1), those aiohttp writes
# itself (host, length, the encodings it can decode), and the proxy's own token.
_NOT_SENT = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "expect", TOKEN_HEADER}
# The client's credentials, replaced when the proxy holds the key.
_CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
# The content encodings aiohttp decodes (a request's body, an upstream's answer); br and
# zstd only with their optional packages, else aiohttp refuses them.
_DECODED_ENCODINGS = frozenset({"gzip", "deflate", "br", "zstd"})
# The request field that asks a protocol for several choices (the gate judges one).
_CHOICES_FIELD = {"chat": "n"}
_HOST_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def upstream_problem(text: str) -> str | None:
    """None for an upstream URL the proxy can use: http(s), a host, no `user:password@`, no
    query or fragment (the request's own are appended); else a one-line reason."""
    from ..transport import base_url_problem

    problem = base_url_problem(text)
    if problem is not None:
        return problem
    parts = urllib.parse.urlsplit(text)
    if parts.query or parts.fragment or "?" in text or "#" in text:
        return "the upstream URL must not carry a query or a fragment"
    return None


def host_name_problem(name: str) -> str | None:
    """None for a host name a client may reach the proxy by (`--allow-host`): DNS labels
    (letters, digits, `-`, `_`), dot-separated, a trailing dot allowed; else a reason."""
    labels = name.removesuffix(".").split(".")
    if not name or len(name) > 253 or not all(_HOST_NAME.fullmatch(label) for label in labels):
        return f"{name!a} is not a host name (letters, digits, '-' and '_' between dots)"
    return None


def _host_key(name: str) -> str:
    return name.removesuffix(".").lower()


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """One proxy: its upstream (`https://api.openai.com`; a request's plain path and query are
    appended), where it listens, how streams are judged, the key it holds (it replaces the
    client's credentials upstream) and where it may go, the token every client must show,
    the host names clients may reach it by besides IP literals and `localhost`, and its
    bounds."""

    upstream: str
    host: str = "127.0.0.1"
    port: int = 0
    gating: GatingOptions = field(default_factory=GatingOptions)
    api_key: str | None = field(default=None, repr=False)
    client_token: str | None = field(default=None, repr=False)
    max_streams: int = DEFAULT_MAX_STREAMS
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    grace_seconds: float = 10.0
    # Recording (`--record DIR`): every protocol exchange becomes a cassette in `record`,
    # the key, the client token, the client's credentials and each `redact` value redacted.
    record: Path | None = None
    redact: tuple[str, ...] = field(default=(), repr=False)
    # With a held key: the names a request's `Host` may carry besides IP literals and
    # `localhost` (a rebound DNS name never gets the key), and whether the key goes with
    # every path instead of only model requests, model listings and token counts.
    allow_hosts: tuple[str, ...] = ()
    key_on_any_path: bool = False
    # A request head must arrive within this many seconds of the connection, or of the
    # previous answer on a kept-alive one; else the connection is closed.
    head_timeout: float = DEFAULT_HEAD_TIMEOUT
    # What every gated stream may hold at once (`engine.HeldBudget`).
    max_held_bytes: int = DEFAULT_MAX_HELD_BYTES

    def __post_init__(self) -> None:
        problem = upstream_problem(self.upstream)
        if problem is not None:
            raise ValueError(f"upstream: {problem}")
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be between 0 and 65535")
        if self.max_streams < 1:
            raise ValueError("max_streams must be at least 1")
        if self.max_request_bytes < 1:
            raise ValueError("max_request_bytes must be at least 1")
        if self.max_held_bytes < 1:
            raise ValueError("max_held_bytes must be at least 1")
        if not (math.isfinite(self.grace_seconds) and self.grace_seconds >= 0):
            raise ValueError("grace_seconds must be a non-negative number of seconds")
        if not (math.isfinite(self.head_timeout) and self.head_timeout > 0):
            raise ValueError("head_timeout must be a positive number of seconds")
        for name in self.allow_hosts:
            if (problem := host_name_problem(name)) is not None:
                raise ValueError(f"allow_hosts: {problem}")
        for name, secret in (("api_key", self.api_key), ("client_token", self.client_token)):
            if secret is not None and (problem := api_key_problem(secret)) is not None:
                raise ValueError(f"{name}: {problem}")


@dataclass(frozen=True, slots=True)
class ProxyRecord:
    """One request, when it ended: its method and path (without the query), the protocol it
    was gated with (None: passed unchanged), what became of it, the tool calls withheld, why
    (`kind: reason` for a refusal; redacted), the status sent and the seconds it took."""

    method: str
    path: str
    protocol: str | None
    outcome: Outcome
    withheld: int
    reason: str | None
    status: int
    duration: float


class RunningProxy:
    """A proxy that is serving: its `url`, how many requests it has answered and holds
    now, and `stop`."""

    def __init__(self, url: str, state: _Proxy, runner: web.AppRunner) -> None:
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
        """Where exchanges are recorded (`ProxyConfig.record`), or None."""
        return self._state.recorder

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting (new connections; a request on an open one gets 503), let the
        requests in flight end within `grace` seconds (default: the config's), then cut the
        rest and close the upstream session. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        state = self._state
        state.stopping = True
        if grace is not None:
            state.grace = max(0.0, grace)
        await self._runner.cleanup()  # sites, idle connections, then `_Proxy.wind_down`


class _Body:
    """An upstream response body for the engine: its bytes as they arrive (tapped for the
    recording, then redacted of the held key); `aclose` returns the connection to the pool
    when the body was read to its end, else closes it."""

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        exchange: Exchange | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self._response = response
        self._exchange = exchange
        self._redactor = redactor

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks: AsyncIterator[bytes] = self._response.content.iter_any()
        if self._exchange is not None:
            chunks = self._exchange.tap(chunks)
        if self._redactor is None:
            async for chunk in chunks:
                yield chunk
            return
        redacting = self._redactor.bytes_stream()
        async for chunk in chunks:
            released = redacting.feed(chunk)
            if released:
                yield released
        rest = redacting.flush()
        if rest:
            yield rest

    async def aclose(self) -> None:
        _finish(self._response)


def _finish(response: aiohttp.ClientResponse) -> None:
    if response.content.at_eof():
        response.release()
    else:
        response.close()


@dataclass(slots=True)
class _Note:
    """What becomes a record, filled in as the request goes."""

    method: str
    path: str
    protocol: str | None
    started: float
    outcome: Outcome = "error"
    withheld: int = 0
    reason: str | None = None
    status: int = 0
    exchange: Exchange | None = None  # the exchange being recorded (`--record`)
    verdict: Verdict | None = None  # what the gate decided, for the recording


class _Proxy:
    """The server's state: config, the upstream session, requests in flight."""

    def __init__(
        self,
        config: ProxyConfig,
        log: Callable[[ProxyRecord], None] | None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.log = log
        self.warn = warn or _log.warning
        self.redact = Redactor([s for s in (config.api_key, config.client_token) if s])
        self.held = HeldBudget(config.max_held_bytes)  # shared by every gated stream
        self.unusable_schemas: set[tuple[str, str]] = set()  # (tool, problem) said once
        # What reaches a client is redacted of the held key (the client knows its token).
        self.client_redactor = Redactor([config.api_key]) if config.api_key else None
        self.allowed_hosts = frozenset(_host_key(name) for name in config.allow_hosts)
        self.session: aiohttp.ClientSession | None = None
        self.parser: concurrent.futures.ThreadPoolExecutor | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.active = 0
        self.answered = 0
        self.stopping = False
        self.cutting = False
        self.grace = config.grace_seconds
        self.accept_failing = False
        self.accept_failures = 0  # since the last line said so
        self.accept_warned_at: float | None = None
        self.base = config.upstream.rstrip("/")
        self.token = config.client_token.encode() if config.client_token else None
        self.recorder = (
            CassetteRecorder(
                config.record,
                secrets=[s for s in (config.api_key, config.client_token, *config.redact) if s],
            )
            if config.record is not None
            else None
        )

    # --- the application ---------------------------------------------------------------

    async def session_context(self, app: web.Application) -> AsyncIterator[None]:
        idle = self.config.gating.idle_timeout
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=idle, sock_read=idle + READ_MARGIN_SECONDS
        )
        connector = aiohttp.TCPConnector(limit=self.config.max_streams, limit_per_host=0)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=True,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        # One parse of a large request body at a time: its memory is bounded once.
        self.parser = concurrent.futures.ThreadPoolExecutor(1, "lockgate-request-parse")
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()

        def exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            accepting = context.get("message") == "socket.accept() out of system resource"
            if accepting and isinstance(exc, OSError):  # asyncio tries again in 1 s
                self.accept_failed(exc, loop.time())
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(exception_handler)
        try:
            yield
        finally:
            loop.set_exception_handler(previous)
            self.parser.shutdown(wait=False, cancel_futures=True)
            await self.session.close()

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_bytes)
        app.cleanup_ctx.append(self.session_context)
        app.on_shutdown.append(self.wind_down)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def runner(self) -> _ProxyRunner:
        """The application's runner: no access log (each request is a record), the head
        timeout (aiohttp closes a connection whose next head has not arrived by then),
        handlers cancelled when their client leaves."""
        return _ProxyRunner(
            self,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=1.0,
            keepalive_timeout=self.config.head_timeout,
        )

    async def wind_down(self, app: web.Application) -> None:
        """Stopping (after the listening sockets closed and idle connections were closed):
        a request on an open connection gets 503; those in flight may end within the grace
        period; then the rest are cut."""
        self.stopping = True
        pending = set(self.tasks)
        if pending and self.grace > 0:
            await asyncio.wait(pending, timeout=self.grace)
        if self.tasks:
            self.cutting = True
            for task in self.tasks:
                task.cancel()
            await asyncio.wait(set(self.tasks), timeout=5)

    def accept_failed(self, exc: OSError, now: float) -> None:
        """The listening socket could not accept (at the file-descriptor limit): asyncio
        tries again every second. One line says so, at most every 10 s."""
        self.accept_failing = True
        self.accept_failures += 1
        if self.accept_warned_at is not None and now - self.accept_warned_at < (
            ACCEPT_WARNING_SECONDS
        ):
            return
        self.accept_warned_at = now
        name = errno.errorcode.get(exc.errno or 0, "error")
        again = self.accept_failures - 1
        since = f"; {again} more since the last line" if again else ""
        self.accept_failures = 0
        self.warn(
            f"lockgate proxy: cannot accept new connections: {exc.strerror or name} ({name}); "
            f"they wait and are accepted as descriptors free up{since}"
        )

    def accepted(self) -> None:
        """A connection was accepted: after failures, one line says accepting resumed."""
        if self.accept_failing:
            self.accept_failing = False
            self.accept_failures = 0
            self.accept_warned_at = None
            self.warn("lockgate proxy: accepting connections again")

    # --- one request -----------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        raw_path = request.rel_url.raw_path
        try:
            path = plain_path(raw_path)
            path_problem: str | None = None
        except PathProblem as exc:
            path, path_problem = raw_path, str(exc)
        query = {name: value for name, value in reversed(list(request.rel_url.query.items()))}
        routed = route(request.method, path, query) if path_problem is None else None
        entry = routed.provider if routed is not None else None
        target = routed.target if routed is not None else None
        note = _Note(request.method, path, entry.name if entry else None, loop.time())
        task = asyncio.current_task()
        counted = False
        try:
            if self.stopping:
                return self._reject(note, entry, 503, "the proxy is stopping", request)
            if path_problem is not None:
                return self._reject(
                    note,
                    entry,
                    400,
                    f"the request path {_quoted(raw_path)} could be routed differently "
                    f"upstream ({path_problem}); send its plain form",
                    request,
                )
            if not self._authorized(request):
                return self._reject(
                    note, entry, 401, "the lockgate client token is missing or wrong", request
                )
            if _upgrades(request) and route("POST", path, query) is not None:
                # Codex tries a WebSocket at its base URL first, and falls back to HTTP at
                # once on 426; a WebSocket is never passed on ungated.
                return self._reject(
                    note,
                    entry,
                    426,
                    "a WebSocket on a gated path cannot be gated; send the request over HTTP",
                    request,
                )
            if target is not None and target.problem is not None:
                return self._reject(note, entry, 400, target.problem, request)
            if self.config.api_key is not None:
                problem = self._held_key_problem(request, path)
                if problem is not None:
                    return self._reject(note, entry, 403, problem, request)
            if resumes_response_stream(
                request.method, path, request.rel_url.query.getall("stream", [])
            ):
                return self._reject(
                    note,
                    entry,
                    400,
                    "resuming a response stream (GET …/responses/{id}?stream=true) cannot be "
                    "gated: the proxy never saw the request that named its tools; stream the "
                    "response from its POST instead",
                    request,
                )
            if self.active >= self.config.max_streams:
                return self._reject(
                    note,
                    entry,
                    503,
                    f"the proxy is at its limit of {self.config.max_streams} requests",
                    request,
                )
            self.active += 1
            counted = True
            if task is not None:
                self.tasks.add(task)
            return await self._proxy(request, entry, target, note)
        except asyncio.CancelledError:
            if self.cutting:
                note.outcome = "cut"
                note.reason = f"the proxy stopped: cut after the {self.grace:g} s grace period"
            else:
                note.outcome = "abandoned"
            raise
        finally:
            if counted:
                self.active -= 1
                if task is not None:
                    self.tasks.discard(task)
            self.answered += 1
            self._emit(note, loop.time())

    def _emit(self, note: _Note, now: float) -> None:
        if self.log is None:
            return
        record = ProxyRecord(
            note.method,
            note.path,
            note.protocol,
            note.outcome,
            note.withheld,
            None if note.reason is None else self.redact(note.reason),
            note.status,
            max(0.0, now - note.started),
        )
        with contextlib.suppress(Exception):  # a log that fails never fails a request
            self.log(record)

    def malformed(
        self, request: BaseRequest, status: int, exc: BaseException | None, message: str | None
    ) -> web.Response:
        """aiohttp's answer to a request it could not parse (or, never expected, a handler
        that failed): the proxy's JSON error, and a record."""
        loop = asyncio.get_running_loop()
        note = _Note("-", "-", None, loop.time())
        if status == 400:
            # aiohttp's message: a line, then the bytes it stopped at and a caret under them.
            detail = message or (str(exc) if exc is not None else "")
            lines = [line.strip() for line in detail.splitlines() if line.strip(" ^")]
            reason = f"the request is not valid HTTP ({_quoted(' '.join(lines), 200)})"
            note.outcome = "rejected"
        else:
            reason = f"the proxy failed on this request (HTTP {status})"
            note.outcome = "error"
        note.status = status
        note.reason = reason
        self.answered += 1
        self._emit(note, loop.time())
        body = _error_body(None, None, f"lockgate proxy: {reason}", status)
        response = web.Response(status=status, body=body, content_type="application/json")
        response.force_close()
        return response

    def _authorized(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        offered = [request.headers.get(TOKEN_HEADER)]
        if self.config.api_key is not None:
            bearer = request.headers.get("authorization", "")
            scheme, _, value = bearer.partition(" ")
            if scheme.lower() == "bearer":
                offered.append(value.strip())
            # An SDK pointed at the proxy is given the token as its key, wherever its
            # protocol puts a key: Anthropic's header, Azure's, Google's header or query.
            for name in ("x-api-key", "api-key", "x-goog-api-key"):
                offered.append(request.headers.get(name))
            offered.append(request.rel_url.query.get("key"))
        return any(
            candidate is not None
            and hmac.compare_digest(candidate.encode("utf-8", "surrogateescape"), self.token)
            for candidate in offered
        )

    def _held_key_problem(self, request: web.Request, path: str) -> str | None:
        """Why the held key may not go with this request (None: it may). A web page must
        never spend it: a browser's request carries an `Origin` (cross-origin, and every
        POST) or `Sec-Fetch-*` headers (every request of a current browser; Node's fetch
        sends `Sec-Fetch-Mode: cors` alone, on every request, and is no browser); a page
        reached through DNS rebinding carries its own name as `Host`, which is neither an
        IP literal nor a `localhost` name nor an allowed one. And the key goes only where
        a model client needs it."""
        headers = request.headers
        fetch_headers = {
            name.lower(): value
            for name, value in headers.items()
            if name.lower().startswith("sec-fetch-")
        }
        if "origin" in headers or (fetch_headers and fetch_headers != {"sec-fetch-mode": "cors"}):
            return "a browser request may not use the key this proxy holds"
        hosts = headers.getall("host", [])
        if len(hosts) > 1 or (hosts and not self._host_allowed(hosts[0])):
            shown = _quoted(", ".join(hosts), 80)
            return (
                f"the Host {shown} is not this proxy's (an IP literal, localhost, or a name "
                "given with --allow-host NAME): a rebound name may not use the key it holds"
            )
        if not self.config.key_on_any_path and not takes_held_key(request.method, path):
            return (
                f"the key this proxy holds goes only with model requests, model listings and "
                f"token counts, not with {request.method} {_quoted(path, 200)} "
                "(--key-on-any-path sends it with every request)"
            )
        return None

    def _host_allowed(self, host: str) -> bool:
        name = host.strip()
        if name.startswith("["):  # an IPv6 literal, with or without a port
            literal, closed, rest = name[1:].partition("]")
            if not closed or (rest and not rest[1:].isdigit()) or (rest and rest[0] != ":"):
                return False
            try:
                ipaddress.IPv6Address(literal)
            except ValueError:
                return False
            return True
        bare, colon, port = name.rpartition(":")
        if colon and port.isdigit():
            name = bare
        key = _host_key(name)
        try:
            ipaddress.IPv4Address(key)
        except ValueError:
            pass
        else:
            return True
        return key == "localhost" or key.endswith(".localhost") or key in self.allowed_hosts

    def _reject(
        self,
        note: _Note,
        entry: Provider | None,
        status: int,
        message: str,
        request: web.Request,
        param: str | None = None,
    ) -> web.Response:
        note.outcome = "rejected"
        note.status = status
        note.reason = message
        headers = {"content-type": "application/json"}
        if status == 503:
            headers["retry-after"] = "1"
            if self.stopping:
                headers["connection"] = "close"
        if status == 401:
            headers["www-authenticate"] = 'Bearer realm="lockgate"'
        body = _error_body(entry, request, f"lockgate proxy: {message}", status, param)
        return web.Response(status=status, body=body, headers=headers)

    def _declared_tools(self, gateway: Gateway, request: Mapping[str, Any]) -> tuple[ToolSpec, ...]:
        """The tools a request declares; a schema the gate cannot use is said once per tool
        and problem (its calls are then checked as a JSON object only)."""
        tools = gateway.tools(request, validate_schemas=self.config.gating.validate_schemas)
        for tool in tools:
            problem = getattr(tool, "schema_problem", None)
            if problem is None or (tool.name, problem) in self.unusable_schemas:
                continue
            if len(self.unusable_schemas) < MAX_SCHEMA_NOTES:
                self.unusable_schemas.add((tool.name, problem))
                self.warn(
                    f"lockgate proxy: the schema of tool {_quoted(tool.name, 80)} is not one "
                    f"the gate can validate with ({problem}); its calls are checked as a "
                    "JSON object only"
                )
        return tools

    def _upstream_headers(self, request: web.Request, key_header: str) -> CIMultiDict[str]:
        named = {
            part.strip().lower()
            for value in request.headers.getall("connection", [])
            for part in value.split(",")
        }
        held = self.config.api_key
        # A body aiohttp decoded goes on decoded: its encoding no longer describes it.
        decoded = _decodes(request.headers.get("content-encoding", ""))
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in request.headers.items():
            lowered = name.lower()
            if lowered in _NOT_SENT or lowered in named:
                continue
            if held is not None and lowered in _CREDENTIALS:
                continue
            if decoded and lowered == "content-encoding":
                continue
            headers.add(name, value)
        if held is not None:
            headers[key_header] = f"Bearer {held}" if key_header == "authorization" else held
        return headers

    def _client_headers(self, upstream: aiohttp.ClientResponse) -> dict[str, str]:
        """The upstream's headers to pass on, redacted of the held key."""
        headers = forwarded_headers(upstream.headers)
        redactor = self.client_redactor
        if redactor is None:
            return headers
        return {name: redactor(value) for name, value in headers.items() if redactor(name) == name}

    async def _write(
        self, request: web.Request, response: web.StreamResponse, piece: bytes
    ) -> None:
        """Send a piece; a client that does not take it within the silence limit has
        stopped reading, and is treated as gone (its slot and the upstream are freed). The
        timer is armed only when the socket's buffer is full (a write then waits)."""
        if not getattr(request.protocol, "writing_paused", True):
            await response.write(piece)
            return
        try:
            async with asyncio.timeout(self.config.gating.idle_timeout):
                await response.write(piece)
        except TimeoutError:
            raise ConnectionResetError("the client stopped reading") from None

    async def _parse(self, body: bytes) -> Mapping[str, Any] | None:
        """The request body as a JSON object (None: not one); `TooComplex` over a bound.
        A large body is parsed off the event loop, one at a time."""
        if len(body) <= PARSE_INLINE_BYTES or self.parser is None:
            return _request_object(body)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.parser, _request_object, body)

    async def _proxy(
        self,
        request: web.Request,
        entry: Provider | None,
        target: ProtocolTarget | None,
        note: _Note,
    ) -> web.StreamResponse:
        try:
            async with asyncio.timeout(self.config.gating.idle_timeout):
                body = await request.read()
        except TimeoutError:
            reason = f"the request body did not arrive within {self.config.gating.idle_timeout:g} s"
            return self._reject(note, entry, 408, reason, request)
        except web.HTTPRequestEntityTooLarge:
            limit = self.config.max_request_bytes
            return self._reject(
                note, entry, 413, f"the request body is larger than {limit} bytes", request
            )
        parsed: Mapping[str, Any] | None = None
        gateway: Gateway | None = None
        if entry is not None:
            assert entry.gateway is not None
            gateway = entry.gateway()
            try:
                parsed = await self._parse(body)
            except TooComplex as exc:
                return self._reject(note, entry, 413, f"the request body {exc}", request)
            if parsed is not None:
                choices = _choices_problem(entry, parsed)
                if choices is not None:
                    return self._reject(
                        note, entry, 400, choices, request, _CHOICES_FIELD.get(entry.name)
                    )
        speaker = _speaker(entry, request, note.path)
        assert self.session is not None
        query = request.rel_url.raw_query_string
        if self.config.api_key is not None and "key" in request.rel_url.query:
            # A key in the query (Gemini's other place for it) is the client's: the proxy
            # sends the one it holds, in its header.
            kept = [(name, value) for name, value in request.rel_url.query.items() if name != "key"]
            query = URL("/").with_query(kept).raw_query_string
        url = URL(self.base + note.path + (f"?{query}" if query else ""), encoded=True)
        try:
            upstream = await self.session.request(
                request.method,
                url,
                headers=self._upstream_headers(request, speaker.key_header),
                data=body or None,
                allow_redirects=False,
            )
        except Exception as exc:  # no answer: cannot connect, or it failed before its head
            if isinstance(exc, asyncio.CancelledError):  # pragma: no cover
                raise
            return self._unanswered(note, entry, gateway, request, exc)
        try:
            encoding = upstream.headers.get("content-encoding", "")
            if encoding and encoding.strip().lower() != "identity" and not _decodes(encoding):
                reason = (
                    f"the upstream answered with Content-Encoding {_quoted(encoding, 80)}, "
                    "which the proxy cannot decode"
                )
                return self._failed(note, entry, gateway, request, 502, reason)
            if self.recorder is not None and entry is not None:
                note.exchange = self.recorder.exchange(
                    entry.name,
                    self.config.upstream,
                    request.method,
                    note.path,
                    parsed,
                    secrets=_client_credentials(request),
                )
                note.exchange.head(upstream.status, forwarded_headers(upstream.headers).items())
            status = upstream.status
            headers = self._client_headers(upstream)
            note.status = status
            if entry is None or gateway is None or not 200 <= status < 300:
                note.outcome = "forwarded"
                capped = not 200 <= status < 300
                return await self._pass(request, upstream, status, headers, note, capped)
            if parsed is None:
                return self._unjudged(
                    note,
                    gateway,
                    "malformed_event",
                    "the request is not a JSON object, so its answer cannot be judged",
                )
            assert target is not None  # routed: a protocol request has its target
            try:
                tools = self._declared_tools(gateway, parsed)
            except Exception as exc:  # a request whose tools cannot be read
                return self._unjudged(
                    note, gateway, "internal_error", f"the request's tools ({describe(exc)})"
                )
            if gates(gateway, parsed, status, target):
                return await self._gate(request, entry, parsed, tools, upstream, headers, note)
            return await self._whole(entry, gateway, parsed, tools, upstream, headers, note)
        finally:
            _finish(upstream)
            if note.exchange is not None:
                note.exchange.decide(note.verdict)
                note.exchange.finish()

    def _unanswered(
        self,
        note: _Note,
        entry: Provider | None,
        gateway: Gateway | None,
        request: web.Request,
        exc: BaseException,
    ) -> web.Response:
        status, reason = _failure_before_answer(exc, self.config.gating.idle_timeout)
        return self._failed(note, entry, gateway, request, status, reason)

    def _failed(
        self,
        note: _Note,
        entry: Provider | None,
        gateway: Gateway | None,
        request: web.Request,
        status: int,
        reason: str,
    ) -> web.Response:
        """No answer to pass on (the upstream could not be reached, failed before its
        answer, or answered in a form the proxy cannot read): `status` and the protocol's
        error body."""
        reason = self.redact(reason)
        note.outcome = "error"
        note.status = status
        note.reason = f"opening: {reason}"
        if gateway is not None:
            refusal = Refusal("opening", f"lockgate proxy: {reason}", True, 0)
            body = gateway.error_body(refusal)
        else:
            body = _error_body(entry, request, f"lockgate proxy: {reason}", status)
        return web.Response(status=status, body=body, content_type="application/json")

    def _unjudged(self, note: _Note, gateway: Gateway, kind: str, reason: str) -> web.Response:
        text = f"lockgate refused the response: {kind}: {reason}"
        refusal = Refusal(kind, text, False, 0)
        note.outcome = "refused"
        note.verdict = Verdict("refused", kind, 0)
        note.status = 502
        note.reason = f"{kind}: {reason}"
        return web.Response(
            status=502, body=gateway.error_body(refusal), content_type="application/json"
        )

    async def _pass(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        status: int,
        headers: dict[str, str],
        note: _Note,
        capped: bool,
    ) -> web.StreamResponse:
        """The answer as it came (an error body under the cap), redacted of the held key; a
        body that breaks off ends the connection without a clean end, so the client sees it
        broke."""
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        body = _Body(upstream, note.exchange if capped else None, self.client_redactor)
        pieces: AsyncIterator[bytes] = aiter(capped_body(body) if capped else body)
        try:
            async for piece in pieces:
                await self._write(request, response, piece)
        except ConnectionError:  # the client left (or stopped reading)
            note.outcome = "abandoned"
            _abort(request)
            return response
        except Exception as exc:  # the upstream broke off (or fell silent)
            note.outcome = "error"
            note.reason = f"transport: the upstream body broke off ({describe(exc)})"
            _abort(request)
            return response
        finally:
            close = getattr(pieces, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _gate(
        self,
        request: web.Request,
        entry: Provider,
        parsed: Mapping[str, Any],
        tools: Sequence[ToolSpec],
        upstream: aiohttp.ClientResponse,
        headers: dict[str, str],
        note: _Note,
    ) -> web.StreamResponse:
        stream = GatingStream(
            entry,
            parsed,
            # Redacted before it is judged: the client reads what the gate judged.
            _Body(upstream, note.exchange, self.client_redactor),
            self.config.gating,
            redact=self.redact,
            started_at=note.started,
            budget=self.held,
            tools=tools,
        )
        response = web.StreamResponse(status=note.status, headers=headers)
        await response.prepare(request)
        pieces = aiter(stream)
        left = False
        try:
            async for piece in pieces:
                await self._write(request, response, piece)
        except ConnectionError:  # the client left (or stopped reading): not an outcome
            left = True
            _abort(request)
            return response
        finally:
            close = getattr(pieces, "aclose", None)
            if close is not None:
                await close()
            if left:
                note.outcome = "abandoned"
            else:
                _note_outcome(note, stream.outcome)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _whole(
        self,
        entry: Provider,
        gateway: Gateway,
        parsed: Mapping[str, Any],
        tools: Sequence[ToolSpec],
        upstream: aiohttp.ClientResponse,
        headers: dict[str, str],
        note: _Note,
    ) -> web.Response:
        options = self.config.gating
        data = bytearray()
        chunks: AsyncIterator[bytes] = upstream.content.iter_any()
        if note.exchange is not None:
            chunks = note.exchange.tap(chunks)
        try:
            async with asyncio.timeout_at(note.started + options.deadline):
                async for chunk in chunks:
                    data += chunk
                    if len(data) > MAX_WHOLE_BYTES:
                        break  # judged as too large
        except TimeoutError:
            reason = f"no complete response within the {options.deadline:g} s deadline"
            return self._unjudged_transient(note, gateway, "deadline", reason)
        except Exception as exc:
            reason = f"the body broke off ({describe(exc)})"
            return self._unjudged_transient(note, gateway, "transport", reason)
        body = bytes(data)
        if self.client_redactor is not None:  # judged as the client will read it
            body = self.client_redactor.redact_bytes(body)
        if len(body) > OFFLOAD_BYTES:
            verdict = await asyncio.to_thread(
                functools.partial(
                    judge_whole,
                    entry,
                    parsed,
                    body,
                    options,
                    status=note.status,
                    redact=self.redact,
                    tools=tools,
                )
            )
        else:
            verdict = judge_whole(
                entry, parsed, body, options, status=note.status, redact=self.redact, tools=tools
            )
        _note_outcome(note, verdict.outcome)
        note.status = verdict.status
        if isinstance(verdict.outcome, Refused):
            return web.Response(
                status=verdict.status,
                body=verdict.body,
                content_type="application/json",
                headers=dict(verdict.headers),
            )
        return web.Response(status=verdict.status, body=verdict.body, headers=headers)

    def _unjudged_transient(
        self, note: _Note, gateway: Gateway, kind: str, reason: str
    ) -> web.Response:
        text = f"lockgate refused the response: {kind}: {self.redact(reason)}"
        note.outcome = "refused"
        note.verdict = Verdict("refused", kind, 0)
        note.status = 502
        note.reason = f"{kind}: {reason}"
        return web.Response(
            status=502,
            body=gateway.error_body(Refusal(kind, text, True, 0)),
            content_type="application/json",
        )


# --- aiohttp's server, with the proxy's answer to a request it cannot parse ------------------


class _ProxyRequestHandler(RequestHandler):
    """aiohttp's connection handler; a request its parser rejects gets the proxy's JSON
    error and a record (aiohttp's own: a plain-text 400 and a logged traceback)."""

    def __init__(self, manager: web.Server, *, proxy: _Proxy, **kwargs: Any) -> None:
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


class _ProxyServer(web.Server):
    """aiohttp's server, making `_ProxyRequestHandler`s; each connection accepted tells the
    proxy (after accept failures, one line says accepting resumed)."""

    def __init__(self, proxy: _Proxy, made: web.Server) -> None:
        super().__init__(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=asyncio.get_running_loop(),
            **made._kwargs,
        )
        self._lockgate = proxy

    def __call__(self) -> RequestHandler:
        self._lockgate.accepted()
        return _ProxyRequestHandler(
            self, proxy=self._lockgate, loop=asyncio.get_running_loop(), **self._kwargs
        )


class _ProxyRunner(web.AppRunner):
    """The proxy's application runner (in-process and under gunicorn's aiohttp worker,
    which uses a runner the factory returns as it is)."""

    def __init__(self, proxy: _Proxy, **kwargs: Any) -> None:
        super().__init__(proxy.application(), **kwargs)
        self._lockgate = proxy

    async def _make_server(self) -> web.Server:
        return _ProxyServer(self._lockgate, await super()._make_server())


def _upgrades(request: web.Request) -> bool:
    """Whether a request asks to switch to a WebSocket."""
    return any(
        part.strip().lower() == "websocket"
        for value in request.headers.getall("upgrade", [])
        for part in value.split(",")
    )


def _note_outcome(note: _Note, outcome: Accepted | Refused | None) -> None:
    if isinstance(outcome, Accepted):
        note.outcome = "passed"
        note.verdict = Verdict("accepted", None, len(outcome.decision.message.tool_calls))
    elif isinstance(outcome, Refused):
        refusal = outcome.refusal
        note.verdict = Verdict("refused", refusal.kind, refusal.withheld)
        note.withheld = refusal.withheld
        note.outcome = "withheld" if refusal.withheld else "refused"
        message = refusal.message
        _, colon, rest = message.partition(": ")
        note.reason = rest if colon and message.startswith("lockgate ") else message
    elif note.outcome not in ("abandoned", "error"):
        note.outcome = "abandoned"


def _client_credentials(request: web.Request) -> list[str]:
    """The credentials a client sent (its key, a token, cookies, a `key` query parameter):
    redacted from the exchange's cassette, as the held key is."""
    values: list[str] = []
    for name in (*_CREDENTIALS, TOKEN_HEADER, "proxy-authorization", "cookie"):
        for value in request.headers.getall(name, []):
            values.append(value)
            scheme, _, rest = value.partition(" ")
            if rest.strip() and scheme.isalpha():
                values.append(rest.strip())  # `Bearer KEY`: the key alone too
    values.extend(request.rel_url.query.getall("key", []))
    return values


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


def _quoted(text: str, limit: int = 120) -> str:
    """Client or upstream text for a reason: quoted, escaped (no control character, no
    line break reaches a log), bounded."""
    shown = ascii(text[:limit])
    return shown if len(text) <= limit else shown[:-1] + "…" + shown[-1]


def _decodes(encoding: str) -> bool:
    """Whether aiohttp decodes a body in this `Content-Encoding` (it reads one value, any
    letter case; others pass encoded)."""
    return encoding.isascii() and encoding.lower() in _DECODED_ENCODINGS


def _request_object(body: bytes) -> Mapping[str, Any] | None:
    """The request body as a JSON object, or None (not UTF-8, not JSON, not an object);
    `TooComplex` for one over the bounds (`MAX_REQUEST_VALUES`, `MAX_REQUEST_DEPTH`)."""
    try:
        value = parse_document(body, MAX_REQUEST_DEPTH, MAX_REQUEST_VALUES)
    except TooComplex:
        raise
    except (ValueError, RecursionError):
        return None
    return value if type(value) is dict else None


def _choices_problem(entry: Provider, request: Mapping[str, Any]) -> str | None:
    """Why the gate cannot judge the answer to this request: several choices (Chat's `n`
    above 1; the other protocols have no such field). None: it can."""
    name = _CHOICES_FIELD.get(entry.name)
    if name is None:
        return None
    count = request.get(name)
    if isinstance(count, int | float) and not isinstance(count, bool) and count > 1:
        return (
            f"{name} = {count:g} asks for {count:g} choices; the gate judges one choice per "
            f"response: send {name} = 1 or leave {name} out"
        )
    return None


def _speaker(entry: Provider | None, request: web.Request | None, path: str) -> Gateway:
    """The protocol a request speaks: its own when it is a protocol request, else the one
    that claims it (`routes.owner`: Anthropic's and Gemini's SDKs send headers of their
    own), for the form of a held key and of the proxy's own errors."""
    if entry is not None and entry.gateway is not None:
        return entry.gateway()
    if request is None:
        return owner("/", {}, {})
    query = {name: value for name, value in reversed(list(request.rel_url.query.items()))}
    return owner(path, request.headers, query)


def _failure_before_answer(exc: BaseException, idle: float) -> tuple[int, str]:
    """The status and reason for an upstream request that got no answer: what happened,
    told apart (cannot connect, no answer in time, closed or broken after connecting, an
    answer in an encoding or a form the proxy cannot read)."""
    detail = describe(exc)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return 504, f"connecting to the upstream timed out ({detail})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return 502, f"connecting to the upstream failed ({detail})"
    if isinstance(exc, aiohttp.SocketTimeoutError | TimeoutError):
        return 504, f"the upstream sent no answer within {idle + READ_MARGIN_SECONDS:g} s"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return 502, f"the upstream closed the connection before its answer ({detail})"
    if isinstance(exc, aiohttp.ClientResponseError):
        text = str(exc.message)
        if "content-encoding" in text.lower():
            return 502, f"the upstream answered in an encoding the proxy cannot decode ({text})"
        return 502, f"the upstream's answer is not valid HTTP ({_quoted(text, 200)})"
    return 502, f"the request to the upstream failed ({detail})"


def _error_body(
    entry: Provider | None,
    request: web.Request | None,
    message: str,
    status: int,
    param: str | None = None,
) -> bytes:
    """The proxy's own error, in the shape the client's SDK reads (`_speaker`)."""
    path = request.rel_url.raw_path if request is not None else "/"
    return _speaker(entry, request, path).client_error_body(status, message, param)


# --- running it ------------------------------------------------------------------------------


def build_app(
    config: ProxyConfig, log: Callable[[ProxyRecord], None] | None = None
) -> web.Application:
    """The aiohttp application of one proxy (its upstream session opens with the app). Run
    it with its own runner (`serving`, `app_factory`) for the head timeout and the proxy's
    answer to a request aiohttp cannot parse."""
    return _Proxy(config, log).application()


@contextlib.asynccontextmanager
async def serving(
    config: ProxyConfig,
    log: Callable[[ProxyRecord], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> AsyncIterator[RunningProxy]:
    """A proxy listening on `config.host:config.port` for the duration of the block (then
    stopped with the config's grace). `log` is called once per request, when it ends; `warn`
    with a line about the server itself (connections it cannot accept; default: the
    `lockgate.proxy` logger). An address that cannot be bound raises OSError before the
    block."""
    state = _Proxy(config, log, warn)
    runner = state.runner()
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    host = f"[{config.host}]" if ":" in config.host else config.host
    running = RunningProxy(f"http://{host}:{port}", state, runner)
    try:
        yield running
    finally:
        await running.stop()


# --- gunicorn ---------------------------------------------------------------------------------

_log = logging.getLogger("lockgate.proxy")


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


def _float_variable(
    env: Mapping[str, str], name: str, default: float, *, positive: bool = False
) -> float:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        rule = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be a {rule} number of seconds")
    return value


def _whole_variable(env: Mapping[str, str], name: str, default: int) -> int:
    text = (env.get(name) or "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name} must be a whole number from 1")
    return int(text)


def _flag_variable(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    text = (env.get(name) or "").strip().lower()
    if not text:
        return default
    if text in ("0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise ValueError(f"{name} must be 1 or 0")


def limit_variable(field_name: str) -> str:
    """The environment variable of a `GateLimits` bound (`max_calls`: `LOCKGATE_MAX_CALLS`);
    the command line's flag is `--max-calls`."""
    return "LOCKGATE_" + field_name.upper()


def _read_secret_file(variable: str, path_text: str) -> str:
    """The secret in the file `path_text` names (systemd credentials, docker secrets): one
    line, its line break dropped. Only a regular file is read (a FIFO would wait: it is
    opened without waiting, and refused)."""
    try:
        descriptor = os.open(path_text, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(f"{variable} names {path_text}, which cannot be read ({reason})") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ValueError(f"{variable} names {path_text}, which is not a regular file")
        data = b""
        while len(data) <= MAX_SECRET_FILE_BYTES:
            piece = os.read(descriptor, MAX_SECRET_FILE_BYTES + 1 - len(data))
            if not piece:
                break
            data += piece
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(f"{variable} names {path_text}, which cannot be read ({reason})") from None
    finally:
        os.close(descriptor)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ValueError(f"{variable}: {path_text} is larger than {MAX_SECRET_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ValueError(f"{variable}: {path_text} is not UTF-8 text") from None
    if not text:
        raise ValueError(f"{variable}: {path_text} holds no key")
    problem = api_key_problem(text)
    if problem is not None:
        raise ValueError(f"{variable}: {problem}")
    return text


def _secret(env: Mapping[str, str], base: str) -> tuple[str | None, str | None]:
    """The secret `LOCKGATE_{base}_FILE` or `LOCKGATE_{base}_ENV` gives (one of them), and
    the variable that held it (None for a file)."""
    by_name = env.get(f"LOCKGATE_{base}_ENV")
    by_file = env.get(f"LOCKGATE_{base}_FILE")
    if by_name and by_file:
        raise ValueError(f"give LOCKGATE_{base}_ENV or LOCKGATE_{base}_FILE, not both")
    if by_file:
        return _read_secret_file(f"LOCKGATE_{base}_FILE", by_file), None
    if not by_name:
        return None, None
    value = env.get(by_name)
    if not value:
        raise ValueError(f"LOCKGATE_{base}_ENV names {by_name}, which is not set")
    problem = api_key_problem(value)
    if problem is not None:
        raise ValueError(f"{by_name}: {problem}")
    return value, by_name


def _environment_config(env: Mapping[str, str]) -> tuple[ProxyConfig, list[str]]:
    """The config, and the variables that held its secrets (to wipe)."""
    from ..client import DEFAULT_DEADLINE_SECONDS, DEFAULT_IDLE_TIMEOUT_SECONDS
    from .engine import DEFAULT_KEEPALIVE_SECONDS

    upstream = env.get("LOCKGATE_UPSTREAM")
    if not upstream:
        raise ValueError("LOCKGATE_UPSTREAM is not set")
    hold: Hold
    given = env.get("LOCKGATE_HOLD") or "tools"
    if given == "tools":
        hold = "tools"
    elif given == "terminal":
        hold = "terminal"
    else:
        raise ValueError("LOCKGATE_HOLD must be tools or terminal")
    defaults = GateLimits()
    limits = GateLimits(
        **{
            bound.name: _whole_variable(
                env, limit_variable(bound.name), getattr(defaults, bound.name)
            )
            for bound in dataclasses.fields(GateLimits)
        }
    )
    gating = GatingOptions(
        limits=limits,
        idle_timeout=_float_variable(
            env, "LOCKGATE_IDLE_TIMEOUT", DEFAULT_IDLE_TIMEOUT_SECONDS, positive=True
        ),
        deadline=_float_variable(env, "LOCKGATE_DEADLINE", DEFAULT_DEADLINE_SECONDS, positive=True),
        keepalive_interval=_float_variable(
            env, "LOCKGATE_KEEPALIVE", DEFAULT_KEEPALIVE_SECONDS, positive=True
        ),
        validate_schemas=_flag_variable(env, "LOCKGATE_VALIDATE_SCHEMAS", default=True),
        hold=hold,
    )
    hosts = tuple(
        name for name in re.split(r"[\s,]+", env.get("LOCKGATE_ALLOW_HOSTS") or "") if name
    )
    for name in hosts:
        if (problem := host_name_problem(name)) is not None:
            raise ValueError(f"LOCKGATE_ALLOW_HOSTS: {problem}")
    api_key, key_variable = _secret(env, "API_KEY")
    client_token, token_variable = _secret(env, "CLIENT_TOKEN")
    if api_key is not None and client_token is None:
        # The listen address is gunicorn's, not visible here: a held key always needs a
        # client token, or the proxy may be an open relay with the key.
        raise ValueError(
            "a proxy that holds a key (LOCKGATE_API_KEY_FILE or LOCKGATE_API_KEY_ENV) needs "
            "LOCKGATE_CLIENT_TOKEN_FILE or LOCKGATE_CLIENT_TOKEN_ENV"
        )
    config = ProxyConfig(
        upstream,
        gating=gating,
        api_key=api_key,
        client_token=client_token,
        max_streams=_whole_variable(env, "LOCKGATE_MAX_STREAMS", DEFAULT_MAX_STREAMS),
        grace_seconds=_float_variable(env, "LOCKGATE_GRACE", 10.0),
        allow_hosts=hosts,
        key_on_any_path=_flag_variable(env, "LOCKGATE_KEY_ON_ANY_PATH"),
        head_timeout=_float_variable(
            env, "LOCKGATE_HEAD_TIMEOUT", DEFAULT_HEAD_TIMEOUT, positive=True
        ),
        max_held_bytes=_whole_variable(env, "LOCKGATE_MAX_HELD_BYTES", DEFAULT_MAX_HELD_BYTES),
    )
    return config, [name for name in (key_variable, token_variable) if name]


def config_from_environment(environ: Mapping[str, str] | None = None) -> ProxyConfig:
    """A `ProxyConfig` from the environment; ValueError (one line, never quoting a secret)
    when a setting is unusable.

    `LOCKGATE_UPSTREAM` (required); the key and the client token from a file
    (`LOCKGATE_API_KEY_FILE`, `LOCKGATE_CLIENT_TOKEN_FILE`: a path, e.g. under
    `$CREDENTIALS_DIRECTORY` or `/run/secrets`) or from a variable whose name is given
    (`LOCKGATE_API_KEY_ENV`, `LOCKGATE_CLIENT_TOKEN_ENV`); `LOCKGATE_HOLD`,
    `LOCKGATE_IDLE_TIMEOUT`, `LOCKGATE_DEADLINE`, `LOCKGATE_KEEPALIVE`,
    `LOCKGATE_VALIDATE_SCHEMAS` (`0` turns it off), `LOCKGATE_MAX_STREAMS`, `LOCKGATE_GRACE`,
    `LOCKGATE_HEAD_TIMEOUT`, `LOCKGATE_ALLOW_HOSTS` (names, comma- or space-separated),
    `LOCKGATE_KEY_ON_ANY_PATH` (`1`), and one variable per gate bound
    (`LOCKGATE_MAX_CALLS`, `LOCKGATE_MAX_ARGUMENT_CHARS`, `LOCKGATE_MAX_TEXT_CHARS`,
    `LOCKGATE_MAX_REASONING_CHARS`, `LOCKGATE_MAX_NATIVE_ITEMS`,
    `LOCKGATE_MAX_NATIVE_BYTES`)."""
    return _environment_config(os.environ if environ is None else environ)[0]


async def app_factory() -> web.AppRunner:
    """The proxy for gunicorn's aiohttp worker, configured from the environment
    (`config_from_environment`): `gunicorn lockgate.proxy.server:app_factory --worker-class
    aiohttp.GunicornWebWorker`. It returns the proxy's own runner (the worker uses it as it
    is): the head timeout is `LOCKGATE_HEAD_TIMEOUT` (not gunicorn's `--keep-alive`) and the
    grace period `LOCKGATE_GRACE` (keep it below gunicorn's `--graceful-timeout`). Each
    request is logged on the `lockgate.proxy` logger. A secret read from a variable leaves
    `os.environ`, but the environment block every gunicorn process was started with (what
    /proc/PID/environ shows) keeps it: `LOCKGATE_API_KEY_FILE` and
    `LOCKGATE_CLIENT_TOKEN_FILE` keep it out of every process's environment.

    A setting it cannot use: one line on stderr (`lockgate proxy: REASON`) and exit 4,
    gunicorn's code for an application that cannot load (its master stops instead of
    starting workers again)."""
    try:
        config, variables = _environment_config(os.environ)
    except ValueError as exc:
        print(f"lockgate proxy: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(APP_LOAD_ERROR) from None
    for variable in variables:
        os.environ.pop(variable, None)  # read once (/proc/PID/environ still shows it)
    return _Proxy(config, _environment_log).runner()
