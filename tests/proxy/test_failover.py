"""The route's failover (issue 31): the plan's order (`failover.FailoverPlan`, pure), and
through the proxy, with loopback upstreams that fail on cue: the same upstream first for a
one-off failure, the next at once on silence or a wait too long, a `retry-after` that delays
only its own upstream, the first-byte timeout, the route's deadline over every attempt,
`hold: all` retrying what a streaming route could not, context-window and per-model
fall-backs, and every attempt's upstream and reason in the log and the metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from lockgate.lab.server import serve_script
from lockgate.proxy.config import (
    ProxySettings,
    RouteRetries,
    RouteSettings,
    UpstreamSettings,
    settings_from_text,
)
from lockgate.proxy.failover import FailoverPlan
from lockgate.proxy.server import ProxyRecord, serving
from lockgate.scripted.reply import Call, OpeningError
from lockgate.scripted.script import Faults, Turn

from ..helpers import EDIT
from .support import ends_with_refusal, request_for
from .test_server import call_reply, gating, origin, serve_app

PATH = "/v1/chat/completions"
ACCEPTED = call_reply(Call("call_1", "edit", EDIT))
INVALID_SECOND = call_reply(Call("call_1", "edit", EDIT), Call("call_2", "rm_rf", {"x": 1}))
DOWN = Turn(error=OpeningError(503, "overloaded", "Service unavailable"))


def _route(primary: str, *fallbacks: UpstreamSettings, **overrides: Any) -> RouteSettings:
    options: dict[str, Any] = {
        "gating": gating(),
        "retries": RouteRetries(1, 5.0),
        "fallbacks": fallbacks,
    }
    options.update(overrides)
    return RouteSettings("chat", "", UpstreamSettings(primary), **options)


@contextlib.asynccontextmanager
async def _proxy(route: RouteSettings) -> AsyncIterator[tuple[str, list[ProxyRecord]]]:
    records: list[ProxyRecord] = []
    async with serving(ProxySettings((route,)), records.append) as running:
        yield running.url, records


async def _post(url: str, body: object | None = None) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + PATH, json=body or request_for("chat")) as response,
    ):
        return response.status, await response.read()


def _silent(seconds: float, hits: list[float]) -> Any:
    """An upstream that says nothing (no head) for `seconds`."""

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        hits.append(time.monotonic())
        await asyncio.sleep(seconds)
        return web.Response(status=503)

    return answer


# --- the plan, on its own -----------------------------------------------------------------


def _settings(text: str) -> RouteSettings:
    return settings_from_text(text, "c.yaml").routes[0]


PLAN_ROUTE = """
routes:
  - name: r
    upstream: http://primary
    retries: {attempts: 2}
    fallbacks:
      - {upstream: 'http://backup', retries: 1}
      - {upstream: 'http://small', models: {big: small, '*': tiny}}
      - {upstream: 'http://only-a', models: {a: a-mini}}
    context_fallbacks:
      - {upstream: 'http://long', model: long-context, retries: 0}
"""


def _walk(plan: FailoverPlan, troubles: list[str]) -> list[tuple[int, str | None, bool]]:
    steps = [(plan.first.index, plan.first.model, plan.first.same)]
    for trouble in troubles:
        step = plan.next(trouble)  # type: ignore[arg-type]
        if step is None:
            steps.append((-1, None, False))
            break
        steps.append((step.index, step.model, step.same))
    return steps


def test_a_one_off_failure_tries_the_same_upstream_first_then_each_fallback() -> None:
    plan = FailoverPlan(_settings(PLAN_ROUTE), "big")
    walked = _walk(plan, ["once"] * 6)
    assert walked == [
        (0, None, False),
        (0, None, True),
        (0, None, True),  # retries.attempts: 2 on the route's own upstream
        (1, None, False),
        (1, None, True),  # the fall-back's own retries: 1
        (2, "small", False),  # its models map: big -> small
        (2, "small", True),  # no retries of its own: the route's 2
    ]


def test_silence_moves_to_the_next_upstream_at_once() -> None:
    plan = FailoverPlan(_settings(PLAN_ROUTE), "big")
    assert _walk(plan, ["silence", "silence", "silence"]) == [
        (0, None, False),
        (1, None, False),
        (2, "small", False),
        (2, "small", True),  # `only-a` does not take `big`: none other left, so this again
    ]


def test_a_wait_too_long_never_goes_back_to_the_upstream_that_asked_for_it() -> None:
    plan = FailoverPlan(_settings(PLAN_ROUTE), "a")
    assert _walk(plan, ["wait_too_long", "wait_too_long", "wait_too_long"]) == [
        (0, None, False),
        (1, None, False),
        (2, "tiny", False),  # `*`: any other model
        (3, "a-mini", False),
    ]


def test_a_context_window_goes_only_to_the_context_fallbacks() -> None:
    plan = FailoverPlan(_settings(PLAN_ROUTE), "big")
    assert plan.peek("context_window") is not None
    assert _walk(plan, ["context_window", "once", "context_window"]) == [
        (0, None, False),
        (4, "long-context", False),
        (-1, None, False),  # retries: 0 on it, and no other context fall-back
    ]
    bare = FailoverPlan(_settings("routes:\n  - {name: r, upstream: 'http://x'}\n"), None)
    assert bare.peek("context_window") is None  # none named: the 400 is the answer


def test_only_a_retry_on_the_same_upstream_waits() -> None:
    from lockgate.proxy.attempt import pause_before
    from lockgate.proxy.failover import Step

    moved, same = Step(1, None, False, 0), Step(0, None, True, 1)
    assert pause_before(moved, 30.0) == 0.0  # a server's wait delays only its own upstream
    assert pause_before(same, 30.0) == 30.0
    assert 0.0 < pause_before(same, None) <= 8.0  # the back-off


def test_silence_with_no_other_upstream_retries_the_same_one() -> None:
    text = "routes:\n  - {name: r, upstream: 'http://x', retries: {attempts: 1}}\n"
    plan = FailoverPlan(_settings(text), None)
    assert _walk(plan, ["silence", "silence"]) == [
        (0, None, False),
        (0, None, True),
        (-1, None, False),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "    fallbacks: [{upstream: 'http://y', retries: 11}]\n",
            "c.yaml:4: routes[0].fallbacks[0].retries: must be",
        ),
        (
            "    fallbacks: [{upstream: 'http://y', models: {}}]\n",
            "c.yaml:4: routes[0].fallbacks[0].models: name at least one model",
        ),
        (
            "    context_fallbacks: [{model: m}]\n",
            "c.yaml:4: routes[0].context_fallbacks[0]: upstream is required",
        ),
        ("    first_byte_timeout: 0\n", "c.yaml:4: routes[0].first_byte_timeout: must be"),
        ("    hold: everything\n", "c.yaml:4: routes[0].hold: must be one of tools, terminal, all"),
        ("    websocket: maybe\n", "c.yaml:4: routes[0].websocket: must be one of relay, refuse"),
    ],
)
def test_each_new_key_says_what_is_wrong(text: str, message: str) -> None:
    from lockgate.proxy.config import ConfigError

    route = "routes:\n  - name: a\n    upstream: http://x\n"
    with pytest.raises(ConfigError) as raised:
        settings_from_text(route + text, "c.yaml")
    assert str(raised.value).startswith(message), str(raised.value)


# --- through the proxy ------------------------------------------------------------------------


async def test_a_one_off_503_is_retried_on_the_same_upstream_not_the_fallback() -> None:
    async with (
        serve_script([DOWN, ACCEPTED], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as backup,
    ):
        route = _route(origin(primary), UpstreamSettings(origin(backup)))
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert b'"edit"' in body
    assert (len(primary.requests), len(backup.requests)) == (2, 0)
    [record] = records
    assert [(a.status, a.retried, a.fallback) for a in record.attempts] == [
        (503, "status_503", False),
        (200, None, False),
    ]


async def test_a_retry_after_delays_only_its_own_upstream() -> None:
    # The primary asks for 30 s, beyond max_wait: the fall-back at once, never waited for.
    slow = Turn(error=OpeningError(429, "rate_limit", "Slow down"), headers={"retry-after": "30"})
    async with (
        serve_script([slow, slow], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as backup,
    ):
        route = _route(origin(primary), UpstreamSettings(origin(backup)))
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert b'"edit"' in body
    assert (len(primary.requests), len(backup.requests)) == (1, 1)
    # the move to another upstream waits nothing (the 30 s asked for delay only the primary)
    assert [a.retried for a in records[0].attempts] == ["status_429", None]
    [record] = records
    assert record.upstream == record.attempts[-1].upstream != record.attempts[0].upstream


async def test_a_silent_opening_moves_to_the_fallback_within_the_first_byte_timeout() -> None:
    hits: list[float] = []
    async with (
        serve_app(_silent(2.0, hits)) as silent,
        serve_script([ACCEPTED], provider="chat") as backup,
    ):
        route = _route(
            silent,
            UpstreamSettings(origin(backup)),
            gating=gating(first_byte_timeout=0.5, keepalive_interval=0.2),
        )
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert b'"edit"' in body
    assert len(hits) == 1  # silence: never the same upstream again
    assert body.startswith(b": ")  # the client's read timeout was kept from firing
    assert [a.retried for a in records[0].attempts] == ["no_answer", None]


async def test_a_first_token_too_late_is_retried_unseen_on_the_fallback() -> None:
    # A head and the stream's start at once, then nothing for 3 s: the first content never
    # came within the first-byte timeout, and nothing of it reached the client.
    late = Turn(reply=ACCEPTED.reply, faults=Faults(stall_after=1, stall_seconds=3.0))
    async with (
        serve_script([late], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as backup,
    ):
        route = _route(
            origin(primary),
            UpstreamSettings(origin(backup), model="backup-model"),
            gating=gating(first_byte_timeout=0.6),
        )
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert body.count(b'"finish_reason":"tool_calls"') == 1
    assert backup.requests[0].body["model"] == "backup-model"
    assert [a.retried for a in records[0].attempts] == ["idle_timeout", None]
    assert records[0].outcome == "passed"


async def test_the_route_deadline_bounds_every_attempt() -> None:
    hits: list[float] = []
    async with serve_app(_silent(2.5, hits)) as silent:
        route = _route(
            silent,
            retries=RouteRetries(5, 5.0),
            gating=gating(idle_timeout=0.6, deadline=1.5),
        )
        async with _proxy(route) as (url, records):
            status, _ = await _post(url)
    assert 1 <= len(hits) <= 3  # the 1.5 s deadline over the attempts, not 6 x 0.6 s of silence
    assert status == 504  # no answer within what the deadline left
    assert records[0].outcome == "error"
    assert len(records[0].attempts) == len(hits)


async def test_hold_all_retries_a_cut_after_content_unseen() -> None:
    cut = Turn(reply=ACCEPTED.reply, faults=Faults(reset_after=4))
    async with serve_script([cut, ACCEPTED], provider="chat") as server:
        route = _route(origin(server), gating=gating(hold="all", keepalive_interval=0.2))
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert body.count(b'"role":"assistant"') == 1  # one answer: the first never went out
    assert body.count(b'"finish_reason":"tool_calls"') == 1
    assert body.rstrip().endswith(b"data: [DONE]")
    assert records[0].outcome == "passed"
    assert records[0].attempts[0].retried == "transport"


async def test_hold_all_retries_an_invalid_batch_but_a_streaming_route_refuses_it() -> None:
    async with serve_script([INVALID_SECOND, ACCEPTED], provider="chat") as server:
        route = _route(origin(server), gating=gating(hold="all"))
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert b"rm_rf" not in body
    assert records[0].attempts[0].retried == "invalid_batch"
    async with (
        serve_script([INVALID_SECOND, ACCEPTED], provider="chat") as server,
        _proxy(_route(origin(server))) as (url, records),
    ):
        status, body = await _post(url)
    assert ends_with_refusal(body, "chat")  # text went out: the refusal is the answer
    assert len(server.requests) == 1
    assert records[0].outcome == "withheld"


def _chunk(delta: dict[str, Any], finish: str | None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"data: " + json.dumps({**chunk, "choices": [choice]}).encode() + b"\n\n"


async def test_hold_all_never_routes_around_a_content_filter() -> None:
    hits: list[int] = []

    async def filtered(request: web.Request) -> web.StreamResponse:
        await request.read()
        hits.append(1)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_chunk({"role": "assistant", "content": "No."}, None))
        await response.write(_chunk({}, "content_filter") + b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async with serve_app(filtered) as upstream:
        route = _route(upstream, gating=gating(hold="all"))
        async with _proxy(route) as (url, records):
            _, body = await _post(url)
    assert len(hits) == 1  # the provider's own judgement of the content: not retried
    assert ends_with_refusal(body, "chat")
    assert records[0].outcome == "refused"


def _over_window() -> Turn:
    body = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    return Turn(status=400, body=body)


async def test_a_context_window_400_goes_to_the_context_fallback_with_its_model() -> None:
    async with (
        serve_script([_over_window(), _over_window()], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as backup,
        serve_script([ACCEPTED], provider="chat") as longer,
    ):
        route = _route(
            origin(primary),
            UpstreamSettings(origin(backup)),
            context_fallbacks=(UpstreamSettings(origin(longer), model="long-context"),),
        )
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert b'"edit"' in body
    assert len(primary.requests) == 1  # never the same upstream at the same size
    assert backup.requests == []  # nor an ordinary fall-back
    assert longer.requests[0].body["model"] == "long-context"
    assert records[0].attempts[0].retried == "context_window"


async def test_without_context_fallbacks_the_400_is_the_answer() -> None:
    async with (
        serve_script([_over_window()], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as backup,
        _proxy(_route(origin(primary), UpstreamSettings(origin(backup)))) as (url, _),
    ):
        status, body = await _post(url)
    assert status == 400
    assert b"context_length_exceeded" in body
    assert backup.requests == []


async def test_fallbacks_per_model() -> None:
    async with (
        serve_script([DOWN, DOWN, DOWN, DOWN], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as for_a,
        serve_script([ACCEPTED], provider="chat") as for_rest,
    ):
        route = _route(
            origin(primary),
            UpstreamSettings(origin(for_a), models=(("model-a", "model-a-mini"),)),
            UpstreamSettings(origin(for_rest), models=(("*", "generic"),)),
            retries=RouteRetries(0, 5.0),
        )
        async with _proxy(route) as (url, _):
            first, _ = await _post(url, request_for("chat", model="model-a"))
            second, _ = await _post(url, request_for("chat", model="model-b"))
    assert (first, second) == (200, 200)
    assert [r.body["model"] for r in for_a.requests] == ["model-a-mini"]
    assert [r.body["model"] for r in for_rest.requests] == ["generic"]


async def test_the_log_and_metrics_say_which_upstream_answered_and_why_each_was_retried() -> None:
    from lockgate.cli.output import record_line, record_output
    from lockgate.credentials import Redactor

    async with (
        serve_script([DOWN, DOWN], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as backup,
    ):
        route = _route(origin(primary), UpstreamSettings(origin(backup)))
        async with _proxy(route) as (url, records):
            await _post(url)
            async with (
                aiohttp.ClientSession() as session,
                session.get(url + "/metrics") as response,
            ):
                metrics = await response.text()
    [record] = records
    logged = json.loads(record_output(record, True, Redactor([])))
    backup_name = f"127.0.0.1:{backup.port}"
    primary_name = f"127.0.0.1:{primary.port}"
    assert logged["upstream"] == backup_name
    assert [(a["upstream"], a["retried"]) for a in logged["attempts"]] == [
        (primary_name, "status_503"),
        (primary_name, "status_503"),
        (backup_name, None),
    ]
    assert f"answered by {backup_name} after {primary_name} status_503" in record_line(record)
    line = (
        'lockgate_proxy_attempts_total{result="status_503",route="chat",'
        f'upstream="{primary_name}"}} 2.0'
    )
    assert line in metrics
    assert f'result="answered",route="chat",upstream="{backup_name}"}} 1.0' in metrics


async def test_a_keepalive_commits_the_head_and_a_later_failure_ends_it_in_band() -> None:
    # The client's read timeout was kept from firing with keep-alives, so its 200 head went:
    # when every upstream then fails, the open stream ends with the protocol's refusal frame
    # (which the SDKs raise), never a second status line or a clean empty end.
    hits: list[float] = []
    async with (
        serve_app(_silent(2.0, hits)) as silent,
        serve_script([DOWN, DOWN, DOWN], provider="chat") as down,
    ):
        route = _route(
            silent,
            UpstreamSettings(origin(down), retries=0),
            gating=gating(first_byte_timeout=0.6, keepalive_interval=0.2),
        )
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert body.startswith(b": ")
    assert ends_with_refusal(body, "chat")
    assert b"503" in body  # the fall-back's status, in lockgate's reason
    [record] = records
    assert [a.retried for a in record.attempts] == ["no_answer", None]
    assert record.outcome == "error"


@pytest.mark.parametrize("hold", ["tools", "all"])
async def test_a_keepalive_while_the_start_is_held_never_cuts_a_recorded_stream(
    hold: str, tmp_path: Any
) -> None:
    # Recorded (`--record`), the body is read through the recorder's tap, which a cancelled
    # read would end: a keep-alive falling due while the start is held must not cut it.
    hits: list[int] = []

    async def slow(request: web.Request) -> web.StreamResponse:
        await request.read()
        hits.append(1)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_chunk({"role": "assistant", "content": ""}, None))
        await asyncio.sleep(1.0)  # the first content after several keep-alive intervals
        await response.write(_chunk({"content": "hello"}, None) + _chunk({}, "stop"))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async with serve_app(slow) as upstream:
        route = _route(upstream, gating=gating(hold=hold, keepalive_interval=0.2))
        settings = ProxySettings((route,), record=tmp_path)
        records: list[ProxyRecord] = []
        async with serving(settings, records.append) as running:
            status, body = await _post(running.url)
    assert status == 200
    assert b"hello" in body
    assert hits == [1]  # one attempt: nothing was cut, nothing retried
    assert records[0].outcome == "passed"
    assert list(tmp_path.iterdir())  # it was recorded


async def test_keepalives_go_on_through_the_wait_before_the_last_attempt() -> None:
    slow = Turn(error=OpeningError(429, "rate_limit", "Slow down"), headers={"retry-after": "1.5"})
    async with serve_script([slow, ACCEPTED], provider="chat") as server:
        route = _route(origin(server), gating=gating(keepalive_interval=0.3))  # retries: 1
        async with _proxy(route) as (url, records):
            status, body = await _post(url)
    assert status == 200
    assert b'"edit"' in body
    assert body.count(b": lockgate keep-alive") >= 3  # the 1.5 s wait before the last try
    assert [a.retried for a in records[0].attempts] == ["status_429", None]
