"""How the scripted server writes one answer (`lab.server` decides which): a turn's streamed
body, chunked, with its faults real at the byte and socket level, in the protocol's media
type (`text/event-stream`, or the renderer's own: Bedrock's binary event stream); a
playback's recorded head and reads; a reply asked without a stream, as the protocol's JSON
answer with the same fault (`script.json_answer`); a JSON body; a reset with RST.

`TurnWriter` holds what these need of the server: the protocol's renderer, and the event
it sets when a stream goes silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus

from ..scripted.renderer import Renderer, media_type
from ..scripted.reply import OpeningError
from ..scripted.script import Hang, Pause, Reset, Turn, body_actions, json_answer

__all__ = ["TurnWriter", "reset", "send_bytes", "send_json", "status_line"]

# A playback's headers the server never repeats: it frames the body itself.
_FRAMING_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
)

Timeline = list[tuple[float, str]]


@dataclass(slots=True)
class TurnWriter:
    """Writes turns' answers in `protocol`'s wire; sets `paused` when a stream goes silent."""

    protocol: Renderer
    paused: asyncio.Event

    async def stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        turn: Turn,
        timeline: Timeline,
    ) -> bool:
        """Play the turn's body; False if the client left before it was finished."""
        head = status_line(200) + f"content-type: {media_type(self.protocol)}\r\n".encode()
        head += b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n"
        for name, value in turn.headers.items():
            head += f"{name}: {value}\r\n".encode()
        writer.write(head + b"\r\n")
        return await self._send_chunked(reader, writer, turn, timeline)

    async def play(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        turn: Turn,
        timeline: Timeline,
    ) -> bool:
        """A playback turn: its status and headers as recorded (the body's framing ones
        left out: every playback body is sent chunked, one chunk per recorded read, so its
        read boundaries survive and no length is announced that a fault would make wrong),
        then its steps exactly."""
        head = status_line(turn.status)
        for name, value in turn.raw_headers:
            if name.lower() not in _FRAMING_HEADERS:
                head += f"{name}: {value}\r\n".encode()
        writer.write(head + b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        return await self._send_chunked(reader, writer, turn, timeline)

    async def answer_json(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        turn: Turn,
        timeline: Timeline,
    ) -> tuple[str, bool]:
        """A reply turn asked without a stream: the same reply and the same fault. Returns
        what was answered and whether the client left early."""
        assert turn.reply is not None
        plan = json_answer(turn)
        outcome = f"json ({plan.outcome})" if plan.outcome != "json" else "json"
        client_gone = asyncio.ensure_future(reader.read())
        try:
            if plan.delay:
                timeline.append((time.monotonic(), "stall"))
                await asyncio.wait({client_gone}, timeout=plan.delay)
                if client_gone.done():
                    return outcome, True
            if plan.outcome == "drop":
                reset(writer)
            elif plan.outcome == "hang":
                timeline.append((time.monotonic(), "hang"))
                self.paused.set()
                await client_gone
                return outcome, True
            elif plan.outcome == "status":
                error = OpeningError(500, "server", turn.reply.error_message)
                await send_json(writer, 500, self.protocol.error_body(error), {})
            elif plan.outcome == "malformed":
                await send_bytes(writer, 200, b'{"id": "broken", "choices": [{"inde', {})
            else:
                payload = json.dumps(self.protocol.completion(turn.reply)).encode()
                # `cut`: the whole length is announced; half the body comes, then the end.
                cut = len(payload) // 2 if plan.outcome == "cut" else None
                await send_bytes(writer, 200, payload, turn.headers, cut=cut)
        finally:
            client_gone.cancel()
        return outcome, False

    async def _send_chunked(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        turn: Turn,
        timeline: Timeline,
    ) -> bool:
        """The turn's body actions as chunks; False if the client left before the end."""
        client_gone = asyncio.ensure_future(reader.read())  # EOF: the client closed
        try:
            for action in body_actions(turn, self.protocol):
                if client_gone.done():
                    return False
                if isinstance(action, bytes):
                    if not action:
                        continue  # an empty chunk would end the body
                    writer.write(b"%x\r\n%s\r\n" % (len(action), action))
                    await writer.drain()
                elif isinstance(action, Pause):
                    if action.seconds >= 0.1:  # stalls, not drip intervals
                        timeline.append((time.monotonic(), "stall"))
                    await asyncio.wait({client_gone}, timeout=action.seconds)
                elif isinstance(action, Reset):
                    reset(writer)
                    return True  # the reset is the script's own end
                elif isinstance(action, Hang):
                    timeline.append((time.monotonic(), "hang"))
                    self.paused.set()
                    await client_gone
                    return False
            if client_gone.done():
                return False  # it left during the last action (a final stall)
        except ConnectionError:
            return False
        finally:
            client_gone.cancel()
        # Every scripted byte was sent: a client that leaves before the terminating chunk
        # (it has what it needs) did not leave early.
        with contextlib.suppress(ConnectionError):
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        return True


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0) rather than an orderly FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def status_line(status: int) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Site Overloaded" if status == 529 else "Error"
    return f"HTTP/1.1 {status} {reason}\r\n".encode()


async def send_json(
    writer: asyncio.StreamWriter, status: int, body: object, headers: Mapping[str, str]
) -> None:
    await send_bytes(writer, status, json.dumps(body).encode(), headers)


async def send_bytes(
    writer: asyncio.StreamWriter,
    status: int,
    payload: bytes,
    headers: Mapping[str, str],
    *,
    cut: int | None = None,
) -> None:
    """An `application/json` answer; `cut`: announce the whole payload but send only that
    many bytes of it, then end the connection (a body that stops short)."""
    head = status_line(status) + b"content-type: application/json\r\n"
    head += f"content-length: {len(payload)}\r\nconnection: close\r\n".encode()
    for name, value in headers.items():
        head += f"{name}: {value}\r\n".encode()
    writer.write(head + b"\r\n" + (payload if cut is None else payload[:cut]))
    await writer.drain()
