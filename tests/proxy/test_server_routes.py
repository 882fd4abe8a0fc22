"""One proxy for every provider (issue 24): routes by path prefix (the prefix stripped
before forwarding), each with its upstream and the key it holds in its protocol's header;
the reserved paths `/healthz`, `/readyz` and `/metrics`, never forwarded; the metrics after
real exchanges (what each route passed, withheld, refused, retried; tokens), and what they
never expose."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from lockgate.lab.server import serve_script
from lockgate.proxy.config import (
    ProxySettings,
    RouteRetries,
    RouteSettings,
    SecretSource,
    UpstreamSettings,
)
from lockgate.proxy.server import ProxyRecord, serving
from lockgate.scripted.reply import Call, OpeningError
from lockgate.scripted.script import Turn

from ..helpers import EDIT
from .support import request_for
from .test_server import READ, call_reply, gating, origin, serve_app

OPENAI_KEY = "sk-openai-HELD-KEY-0001"
ANTHROPIC_KEY = "sk-ant-HELD-KEY-0002"
TOKEN = "lockgate-team-TOKEN-0003"
ACCEPTED = call_reply(Call("call_1", "read", READ), Call("call_2", "edit", EDIT))
INVALID = call_reply(Call("call_1", "read", READ), Call("call_2", "rm_rf", {"x": 1}))


def route(
    name: str, prefix: str, upstream: str, key: str | None = None, **extra: Any
) -> RouteSettings:
    source = SecretSource(value=key) if key is not None else None
    return RouteSettings(name, prefix, UpstreamSettings(upstream, source), gating(), **extra)


async def request(
    method: str, url: str, body: object | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=body, headers=headers or {}) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def test_each_route_serves_its_prefix_with_its_own_upstream_and_key() -> None:
    seen: list[tuple[str, str, dict[str, str]]] = []

    def answering(tag: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def answer(request: web.Request) -> web.StreamResponse:
            seen.append((tag, request.path, dict(request.headers)))
            return web.json_response({"object": "list", "data": []})

        return answer

    async with (
        serve_app(answering("openai")) as openai_origin,
        serve_app(answering("anthropic")) as anthropic_origin,
    ):
        settings = ProxySettings(
            (
                route("openai", "/openai", openai_origin, OPENAI_KEY),
                route("anthropic", "/anthropic", anthropic_origin, ANTHROPIC_KEY),
            ),
            client_token=SecretSource(value=TOKEN),
        )
        records: list[ProxyRecord] = []
        async with serving(settings, records.append) as running:
            auth = {"authorization": f"Bearer {TOKEN}"}
            assert (await request("GET", running.url + "/openai/v1/models", headers=auth))[0] == 200
            anthropic_auth = {"x-api-key": TOKEN, "anthropic-version": "2023-06-01"}
            status, _, _ = await request(
                "GET", running.url + "/anthropic/v1/models", headers=anthropic_auth
            )
            assert status == 200
            status, _, body = await request(
                "GET", running.url + "/gemini/v1beta/models", headers=auth
            )
    assert status == 404
    assert b"no route of this proxy serves" in body
    (first, path1, headers1), (second, path2, headers2) = seen
    assert (first, path1, headers1["Authorization"]) == (
        "openai",
        "/v1/models",
        f"Bearer {OPENAI_KEY}",
    )
    assert (second, path2, headers2["x-api-key"]) == ("anthropic", "/v1/models", ANTHROPIC_KEY)
    assert "Authorization" not in headers2
    assert [record.route for record in records] == ["openai", "anthropic", ""]
    assert [record.path for record in records][:2] == ["/openai/v1/models", "/anthropic/v1/models"]


async def test_the_reserved_paths_answer_and_are_never_forwarded() -> None:
    forwarded: list[str] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        forwarded.append(request.path)
        return web.json_response({})

    async with serve_app(answer) as upstream:
        settings = ProxySettings(
            (route("all", "", upstream),), client_token=SecretSource(value=TOKEN)
        )
        async with serving(settings) as running:
            health = await request("GET", running.url + "/healthz")
            ready = await request("GET", running.url + "/readyz")
            denied = await request("GET", running.url + "/metrics")
            metrics = await request(
                "GET", running.url + "/metrics", headers={"x-lockgate-token": TOKEN}
            )
            posted = await request("POST", running.url + "/healthz", {})
            stop = asyncio.ensure_future(running.stop(grace=0.5))
            await asyncio.sleep(0)  # the proxy is stopping: not ready any more
            draining = running.server.ready
            await stop
    assert (health[0], ready[0]) == (200, 200)  # no token needed: a load balancer's checks
    assert denied[0] == 401  # the metrics are protected like everything else
    assert metrics[0] == 200
    assert metrics[1]["Content-Type"].startswith("text/plain")
    assert posted[0] == 405
    assert draining is False
    assert forwarded == []


async def test_readiness_is_503_while_the_proxy_drains() -> None:
    # While it drains, its listening socket is closed and idle connections with it: what a
    # request on a connection still open would read is the handler's own answer.
    from aiohttp.test_utils import make_mocked_request

    async with serving(ProxySettings((route("all", "", "http://127.0.0.1:9"),))) as running:
        server = running.server
        ready = server.handle_reserved(make_mocked_request("GET", "/readyz"), "/readyz")
        assert ready.status == 200
        server.stopping = True  # what stopping sets first
        answer = server.handle_reserved(make_mocked_request("GET", "/readyz"), "/readyz")
        assert answer.status == 503
        assert answer.headers["retry-after"] == "1"
        server.stopping = False


async def test_metrics_count_what_each_route_passed_withheld_refused_and_retried() -> None:
    rate_limited = Turn(
        error=OpeningError(429, "rate_limit", "slow down"), headers={"retry-after": "0"}
    )
    async with (
        serve_script([ACCEPTED, INVALID], provider="chat") as chat,
        serve_script([rate_limited, ACCEPTED], provider="anthropic") as anthropic,
    ):
        settings = ProxySettings(
            (
                route("openai", "/openai", origin(chat)),
                route("claude", "/claude", origin(anthropic), retries=RouteRetries(1, 5.0)),
            )
        )
        async with serving(settings) as running:
            for _ in range(2):
                await request(
                    "POST", running.url + "/openai/v1/chat/completions", request_for("chat")
                )
            await request("POST", running.url + "/claude/v1/messages", request_for("anthropic"))
            _, _, text = await request("GET", running.url + "/metrics")
    exposition = text.decode()
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line and not line.startswith("#")
    }
    assert (
        samples['lockgate_proxy_requests_total{outcome="passed",protocol="chat",route="openai"}']
        == 1
    )
    assert (
        samples['lockgate_proxy_requests_total{outcome="withheld",protocol="chat",route="openai"}']
        == 1
    )
    assert (
        samples[
            'lockgate_proxy_refusals_total{kind="invalid_batch",protocol="chat",route="openai"}'
        ]
        == 1
    )
    assert samples['lockgate_proxy_tool_calls_withheld_total{protocol="chat",route="openai"}'] == 2
    assert samples['lockgate_proxy_tool_calls_released_total{protocol="chat",route="openai"}'] == 2
    assert (
        samples[
            'lockgate_proxy_requests_total{outcome="passed",protocol="anthropic",route="claude"}'
        ]
        == 1
    )
    assert samples['lockgate_proxy_retries_total{route="claude"}'] == 1
    assert samples['lockgate_proxy_tokens_total{protocol="chat",route="openai",type="input"}'] > 0
    assert samples['lockgate_proxy_in_flight{route="openai"}'] == 0
    assert samples["lockgate_proxy_held_bytes"] == 0
    assert (
        'lockgate_proxy_added_first_byte_seconds_count{protocol="chat",route="openai"}' in samples
    )
    # Never a key, a token, a prompt or a path: only the route's name and fixed words.
    assert "/v1/" not in exposition
    assert "Fix the bug" not in exposition
