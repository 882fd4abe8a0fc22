"""The official SDKs' stream parsers on the engine's output (google-genai's both ways it
reads a stream: over httpx2, served in process, and over aiohttp, its default, from a
loopback server), and a loopback aiohttp server for the time of a block."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anthropic
import httpx2
import openai
from aiohttp import web
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types


def _serving(body: bytes) -> httpx2.AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


def _openai(body: bytes) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="http://proxy.test/v1",
        max_retries=0,
        http_client=_serving(body),
    )


async def _openai_chat(body: bytes) -> None:
    client = _openai(body)
    async with client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        async for _ in stream:
            pass


async def _openai_responses_raw(body: bytes) -> None:
    client = _openai(body)
    async with client:
        stream = await client.responses.create(model="m", input="x", stream=True)
        async for _ in stream:
            pass


async def _openai_responses_helper(body: bytes) -> None:
    client = _openai(body)
    async with client, client.responses.stream(model="m", input="x") as stream:
        async for _ in stream:
            pass


async def _anthropic_messages(body: bytes) -> None:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test",
        base_url="http://proxy.test",
        max_retries=0,
        http_client=_serving(body),
    )
    async with (
        client,
        client.messages.stream(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "x"}]
        ) as stream,
    ):
        async for _ in stream:
            pass


GEMINI_MODEL = "lab-model"
GEMINI_KEY = "lab-key-not-a-secret"


@dataclass(frozen=True, slots=True)
class GenaiRead:
    """What google-genai made of a stream: every chunk it yielded, and what it raised
    then (None: it read to the end)."""

    chunks: tuple[genai_types.GenerateContentResponse, ...]
    raised: Exception | None

    def calls(self) -> list[tuple[str | None, str | None, object]]:
        """The calls it reports, in order: (id, name, args)."""
        return [
            (call.id, call.name, call.args)
            for chunk in self.chunks
            for call in chunk.function_calls or []
        ]


async def _genai_stream(http_options: genai_types.HttpOptions) -> GenaiRead:
    """google-genai as a user makes it (on the documented REST surface, `v1beta`; no
    retries, its default), streaming one answer."""
    client = genai.Client(api_key=GEMINI_KEY, http_options=http_options)
    got: list[genai_types.GenerateContentResponse] = []
    try:
        stream = await client.aio.models.generate_content_stream(model=GEMINI_MODEL, contents="x")
        async for chunk in stream:
            got.append(chunk)
    except Exception as exc:
        return GenaiRead(tuple(got), exc)
    finally:
        await client.aio.aclose()
    return GenaiRead(tuple(got), None)


async def genai_over_httpx(
    body: bytes, status: int = 200, content_type: str = "text/event-stream"
) -> GenaiRead:
    """google-genai's stream parser over httpx2 (`_aiter_sse_lines`: lines split at CR, LF
    and CRLF only), the body served in process."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, headers={"content-type": content_type}, content=body)

    transport = httpx2.MockTransport(handler)
    with httpx2.Client(transport=transport) as sync_http:  # given, so that it makes none
        async with httpx2.AsyncClient(transport=transport) as http:
            options = genai_types.HttpOptions(
                base_url="http://proxy.test",
                api_version="v1beta",
                httpx_async_client=http,
                httpx_client=sync_http,
            )
            return await _genai_stream(options)


async def _serve_once(body: bytes, status: int, content_type: str) -> tuple[asyncio.Server, str]:
    """A loopback HTTP/1.1 server answering each request with `body` (and `status`), then
    closing the connection."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(
                f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\n"
                "connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def aiohttp_loopback(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    """An aiohttp server on a free loopback port answering every method and path with
    `handler`, for the time of the block; its root URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _genai_aiohttp_session(body: bytes, status: int, content_type: str) -> GenaiRead:
    server, base_url = await _serve_once(body, status, content_type)
    async with server:
        return await _genai_stream(genai_types.HttpOptions(base_url=base_url, api_version="v1beta"))


async def genai_over_aiohttp(
    body: bytes, status: int = 200, content_type: str = "text/event-stream"
) -> GenaiRead:
    """google-genai's stream parser over aiohttp, what it uses by default when aiohttp is
    installed (`_aiter_aiohttp_lines`: lines split at LF only, then right-stripped), the
    body served by a loopback server of its own: on a real event loop, in a worker thread
    (sockets have no place on the tests' virtual-time loop)."""
    return await asyncio.to_thread(asyncio.run, _genai_aiohttp_session(body, status, content_type))


async def _genai_httpx(body: bytes) -> None:
    read = await genai_over_httpx(body)
    if read.raised is not None:
        raise read.raised


async def _genai_aiohttp(body: bytes) -> None:
    read = await genai_over_aiohttp(body)
    if read.raised is not None:
        raise read.raised


SDK_READERS: dict[str, tuple[Callable[[bytes], Awaitable[None]], ...]] = {
    "chat": (_openai_chat,),
    "responses": (_openai_responses_raw, _openai_responses_helper),
    "anthropic": (_anthropic_messages,),
    "gemini": (_genai_httpx, _genai_aiohttp),
}
SDK_ERRORS: dict[str, type[Exception]] = {
    "chat": openai.APIError,
    "responses": openai.APIError,
    "anthropic": anthropic.APIStatusError,
    "gemini": genai_errors.APIError,
}


async def sdk_raises(provider: str, body: bytes) -> list[str]:
    """Problems (empty: none): every official SDK parser for the protocol must raise its
    stream error, carrying lockgate's message, on `body`."""
    problems = []
    for reader in SDK_READERS[provider]:
        try:
            await reader(body)
        except SDK_ERRORS[provider] as exc:
            if "lockgate" not in str(exc):
                problems.append(f"{reader.__name__} raised without lockgate's message: {exc}")
        except Exception as exc:
            problems.append(f"{reader.__name__} raised {type(exc).__name__}: {exc}")
        else:
            problems.append(f"{reader.__name__} did not raise")
    return problems


async def sdk_reads(provider: str, body: bytes) -> list[str]:
    """Problems (empty: none): every official SDK parser for the protocol must read `body`
    to its end without raising."""
    problems = []
    for reader in SDK_READERS[provider]:
        try:
            await reader(body)
        except Exception as exc:
            problems.append(f"{reader.__name__} raised {type(exc).__name__}: {exc}")
    return problems
