"""What a request and an upstream may cost the proxy, and what it says when something goes
wrong: a request body's JSON bounded in values and depth (M5), a request head that must
arrive in time (M6), a request aiohttp's parser rejects (L11), request and response encodings
(L5, L12), an upstream that breaks or falls silent after the connection succeeded, and a
stream cut when the proxy stops."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.jsonlimits import TooComplex, check_document
from lockgate.lab.server import serve_script
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving

from .support import request_for
from .test_server import (
    PATHS,
    STALLED,
    first_bytes,
    gating,
    origin,
    post,
    proxy_to,
    raw_exchange,
    serve_app,
    wait_for,
)


class Upstream:
    """Answers every request 200 with a small JSON body; keeps each request's headers (by
    lower-case name) and body."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], bytes]] = []

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(({k.lower(): v for k, v in request.headers.items()}, body))
        return web.json_response({"object": "list", "data": []})


def message_of(body: bytes) -> str:
    message: str = json.loads(body)["error"]["message"]
    return message


# --- M5: a request body's JSON is bounded in values and depth --------------------------------


def _values(value: object) -> int:
    """JSON values in `value`, object keys counted."""
    if isinstance(value, dict):
        return 1 + sum(1 + _values(item) for item in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(item) for item in value)
    return 1


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.sampled_from([None, 1]), st.booleans())
def test_the_pre_scan_counts_values_and_depth_exactly(
    value: object, indent: int | None, ascii_only: bool
) -> None:
    data = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()
    values, depth = _values(value), _depth(value)
    check_document(data, depth, values)  # at the bounds: accepted
    with pytest.raises(TooComplex, match="JSON values"):
        check_document(data, depth, values - 1)
    if depth:
        with pytest.raises(TooComplex, match="nests deeper"):
            check_document(data, depth - 1, values)


async def test_a_request_with_too_many_json_values_is_refused_before_the_upstream() -> None:
    from lockgate.proxy.server import MAX_REQUEST_VALUES

    values = ",".join(["0"] * MAX_REQUEST_VALUES)
    raw = f'{{"model": "m", "stream": true, "messages": [], "pad": [{values}]}}'.encode()
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        status, _, body = await post(proxied.proxy.url + PATHS["chat"], None, raw=raw)
    assert status == 413
    assert f"body holds more than {MAX_REQUEST_VALUES} JSON values" in message_of(body)
    assert upstream.seen == []
    [record] = proxied.records
    assert (record.outcome, record.status, record.protocol) == ("rejected", 413, "chat")


async def test_a_request_nested_too_deeply_is_refused_before_the_upstream() -> None:
    raw = b'{"model": "m", "x": ' + b"[" * 300 + b"]" * 300 + b"}"
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        status, _, body = await post(proxied.proxy.url + PATHS["responses"], None, raw=raw)
    assert status == 413
    assert "the request body nests deeper than 256 levels" in message_of(body)
    assert upstream.seen == []


async def test_a_large_ordinary_request_is_judged_and_sent() -> None:
    request = request_for("chat")
    filler = [{"role": "user", "content": "x" * 64} for _ in range(20_000)]  # ~2 MB
    request = {**request, "messages": [*request["messages"], *filler], "stream": False}
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        await post(proxied.proxy.url + PATHS["chat"], request)
    [(_, sent)] = upstream.seen
    assert json.loads(sent) == request
    assert proxied.records[0].protocol == "chat"
    assert proxied.records[0].outcome != "rejected"


# --- M6: the request head must arrive in time ------------------------------------------------


async def test_a_request_head_that_never_completes_is_closed() -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base, head_timeout=0.5) as proxied:
        answer = await raw_exchange(
            proxied.proxy.url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        )
    assert answer == b""  # closed without an answer
    assert upstream.seen == []
    assert proxied.records == []


async def test_a_second_head_on_a_kept_alive_connection_must_arrive_in_time() -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base, head_timeout=0.5) as proxied:
        host, port = proxied.proxy.url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert b"chunked" in head.lower()  # a pass-through answer, streamed
            await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 30)
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            rest = await asyncio.wait_for(reader.read(), 30)
        finally:
            writer.close()
    assert head.startswith(b"HTTP/1.1 200")
    assert rest == b""
    assert len(upstream.seen) == 1


def test_a_bad_head_timeout_is_refused() -> None:
    for value in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="head_timeout"):
            ProxyConfig("https://api.example", head_timeout=value)


# --- L11: a request the parser rejects -------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"GE\x01T / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
    ],
    ids=["bad-length", "bad-method", "bad-header-name"],
)
async def test_a_request_the_parser_rejects_gets_a_json_400_and_a_record(head: bytes) -> None:
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        answer = await raw_exchange(proxied.proxy.url, head)
        await wait_for(lambda: proxied.records, "the malformed request was recorded")
    status_line, _, rest = answer.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert status_line.startswith(b"HTTP/1."), answer
    assert b" 400 " in status_line, answer
    assert b"application/json" in headers.lower()
    assert message_of(body).startswith("lockgate proxy: the request is not valid HTTP")
    assert upstream.seen == []
    [record] = proxied.records
    assert (record.outcome, record.status) == ("rejected", 400)
    assert record.reason is not None
    assert "\n" not in record.reason


# --- L5, L12: encodings ----------------------------------------------------------------------


async def test_a_gzip_request_body_goes_upstream_decoded_without_its_encoding() -> None:
    request = request_for("chat")
    plain = json.dumps(request).encode()
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        await post(
            proxied.proxy.url + PATHS["chat"],
            None,
            {"content-encoding": "gzip"},
            raw=gzip.compress(plain),
        )
    [(headers, body)] = upstream.seen
    assert "content-encoding" not in headers
    assert body == plain
    assert proxied.records[0].protocol == "chat"


async def encoded_answer(body: bytes, encoding: str, request: web.Request) -> web.Response:
    await request.read()
    response = web.Response(body=body, headers={"Content-Encoding": encoding})
    response.content_type = "application/json"
    return response


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip, gzip", gzip.compress(gzip.compress(b'{"data": []}', mtime=0), mtime=0)),
        ("br", b"\x8b\x05\x80not-really-brotli"),
        ("zstd", b"(\xb5/\xfd not-really-zstd"),
        ("compress", b"\x1f\x9d not-lzw"),
    ],
    ids=["gzip-twice", "br", "zstd", "compress"],  # the same on every worker
)
async def test_an_answer_in_an_encoding_the_proxy_cannot_decode_is_a_clear_502(
    encoding: str, body: bytes
) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        return await encoded_answer(body, encoding, request)

    async with serve_app(answer) as base, proxy_to(base) as proxied:
        async with (
            aiohttp.ClientSession(auto_decompress=False) as session,
            session.get(proxied.proxy.url + "/v1/models") as response,
        ):
            status, got = response.status, await response.read()
        chat = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
    assert status == 502
    message = message_of(got)
    assert "encoding" in message.lower(), message
    assert "cannot decode" in message, message
    assert "connecting" not in message
    assert chat[0] == 502
    assert "cannot decode" in message_of(chat[2])
    assert [r.outcome for r in proxied.records] == ["error", "error"]


async def test_the_proxy_asks_only_for_encodings_it_can_decode() -> None:
    from aiohttp.compression_utils import HAS_BROTLI, HAS_ZSTD

    decodable = {"gzip", "deflate"} | ({"br"} if HAS_BROTLI else set())
    decodable |= {"zstd"} if HAS_ZSTD else set()
    upstream = Upstream()
    async with serve_app(upstream.answer) as base, proxy_to(base) as proxied:
        await post(
            proxied.proxy.url + PATHS["chat"],
            request_for("chat"),
            {"accept-encoding": "br, zstd, gzip"},
        )
    [(headers, _)] = upstream.seen
    asked = {part.strip() for part in headers["accept-encoding"].split(",")}
    assert asked <= decodable


# --- an upstream that breaks or falls silent after the connection succeeded ------------------


@contextlib.asynccontextmanager
async def raw_upstream(behaviour: str) -> AsyncIterator[str]:
    """A TCP server that reads a request head, then resets the connection (`reset`), closes
    it (`close`) or says nothing (`silent`)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            if behaviour == "reset":
                writer.transport.abort()
            elif behaviour == "close":
                writer.close()
            else:
                await asyncio.sleep(60)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


@pytest.mark.parametrize(
    ("behaviour", "status", "words"),
    [
        ("reset", 502, "before its answer"),
        ("close", 502, "before its answer"),
        ("silent", 504, "no answer within"),
    ],
)
async def test_an_upstream_that_fails_after_connecting_is_not_called_unreachable(
    behaviour: str, status: int, words: str
) -> None:
    async with (
        raw_upstream(behaviour) as base,
        proxy_to(base, gating=gating(idle_timeout=0.3)) as proxied,
    ):
        got = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
        passed = await post(proxied.proxy.url + "/v1/models", None)
    for answered in (got, passed):
        assert answered[0] == status
        message = message_of(answered[2])
        assert words in message, message
        assert "connecting" not in message
    assert [r.outcome for r in proxied.records] == ["error", "error"]
    reason = proxied.records[0].reason
    assert reason is not None
    assert words in reason


# --- stopping: a stream cut after the grace period -------------------------------------------


async def test_a_stream_cut_after_the_grace_period_is_logged_as_cut() -> None:
    records: list[ProxyRecord] = []
    async with serve_script([STALLED], provider="chat") as server:
        config = ProxyConfig(origin(server), gating=gating(), grace_seconds=0.2)
        async with (
            serving(config, records.append) as proxy,
            aiohttp.ClientSession() as session,
            session.post(proxy.url + PATHS["chat"], json=request_for("chat")) as response,
        ):
            assert await first_bytes(response)
            await proxy.stop()
            with contextlib.suppress(aiohttp.ClientError):
                await response.read()
    [record] = records
    assert record.outcome == "cut"
    assert record.reason is not None
    assert "grace period" in record.reason


# --- a client that stops reading -------------------------------------------------------------


def _chat_chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/files"], ids=["gated", "passed"])
async def test_a_client_that_stops_reading_is_let_go_at_the_idle_timeout(path: str) -> None:
    # aiohttp's write waits for the socket to drain with no limit of its own, whether or not
    # the socket was full before the write: a client that stops reading held the handler,
    # its slot and the upstream until its TCP connection died.
    upstream_ended = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:  # ~9 MB of one-character deltas: within the text bound, beyond any buffer
            for _ in range(600):
                await response.write(_chat_chunk({"content": "w"}) * 100)
            await response.write(_chat_chunk({}, "stop") + b"data: [DONE]\n\n")
        except ConnectionError:
            pass  # the proxy let the upstream go
        finally:
            upstream_ended.set()
        return response

    async with (
        serve_app(answer) as upstream,
        proxy_to(upstream, gating=gating(idle_timeout=0.5)) as proxied,
    ):
        host, port = proxied.proxy.url.removeprefix("http://").rsplit(":", 1)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting
        client.connect((host, int(port)))
        client.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=client)
        body = json.dumps(request_for("chat")).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        assert await reader.read(100)  # a little of the answer, then it never reads again
        try:
            await wait_for(lambda: proxied.records, "the proxy let the client go", limit=20.0)
            await asyncio.wait_for(upstream_ended.wait(), 20.0)  # a guard, not a measure
        finally:
            writer.transport.abort()
    [record] = proxied.records
    assert record.outcome == "abandoned"
    assert proxied.proxy.active == 0
