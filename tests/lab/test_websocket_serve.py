"""`lockgate serve --provider responses` over a WebSocket: the hand-built RFC 6455 server
answers the upgrade, plays each `response.create`'s turn as the SSE renderer's events (one
text message each), several responses on one socket, opening errors as wrapped `error`
messages, and the WebSocket faults at the socket level (a close with 1006 or 1011, a cut
message, silence, unanswered pings). Read with aiohttp's client (a real WebSocket reader),
and with raw sockets where a client library would hide the bytes."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import signal
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lockgate.lab.server import ScriptedServer, serve_script
from lockgate.lab.websocket import accept_key
from lockgate.providers.responses.render import RENDERER
from lockgate.scripted.reply import Call, OpeningError, Reply, Say
from lockgate.scripted.scenario import reply_turn
from lockgate.scripted.script import Faults, ScriptError, Turn, load_script
from lockgate.scripted.websocket import Message, WebSocketFaults, message_actions
from lockgate.sse import SSEDecoder

from ..helpers import finish, read_serving_line, started_lockgate

EDIT = Reply("resp_ws_edit", (Say("Fixing."), Call("call_1", "edit", {"path": "a.py"})))
TEXT = Reply("resp_ws_text", (Say("Done."),))
TERMINALS = {"response.completed", "response.incomplete", "response.failed", "error"}


def create(**extra: Any) -> str:
    return json.dumps({"type": "response.create", "model": "m", "input": [], **extra})


@asynccontextmanager
async def socket_to(
    turns: list[Turn],
) -> AsyncIterator[tuple[ScriptedServer, aiohttp.ClientWebSocketResponse]]:
    async with serve_script(turns, provider="responses") as server:
        url = f"http://{server.host}:{server.port}/v1/responses"
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, autoping=False) as socket,
        ):
            yield server, socket


async def read_response(socket: aiohttp.ClientWebSocketResponse) -> tuple[list[Any], str]:
    """The messages of one response, and how it ended (its terminal type or the close)."""
    values: list[Any] = []
    while True:
        message = await socket.receive(timeout=3)
        if message.type != aiohttp.WSMsgType.TEXT:
            return values, f"closed {socket.close_code}"
        values.append(json.loads(message.data))
        if values[-1]["type"] in TERMINALS:
            return values, values[-1]["type"]


def sse_events(turn: Turn) -> list[Any]:
    """What the same turn streams over HTTP, as parsed events."""
    decoder = SSEDecoder()
    body = b"".join(RENDERER.frame(event) for event in turn.stream_events(RENDERER))
    return [json.loads(event.data) for event in decoder.feed(body)]


def test_the_accept_key_is_rfc_6455s() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


async def test_each_response_create_gets_its_turn_as_the_sse_events_on_one_socket() -> None:
    first, second = reply_turn(EDIT), reply_turn(TEXT)
    async with socket_to([first, second]) as (server, socket):
        await socket.send_str(create())
        one, ended_one = await read_response(socket)
        await socket.send_str(create(previous_response_id="resp_ws_edit"))
        two, ended_two = await read_response(socket)
        await socket.send_str(json.dumps({"type": "response.processed"}))
        await socket.close()
    await server.settle()
    assert (ended_one, ended_two) == ("response.completed", "response.completed")
    assert one == sse_events(first)
    assert two == sse_events(second)
    upgrade, *asked = server.requests
    assert (upgrade.method, upgrade.outcome, upgrade.consumed_turn) == (
        "GET",
        "WebSocket (101)",
        False,
    )
    assert [(r.method, r.outcome, r.consumed_turn) for r in asked] == [
        ("WS", "stream", True),
        ("WS", "stream", True),
        ("WS", "message (no response asked)", False),
    ]
    assert asked[1].body["previous_response_id"] == "resp_ws_edit"
    assert server.answered == 2


async def test_an_opening_error_is_a_wrapped_error_and_the_socket_stays_open() -> None:
    limited = Turn(error=OpeningError(429, "rate_limit", "slow down"))
    async with socket_to([limited, reply_turn(TEXT)]) as (_, socket):
        await socket.send_str(create())
        [error], ended = await read_response(socket)
        await socket.send_str(create())
        _, after = await read_response(socket)
        await socket.send_str(create())
        [exhausted], _ = await read_response(socket)
    assert ended == "error"
    assert error["status"] == 429
    assert error["error"] == RENDERER.error_body(limited.error)["error"]  # type: ignore[arg-type]
    assert after == "response.completed"
    assert exhausted["status"] == 400
    assert exhausted["error"]["code"] == "script_exhausted"


@pytest.mark.parametrize(
    ("extra", "ending"),
    [
        (WebSocketFaults(close_after=3, close_code=1011), "closed 1011"),
        (WebSocketFaults(close_after=3, close_code=1006), "closed 1006"),
    ],
)
async def test_a_close_mid_response_ends_the_socket_after_n_messages(
    extra: WebSocketFaults, ending: str
) -> None:
    turn = dataclasses.replace(reply_turn(EDIT), websocket=extra)
    async with socket_to([turn]) as (_, socket):
        await socket.send_str(create())
        values, ended = await read_response(socket)
    assert ended == ending
    assert values == sse_events(turn)[:3]


async def test_a_reset_after_n_events_drops_the_connection() -> None:
    turn = reply_turn(EDIT, Faults(reset_after=2))
    async with socket_to([turn]) as (_, socket):
        await socket.send_str(create())
        values, ended = await read_response(socket)
    assert ended == "closed 1006"
    assert len(values) <= 2


async def _raw_socket(server: ScriptedServer) -> tuple[asyncio.StreamReader, Any]:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            "GET /v1/responses HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {key}\r\n\r\n"
        ).encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ")
    assert f"Sec-WebSocket-Accept: {accept_key(key)}".encode() in head
    return reader, writer


def _client_frame(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)
    masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    return struct.pack("!BB", 0x80 | opcode, 0x80 | len(payload)) + mask + masked


async def test_a_cut_message_announces_more_than_it_sends_then_the_connection_ends() -> None:
    turn = dataclasses.replace(reply_turn(TEXT), websocket=WebSocketFaults(cut_after=2))
    async with serve_script([turn], provider="responses") as server:
        reader, writer = await _raw_socket(server)
        writer.write(_client_frame(0x1, create().encode()))
        received = await asyncio.wait_for(reader.read(), 3)  # to the end of the connection
        writer.close()
    frames = []
    while received:
        length = received[1] & 0x7F
        start = 2 if length < 126 else 4
        if length == 126:
            (length,) = struct.unpack("!H", received[2:4])
        frames.append((length, received[start : start + length]))
        received = received[start + length :]
    (one, two, (announced, cut)) = frames
    assert [json.loads(one[1])["type"], json.loads(two[1])["type"]] == [
        "response.created",
        "response.in_progress",
    ]
    assert 0 < len(cut) < announced  # the third frame stops halfway


@pytest.mark.parametrize("pong", [True, False])
async def test_silence_answers_pings_unless_the_turn_says_no_pong(pong: bool) -> None:
    extra = WebSocketFaults(silent_after=2, pong=pong)
    turn = dataclasses.replace(reply_turn(TEXT), websocket=extra)
    async with serve_script([turn], provider="responses") as server:
        reader, writer = await _raw_socket(server)
        writer.write(_client_frame(0x1, create().encode()))
        for _ in range(2):  # the two messages before the silence
            _, second = await reader.readexactly(2)
            await reader.readexactly(second & 0x7F if second & 0x7F < 126 else 0)
            if second & 0x7F == 126:
                (length,) = struct.unpack("!H", await reader.readexactly(2))
                await reader.readexactly(length)
        await asyncio.sleep(0.1)
        assert server.paused.is_set()  # silent
        writer.write(_client_frame(0x9, b"are you there"))
        try:
            answer = await asyncio.wait_for(reader.readexactly(2 + 13), 0.5)
        except TimeoutError:
            answer = b""
        writer.close()
    assert answer == (b"\x8a\x0d" + b"are you there" if pong else b"")


async def test_a_client_close_is_answered_and_a_bad_handshake_is_a_400() -> None:
    async with serve_script([reply_turn(TEXT)], provider="responses") as server:
        reader, writer = await _raw_socket(server)
        writer.write(_client_frame(0x8, struct.pack("!H", 1000)))
        assert await asyncio.wait_for(reader.read(), 3) == b"\x88\x02" + struct.pack("!H", 1000)
        writer.close()
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(
            b"GET /v1/responses HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        head = await asyncio.wait_for(reader.read(), 3)
        writer.close()
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"Sec-WebSocket-Key must be 16 bytes in base64" in head
    assert server.answered == 0


def test_message_actions_drop_sse_framing_and_keep_a_playbacks_pauses() -> None:
    turn = reply_turn(TEXT, Faults(keepalive_every=2, done_sentinel=True, line_ending="crlf"))
    messages = [a.payload for a in message_actions(turn, RENDERER) if isinstance(a, Message)]
    assert [json.loads(m) for m in messages] == sse_events(turn)  # no [DONE], no comments


def test_a_script_turn_takes_websocket_faults() -> None:
    script = load_script(
        json.dumps([{"reply": {"text": "hi"}, "websocket": {"close_after": 2, "pong": False}}])
    )
    assert script.turns[0].websocket == WebSocketFaults(close_after=2, pong=False)
    with pytest.raises(ScriptError, match="websocket must be an object"):
        load_script(json.dumps([{"reply": {"text": "hi"}, "websocket": {"boom": 1}}]))
    with pytest.raises(ScriptError, match="close_code must be at least 1000"):
        load_script(json.dumps([{"reply": {"text": "hi"}, "websocket": {"close_code": 5}}]))


async def _first_response(url: str) -> tuple[int, list[Any], str]:
    """Open a socket at `url`'s Responses path and read one response (status 101), or the
    handshake's refusal status."""
    async with aiohttp.ClientSession() as session:
        try:
            socket = await session.ws_connect(url.removesuffix("/v1") + "/v1/responses")
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status, [], "refused"
        async with socket:
            await socket.send_str(create())
            values, ended = await read_response(socket)
    return 101, values, ended


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--scenario", "ws-close-1011"), (101, "closed 1011")),
        (("--scenario", "websocket-upgrade"), (101, "response.completed")),
        (("--scenario", "websocket-upgrade", "--websocket", "refuse"), (426, "refused")),
    ],
)
def test_serve_answers_the_websocket_and_serves_its_faults(
    startup_marker: Path, tmp_path: Path, args: tuple[str, ...], expected: tuple[int, str]
) -> None:
    process = started_lockgate(startup_marker, tmp_path, "serve", *args)
    try:
        url = read_serving_line(process)
        status, values, ended = asyncio.run(_first_response(url))
    finally:
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process)
    assert (status, ended) == expected
    assert code == 0
    if status == 426:
        assert "a WebSocket upgrade; answered 426" in err
    if ended == "closed 1011":  # the edit's item was done before the close
        assert values[-1]["type"] == "response.output_item.done"
