"""`lockgate.proxy.server` in this process: a proxy (`serving`) in front of the scripted
server (`serve_script`, the lab's byte-level faults in every protocol) or of a small aiohttp
upstream of the test's own (headers, redirects, pass-through paths), driven by aiohttp and by
the official SDKs' stream helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
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
    TOKEN_HEADER,
    ProxyConfig,
    ProxyRecord,
    RunningProxy,
    config_from_environment,
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


async def test_without_a_held_key_the_clients_credentials_go_upstream() -> None:
    async with own_upstream() as (base, seen), proxy_to(base) as proxied:
        await post(
            proxied.proxy.url + PATHS["chat"],
            request_for("chat"),
            {"authorization": f"Bearer {CLIENT_KEY}", "connection": "close"},
        )
    [request] = seen
    assert request.headers["Authorization"] == f"Bearer {CLIENT_KEY}"
    assert "Connection" not in request.headers or request.headers["Connection"] != "close"


@pytest.mark.parametrize(
    ("path", "extra", "expected"),
    [
        (PATHS["chat"], {}, ("Authorization", f"Bearer {HELD_KEY}")),
        (PATHS["responses"], {}, ("Authorization", f"Bearer {HELD_KEY}")),
        (PATHS["anthropic"], {"anthropic-version": "2023-06-01"}, ("x-api-key", HELD_KEY)),
        ("/v1/messages/count_tokens", {"anthropic-version": "2023-06-01"}, ("x-api-key", HELD_KEY)),
        ("/v1/responses/input_tokens", {}, ("Authorization", f"Bearer {HELD_KEY}")),
    ],
)
async def test_a_held_key_replaces_the_clients_credentials(
    path: str, extra: dict[str, str], expected: tuple[str, str]
) -> None:
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY, **extra}
    async with own_upstream() as (base, seen), proxy_to(base, api_key=HELD_KEY) as proxied:
        await post(proxied.proxy.url + path, request_for("chat"), headers)
    [request] = seen
    name, value = expected
    assert request.headers[name] == value
    sent = json.dumps(request.headers)
    assert CLIENT_KEY not in sent
    assert sent.count(HELD_KEY) == 1
    assert request.headers.get("anthropic-version") == extra.get("anthropic-version")
    assert HELD_KEY not in repr(proxied.records)


async def test_the_client_token_is_required_and_never_sent_upstream() -> None:
    async with (
        own_upstream() as (base, seen),
        proxy_to(base, api_key=HELD_KEY, client_token=TOKEN) as proxied,
    ):
        url = proxied.proxy.url + PATHS["chat"]
        missing = await post(url, request_for("chat"))
        wrong = await post(url, request_for("chat"), {"authorization": "Bearer sk-wrong-token"})
        as_header = await post(url, request_for("chat"), {TOKEN_HEADER: TOKEN})
        as_key = await post(url, request_for("chat"), {"authorization": f"Bearer {TOKEN}"})
        as_x_api_key = await post(url, request_for("chat"), {"x-api-key": TOKEN})
    assert [missing[0], wrong[0]] == [401, 401]
    assert "client token" in json.loads(missing[2])["error"]["message"]
    assert [as_header[0], as_key[0], as_x_api_key[0]] == [400, 400, 400]  # the upstream's
    assert len(seen) == 3
    for request in seen:
        assert TOKEN not in json.dumps(request.headers)
        assert request.headers["Authorization"] == f"Bearer {HELD_KEY}"
    assert [r.outcome for r in proxied.records][:2] == ["rejected", "rejected"]
    assert TOKEN not in repr(proxied.records)


async def test_without_a_held_key_the_token_goes_only_in_its_own_header() -> None:
    async with own_upstream() as (base, seen), proxy_to(base, client_token=TOKEN) as proxied:
        url = proxied.proxy.url + PATHS["chat"]
        as_key = await post(url, request_for("chat"), {"authorization": f"Bearer {TOKEN}"})
        ok = await post(
            url,
            request_for("chat"),
            {TOKEN_HEADER: TOKEN, "authorization": f"Bearer {CLIENT_KEY}"},
        )
    assert (as_key[0], ok[0]) == (401, 400)
    [request] = seen
    assert request.headers["Authorization"] == f"Bearer {CLIENT_KEY}"
    assert TOKEN_HEADER not in {name.lower() for name in request.headers}


async def test_a_request_over_the_size_cap_is_413() -> None:
    async with own_upstream() as (base, seen), proxy_to(base, max_request_bytes=4096) as proxied:
        status, _, body = await post(
            proxied.proxy.url + PATHS["chat"], {"model": "m", "pad": "x" * 8192}
        )
    assert status == 413
    assert "larger than 4096 bytes" in json.loads(body)["error"]["message"]
    assert seen == []
    assert [(r.outcome, r.status) for r in proxied.records] == [("rejected", 413)]


# --- capacity, disconnects, stopping ----------------------------------------------------------

STALLED = Turn(reply=ACCEPTED.reply, faults=Faults(stall_after=1, stall_seconds=30))


async def first_bytes(response: aiohttp.ClientResponse) -> bytes:
    return await response.content.readany()


async def test_beyond_max_streams_a_request_is_503_with_retry_after() -> None:
    async with (
        scripted("chat", [STALLED], max_streams=1) as (server, proxied),
        aiohttp.ClientSession() as session,
    ):
        url = proxied.proxy.url + PATHS["chat"]
        async with session.post(url, json=request_for("chat")) as held:
            assert await first_bytes(held)
            status, headers, _ = await post(url, request_for("chat"))
            assert status == 503
            assert headers["retry-after"] == "1"
        await wait_for(lambda: proxied.proxy.active == 0, "the held stream ended")
        await wait_for(lambda: server.requests[0].client_closed_early, "upstream closed")
    assert len(server.requests) == 1
    assert [r.outcome for r in proxied.records] == ["rejected", "abandoned"]


async def test_a_client_that_leaves_closes_the_upstream_stream() -> None:
    async with scripted("responses", [STALLED]) as (server, proxied):
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                proxied.proxy.url + PATHS["responses"], json=request_for("responses")
            ) as response,
        ):
            assert await first_bytes(response)
        await wait_for(lambda: server.requests[0].client_closed_early, "upstream closed")
        await wait_for(lambda: proxied.records, "the request was recorded")
    assert proxied.records[0].outcome == "abandoned"


async def test_stop_lets_a_stream_in_flight_end_and_refuses_new_requests() -> None:
    slow = Turn(reply=ACCEPTED.reply, faults=Faults(stall_after=1, stall_seconds=0.5))
    async with (
        serve_script([slow], provider="chat") as server,
        aiohttp.ClientSession() as session,
    ):
        records: list[ProxyRecord] = []
        config = ProxyConfig(origin(server), gating=gating(), grace_seconds=30)
        async with serving(config, records.append) as proxy:
            async with session.post(proxy.url + PATHS["chat"], json=request_for("chat")) as held:
                start = await first_bytes(held)
                stopping = asyncio.ensure_future(proxy.stop())
                rest = await held.read()
            await stopping
            with pytest.raises(aiohttp.ClientConnectionError):
                await post(proxy.url + PATHS["chat"], request_for("chat"))
    assert start + rest == turn_bytes(slow, "chat")
    assert [r.outcome for r in records] == ["passed"]


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upstream", "problem"),
    [
        ("ftp://x", "not an http(s) URL"),
        ("https://user:pw@api.example", "user:password"),
        ("https://api.example/v1?x=1", "query or a fragment"),
        ("https://api.example/#frag", "query or a fragment"),
        ("", "empty"),
    ],
)
def test_a_bad_upstream_is_refused(upstream: str, problem: str) -> None:
    with pytest.raises(ValueError, match="upstream: ") as raised:
        ProxyConfig(upstream)
    assert problem in str(raised.value)


def test_the_config_never_shows_its_secrets() -> None:
    config = ProxyConfig("https://api.example", api_key=HELD_KEY, client_token=TOKEN)
    assert HELD_KEY not in repr(config)
    assert TOKEN not in repr(config)
    with pytest.raises(ValueError, match="api_key: "):
        ProxyConfig("https://api.example", api_key="bad key")


def test_the_gunicorn_factory_reads_its_config_from_the_environment() -> None:
    config = config_from_environment(
        {
            "LOCKGATE_UPSTREAM": "https://api.example",
            "LOCKGATE_API_KEY_ENV": "MY_KEY",
            "MY_KEY": HELD_KEY,
            "LOCKGATE_CLIENT_TOKEN_ENV": "MY_TOKEN",
            "MY_TOKEN": "client-token-5678",
            "LOCKGATE_HOLD": "terminal",
            "LOCKGATE_IDLE_TIMEOUT": "5",
            "LOCKGATE_MAX_STREAMS": "8",
        }
    )
    assert (config.upstream, config.api_key, config.max_streams) == (
        "https://api.example",
        HELD_KEY,
        8,
    )
    assert (config.gating.hold, config.gating.idle_timeout) == ("terminal", 5.0)
    with pytest.raises(ValueError, match="LOCKGATE_UPSTREAM"):
        config_from_environment({})
    with pytest.raises(ValueError, match="MY_KEY"):
        config_from_environment(
            {"LOCKGATE_UPSTREAM": "https://a.b", "LOCKGATE_API_KEY_ENV": "MY_KEY"}
        )
    # A held key without a client token: an open relay wherever gunicorn binds.
    with pytest.raises(ValueError, match="needs LOCKGATE_CLIENT_TOKEN_FILE or LOCKGATE_CLIENT"):
        config_from_environment(
            {"LOCKGATE_UPSTREAM": "https://a.b", "LOCKGATE_API_KEY_ENV": "K", "K": HELD_KEY}
        )


@pytest.mark.parametrize("provider", ["responses", "chat"])  # whose error events carry a message
async def test_a_reason_that_quotes_the_held_key_is_redacted(provider: str) -> None:
    reply = Reply("r1", (Say("x"),), ending="error", error_message=f"bad key {HELD_KEY}")
    async with scripted(provider, [Turn(reply=reply)], api_key=HELD_KEY) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS[provider], request_for(provider))
    assert status == 200
    assert ends_with_refusal(body, provider)
    [record] = proxied.records
    assert record.reason is not None
    assert "bad key [redacted]" in record.reason
    assert HELD_KEY not in record.reason
    assert HELD_KEY.encode() not in body


async def test_the_gunicorn_factory_builds_the_application(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lockgate.proxy.server import app_factory

    monkeypatch.setenv("LOCKGATE_UPSTREAM", "https://api.example")
    monkeypatch.setenv("LOCKGATE_API_KEY_ENV", "FACTORY_KEY")
    monkeypatch.setenv("FACTORY_KEY", HELD_KEY)
    monkeypatch.setenv("LOCKGATE_CLIENT_TOKEN_ENV", "FACTORY_TOKEN")
    monkeypatch.setenv("FACTORY_TOKEN", "client-token-5678")
    runner = await app_factory()  # the proxy's own runner: gunicorn's worker runs it as it is
    assert isinstance(runner, web.AppRunner)
    assert runner.app._client_max_size == DEFAULT_MAX_REQUEST_BYTES
    # The secrets are read once and leave the environment.
    assert "FACTORY_KEY" not in os.environ
    assert "FACTORY_TOKEN" not in os.environ


async def test_a_browser_request_may_not_spend_the_held_key() -> None:
    async with (
        own_upstream() as (base, seen),
        proxy_to(base, api_key=HELD_KEY, client_token=TOKEN) as proxied,
    ):
        url = proxied.proxy.url + PATHS["chat"]
        status, _, body = await post(
            url, request_for("chat"), {TOKEN_HEADER: TOKEN, "origin": "https://evil.example"}
        )
    assert status == 403
    assert b"may not use the key" in body
    assert seen == []


async def test_a_token_that_is_not_utf8_is_refused_not_a_crash() -> None:
    async with own_upstream() as (base, seen), proxy_to(base, client_token=TOKEN) as proxied:
        host, port = proxied.proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-lockgate-token: \xff\xfe\r\n"
            b"content-length: 2\r\nconnection: close\r\n\r\n{}"
        )
        await writer.drain()
        answer = await reader.read()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 401")
    assert seen == []


async def test_a_request_body_that_never_arrives_frees_its_slot() -> None:
    async with (
        own_upstream() as (base, seen),
        proxy_to(base, gating=gating(idle_timeout=0.5), max_streams=1) as proxied,
    ):
        host, port = proxied.proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"
        )
        await writer.drain()
        answer = await reader.read(4096)
        writer.close()
        # The slot is free again: the next request is served (the upstream's own 400).
        status, _, _ = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
    assert answer.startswith(b"HTTP/1.1 408")
    assert status == 400
    assert len(seen) == 1


async def test_every_stream_shares_one_held_bytes_budget() -> None:
    # The first stream holds its calls and never ends; the second, alone within the
    # budget, would take the two beyond it: refused (transient), and the first goes on.
    hanging = Turn(reply=ACCEPTED.reply, faults=Faults(end="hang"))
    budget = int(len(turn_bytes(ACCEPTED, "chat")) * 1.1)
    async with (
        scripted("chat", [hanging, ACCEPTED], max_held_bytes=budget) as (server, proxied),
        aiohttp.ClientSession() as session,
    ):
        url = proxied.proxy.url + PATHS["chat"]
        async with session.post(url, json=request_for("chat")) as held:
            assert await first_bytes(held)
            await wait_for(lambda: len(server.requests) == 1, "the first stream opened")
            status, _, body = await post(url, request_for("chat"))
            assert status == 200
            assert ends_with_refusal(body, "chat")
            error = json.loads(body.rsplit(b"data: ", 1)[1])["error"]
            assert error["type"] == "server_error"  # transient: a new request may find room
            assert "the proxy holds" in error["message"]
            assert tool_events(body) == []
        await wait_for(lambda: len(proxied.records) == 2, "both requests were recorded")
    assert sorted(record.outcome for record in proxied.records) == ["abandoned", "withheld"]


async def test_while_it_drains_readiness_is_503_on_a_new_connection() -> None:
    # Issue 27: the listening socket closed before the drain, so a load balancer's check
    # never read the 503 the drain promises (only a refused connection).
    text = Turn(reply=Reply("r1", (Say("All fixed."),)))
    frames = turn_bytes(text, "chat")
    cut = frames.index(b"\n\n") + 2
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(frames[:cut])
        await release.wait()
        await response.write(frames[cut:])
        await response.write_eof()
        return response

    records: list[ProxyRecord] = []
    async with serve_app(answer) as upstream, aiohttp.ClientSession() as session:
        config = ProxyConfig(upstream, gating=gating(), grace_seconds=30)
        async with serving(config, records.append) as proxy:
            async with session.post(proxy.url + PATHS["chat"], json=request_for("chat")) as held:
                start = await first_bytes(held)
                stopping = asyncio.ensure_future(proxy.stop())
                await wait_for(lambda: proxy.server.stopping, "the drain to begin")
                async with aiohttp.ClientSession() as other:  # a new connection
                    async with other.get(proxy.url + "/readyz") as ready:
                        ready_status = ready.status
                        ready_retry = ready.headers.get("retry-after")
                    async with other.get(proxy.url + "/healthz") as health:
                        health_status = health.status
                    async with other.post(
                        proxy.url + PATHS["chat"], json=request_for("chat")
                    ) as refused:
                        refused_status = refused.status
                        refused_connection = refused.headers.get("connection", "")
                release.set()
                rest = await held.read()
            await stopping
            with pytest.raises(aiohttp.ClientConnectionError):
                await post(proxy.url + "/readyz", {})
    assert (ready_status, ready_retry) == (503, "1")
    assert health_status == 200  # alive, not ready
    assert refused_status == 503
    assert refused_connection.lower() == "close"
    assert start + rest == frames  # the stream in flight ended whole
    assert sorted(r.outcome for r in records) == ["passed", "rejected"]
