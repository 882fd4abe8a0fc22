"""What the proxy's capacity allows and how it lets go: a request over the size cap (413),
streams beyond `max_streams` (503 with retry-after), a request body that never arrives, one
held-bytes budget shared by every stream; a client that leaves; stopping, which lets a
stream in flight end, refuses new requests and answers readiness with 503 while it drains.
Real sockets on loopback."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from lockgate.lab.server import serve_script
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.scripted.reply import Reply, Say
from lockgate.scripted.script import Faults, Turn

from .support import ends_with_refusal, request_for, tool_events, turn_bytes
from .test_server import (
    ACCEPTED,
    PATHS,
    STALLED,
    first_bytes,
    gating,
    origin,
    own_upstream,
    post,
    proxy_to,
    scripted,
    serve_app,
    wait_for,
)


async def test_a_request_over_the_size_cap_is_413() -> None:
    async with own_upstream() as (base, seen), proxy_to(base, max_request_bytes=4096) as proxied:
        status, _, body = await post(
            proxied.proxy.url + PATHS["chat"], {"model": "m", "pad": "x" * 8192}
        )
    assert status == 413
    assert "larger than 4096 bytes" in json.loads(body)["error"]["message"]
    assert seen == []
    assert [(r.outcome, r.status) for r in proxied.records] == [("rejected", 413)]


async def test_beyond_max_streams_a_request_is_503_with_retry_after() -> None:
    async with (
        scripted("chat", [STALLED], max_streams=1) as (server, proxied),
        aiohttp.ClientSession() as session,
    ):
        url = proxied.proxy.url + PATHS["chat"]
        async with session.post(url, json=request_for("chat")) as held:
            assert await first_bytes(held)
            status, headers, _ = await post(url, request_for("chat"))
            assert status == 503
            assert headers["retry-after"] == "1"
        await wait_for(lambda: proxied.proxy.active == 0, "the held stream ended")
        await wait_for(lambda: server.requests[0].client_closed_early, "upstream closed")
    assert len(server.requests) == 1
    assert [r.outcome for r in proxied.records] == ["rejected", "abandoned"]


async def test_a_request_body_that_never_arrives_frees_its_slot() -> None:
    async with (
        own_upstream() as (base, seen),
        proxy_to(base, gating=gating(idle_timeout=0.5), max_streams=1) as proxied,
    ):
        host, port = proxied.proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"
        )
        await writer.drain()
        answer = await reader.read(4096)
        writer.close()
        # The slot is free again: the next request is served (the upstream's own 400).
        status, _, _ = await post(proxied.proxy.url + PATHS["chat"], request_for("chat"))
    assert answer.startswith(b"HTTP/1.1 408")
    assert status == 400
    assert len(seen) == 1


async def test_every_stream_shares_one_held_bytes_budget() -> None:
    # The first stream holds its calls and never ends; the second, alone within the
    # budget, would take the two beyond it: refused (transient), and the first goes on.
    hanging = Turn(reply=ACCEPTED.reply, faults=Faults(end="hang"))
    budget = int(len(turn_bytes(ACCEPTED, "chat")) * 1.1)
    async with (
        scripted("chat", [hanging, ACCEPTED], max_held_bytes=budget) as (server, proxied),
        aiohttp.ClientSession() as session,
    ):
        url = proxied.proxy.url + PATHS["chat"]
        async with session.post(url, json=request_for("chat")) as held:
            assert await first_bytes(held)
            await wait_for(lambda: len(server.requests) == 1, "the first stream opened")
            status, _, body = await post(url, request_for("chat"))
            assert status == 200
            assert ends_with_refusal(body, "chat")
            error = json.loads(body.rsplit(b"data: ", 1)[1])["error"]
            assert error["type"] == "server_error"  # transient: a new request may find room
            assert "the proxy holds" in error["message"]
            assert tool_events(body) == []
        await wait_for(lambda: len(proxied.records) == 2, "both requests were recorded")
    assert sorted(record.outcome for record in proxied.records) == ["abandoned", "withheld"]


async def test_a_client_that_leaves_closes_the_upstream_stream() -> None:
    async with scripted("responses", [STALLED]) as (server, proxied):
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                proxied.proxy.url + PATHS["responses"], json=request_for("responses")
            ) as response,
        ):
            assert await first_bytes(response)
        await wait_for(lambda: server.requests[0].client_closed_early, "upstream closed")
        await wait_for(lambda: proxied.records, "the request was recorded")
    assert proxied.records[0].outcome == "abandoned"


async def test_stop_lets_a_stream_in_flight_end_and_refuses_new_requests() -> None:
    slow = Turn(reply=ACCEPTED.reply, faults=Faults(stall_after=1, stall_seconds=0.5))
    async with (
        serve_script([slow], provider="chat") as server,
        aiohttp.ClientSession() as session,
    ):
        records: list[ProxyRecord] = []
        config = ProxyConfig(origin(server), gating=gating(), grace_seconds=30)
        async with serving(config, records.append) as proxy:
            async with session.post(proxy.url + PATHS["chat"], json=request_for("chat")) as held:
                start = await first_bytes(held)
                stopping = asyncio.ensure_future(proxy.stop())
                rest = await held.read()
            await stopping
            with pytest.raises(aiohttp.ClientConnectionError):
                await post(proxy.url + PATHS["chat"], request_for("chat"))
    assert start + rest == turn_bytes(slow, "chat")
    assert [r.outcome for r in records] == ["passed"]


async def test_while_it_drains_readiness_is_503_on_a_new_connection() -> None:
    # Issue 27: the listening socket closed before the drain, so a load balancer's check
    # never read the 503 the drain promises (only a refused connection).
    text = Turn(reply=Reply("r1", (Say("All fixed."),)))
    frames = turn_bytes(text, "chat")
    cut = frames.index(b"\n\n") + 2
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(frames[:cut])
        await release.wait()
        await response.write(frames[cut:])
        await response.write_eof()
        return response

    records: list[ProxyRecord] = []
    async with serve_app(answer) as upstream, aiohttp.ClientSession() as session:
        config = ProxyConfig(upstream, gating=gating(), grace_seconds=30)
        async with serving(config, records.append) as proxy:
            async with session.post(proxy.url + PATHS["chat"], json=request_for("chat")) as held:
                start = await first_bytes(held)
                stopping = asyncio.ensure_future(proxy.stop())
                await wait_for(lambda: proxy.server.stopping, "the drain to begin")
                async with aiohttp.ClientSession() as other:  # a new connection
                    async with other.get(proxy.url + "/readyz") as ready:
                        ready_status = ready.status
                        ready_retry = ready.headers.get("retry-after")
                    async with other.get(proxy.url + "/healthz") as health:
                        health_status = health.status
                    async with other.post(
                        proxy.url + PATHS["chat"], json=request_for("chat")
                    ) as refused:
                        refused_status = refused.status
                        refused_connection = refused.headers.get("connection", "")
                release.set()
                rest = await held.read()
            await stopping
            with pytest.raises(aiohttp.ClientConnectionError):
                await post(proxy.url + "/readyz", {})
    assert (ready_status, ready_retry) == (503, "1")
    assert health_status == 200  # alive, not ready
    assert refused_status == 503
    assert refused_connection.lower() == "close"
    assert start + rest == frames  # the stream in flight ended whole
    assert sorted(r.outcome for r in records) == ["passed", "rejected"]
