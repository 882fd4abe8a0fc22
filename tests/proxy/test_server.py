"""`lockgate.proxy.server` in this process: a proxy (`serving`) in front of the scripted
server (`serve_script`, the lab's byte-level faults in every protocol) or of a small aiohttp
upstream of the test's own (headers, redirects, pass-through paths), driven by aiohttp and by
the official SDKs' stream helpers: streams, whole responses and opening errors, other paths
passed through. The helpers here are what every server test shares; credentials, capacity
and stopping, and the configuration are test_server_credentials.py,
test_server_capacity.py and test_server_config.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web
from multidict import CIMultiDict

from lockgate.lab.server import ScriptedServer, serve_script
from lockgate.proxy import GatingOptions
from lockgate.proxy.server import (
    DEFAULT_MAX_REQUEST_BYTES,
    ProxyConfig,
    ProxyRecord,
    RunningProxy,
    serving,
)
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Faults, Turn

from ..helpers import EDIT, dead_port
from .support import BODY_STREAMED_PROTOCOLS as PROTOCOLS
from .support import ends_with_refusal, request_for, tool_events, turn_bytes

PATHS = {
    "responses": "/v1/responses",
    "chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
}
HELD_KEY = "sk-held-PROXY-SECRET-0f1e2d3c4b"
CLIENT_KEY = "sk-client-OWN-KEY-778899"
TOKEN = "lockgate-client-TOKEN-5566"
READ = {"path": "calculator.py"}


def gating(**overrides: Any) -> GatingOptions:
    base: dict[str, Any] = {"idle_timeout": 10.0, "deadline": 60.0, "validate_schemas": True}
    return GatingOptions(**{**base, **overrides})


def origin(server: ScriptedServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def call_reply(*calls: Call, text: str = "Fixing it.", ending: str = "complete") -> Turn:
    parts: tuple[Any, ...] = (Say(text), *calls)
    return Turn(reply=Reply("r1", parts, ending=ending))  # type: ignore[arg-type]


ACCEPTED = call_reply(Call("call_1", "read", READ), Call("call_2", "edit", EDIT))
INVALID_SECOND = call_reply(Call("call_1", "read", READ), Call("call_2", "rm_rf", {"x": 1}))
CUT = call_reply(Call("call_1", "edit", EDIT, cut=True), ending="open")


@dataclass
class Proxied:
    proxy: RunningProxy
    records: list[ProxyRecord] = field(default_factory=list)


@contextlib.asynccontextmanager
async def proxy_to(upstream: str, **config: Any) -> AsyncIterator[Proxied]:
    records: list[ProxyRecord] = []
    config.setdefault("gating", gating())
    async with serving(ProxyConfig(upstream, **config), records.append) as proxy:
        yield Proxied(proxy, records)


@contextlib.asynccontextmanager
async def scripted(
    provider: str, turns: list[Turn], **config: Any
) -> AsyncIterator[tuple[ScriptedServer, Proxied]]:
    async with (
        serve_script(turns, provider=provider) as server,
        proxy_to(origin(server), **config) as proxied,
    ):
        yield server, proxied


async def post(
    url: str,
    body: object,
    headers: Mapping[str, str] | None = None,
    *,
    raw: bytes | None = None,
) -> tuple[int, CIMultiDict[str], bytes]:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.post(
            url,
            data=raw if raw is not None else json.dumps(body).encode(),
            headers={"content-type": "application/json", **(headers or {})},
        ) as response,
    ):
        return response.status, response.headers.copy(), await response.read()


async def wait_for(condition: Any, what: str, limit: float = 30.0) -> None:
    """Poll on the loop until `condition()` holds (a guard against a hang, not a timer)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not condition():
        if loop.time() > end:
            raise TimeoutError(f"never happened: {what}")
        await asyncio.sleep(0.005)


# --- streams ---------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_an_accepted_stream_passes_byte_for_byte(provider: str) -> None:
    async with scripted(provider, [ACCEPTED]) as (server, proxied):
        status, headers, body = await post(
            proxied.proxy.url + PATHS[provider], request_for(provider)
        )
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert body == turn_bytes(ACCEPTED, provider)
    assert len(tool_events(body)) > 0
    [record] = proxied.records
    assert (record.method, record.path, record.protocol) == ("POST", PATHS[provider], provider)
    assert (record.outcome, record.withheld, record.status) == ("passed", 0, 200)
    assert server.requests[0].path == PATHS[provider]


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize(
    ("turn", "kind", "withheld"),
    [
        (INVALID_SECOND, "invalid_batch", 2),
        (CUT, "stream_ended", 1),
        (Turn(reply=ACCEPTED.reply, faults=Faults(reset_after=9)), "transport", None),
    ],
    ids=["invalid-second-call", "cut", "reset"],
)
async def test_a_refused_stream_ends_with_the_protocol_error_and_no_tool_event(
    provider: str, turn: Turn, kind: str, withheld: int | None
) -> None:
    async with scripted(provider, [turn]) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS[provider], request_for(provider))
    assert status == 200
    assert ends_with_refusal(body, provider), body[-400:]
    assert tool_events(body) == []
    assert b"lockgate" in body
    [record] = proxied.records
    assert record.reason is not None
    assert record.reason.startswith(f"{kind}: "), record.reason
    if withheld is not None:
        assert (record.outcome, record.withheld) == ("withheld", withheld)
    else:
        assert record.outcome in ("withheld", "refused")


# --- the official SDKs through the proxy ----------------------------------------------------


async def sdk_final(provider: str, base: str) -> Any:
    """The final message of the SDK's stream helper against `base` (the host root)."""
    request = request_for(provider)
    if provider == "anthropic":
        client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=base, max_retries=0)
        async with (
            client,
            client.messages.stream(
                model=request["model"],
                max_tokens=request["max_tokens"],
                system=request["system"],
                messages=request["messages"],
                tools=request["tools"],
            ) as stream,
        ):
            async for _ in stream:
                pass
            return (await stream.get_final_message()).model_dump()
    openai_client = openai.AsyncOpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0)
    async with openai_client:
        if provider == "chat":
            async with openai_client.chat.completions.stream(
                model=request["model"], messages=request["messages"], tools=request["tools"]
            ) as chat:
                async for _ in chat:
                    pass
                return (await chat.get_final_completion()).model_dump()
        async with openai_client.responses.stream(
            model=request["model"], input=request["input"], tools=request["tools"]
        ) as responses:
            async for _ in responses:
                pass
            return (await responses.get_final_response()).model_dump()


SDK_ERRORS: dict[str, type[Exception]] = {
    "chat": openai.APIError,
    "responses": openai.APIError,
    "anthropic": anthropic.APIStatusError,
}


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_the_sdk_stream_helpers_read_the_same_final_message_as_direct(
    provider: str,
) -> None:
    async with scripted(provider, [ACCEPTED, ACCEPTED]) as (server, proxied):
        direct = await sdk_final(provider, origin(server))
        through = await sdk_final(provider, proxied.proxy.url)
    assert through == direct
    assert [r.outcome for r in proxied.records] == ["passed"]


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("turn", [INVALID_SECOND, CUT], ids=["invalid-second-call", "cut"])
async def test_the_sdk_stream_helpers_raise_on_a_refused_stream(provider: str, turn: Turn) -> None:
    async with scripted(provider, [turn]) as (_, proxied):
        with pytest.raises(SDK_ERRORS[provider]) as raised:
            await sdk_final(provider, proxied.proxy.url)
    assert "lockgate withheld" in str(raised.value)


# --- whole responses and opening errors -----------------------------------------------------


def whole(provider: str) -> dict[str, Any]:
    return {**request_for(provider), "stream": False}


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_whole_response_passes_unchanged_or_becomes_a_shaped_502(provider: str) -> None:
    async with scripted(provider, [ACCEPTED, ACCEPTED, INVALID_SECOND]) as (server, proxied):
        direct = await post(origin(server) + PATHS[provider], whole(provider))
        accepted = await post(proxied.proxy.url + PATHS[provider], whole(provider))
        refused = await post(proxied.proxy.url + PATHS[provider], whole(provider))
    assert direct[0] == 200
    assert accepted[0] == 200
    assert accepted[2] == direct[2]
    assert refused[0] == 502
    error = json.loads(refused[2])
    if provider == "anthropic":
        assert error["type"] == "error"
    assert "lockgate withheld 2 tool calls: invalid_batch" in error["error"]["message"]
    assert "rm_rf" not in refused[2].decode().split("message")[0]
    assert [(r.outcome, r.withheld, r.status) for r in proxied.records] == [
        ("passed", 0, 200),
        ("withheld", 2, 502),
    ]


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_an_opening_error_passes_with_its_status_headers_and_body(provider: str) -> None:
    body = {"error": {"message": "slow down", "type": "rate_limit", "code": "rate_limit"}}
    turn = Turn(status=429, body=body, headers={"retry-after": "7", "x-request-id": "req_9"})
    async with scripted(provider, [turn]) as (_, proxied):
        status, headers, answer = await post(
            proxied.proxy.url + PATHS[provider], request_for(provider)
        )
    assert status == 429
    assert headers["retry-after"] == "7"
    assert headers["x-request-id"] == "req_9"
    assert json.loads(answer) == body
    assert [(r.outcome, r.status) for r in proxied.records] == [("forwarded", 429)]


async def test_an_unreachable_upstream_is_a_shaped_502() -> None:
    async with proxy_to(f"http://127.0.0.1:{dead_port()}") as proxied:
        status, _, body = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
        anth = await post(proxied.proxy.url + PATHS["anthropic"], request_for("anthropic"))
    assert status == 502
    assert (
        "lockgate proxy: connecting to the upstream failed" in json.loads(body)["error"]["message"]
    )
    assert anth[0] == 502
    assert json.loads(anth[2])["type"] == "error"
    assert [r.outcome for r in proxied.records] == ["error", "error"]


async def test_a_request_body_that_is_not_a_json_object_passes_to_the_upstream() -> None:
    async with scripted("chat", [ACCEPTED]) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS["chat"], None, raw=b"[1, 2")
    assert status == 400  # the scripted server's own answer, passed back
    assert b"bad request" in body
    assert [(r.outcome, r.status) for r in proxied.records] == [("forwarded", 400)]


# --- a small upstream of our own --------------------------------------------------------------


@dataclass
class Seen:
    method: str
    path_qs: str
    headers: dict[str, str]
    body: bytes


@contextlib.asynccontextmanager
async def own_upstream() -> AsyncIterator[tuple[str, list[Seen]]]:
    """An upstream that records each request and answers: `GET /v1/models` a list,
    `/redirect` a 302 to `/landing`, anything else a 400 JSON error (passed as it is)."""
    seen: list[Seen] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(
            Seen(request.method, request.path_qs, dict(request.headers), await request.read())
        )
        if request.path == "/v1/models":
            return web.json_response({"object": "list", "data": [{"id": "m1"}]})
        if request.path == "/redirect":
            raise web.HTTPFound("/landing")
        return web.json_response({"error": {"message": "nope"}}, status=400)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serve_app(
    answer: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    """A loopback aiohttp upstream of the test's own, answering every method and path with
    `answer`; yields its origin."""
    app = web.Application(client_max_size=2 * DEFAULT_MAX_REQUEST_BYTES)
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def raw_exchange(url: str, data: bytes, *, limit: float = 30.0) -> bytes:
    """Send `data` on a new connection to the proxy at `url`; everything it answers until it
    closes the connection (`limit`: a guard against a hang, not a measure of time)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), limit)
    finally:
        writer.close()


async def test_other_paths_and_methods_pass_through_unchanged() -> None:
    async with (
        own_upstream() as (base, seen),
        proxy_to(base) as proxied,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(proxied.proxy.url + "/v1/models?limit=2") as response:
            assert response.status == 200
            assert await response.json() == {"object": "list", "data": [{"id": "m1"}]}
        async with session.get(proxied.proxy.url + "/redirect", allow_redirects=False) as response:
            assert response.status == 302
            assert response.headers["location"] == "/landing"
    assert [(s.method, s.path_qs) for s in seen] == [
        ("GET", "/v1/models?limit=2"),
        ("GET", "/redirect"),
    ]  # the redirect was not followed
    assert [(r.method, r.path, r.protocol, r.outcome) for r in proxied.records] == [
        ("GET", "/v1/models", None, "forwarded"),
        ("GET", "/redirect", None, "forwarded"),
    ]


# --- a stream that stalls, and its first bytes (capacity, disconnects, stopping) ----------

STALLED = Turn(reply=ACCEPTED.reply, faults=Faults(stall_after=1, stall_seconds=30))


async def first_bytes(response: aiohttp.ClientResponse) -> bytes:
    return await response.content.readany()
