"""The tracer seam (`lockgate.telemetry.Tracing`) as the proxy drives it: one request trace
per admitted request, one attempt trace per attempt upstream (its trace context in place of
the client's), the request ended with a summary read from its flow; a tracer that fails
changes nothing of what the client receives. The flow hooks read the same attempts."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from lockgate.lab.server import serve_script
from lockgate.proxy.config import ProxySettings, RouteRetries, RouteSettings, UpstreamSettings
from lockgate.proxy.flow import Flow
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.scripted.reply import OpeningError
from lockgate.scripted.script import Turn
from lockgate.telemetry import NO_TRACING, AttemptTrace, RequestSummary, RequestTrace, Tracing

from .support import request_for
from .test_server import ACCEPTED, INVALID_SECOND, gating, origin, serve_app

PATH = "/v1/chat/completions"
CLIENT_PARENT = "00-11111111111111111111111111111111-2222222222222222-01"


def parent(number: int) -> str:
    """The trace context the fake tracer sends with attempt `number`."""
    return f"00-{'a' * 32}-{number:016x}-01"


@dataclass
class FakeAttempt:
    number: int
    upstream: str
    fallback: bool
    ended: tuple[int | None, str | None] | None = None

    def headers(self) -> Mapping[str, str]:
        return {"traceparent": parent(self.number), "tracestate": "lockgate=1"}

    def end(self, status: int | None, error_type: str | None) -> None:
        self.ended = (status, error_type)


@dataclass
class FakeRequest:
    client_headers: dict[str, str]
    attempts: list[FakeAttempt] = field(default_factory=list)
    summaries: list[RequestSummary] = field(default_factory=list)

    @property
    def summary(self) -> RequestSummary:
        """The one summary the request ended with (its trace ends once)."""
        [summary] = self.summaries
        return summary

    def attempt(self, number: int, upstream: str, fallback: bool) -> AttemptTrace:
        made = FakeAttempt(number, upstream, fallback)
        self.attempts.append(made)
        return made

    def end(self, summary: RequestSummary) -> None:
        self.summaries.append(summary)


@dataclass
class Recording:
    requests: list[FakeRequest] = field(default_factory=list)

    def request(self, client_headers: Mapping[str, str], started: float) -> RequestTrace:
        made = FakeRequest(dict(client_headers))
        self.requests.append(made)
        return made


class Raising:
    """A tracer that fails at every call it gets."""

    def request(self, client_headers: Mapping[str, str], started: float) -> RequestTrace:
        return _RaisingRequest()


class _RaisingRequest:
    def attempt(self, number: int, upstream: str, fallback: bool) -> AttemptTrace:
        return _RaisingAttempt()

    def end(self, summary: RequestSummary) -> None:
        raise RuntimeError("the tracer broke")


class _RaisingAttempt:
    def headers(self) -> Mapping[str, str]:
        raise RuntimeError("the tracer broke")

    def end(self, status: int | None, error_type: str | None) -> None:
        raise RuntimeError("the tracer broke")


@contextlib.asynccontextmanager
async def proxy(
    upstream: str, tracing: Tracing, **config: Any
) -> AsyncIterator[tuple[str, list[ProxyRecord]]]:
    records: list[ProxyRecord] = []
    config.setdefault("gating", gating())
    async with serving(ProxyConfig(upstream, **config), records.append, tracing=tracing) as running:
        yield running.url, records


async def post(
    url: str, headers: Mapping[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + PATH, json=request_for("chat"), headers=headers) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def test_a_passed_stream_is_one_request_and_one_attempt_with_no_error() -> None:
    tracing = Recording()
    async with (
        serve_script([ACCEPTED], provider="chat") as server,
        proxy(origin(server), tracing) as (url, records),
    ):
        status, _, _ = await post(url)
    assert status == 200
    [request] = tracing.requests
    [attempt] = request.attempts
    assert (attempt.number, attempt.upstream, attempt.fallback) == (
        1,
        f"127.0.0.1:{server.port}",
        False,
    )
    assert attempt.ended == (200, None)
    summary = request.summary
    assert (summary.protocol, summary.operation, summary.outcome) == ("chat", "chat", "passed")
    assert summary.error_type is None
    assert (summary.status, summary.released_calls, summary.withheld_calls) == (200, 2, 0)
    assert summary.request_model == "lab-model"
    assert summary.finish_reasons == ("tool_calls",)
    assert summary.streaming is True
    assert summary.first_token_at is not None
    assert summary.started <= summary.first_token_at <= summary.ended
    assert records[0].outcome == "passed"


async def test_a_refused_stream_ends_with_the_refusal_kind_as_its_error_type() -> None:
    tracing = Recording()
    async with (
        serve_script([INVALID_SECOND], provider="chat") as server,
        proxy(origin(server), tracing) as (url, records),
    ):
        await post(url)
    [request] = tracing.requests
    assert records[0].outcome in ("refused", "withheld")
    assert request.summary.error_type == "lockgate.invalid_batch"
    assert request.summary.finish_reasons == ()
    [attempt] = request.attempts
    assert attempt.ended == (200, "lockgate.invalid_batch")


async def test_a_retry_to_a_fallback_is_two_attempts_the_second_a_fallback() -> None:
    tracing = Recording()
    down = Turn(error=OpeningError(503, "overloaded", "Service unavailable"))
    async with (
        serve_script([down], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as backup,
    ):
        route = RouteSettings(
            "chat",
            "",
            UpstreamSettings(origin(primary)),
            gating(),
            RouteRetries(0, 5.0),  # no retry on the same upstream: the fall-back at once
            (UpstreamSettings(origin(backup), model="backup-model"),),
        )
        async with serving(ProxySettings((route,)), tracing=tracing) as running:
            status, _, _ = await post(running.url)
    assert status == 200
    [request] = tracing.requests
    first, second = request.attempts
    assert (first.number, first.fallback, first.ended) == (1, False, (503, "status_503"))
    assert (second.number, second.fallback, second.ended) == (2, True, (200, None))
    assert first.upstream != second.upstream  # each names its own host and port
    assert request.summary.retries == 1


async def test_the_attempts_trace_context_replaces_the_clients_upstream() -> None:
    tracing = Recording()
    seen: list[list[str]] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.getall("traceparent", []))
        seen.append(request.headers.getall("tracestate", []))
        return web.json_response({"error": {"message": "nope"}}, status=400)

    client = {"traceparent": CLIENT_PARENT, "TraceState": "client=1"}
    async with serve_app(answer) as upstream, proxy(upstream, tracing) as (url, _):
        status, _, _ = await post(url, client)
    assert status == 400
    assert seen == [[parent(1)], ["lockgate=1"]]  # replaced, never a second value
    [request] = tracing.requests
    assert request.client_headers["traceparent"] == CLIENT_PARENT  # what the tracer read
    assert request.summary.error_type is None
    assert request.attempts[0].ended == (400, "400")


async def test_without_a_tracer_the_clients_trace_context_goes_upstream_as_it_came() -> None:
    seen: list[list[str]] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.getall("traceparent", []))
        return web.json_response({"error": {"message": "nope"}}, status=400)

    async with serve_app(answer) as upstream, proxy(upstream, NO_TRACING) as (url, _):
        await post(url, {"traceparent": CLIENT_PARENT})
    assert seen == [[CLIENT_PARENT]]


async def test_a_request_the_proxy_rejects_is_not_traced() -> None:
    tracing = Recording()
    async with (
        serve_script([ACCEPTED], provider="chat") as server,
        proxy(origin(server), tracing, client_token="s3cret-token") as (url, _),
    ):
        status, _, _ = await post(url)
    assert status == 401
    assert tracing.requests == []


async def test_a_tracer_that_fails_changes_nothing_the_client_receives() -> None:
    answers = []
    for tracing in (NO_TRACING, Raising()):
        async with (
            serve_script([INVALID_SECOND, ACCEPTED], provider="chat") as server,
            proxy(origin(server), tracing) as (url, records),
        ):
            refused = await post(url)
            passed = await post(url)
        drop = ("date", "content-length")
        answers.append(
            [
                (status, {k: v for k, v in headers.items() if k.lower() not in drop}, body)
                for status, headers, body in (refused, passed)
            ]
            + [(r.outcome, r.status, r.reason) for r in records]
        )
    assert answers[0] == answers[1]
    assert answers[0][0][0] == 200
    assert answers[0][1][0] == 200


async def test_the_flow_keeps_each_attempt_and_whether_the_retries_were_spent() -> None:
    kept: list[Flow] = []

    class Hook:
        def started(self, flow: Flow) -> None:
            pass

        def done(self, flow: Flow) -> None:
            kept.append(flow)

    down = Turn(error=OpeningError(503, "overloaded", "Service unavailable"))
    async with serve_script([down, down, ACCEPTED], provider="chat") as server:
        config = ProxyConfig(origin(server), gating=gating(), retries=RouteRetries(1, 5.0))
        async with serving(config, hooks=[Hook()]) as running:
            spent = await post(running.url)
            passed = await post(running.url)
    assert (spent[0], passed[0]) == (503, 200)
    first, second = kept
    assert first.retries_exhausted
    assert [(a.number, a.status, a.retried, a.fallback) for a in first.attempts] == [
        (1, 503, "status_503", False),
        (2, 503, None, False),
    ]
    assert all(a.started <= a.ended for a in first.attempts)
    assert first.attempts[0].ended <= first.attempts[1].started
    assert not second.retries_exhausted
    assert [(a.number, a.status, a.retried) for a in second.attempts] == [(1, 200, None)]
    assert (second.request_model, second.finish_reason) == ("lab-model", "tool_calls")
