"""The scripted server's WebSocket mode (`lockgate serve --provider responses`): a WebSocket
upgrade at the protocol's path is answered `101`, and each client message that asks for a
response (`response.create`) gets the next scripted turn as text messages
(`scripted.websocket.message_actions`), one response after another on the same socket, so a
client continues a response by `previous_response_id` on it.

Built by hand on the server's asyncio streams, as its HTTP is (RFC 6455: the opening
handshake, frames, masking, fragmentation, ping/pong, close): its faults are at the byte
and socket level, where a WebSocket library would not let a frame be cut, a ping go
unanswered or a connection drop without a close frame. A turn's opening error is the
protocol's wrapped `error` message (`WebSocketRenderer.websocket_error`), a dropped
connection a TCP reset (1006); an exhausted script answers a 400 error message, as over
HTTP; a body that ends cleanly without the response's terminal message is a close with
1000. Client pings are answered at once (unless the turn says `pong: false`), client
messages sent ahead wait their turn, a client close is answered with a close.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import struct
import time
from typing import TYPE_CHECKING, Any, Protocol

from ..jsonlimits import parse_json
from ..scripted.reply import OpeningError
from ..scripted.script import Hang, Pause, Reset, Turn, fragments
from ..scripted.websocket import (
    ABRUPT,
    Close,
    CutFrame,
    GiantFrame,
    Message,
    Ping,
    WebSocketFaults,
    message_actions,
)
from .answers import reset
from .recorded import RecordedRequest

if TYPE_CHECKING:
    from ..scripted.renderer import Renderer, WebSocketRenderer
    from ..scripted.script import Turn

__all__ = ["SocketServer", "accept_key", "encode_frame", "handshake_problem", "serve_websocket"]


class SocketServer(Protocol):
    """What a socket takes of the scripted server (`server.ScriptedServer`): its protocol,
    where requests are recorded, the next turn for one, and the event a silence sets."""

    protocol: Renderer
    requests: list[RecordedRequest]
    paused: asyncio.Event

    def next_turn(self, request: RecordedRequest) -> Turn | OpeningError: ...


_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CONTINUATION, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
_GIANT_BLOCK = b"x" * (64 * 1024)


def accept_key(key: str) -> str:
    """`Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key` (RFC 6455 4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode()


def handshake_problem(method: str, headers: dict[str, str]) -> str | None:
    """Why an upgrade request is not a valid WebSocket opening handshake, or None."""
    if method != "GET":
        return "a WebSocket opening handshake is a GET"
    if headers.get("sec-websocket-version", "").strip() != "13":
        return "Sec-WebSocket-Version must be 13"
    key = headers.get("sec-websocket-key", "").strip()
    try:
        valid = len(base64.b64decode(key, validate=True)) == 16
    except ValueError:
        valid = False
    return None if valid else "Sec-WebSocket-Key must be 16 bytes in base64"


def frame_head(opcode: int, length: int, *, fin: bool = True) -> bytes:
    """A server frame's head (servers never mask)."""
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        return struct.pack("!BB", first, length)
    if length < 1 << 16:
        return struct.pack("!BBH", first, 126, length)
    return struct.pack("!BBQ", first, 127, length)


def encode_frame(opcode: int, payload: bytes) -> bytes:
    return frame_head(opcode, len(payload)) + payload


class _ProtocolError(Exception):
    """The client broke the framing: the socket is closed with 1002 (or 1009: too big)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


async def _read_frame(reader: asyncio.StreamReader) -> tuple[bool, int, bytes]:
    """One client frame: (fin, opcode, unmasked payload)."""
    first, second = await reader.readexactly(2)
    if first & 0x70:
        raise _ProtocolError(1002, "no extension was agreed: RSV bits must be 0")
    length = second & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", await reader.readexactly(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", await reader.readexactly(8))
    if not second & 0x80:
        raise _ProtocolError(1002, "a client frame must be masked")
    if length > MAX_MESSAGE_BYTES:
        raise _ProtocolError(1009, f"a message over {MAX_MESSAGE_BYTES} bytes")
    mask = await reader.readexactly(4)
    data = await reader.readexactly(length)
    key = (mask * (length // 4 + 1))[:length]
    unmasked = (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(length, "big")
    return bool(first & 0x80), first & 0x0F, unmasked


class _Socket:
    """One accepted socket: a reader task taking the client's frames (answering pings,
    queueing messages, noticing the close) and the writes, one frame at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.gone = asyncio.Event()  # the client closed, or the connection ended
        self.pong = True
        self.closing = False  # a close frame was sent
        self.lock = asyncio.Lock()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        parts: list[bytes] = []
        try:
            while True:
                fin, opcode, payload = await _read_frame(self.reader)
                if opcode == PING:
                    if self.pong:
                        await self.send(encode_frame(PONG, payload))
                elif opcode == CLOSE:
                    if not self.closing:
                        self.closing = True
                        await self.send(encode_frame(CLOSE, payload[:2]))
                    break
                elif opcode in (TEXT, BINARY, CONTINUATION):
                    parts.append(payload)
                    if sum(map(len, parts)) > MAX_MESSAGE_BYTES:
                        raise _ProtocolError(1009, f"a message over {MAX_MESSAGE_BYTES} bytes")
                    if fin:
                        self.inbox.put_nowait(b"".join(parts))
                        parts = []
        except _ProtocolError as exc:
            with contextlib.suppress(ConnectionError):
                await self.close(exc.code, str(exc))
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            self.gone.set()
            self.inbox.put_nowait(None)

    async def send(
        self, data: bytes, pieces: tuple[int, ...] | None = None, drip: float = 0
    ) -> None:
        """Write a frame's bytes (cut into `pieces`-sized writes, `drip` seconds apart)."""
        async with self.lock:
            for piece in fragments(data, pieces) if pieces else (data,):
                self.writer.write(piece)
                await self.writer.drain()
                if drip:
                    await asyncio.sleep(drip)

    async def close(self, code: int, reason: str = "") -> None:
        """A close frame, then (after the client's, or a moment) the end of the connection."""
        if not self.closing:
            self.closing = True
            await self.send(encode_frame(CLOSE, struct.pack("!H", code) + reason.encode()[:120]))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.gone.wait(), 1.0)


def _handshake(key: str) -> bytes:
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(key)}\r\n\r\n"
    ).encode()


def _message(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


async def serve_websocket(
    server: SocketServer,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upgrade: RecordedRequest,
    protocol: WebSocketRenderer,
) -> None:
    """Answer a valid upgrade `101` and serve the socket until either side ends it. Each
    message that asks for a response is recorded as a request (method `WS`, the message as
    its body: a cassette's request, recorded by the relay, is the message, and `--match
    request` compares them)."""

    upgrade.consumed_turn = False
    upgrade.outcome = "WebSocket (101)"
    writer.write(_handshake(upgrade.headers["sec-websocket-key"].strip()))
    await writer.drain()
    socket = _Socket(reader, writer)
    renderer: Renderer = server.protocol
    try:
        while (raw := await socket.inbox.get()) is not None:
            try:
                value = parse_json(raw.decode("utf-8"), 64)
            except (UnicodeDecodeError, ValueError):
                error = OpeningError(400, "invalid", "a message must be a JSON object")
                body = renderer.error_body(error)
                await socket.send(
                    encode_frame(TEXT, _message(protocol.websocket_error(400, body, {})))
                )
                continue
            asked = protocol.websocket_request(value)
            # the message as it came (a cassette's request, recorded by the relay, is the
            # message: `--match request` compares them)
            request = RecordedRequest("WS", upgrade.path, dict(upgrade.headers), value)
            server.requests.append(request)
            if asked is None:
                request.consumed_turn = False
                request.outcome = "message (no response asked)"
                continue
            turn = server.next_turn(request)
            if isinstance(turn, OpeningError):
                request.consumed_turn = False
                request.outcome = f"error {turn.status}"
                body = renderer.error_body(turn)
                message = protocol.websocket_error(turn.status, body, {"x-should-retry": "false"})
                await socket.send(encode_frame(TEXT, _message(message)))
                continue
            if not await _answer(server, socket, turn, request, renderer, protocol):
                return
    except (ConnectionError, OSError):
        pass
    finally:
        socket.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await socket.task


async def _answer(
    server: SocketServer,
    socket: _Socket,
    turn: Turn,
    request: RecordedRequest,
    renderer: Renderer,
    protocol: WebSocketRenderer,
) -> bool:
    """Play one turn on the socket; False when the socket ended (either side)."""
    timeline = request.timeline
    error = turn.opening_error(renderer)
    if turn.connection_error:
        request.outcome = "dropped"
        reset(socket.writer)
        return False
    if error is not None:
        status, body, headers = error
        request.outcome = f"error {status}"
        await socket.send(
            encode_frame(TEXT, _message(protocol.websocket_error(status, body, headers)))
        )
        return True
    request.outcome = "stream"
    faults = turn.faults
    pieces = None if turn.playback is not None else faults.fragment_sizes
    drip = faults.drip_ms / 1000 if faults.drip_ms else 0.0
    socket.pong = (turn.websocket or WebSocketFaults()).pong
    finished = False
    ended = False  # the last message ended the response
    try:
        for action in message_actions(turn, renderer):
            if socket.gone.is_set():
                break
            if isinstance(action, Message):
                await socket.send(encode_frame(TEXT, action.payload), pieces, drip)
                ended = protocol.ends_response(action.payload)
            elif isinstance(action, Ping):
                await socket.send(encode_frame(PING, b"lab"))
            elif isinstance(action, Pause):
                if action.seconds >= 0.1:
                    timeline.append((time.monotonic(), "stall"))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(socket.gone.wait(), action.seconds)
            elif isinstance(action, Hang):
                timeline.append((time.monotonic(), "hang"))
                server.paused.set()
                await socket.gone.wait()
            elif isinstance(action, Close):
                timeline.append((time.monotonic(), f"close {action.code}"))
                if action.code == ABRUPT:
                    socket.writer.close()  # no close frame: the client sees 1006
                else:
                    await socket.close(action.code, "scripted close")
                finished = True  # the fault is the script's own end
                return False
            elif isinstance(action, CutFrame):
                timeline.append((time.monotonic(), "message cut"))
                payload = action.payload
                await socket.send(frame_head(TEXT, len(payload)) + payload[: len(payload) // 2])
                socket.writer.close()
                finished = True  # the fault is the script's own end
                return False
            elif isinstance(action, Reset):
                timeline.append((time.monotonic(), "reset"))
                reset(socket.writer)
                finished = True  # the reset is the script's own end
                return False
            elif isinstance(action, GiantFrame):
                await _giant(socket, action.size)
                finished = True  # the fault is the script's own end
                return False
        else:
            finished = True
            if not ended:  # the body ended cleanly mid-response: a clean close
                timeline.append((time.monotonic(), "close 1000"))
                await socket.close(1000, "the response's body ended")
                return False
    finally:
        socket.pong = True
        request.client_closed_early = not finished
        timeline.append((time.monotonic(), "finished" if finished else "client closed"))
    return finished


async def _giant(socket: _Socket, size: int) -> None:
    """A frame announcing `size` bytes, its payload sent until the client leaves."""
    await socket.send(frame_head(TEXT, size))
    remaining = size
    while remaining > 0 and not socket.gone.is_set():
        block = _GIANT_BLOCK[: min(remaining, len(_GIANT_BLOCK))]
        await socket.send(block)
        remaining -= len(block)
