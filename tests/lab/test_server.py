"""The scripted server (`lab/server.py`, behind `lockgate serve`) at the socket level."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from lockgate.lab.server import ServerThread, serve_script
from lockgate.providers import NAMES
from lockgate.providers import provider as registry_entry
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.reply import OpeningError, Reply, Say
from lockgate.scripted.scenario import reply_turn
from lockgate.scripted.script import Faults, ScriptError, Turn, load_script

from ..helpers import (
    CLI,
    KEY,
    closing,
    finish,
    http_request,
    read_serving_line,
    requests_of,
    serve,
    started_lockgate,
    text_turn,
)


def test_load_script_round_trips_every_fault() -> None:
    turns = load_script(
        json.dumps(
            {
                "turns": [
                    {
                        "status": 429,
                        "body": {"error": {"code": "rate_limit_exceeded"}},
                        "headers": {"retry-after": "1"},
                    },
                    {"connection_error": True},
                    {
                        "events": [
                            {"type": "response.created", "response": {"id": "r"}},
                            {"raw": ": hi\n\n"},
                        ],
                        "faults": {
                            "fragment_sizes": [1, 2],
                            "line_ending": "crlf",
                            "done_sentinel": True,
                            "stall_after": 1,
                            "stall_seconds": 0.5,
                        },
                    },
                ]
            }
        )
    ).turns
    assert turns[0] == Turn(
        status=429, body={"error": {"code": "rate_limit_exceeded"}}, headers={"retry-after": "1"}
    )
    assert turns[1].connection_error
    assert turns[2].faults == Faults(
        fragment_sizes=(1, 2),
        line_ending="crlf",
        done_sentinel=True,
        stall_after=1,
        stall_seconds=0.5,
    )
    with pytest.raises(ScriptError):
        load_script('{"turns": "nope"}')


async def test_server_records_requests_without_the_credential() -> None:
    turn = ResponseBuilder("r").created().text("m", "hi").completed().turn()
    async with serve_script([turn]) as server, httpx2.AsyncClient() as client:
        response = await client.post(
            f"{server.base_url}/responses",
            json={"model": "m", "stream": True},
            headers={"Authorization": "Bearer sk-very-secret"},
        )
        body = response.content
        await server.settle()
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert b"event: response.created" in body
    recorded = server.requests[0]
    assert recorded.body == {"model": "m", "stream": True}
    assert recorded.headers["authorization"] == "Bearer [redacted]"
    assert "sk-very-secret" not in repr(server.requests)
    assert recorded.client_closed_early is False


async def test_server_http_errors_carry_body_and_headers() -> None:
    turn = Turn(
        status=429,
        body={"error": {"code": "rate_limit_exceeded"}},
        headers={"retry-after-ms": "400"},
    )
    async with serve_script([turn]) as server, httpx2.AsyncClient() as client:
        response = await client.post(f"{server.base_url}/responses", json={"stream": True})
    assert response.status_code == 429
    assert response.headers["retry-after-ms"] == "400"
    assert response.json() == {"error": {"code": "rate_limit_exceeded"}}


async def test_server_reset_and_dropped_connection_are_socket_errors() -> None:
    builder = ResponseBuilder("r").created().text("m", "some text here")
    turns = [Turn(connection_error=True), builder.turn(faults=Faults(reset_after=2))]
    async with serve_script(turns) as server, httpx2.AsyncClient() as client:
        with pytest.raises(httpx2.TransportError):
            await client.post(f"{server.base_url}/responses", json={"stream": True})
        with pytest.raises(httpx2.TransportError):
            await read_whole_stream(client, f"{server.base_url}/responses")


async def read_whole_stream(client: httpx2.AsyncClient, url: str) -> None:
    async with client.stream("POST", url, json={"stream": True}) as response:
        async for _ in response.aiter_bytes():
            pass


async def test_server_notices_a_client_that_leaves_during_a_hang() -> None:
    turn = ResponseBuilder("r").created().turn(faults=Faults(end="hang"))
    async with serve_script([turn]) as server:
        async with (
            httpx2.AsyncClient() as client,
            client.stream(
                "POST", f"{server.base_url}/responses", json={"stream": True}
            ) as response,
        ):
            assert response.status_code == 200
            await asyncio.wait_for(server.paused.wait(), 5)
        await server.settle()
    assert server.requests[0].client_closed_early is True


async def test_server_fragments_bytes_exactly_as_scripted() -> None:
    text = "é✓"
    turn = (
        ResponseBuilder("r")
        .created()
        .text("m", text, 1)
        .completed()
        .turn(faults=Faults(fragment_sizes=(1,), line_ending="crlf"))
    )
    async with (
        serve_script([turn]) as server,
        httpx2.AsyncClient() as client,
        client.stream("POST", f"{server.base_url}/responses", json={"stream": True}) as response,
    ):
        chunks = [chunk async for chunk in response.aiter_raw()]
    joined = b"".join(chunks)
    assert b"\r\n" in joined
    assert b"\n\n" not in joined
    assert text.encode() in joined


# --- audit 3: requests that are not a protocol's request (L7, L8) ---------------------------


async def _raw_exchange(port: int, request: bytes) -> bytes:
    """Send raw bytes, half-close, and read the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def _post(body: bytes, *, extra: bytes = b"") -> bytes:
    head = b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    return head + extra + b"content-length: %d\r\n\r\n" % len(body) + body


BAD_REQUESTS = {
    "deep-nesting": (_post(b"[" * 100_000 + b"]" * 100_000), "not a JSON object"),
    "deep-object": (_post(b'{"a":' * 5_000 + b"1" + b"}" * 5_000), "not a JSON object"),
    "not-json": (_post(b"hello"), "not a JSON object"),
    "a-list": (_post(b"[]"), "not a JSON object"),
    "stream-yes": (_post(b'{"stream": "yes"}'), "'stream' must be true or false"),
    "two-lengths": (_post(b"{}", extra=b"content-length: 2\r\n"), "more than one content-length"),
    "http-0.9": (b"GET /\r\n", "not an HTTP/1.x request line"),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
async def test_a_request_that_is_no_protocol_request_gets_400_a_log_line_and_no_turn(
    name: str,
) -> None:
    request, reason = BAD_REQUESTS[name]
    logged: list[str] = []
    turns = [ResponseBuilder("resp_ok").created().text("m", "ok").completed().turn()]
    async with serve_script(turns, log=logged.append) as server:
        answer = await _raw_exchange(server.port, request)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:80]
        assert b"x-should-retry: false" in answer
        assert reason.encode() in answer
        assert any(reason in line and "no turn consumed" in line for line in logged), logged
        assert server.answered == 0  # the turn is still there for a real request
        client = openai.AsyncOpenAI(api_key="sk-test-serve", base_url=server.base_url)
        try:
            async with client.responses.stream(model="m", input="hi") as stream:
                final = await stream.get_final_response()
        finally:
            await client.close()
        assert final.output_text == "ok"


# --- audit 3: a fault stays a fault when the client does not ask for a stream -----------------

NON_STREAMING_FAULTS = ["disconnect", "clean-eof", "reset-mid-stream", "provider-error", "stall"]


async def _first_failure(ask: Callable[[], Awaitable[object]], turns: int) -> Exception:
    """Ask once per scripted turn, as a client would; the first exception raised (the
    fault), or an AssertionError naming every answer when none was."""
    answers = []
    for _ in range(turns):
        try:
            answers.append(await ask())
        except Exception as exc:
            return exc
    return AssertionError(f"every turn answered: {answers}")


def _no_stop_with_calls(reply: Any) -> object:
    choice = reply.choices[0]
    assert not (choice.finish_reason == "stop" and choice.message.tool_calls), reply
    return reply


@pytest.mark.parametrize("scenario_name", NON_STREAMING_FAULTS)
@pytest.mark.parametrize("provider", ["chat", "responses", "anthropic"])
async def test_without_a_stream_a_fault_stays_a_fault(scenario_name: str, provider: str) -> None:
    import anthropic

    from lockgate.lab.scenarios import SCENARIOS_BY_NAME

    turns = SCENARIOS_BY_NAME[scenario_name].turns()
    options: dict[str, Any] = {"api_key": "sk-test-serve", "max_retries": 0, "timeout": 2.0}
    async with serve_script(turns, provider=provider) as server:
        if provider == "anthropic":
            messages = anthropic.AsyncAnthropic(base_url=server.base_url, **options)

            async def ask() -> object:
                message = await messages.messages.create(
                    model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
                )
                assert message.stop_reason is not None, message  # a real message has one
                return message

            closing: Any = messages
        else:
            client = openai.AsyncOpenAI(base_url=server.base_url, **options)

            async def ask() -> object:
                if provider == "chat":
                    return _no_stop_with_calls(
                        await client.chat.completions.create(
                            model="m", messages=[{"role": "user", "content": "fix it"}]
                        )
                    )
                response = await client.responses.create(model="m", input="fix it")
                assert response.status == "completed", response
                return response

            closing = client
        try:
            failure = await _first_failure(ask, len(turns))
        finally:
            await closing.close()
    assert isinstance(failure, openai.APIError | anthropic.APIError), failure


async def test_a_complete_reply_without_a_stream_states_its_stop_reason() -> None:
    import anthropic

    from lockgate.lab.scenarios import repair_turns

    turns = repair_turns()
    async with serve_script(turns, provider="anthropic") as server:
        client = anthropic.AsyncAnthropic(
            api_key="sk-test-serve", base_url=server.base_url, max_retries=0
        )
        try:
            first = await client.messages.create(
                model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
            )
        finally:
            await client.close()
    assert first.stop_reason == "tool_use"


# --- the server's own robustness ---------------------------------------------------------


async def test_a_failing_connection_is_one_log_line_never_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A turn the server cannot even encode (built in Python, past the script checks)."""
    unencodable = Turn(events=({"type": "response.created", "response": {"id": "\ud800"}},))
    lines: list[str] = []
    async with (
        serve_script([unencodable, text_turn()], log=lines.append) as server,
        httpx2.AsyncClient() as client,
    ):
        with pytest.raises(httpx2.HTTPError):
            async with client.stream(
                "POST", f"{server.base_url}/responses", json={"stream": True}
            ) as response:
                await response.aread()
        again = await client.post(f"{server.base_url}/responses", json={"stream": True})
        await server.settle()
    assert again.status_code == 200  # the server lives on
    assert len(lines) == 1
    assert lines[0].startswith("connection dropped: UnicodeEncodeError:")
    assert "Traceback" not in caplog.text
    assert "Unhandled exception" not in caplog.text


def test_serve_answers_other_paths_without_consuming_a_turn(
    cli: CLI, startup_marker: Path, tmp_path: Path
) -> None:
    process = started_lockgate(startup_marker, tmp_path, "serve", "--scenario", "repair")
    try:
        url = read_serving_line(process)
        assert http_request(url, "GET", "/favicon.ico") == 404
        assert http_request(url, "POST", "/v1/other", b"{}") == 404
        assert http_request(url, "GET", "/v1/responses") == 405
        result = cli("run", "--base-url", url, "--allow-execution", key=KEY)
    finally:
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process)
    assert result.code == 0, result.output[-2000:]
    ending = closing(result.out)
    assert (ending.stopped, ending.executed_tools) == ("model_finished", 6)
    assert code == 0
    logged = [line for line in err.splitlines() if "no turn consumed" in line]
    answers = "this server answers POST /v1/responses (no turn consumed)"
    assert logged == [
        f"lockgate serve: GET /favicon.ico: HTTP 404 (not this protocol's path); {answers}",
        f"lockgate serve: POST /v1/other: HTTP 404 (not this protocol's path); {answers}",
        f"lockgate serve: GET /v1/responses: HTTP 405 (not POST); {answers}",
    ]
    assert err.splitlines()[-1] == "lockgate serve: stopped after 10 requests"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.1", "::", "example.com", ""])
async def test_the_scripted_server_listens_on_loopback_only(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        ServerThread([text_turn()], host=host)
    with pytest.raises(ValueError, match="loopback"):
        async with serve_script([text_turn()], host=host):
            pass


@pytest.mark.parametrize(
    ("header", "value", "recorded"),
    [
        ("Authorization", "sk-nobearer-1234", "[redacted]"),
        ("Authorization", "Bearer sk-with-scheme", "Bearer [redacted]"),
        ("Authorization", "Bearer", "[redacted]"),
        ("api-key", "sk-azure-style", "[redacted]"),
        ("x-api-key", "sk-ant-style", "[redacted]"),
    ],
)
def test_the_scripted_server_never_records_a_credential(
    header: str, value: str, recorded: str
) -> None:
    with serve([text_turn()]) as server:
        body = b'{"stream": true}'
        assert http_request(server.base_url, "POST", "/v1/responses", body, {header: value}) == 200
        [request] = requests_of(server)
    assert request.headers[header.lower()] == recorded
    assert value.split()[-1] not in repr(request) or value == "Bearer"


# --- a WebSocket upgrade (Codex's built-in provider asks for one first) -----------------------

UPGRADE = {
    "connection": "Upgrade",
    "upgrade": "websocket",
    "sec-websocket-version": "13",
    "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
}


@pytest.mark.parametrize("provider", list(NAMES))
async def test_a_websocket_upgrade_is_answered_426_and_takes_no_turn(provider: str) -> None:
    """A server that speaks HTTP only (every protocol without a WebSocket mode, and
    Responses with `websocket=False`: `serve --websocket refuse`) says so the way a client
    that tries a WebSocket first (Codex) falls back at once: 426, never a 405 it would
    retry."""
    renderer = registry_entry(provider).render()
    path = renderer.path + (f"?{renderer.stream_query}" if renderer.stream_query else "")
    logged: list[str] = []
    turns = [reply_turn(Reply("resp_ws", (Say("ok"),)))]
    refuse = provider == "responses"  # the one protocol with a WebSocket mode
    async with serve_script(
        turns, provider=provider, log=logged.append, websocket=not refuse
    ) as server:
        origin = f"http://{server.host}:{server.port}"
        async with httpx2.AsyncClient(trust_env=False) as http:
            upgrade = await http.get(origin + path, headers=UPGRADE)
            elsewhere = await http.get(origin + "/v1/other", headers=UPGRADE)
            plain_get = await http.get(origin + path)
            stream = await http.post(origin + path, json={"stream": True, "model": "m"})
        await server.settle()
    assert upgrade.status_code == 426
    assert upgrade.headers["x-should-retry"] == "false"
    assert upgrade.json() == renderer.error_body(
        OpeningError(426, "invalid", "this server speaks HTTP only: send the request over HTTP")
    )
    assert (elsewhere.status_code, plain_get.status_code) == (404, 405)  # as before
    assert stream.status_code == 200  # the turn is still there
    assert server.answered == 1
    first = server.requests[0]
    assert (first.method, first.outcome, first.consumed_turn) == (
        "GET",
        "HTTP 426 (WebSocket upgrade)",
        False,
    )
    assert first in server.stray_requests
    assert logged[0] == (
        f"GET {path}: a WebSocket upgrade; answered 426 (this server speaks HTTP only; "
        "no turn consumed)"
    )
