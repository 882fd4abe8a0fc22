"""The Responses WebSocket relay: a client's WebSocket on a gated Responses path (Codex opens
one to `…/responses` first), terminated here, with one socket of the proxy's own to the
route's upstream per client socket, and every response on it gated as an HTTP stream is.

- **Opening** (after admission, `admit.py`: the client token, the held key's rules, the
  limit of requests at once; a route with `websocket: refuse` answers 426 there): the
  upstream's socket first, with the headers an HTTP request would carry (`upstream_headers`:
  the held key in place of the client's credentials, the client token never; `OpenAI-Beta`,
  `session_id`, `originator` … as they came), the client's subprotocols and none of its
  `Sec-WebSocket-*`. An upstream that refuses the upgrade with 401, 403, 429 or a 5xx: that
  status to the client (its headers, redacted); with anything else (it serves no WebSocket:
  404, 405, 400 …) 426, so that Codex falls back to HTTP; no answer: 502 or 504. Then the
  client's socket, with the upstream's handshake headers that matter to a client
  (`x-codex-turn-state`, `openai-model`, `x-reasoning-included`, `x-models-etag`, request
  ids, rate limits: every one but hop-by-hop, `Sec-WebSocket-*` and lengths).
- **Responses**: each client `response.create` is one `RelayedResponse`
  (`relay_response.py`: its tools, its gate, its flow), one at a time in the order they came;
  the upstream's messages while it runs are its body. Other client messages
  (`response.processed` …) pass to the upstream as they came. Upstream messages outside a
  response are dropped, but an `error` (the connection limit …), which passes.
- **A refusal** ends the socket: the refusal message (`providers/responses/websocket.py`),
  then both sockets close (1011 to the client), so that the refused response cannot be
  continued by id; Codex retries on a new socket. A malformed `response.create` is refused
  so too (400, never sent upstream).
- **Bounds**: client messages up to `max_request_bytes`, upstream messages up to the
  route's event bound, the engine's bounds per response (held bytes, silence, deadline, the
  gate's); pings both ways every keep-alive interval (aiohttp's heartbeat: a socket whose
  pong does not come within half of it is closed); a client may queue
  `MAX_QUEUED_RESPONSES` creates.
- **Stopping** (`drain`): an idle socket closes at once (1001), one with a response in
  flight after it; after the grace period the rest are cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict

from ..gateway import Refusal
from ..jsonlimits import TooComplex
from .access import quoted
from .admit import Shared, declared_tools, parse
from .engine import forwarded_headers
from .exchange import ProxyExchange
from .flow import Flow, FlowHook
from .framing.websocket import message_type, wire_of
from .relay_response import (
    Closed,
    Item,
    RelayedResponse,
    ResponseBody,
    UpstreamSocket,
    item_of,
)
from .respond import reject
from .upstream import UpstreamRuntime, failure_before_answer, outgoing, upstream_url

__all__ = ["CLOSE_TIMEOUT_SECONDS", "MAX_QUEUED_RESPONSES", "RelaySocket", "serve"]


MAX_QUEUED_RESPONSES = 8  # `response.create`s a client may send ahead of the one running
CLOSE_TIMEOUT_SECONDS = 5.0  # for the other side's close frame
# Upstream statuses a client is told as they came; any other refusal of the upgrade says
# the upstream serves no WebSocket there: 426, and the client falls back to HTTP.
_PASSED_STATUSES = frozenset({401, 403, 408, 429})


async def serve(x: ProxyExchange, shared: Shared, hooks: Sequence[FlowHook]) -> web.StreamResponse:
    """An admitted WebSocket upgrade: the upstream's socket, then the client's, relayed
    until either ends. Not opened: the HTTP answer (the socket's flow says why)."""
    assert x.route is not None
    assert x.speaker is not None
    upstream = x.route.upstreams[0]
    opened = await _connect(x, shared, upstream)
    if isinstance(opened, web.Response):
        return opened
    upstream_ws, headers = opened
    gating = x.route.settings.gating
    client = web.WebSocketResponse(
        timeout=CLOSE_TIMEOUT_SECONDS,
        heartbeat=gating.keepalive_interval,
        max_msg_size=shared.settings.max_request_bytes,
        protocols=(upstream_ws.protocol,) if upstream_ws.protocol else (),
        decode_text=False,
    )
    client.headers.extend(headers)
    try:
        await client.prepare(x.request)
    except BaseException:
        await upstream_ws.close()
        raise
    x.flow.status = 101
    try:
        socket = RelaySocket(x, shared, hooks, client, upstream_ws, upstream)
    except BaseException:
        await upstream_ws.close()
        await client.close()
        raise
    shared.relays.add(socket)
    try:
        await socket.run()
    finally:
        shared.relays.discard(socket)
        await socket.close_both(1011, "lockgate: the relay ended")
    return client


async def _connect(
    x: ProxyExchange, shared: Shared, upstream: UpstreamRuntime
) -> tuple[UpstreamSocket, CIMultiDict[str]] | web.Response:
    """The upstream's socket and the handshake headers for the client, or the client's
    HTTP answer."""
    assert x.route is not None
    assert x.speaker is not None
    request, flow, gating = x.request, x.flow, x.route.settings.gating
    if upstream.signer is not None:
        message = "a route whose upstream is signed (AWS) relays no WebSocket; use HTTP"
        return reject(flow, x.speaker, 426, message)
    query, headers = outgoing(shared.access, request, upstream, x.speaker.key_header)
    url = upstream_url(upstream.url, flow.upstream_path, None, query)
    for name in [name for name in headers if name.lower().startswith("sec-websocket-")]:
        headers.popall(name, None)
    protocols = [
        part.strip()
        for value in request.headers.getall("sec-websocket-protocol", [])
        for part in value.split(",")
        if part.strip()
    ]
    assert shared.session is not None
    try:
        ws = await shared.session.ws_connect(
            url,
            headers=headers,
            protocols=protocols,
            heartbeat=gating.keepalive_interval,
            max_msg_size=gating.max_event_bytes,
            decode_text=False,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT_SECONDS),
        )
    except aiohttp.WSServerHandshakeError as exc:
        status = exc.status
        passed = status in _PASSED_STATUSES or status >= 500
        flow.outcome, flow.status = "forwarded", status if passed else 426
        if passed:
            reason = f"lockgate proxy: the upstream refused the WebSocket ({status})"
        else:
            reason = (
                f"lockgate proxy: the upstream serves no WebSocket here (it answered {status}); "
                "send the request over HTTP"
            )
        flow.reason = reason
        body = x.speaker.client_error_body(flow.status, reason)
        answer = _client_headers(exc.headers or {}, upstream) if passed else CIMultiDict()
        answer["content-type"] = "application/json"
        return web.Response(status=flow.status, body=body, headers=answer)
    except Exception as exc:
        if isinstance(exc, asyncio.CancelledError):  # pragma: no cover
            raise
        status, reason = failure_before_answer(exc, gating.idle_timeout)
        response = reject(flow, x.speaker, status, reason)
        flow.outcome = "error"
        return response
    handshake = getattr(ws, "_response", None)
    given = handshake.headers if handshake is not None else {}
    return ws, _client_headers(given, upstream)


def _client_headers(headers: Any, upstream: UpstreamRuntime) -> CIMultiDict[str]:
    """The upstream's handshake headers a client gets: all but hop-by-hop ones,
    `Sec-WebSocket-*`, lengths and types; redacted of a held key."""
    passed = forwarded_headers(headers)
    redactor = upstream.redactor
    kept: CIMultiDict[str] = CIMultiDict()
    for name, value in passed.items():
        lowered = name.lower()
        if lowered.startswith("sec-websocket-") or lowered in ("content-type", "date", "server"):
            continue
        if redactor is not None:
            if redactor(name) != name:
                continue
            value = redactor(value)
        kept.add(name, value)
    return kept


class RelaySocket:
    """One client socket and its upstream socket (see the module docstring)."""

    def __init__(
        self,
        x: ProxyExchange,
        shared: Shared,
        hooks: Sequence[FlowHook],
        client: web.WebSocketResponse,
        upstream_ws: UpstreamSocket,
        upstream: UpstreamRuntime,
    ) -> None:
        assert x.route is not None
        assert x.entry is not None
        assert x.gateway is not None
        self.x, self.shared, self.hooks = x, shared, hooks
        self.client, self.upstream_ws, self.upstream = client, upstream_ws, upstream
        self.route, self.entry, self.gateway = x.route, x.entry, x.gateway
        self.current: ResponseBody | None = None  # the response running, its body
        self.pending: asyncio.Queue[bytes] = asyncio.Queue(MAX_QUEUED_RESPONSES)
        self.closing = False
        self._closer: asyncio.Task[None] | None = None
        self._idle: asyncio.Task[None] | None = None  # reads while no response runs
        self._tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        """Relay until either side ends (or a refusal, or the drain, closes it)."""
        self._tasks = [asyncio.create_task(self._responses())]
        await self._idle_reading(True)
        try:
            await self._read_client()
        finally:
            await self._idle_reading(False)
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(BaseException):
                    await task

    def drain(self) -> None:
        """The proxy is stopping: close now when idle, else after the response running."""
        self.closing = True
        if self.current is None and self.pending.empty():
            task = asyncio.get_running_loop().create_task(
                self.close_both(1001, "lockgate: the proxy is stopping")
            )
            self._tasks.append(task)

    async def close_both(self, code: int, reason: str) -> None:
        """Both sockets closed (the upstream's first: nothing more of it is read), once,
        whoever asks first; a cancelled caller does not stop the closing."""
        if self._closer is None:
            self._closer = asyncio.get_running_loop().create_task(self._close(code, reason))
        await asyncio.shield(self._closer)

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.upstream_ws.close()
        with contextlib.suppress(Exception):
            await self.client.close(code=code, message=reason.encode()[:120])

    # --- the client's side ----------------------------------------------------------

    async def _read_client(self) -> None:
        client, upstream_ws = self.client, self.upstream_ws
        while True:
            message = await client.receive()
            kind = message.type
            if kind is WSMsgType.TEXT:
                data: bytes = message.data
                if message_type(data) == "response.create":
                    if self.pending.full():
                        await self._refuse_request(
                            1008, "more response.create messages queued than the relay takes"
                        )
                        return
                    self.pending.put_nowait(data)
                    continue
                with contextlib.suppress(Exception):  # a closed upstream ends the relay
                    await upstream_ws.send_frame(data, WSMsgType.TEXT)
            elif kind is WSMsgType.BINARY:
                with contextlib.suppress(Exception):
                    await upstream_ws.send_frame(message.data, WSMsgType.BINARY)
            else:  # closed, closing, an error (a message over the bound …)
                return

    async def _responses(self) -> None:
        """Each queued `response.create` in turn; a refusal (or the drain) closes, and so
        does a failure of the relay itself (never a socket left without its reader)."""
        try:
            while not self.closing:
                data = await self.pending.get()
                refused = await self._respond(data)
                if refused:
                    await self.close_both(1011, "lockgate refused the response")
                    return
        except Exception:
            await self.close_both(1011, "lockgate: the relay failed")
            raise
        await self.close_both(1001, "lockgate: the proxy is stopping")

    async def _respond(self, data: bytes) -> bool:
        """One response (see `relay_response.py`); whether the socket is to be closed."""
        shared, route, x = self.shared, self.route, self.x
        flow = Flow("WS", x.flow.path, self.entry.name, time.monotonic(), route=x.flow.route)
        flow.upstream_path = x.flow.upstream_path
        try:
            parsed = await parse(shared, data)
        except TooComplex as exc:
            return await self._malformed(flow, f"the response.create message {exc}")
        if parsed is None:
            return await self._malformed(flow, "the response.create message is not a JSON object")
        flow.request_model = self.gateway.request_model(flow.upstream_path, parsed)
        try:
            tools = declared_tools(shared, self.gateway, parsed, route, flow)
        except Exception:  # a request whose tools cannot be read
            return await self._malformed(flow, "the response.create message's tools are unreadable")
        model = self.upstream.model
        if model is not None:
            parsed = {**parsed, "model": model}
            data = json.dumps(parsed).encode()
        gating = route.settings.gating
        body = ResponseBody(self.upstream_ws, gating.max_event_bytes, self.upstream.redactor)
        response = RelayedResponse(
            shared, self.hooks, self.entry, parsed, tools, flow, body, self.x.request.headers
        )
        response.start()
        cancelled = False
        await self._idle_reading(False)
        self.current = body
        try:
            await response.run(
                gating, self.client, lambda: self.upstream_ws.send_frame(data, WSMsgType.TEXT)
            )
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            self.current = None
            response.done(cancelled)
        if not response.refused and not body.closed:
            await self._idle_reading(True)
        return response.refused

    async def _malformed(self, flow: Flow, reason: str) -> bool:
        """A `response.create` the relay cannot judge: refused (400), never sent upstream."""
        flow.outcome, flow.status, flow.reason = "rejected", 400, reason
        body = ResponseBody(self.upstream_ws, 1, None)
        response = RelayedResponse(self.shared, self.hooks, self.entry, {}, (), flow, body)
        response.start()
        try:
            refusal = Refusal("malformed_request", f"lockgate proxy: {reason}", False, 0)
            message = wire_of(self.gateway).refusal_message(refusal, None)
            with contextlib.suppress(Exception):
                await self.client.send_frame(message, WSMsgType.TEXT)
        finally:
            response.done(False)
        return True

    async def _refuse_request(self, code: int, reason: str) -> None:
        await self.close_both(code, f"lockgate: {quoted(reason, 80)}")

    # --- the upstream's side ----------------------------------------------------------

    async def _read_upstream(self) -> None:
        """While no response runs: the upstream's messages (outside a response), its end."""
        upstream_ws = self.upstream_ws
        while True:
            item = item_of(await upstream_ws.receive(), upstream_ws.close_code)
            if item is None:
                continue
            await self._outside_a_response(item)
            if isinstance(item, Closed):
                await self.close_both(1011, "lockgate: the upstream closed the socket")
                return

    async def _idle_reading(self, reading: bool) -> None:
        """Start (`reading`) or stop the reader of messages outside a response (a response
        reads the upstream socket itself)."""
        task = self._idle
        if reading:
            if task is None or task.done():
                self._idle = asyncio.get_running_loop().create_task(self._read_upstream())
            return
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._idle = None

    async def _outside_a_response(self, item: Item) -> None:
        """An upstream message while no response runs: an `error` passes (redacted), the
        rest is dropped."""
        if isinstance(item, bytes) and message_type(item) == "error":
            redactor = self.upstream.redactor
            data = redactor.redact_bytes(item) if redactor is not None else item
            with contextlib.suppress(Exception):
                await self.client.send_frame(data, WSMsgType.TEXT)
