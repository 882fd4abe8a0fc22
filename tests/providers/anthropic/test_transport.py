"""The real `anthropic` SDK as transport, over httpx2.MockTransport (no network).

The raw body decoded and gated, opening failures classified from Anthropic error bodies,
bounded error bodies, no redirects, the pinned credential.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, OpenFailure, ResponseFailure
from lockgate.fixture import ALL_TOOLS
from lockgate.http import encode_body
from lockgate.providers.anthropic import PROVIDER
from lockgate.providers.anthropic.codec import AnthropicCodec
from lockgate.providers.anthropic.render import MessageBuilder, sse_bytes
from lockgate.providers.anthropic.transport import AnthropicTransport
from lockgate.scripted.script import fragments
from lockgate.transport import TransportOptions

from ...helpers import EDIT, Recorder

FAKE_KEY = "sk-ant-test-MOCKTRANSPORT-0123456789"
HISTORY = [Message("system", "Be careful."), Message("user", "fix it")]
SSE = {"content-type": "text/event-stream"}


class ChunkedBody(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes], fail_after: int | None = None) -> None:
        self.chunks = chunks
        self.fail_after = fail_after
        self.sent = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            if index == self.fail_after:
                raise httpx2.ReadError("connection reset by peer")
            self.sent += 1
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


def edit_body() -> list[bytes]:
    builder = MessageBuilder("msg_1").start().text("Fixing.").tool_use("toolu_1", "edit", EDIT)
    payload = b"".join(sse_bytes(event) for event in builder.finish("tool_use").events)
    return list(fragments(payload, (3, 11, 1, 97)))


def error_body(kind: str, message: str = "failed") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


def make_client(
    handler: Callable[[httpx2.Request], httpx2.Response], recorder: Recorder | None = None
) -> tuple[StreamingModelClient, AnthropicTransport, Recorder]:
    transport = AnthropicTransport(
        TransportOptions(
            api_key=FAKE_KEY,
            base_url="http://provider.test",
            http_transport=httpx2.MockTransport(handler),
        )
    )
    recorder = recorder or Recorder()
    client = StreamingModelClient(
        AnthropicCodec("claude-test"),
        transport,
        observer=recorder,
        sleep=recorder.sleep,
        rng=random.Random(2),
    )
    return client, transport, recorder


async def test_a_raw_stream_is_decoded_and_gated(monkeypatch: pytest.MonkeyPatch) -> None:
    # Custom headers from the environment cannot replace the key lockgate pins.
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "Authorization: Bearer from-env\nX-Extra: 1")
    requests: list[httpx2.Request] = []
    bodies: list[ChunkedBody] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(request)
        bodies.append(ChunkedBody(edit_body()))
        return httpx2.Response(200, headers=SSE, stream=bodies[-1])

    client, transport, _ = make_client(handler)
    decision = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert decision.content == "Fixing."
    assert [(c.name, dict(c.arguments)) for c in decision.tool_calls] == [("edit", EDIT)]
    assert len(requests) == 1
    request = requests[0]
    assert request.url.path == "/v1/messages"
    assert request.headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert request.headers["x-extra"] == "1"
    assert "anthropic-version" in request.headers
    sent = json.loads(request.content)
    assert request.content == encode_body(sent)  # the codec's body, sent as built
    assert sent["stream"] is True
    assert sent["system"] == "Be careful."
    assert sent["max_tokens"] == 2048
    assert bodies[0].closed


@pytest.mark.parametrize(
    ("status", "kind", "attempts"),
    [
        (400, "invalid_request_error", 1),
        (401, "authentication_error", 1),
        (404, "not_found_error", 1),
        (429, "rate_limit_error", 3),
        (500, "api_error", 3),
        (529, "overloaded_error", 3),
    ],
)
async def test_opening_status_classification(status: int, kind: str, attempts: int) -> None:
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        return httpx2.Response(status, json=error_body(kind, f"status {status}"))

    client, transport, recorder = make_client(handler)
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == attempts
    assert caught.value.status == status
    assert f"HTTP {status} {kind}" in str(caught.value)
    assert len(recorder.sleeps) == attempts - 1
    assert FAKE_KEY not in str(caught.value)


async def test_billing_error_is_an_exhausted_quota_with_one_attempt() -> None:
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        return httpx2.Response(429, json=error_body("billing_error", "credit balance too low"))

    client, transport, recorder = make_client(handler)
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == 1
    assert caught.value.kind is FailureKind.QUOTA_EXHAUSTED
    assert recorder.sleeps == []


async def test_a_529_with_retry_after_waits_that_long() -> None:
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx2.Response(
                529, headers={"retry-after": "7"}, json=error_body("overloaded_error", "Overloaded")
            )
        return httpx2.Response(200, headers=SSE, stream=ChunkedBody(edit_body()))

    client, transport, recorder = make_client(handler)
    decision = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == 2
    assert recorder.sleeps == [7.0]
    assert decision.tool_calls


async def test_a_gzip_bomb_error_body_is_read_under_the_cap() -> None:
    inflated = b'{"type":"error","error":{"type":"api_error","message":"' + b"x" * (64 * 1024**2)
    compressed = gzip.compress(inflated, compresslevel=9)
    chunks = [compressed[i : i + 4096] for i in range(0, len(compressed), 4096)]
    bodies: list[ChunkedBody] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        bodies.append(ChunkedBody(chunks))
        return httpx2.Response(400, headers={"content-encoding": "gzip"}, stream=bodies[-1])

    client, transport, _ = make_client(handler)
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert caught.value.status == 400
    assert len(bodies) == 1
    assert bodies[0].sent < len(chunks)  # the rest was never read, let alone inflated
    assert len(str(caught.value)) < 1000


async def test_a_redirect_is_not_followed() -> None:
    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        return httpx2.Response(307, headers={"location": "http://elsewhere.test/v1/messages"})

    client, transport, _ = make_client(handler)
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert seen == ["http://provider.test/v1/messages"]
    assert caught.value.status == 307


async def test_connection_errors_while_opening_are_retried_and_redacted() -> None:
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise httpx2.ConnectError(f"connection refused (key {FAKE_KEY})")
        return httpx2.Response(200, headers=SSE, stream=ChunkedBody(edit_body()))

    recorder = Recorder()
    client, transport, _ = make_client(handler, recorder)
    decision = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == 3
    assert decision.tool_calls
    reasons = [getattr(event, "reason", "") for event in recorder.events]
    assert any("connection failed" in reason for reason in reasons)
    assert not any(FAKE_KEY in reason for reason in reasons)


async def test_a_read_error_mid_stream_fails_without_retry() -> None:
    calls = 0
    body = ChunkedBody(edit_body(), fail_after=5)

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        return httpx2.Response(200, headers=SSE, stream=body)

    client, transport, _ = make_client(handler)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert caught.value.kind is FailureKind.TRANSPORT
    assert calls == 1
    assert body.closed


async def test_an_in_stream_overload_before_content_is_retried_only_when_enabled() -> None:
    from lockgate.retry import RetryPolicy

    overloaded = MessageBuilder("msg_0").start().ping().error()
    payload = b"".join(sse_bytes(event) for event in overloaded.events)
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        chunks = [payload] if calls == 1 else edit_body()
        return httpx2.Response(200, headers=SSE, stream=ChunkedBody(chunks))

    client, transport, _ = make_client(handler)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.PROVIDER_ERROR
    assert calls == 1
    client.retry = RetryPolicy(retry_unstarted=True)
    calls = 0
    decision = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == 2
    assert decision.tool_calls


@pytest.mark.parametrize("kept", ["web_search", "redacted_thinking"])
async def test_an_overload_after_a_kept_block_began_is_never_retried(kept: str) -> None:
    # A provider-side tool that began (or redacted thinking the model produced) is content,
    # though nothing is shown: the response started, and `retry_unstarted` does not apply.
    from lockgate.retry import RetryPolicy

    if kept == "web_search":
        block = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    else:
        block = {"type": "redacted_thinking", "data": "EmwKAhgBEgy+opaque=="}
    # The overload arrives while the block is still open (before its stop made it output).
    builder = MessageBuilder("msg_0").start()
    builder.emit({"type": "content_block_start", "index": 0, "content_block": block})
    payload = b"".join(sse_bytes(event) for event in builder.error().events)
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        chunks = [payload] if calls == 1 else edit_body()
        return httpx2.Response(200, headers=SSE, stream=ChunkedBody(chunks))

    client, transport, _ = make_client(handler)
    client.retry = RetryPolicy(retry_unstarted=True)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert caught.value.kind is FailureKind.PROVIDER_ERROR
    assert calls == 1


async def test_a_closed_transport_makes_no_request() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise AssertionError("no request may be made")

    _, transport, _ = make_client(handler)
    await transport.aclose()
    with pytest.raises(OpenFailure) as caught:
        await transport.open({"model": "m"})
    assert not caught.value.retryable


def test_a_key_that_cannot_travel_in_a_header_is_refused_without_echo() -> None:
    with pytest.raises(ValueError, match="api_key") as caught:
        PROVIDER.make_transport(TransportOptions(api_key="sk-ant bad key"))
    assert "sk-ant" not in str(caught.value)


async def test_the_registry_builds_the_sdk_transport_with_the_aiohttp_backend() -> None:
    transport = PROVIDER.make_transport(TransportOptions(api_key=FAKE_KEY))
    assert isinstance(transport, AnthropicTransport)
    await transport.aclose()
