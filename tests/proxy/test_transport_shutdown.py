"""The gating transport's lifecycle when the official SDK leaves a stream without closing it:
`break` out of the loop over the SDK's stream, `client.close()`, then the event loop shuts
down. Closing the client closes the upstream, and nothing is printed at shutdown (no
`aclose(): asynchronous generator is already running`, no other error or warning).

The first test runs the cases in a fresh interpreter (this module run as a script: `python
-m tests.proxy.test_transport_shutdown PROVIDER…`), as a user's program does, each on its
own event loop against a loopback server it starts, and asserts on that process's output.
The others run in this process on virtual time (`support.run`) against an in-memory
upstream whose close ends a pending read, as a connection's does. No timing is asserted: the
servers report the hang-up through events; generous timeouts only guard against a hang."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai

from lockgate.providers import provider as registry_entry
from lockgate.proxy.transport import GatingTransport, gated_client
from lockgate.scripted.reply import Reply, Say

from .support import options, request_for, run

ROOT = Path(__file__).resolve().parents[2]
GUARD_SECONDS = 60.0  # real time, only against a hang
VIRTUAL_GUARD_SECONDS = 3600.0  # virtual time: a test that would hang fails at once
PROCESS_GUARD_SECONDS = 180.0
EVENTS_BEFORE_LEAVING = 3
CLOSED = "upstream closed"
OPEN = "upstream still open"


# --- the program (run in a child interpreter) -------------------------------------------------


def first_frames(provider: str) -> bytes:
    """The start of a long text-only stream (no finish, no terminal): the gate passes these
    frames at once, and the stream stays open after them."""
    reply = Reply("resp_long", (Say("word " * 60, pieces=30),))
    renderer = registry_entry(provider).render()
    frames = [renderer.frame(event) for event in renderer.events(reply)]
    return b"".join(frames[:12])


class StreamingServer:
    """A loopback HTTP/1.1 server: reads one request, answers 200 with a chunked SSE body of
    `frames`, then waits for the client to hang up (`hung_up`)."""

    def __init__(self, frames: bytes) -> None:
        self.frames = frames
        self.hung_up = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
                + b"%x\r\n%s\r\n"
                % (len(self.frames), self.frames)
            )
            await writer.drain()
            while await reader.read(1024):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.hung_up.set()
            writer.close()


async def leave_a_stream(provider: str) -> str:
    """Open a stream with the official SDK over a gated client, leave the loop after a few
    events without closing the stream, close the client: whether the upstream saw the
    hang-up."""
    server_side = StreamingServer(first_frames(provider))
    server = await asyncio.start_server(server_side.serve, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    messages: Any = [{"role": "user", "content": "Say something long."}]
    seen = 0
    async with asyncio.timeout(GUARD_SECONDS):
        if provider == "anthropic":
            claude = anthropic.AsyncAnthropic(
                api_key="sk-ant-test", base_url=base, max_retries=0, http_client=gated_client()
            )
            messages_stream = await claude.messages.create(
                model="m", max_tokens=64, messages=messages, stream=True
            )
            async for _ in messages_stream:
                seen += 1
                if seen == EVENTS_BEFORE_LEAVING:
                    break
            await claude.close()
        else:
            client = openai.AsyncOpenAI(
                api_key="sk-test", base_url=f"{base}/v1", max_retries=0, http_client=gated_client()
            )
            if provider == "chat":
                chunks: Any = await client.chat.completions.create(
                    model="m", messages=messages, stream=True
                )
            else:
                chunks = await client.responses.create(model="m", input="Say it.", stream=True)
            async for _ in chunks:
                seen += 1
                if seen == EVENTS_BEFORE_LEAVING:
                    break
            await client.close()
    assert seen == EVENTS_BEFORE_LEAVING
    try:
        async with asyncio.timeout(GUARD_SECONDS):
            await server_side.hung_up.wait()
    except TimeoutError:
        return OPEN
    finally:
        server.close()
    return CLOSED


def main(providers: list[str]) -> None:
    for provider in providers:  # each on its own loop, which shuts down, finalizing the rest
        print(provider, asyncio.run(leave_a_stream(provider)))


# --- the test ---------------------------------------------------------------------------------

PROVIDERS = ("chat", "responses", "anthropic")


def test_leaving_a_stream_and_closing_the_client_prints_nothing() -> None:
    # One interpreter for the three (its start, importing the SDKs, is most of the cost).
    result = subprocess.run(
        [
            sys.executable,
            "-W",
            "always::ResourceWarning",
            "-m",
            "tests.proxy.test_transport_shutdown",
            *PROVIDERS,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PROCESS_GUARD_SECONDS,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.stderr == ""
    assert result.stdout == "".join(f"{provider} {CLOSED}\n" for provider in PROVIDERS)
    assert result.returncode == 0


class Connection(httpx2.AsyncByteStream):
    """An upstream body: `frames`, then nothing until it is closed; closing it ends a
    pending read with a transport error, as closing a connection does."""

    def __init__(self, frames: bytes) -> None:
        self.frames = frames
        self.closed = asyncio.Event()
        self.reading = asyncio.Event()  # a read is waiting for more

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.frames
        self.reading.set()
        await self.closed.wait()
        raise httpx2.ReadError("the connection was closed")

    async def aclose(self) -> None:
        self.closed.set()


def upstream_of(connections: list[Connection], provider: str) -> httpx2.MockTransport:
    def answer(_: httpx2.Request) -> httpx2.Response:
        connections.append(Connection(first_frames(provider)))
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, stream=connections[-1])

    return httpx2.MockTransport(answer)


def test_closing_the_client_closes_a_stream_the_sdk_left_open() -> None:
    # `break` out of the SDK's stream, which stays open; `client.close()` closes it, with
    # nothing left for the loop to report (its exception handler sees nothing, here and at
    # shutdown).
    connections: list[Connection] = []
    reported: list[dict[str, Any]] = []

    async def leave() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reported.append(context))
        transport = GatingTransport(upstream_of(connections, "chat"), options())
        client = openai.AsyncOpenAI(
            api_key="sk-test",
            base_url="http://upstream.test/v1",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=transport),
        )
        chunks: Any = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        async for _ in chunks:
            break
        open_after_leaving = not connections[0].closed.is_set()
        await client.close()
        return open_after_leaving, connections[0].closed.is_set()

    # Closed by `client.close()`, not later by the loop's shutdown.
    assert run(leave()) == (True, True)
    assert len(connections) == 1
    assert reported == []


def test_closing_the_client_while_a_read_waits_ends_the_read() -> None:
    # Another task is inside a read of the gated body (the engine's iteration is running):
    # closing the client cannot close that iteration from here, so it closes the upstream,
    # which ends the read; the reader gets the protocol's refusal, then the end.
    connections: list[Connection] = []

    async def close_under_a_reader() -> list[bytes]:
        transport = GatingTransport(upstream_of(connections, "chat"), options(idle_timeout=600.0))
        http = httpx2.AsyncClient(transport=transport)
        request = http.build_request(
            "POST", "http://upstream.test/v1/chat/completions", json=request_for("chat")
        )
        response = await http.send(request, stream=True)

        async def read() -> list[bytes]:
            return [piece async for piece in response.aiter_raw()]

        async with asyncio.timeout(VIRTUAL_GUARD_SECONDS):
            reader = asyncio.create_task(read())
            await connections[0].reading.wait()
            await http.aclose()
            return await reader

    pieces = run(close_under_a_reader())
    assert [connection.closed.is_set() for connection in connections] == [True]
    assert pieces[0] == first_frames("chat")
    assert b"lockgate refused the response: transport" in pieces[-1]


if __name__ == "__main__":
    main(sys.argv[1:])
