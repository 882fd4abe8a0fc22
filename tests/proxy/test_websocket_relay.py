"""The Responses WebSocket relay (issue 30): a client's socket on `…/responses` terminated by
the proxy, one upstream socket per client socket, every `response.create` gated as an HTTP
stream is (text at once, tool items held until `response.completed` and the batch valid),
a refusal as a wrapped 5xx error and the socket closed. Real sockets on loopback only: a
scripted upstream (`test_websocket_support.ws_upstream`) and aiohttp's WebSocket client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.sse import DEFAULT_MAX_EVENT_BYTES

from ..codex_grammars import EXEC_TOOL
from .test_server import gating
from .test_websocket_support import (
    CLIENT_KEY,
    HELD_KEY,
    TOKEN,
    ClientSession,
    Script,
    Upstream,
    UpstreamSocket,
    call_events,
    connect,
    create,
    send_all,
    text_events,
    ws_upstream,
)

READ = {"path": "calculator.py"}


def serving_to(upstream: str, records: list[ProxyRecord], **config: Any) -> Any:
    config.setdefault("gating", gating(idle_timeout=2.0, deadline=20.0))
    return serving(ProxyConfig(upstream, **config), records.append)


@contextlib.asynccontextmanager
async def relayed(
    script: Script, records: list[ProxyRecord], **config: Any
) -> AsyncIterator[tuple[Upstream, ClientSession]]:
    """The scripted upstream, the proxy in front of it, and a client socket through it."""
    async with (
        ws_upstream(script) as upstream,
        serving_to(upstream.url, records, **config) as proxy,
        connect(proxy.url + "/v1/responses") as client,
    ):
        yield upstream, client


def refusal_of(message: dict[str, Any]) -> tuple[int, str, str]:
    """A wrapped error's status, code and message."""
    assert message["type"] == "error"
    return message["status"], message["error"]["code"], message["error"]["message"]


async def test_a_complete_response_with_a_call_is_released_exactly() -> None:
    events = call_events("resp_1", ("read", READ))

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, events)

    records: list[ProxyRecord] = []
    async with relayed(script, records) as (upstream, client):
        got = await client.response(create())
    assert got.messages == events  # every event, in order, as it came
    assert [item["name"] for item in got.calls] == ["read", "read"]  # added and done
    assert upstream.posts == []
    [record] = [r for r in records if r.method == "WS"]
    assert (record.outcome, record.protocol, record.status) == ("passed", "responses", 200)


async def test_text_flows_before_the_terminal_and_calls_are_held() -> None:
    events = call_events("resp_1", ("read", READ))
    first_call = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    )
    release = asyncio.Event()

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, events[: first_call + 2])
        await release.wait()
        await send_all(socket, events[first_call + 2 :])

    records: list[ProxyRecord] = []
    async with relayed(script, records) as (_upstream, client):
        await client.send(create())
        seen: list[str] = []
        while len(seen) < first_call:
            got = await client.ws.receive(timeout=5)
            seen.append(json.loads(got.data)["type"])
        assert "response.output_text.delta" in seen  # text at once
        with pytest.raises(asyncio.TimeoutError):  # the call is held
            await client.ws.receive(timeout=0.3)
        release.set()
        rest = await client.read()
    assert rest.types[-1] == "response.completed"
    assert len(seen) + len(rest.messages) == len(events)


@pytest.mark.parametrize("code", [1006, 1011, 1000])
async def test_an_upstream_socket_that_ends_mid_response_runs_nothing(code: int) -> None:
    events = call_events("resp_1", ("read", READ))
    cut = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    )

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, events[:cut])
        assert socket.ws is not None
        assert socket.request is not None
        if code == 1006:
            assert socket.request.transport is not None
            socket.request.transport.abort()
        else:
            await socket.ws.close(code=code)

    records: list[ProxyRecord] = []
    async with relayed(script, records) as (_upstream, client):
        got = await client.response(create())
        closed = await client.closed()
    assert "response.completed" not in got.types
    assert all(item.get("status") != "completed" or item["type"] == "message" for item in got.calls)
    assert not any(
        m.get("type") == "response.output_item.done" and m["item"]["type"] == "function_call"
        for m in got.messages
    )
    status, kind, text = refusal_of(got.messages[-1])
    assert status == 503  # transient: Codex retries on a new socket
    assert kind == ("lockgate_stream_ended" if code == 1000 else "lockgate_transport")
    assert "lockgate withheld 1 tool call" in text
    assert closed == 1011
    [record] = [r for r in records if r.method == "WS"]
    assert record.outcome == "withheld"


async def test_silence_is_refused_after_the_idle_timeout() -> None:
    events = call_events("resp_1", ("read", READ))

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, events[:6])
        await asyncio.sleep(30)

    records: list[ProxyRecord] = []
    async with relayed(script, records, gating=gating(idle_timeout=0.5)) as (_upstream, client):
        got = await client.response(create())
    status, kind, _ = refusal_of(got.messages[-1])
    assert (status, kind) == (503, "lockgate_idle_timeout")
    assert not got.calls or all(
        m["type"] != "response.output_item.done"
        for m in got.messages
        if m.get("item", {}).get("type") == "function_call"
    )


async def test_an_in_stream_error_and_an_output_limit_are_refused() -> None:
    def ending(response_id: str, kind: str) -> list[dict[str, Any]]:
        events = call_events(response_id, ("read", READ))[:-1]
        if kind == "error":
            return [
                *events,
                {
                    "type": "error",
                    "status": 500,
                    "error": {"type": "server_error", "code": "server_error", "message": "boom"},
                },
            ]
        last = call_events(response_id, ("read", READ))[-1]
        last["type"] = "response.incomplete"
        last["response"]["status"] = "incomplete"
        last["response"]["incomplete_details"] = {"reason": "max_output_tokens"}
        return [*events, last]

    for kind in ("error", "incomplete"):

        async def script(socket: UpstreamSocket, message: dict[str, Any], kind: str = kind) -> None:
            await send_all(socket, ending("resp_1", kind))

        records: list[ProxyRecord] = []
        async with relayed(script, records) as (_upstream, client):
            got = await client.response(create())
        assert got.types.count("error") == 1
        _status, code, text = refusal_of(got.messages[-1])
        assert "lockgate" in code
        assert "withheld 1 tool call" in text
        assert not any(
            m.get("type") == "response.output_item.done" and m["item"]["type"] == "function_call"
            for m in got.messages
        )
        assert [r.outcome for r in records if r.method == "WS"] == ["withheld"]


@pytest.mark.parametrize(
    ("second", "expected"),
    [(("read", {"nope": 1}), "invalid_batch"), (("rm_rf", {"path": "/"}), "invalid_batch")],
)
async def test_an_invalid_or_unknown_second_call_withholds_the_batch(
    second: tuple[str, dict[str, Any]], expected: str
) -> None:
    events = call_events("resp_1", ("read", READ), second)

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, events)

    records: list[ProxyRecord] = []
    async with relayed(script, records) as (_upstream, client):
        got = await client.response(create())
        closed = await client.closed()
    status, code, text = refusal_of(got.messages[-1])
    assert (status, code) == (400, f"lockgate_{expected}")  # not transient: no retry
    assert "withheld 2 tool calls" in text
    assert not any(
        m.get("type") == "response.output_item.done" and m["item"]["type"] == "function_call"
        for m in got.messages
    )
    assert closed == 1011


async def test_a_grammar_invalid_exec_call_is_withheld() -> None:
    request = create(EXEC_TOOL)
    good = call_events("resp_1", ("exec", "await tools.exec_command({cmd: 'ls'})"), custom=True)
    bad = call_events("resp_2", ("exec", ""), custom=True)
    scripts = iter([good, bad])

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, next(scripts))

    records: list[ProxyRecord] = []
    async with relayed(script, records) as (_upstream, client):
        accepted = await client.response(request)
        refused = await client.response(create(EXEC_TOOL, previous="resp_1"))
    assert accepted.types[-1] == "response.completed"
    assert any(item["type"] == "custom_tool_call" for item in accepted.calls)
    _, code, _ = refusal_of(refused.messages[-1])
    assert code == "lockgate_invalid_batch"
    assert not any(
        m.get("type") == "response.output_item.done" and m["item"]["type"] == "custom_tool_call"
        for m in refused.messages
    )


async def test_sequential_responses_share_one_upstream_socket_and_previous_response_id() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        number = sum(1 for m in socket.received if m["type"] == "response.create")
        if number == 1:
            await send_all(socket, call_events("resp_1", ("read", READ)))
        else:
            await send_all(socket, text_events(f"resp_{number}"))

    records: list[ProxyRecord] = []
    async with relayed(script, records) as (upstream, client):
        first = await client.response(create())
        await client.send({"type": "response.processed", "response_id": "resp_1"})
        second = await client.response(create(previous="resp_1"))
        third = await client.response(create(previous="resp_2"))
    assert [first.types[-1], second.types[-1], third.types[-1]] == ["response.completed"] * 3
    [socket] = upstream.sockets  # one upstream socket for the client's one
    types = [m["type"] for m in socket.received]
    assert types == ["response.create", "response.processed", "response.create", "response.create"]
    assert socket.received[1] == {"type": "response.processed", "response_id": "resp_1"}
    assert [m.get("previous_response_id") for m in socket.received[2:]] == ["resp_1", "resp_2"]
    outcomes = [(r.method, r.outcome) for r in records]
    assert outcomes == [("WS", "passed")] * 3  # one flow per response, none for the socket


async def test_refuse_mode_keeps_the_426() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        raise AssertionError("never reached")

    records: list[ProxyRecord] = []
    async with (
        ws_upstream(script) as upstream,
        serving_to(upstream.url, records, websocket="refuse") as proxy,
        aiohttp.ClientSession() as session,
    ):
        with pytest.raises(aiohttp.WSServerHandshakeError) as raised:
            await session.ws_connect(proxy.url + "/v1/responses")
    assert raised.value.status == 426
    assert upstream.sockets == []
    assert [r.outcome for r in records] == ["rejected"]


async def test_an_upstream_without_websocket_gets_the_client_a_426() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        raise AssertionError("never reached")

    records: list[ProxyRecord] = []
    async with (
        ws_upstream(script, refuse=404) as upstream,
        serving_to(upstream.url, records) as proxy,
        aiohttp.ClientSession() as session,
    ):
        with pytest.raises(aiohttp.WSServerHandshakeError) as raised:
            await session.ws_connect(proxy.url + "/v1/responses")
    assert raised.value.status == 426  # Codex then falls back to HTTP


async def test_the_held_key_replaces_the_clients_and_the_token_never_goes_upstream() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, text_events("resp_1", f"echo {HELD_KEY}"))

    records: list[ProxyRecord] = []
    async with (
        ws_upstream(
            script, response_headers={"x-codex-turn-state": "ts-1", "openai-model": "lab-model"}
        ) as upstream,
        serving_to(upstream.url, records, api_key=HELD_KEY, client_token=TOKEN) as proxy,
    ):
        url = proxy.url + "/v1/responses"
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.WSServerHandshakeError) as raised:
                await session.ws_connect(url, headers={"authorization": f"Bearer {CLIENT_KEY}"})
            assert raised.value.status == 401
            headers = {
                "authorization": f"Bearer {TOKEN}",
                "openai-beta": "responses_websockets=2026-02-06",
                "session_id": "sess-1",
            }
            async with session.ws_connect(url, headers=headers) as ws:
                handshake = dict(ws._response.headers)
                await ws.send_str(json.dumps(create()))
                got = await ws.receive(timeout=5)
                texts = [got.data]
                while json.loads(texts[-1])["type"] != "response.completed":
                    texts.append((await ws.receive(timeout=5)).data)
    [socket] = upstream.sockets
    sent = json.dumps(socket.headers)
    assert socket.headers["Authorization"] == f"Bearer {HELD_KEY}"
    assert TOKEN not in sent
    assert CLIENT_KEY not in sent
    assert socket.headers["openai-beta"] == "responses_websockets=2026-02-06"
    assert socket.headers["session_id"] == "sess-1"
    assert handshake.get("x-codex-turn-state") == "ts-1"
    assert handshake.get("openai-model") == "lab-model"
    assert HELD_KEY not in "".join(texts)  # echoed, redacted
    assert HELD_KEY not in repr(records)
    assert TOKEN not in repr(records)


async def test_an_oversize_upstream_message_is_refused() -> None:
    limit = 4096
    events = text_events("resp_1")
    events[2]["delta"] = "x" * (limit * 2)

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, events)

    records: list[ProxyRecord] = []
    options = gating(idle_timeout=2.0, max_event_bytes=limit)
    async with relayed(script, records, gating=options) as (_upstream, client):
        got = await client.response(create())
    _, code, text = refusal_of(got.messages[-1])
    assert code == "lockgate_bound_exceeded"
    assert str(limit) in text
    assert limit < DEFAULT_MAX_EVENT_BYTES


async def test_the_connection_limit_error_passes_as_it_came() -> None:
    limit = {
        "type": "error",
        "status": 400,
        "error": {
            "type": "invalid_request_error",
            "code": "websocket_connection_limit_reached",
            "message": "Responses websocket connection limit reached (60 minutes).",
        },
    }

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, [limit])

    records: list[ProxyRecord] = []
    async with relayed(script, records) as (_upstream, client):
        got = await client.response(create())
    assert got.messages == [limit]
    assert [(r.method, r.outcome, r.withheld) for r in records] == [("WS", "forwarded", 0)]


async def test_a_malformed_create_is_refused_and_never_sent_upstream() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        raise AssertionError("never reached")

    records: list[ProxyRecord] = []
    async with relayed(script, records) as (upstream, client):
        await client.ws.send_str('{"type": "response.create", "input": [')
        got = await client.read()
    status, code, _ = refusal_of(got.messages[-1])
    assert (status, code) == (400, "lockgate_malformed_request")
    assert all(m["type"] != "response.create" for s in upstream.sockets for m in s.received)


async def test_each_relayed_response_is_one_request_trace_continuing_the_clients_context() -> None:
    from .test_tracing_seam import Recording

    tracing = Recording()
    events = call_events("resp_1", ("read", READ))

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, events)

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    records: list[ProxyRecord] = []
    async with (
        ws_upstream(script) as upstream,
        serving(
            ProxyConfig(upstream.url, gating=gating(idle_timeout=2.0, deadline=20.0)),
            records.append,
            tracing=tracing,
        ) as proxy,
        connect(proxy.url + "/v1/responses", {"traceparent": parent}) as client,
    ):
        await client.response(create())
        await client.response(create(previous="resp_1"))
    assert len(tracing.requests) == 2  # one per response, none for the socket itself
    for request in tracing.requests:
        assert request.client_headers.get("traceparent") == parent
        assert (request.summary.protocol, request.summary.outcome) == ("responses", "passed")
        assert request.summary.released_calls == 1


async def test_an_upgrade_on_a_path_no_gateway_serves_is_never_relayed() -> None:
    # Not a gated path: it goes on as any other request (its hop-by-hop headers dropped),
    # never a 101 with a socket the relay cannot gate.
    from aiohttp import web

    from .test_server import serve_app

    seen: list[dict[str, str]] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        return web.json_response({"object": "list", "data": []})

    records: list[ProxyRecord] = []
    async with (
        serve_app(answer) as upstream,
        serving_to(upstream, records) as proxy,
        aiohttp.ClientSession() as session,
    ):
        with pytest.raises(aiohttp.WSServerHandshakeError) as raised:
            await session.ws_connect(proxy.url + "/v1/realtime")
        await asyncio.sleep(0.1)
    assert raised.value.status == 200  # the upstream's answer, not a relayed socket
    [headers] = seen
    assert "upgrade" not in {name.lower() for name in headers}
    [record] = records
    assert (record.method, record.path, record.outcome) == ("GET", "/v1/realtime", "forwarded")
