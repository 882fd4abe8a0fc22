"""A loopback Responses WebSocket upstream, scripted per test, and a client for the relay
(aiohttp's WebSocket client: the installed `openai` SDK's Responses WebSocket client is a
beta that speaks only to its own base URL's `wss://`, see `docs/websocket.md`)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from lockgate.providers.responses.render import ResponseBuilder

__all__ = [
    "CLIENT_KEY",
    "HELD_KEY",
    "READ_TOOL",
    "TOKEN",
    "ClientSession",
    "Received",
    "Script",
    "Upstream",
    "UpstreamSocket",
    "call_events",
    "connect",
    "create",
    "send_all",
    "text_events",
    "ws_upstream",
]

HELD_KEY = "sk-held-WS-SECRET-0f1e2d3c4b"
CLIENT_KEY = "sk-client-WS-OWN-778899"
TOKEN = "lockgate-client-WS-TOKEN-5566"
TERMINALS = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
READ_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "read",
    "description": "read a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
}


def create(*tools: dict[str, Any], previous: str | None = None, **extra: Any) -> dict[str, Any]:
    """A `response.create` message as Codex sends one (its fields at the top level)."""
    message: dict[str, Any] = {
        "type": "response.create",
        "model": "lab-model",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "fix it"}]}],
        "tools": list(tools) if tools else [READ_TOOL],
        "stream": True,
        **extra,
    }
    if previous is not None:
        message["previous_response_id"] = previous
    return message


def text_events(response_id: str, text: str = "Done.") -> list[dict[str, Any]]:
    builder = ResponseBuilder(response_id).created().text("msg_1", text)
    return [copy.deepcopy(event) for event in builder.completed().events]


def call_events(
    response_id: str, *calls: tuple[str, dict[str, Any] | str], custom: bool = False
) -> list[dict[str, Any]]:
    """A complete response: some text, then a call per (tool, arguments or input)."""
    builder = ResponseBuilder(response_id).created().text("msg_1", "Reading it.")
    for number, (name, arguments) in enumerate(calls):
        if custom:
            assert isinstance(arguments, str)
            builder.custom_call(f"ctc_{number}", f"call_{number}", name, arguments)
        else:
            builder.call(f"fc_{number}", f"call_{number}", name, arguments)
    return [copy.deepcopy(event) for event in builder.completed().events]


@dataclass
class UpstreamSocket:
    """One socket the upstream accepted: its handshake headers and the messages it got."""

    number: int
    headers: dict[str, str]
    received: list[dict[str, Any]] = field(default_factory=list)
    ws: web.WebSocketResponse | None = None
    request: web.Request | None = None


# What the upstream does with one `response.create`: (its socket, the message).
Script = Callable[[UpstreamSocket, dict[str, Any]], Awaitable[None]]


@dataclass
class Upstream:
    url: str
    sockets: list[UpstreamSocket]
    posts: list[str]  # HTTP requests that were not WebSocket upgrades


async def send_all(socket: UpstreamSocket, events: list[dict[str, Any]]) -> None:
    assert socket.ws is not None
    for event in events:
        await socket.ws.send_str(json.dumps(event))


@contextlib.asynccontextmanager
async def ws_upstream(
    script: Script, *, response_headers: dict[str, str] | None = None, refuse: int | None = None
) -> AsyncIterator[Upstream]:
    """A loopback upstream: `GET /v1/responses` upgrades (or answers `refuse`), each
    `response.create` runs `script`; any other message is only recorded."""
    sockets: list[UpstreamSocket] = []
    posts: list[str] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.headers.get("upgrade", "").lower() != "websocket":
            posts.append(f"{request.method} {request.path}")
            return web.json_response({"error": {"message": "no HTTP here"}}, status=400)
        if refuse is not None:
            return web.json_response({"error": {"message": "refused"}}, status=refuse)
        socket = UpstreamSocket(len(sockets) + 1, dict(request.headers))
        sockets.append(socket)
        ws = web.WebSocketResponse()
        ws.headers.update(response_headers or {})
        await ws.prepare(request)
        socket.ws, socket.request = ws, request
        async for message in ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                break
            value = json.loads(message.data)
            socket.received.append(value)
            if value.get("type") == "response.create":
                await script(socket, value)
        return ws

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Upstream(f"http://127.0.0.1:{port}", sockets, posts)
    finally:
        await runner.cleanup()


@dataclass
class Received:
    messages: list[dict[str, Any]]
    closed: int | None  # the close code when the socket closed while reading

    @property
    def types(self) -> list[str]:
        return [message.get("type", "") for message in self.messages]

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The call items the client read (in `.done` events or the terminal)."""
        found = []
        for message in self.messages:
            item = message.get("item")
            if isinstance(item, dict) and item.get("type", "").endswith("call"):
                found.append(item)
        return found


class ClientSession:
    """A client of the relay: one socket, responses read to their terminal (or the close)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send_str(json.dumps(message))

    async def response(self, message: dict[str, Any], within: float = 10.0) -> Received:
        await self.send(message)
        return await self.read(within)

    async def read(self, within: float = 10.0) -> Received:
        messages: list[dict[str, Any]] = []
        async with asyncio.timeout(within):
            while True:
                got = await self.ws.receive()
                if got.type is aiohttp.WSMsgType.TEXT:
                    value = json.loads(got.data)
                    messages.append(value)
                    if value.get("type") in TERMINALS:
                        return Received(messages, None)
                    continue
                if got.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    return Received(messages, self.ws.close_code)
                if got.type is aiohttp.WSMsgType.ERROR:
                    return Received(messages, -1)

    async def closed(self, within: float = 10.0) -> int | None:
        """Read on to the close: its code."""
        async with asyncio.timeout(within):
            while True:
                got = await self.ws.receive()
                if got.type in (
                    aiohttp.WSMsgType.CLOSE,
                    aiohttp.WSMsgType.CLOSED,
                    aiohttp.WSMsgType.ERROR,
                ):
                    return self.ws.close_code


@contextlib.asynccontextmanager
async def connect(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, headers=headers or {}) as ws,
    ):
        yield ClientSession(ws)
