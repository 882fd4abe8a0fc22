"""`lockgate proxy`'s server: the gate on the wire, between any client and one upstream.

An aiohttp server that takes the client's requests and sends each to the upstream (its path
and query appended to `ProxyConfig.upstream` as they are), with one pooled client session
per server: no redirect is followed, nothing is retried (the client owns its retries), and
every body is decoded (`auto_decompress`) before it is judged or passed on.

- **Routing** (`routes.route`): a `POST …/responses`, `…/chat/completions` or `…/messages`
  is a protocol request; anything else (another path, another method: `GET /v1/models`)
  passes unchanged, its answer streamed back as it comes (hop-by-hop headers dropped).
- **A protocol request** is read as JSON. Its answer: an error status passes with its
  headers (`retry-after`, rate limits, request ids) and its body under the error-body cap; a
  2xx stream goes through the engine (`GatingStream`): forwarded as it comes until the
  first tool call, then held, released unchanged when the whole batch is valid, else ended
  with the protocol's stream error; a 2xx whole response is judged (`judge_whole`) and
  passes unchanged, or becomes a 502 with the protocol's error body. A body that is not a
  JSON object is sent as it is (the upstream's API owns request validation) and its error
  passes back; a 2xx answer to it cannot be judged and is refused (502).
- **Credentials**: the client's own (`Authorization`, `x-api-key`, `anthropic-version`, …)
  go to the configured upstream only. With `api_key` the proxy holds the key: the client's
  credentials are dropped and the key sent instead, as `Authorization: Bearer KEY` on the
  OpenAI routes and as `x-api-key: KEY` on Anthropic's (`…/messages`); on a pass-through
  path, Anthropic's form when the path has a `/messages` segment or the request carries
  `anthropic-version` (every Anthropic SDK request does), else the bearer form. The key is
  never logged: the reasons in records are redacted of it and of the client token.
- **Client token** (`client_token`): every request must carry it, in `x-lockgate-token`,
  or, when the proxy holds the key, as the client's own API key (`Authorization: Bearer
  TOKEN` or `x-api-key: TOKEN`: an SDK pointed at the proxy is given the token as its key).
  Else 401. `x-lockgate-token` never reaches the upstream.
- **Bounds**: request bodies (`max_request_bytes`, 413 beyond), aiohttp's request-head
  limits (8190-byte lines and fields, 128 headers), concurrent requests (`max_streams`:
  beyond, 503 with `retry-after`), silence (the gating idle timeout, also on connecting and
  on pass-through bodies), a deadline per gated response, error bodies capped.
- **Stopping** (`RunningProxy.stop`): no new connection is accepted and a request on an open
  one gets 503; requests in flight may finish within the grace period, then are cut.

`serving` runs one in-process; `app_factory` builds the application from the environment
for gunicorn's aiohttp worker (`gunicorn lockgate.proxy.server:app_factory --worker-class
aiohttp.GunicornWebWorker`). The proxy is stateless: several processes can stand behind one
load balancer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import os
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from ..cassette.format import Verdict
from ..cassette.recorder import CassetteRecorder, Exchange
from ..credentials import Redactor, api_key_problem
from ..gateway import HOP_BY_HOP, Gateway, Refusal
from ..http import describe
from ..jsonlimits import parse_json
from ..providers.base import Provider
from .engine import (
    MAX_WHOLE_BYTES,
    Accepted,
    GatingOptions,
    GatingStream,
    Hold,
    Refused,
    capped_body,
    forwarded_headers,
    gates,
    judge_whole,
)
from .routes import route

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_STREAMS",
    "TOKEN_HEADER",
    "Outcome",
    "ProxyConfig",
    "ProxyRecord",
    "RunningProxy",
    "app_factory",
    "build_app",
    "config_from_environment",
    "serving",
    "upstream_problem",
]

DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_STREAMS = 256
TOKEN_HEADER = "x-lockgate-token"
MAX_REQUEST_DEPTH = 256  # JSON nesting of a protocol request body
READ_MARGIN_SECONDS = 1.0  # the socket's read timeout is this much beyond the engine's own
OFFLOAD_BYTES = 1024 * 1024  # a whole response this large is judged off the event loop

# What a request is recorded as: passed (accepted by the gate), withheld (refused, tool calls
# withheld), refused (refused, none streamed), forwarded (not judged: an error status, a
# pass-through path), error (the upstream could not be reached or broke off a pass-through),
# rejected (by the proxy itself: token, size, capacity, stopping), abandoned (the client left).
Outcome = Literal["passed", "withheld", "refused", "forwarded", "error", "rejected", "abandoned"]

# Request headers never sent upstream: hop-by-hop (RFC 9110 §7.6.1), those aiohttp writes
# itself (host, length, the encodings it can decode), and the proxy's own token.
_NOT_SENT = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "expect", TOKEN_HEADER}
# The client's credentials, replaced when the proxy holds the key.
_CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})


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


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """One proxy: its upstream (`https://api.openai.com`; a request's path and query are
    appended as they are), where it listens, how streams are judged, the key it holds (it
    replaces the client's credentials upstream), the token every client must show, and its
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
        if not (math.isfinite(self.grace_seconds) and self.grace_seconds >= 0):
            raise ValueError("grace_seconds must be a non-negative number of seconds")
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
        wait = state.config.grace_seconds if grace is None else max(0.0, grace)
        for site in list(self._runner.sites):
            await site.stop()
        if self._runner.server is not None:
            self._runner.server.pre_shutdown()  # idle keep-alive connections closed
        pending = set(state.tasks)
        if pending and wait > 0:
            await asyncio.wait(pending, timeout=wait)
        for task in state.tasks:
            task.cancel()
        if state.tasks:
            await asyncio.wait(set(state.tasks), timeout=5)
        await self._runner.cleanup()


class _Body:
    """An upstream response body for the engine: its bytes as they arrive; `aclose`
    returns the connection to the pool when the body was read to its end, else closes
    it."""

    def __init__(self, response: aiohttp.ClientResponse, exchange: Exchange | None = None) -> None:
        self._response = response
        self._exchange = exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks: AsyncIterator[bytes] = self._response.content.iter_any()
        if self._exchange is not None:
            chunks = self._exchange.tap(chunks)
        async for chunk in chunks:
            yield chunk

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

    def __init__(self, config: ProxyConfig, log: Callable[[ProxyRecord], None] | None) -> None:
        self.config = config
        self.log = log
        self.redact = Redactor([s for s in (config.api_key, config.client_token) if s])
        self.session: aiohttp.ClientSession | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.active = 0
        self.answered = 0
        self.stopping = False
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
        try:
            yield
        finally:
            await self.session.close()

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_bytes)
        app.cleanup_ctx.append(self.session_context)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    # --- one request -----------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        path = request.rel_url.raw_path
        entry = route(request.method, path)
        note = _Note(request.method, path, entry.name if entry else None, loop.time())
        task = asyncio.current_task()
        counted = False
        try:
            if self.stopping:
                return self._reject(note, entry, 503, "the proxy is stopping", request)
            if not self._authorized(request):
                return self._reject(
                    note, entry, 401, "the lockgate client token is missing or wrong", request
                )
            if self.config.api_key is not None and "origin" in request.headers:
                # A browser page (a cross-site form, DNS rebinding to loopback) must never
                # spend the key the proxy holds; API clients send no Origin.
                return self._reject(
                    note,
                    entry,
                    403,
                    "a browser request may not use the key this proxy holds",
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
            return await self._proxy(request, entry, note)
        except asyncio.CancelledError:
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

    def _authorized(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        offered = [request.headers.get(TOKEN_HEADER)]
        if self.config.api_key is not None:
            bearer = request.headers.get("authorization", "")
            scheme, _, value = bearer.partition(" ")
            if scheme.lower() == "bearer":
                offered.append(value.strip())
            offered.append(request.headers.get("x-api-key"))
        return any(
            candidate is not None
            and hmac.compare_digest(candidate.encode("utf-8", "surrogateescape"), self.token)
            for candidate in offered
        )

    def _reject(
        self,
        note: _Note,
        entry: Provider | None,
        status: int,
        message: str,
        request: web.Request,
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
        body = _error_body(entry, request, f"lockgate proxy: {message}", status)
        return web.Response(status=status, body=body, headers=headers)

    def _upstream_headers(self, request: web.Request, anthropic: bool) -> CIMultiDict[str]:
        named = {
            part.strip().lower()
            for value in request.headers.getall("connection", [])
            for part in value.split(",")
        }
        held = self.config.api_key
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in request.headers.items():
            lowered = name.lower()
            if lowered in _NOT_SENT or lowered in named:
                continue
            if held is not None and lowered in _CREDENTIALS:
                continue
            headers.add(name, value)
        if held is not None:
            if anthropic:
                headers["x-api-key"] = held
            else:
                headers["authorization"] = f"Bearer {held}"
        return headers

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

    async def _proxy(
        self, request: web.Request, entry: Provider | None, note: _Note
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
            parsed = _request_object(body)
        anthropic = (entry is not None and entry.name == "anthropic") or (
            entry is None and _anthropic_pass_through(request)
        )
        assert self.session is not None
        url = URL(self.base + request.rel_url.raw_path_qs, encoded=True)
        try:
            upstream = await self.session.request(
                request.method,
                url,
                headers=self._upstream_headers(request, anthropic),
                data=body or None,
                allow_redirects=False,
            )
        except Exception as exc:  # cannot connect, timed out, refused by TLS
            if isinstance(exc, asyncio.CancelledError):  # pragma: no cover
                raise
            return self._unreachable(note, entry, gateway, request, exc)
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
        try:
            status = upstream.status
            headers = forwarded_headers(upstream.headers)
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
            if gates(gateway, parsed, status):
                return await self._gate(request, entry, parsed, upstream, headers, note)
            return await self._whole(entry, gateway, parsed, upstream, headers, note)
        finally:
            _finish(upstream)
            if note.exchange is not None:
                note.exchange.decide(note.verdict)
                note.exchange.finish()

    def _unreachable(
        self,
        note: _Note,
        entry: Provider | None,
        gateway: Gateway | None,
        request: web.Request,
        exc: BaseException,
    ) -> web.Response:
        timed_out = isinstance(exc, TimeoutError)
        status = 504 if timed_out else 502
        what = "timed out" if timed_out else "failed"
        reason = self.redact(f"connecting to the upstream {what} ({describe(exc)})")
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
        """The answer as it came (an error body under the cap); a body that breaks off
        ends the connection without a clean end, so the client sees it broke."""
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        pieces: AsyncIterator[bytes] = (
            aiter(capped_body(_Body(upstream, note.exchange)))
            if capped
            else aiter(upstream.content.iter_any())
        )
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
        upstream: aiohttp.ClientResponse,
        headers: dict[str, str],
        note: _Note,
    ) -> web.StreamResponse:
        try:
            stream = GatingStream(
                entry,
                parsed,
                _Body(upstream, note.exchange),
                self.config.gating,
                redact=self.redact,
                started_at=note.started,
            )
        except Exception as exc:  # a request whose tools cannot be read
            return self._unjudged(
                note, _gateway(entry), "internal_error", f"the request's tools ({describe(exc)})"
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
        if len(body) > OFFLOAD_BYTES:
            verdict = await asyncio.to_thread(
                judge_whole, entry, parsed, body, options, status=note.status, redact=self.redact
            )
        else:
            verdict = judge_whole(
                entry, parsed, body, options, status=note.status, redact=self.redact
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


def _gateway(entry: Provider) -> Gateway:
    assert entry.gateway is not None
    return entry.gateway()


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


def _request_object(body: bytes) -> Mapping[str, Any] | None:
    """The request body as a JSON object, or None (not UTF-8, not JSON, too deep, not an
    object)."""
    try:
        value = parse_json(body.decode("utf-8"), MAX_REQUEST_DEPTH)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if type(value) is dict else None


def _anthropic_pass_through(request: web.Request) -> bool:
    """Whether a pass-through request is Anthropic's: a `/messages` segment in its path, or
    the `anthropic-version` header every Anthropic SDK request carries."""
    segments = request.rel_url.raw_path.split("/")
    return "messages" in segments or "anthropic-version" in request.headers


def _error_body(
    entry: Provider | None, request: web.Request | None, message: str, status: int
) -> bytes:
    """The proxy's own error, in the shape the client's SDK reads: Anthropic's
    (`{"type": "error", "error": {...}}`) or OpenAI's (`{"error": {...}}`)."""
    anthropic = (entry is not None and entry.name == "anthropic") or (
        entry is None and request is not None and _anthropic_pass_through(request)
    )
    kinds = {
        401: ("authentication_error", "invalid_api_key"),
        413: ("request_too_large", "request_too_large"),
        502: ("api_error", "bad_gateway"),
        503: ("overloaded_error", "overloaded"),
        504: ("api_error", "gateway_timeout"),
    }
    kind, code = kinds.get(status, ("api_error", "proxy_error"))
    if anthropic:
        payload: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        error_type = "invalid_request_error" if status in (401, 413) else "server_error"
        payload = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return json.dumps(payload).encode()


# --- running it ------------------------------------------------------------------------------


def build_app(
    config: ProxyConfig, log: Callable[[ProxyRecord], None] | None = None
) -> web.Application:
    """The aiohttp application of one proxy (its upstream session opens with the app)."""
    return _Proxy(config, log).application()


@contextlib.asynccontextmanager
async def serving(
    config: ProxyConfig, log: Callable[[ProxyRecord], None] | None = None
) -> AsyncIterator[RunningProxy]:
    """A proxy listening on `config.host:config.port` for the duration of the block (then
    stopped with the config's grace). `log` is called once per request, when it ends. An
    address that cannot be bound raises OSError before the block."""
    state = _Proxy(config, log)
    runner = web.AppRunner(
        state.application(),
        access_log=None,
        handle_signals=False,
        handler_cancellation=True,
        shutdown_timeout=1.0,
    )
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


def _float_variable(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds") from None


def config_from_environment(environ: Mapping[str, str] | None = None) -> ProxyConfig:
    """A `ProxyConfig` from `LOCKGATE_UPSTREAM` (required), `LOCKGATE_API_KEY_ENV` and
    `LOCKGATE_CLIENT_TOKEN_ENV` (the names of the variables holding the key and the token),
    `LOCKGATE_HOLD`, `LOCKGATE_IDLE_TIMEOUT`, `LOCKGATE_DEADLINE`, `LOCKGATE_KEEPALIVE`,
    `LOCKGATE_VALIDATE_SCHEMAS` (`1`) and `LOCKGATE_MAX_STREAMS`; ValueError when one is
    unusable."""
    from ..client import DEFAULT_DEADLINE_SECONDS, DEFAULT_IDLE_TIMEOUT_SECONDS
    from .engine import DEFAULT_KEEPALIVE_SECONDS

    env = os.environ if environ is None else environ
    upstream = env.get("LOCKGATE_UPSTREAM")
    if not upstream:
        raise ValueError("LOCKGATE_UPSTREAM is not set")

    def secret(variable: str) -> str | None:
        name = env.get(variable)
        if not name:
            return None
        value = env.get(name)
        if not value:
            raise ValueError(f"{variable} names {name}, which is not set")
        return value

    hold: Hold
    given = env.get("LOCKGATE_HOLD") or "tools"
    if given == "tools":
        hold = "tools"
    elif given == "terminal":
        hold = "terminal"
    else:
        raise ValueError("LOCKGATE_HOLD must be tools or terminal")
    gating = GatingOptions(
        idle_timeout=_float_variable(env, "LOCKGATE_IDLE_TIMEOUT", DEFAULT_IDLE_TIMEOUT_SECONDS),
        deadline=_float_variable(env, "LOCKGATE_DEADLINE", DEFAULT_DEADLINE_SECONDS),
        keepalive_interval=_float_variable(env, "LOCKGATE_KEEPALIVE", DEFAULT_KEEPALIVE_SECONDS),
        validate_schemas=env.get("LOCKGATE_VALIDATE_SCHEMAS", "") in ("1", "true", "yes"),
        hold=hold,
    )
    streams = env.get("LOCKGATE_MAX_STREAMS") or str(DEFAULT_MAX_STREAMS)
    if not streams.isdigit():
        raise ValueError("LOCKGATE_MAX_STREAMS must be a whole number")
    api_key = secret("LOCKGATE_API_KEY_ENV")
    client_token = secret("LOCKGATE_CLIENT_TOKEN_ENV")
    if api_key is not None and client_token is None:
        # The listen address is gunicorn's, not visible here: a held key always needs a
        # client token, or the proxy may be an open relay with the key.
        raise ValueError(
            "a proxy that holds a key (LOCKGATE_API_KEY_ENV) needs LOCKGATE_CLIENT_TOKEN_ENV"
        )
    return ProxyConfig(
        upstream,
        gating=gating,
        api_key=api_key,
        client_token=client_token,
        max_streams=int(streams),
    )


async def app_factory() -> web.Application:
    """The application for gunicorn's aiohttp worker, configured from the environment
    (`config_from_environment`); each request is logged on the `lockgate.proxy` logger:
    `gunicorn lockgate.proxy.server:app_factory --worker-class aiohttp.GunicornWebWorker`."""
    config = config_from_environment()
    for variable in ("LOCKGATE_API_KEY_ENV", "LOCKGATE_CLIENT_TOKEN_ENV"):
        name = os.environ.get(variable)
        if name:
            os.environ.pop(name, None)  # read once: the secret leaves the environment
    return build_app(config, _environment_log)
