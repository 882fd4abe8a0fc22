"""A hostile Responses WebSocket server on loopback: `GET …/responses` upgrades, and each
`response.create` that offers a shell tool on its first turn gets a call to that shell (a
command that creates a marker file), then the outcome's break (`WS_OUTCOMES`); a later turn
(after the tool's result) gets a plain "done". Every first-turn request gets the same answer
(a retry too), so the marker exists only when the agent acted on one.

The events are `interop.agents.wire`'s Responses stream (the one the HTTP runs use), each
sent as one text message. It records what it saw (`Seen`): each socket's messages (their
types and `previous_response_id`), and every HTTP request that was not an upgrade (a client
that fell back to HTTP would show here), answered 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from interop.agents.outcomes import Terminal
from interop.agents.tools import has_tool_result, shell_calls
from interop.agents.wire import RENDERERS, Call, Script

__all__ = ["WS_OUTCOMES", "Seen", "SocketSeen", "hostile_ws_server"]

# What follows the first, valid call (on the socket), per outcome.
WS_OUTCOMES: dict[str, str] = {
    "complete": "response.completed; the next turn continues by previous_response_id",
    "close-1006": "the socket dropped (no close frame) inside the call's arguments",
    "close-1011": "a close frame 1011 after the call, before the terminal",
    "message-cut": "the call's arguments cut: response.completed never comes, socket closed",
    "silence": "nothing more, the socket left open (its pings answered)",
    "ping-unanswered": "nothing more, and the server stops reading: no pong to a ping",
    "in-stream-error": "an error message with status 500",
    "output-limit": "response.incomplete (max_output_tokens)",
    "second-call-invalid": "a second call without its required argument, then completed",
    "second-call-unknown": "a second call to an undeclared tool, then completed",
    "second-call-ungrammatical": "a second exec call with an empty input, then completed",
}


@dataclass
class SocketSeen:
    number: int
    headers: dict[str, str]
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def creates(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("type") == "response.create"]


@dataclass
class Seen:
    sockets: list[SocketSeen] = field(default_factory=list)
    http: list[str] = field(default_factory=list)  # "METHOD PATH" of every non-upgrade

    @property
    def previous_ids(self) -> list[str]:
        return [
            str(m["previous_response_id"])
            for s in self.sockets
            for m in s.creates
            if m.get("previous_response_id")
        ]


def _events(script: Script, serial: int) -> list[dict[str, Any] | None]:
    """The Responses stream of `script` as events (None: the pause after a call)."""
    events: list[dict[str, Any] | None] = []
    for frame in RENDERERS["responses"](script, serial):
        if not frame:
            events.append(None)
            continue
        data = next(line for line in frame.split(b"\n") if line.startswith(b"data: "))
        events.append(json.loads(data[len(b"data: ") :]))
    return events


class _Hostile:
    def __init__(self, outcome: str, command: str, pause: float) -> None:
        self.outcome = outcome
        self.command = command
        self.pause = pause
        self.serial = 0
        self.seen = Seen()

    async def answer(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("upgrade", "").lower() != "websocket":
            self.seen.http.append(f"{request.method} {request.path}")
            if request.method == "GET" and request.path.endswith("/models"):
                return web.json_response({"object": "list", "data": []})
            return web.json_response({"error": {"message": "WebSocket only"}}, status=500)
        socket = SocketSeen(len(self.seen.sockets) + 1, dict(request.headers))
        self.seen.sockets.append(socket)
        ws = web.WebSocketResponse(compress=True)
        await ws.prepare(request)
        async for message in ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                break
            value = json.loads(message.data)
            socket.messages.append(value)
            if value.get("type") == "response.create" and not await self._respond(
                request, ws, value
            ):
                break
        return ws

    async def _respond(
        self, request: web.Request, ws: web.WebSocketResponse, body: dict[str, Any]
    ) -> bool:
        """Answer one response.create; False: the socket is to end."""
        self.serial += 1
        serial = self.serial
        model = body.get("model") if isinstance(body.get("model"), str) else "hostile-model"
        calls = (
            None
            if has_tool_result("responses", body)
            else shell_calls("responses", body, self.command)
        )
        if body.get("generate") is False or calls is None:
            script = Script(text="done", model=str(model))
            await _send(ws, _events(script, serial), 0)
            return True
        outcome = self.outcome
        chosen: tuple[Call, ...] = (calls.run,)
        if outcome == "second-call-invalid":
            chosen = (calls.run, calls.invalid)
        elif outcome == "second-call-unknown":
            chosen = (calls.run, calls.undeclared)
        elif outcome == "second-call-ungrammatical":
            chosen = (calls.run, calls.ungrammatical or calls.invalid)
        terminal = {
            "output-limit": Terminal.LIMIT,
        }.get(outcome, Terminal.SUCCESS)
        cut = outcome in ("close-1006", "message-cut")
        events = _events(
            Script(calls=chosen, text="Running it.", cut=cut, terminal=terminal, model=str(model)),
            serial,
        )
        if outcome in ("close-1011", "silence", "ping-unanswered", "in-stream-error"):
            events = [e for e in events if e is None or e["type"] != "response.completed"]
        await _send(ws, events, self.pause)
        if outcome == "close-1006":
            if request.transport is not None:
                request.transport.abort()
            return False
        if outcome in ("close-1011", "message-cut"):
            await ws.close(code=1011 if outcome == "close-1011" else 1000)
            return False
        if outcome == "in-stream-error":
            error = {"type": "server_error", "code": "server_error", "message": "hostile"}
            await ws.send_str(json.dumps({"type": "error", "status": 500, "error": error}))
        if outcome == "ping-unanswered":
            await asyncio.sleep(3600)  # not reading: aiohttp answers pings only when read
        return True


async def _send(
    ws: web.WebSocketResponse, events: list[dict[str, Any] | None], pause: float
) -> None:
    for event in events:
        if event is None:
            await asyncio.sleep(pause)
            continue
        await ws.send_str(json.dumps(event, separators=(",", ":")))


@contextlib.asynccontextmanager
async def hostile_ws_server(
    outcome: str, command: str, pause: float = 0.3
) -> AsyncIterator[tuple[str, Seen]]:
    """The server on 127.0.0.1 (its origin) and what it saw."""
    if outcome not in WS_OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    hostile = _Hostile(outcome, command, pause)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hostile.answer)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", hostile.seen
    finally:
        await runner.cleanup()
