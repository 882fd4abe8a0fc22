"""The proxy on the paths the agents people run take beyond the three OpenAI/Anthropic routes
(issue 23): Gemini native (google-genai, Gemini CLI) on the Gemini API's paths, its key in
`x-goog-api-key` or the `key` query parameter; Anthropic Messages on Vertex AI (Claude Code
with `CLAUDE_CODE_USE_VERTEX`); a WebSocket upgrade on a gated path (Codex tries one first);
a tool schema the gate cannot use, said once."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from lockgate.providers import provider as registry_entry
from lockgate.providers.gemini.render import ChunkBuilder
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.scripted.reply import LAB_MODEL, Call, Reply, Say

from ..helpers import EDIT
from .test_server import gating, serve_app

HELD = "gm-held-PROXY-SECRET-5a6b7c8d"
CLIENT = "gm-client-OWN-KEY-1234"
TOKEN = "lockgate-client-TOKEN-9911"
EDIT_DECLARATION = {
    "name": "edit",
    "description": "Replace text in a file",
    "parameters": {
        "type": "OBJECT",
        "properties": {
            "path": {"type": "STRING"},
            "old": {"type": "STRING"},
            "new": {"type": "STRING", "nullable": True},
        },
        "required": ["path", "old", "new"],
    },
}


def gemini_request() -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": "fix it"}]}],
        "tools": [{"functionDeclarations": [EDIT_DECLARATION]}],
    }


def gemini_stream(*, cut: bool = False) -> bytes:
    builder = ChunkBuilder("resp-proxy").text("Fixing.", 2).call("edit", EDIT, "fc_1")
    if not cut:
        builder.finish()
    turn = builder.turn()
    renderer = registry_entry("gemini").render()
    assert turn.events is not None
    return b"".join(renderer.frame(event) for event in turn.events)


@contextlib.asynccontextmanager
async def recording_upstream(
    body: bytes, content_type: str = "text/event-stream"
) -> AsyncIterator[tuple[str, list[web.Request], list[bytes]]]:
    """An upstream answering every request with `body`; the requests and their bodies."""
    requests: list[web.Request] = []
    bodies: list[bytes] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        requests.append(request)
        bodies.append(await request.read())
        return web.Response(body=body, content_type=content_type)

    async with serve_app(answer) as url:
        yield url, requests, bodies


@contextlib.asynccontextmanager
async def proxy(upstream: str, **config: Any) -> AsyncIterator[tuple[str, list[ProxyRecord]]]:
    records: list[ProxyRecord] = []
    config.setdefault("gating", gating())
    async with serving(ProxyConfig(upstream, **config), records.append) as running:
        yield running.url, records


async def post(url: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers or {}) as response,
    ):
        return response.status, await response.read()


PATH = f"/v1beta/models/{LAB_MODEL}:streamGenerateContent"


# --- Gemini native -------------------------------------------------------------------------


async def test_a_gemini_stream_is_gated_and_a_complete_one_passes() -> None:
    async with (
        recording_upstream(gemini_stream()) as (upstream, seen, _),
        proxy(upstream) as (
            url,
            records,
        ),
    ):
        status, body = await post(url + PATH + "?alt=sse", gemini_request())
    assert status == 200
    assert b'"functionCall"' in body
    assert [(record.protocol, record.outcome) for record in records] == [("gemini", "passed")]
    assert seen[0].query_string == "alt=sse"


async def test_a_cut_gemini_stream_releases_no_call_and_ends_with_googles_error() -> None:
    async with (
        recording_upstream(gemini_stream(cut=True)) as (upstream, _, _),
        proxy(upstream) as (url, records),
    ):
        status, body = await post(url + PATH + "?alt=sse", gemini_request())
    assert status == 200
    assert b"functionCall" not in body
    last = body.rstrip(b"\r\n").rsplit(b"data: ", 1)[1]
    error = json.loads(last)["error"]
    assert (error["code"], error["status"]) == (503, "UNAVAILABLE")  # a cut: transient
    assert error["message"].startswith("lockgate withheld 1 tool call: stream_ended: ")
    assert [record.outcome for record in records] == ["withheld"]


async def test_a_gemini_stream_without_alt_sse_is_refused_before_the_upstream() -> None:
    async with (
        recording_upstream(gemini_stream()) as (upstream, seen, _),
        proxy(upstream) as (
            url,
            records,
        ),
    ):
        status, body = await post(url + PATH, gemini_request())
    assert status == 400
    error = json.loads(body)["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert "alt=sse" in error["message"]
    assert seen == []
    assert [record.outcome for record in records] == ["rejected"]


async def test_a_held_key_goes_in_googles_header_and_the_clients_key_never_upstream() -> None:
    async with (
        recording_upstream(gemini_stream()) as (upstream, seen, _),
        proxy(upstream, api_key=HELD, client_token=TOKEN) as (url, records),
    ):
        status, _ = await post(
            url + PATH + f"?alt=sse&key={TOKEN}", gemini_request(), {"x-goog-api-key": TOKEN}
        )
    assert status == 200
    [request] = seen
    assert request.headers["x-goog-api-key"] == HELD
    assert "authorization" not in request.headers
    assert request.query_string == "alt=sse"  # the client's `key=` stays with the proxy
    assert TOKEN not in repr(records)
    assert HELD not in repr(records)


async def test_the_clients_own_key_goes_upstream_as_it_came_without_a_held_key() -> None:
    async with (
        recording_upstream(gemini_stream()) as (upstream, seen, _),
        proxy(upstream) as (
            url,
            records,
        ),
    ):
        status, _ = await post(url + PATH + f"?alt=sse&key={CLIENT}", gemini_request())
    assert status == 200
    assert seen[0].query["key"] == CLIENT
    assert all(CLIENT not in record.path for record in records)  # logged without its query


async def test_google_genai_reads_a_gated_stream_and_raises_on_a_refused_one() -> None:
    from google import genai
    from google.genai import errors, types

    config = types.GenerateContentConfig(
        tools=[
            types.Tool(
                function_declarations=[types.FunctionDeclaration.model_validate(EDIT_DECLARATION)]
            )
        ]
    )
    for cut in (False, True):
        async with (
            recording_upstream(gemini_stream(cut=cut)) as (upstream, _, _),
            proxy(upstream) as (url, _),
        ):
            client = genai.Client(
                api_key=CLIENT,
                http_options=types.HttpOptions(base_url=url, api_version="v1beta"),
            )
            try:
                stream = await client.aio.models.generate_content_stream(
                    model=LAB_MODEL, contents="fix it", config=config
                )
                if cut:
                    with pytest.raises(errors.ServerError) as raised:
                        _ = [piece async for piece in stream]
                    assert "lockgate withheld 1 tool call" in str(raised.value)
                else:
                    pieces = [piece async for piece in stream]
                    calls = [call.name for piece in pieces for call in piece.function_calls or []]
                    assert calls == ["edit"]
            finally:
                await client.aio.aclose()


# --- Anthropic Messages on Vertex AI ---------------------------------------------------------


def anthropic_stream(*, cut: bool) -> bytes:
    renderer = registry_entry("anthropic").render()
    reply = Reply("msg_vertex", (Say("Fixing."), Call("toolu_1", "edit", EDIT, 3, cut=cut)))
    events = renderer.events(reply)
    if cut:
        events = [event for event in events if event.get("type") != "message_stop"]
    return b"".join(renderer.frame(event) for event in events)


VERTEX = "/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-x"


async def test_messages_on_vertex_are_gated() -> None:
    request = {
        "anthropic_version": "vertex-2023-10-16",
        "stream": True,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "fix it"}],
        "tools": [{"name": "edit", "input_schema": {"type": "object"}}],
    }
    async with (
        recording_upstream(anthropic_stream(cut=True)) as (upstream, _, _),
        proxy(upstream) as (url, records),
    ):
        status, body = await post(url + VERTEX + ":streamRawPredict", request)
    assert status == 200
    assert b"tool_use" not in body
    assert b"event: error" in body
    assert [(record.protocol, record.outcome) for record in records] == [("anthropic", "withheld")]


async def test_vertexs_token_count_is_no_messages_request() -> None:
    count = b'{"input_tokens": 12}'
    async with (
        recording_upstream(count, "application/json") as (upstream, seen, _),
        proxy(upstream) as (url, records),
    ):
        path = "/v1/projects/p1/locations/us-east5/publishers/anthropic/models/count-tokens"
        status, body = await post(url + path + ":rawPredict", {"messages": []})
    assert (status, body) == (200, count)
    assert [(record.protocol, record.outcome) for record in records] == [(None, "forwarded")]
    assert len(seen) == 1


# --- a WebSocket, and schemas -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["relay", "refuse"])
async def test_a_websocket_upgrade_on_a_gated_path_is_426_and_never_passed_on(mode: str) -> None:
    """`websocket: refuse` answers 426 itself; the relay (the default) asks the upstream for
    a socket of its own first, and an upstream that serves none (this one answers 200)
    gets the client a 426 too: never an ungated socket."""
    async with (
        recording_upstream(b"{}", "application/json") as (upstream, seen, _),
        proxy(upstream, websocket=mode) as (url, records),
        aiohttp.ClientSession() as session,
        session.get(
            url + "/v1/responses",
            headers={
                "connection": "Upgrade",
                "upgrade": "websocket",
                "sec-websocket-version": "13",
                "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        ) as response,
    ):
        status, body = response.status, await response.read()
    assert status == 426
    assert "WebSocket" in json.loads(body)["error"]["message"]
    if mode == "refuse":
        assert seen == []
        assert [record.outcome for record in records] == ["rejected"]
    else:  # the relay's own handshake, answered 200: no socket opened
        assert [(request.method, request.headers.get("upgrade")) for request in seen] == [
            ("GET", "websocket")
        ]
        assert [record.outcome for record in records] == ["forwarded"]


async def test_a_schema_the_gate_cannot_use_is_said_once_and_checks_a_json_object() -> None:
    said: list[str] = []
    declaration = {
        **EDIT_DECLARATION,
        "parametersJsonSchema": {"type": "object", "properties": {"x": {"type": 7}}},
    }
    request = {**gemini_request(), "tools": [{"functionDeclarations": [declaration]}]}
    async with (
        recording_upstream(gemini_stream()) as (upstream, _, _),
        serving(ProxyConfig(upstream, gating=gating()), warn=said.append) as running,
    ):
        for _ in range(2):
            status, body = await post(running.url + PATH + "?alt=sse", request)
            assert status == 200
            assert b'"functionCall"' in body  # checked as a JSON object only: released
    assert len(said) == 1
    assert said[0].startswith("lockgate proxy: the schema of tool 'edit' is not one the gate")
