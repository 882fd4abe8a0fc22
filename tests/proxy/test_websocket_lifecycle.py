"""A relayed WebSocket's life (issue 30): the proxy stopping closes an idle socket at once
(1001) and one with a response in flight after that response; a client that never answers
a ping is closed; `/metrics` counts each response with its route. Loopback only."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving

from .test_server import gating
from .test_websocket_support import (
    UpstreamSocket,
    call_events,
    connect,
    create,
    send_all,
    text_events,
    ws_upstream,
)

READ = {"path": "calculator.py"}


async def test_stopping_closes_an_idle_socket_and_lets_a_response_in_flight_end() -> None:
    release = asyncio.Event()

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        events = call_events("resp_1", ("read", READ))
        await send_all(socket, events[:4])
        await release.wait()
        await send_all(socket, events[4:])

    records: list[ProxyRecord] = []
    async with ws_upstream(script) as upstream:
        config = ProxyConfig(upstream.url, gating=gating(idle_timeout=5.0), grace_seconds=5.0)
        async with (
            serving(config, records.append) as proxy,
            connect(proxy.url + "/v1/responses") as idle,
            connect(proxy.url + "/v1/responses") as busy,
        ):
            await busy.send(create())
            first = await busy.ws.receive(timeout=5)
            assert first.type is aiohttp.WSMsgType.TEXT
            stopping = asyncio.create_task(proxy.stop())
            assert await idle.closed(within=5) == 1001  # idle: closed at once
            release.set()
            rest = await busy.read()
            assert rest.types[-1] == "response.completed"  # in flight: it ended
            assert await busy.closed(within=5) == 1001
            await stopping
    assert [(r.method, r.outcome) for r in records] == [("WS", "passed")]


async def test_a_client_that_never_answers_a_ping_is_closed() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, text_events("resp_1"))

    async with ws_upstream(script) as upstream:
        config = ProxyConfig(upstream.url, gating=gating(keepalive_interval=0.4))
        async with (
            serving(config) as proxy,
            aiohttp.ClientSession() as session,
            session.ws_connect(proxy.url + "/v1/responses", autoping=False) as ws,
        ):
            got = await ws.receive(timeout=5)
            assert got.type is aiohttp.WSMsgType.PING  # the proxy's heartbeat
            closed = await ws.receive(timeout=5)  # no pong: the proxy closes
            assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_metrics_count_each_response_with_its_route() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, text_events(f"resp_{len(socket.received)}"))

    async with (
        ws_upstream(script) as upstream,
        serving(ProxyConfig(upstream.url, gating=gating())) as proxy,
    ):
        async with connect(proxy.url + "/v1/responses") as client:
            for _ in range(2):
                got = await client.response(create())
                assert got.types[-1] == "response.completed"
        async with (
            aiohttp.ClientSession() as session,
            session.get(proxy.url + "/metrics") as response,
        ):
            page = await response.text()
    lines = [line for line in page.splitlines() if line.startswith("lockgate_proxy_requests_total")]
    passed = [line for line in lines if 'outcome="passed"' in line]
    assert passed, lines
    assert 'route="default"' in passed[0]
    assert 'protocol="responses"' in passed[0]
    assert passed[0].endswith(" 2.0")


async def test_an_upstream_that_closes_between_responses_closes_the_clients_socket() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, text_events("resp_1"))
        assert socket.ws is not None
        await socket.ws.close(code=1000)

    records: list[ProxyRecord] = []
    async with (
        ws_upstream(script) as upstream,
        serving(ProxyConfig(upstream.url, gating=gating()), records.append) as proxy,
        connect(proxy.url + "/v1/responses") as client,
    ):
        got = await client.response(create())
        assert got.types[-1] == "response.completed"
        assert await client.closed(within=5) == 1011
    assert [(r.method, r.outcome) for r in records] == [("WS", "passed")]


async def test_a_client_that_leaves_mid_response_abandons_it_and_the_upstream_socket() -> None:
    left = asyncio.Event()
    upstream_closed = asyncio.Event()

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, call_events("resp_1", ("read", READ))[:5])
        await left.wait()
        assert socket.ws is not None
        await socket.ws.receive()  # the proxy's close
        upstream_closed.set()

    records: list[ProxyRecord] = []
    async with (
        ws_upstream(script) as upstream,
        serving(ProxyConfig(upstream.url, gating=gating()), records.append) as proxy,
    ):
        async with connect(proxy.url + "/v1/responses") as client:
            await client.send(create())
            await client.ws.receive(timeout=5)
        left.set()
        await asyncio.wait_for(upstream_closed.wait(), 5)
        for _ in range(50):
            if records:
                break
            await asyncio.sleep(0.05)
    assert [(r.method, r.outcome) for r in records] == [("WS", "abandoned")]


async def test_an_upstream_that_never_answers_a_ping_is_refused_as_transport() -> None:
    events = call_events("resp_1", ("read", READ))
    started = next(
        number
        for number, event in enumerate(events)
        if event.get("item", {}).get("type") == "function_call"
    )

    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, events[: started + 2])  # the call began
        await asyncio.sleep(30)  # not reading: aiohttp answers a ping only when read

    records: list[ProxyRecord] = []
    options = gating(idle_timeout=10.0, keepalive_interval=0.4)
    async with (
        ws_upstream(script) as upstream,
        serving(ProxyConfig(upstream.url, gating=options), records.append) as proxy,
        connect(proxy.url + "/v1/responses") as client,
    ):
        got = await client.response(create(), within=5)
    last = got.messages[-1]
    assert (last["type"], last["status"], last["error"]["code"]) == (
        "error",
        503,
        "lockgate_transport",
    )
    assert "PONG" in last["error"]["message"]
    assert [(r.method, r.outcome) for r in records] == [("WS", "withheld")]
