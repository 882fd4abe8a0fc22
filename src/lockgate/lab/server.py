"""A scripted Responses provider on loopback HTTP/1.1 (asyncio streams).

Each request gets the next scripted turn: an HTTP error with its body and headers, a
dropped connection, or a chunked `text/event-stream` body cut at uneven byte boundaries.
It records what each request carried (never the credential itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from .script import Turn, fragments, sse_bytes

MAX_REQUEST_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    client_closed_early: bool = False


@dataclass(slots=True)
class ScriptedServer:
    """A running scripted server: its base URL and what it has received."""

    host: str
    port: int
    turns: list[Turn]
    requests: list[RecordedRequest] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await _read_request(reader)
            if request is None:
                return
            self.requests.append(request)
            turn = self.turns.pop(0) if self.turns else None
            if turn is None:
                await _send_json(
                    writer,
                    500,
                    {"error": {"message": "script exhausted", "code": "script_exhausted"}},
                    {},
                )
            elif turn.connection_error:
                writer.transport.abort()
            elif turn.status != 200:
                await _send_json(writer, turn.status, turn.body or {}, turn.headers)
            else:
                request.client_closed_early = not await _send_stream(reader, writer, turn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if length > MAX_REQUEST_BYTES:
        return None
    raw = await reader.readexactly(length) if length else b""
    if "authorization" in headers:  # record that a credential came, never the credential
        headers["authorization"] = headers["authorization"].split(" ", 1)[0] + " [redacted]"
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    return RecordedRequest(method, path, headers, body)


def _status_line(status: int) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Site Overloaded" if status == 529 else "Error"
    return f"HTTP/1.1 {status} {reason}\r\n".encode()


async def _send_json(
    writer: asyncio.StreamWriter, status: int, body: object, headers: dict[str, str] | Any
) -> None:
    payload = json.dumps(body).encode()
    head = _status_line(status) + b"content-type: application/json\r\n"
    head += f"content-length: {len(payload)}\r\nconnection: close\r\n".encode()
    for name, value in dict(headers).items():
        head += f"{name}: {value}\r\n".encode()
    writer.write(head + b"\r\n" + payload)
    await writer.drain()


async def _send_stream(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, turn: Turn
) -> bool:
    """Send the turn's events as a chunked SSE body; False if the client left early."""
    head = _status_line(200) + b"content-type: text/event-stream\r\n"
    head += b"transfer-encoding: chunked\r\nconnection: close\r\n"
    for name, value in turn.headers.items():
        head += f"{name}: {value}\r\n".encode()
    writer.write(head + b"\r\n")
    payload = b"".join(sse_bytes(event) for event in turn.events)
    try:
        for piece in fragments(payload):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        if turn.end == "hang":
            await reader.read()  # silent until the client closes the connection
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        return False
    return True


@contextlib.asynccontextmanager
async def serve_script(
    turns: Sequence[Turn], host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[ScriptedServer]:
    """Run a scripted server on loopback for the duration of the block."""
    state = ScriptedServer(host, port, list(turns))
    server = await asyncio.start_server(state.handle, host, port)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
