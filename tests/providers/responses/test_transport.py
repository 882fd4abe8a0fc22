"""The real `openai` SDK decoding HTTP SSE served by httpx2.MockTransport (no network)."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable

import httpx2
import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, OpenFailure, ResponseFailure
from lockgate.fixture import ALL_TOOLS
from lockgate.providers.openai.transport import OpenAITransport
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder, sse_bytes
from lockgate.scripted.script import fragments

from ...helpers import EDIT, Recorder, responses_transport

FAKE_KEY = "sk-test-MOCKTRANSPORT-0123456789"
HISTORY = [Message("user", "fix it")]


class ChunkedBody(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes], fail_after: int | None = None) -> None:
        self.chunks = chunks
        self.fail_after = fail_after
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            if index == self.fail_after:
                raise httpx2.ReadError("connection reset by peer")
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


def edit_body(crlf: bool = False) -> list[bytes]:
    events = (
        ResponseBuilder("resp_1")
        .created()
        .text("msg_1", "Fixing.")
        .call("fc_1", "call_1", "edit", EDIT)
        .completed()
        .events
    )
    payload = b": keep-alive\n\n" + b"".join(sse_bytes(e) for e in events)
    if crlf:
        payload = payload.replace(b"\n", b"\r\n")
    return list(fragments(payload, (3, 11, 1, 97)))


def make_client(
    handler: Callable[[httpx2.Request], httpx2.Response], recorder: Recorder | None = None
) -> tuple[StreamingModelClient, OpenAITransport]:
    transport = responses_transport(
        api_key=FAKE_KEY,
        base_url="http://provider.test/v1",
        http_transport=httpx2.MockTransport(handler),
    )
    recorder = recorder or Recorder()
    client = StreamingModelClient(
        ResponsesCodec("gpt-4.1-mini"),
        transport,
        observer=recorder,
        sleep=recorder.sleep,
        rng=random.Random(2),
    )
    return client, transport


@pytest.mark.parametrize("crlf", [False, True])
async def test_sdk_raw_stream_is_decoded_and_gated(crlf: bool) -> None:
    requests: list[httpx2.Request] = []
    bodies: list[ChunkedBody] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(request)
        body = ChunkedBody(edit_body(crlf))
        bodies.append(body)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    client, transport = make_client(handler)
    decision = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert decision.content == "Fixing."
    assert [(c.name, dict(c.arguments)) for c in decision.tool_calls] == [("edit", EDIT)]
    assert len(requests) == 1
    sent = json.loads(requests[0].content)
    assert requests[0].url.path == "/v1/responses"
    assert requests[0].headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert sent["stream"] is True
    assert sent["store"] is False
    assert sent["parallel_tool_calls"] is False
    assert sent["max_output_tokens"] == 2048
    assert bodies[0].closed


@pytest.mark.parametrize(
    ("status", "attempts"),
    [(401, 1), (400, 1), (404, 1), (429, 3), (408, 3), (503, 3), (500, 3), (529, 3)],
)
async def test_opening_status_classification(status: int, attempts: int) -> None:
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        return httpx2.Response(
            status, json={"error": {"message": f"status {status}", "code": "some_code"}}
        )

    recorder = Recorder()
    client, transport = make_client(handler, recorder)
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == attempts
    assert caught.value.status == status
    assert f"HTTP {status}" in str(caught.value)
    assert len(recorder.sleeps) == attempts - 1
    assert FAKE_KEY not in str(caught.value)


async def test_connection_errors_while_opening_are_retried() -> None:
    calls = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise httpx2.ConnectError("connection refused")
        return httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, stream=ChunkedBody(edit_body())
        )

    client, transport = make_client(handler)
    decision = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert calls == 3
    assert decision.tool_calls


async def test_read_error_mid_stream_fails_without_retry() -> None:
    calls = 0
    body = ChunkedBody(edit_body(), fail_after=5)

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal calls
        calls += 1
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    client, transport = make_client(handler)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert caught.value.kind is FailureKind.TRANSPORT
    assert calls == 1
    assert body.closed


async def test_done_sentinel_from_a_gateway_is_tolerated() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=ChunkedBody([*edit_body(), b"data: [DONE]\n\n"]),
        )

    client, transport = make_client(handler)
    decision = await client.complete(HISTORY, ALL_TOOLS)
    await transport.aclose()
    assert decision.tool_calls
