"""The proxy's second stage: an admitted request sent to its route's upstream (and, where the
route allows, again, or to a fall-back, while nothing of the answer has reached the client),
each answer's head sorted into one mode (pass | error | stream | whole) and taken so: passed,
gated (`engine.GatingStream`), judged whole (`engine.judge_whole`), every answer written by
`respond.py`. It owns the retry and back-off rule, the only one (`retryable`).

- **A protocol request** (`routes.route`), its body a JSON object. Its answer: an error
  status passes with its headers and its body under the error-body cap; a 2xx stream goes
  through the engine; a 2xx whole answer is judged. A body that is not a JSON object is sent
  as it is (the upstream's API owns request validation) and its error passes back; a 2xx
  answer to it cannot be judged and is refused (502).
- **Anything else** passes unchanged, its answer streamed back as it comes.
- **Retries** (`RouteRetries`, off unless the route asks; the order of attempts is the
  route's failover plan, `failover.FailoverPlan`): a protocol request whose answer was
  refused for a transient reason (a 408, 409, 429 or 5xx the provider does not call final;
  no answer at all; a stream that broke, was cut, fell silent or reported a transient
  error; with `hold: all`, any refusal but the provider's own judgement) is sent again
  while nothing of the answer has reached the client: a stream's start is held until its
  first content event. A one-off failure is tried on the same upstream first, after the
  retry owner's backoff or the server's `retry-after` when longer; silence, or a wait
  beyond the route's `max_wait`, moves to the next upstream at once; a context-window 400
  goes to the route's context fall-backs. With no attempt left, a wait beyond `max_wait`
  is not waited and not passed on: the client is told not to retry, the wait in the
  message. The route's deadline bounds every attempt and wait; an opening waits at most
  the first-byte timeout (else the silence limit). The final answer after spent retries
  says `x-should-retry: false`, so that the client's own retries do not multiply them.
  While it waits (an opening, a back-off) on a streaming request that may be retried, the
  protocol's keep-alive goes out every keep-alive interval (`_paced`), and with the first
  the head (the exchange is `committed`). An upstream comment before the first content
  (OpenRouter's `: OPENROUTER PROCESSING`) goes out as a keep-alive too. Retries go on
  after a committed head (the client saw nothing of the answer), but a failure after it
  (an error status, no answer, a refusal) ends the open stream with the protocol's
  refusal frame, and the log records the status that was sent.
- **A held key** goes in its protocol's header (a `key` in the query is the client's:
  dropped); whatever the upstream echoes of it reaches the client as `[redacted]`, and a
  stream or whole answer is redacted before it is judged. An answer in a transfer coding
  other than chunked (never asked for: the proxy sends no `TE`) is refused with a 502, as
  its bytes would pass still coded, beyond redaction.
- **Each attempt** is kept on the flow (`flow.AttemptRecord`) and told to the tracer
  (`RequestTrace.attempt`), whose trace context replaces the client's in what goes upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import TypeVar

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ..conversation import ToolSpec
from ..errors import FailureKind
from ..http import ERROR_BODY_CAP_BYTES, describe
from ..retry import RETRYABLE_STATUSES, RetryPolicy, standard_wait
from ..telemetry import AttemptTrace
from .access import quoted
from .admit import Shared, declared_tools
from .engine import GatingStream, Refused, capped_body, forwarded_headers, gates, judge_whole
from .exchange import Answer, Mode, ProxyExchange
from .failover import FailoverPlan, Step, Trouble
from .flow import AttemptRecord, Flow
from .framing import Framing, framing_for
from .respond import (
    DONT_RETRY,
    Responder,
    close_quietly,
    error_status,
    failed,
    late_status,
    too_long_a_wait,
    unjudged,
    whole,
)
from .routes import control_plane_base
from .sigv4 import aws_path, fold_repeated
from .upstream import (
    ResumableUpstreamBody,
    UpstreamBody,
    UpstreamRuntime,
    client_credentials,
    client_headers,
    decodes,
    failure_before_answer,
    finish,
    outgoing,
    transfer_coding_problem,
    upstream_url,
)
from .whole import read_whole

__all__ = ["OFFLOAD_BYTES", "attempts", "mode", "pause_before", "retryable"]

T = TypeVar("T")

OFFLOAD_BYTES = 1024 * 1024  # a whole response this large is judged off the event loop
# Refusals that say the upstream fell silent: the next upstream is tried at once.
_SILENCE = frozenset({FailureKind.IDLE_TIMEOUT.value})
# Refusals a retry does not route around, even when the whole answer is held: the provider's
# own judgement of the content (a filter, a refusal, a safety stop), the request's or the
# account's fault, the proxy's own bounds, the route's deadline.
_FINAL_KINDS = frozenset(
    {
        FailureKind.RESPONSE_INCOMPLETE.value,
        FailureKind.QUOTA_EXHAUSTED.value,
        FailureKind.CONTEXT_WINDOW.value,
        FailureKind.BOUND_EXCEEDED.value,
        FailureKind.DEADLINE.value,
        FailureKind.OPENING.value,
    }
)
# The retry owner's backoff between attempts (its jitter and growth; the route's `max_wait`
# bounds a server's wait instead).
_BACKOFF = RetryPolicy(attempts=11, base_delay=0.25, max_delay=8.0)


def _json(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None


class _Retry(Exception):
    """This attempt's answer was refused for a transient reason, unseen: try again (`why`:
    a short kind, for the flow's record of the attempt; `trouble`: which attempt comes
    next, `failover.FailoverPlan`)."""

    def __init__(
        self,
        why: str,
        wait: float | None = None,
        trouble: Trouble = "once",
        *,
        refused: bool = False,
    ) -> None:
        super().__init__(why)
        self.why = why
        self.wait = wait
        self.trouble = trouble
        self.refused = refused  # the gate refused the answer (`why` is the refusal's kind)


def retryable(
    x: ProxyExchange,
    transient: bool = True,
    wait: float | None = None,
    trouble: Trouble = "once",
) -> bool:
    """The one retry rule: a protocol request, a `transient` failure, nothing of this answer
    seen by the client, an attempt left in the route's failover plan for this `trouble` (a
    server's `wait` beyond the route's `max_wait` never delays the same upstream: the next
    one then, or none), and the route's deadline not reached by the time it would start. A
    head already `committed` does not stop it while it carried only keep-alives (`x.seen`
    says content went); after it, a failure ends the open stream in-band
    (`Responder.refuse_in_stream`) instead of a second head."""
    assert x.route is not None
    if not transient or x.gateway is None or x.seen or x.plan is None:
        return False
    if wait is not None and wait > x.route.settings.retries.max_wait:
        trouble = "wait_too_long"
    step = x.plan.peek(trouble)
    if step is None:
        return False
    pause = pause_before(step, wait)
    return time.monotonic() + pause < x.deadline_at


def pause_before(step: Step, wait: float | None) -> float:
    """The wait before `step`: the back-off (or the server's longer wait) before trying the
    same upstream again; none before another upstream."""
    if not step.same:
        return 0.0
    pause = _BACKOFF.backoff(step.tries)
    return pause if wait is None else max(pause, wait)


def mode(x: ProxyExchange, status: int) -> Mode:
    """An answer head's one mode: passed (not a protocol request), an error status, a 2xx
    stream through the gate, a 2xx whole answer judged (`engine.gates`)."""
    if x.gateway is None or x.entry is None:
        return "pass"
    if not 200 <= status < 300:
        return "error"
    parsed, target = x.parsed, x.target
    if parsed is not None and target is not None and gates(x.gateway, parsed, status, target):
        return "stream"
    return "whole"


def _responder(x: ProxyExchange) -> Responder:
    assert x.respond is not None  # admitted
    return x.respond


async def attempts(x: ProxyExchange, shared: Shared) -> web.StreamResponse:
    """Each attempt in turn, as the route's failover plan orders them, while the retry rule
    allows one more; the answer written."""
    assert x.route is not None
    route, flow, respond = x.route, x.flow, _responder(x)
    plan = x.plan = FailoverPlan(route.settings, flow.request_model)
    x.deadline_at = flow.started + route.settings.gating.deadline
    x.last_sent = flow.started
    x.attempt = 0
    step = plan.first
    while True:
        upstream = route.upstreams[step.index]
        x.upstream, x.model = upstream, step.model
        x.status, x.answer, x.refusal, x.seen = None, None, None, False
        flow.retries = x.attempt
        if x.attempt:
            flow.next_attempt()
        if upstream.index:
            flow.fallbacks += 1
        try:
            answer = await _attempt(x, shared, upstream)
        except _Retry as retry:
            trouble = retry.trouble
            if retry.wait is not None and retry.wait > route.settings.retries.max_wait:
                trouble = "wait_too_long"
            following = plan.next(trouble)
            assert following is not None  # `retryable` said there is one
            x.attempt += 1
            pause = min(pause_before(following, retry.wait), x.deadline_at - time.monotonic())
            await _paced(x, asyncio.sleep(max(0.0, pause)))
            step = following
            continue
        flow.retries_exhausted = x.attempt > 0 and failed_as_retried(flow)
        if respond.response is not None and answer is not respond.response:
            return await respond.refuse_in_stream(x.gateway, x.refusal)
        return answer


# --- keep-alives while the client waits on a retry -------------------------------------------


def _paces(x: ProxyExchange) -> tuple[Framing, float] | None:
    """The framing whose keep-alives go out, and how often, while the proxy waits on an
    opening or between attempts (None: it sends none): a streaming protocol request that
    may be retried, is being retried (the wait before its last attempt, and that attempt's
    opening, included) or whose whole answer is held, on a wire that has keep-alives."""
    assert x.route is not None
    gating = x.route.settings.gating
    if x.gateway is None or x.target is None or x.parsed is None or x.seen:
        return None
    if not gates(x.gateway, x.parsed, 200, x.target):
        return None
    retrying = x.attempt > 0 or x.committed  # the client already waits on a retry
    if gating.hold != "all" and not retrying and (x.plan is None or x.plan.peek("once") is None):
        return None
    framing = framing_for(x.target.framing, x.gateway)
    if framing.keepalive() is None:
        return None
    return framing, gating.keepalive_interval


async def _paced(x: ProxyExchange, waiting: Awaitable[T]) -> T:
    """`waiting` awaited in this task; meanwhile, for a client that may wait long
    (`_paces`), the protocol's keep-alive whenever nothing was sent for the keep-alive
    interval (the first commits a 200 head: every later failure then ends the stream
    in-band). A timer starts each keep-alive's write; none is cut short."""
    paces = _paces(x)
    if paces is None:
        return await waiting
    framing, interval = paces
    loop = asyncio.get_running_loop()
    writes: list[asyncio.Task[None]] = []
    handle: asyncio.TimerHandle | None = None

    def due() -> float:
        return loop.time() + max(0.0, x.last_sent + interval - time.monotonic())

    def fire() -> None:
        nonlocal handle
        if not writes or writes[-1].done():  # one write at a time
            writes.append(loop.create_task(_keep_alive(x, framing)))
            x.last_sent = time.monotonic()
        handle = loop.call_at(due(), fire)

    handle = loop.call_at(due(), fire)
    try:
        return await waiting
    finally:
        handle.cancel()
        for write in writes:
            with contextlib.suppress(Exception):
                await write


async def _keep_alive(x: ProxyExchange, framing: Framing) -> None:
    """One keep-alive to the client (its head first, when none went yet)."""
    respond = _responder(x)
    keepalive = framing.keepalive()
    assert keepalive is not None
    try:
        if not respond.committed:
            head = {"content-type": framing.media_type, "cache-control": "no-cache"}
            await respond.commit(200, head)
            x.flow.status = 200
        await respond.write(keepalive)
    except ConnectionError:  # the client left: the exchange notices on its next write
        respond.abort()


def failed_as_retried(flow: Flow) -> bool:
    """Whether the final answer failed as a retry would have been tried for: no answer
    (`error`), an error status the proxy retries, passed on (`forwarded`), or a stream
    that did not end complete. A refusal on its merits (an invalid batch) is the answer,
    not a failure to get one."""
    if flow.outcome == "error":
        return True
    if flow.outcome == "forwarded":
        return flow.status in RETRYABLE_STATUSES or flow.status >= 500
    return flow.outcome in ("refused", "withheld") and flow.incomplete


async def _attempt(
    x: ProxyExchange, shared: Shared, upstream: UpstreamRuntime
) -> web.StreamResponse:
    """One attempt, kept on the flow and told to the tracer."""
    flow = x.flow
    started = x.attempt_started = time.monotonic()  # observers' clock (`Flow`): not uvloop's
    number = x.attempt + 1
    trace = x.trace.attempt(number, upstream.name, upstream.index > 0)
    why: str | None = None
    refused = False
    try:
        return await _send(x, shared, upstream, trace)
    except _Retry as retry:
        why, refused = retry.why, retry.refused
        raise
    finally:
        status, fallback = x.status, upstream.index > 0
        ended = time.monotonic()
        record = AttemptRecord(
            number, upstream.name, fallback, started, ended, status, why, refused
        )
        flow.attempts.append(record)
        error = why if why is not None else _error_type(x)
        with contextlib.suppress(Exception):  # a tracer that fails never fails a request
            trace.end(status, error)


def _error_type(x: ProxyExchange) -> str | None:
    """The last attempt's failure, as a short kind (None: it did not fail)."""
    flow = x.flow
    if flow.kind is not None and flow.outcome in ("refused", "withheld"):
        return f"lockgate.{flow.kind}"
    if x.status is None:
        return "no_answer"
    if x.status >= 400 or flow.outcome == "error":
        return str(x.status)
    return None


async def _send(
    x: ProxyExchange, shared: Shared, upstream: UpstreamRuntime, trace: AttemptTrace
) -> web.StreamResponse:
    assert x.route is not None
    flow, request, respond = x.flow, x.request, _responder(x)
    limit = _opening_limit(x)
    try:
        async with asyncio.timeout(limit):
            response = await _paced(x, _open(x, shared, upstream, _trace_headers(trace)))
    except TimeoutError:
        response = 504, f"the upstream sent no answer within {limit:g} s"
    if isinstance(response, tuple):
        status, reason = response
        trouble: Trouble = "silence" if status == 504 else "once"
        if retryable(x, trouble=trouble):
            raise _Retry("no_answer", trouble=trouble)
        return _fail(x, shared, status, reason)
    x.status = response.status
    try:
        encoding = response.headers.get("content-encoding", "")
        if encoding and encoding.strip().lower() != "identity" and not decodes(encoding):
            reason = (
                f"the upstream answered with Content-Encoding {quoted(encoding, 80)}, "
                "which the proxy cannot decode"
            )
            return _fail(x, shared, 502, reason)
        coding = transfer_coding_problem(response.headers.getall("transfer-encoding", []))
        if coding is not None:
            return _fail(x, shared, 502, coding)
        status = response.status
        if shared.recorder is not None and x.entry is not None:
            flow.exchange = shared.recorder.exchange(
                x.entry.name,
                upstream.url,
                request.method,
                flow.upstream_path,
                x.parsed,
                secrets=client_credentials(
                    request.headers, request.rel_url.query.getall("key", [])
                ),
            )
            flow.exchange.head(status, forwarded_headers(response.headers).items())
        headers = client_headers(response, upstream.redactor)
        flow.status = status
        x.answer = answer = Answer(status, headers, mode(x, status))
        if answer.mode == "pass":
            flow.outcome = "forwarded"
            capped = not 200 <= status < 300
            return await respond.passed(response, status, headers, capped, upstream.redactor)
        if answer.mode == "error":
            return await _error_status(x, shared, response, status, headers)
        assert x.gateway is not None
        if x.parsed is None:
            return _unjudged(
                x,
                shared,
                "malformed_event",
                "the request is not a JSON object, so its answer cannot be judged",
            )
        try:
            tools = declared_tools(shared, x.gateway, x.parsed, x.route, flow)
        except Exception as exc:  # a request whose tools cannot be read
            return _unjudged(x, shared, "internal_error", f"the request's tools ({describe(exc)})")
        if answer.mode == "stream":
            return await _gate(x, shared, response, tools, headers, upstream)
        return await _whole(x, shared, response, tools, headers, upstream)
    finally:
        finish(response)
        if flow.exchange is not None:
            flow.exchange.decide(flow.verdict)
            flow.exchange.finish()
            flow.exchange = None


def _opening_limit(x: ProxyExchange) -> float:
    """The longest wait for an answer's head: the route's first-byte timeout (else its
    silence limit), within what is left of its deadline."""
    assert x.route is not None
    gating = x.route.settings.gating
    limit = gating.first_byte_timeout or gating.idle_timeout
    return max(0.001, min(limit, x.deadline_at - time.monotonic()))


def _trace_headers(trace: AttemptTrace) -> Mapping[str, str]:
    try:
        return trace.headers()
    except Exception:  # a tracer that fails never fails a request
        return {}


async def _open(
    x: ProxyExchange, shared: Shared, upstream: UpstreamRuntime, traced: Mapping[str, str]
) -> aiohttp.ClientResponse | tuple[int, str]:
    """The request sent to `upstream` (its model in place of the request's, for a fall-back
    that names one), the tracer's context in place of the client's; no answer: the status
    and the reason the proxy answers with."""
    assert x.route is not None
    assert x.body is not None
    assert x.speaker is not None
    request = x.request
    path, body = x.flow.upstream_path, x.body.raw
    if x.model is not None and x.gateway is not None and x.parsed is not None:
        path, rewritten = x.gateway.with_model(path, x.parsed, x.model)
        body = json.dumps(rewritten).encode()
    # Per attempt: this upstream's held key replaces the client's credentials (a `key=`
    # in the query too); the client token never goes, whichever upstream this is.
    signer = upstream.signer
    if signer is not None:
        path = aws_path(path)  # as AWS SDKs send it, and signed so
    query, headers = outgoing(
        shared.access, request, upstream, x.speaker.key_header, signed=signer is not None
    )
    url = upstream_url(control_plane_base(upstream.url, request.method, path), path, None, query)
    for name, value in traced.items():
        headers[name] = value  # in place of any the client sent (every case of its name)
    assert shared.session is not None
    if signer is not None:
        fold_repeated(headers)  # one value a name: what is signed is what is sent
        try:
            # Off the event loop: botocore may refresh credentials (I/O) and hashes the body.
            signature = await asyncio.to_thread(
                signer.sign, request.method, str(url), headers, body
            )
        except Exception as exc:  # its text may hold a credential process's output: not said
            kind = type(exc).__name__
            return 502, f"signing the request with the route's AWS credentials failed ({kind})"
        headers.update(signature)
    try:
        return await shared.session.request(
            request.method,
            url,
            headers=headers,
            data=body or None,
            allow_redirects=False,
            timeout=x.route.client_timeout,
        )
    except Exception as exc:  # no answer: cannot connect, or it failed before its head
        if isinstance(exc, asyncio.CancelledError):  # pragma: no cover
            raise
        return failure_before_answer(exc, x.route.settings.gating.idle_timeout)


# --- the answer, by its mode --------------------------------------------------------------------


async def _error_status(
    x: ProxyExchange,
    shared: Shared,
    response: aiohttp.ClientResponse,
    status: int,
    headers: CIMultiDict[str],
) -> web.StreamResponse:
    """An error status: passed as it came (its body under the cap), or retried unseen when
    the provider says a new request may succeed. A server's wait longer than the route's
    `max_wait` is neither waited nor passed on: the client is told not to retry, the wait in
    the message; after spent retries, `x-should-retry: false`."""
    assert x.entry is not None
    assert x.route is not None
    assert x.speaker is not None
    flow, respond, spent = x.flow, _responder(x), x.attempt > 0
    flow.outcome = "forwarded"
    max_wait = x.route.settings.retries.max_wait
    wait = standard_wait(response.headers, time.time())
    if _may_retry(x):
        body = await _capped(x, response)
        if body is not None:
            failure = x.entry.classify_error(status, _json(body), response.headers)
            if failure.kind is FailureKind.CONTEXT_WINDOW:
                if retryable(x, trouble="context_window"):
                    raise _Retry("context_window", trouble="context_window")
            elif retryable(x, failure.retryable, failure.retry_after):
                raise _Retry(f"status_{status}", failure.retry_after)
            wait = failure.retry_after
        if wait is None or wait <= max_wait:
            if body is None:
                return _fail(x, shared, 502, "the upstream's error body broke off")
            if respond.committed:
                return _late_status(x, shared, response, status, body)
            if spent:
                headers = _dont_retry(headers)
            return error_status(status, body, headers)
    if wait is not None and wait > max_wait:
        answer, x.refusal = too_long_a_wait(flow, x.speaker, status, headers, wait, max_wait)
        return answer
    if respond.committed:
        return _late_status(x, shared, response, status, await _capped(x, response))
    if spent:
        headers = _dont_retry(headers)
    return await respond.passed(response, status, headers, True, x.route.client_redactor)


def _may_retry(x: ProxyExchange) -> bool:
    """Whether any retry could follow this attempt (its error body is then read first)."""
    if x.gateway is None or x.seen or x.plan is None:
        return False
    troubles: tuple[Trouble, ...] = ("once", "silence", "wait_too_long", "context_window")
    return any(x.plan.peek(trouble) is not None for trouble in troubles)


def _dont_retry(headers: CIMultiDict[str]) -> CIMultiDict[str]:
    """The final answer after spent retries: the client's own retries would multiply them."""
    headers = headers.copy()
    headers[DONT_RETRY[0]] = DONT_RETRY[1]  # in place of any case of it
    return headers


def _late_status(
    x: ProxyExchange,
    shared: Shared,
    response: aiohttp.ClientResponse,
    status: int,
    body: bytes | None,
) -> web.Response:
    assert x.entry is not None
    failure = x.entry.classify_error(
        status, _json(body) if body is not None else None, response.headers
    )
    answer, x.refusal = late_status(x.flow, status, body, failure.retryable, shared.redact)
    return answer


async def _capped(x: ProxyExchange, response: aiohttp.ClientResponse) -> bytes | None:
    """An error body, its first `ERROR_BODY_CAP_BYTES` (None: it broke off)."""
    assert x.route is not None
    pieces: list[bytes] = []
    body = UpstreamBody(response, x.flow.exchange, x.route.client_redactor)
    try:
        async for piece in capped_body(body, ERROR_BODY_CAP_BYTES):
            pieces.append(piece)
    except Exception:
        return None
    return b"".join(pieces)


async def _gate(
    x: ProxyExchange,
    shared: Shared,
    upstream: aiohttp.ClientResponse,
    tools: Sequence[ToolSpec],
    headers: CIMultiDict[str],
    runtime: UpstreamRuntime,
) -> web.StreamResponse:
    """The 2xx stream through the engine. With a retry left, the head and the stream's
    start wait for its first content: a transient refusal before it is retried unseen."""
    assert x.entry is not None
    assert x.parsed is not None
    assert x.route is not None
    flow, respond = x.flow, _responder(x)
    gating = x.route.settings.gating
    can_retry = retryable(x) or retryable(x, trouble="silence")
    # Redacted before it is judged: the client reads what the gate judged. Unless it is
    # recorded (a tap reads it), the engine reads it in its own task, its one timer
    # bounding the silence (`engine.ResumableBody`).
    body = (
        ResumableUpstreamBody(upstream, runtime.redactor)
        if flow.exchange is None
        else UpstreamBody(upstream, flow.exchange, runtime.redactor)
    )
    stream = GatingStream(
        x.entry,
        x.parsed,
        body,
        x.route.settings.gating,
        observer=flow.observe,
        redact=shared.redact,
        started_at=flow.started,
        budget=shared.held,
        tools=tools,
        hold_preamble=can_retry,
        framing=x.target.framing if x.target is not None else "sse",  # the wire's
        first_content_by=_first_content_by(x, gating.first_byte_timeout),
    )
    held = can_retry or gating.hold == "all"
    response = None if held else await respond.commit(flow.status, headers)
    pieces = aiter(stream)
    left = False
    try:
        async for piece in pieces:
            x.seen = stream.sent_content
            outcome = stream.outcome
            if isinstance(outcome, Refused) and can_retry:
                refusal = outcome.refusal
                trouble: Trouble = "silence" if refusal.kind in _SILENCE else "once"
                if retryable(x, _again(x, outcome), trouble=trouble):
                    flow.judged(outcome)
                    flow.incomplete = True
                    raise _Retry(refusal.kind, trouble=trouble, refused=True)  # frame unsent
            x.last_sent = time.monotonic()
            if response is None:
                response = await respond.commit(flow.status, headers)
            await respond.write(piece)
    except ConnectionError:  # the client left (or stopped reading): not an outcome
        left = True
        respond.abort()
        return response or web.Response(status=499)
    finally:
        await close_quietly(pieces)
        flow.judged_stream(stream, left, time.monotonic())
    if response is None:  # an empty body judged (accepted or refused): its head now
        await respond.commit(flow.status, headers)
    return await respond.end()


def _again(x: ProxyExchange, outcome: Refused) -> bool:
    """Whether a refused answer may be tried again: a transient refusal, or, on a route that
    holds the whole answer, any refusal but a final one (`_FINAL_KINDS`)."""
    assert x.route is not None
    refusal = outcome.refusal
    if refusal.transient:
        return True
    return x.route.settings.gating.hold == "all" and refusal.kind not in _FINAL_KINDS


def _first_content_by(x: ProxyExchange, limit: float | None) -> float | None:
    """When this attempt's first content must have come (the loop's clock), or None."""
    if limit is None:
        return None
    started = x.attempt_started
    left = limit - (time.monotonic() - started)
    return asyncio.get_running_loop().time() + max(0.0, left)


async def _whole(
    x: ProxyExchange,
    shared: Shared,
    upstream: aiohttp.ClientResponse,
    tools: Sequence[ToolSpec],
    headers: CIMultiDict[str],
    runtime: UpstreamRuntime,
) -> web.StreamResponse:
    """A 2xx whole answer, read under the cap and the deadline and judged."""
    assert x.entry is not None
    assert x.parsed is not None
    assert x.route is not None
    flow, spent = x.flow, x.attempt > 0
    options = x.route.settings.gating
    chunks: AsyncIterator[bytes] = upstream.content.iter_any()
    if flow.exchange is not None:
        chunks = flow.exchange.tap(chunks)
    try:
        body = await read_whole(chunks, flow.started + options.deadline)
    except TimeoutError:
        if retryable(x):
            raise _Retry("deadline") from None
        reason = f"no complete response within the {options.deadline:g} s deadline"
        return _unjudged(x, shared, "deadline", reason, transient=True, spent=spent)
    except Exception as exc:
        if retryable(x):
            raise _Retry("transport") from None
        reason = f"the body broke off ({describe(exc)})"
        return _unjudged(x, shared, "transport", reason, transient=True, spent=spent)
    if runtime.redactor is not None:  # judged as the client will read it
        body = runtime.redactor.redact_bytes(body)
    judge = functools.partial(
        judge_whole,
        x.entry,
        x.parsed,
        body,
        options,
        status=flow.status,
        observer=flow.observe,
        redact=shared.redact,
        tools=tools,
    )
    verdict = await asyncio.to_thread(judge) if len(body) > OFFLOAD_BYTES else judge()
    outcome = verdict.outcome
    if isinstance(outcome, Refused) and retryable(x, _again(x, outcome)):
        raise _Retry(outcome.refusal.kind, refused=True)
    flow.judged(outcome)
    flow.status = verdict.status
    return whole(verdict, headers, spent=spent)


# --- the proxy's own answers, their refusal kept -------------------------------------------------


def _fail(x: ProxyExchange, shared: Shared, status: int, reason: str) -> web.StreamResponse:
    """No answer to pass on (`respond.failed`); its refusal kept for a stream whose head
    already went."""
    assert x.speaker is not None
    answer, x.refusal = failed(
        x.flow, x.gateway, x.speaker, status, reason, shared.redact, spent=x.attempt > 0
    )
    return answer


def _unjudged(
    x: ProxyExchange,
    shared: Shared,
    kind: str,
    reason: str,
    *,
    transient: bool = False,
    spent: bool = False,
) -> web.Response:
    assert x.gateway is not None
    answer, x.refusal = unjudged(
        x.flow, x.gateway, kind, reason, shared.redact, transient=transient, spent=spent
    )
    return answer
