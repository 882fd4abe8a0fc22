"""One request, after the proxy admitted it: sent to its route's upstream (and, where the
route allows, again, or to a fall-back, while nothing of the answer has reached the
client), and its answer passed, gated or judged back to the client (written by
`respond.Responder`, its head once). Its body was read and parsed by `admit.py`.

- **A protocol request** (`routes.route`), its body a JSON object. Its answer: an error
  status passes with its headers and its body under the error-body cap; a 2xx stream goes
  through the engine (`GatingStream`); a 2xx whole answer is judged (`judge_whole`). A body
  that is not a JSON object is sent as it is (the upstream's API owns request validation)
  and its error passes back; a 2xx answer to it cannot be judged and is refused (502).
- **Anything else** passes unchanged, its answer streamed back as it comes.
- **Retries** (`RouteRetries`, off unless the route asks): a protocol request whose answer
  was refused for a transient reason (a 408, 409, 429 or 5xx the provider does not call
  final; no answer at all; a stream that broke, was cut, fell silent or reported a
  transient error) is sent again, to the next of the route's upstreams in turn (its
  fall-backs, then the first again), while nothing of the answer has reached the client:
  a stream's start is held until its first content event. It waits the retry owner's
  backoff, or the server's `retry-after` when longer; a wait beyond the route's `max_wait`
  is not waited and not passed on: the client is told not to retry, the wait in the
  message. The final answer after spent retries says `x-should-retry: false`, so that the
  client's own retries do not multiply them. An upstream comment before the first content
  (OpenRouter's `: OPENROUTER PROCESSING`) goes out as a keep-alive, and with it the head:
  retries go on (the client saw nothing of the answer), but a failure after that head (an
  error status, no answer, a refusal) ends the open stream with the protocol's refusal
  frame, and the log records the status that was sent.
- **A held key** goes in its protocol's header (a `key` in the query is the client's:
  dropped); whatever the upstream echoes of it reaches the client as `[redacted]`, and a
  stream or whole answer is redacted before it is judged. An answer in a transfer coding
  other than chunked (never asked for: the proxy sends no `TE`) is refused with a 502, as
  its bytes would pass still coded, beyond redaction.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ..conversation import ToolSpec
from ..gateway import Gateway, ProtocolTarget, Refusal
from ..http import ERROR_BODY_CAP_BYTES, describe
from ..providers.base import Provider
from ..retry import RetryPolicy, standard_wait
from .access import quoted
from .admit import Body, Shared, declared_tools
from .engine import (
    MAX_WHOLE_BYTES,
    GatingStream,
    Refused,
    capped_body,
    forwarded_headers,
    gates,
    judge_whole,
)
from .flow import Flow
from .respond import DONT_RETRY, Responder, close_quietly, failed, unjudged
from .upstream import (
    ResumableUpstreamBody,
    RouteRuntime,
    UpstreamBody,
    UpstreamRuntime,
    client_credentials,
    client_headers,
    decodes,
    failure_before_answer,
    finish,
    transfer_coding_problem,
    upstream_headers,
    upstream_url,
)

__all__ = ["OFFLOAD_BYTES", "ProxyExchange", "RouteRuntime", "UpstreamRuntime"]

OFFLOAD_BYTES = 1024 * 1024  # a whole response this large is judged off the event loop
# The retry owner's backoff between attempts (its jitter and growth; the route's `max_wait`
# bounds a server's wait instead).
_BACKOFF = RetryPolicy(attempts=11, base_delay=0.25, max_delay=8.0)
_WAIT_HEADERS = frozenset({"retry-after", "retry-after-ms", "x-should-retry"})


def _json(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Unanswered:
    status: int
    reason: str


class _Retry(Exception):
    """This attempt's answer was refused for a transient reason, unseen: try again."""

    def __init__(self, wait: float | None = None) -> None:
        super().__init__()
        self.wait = wait


@dataclass(eq=False, slots=True)
class ProxyExchange:
    """One admitted request through its route (see the module docstring): the one object
    passed forward. Admission fills in the request's side (its route, protocol, speaker and
    body, `admit.py`); the attempts, its answer; `respond` writes to the client."""

    shared: Shared  # what the process lends every stage
    request: web.Request
    flow: Flow  # the record observers read
    route: RouteRuntime
    entry: Provider | None  # the protocol's provider (None: passed through)
    gateway: Gateway | None
    target: ProtocolTarget | None
    speaker: Gateway  # whose error shape the proxy's own answers take
    body: Body  # as admitted: its bytes and its JSON object
    # The client's answer: written there only, its head once (`Responder.commit`).
    respond: Responder = field(init=False)
    # The refusal of the proxy's own answer (an error it gives), for a stream whose head
    # already went: its frame ends that stream instead (`_refuse_in_stream`).
    _refusal: Refusal | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.respond = Responder(self.request, self.flow, self.route.settings.gating.idle_timeout)

    @property
    def parsed(self) -> Mapping[str, Any] | None:
        """The request body's JSON object (None: not a protocol request, or not an object)."""
        return self.body.parsed

    # --- the request -----------------------------------------------------------------------

    async def run(self) -> web.StreamResponse:
        try:
            return await self._attempts()
        finally:
            self.respond.stop()

    async def _attempts(self) -> web.StreamResponse:
        """Each attempt in turn, while the route allows one more and nothing was seen."""
        route = self.route
        retries = route.settings.retries
        attempt = 0
        while True:
            upstream = route.upstreams[attempt % len(route.upstreams)]
            self._refusal = None
            self.flow.retries = attempt
            if upstream.index:
                self.flow.fallbacks += 1
            # A head that went out carried only keep-alives (an upstream comment while the
            # start was held): nothing of the answer was seen, so a retry is still unseen.
            can_retry = self.gateway is not None and attempt < retries.attempts
            try:
                answer = await self._attempt(upstream, can_retry, spent=attempt > 0)
            except _Retry as retry:
                attempt += 1
                wait = _BACKOFF.backoff(attempt)
                if retry.wait is not None:
                    wait = max(wait, retry.wait)
                await asyncio.sleep(wait)
                continue
            if self.respond.response is not None and answer is not self.respond.response:
                return await self._refuse_in_stream()
            return answer

    async def _attempt(
        self, upstream: UpstreamRuntime, can_retry: bool, *, spent: bool
    ) -> web.StreamResponse:
        shared, flow, request = self.shared, self.flow, self.request
        response = await self._open(upstream)
        if isinstance(response, _Unanswered):
            if can_retry:
                raise _Retry()
            return self._failed(response.status, response.reason, spent=spent)
        try:
            encoding = response.headers.get("content-encoding", "")
            if encoding and encoding.strip().lower() != "identity" and not decodes(encoding):
                reason = (
                    f"the upstream answered with Content-Encoding {quoted(encoding, 80)}, "
                    "which the proxy cannot decode"
                )
                return self._failed(502, reason, spent=spent)
            coding = transfer_coding_problem(response.headers.getall("transfer-encoding", []))
            if coding is not None:
                return self._failed(502, coding, spent=spent)
            status = response.status
            if shared.recorder is not None and self.entry is not None:
                flow.exchange = shared.recorder.exchange(
                    self.entry.name,
                    upstream.url,
                    request.method,
                    flow.upstream_path,
                    self.parsed,
                    secrets=client_credentials(
                        request.headers, request.rel_url.query.getall("key", [])
                    ),
                )
                flow.exchange.head(status, forwarded_headers(response.headers).items())
            headers = client_headers(response, upstream.redactor)
            flow.status = status
            if self.gateway is None or self.entry is None:
                flow.outcome = "forwarded"
                capped = not 200 <= status < 300
                redactor = upstream.redactor
                return await self.respond.passed(response, status, headers, capped, redactor)
            if not 200 <= status < 300:
                return await self._error_status(response, status, headers, can_retry, spent)
            if self.parsed is None:
                return self._unjudged(
                    "malformed_event",
                    "the request is not a JSON object, so its answer cannot be judged",
                )
            assert self.target is not None  # routed: a protocol request has its target
            try:
                tools = declared_tools(shared, self.gateway, self.parsed, self.route, self.flow)
            except Exception as exc:  # a request whose tools cannot be read
                return self._unjudged("internal_error", f"the request's tools ({describe(exc)})")
            if gates(self.gateway, self.parsed, status, self.target):
                return await self._gate(response, tools, headers, upstream, can_retry)
            return await self._whole(response, tools, headers, upstream, can_retry, spent)
        finally:
            finish(response)
            if flow.exchange is not None:
                flow.exchange.decide(flow.verdict)
                flow.exchange.finish()
                flow.exchange = None

    async def _open(self, upstream: UpstreamRuntime) -> aiohttp.ClientResponse | _Unanswered:
        """The request sent to `upstream` (its model in place of the request's, for a
        fall-back that names one)."""
        request, shared = self.request, self.shared
        path, body = self.flow.upstream_path, self.body.raw
        if upstream.model is not None and self.gateway is not None and self.parsed is not None:
            path, rewritten = self.gateway.with_model(path, self.parsed, upstream.model)
            body = json.dumps(rewritten).encode()
        # Per attempt: this upstream's held key replaces the client's credentials (a `key=`
        # in the query too); the client token never goes, whichever upstream this is.
        query = shared.access.upstream_query(request.rel_url, held=upstream.key is not None)
        url = upstream_url(upstream.url, path, None, query)
        headers = shared.access.without_token(
            upstream_headers(
                request.headers,
                request.headers.getall("connection", []),
                key=upstream.key,
                key_header=upstream.key_header or self.speaker.key_header,
            )
        )
        gating = self.route.settings.gating
        assert shared.session is not None
        try:
            response = await shared.session.request(
                request.method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                timeout=self.route.client_timeout,
            )
        except Exception as exc:  # no answer: cannot connect, or it failed before its head
            if isinstance(exc, asyncio.CancelledError):  # pragma: no cover
                raise
            status, reason = failure_before_answer(exc, gating.idle_timeout)
            return _Unanswered(status, reason)
        return response

    # --- answers ---------------------------------------------------------------------------

    async def _error_status(
        self,
        response: aiohttp.ClientResponse,
        status: int,
        headers: CIMultiDict[str],
        can_retry: bool,
        spent: bool,
    ) -> web.StreamResponse:
        """An error status: passed as it came (its body under the cap), or retried unseen
        when the provider says a new request may succeed. A server's wait longer than the
        route's `max_wait` is neither waited nor passed on: the client is told not to retry,
        the wait in the message; after spent retries, `x-should-retry: false`."""
        assert self.entry is not None
        flow = self.flow
        flow.outcome = "forwarded"
        max_wait = self.route.settings.retries.max_wait
        wait = standard_wait(response.headers, time.time())
        if can_retry and (wait is None or wait <= max_wait):
            body = await self._capped(response)
            if body is not None:
                failure = self.entry.classify_error(status, _json(body), response.headers)
                if failure.retryable and (
                    failure.retry_after is None or failure.retry_after <= max_wait
                ):
                    raise _Retry(failure.retry_after)
                wait = failure.retry_after
            if wait is None or wait <= max_wait:
                if body is None:
                    return self._failed(502, "the upstream's error body broke off", spent=spent)
                if self.respond.committed:
                    return self._late_status(response, status, body)
                return web.Response(status=status, body=body, headers=headers)
        if wait is not None and wait > max_wait:
            message = (
                f"lockgate proxy: the upstream answered HTTP {status} and asks to wait "
                f"{wait:g} s before a new request, longer than this route waits "
                f"({max_wait:g} s): not retried, do not retry"
            )
            flow.reason = f"opening: {message}"
            self._refusal = Refusal("opening", message, False, 0)
            sent = CIMultiDict(
                (name, value)
                for name, value in headers.items()
                if name.lower() not in _WAIT_HEADERS and name.lower() != "content-type"
            )
            sent["content-type"] = "application/json"
            sent[DONT_RETRY[0]] = DONT_RETRY[1]
            error = self.speaker.client_error_body(status, message)
            return web.Response(status=status, body=error, headers=sent)
        if self.respond.committed:
            return self._late_status(response, status, await self._capped(response))
        if spent:
            headers = headers.copy()
            headers[DONT_RETRY[0]] = DONT_RETRY[1]  # in place of any case of it
        redactor = self.route.client_redactor
        return await self.respond.passed(response, status, headers, True, redactor)

    def _late_status(
        self, response: aiohttp.ClientResponse, status: int, body: bytes | None
    ) -> web.Response:
        """An error status after the client's head went out (a keep-alive before a retry):
        neither its status nor its body can follow that head, so it becomes the refusal
        `_refuse_in_stream` sends, which says the status and the upstream's message."""
        assert self.entry is not None
        failure = self.entry.classify_error(
            status, _json(body) if body is not None else None, response.headers
        )
        excerpt = ""
        if body:
            excerpt = f": {quoted(body.decode('utf-8', 'replace'), 300)}"
        reason = self.shared.redact(f"the upstream answered HTTP {status}{excerpt}")
        self.flow.outcome = "error"
        self.flow.reason = f"opening: {reason}"
        self._refusal = Refusal("opening", f"lockgate proxy: {reason}", failure.retryable, 0)
        return web.Response(status=status)

    async def _capped(self, response: aiohttp.ClientResponse) -> bytes | None:
        """An error body, its first `ERROR_BODY_CAP_BYTES` (None: it broke off)."""
        pieces: list[bytes] = []
        body = UpstreamBody(response, self.flow.exchange, self.route.client_redactor)
        try:
            async for piece in capped_body(body, ERROR_BODY_CAP_BYTES):
                pieces.append(piece)
        except Exception:
            return None
        return b"".join(pieces)

    async def _gate(
        self,
        upstream: aiohttp.ClientResponse,
        tools: Sequence[ToolSpec],
        headers: CIMultiDict[str],
        runtime: UpstreamRuntime,
        can_retry: bool,
    ) -> web.StreamResponse:
        """The 2xx stream through the engine. With a retry left, the head and the stream's
        start wait for its first content: a transient refusal before it is retried unseen."""
        assert self.entry is not None
        assert self.parsed is not None
        flow = self.flow
        # Redacted before it is judged: the client reads what the gate judged. Unless it is
        # recorded (a tap reads it), the engine reads it in its own task, its one timer
        # bounding the silence (`engine.ResumableBody`).
        body = (
            ResumableUpstreamBody(upstream, runtime.redactor)
            if flow.exchange is None
            else UpstreamBody(upstream, flow.exchange, runtime.redactor)
        )
        stream = GatingStream(
            self.entry,
            self.parsed,
            body,
            self.route.settings.gating,
            observer=flow.observe,
            redact=self.shared.redact,
            started_at=flow.started,
            budget=self.shared.held,
            tools=tools,
            hold_preamble=can_retry,
        )
        respond = self.respond
        response = None if can_retry else await respond.commit(flow.status, headers)
        pieces = aiter(stream)
        left = False
        try:
            async for piece in pieces:
                outcome = stream.outcome
                if (
                    isinstance(outcome, Refused)
                    and can_retry
                    and not stream.sent_content
                    and outcome.refusal.transient
                ):
                    flow.judged(outcome)
                    flow.incomplete = True
                    raise _Retry()  # the refusal frame is not sent: nothing was seen
                if response is None:
                    response = await respond.commit(flow.status, headers)
                await respond.write(piece)
        except ConnectionError:  # the client left (or stopped reading): not an outcome
            left = True
            respond.abort()
            return response or web.Response(status=499)
        finally:
            await close_quietly(pieces)
            flow.first_read_at = stream.first_read_at
            flow.held_from = stream.held_from
            if flow.held_from is not None:
                flow.held_until = asyncio.get_running_loop().time()
            if left:
                flow.outcome = "abandoned"
            else:
                flow.judged(stream.outcome)
                if isinstance(stream.outcome, Refused):
                    flow.incomplete = stream.outcome.refusal.kind in _INCOMPLETE
        if response is None:  # an empty body judged (accepted or refused): its head now
            await respond.commit(flow.status, headers)
        return await respond.end()

    async def _whole(
        self,
        upstream: aiohttp.ClientResponse,
        tools: Sequence[ToolSpec],
        headers: CIMultiDict[str],
        runtime: UpstreamRuntime,
        can_retry: bool,
        spent: bool,
    ) -> web.StreamResponse:
        assert self.entry is not None
        assert self.parsed is not None
        flow = self.flow
        options = self.route.settings.gating
        data = bytearray()
        chunks: AsyncIterator[bytes] = upstream.content.iter_any()
        if flow.exchange is not None:
            chunks = flow.exchange.tap(chunks)
        try:
            async with asyncio.timeout_at(flow.started + options.deadline):
                async for chunk in chunks:
                    data += chunk
                    if len(data) > MAX_WHOLE_BYTES:
                        break  # judged as too large
        except TimeoutError:
            if can_retry:
                raise _Retry() from None
            reason = f"no complete response within the {options.deadline:g} s deadline"
            return self._unjudged("deadline", reason, transient=True, spent=spent)
        except Exception as exc:
            if can_retry:
                raise _Retry() from None
            reason = f"the body broke off ({describe(exc)})"
            return self._unjudged("transport", reason, transient=True, spent=spent)
        body = bytes(data)
        if runtime.redactor is not None:  # judged as the client will read it
            body = runtime.redactor.redact_bytes(body)
        judge = functools.partial(
            judge_whole,
            self.entry,
            self.parsed,
            body,
            options,
            status=flow.status,
            observer=flow.observe,
            redact=self.shared.redact,
            tools=tools,
        )
        verdict = await asyncio.to_thread(judge) if len(body) > OFFLOAD_BYTES else judge()
        outcome = verdict.outcome
        if isinstance(outcome, Refused) and outcome.refusal.transient and can_retry:
            raise _Retry()
        flow.judged(outcome)
        flow.status = verdict.status
        if isinstance(outcome, Refused):
            sent = CIMultiDict(verdict.headers)
            if spent:
                sent[DONT_RETRY[0]] = DONT_RETRY[1]
            return web.Response(
                status=verdict.status,
                body=verdict.body,
                content_type="application/json",
                headers=sent,
            )
        return web.Response(status=verdict.status, body=verdict.body, headers=headers)

    # --- refusals of the proxy's own ------------------------------------------------------

    def _failed(self, status: int, reason: str, *, spent: bool) -> web.StreamResponse:
        """No answer to pass on (`respond.failed`); its refusal kept for a stream whose head
        already went."""
        answer, self._refusal = failed(
            self.flow, self.gateway, self.speaker, status, reason, self.shared.redact, spent=spent
        )
        return answer

    def _unjudged(
        self, kind: str, reason: str, *, transient: bool = False, spent: bool = False
    ) -> web.Response:
        assert self.gateway is not None
        answer, self._refusal = unjudged(
            self.flow,
            self.gateway,
            kind,
            reason,
            self.shared.redact,
            transient=transient,
            spent=spent,
        )
        return answer

    async def _refuse_in_stream(self) -> web.StreamResponse:
        """The proxy's own answer (an error status, no answer, a refusal) when the client's
        head already went (an upstream comment passed on as a keep-alive while a retry was
        possible): a second head cannot follow it, nor an error body inside the stream. The
        open stream ends with the protocol's refusal frame, which the client's SDK raises;
        the log keeps the status that was sent."""
        flow = self.flow
        response = self.respond.response
        assert response is not None
        flow.status = response.status
        refusal = self._refusal
        if refusal is None or self.gateway is None:  # never expected: every such answer says
            refusal = Refusal(
                "internal_error", "lockgate proxy: the response failed after it began", False, 0
            )
        assert self.gateway is not None
        if flow.outcome not in ("error", "refused", "withheld"):
            flow.outcome = "error"
        return await self.respond.refused_in_stream(self.gateway.refusal_frame(refusal, None))


# The refusals that say an upstream stream did not end complete (counted apart: a 200 status
# hides them).
_INCOMPLETE = frozenset({"stream_ended", "transport", "idle_timeout", "deadline", "cleanup"})
