"""Retries of what the client never saw (issue 24): a route may send a protocol request
again, or to a fall-back upstream, when its answer was refused for a transient reason
before anything of it reached the client; never once content went out. Each case is the
scripted server's turns in order (the faults a gateway benchmark plays: a 429 with
`retry-after`, a 500 once, a reset before the head, a 503 that persists with a fall-back,
silence, a cut mid-answer), with what the client received and what the proxy recorded."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web

from lockgate.proxy.config import RouteRetries
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.scripted.reply import Call, OpeningError, Reply, Say
from lockgate.scripted.script import Faults, Turn

from ..helpers import EDIT
from .support import ends_with_refusal, request_for, sdk_raises, tool_events
from .test_server import (
    call_reply,
    gating,
    origin,
    proxy_to,
    raw_exchange,
    scripted,
    serve_app,
)

PATH = "/v1/chat/completions"
ACCEPTED = call_reply(Call("call_1", "edit", EDIT))
TEXT = Turn(reply=Reply("r_text", (Say("All fixed."),)))


def retries(attempts: int = 2, max_wait: float = 5.0) -> RouteRetries:
    return RouteRetries(attempts, max_wait)


async def post(url: str, body: object | None = None) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + PATH, json=body or request_for("chat")) as response,
    ):
        return response.status, dict(response.headers), await response.read()


def _text(body: bytes) -> str:
    """The text a Chat client read of a stream."""
    text = ""
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                text += (choice.get("delta") or {}).get("content") or ""
    return text


def rate_limited(wait: str = "0") -> Turn:
    error = OpeningError(429, "rate_limit", "Rate limit reached; try again shortly")
    return Turn(error=error, headers={"retry-after": wait})


def server_error() -> Turn:
    return Turn(error=OpeningError(500, "server", "The server had an error"))


@pytest.mark.parametrize(
    "first",
    [
        rate_limited("0"),
        server_error(),
        Turn(connection_error=True),  # a reset before the head
        Turn(reply=ACCEPTED.reply, faults=Faults(reset_after=1)),  # a reset after the start
        Turn(reply=ACCEPTED.reply, faults=Faults(stall_after=1, stall_seconds=30)),  # silence
    ],
    ids=["429-once", "500-once", "reset-before-head", "reset-before-content", "silence"],
)
async def test_a_transient_failure_the_client_never_saw_is_retried(first: Turn) -> None:
    async with scripted(
        "chat", [first, ACCEPTED], retries=retries(), gating=gating(idle_timeout=1.0)
    ) as (server, proxied):
        status, _headers, body = await post(proxied.proxy.url)
    assert status == 200
    assert b'"edit"' in body  # the second attempt's calls, released
    assert b"error" not in body  # nothing of the first attempt reached the client
    assert len(server.requests) == 2
    [record] = proxied.records
    assert (record.outcome, record.retries) == ("passed", 1)


async def test_content_already_sent_is_never_retried() -> None:
    # The text went out, then the stream was cut: the client saw it; the proxy refuses.
    cut = Turn(reply=ACCEPTED.reply, faults=Faults(reset_after=6))
    async with scripted("chat", [cut, ACCEPTED], retries=retries()) as (server, proxied):
        status, _, body = await post(proxied.proxy.url)
    assert status == 200
    assert _text(body).startswith("Fixing")  # text went out before the cut
    assert ends_with_refusal(body, "chat")
    assert tool_events(body) == []
    assert len(server.requests) == 1
    assert proxied.records[0].retries == 0


async def test_a_final_refusal_after_spent_retries_says_do_not_retry() -> None:
    async with scripted(
        "chat", [server_error(), server_error(), server_error()], retries=retries(2)
    ) as (server, proxied):
        status, headers, _body = await post(proxied.proxy.url)
    assert status == 500
    assert headers.get("x-should-retry") == "false"
    assert len(server.requests) == 3
    assert proxied.records[0].retries == 2


async def test_a_final_refusal_before_content_is_the_streams_error_frame() -> None:
    # An invalid batch, on a route that retries: not retried (the model's answer), and
    # refused as the protocol's in-stream error, not an error status that Codex and Gemini
    # CLI would retry (neither reads x-should-retry; an SDK never retries a stream's error).
    calls_only = Reply("r_calls", (Call("call_1", "edit", EDIT), Call("call_2", "rm_rf", {})))
    async with scripted("chat", [Turn(reply=calls_only), ACCEPTED], retries=retries()) as (
        server,
        proxied,
    ):
        status, _, body = await post(proxied.proxy.url)
    assert status == 200
    assert ends_with_refusal(body, "chat")
    assert tool_events(body) == []
    assert len(server.requests) == 1
    assert proxied.records[0].outcome == "withheld"


async def test_a_terminal_error_is_never_retried() -> None:
    quota = Turn(error=OpeningError(429, "quota", "You exceeded your current quota"))
    async with scripted("chat", [quota, ACCEPTED], retries=retries()) as (server, proxied):
        status, _, _ = await post(proxied.proxy.url)
    assert status == 429
    assert len(server.requests) == 1


async def test_a_wait_longer_than_the_route_waits_is_neither_waited_nor_passed_on() -> None:
    async with scripted("chat", [rate_limited("3600"), ACCEPTED], retries=retries(2, 30.0)) as (
        server,
        proxied,
    ):
        status, headers, body = await post(proxied.proxy.url)
    assert status == 429
    assert "retry-after" not in {name.lower() for name in headers}
    assert headers.get("x-should-retry") == "false"
    message = json.loads(body)["error"]["message"]
    assert "asks to wait 3600 s" in message
    assert "longer than this route waits (30 s)" in message
    assert len(server.requests) == 1


async def test_without_retries_a_long_wait_is_not_passed_on_either() -> None:
    # The Anthropic SDK slept an hour on `retry-after: 3600` through the proxy.
    async with scripted("chat", [rate_limited("3600")]) as (_, proxied):
        status, headers, _ = await post(proxied.proxy.url)
    assert status == 429
    assert headers.get("x-should-retry") == "false"
    assert "retry-after" not in {name.lower() for name in headers}


async def test_the_openai_sdk_through_a_retrying_route_sees_no_failure() -> None:
    async with scripted("chat", [rate_limited("0"), TEXT], retries=retries()) as (_, proxied):
        client = openai.AsyncOpenAI(
            base_url=proxied.proxy.url + "/v1", api_key="sk-test-unused", max_retries=0
        )
        stream = await client.chat.completions.create(
            model="lab-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(
            [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        )
        await client.close()
    assert text == "All fixed."


# --- fall-backs ------------------------------------------------------------------------------


async def test_a_persistent_503_is_retried_on_its_upstream_then_falls_back_with_its_model() -> None:
    from lockgate.lab.server import serve_script
    from lockgate.proxy.config import ProxySettings, RouteSettings, UpstreamSettings

    down = Turn(error=OpeningError(503, "overloaded", "Service unavailable"))
    records: list[ProxyRecord] = []
    async with (
        serve_script([down, down, down], provider="chat") as primary,
        serve_script([ACCEPTED], provider="chat") as backup,
    ):
        route = RouteSettings(
            "chat",
            "",
            UpstreamSettings(origin(primary)),
            gating(),
            retries(1),
            (UpstreamSettings(origin(backup), model="backup-model"),),
        )
        async with serving(ProxySettings((route,)), records.append) as running:
            status, _, body = await post(running.url)
    assert status == 200
    assert b'"edit"' in body
    assert len(primary.requests) == 2  # the same upstream first (retries: 1), then the next
    [sent] = backup.requests
    assert sent.body["model"] == "backup-model"
    assert (records[0].outcome, records[0].retries) == ("passed", 2)


def test_the_shorthand_takes_retries_too() -> None:
    config = ProxyConfig("http://127.0.0.1:9", retries=retries(3, 10.0))
    [route] = config.settings().routes
    assert route.retries == RouteRetries(3, 10.0)


# --- a retry after an upstream comment (issue 27) ------------------------------------------
# OpenRouter sends `: OPENROUTER PROCESSING` before its first event. The comment goes out as a
# keep-alive, so the client's 200 head went while the start was still held for a retry: every
# later failure must end that open stream with the protocol's refusal frame, never a second
# head, an error body spliced into the stream, or a clean empty end.

COMMENT = b": OPENROUTER PROCESSING\n\n"


async def _comment_then(request: web.Request, how: str) -> web.StreamResponse:
    """A stream that sends OpenRouter's comment, then resets (`reset`) or ends (`end`)."""
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    await response.write(COMMENT)
    if how == "reset":
        assert request.transport is not None
        request.transport.abort()
    return response


async def _final(request: web.Request, how: str) -> web.StreamResponse:
    if how == "429":
        error = {"error": {"message": "Rate limit reached", "type": "rate_limit"}}
        return web.json_response(error, status=429, headers={"retry-after": "0"})
    if how == "500":
        return web.json_response({"error": {"message": "boom", "type": "server"}}, status=500)
    assert request.transport is not None  # a reset before the head
    request.transport.abort()
    return web.Response()


@contextlib.asynccontextmanager
async def commenting_upstream(first: str, then: str, attempts: list[int]) -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        attempts.append(1)
        if len(attempts) == 1:
            return await _comment_then(request, first)
        return await _final(request, then)

    async with serve_app(answer) as url:
        yield url


def _raw_request(body: object, path: str = PATH) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + data


@pytest.mark.parametrize("first", ["reset", "end"])
@pytest.mark.parametrize("then", ["429", "500", "reset"])
async def test_a_failed_retry_after_a_comment_ends_the_open_stream_with_a_refusal(
    first: str, then: str
) -> None:
    attempts: list[int] = []
    async with (
        commenting_upstream(first, then, attempts) as url,
        proxy_to(url, retries=retries(attempts=1), gating=gating(idle_timeout=5.0)) as proxied,
    ):
        raw = await raw_exchange(proxied.proxy.url, _raw_request(request_for("chat")))
    assert len(attempts) == 2
    assert raw.count(b"HTTP/1.1 ") == 1  # one head, never a second status line
    assert raw.startswith(b"HTTP/1.1 200 ")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"chunked" in head.lower()
    assert b": lockgate keep-alive\n\n" in body  # the comment, as the proxy's keep-alive
    frames = [line for line in body.split(b"\r\n") if line.startswith(b"data: ")]
    assert len(frames) == 1  # the refusal frame, nothing spliced
    error = json.loads(frames[0][6:])["error"]
    assert error["code"] == "lockgate_opening"
    assert b"\r\n0\r\n\r\n" in body  # the stream ended (its refusal said why)
    [record] = proxied.records
    assert record.status == 200  # the status that was sent
    assert record.outcome == "error"
    assert record.retries == 1


@pytest.mark.parametrize("then", ["429", "reset"])
async def test_the_openai_sdk_raises_on_a_failed_retry_after_a_comment(then: str) -> None:
    attempts: list[int] = []
    async with (
        commenting_upstream("reset", then, attempts) as url,
        proxy_to(url, retries=retries(attempts=1)) as proxied,
    ):
        client = openai.AsyncOpenAI(
            base_url=proxied.proxy.url + "/v1", api_key="unused", max_retries=0
        )
        stream = await client.chat.completions.create(**{**request_for("chat"), "stream": True})
        with pytest.raises(openai.APIError, match="lockgate proxy"):
            async for _chunk in stream:
                pass
        await client.close()
    assert len(attempts) == 2


@pytest.mark.parametrize("then", ["500", "reset"])
async def test_the_anthropic_sdk_raises_on_a_failed_retry_after_a_comment(then: str) -> None:
    attempts: list[int] = []
    async with (
        commenting_upstream("reset", then, attempts) as url,
        proxy_to(url, retries=retries(attempts=1)) as proxied,
    ):
        client = anthropic.AsyncAnthropic(
            base_url=proxied.proxy.url, api_key="unused", max_retries=0
        )
        request = {**request_for("anthropic"), "stream": True}
        stream = await client.messages.create(**request)
        with pytest.raises(anthropic.APIStatusError, match="lockgate proxy"):
            async for _event in stream:
                pass
        await client.close()
    assert len(attempts) == 2


async def test_retries_go_on_after_a_comment_while_nothing_else_was_seen() -> None:
    attempts: list[int] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        attempts.append(1)
        if len(attempts) < 3:
            return await _comment_then(request, "reset")
        return await _final(request, "429")

    async with (
        serve_app(answer) as url,
        proxy_to(url, retries=retries(attempts=2)) as proxied,
    ):
        raw = await raw_exchange(proxied.proxy.url, _raw_request(request_for("chat")))
    assert len(attempts) == 3
    assert raw.count(b"HTTP/1.1 ") == 1
    assert b"lockgate_opening" in raw
    assert b"HTTP 429" in raw


# --- header names in any letter case (issue 27) --------------------------------------------


def _persistent(status: int, headers: dict[str, str], attempts: list[int]) -> Any:
    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        attempts.append(1)
        error = {"error": {"message": "Overloaded", "type": "server"}}
        return web.json_response(error, status=status, headers=headers)

    return answer


@pytest.mark.parametrize("name", ["X-Should-Retry", "x-SHOULD-retry"])
async def test_a_mixed_case_should_retry_never_survives_beside_the_final_false(name: str) -> None:
    attempts: list[int] = []
    headers = {name: "true", "Retry-After": "0", "X-Request-Id": "req-1"}
    async with (
        serve_app(_persistent(503, headers, attempts)) as url,
        proxy_to(url, retries=retries(attempts=2)) as proxied,
        aiohttp.ClientSession() as session,
        session.post(proxied.proxy.url + PATH, json=request_for("chat")) as response,
    ):
        await response.read()
        assert response.status == 503
        assert response.headers.getall("x-should-retry") == ["false"]
        assert response.headers.getall("x-request-id") == ["req-1"]
    assert len(attempts) == 3


async def test_the_openai_sdk_does_not_multiply_retries_told_in_another_case() -> None:
    attempts: list[int] = []
    headers = {"X-Should-Retry": "true", "Retry-After": "0"}
    async with (
        serve_app(_persistent(503, headers, attempts)) as url,
        proxy_to(url, retries=retries(attempts=2)) as proxied,
    ):
        client = openai.AsyncOpenAI(
            base_url=proxied.proxy.url + "/v1", api_key="unused", max_retries=2
        )
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(**{**request_for("chat"), "stream": True})
        await client.close()
    assert len(attempts) == 3  # the proxy's 3; the SDK's own retries obeyed `false`


async def test_a_repeated_upstream_header_passes_with_every_value() -> None:
    attempts: list[int] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        attempts.append(1)
        response = web.json_response({"error": {"message": "no"}}, status=400)
        response.headers.add("X-Trace", "a")
        response.headers.add("X-Trace", "b")
        return response

    async with (
        serve_app(answer) as url,
        proxy_to(url) as proxied,
        aiohttp.ClientSession() as session,
        session.post(proxied.proxy.url + PATH, json=request_for("chat")) as response,
    ):
        await response.read()
        assert response.headers.getall("x-trace") == ["a", "b"]


SDK_PATHS = {
    "chat": PATH,
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/lab-model:streamGenerateContent?alt=sse",
}


@pytest.mark.parametrize("provider", sorted(SDK_PATHS))
async def test_every_official_sdk_raises_the_refusal_after_a_comment(provider: str) -> None:
    attempts: list[int] = []
    async with (
        commenting_upstream("reset", "429", attempts) as url,
        proxy_to(url, retries=retries(attempts=1)) as proxied,
        aiohttp.ClientSession() as session,
        session.post(proxied.proxy.url + SDK_PATHS[provider], json=request_for(provider)) as got,
    ):
        status, body = got.status, await got.read()
    assert status == 200  # the head the comment sent
    assert await sdk_raises(provider, body) == []
    assert len(attempts) == 2
