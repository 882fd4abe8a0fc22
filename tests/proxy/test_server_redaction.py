"""M3: a proxy that holds the key never lets it reach a client, whatever the upstream echoes:
response headers, error and pass-through bodies (in pieces, raw or JSON-escaped), streams and
whole answers, which are redacted before the gate judges them, so the client reads exactly
what the gate judged."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from lockgate.credentials import REDACTED, Redactor
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Turn

from .support import request_for, tool_events
from .test_server import HELD_KEY, PATHS, post, proxy_to, scripted, sdk_final, serve_app

# A key whose JSON and repr forms differ from its raw form.
ODD_KEY = 'sk-odd"quote\\back/slash-77'
JSON_FORM = json.dumps(ODD_KEY)[1:-1]


# --- the byte stream redactor ----------------------------------------------------------------


def redacted_whole(data: bytes, *secrets: str) -> bytes:
    return Redactor(secrets).redact_bytes(data)


@pytest.mark.parametrize(
    "data",
    [
        f'data: {{"error": "bad key {HELD_KEY}"}}\n\n'.encode(),
        json.dumps({"message": f"key {ODD_KEY} rejected"}).encode(),
        b"\xff\xfe binary " + HELD_KEY.encode() + b"\x00\x80" + ODD_KEY.encode() + b" end",
        (HELD_KEY[:-1] + " " + HELD_KEY[:5]).encode(),  # prefixes that never complete
        f"{HELD_KEY}{HELD_KEY}".encode(),
    ],
)
def test_bytes_in_any_pieces_are_redacted_as_the_whole(data: bytes) -> None:
    redactor = Redactor([HELD_KEY, ODD_KEY])
    whole = redactor.redact_bytes(data)
    assert HELD_KEY.encode() not in whole
    assert ODD_KEY.encode() not in whole
    assert JSON_FORM.encode() not in whole
    for first in range(len(data) + 1):
        for second in range(first, len(data) + 1, 7):
            stream = redactor.bytes_stream()
            pieces = (data[:first], data[first:second], data[second:])
            out = b"".join(stream.feed(piece) for piece in pieces) + stream.flush()
            assert out == whole, (first, second)


def test_only_a_tail_that_could_begin_a_secret_is_held_back() -> None:
    stream = Redactor([HELD_KEY]).bytes_stream()
    assert stream.feed(b"data: {}\n\n") == b"data: {}\n\n"
    assert stream.feed(b'data: {"x": "sk-he') == b'data: {"x": "'
    assert stream.feed(b'llo"}\n\n') == b'sk-hello"}\n\n'
    assert stream.feed(HELD_KEY.encode()[:-1]) == b""
    assert stream.feed(HELD_KEY.encode()[-1:] + b"!") == REDACTED.encode() + b"!"
    assert stream.flush() == b""


def test_the_json_escaped_form_is_redacted() -> None:
    assert (
        redacted_whole(json.dumps({"k": ODD_KEY}).encode(), ODD_KEY)
        == json.dumps({"k": REDACTED}).encode()
    )


# --- through the proxy -----------------------------------------------------------------------


def pieces_of(data: bytes, size: int = 5) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


async def write_in_pieces(response: web.StreamResponse, data: bytes) -> None:
    for piece in pieces_of(data):
        await response.write(piece)
        await asyncio.sleep(0)


def echoing(status: int, body: bytes, headers: dict[str, str]) -> Any:
    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(status=status, headers=headers)
        response.content_type = "application/json"
        await response.prepare(request)
        await write_in_pieces(response, body)
        await response.write_eof()
        return response

    return answer


async def get(url: str) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, allow_redirects=False) as response,
    ):
        return response.status, dict(response.headers), await response.read()


@pytest.mark.parametrize("key", [HELD_KEY, ODD_KEY])
async def test_headers_and_a_pass_through_body_that_echo_the_key_are_redacted(key: str) -> None:
    body = json.dumps({"data": [], "echo": f"Bearer {key}", "raw": "x"}).encode()
    body = body.replace(b'"raw": "x"', b'"raw": "' + key.encode() + b'"')
    headers = {"Location": f"https://example.test/?key={key}", "X-Echo": f"Bearer {key}"}
    async with (
        serve_app(echoing(302, body, headers)) as base,
        proxy_to(base, api_key=key) as proxied,
    ):
        status, got_headers, got = await get(proxied.proxy.url + "/v1/models")
    assert status == 302
    everything = json.dumps(got_headers).encode() + got
    assert key.encode() not in everything
    assert json.dumps(key)[1:-1].encode() not in everything
    assert got_headers["Location"] == f"https://example.test/?key={REDACTED}"
    assert got_headers["X-Echo"] == f"Bearer {REDACTED}"
    assert json.loads(got)["echo"] == f"Bearer {REDACTED}"


@pytest.mark.parametrize("provider", ["chat", "anthropic"])
async def test_an_error_body_that_echoes_the_key_is_redacted(provider: str) -> None:
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {HELD_KEY}"}}).encode()
    async with (
        serve_app(echoing(401, body, {"X-Request-Key": HELD_KEY})) as base,
        proxy_to(base, api_key=HELD_KEY) as proxied,
    ):
        status, headers, answer = await post(
            proxied.proxy.url + PATHS[provider], request_for(provider)
        )
    assert status == 401
    assert HELD_KEY.encode() not in answer
    assert HELD_KEY not in json.dumps(dict(headers))
    assert json.loads(answer)["error"]["message"] == f"Incorrect API key provided: {REDACTED}"


async def test_a_gated_stream_that_echoes_the_key_is_redacted_before_it_is_judged() -> None:
    arguments = {"path": "calculator.py", "old": f"key={HELD_KEY}", "new": "x"}
    turn = Turn(
        reply=Reply(
            "r1", (Say(f"Your key is {HELD_KEY}.", pieces=1), Call("c1", "edit", arguments))
        )
    )
    async with scripted("chat", [turn], api_key=HELD_KEY) as (_, proxied):
        status, _, body = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
    assert status == 200
    assert HELD_KEY.encode() not in body
    assert REDACTED.encode() in body
    assert tool_events(body)  # the call was released, its arguments redacted
    assert [r.outcome for r in proxied.records] == ["passed"]


async def test_the_sdk_reads_the_redacted_call_the_gate_accepted() -> None:
    # The arguments in one delta: a key spelled across several deltas is not caught by the
    # bytes (the gate then refuses the stream, its terminal differing from what streamed).
    arguments = {"path": "calculator.py", "old": f"key={HELD_KEY}", "new": "x"}
    turn = Turn(reply=Reply("r1", (Say("Fixing."), Call("c1", "edit", arguments, pieces=1))))
    async with scripted("responses", [turn], api_key=HELD_KEY) as (_, proxied):
        final = await sdk_final("responses", proxied.proxy.url)
    [call] = [item for item in final["output"] if item["type"] == "function_call"]
    assert json.loads(call["arguments"])["old"] == f"key={REDACTED}"
    assert HELD_KEY not in json.dumps(final)
    assert [r.outcome for r in proxied.records] == ["passed"]


async def test_a_whole_answer_that_echoes_the_key_is_redacted() -> None:
    turn = Turn(reply=Reply("r1", (Say(f"The key: {HELD_KEY}", pieces=1),)))
    async with scripted("anthropic", [turn], api_key=HELD_KEY) as (_, proxied):
        status, _, body = await post(
            proxied.proxy.url + PATHS["anthropic"], {**request_for("anthropic"), "stream": False}
        )
    assert status == 200
    assert HELD_KEY.encode() not in body
    assert json.loads(body)["content"][0]["text"] == f"The key: {REDACTED}"
    assert [r.outcome for r in proxied.records] == ["passed"]


async def test_without_a_held_key_nothing_is_redacted() -> None:
    body = json.dumps({"echo": HELD_KEY}).encode()
    async with serve_app(echoing(200, body, {"X-Echo": HELD_KEY})) as base, proxy_to(base) as p:
        _, headers, got = await get(p.proxy.url + "/v1/models")
    assert got == body
    assert headers["X-Echo"] == HELD_KEY


# --- a transfer coding other than chunked (issue 27) ------------------------------------------


async def _raw_upstream(answer: bytes) -> tuple[asyncio.Server, str]:
    """A loopback upstream that reads one request (its head and `Content-Length` body) and
    writes `answer` as it is, then closes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def _gzip_chunked(status: str, content_type: str, body: bytes) -> bytes:
    coded = gzip.compress(body)
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        "Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + f"{len(coded):x}\r\n".encode() + coded + b"\r\n0\r\n\r\n"


def _decoded(data: bytes) -> bytes:
    """The bytes, un-gzipped where they are gzip (a coded body passed on as it came)."""
    try:
        return gzip.decompress(data)
    except (OSError, EOFError):
        return data


@pytest.mark.parametrize(
    ("method", "path", "status", "content_type"),
    [
        ("POST", PATHS["chat"], "200 OK", "text/event-stream"),
        ("POST", PATHS["chat"], "401 Unauthorized", "application/json"),
        ("GET", "/v1/models", "200 OK", "application/json"),
    ],
    ids=["gated-stream", "error-status", "pass-through"],
)
async def test_a_transfer_coding_other_than_chunked_is_refused_not_passed_coded(
    method: str, path: str, status: str, content_type: str
) -> None:
    echo = json.dumps({"error": {"message": f"Incorrect API key: {HELD_KEY}"}}).encode()
    if content_type == "text/event-stream":
        echo = b'data: {"echo": "' + HELD_KEY.encode() + b'"}\n\n'
    server, base = await _raw_upstream(_gzip_chunked(status, content_type, echo))
    try:
        async with proxy_to(base, api_key=HELD_KEY) as proxied, aiohttp.ClientSession() as s:
            body = json.dumps(request_for("chat")).encode() if method == "POST" else None
            async with s.request(
                method,
                proxied.proxy.url + path,
                data=body,
                headers={"content-type": "application/json"},
            ) as response:
                got_status, got = response.status, await response.read()
    finally:
        server.close()
        await server.wait_closed()
    assert HELD_KEY.encode() not in _decoded(got)  # what a client that un-gzips reads
    assert got_status == 502
    assert "Transfer-Encoding" in json.loads(got)["error"]["message"]
    [record] = proxied.records
    assert record.outcome == "error"
    assert "Transfer-Encoding" in (record.reason or "")
