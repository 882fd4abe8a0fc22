"""A loopback HTTP/1.1 server that records every request and answers model requests as a
`Responder` decides: a streamed `Script`, a whole JSON answer, or a status.

It speaks only what the agents need: one request per connection (`connection: close`), a
chunked body for streams (a clean end is the last chunk), a TCP reset (RST: `SO_LINGER` 0),
and a stall (the connection kept open and silent until the client leaves or the server
stops), either after an answer's first bytes or instead of any (`NoAnswer`). Which
protocol a request speaks comes from its method and path (`protocol_of`); a WebSocket
upgrade (`GET …/responses`, `Upgrade: websocket`) is answered with a configured status and
never upgraded; any other request is recorded and answered 404 (token counts get a small
count, Bedrock's `GET /inference-profiles` an empty list). A Bedrock stream is the AWS event
stream (`wire.CONTENT_TYPES`), chunked like the others.

Every request is recorded with its credentials masked (`mask_headers`, `mask_query`): the
`authorization`, `x-api-key`, `x-goog-api-key`, `api-key` and cookie headers, and the `key`
query parameter, keep only their scheme and length.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import socket
import struct
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from .outcomes import Ending
from .wire import CONTENT_TYPES, PAUSE, RENDERERS, Script, whole_text

__all__ = [
    "Exchange",
    "FramesReply",
    "HostileServer",
    "NoAnswer",
    "Reply",
    "Responder",
    "StatusReply",
    "StreamReply",
    "WholeReply",
    "mask_headers",
    "mask_query",
    "protocol_of",
    "text_reply",
]

_MAX_HEAD = 256 * 1024
_MAX_BODY = 64 * 1024 * 1024
_SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "x-goog-api-key",
        "api-key",
        "cookie",
        "set-cookie",
    }
)
_SECRET_QUERY = frozenset({"key", "api_key", "api-key", "access_token"})


def _masked(value: str) -> str:
    scheme, space, rest = value.partition(" ")
    if space and scheme.lower() in ("bearer", "basic", "token"):
        return f"{scheme} [masked: {len(rest)} chars]"
    return f"[masked: {len(value)} chars]"


def mask_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers as sent, credentials replaced by their scheme and length."""
    return [
        (name, _masked(value) if name.lower() in _SECRET_HEADERS else value)
        for name, value in headers
    ]


def mask_query(query: str) -> list[tuple[str, str]]:
    """The query's parameters, credentials replaced by their length."""
    return [
        (name, _masked(value) if name.lower() in _SECRET_QUERY else value)
        for name, value in parse_qsl(query, keep_blank_values=True)
    ]


def protocol_of(method: str, path: str) -> str | None:
    """The protocol of a model request (None: not one)."""
    if method != "POST":
        return None
    trimmed = path.rstrip("/")
    if trimmed.endswith("/responses"):
        return "responses"
    if trimmed.endswith("/chat/completions"):
        return "chat"
    if trimmed.endswith("/messages") or trimmed.endswith((":streamRawPredict", ":rawPredict")):
        return "anthropic"
    if trimmed.endswith((":streamGenerateContent", ":generateContent")):
        return "gemini"
    if "/model/" in trimmed and trimmed.endswith(("/invoke-with-response-stream", "/invoke")):
        return "bedrock"  # InvokeModel for Anthropic models: Anthropic's body, AWS's wire
    if "/model/" in trimmed and trimmed.endswith(("/converse-stream", "/converse")):
        return "converse"  # Bedrock's Converse API
    return None


@dataclass(frozen=True)
class Exchange:
    """One request as received (credentials still in it: never recorded as is)."""

    serial: int
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    protocol: str | None

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> str:
        return urlsplit(self.target).query

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def json_body(self) -> dict[str, Any] | None:
        try:
            value = json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None
        return value if isinstance(value, dict) else None

    def streaming(self) -> bool:
        """Whether the client asked for a stream (Gemini says it in the path)."""
        if self.path.endswith(
            (
                ":streamGenerateContent",
                ":streamRawPredict",
                "/invoke-with-response-stream",
                "/converse-stream",
            )
        ):
            return True
        body = self.json_body()
        return bool(body and body.get("stream") is True)


@dataclass(frozen=True)
class StreamReply:
    """A streamed answer: the script's frames, with a pause right after its calls, then the
    ending."""

    script: Script
    ending: Ending = Ending.CLEAN
    pause: float = 0.0  # seconds between the call's last frame and what follows it
    label: str = ""


@dataclass(frozen=True)
class FramesReply:
    """A streamed answer of given frames (`PAUSE` waits `pause` seconds), then the ending."""

    frames: tuple[bytes, ...]
    ending: Ending = Ending.CLEAN
    pause: float = 0.0
    label: str = ""


@dataclass(frozen=True)
class WholeReply:
    """A whole JSON answer (with `headers` besides the server's own); `cut` (0 < cut < 1)
    sends only that share of the body, without a length, then the ending (a clean end, a
    reset); a stall sends the head (with the whole length) and no body."""

    body: Mapping[str, Any]
    status: int = 200
    label: str = ""
    cut: float | None = None
    ending: Ending = Ending.CLEAN
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NoAnswer:
    """Not a byte of an answer: the request is read, then the connection is reset
    (`Ending.RESET`) or kept open and silent until the client leaves (`Ending.STALL`)."""

    ending: Ending
    label: str = ""


@dataclass(frozen=True)
class StatusReply:
    """A status with a small JSON error body."""

    status: int
    message: str
    label: str = ""
    headers: tuple[tuple[str, str], ...] = ()


Reply = StreamReply | FramesReply | WholeReply | StatusReply | NoAnswer


class Responder(Protocol):
    def __call__(self, exchange: Exchange) -> Reply: ...


@dataclass(frozen=True)
class RecordedRequest:
    """What the recording keeps of one request, credentials masked."""

    serial: int
    time: float
    method: str
    path: str
    query: list[tuple[str, str]]
    headers: list[tuple[str, str]]
    body: object
    protocol: str | None
    reply: str  # what the server answered (its label)

    def as_json(self) -> dict[str, Any]:
        return {
            "serial": self.serial,
            "time": round(self.time, 3),
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
            "protocol": self.protocol,
            "reply": self.reply,
            "body": self.body,
        }


def _decoded_body(body: bytes, encoding: str | None) -> object:
    """The body as JSON when it is JSON (after gzip/deflate), else text or base64."""
    data = body
    if encoding:
        try:
            if encoding.lower() == "gzip":
                data = gzip.decompress(body)
            elif encoding.lower() == "deflate":
                data = zlib.decompress(body)
            else:
                return {"encoding": encoding, "base64": base64.b64encode(body).decode()}
        except (OSError, zlib.error):
            return {"encoding": encoding, "base64": base64.b64encode(body).decode()}
    if not data:
        return None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}
    try:
        return json.loads(text)
    except ValueError:
        return text


def _redact_pairs(pairs: list[tuple[str, str]], secrets: tuple[str, ...]) -> list[tuple[str, str]]:
    redacted = []
    for name, value in pairs:
        for secret in secrets:
            value = value.replace(secret, "[masked]")
        redacted.append((name, value))
    return redacted


def _redact_text(value: object, secrets: tuple[str, ...]) -> object:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "[masked]")
        return value
    if isinstance(value, list):
        return [_redact_text(item, secrets) for item in value]
    if isinstance(value, dict):
        return {key: _redact_text(item, secrets) for key, item in value.items()}
    return value


@dataclass
class HostileServer:
    """The loopback server: `async with HostileServer(responder) as server:` serves at
    `server.url` until the block ends."""

    responder: Responder
    websocket_status: int = 426
    secrets: tuple[str, ...] = ()  # values masked wherever they appear in a recording
    host: str = "127.0.0.1"
    requests: list[RecordedRequest] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _serial: int = 0
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)
    _started: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://{self.host}:{port}"

    async def __aenter__(self) -> HostileServer:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._stopping.set()  # ends every stall
        if self._server is not None:
            self._server.close()
        handlers = list(self._handlers)
        for handler in handlers:
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def recording(self) -> list[dict[str, Any]]:
        return [request.as_json() for request in self.requests]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        try:
            exchange = await self._read(reader)
            if exchange is None:
                return
            received = time.monotonic() - self._started
            reply = self._reply(exchange)
            self.requests.append(self._record(exchange, received, _label(reply)))
            await self._answer(reply, exchange, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except ValueError:  # not HTTP/1.1 as the agents speak it: the connection is closed
            pass
        except asyncio.CancelledError:
            # The server is stopping. Ending the handler quietly: on Python 3.11 the stream
            # server logs a traceback for a handler task that ends cancelled.
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _record(self, exchange: Exchange, received: float, reply: str) -> RecordedRequest:
        """The request as recorded: credentials masked, and every secret value replaced
        wherever else it appears (headers, query, body)."""
        body = _decoded_body(exchange.body, exchange.header("content-encoding"))
        return RecordedRequest(
            serial=exchange.serial,
            time=received,
            method=exchange.method,
            path=exchange.path,
            query=_redact_pairs(mask_query(exchange.query), self.secrets),
            headers=_redact_pairs(mask_headers(exchange.headers), self.secrets),
            body=_redact_text(body, self.secrets),
            protocol=exchange.protocol,
            reply=reply,
        )

    def _reply(self, exchange: Exchange) -> Reply:
        upgrade = (exchange.header("upgrade") or "").lower()
        if upgrade == "websocket":
            return StatusReply(self.websocket_status, "no WebSocket here", "websocket refused")
        path = exchange.path
        if exchange.method == "POST" and path.endswith("/count_tokens"):
            return WholeReply({"input_tokens": 10}, label="token count")
        if exchange.method == "POST" and path.endswith(":countTokens"):
            return WholeReply({"totalTokens": 10}, label="token count")
        if exchange.method == "GET" and path.rstrip("/").endswith("/inference-profiles"):
            # Bedrock's ListInferenceProfiles (Claude Code on Bedrock asks at start)
            return WholeReply({"inferenceProfileSummaries": []}, label="inference profiles")
        if exchange.protocol is None:
            return StatusReply(404, f"no route for {exchange.method} {path}", "not found")
        return self.responder(exchange)

    async def _read(self, reader: asyncio.StreamReader) -> Exchange | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        if len(head) > _MAX_HEAD:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
        lowered = {name.lower(): value for name, value in headers}
        body = b""
        if lowered.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
                if sum(map(len, parts)) > _MAX_BODY:
                    return None
            body = b"".join(parts)
        elif "content-length" in lowered:
            length = int(lowered["content-length"])
            if length > _MAX_BODY:
                return None
            body = await reader.readexactly(length)
        self._serial += 1
        path = urlsplit(target).path
        return Exchange(self._serial, method, target, headers, body, protocol_of(method, path))

    async def _answer(
        self,
        reply: Reply,
        exchange: Exchange,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if isinstance(reply, StatusReply):
            body = json.dumps({"error": {"message": reply.message, "code": reply.status}})
            await _write_whole(writer, reply.status, body.encode(), reply.headers)
            return
        if isinstance(reply, WholeReply):
            await self._answer_whole(reply, reader, writer)
            return
        if isinstance(reply, NoAnswer):
            if reply.ending is Ending.RESET:
                _reset(writer)
            elif reply.ending is Ending.STALL:
                await self._until_gone(reader)
            return  # a clean ending: the connection closes unanswered
        if isinstance(reply, FramesReply):
            frames = list(reply.frames)
        else:
            protocol = exchange.protocol or "responses"
            frames = RENDERERS[protocol](reply.script, exchange.serial)
        media = CONTENT_TYPES.get(exchange.protocol or "", "text/event-stream; charset=utf-8")
        head = (
            "HTTP/1.1 200 OK\r\n"
            f"content-type: {media}\r\n"
            "cache-control: no-cache\r\n"
            f"x-request-id: req_hostile_{exchange.serial}\r\n"
            "transfer-encoding: chunked\r\n"
            "connection: close\r\n\r\n"
        )
        writer.write(head.encode())
        await writer.drain()
        for frame in frames:
            if frame == PAUSE:
                await asyncio.sleep(reply.pause)
                continue
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
        if reply.ending is Ending.CLEAN:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        elif reply.ending is Ending.RESET:
            _reset(writer)
        else:  # a stall: silent until the client leaves or the server stops
            await self._until_gone(reader)

    async def _answer_whole(
        self, reply: WholeReply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        body = json.dumps(reply.body).encode()
        if reply.cut is None and reply.ending is Ending.CLEAN:
            await _write_whole(writer, reply.status, body, reply.headers)
            return
        if reply.ending is Ending.STALL:
            head = _head(reply.status, len(body), reply.headers)
            writer.write(head)
            await writer.drain()
            await self._until_gone(reader)
            return
        head = _head(reply.status, None, reply.headers)
        share = body[: int(len(body) * (reply.cut or 1.0))]
        writer.write(head + share)
        await writer.drain()
        if reply.ending is Ending.RESET:
            _reset(writer)

    async def _until_gone(self, reader: asyncio.StreamReader) -> None:
        closed = asyncio.ensure_future(reader.read(1))
        stopping = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
        closed.cancel()
        stopping.cancel()


def _reset(writer: asyncio.StreamWriter) -> None:
    """End the connection with a TCP reset (RST)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _head(status: int, length: int | None, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    reasons = {
        200: "OK",
        404: "Not Found",
        426: "Upgrade Required",
        429: "Too Many Requests",
        500: "Internal Server Error",
        503: "Service Unavailable",
        529: "Overloaded",
    }
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
    sized = "" if length is None else f"content-length: {length}\r\n"
    return (
        f"HTTP/1.1 {status} {reasons.get(status, 'Status')}\r\n"
        "content-type: application/json\r\n"
        f"{sized}{extra}"
        "connection: close\r\n\r\n"
    ).encode()


def _label(reply: Reply) -> str:
    if reply.label:
        return reply.label
    if isinstance(reply, StatusReply):
        return f"status {reply.status}"
    if isinstance(reply, WholeReply):
        return "whole answer"
    if isinstance(reply, NoAnswer):
        return f"no answer ({reply.ending.value})"
    return "stream"


async def _write_whole(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    headers: tuple[tuple[str, str], ...] = (),
) -> None:
    writer.write(_head(status, len(body), headers) + body)
    await writer.drain()


def text_reply(exchange: Exchange, text: str = "done") -> Reply:
    """A plain text answer to any model request, streamed when it asked for a stream."""
    body = exchange.json_body() or {}
    model = body.get("model")
    model_name = model if isinstance(model, str) else "hostile-model"
    if exchange.streaming():
        return StreamReply(Script(text=text, model=model_name), label=f"text {text!r}")
    protocol = exchange.protocol or "responses"
    return WholeReply(
        whole_text(protocol, text, model_name, exchange.serial), label=f"whole text {text!r}"
    )
