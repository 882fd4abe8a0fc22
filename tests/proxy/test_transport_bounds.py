"""The gating transport's time bounds outside the engine's stream: the wait for the
response head (every gated request) and the reading of a whole (non-streaming) answer
honour `GatingOptions.idle_timeout` (silence) and `GatingOptions.deadline` (from the
request's start), as `lockgate proxy` does. A bound that runs out is a refusal a new request
may cure: the protocol's JSON error body, marked transient (no `x-should-retry: false`), a
502 when the head had arrived and a 504 when it never did; the inner response is closed.

Most tests run on virtual time (`support.run`) against in-memory upstreams that stall; the
last ones against loopback servers that stall (real time, but no timing is asserted: the
refusal's kind and body are; a generous outer timeout is only a guard against a hang)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import pytest

from lockgate.gateway import Refusal
from lockgate.providers import provider as registry_entry
from lockgate.proxy import GatingOptions
from lockgate.proxy.transport import GatingTransport, gated_client
from lockgate.scripted.reply import Reply, Say

from .support import BODY_STREAMED_PROTOCOLS as PROTOCOLS
from .support import options, request_for, run

ORIGIN = "http://upstream.test"
GUARD_SECONDS = 3600.0  # virtual: a test that would hang fails at once instead
LOOPBACK_GUARD_SECONDS = 60.0  # real time, only against a hang


# --- what the client receives -------------------------------------------------------------------


def whole_request(provider: str) -> dict[str, Any]:
    """The protocol's request without `stream`: its answer is a whole JSON document."""
    request = dict(request_for(provider))
    request.pop("stream", None)
    request.pop("stream_options", None)
    return dict(request)


def path_of(provider: str) -> str:
    return registry_entry(provider).render().path


def document(provider: str) -> bytes:
    reply = Reply("resp_whole", (Say("The bug is in add: it subtracts."),))
    return json.dumps(registry_entry(provider).render().completion(reply)).encode()


def refusal_kind(provider: str, response: httpx2.Response) -> str:
    """The kind of the transient refusal `response` carries, checked to be exactly the
    protocol's JSON error body for it (and nothing that tells the SDK not to retry)."""
    assert response.headers["content-type"] == "application/json"
    assert "x-should-retry" not in response.headers
    message: str = json.loads(response.content)["error"]["message"]
    prefix, kind, _ = message.split(": ", 2)
    assert prefix == "lockgate refused the response"
    make_gateway = registry_entry(provider).gateway
    assert make_gateway is not None
    assert response.content == make_gateway().error_body(Refusal(kind, message, True, 0))
    return kind


# --- upstreams that stall ---------------------------------------------------------------------


class Stalling(httpx2.AsyncByteStream):
    """A body of `chunks` (a read each), then silence for ever, or a byte every `drip`
    seconds for ever: it never ends."""

    def __init__(self, chunks: Sequence[bytes], *, drip: float | None = None) -> None:
        self.chunks = list(chunks)
        self.drip = drip
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            await asyncio.sleep(0)
            yield chunk
        if self.drip is None:
            await asyncio.Event().wait()
        while True:
            assert self.drip is not None
            await asyncio.sleep(self.drip)
            yield b" "

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class Upstream(httpx2.AsyncBaseTransport):
    """Answers every request with `body` (status 200) after `head_after` seconds (None:
    the head never comes); counts the requests."""

    body: Callable[[], httpx2.AsyncByteStream]
    head_after: float | None = 0.0
    content_type: str = "application/json"
    requests: int = 0
    waiting: int = 0  # requests still waiting for their head

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        if request.method == "GET":  # a listing, at once (no protocol request: not gated)
            return httpx2.Response(200, json={"object": "list", "data": []})
        self.requests += 1
        self.waiting += 1
        try:
            if self.head_after is None:
                await asyncio.Event().wait()
            else:
                await asyncio.sleep(self.head_after)
        finally:
            self.waiting -= 1
        headers = {"content-type": self.content_type, "x-request-id": "req_bound"}
        return httpx2.Response(200, headers=headers, stream=self.body())


def post(
    upstream: httpx2.AsyncBaseTransport, provider: str, gating: GatingOptions, *, stream: bool
) -> Coroutine[Any, Any, httpx2.Response]:
    request = request_for(provider) if stream else whole_request(provider)

    async def send() -> httpx2.Response:
        async with (
            asyncio.timeout(GUARD_SECONDS),
            httpx2.AsyncClient(transport=GatingTransport(upstream, gating)) as http,
        ):
            response = await http.post(ORIGIN + path_of(provider), json=request)
            await response.aread()
            return response

    return send()


# --- a whole answer ---------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_whole_answer_that_falls_silent_is_refused_at_the_idle_timeout(provider: str) -> None:
    half = document(provider)[:40]
    bodies: list[Stalling] = []

    def body() -> Stalling:
        bodies.append(Stalling([half]))
        return bodies[-1]

    response = run(post(Upstream(body), provider, options(idle_timeout=3.0), stream=False))
    assert response.status_code == 502
    assert refusal_kind(provider, response) == "idle_timeout"
    assert half not in response.content
    assert [body.closed for body in bodies] == [True]


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_whole_answer_that_trickles_past_the_deadline_is_refused(provider: str) -> None:
    # Never silent for the idle timeout, never complete: the deadline ends it.
    bodies: list[Stalling] = []

    def body() -> Stalling:
        bodies.append(Stalling([document(provider)[:40]], drip=1.0))
        return bodies[-1]

    gating = options(idle_timeout=3.0, deadline=10.0)
    response = run(post(Upstream(body), provider, gating, stream=False))
    assert response.status_code == 502
    assert refusal_kind(provider, response) == "deadline"
    assert [body.closed for body in bodies] == [True]


def test_the_deadline_counts_from_the_request_not_from_the_head() -> None:
    # The head takes 8 s (under the idle timeout of 9 s), the body 4 s more in silence-free
    # drips: 12 s in all, past a deadline of 10 s that the body alone never reaches.
    bodies: list[Stalling] = []

    def body() -> Stalling:
        bodies.append(Stalling([document("chat")[:40]], drip=1.0))
        return bodies[-1]

    gating = options(idle_timeout=9.0, deadline=10.0)
    upstream = Upstream(body, head_after=8.0)
    response = run(post(upstream, "chat", gating, stream=False))
    assert response.status_code == 502
    assert refusal_kind("chat", response) == "deadline"
    assert [body.closed for body in bodies] == [True]


def test_a_whole_answer_within_the_bounds_is_judged_as_before() -> None:
    # A slow head and a slow body, each within the bounds: accepted, unchanged.
    whole = document("chat")
    pieces = [whole[i : i + 50] for i in range(0, len(whole), 50)]

    class Slow(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for piece in pieces:
                await asyncio.sleep(2.0)
                yield piece

    upstream = Upstream(Slow, head_after=2.5)
    response = run(post(upstream, "chat", options(idle_timeout=3.0, deadline=60.0), stream=False))
    assert response.status_code == 200
    assert response.content == whole
    assert response.headers["x-request-id"] == "req_bound"


def test_the_sdk_reads_the_silent_whole_answer_as_a_502_and_retries_it() -> None:
    # The refusal is transient: with its default retries the SDK asks again (three requests
    # in all), then raises the 502 with lockgate's reason.
    bodies: list[Stalling] = []

    def body() -> Stalling:
        bodies.append(Stalling([b'{"id": "chatcmpl-1", ']))
        return bodies[-1]

    upstream = Upstream(body)

    async def ask() -> openai.InternalServerError:
        client = openai.AsyncOpenAI(
            api_key="sk-test",
            base_url=f"{ORIGIN}/v1",
            max_retries=2,
            http_client=httpx2.AsyncClient(
                transport=GatingTransport(upstream, options(idle_timeout=3.0))
            ),
        )
        async with client:
            # The SDK's first request looks up the platform in a thread: done here, before
            # the guard's timer exists (virtual time would jump to it while the thread runs).
            await client.models.list()
            async with asyncio.timeout(GUARD_SECONDS):
                with pytest.raises(openai.InternalServerError) as caught:
                    await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "fix it"}]
                    )
                return caught.value

    raised = run(ask())
    assert raised.status_code == 502
    assert "lockgate refused the response: idle_timeout: " in str(raised)
    assert upstream.requests == 3
    assert [body.closed for body in bodies] == [True, True, True]


# --- the response head --------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_a_head_that_never_comes_is_refused_at_the_idle_timeout(
    provider: str, stream: bool
) -> None:
    upstream = Upstream(lambda: Stalling([]), head_after=None)
    response = run(post(upstream, provider, options(idle_timeout=3.0), stream=stream))
    assert response.status_code == 504
    assert refusal_kind(provider, response) == "idle_timeout"
    assert upstream.waiting == 0  # the wait for the head was given up (cancelled)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_a_head_that_never_comes_is_refused_at_the_deadline_when_it_is_sooner(
    stream: bool,
) -> None:
    upstream = Upstream(lambda: Stalling([]), head_after=None)
    gating = options(idle_timeout=60.0, deadline=5.0)
    response = run(post(upstream, "anthropic", gating, stream=stream))
    assert response.status_code == 504
    assert refusal_kind("anthropic", response) == "deadline"
    assert upstream.waiting == 0


def test_a_head_within_the_idle_timeout_opens_the_stream_as_before() -> None:
    frames = [
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
    ]
    upstream = Upstream(lambda: Stalling(frames), head_after=2.5, content_type="text/event-stream")

    async def first_piece() -> tuple[int, bytes]:
        transport = GatingTransport(upstream, options(idle_timeout=3.0))
        async with (
            asyncio.timeout(GUARD_SECONDS),
            httpx2.AsyncClient(transport=transport) as http,
            http.stream("POST", ORIGIN + path_of("chat"), json=request_for("chat")) as response,
        ):
            pieces = response.aiter_bytes()
            return response.status_code, await anext(pieces)

    assert run(first_piece()) == (200, frames[0])


# --- loopback servers that stall ----------------------------------------------------------------


@dataclass
class Stall:
    """A loopback HTTP/1.1 server that reads a request, then sends `head` (or nothing) and
    falls silent; `hung_up` is set when the client closes the connection."""

    head: bytes | None
    hung_up: asyncio.Event

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            if self.head is not None:
                writer.write(self.head)
                await writer.drain()
            while await reader.read(1024):
                pass
            self.hung_up.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.hung_up.set()
        finally:
            writer.close()


async def through_loopback(
    head: bytes | None, gating: GatingOptions, provider: str
) -> tuple[httpx2.Response, bool]:
    """The gated client's answer to a whole request against a stalling loopback server,
    and whether the server saw the client hang up."""
    stall = Stall(head, asyncio.Event())
    server = await asyncio.start_server(stall.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(LOOPBACK_GUARD_SECONDS):
            async with gated_client(gating, base_url=f"http://127.0.0.1:{port}") as http:
                response = await http.post(path_of(provider), json=whole_request(provider))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LOOPBACK_GUARD_SECONDS):
                await stall.hung_up.wait()
        return response, stall.hung_up.is_set()
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


LOOPBACK_GATING = GatingOptions(idle_timeout=0.3, deadline=30.0)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_a_loopback_server_that_never_sends_the_body_is_refused(provider: str) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n{"
    response, hung_up = asyncio.run(through_loopback(head, LOOPBACK_GATING, provider))
    assert response.status_code == 502
    assert refusal_kind(provider, response) == "idle_timeout"
    assert hung_up


def test_a_loopback_server_that_never_answers_is_refused() -> None:
    response, hung_up = asyncio.run(through_loopback(None, LOOPBACK_GATING, "responses"))
    assert response.status_code == 504
    assert refusal_kind("responses", response) == "idle_timeout"
    assert hung_up
