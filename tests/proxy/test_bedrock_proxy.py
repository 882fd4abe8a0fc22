"""Bedrock ConverseStream through the proxy, read by boto3's real client: the gateway
(`providers/bedrock/gateway.py`) and the event-stream framing (`proxy/framing/eventstream.py`),
a lab upstream speaking Bedrock on loopback. A complete tool-call response reaches boto3
whole; an invalid, cut or failed one ends in an `exception` message boto3 raises on, with
no `toolUse` of it read before; botocore alone ends a cut stream cleanly (the contrast)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import boto3  # type: ignore[import-untyped]
import botocore.config  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    EventStreamError,
)

from lockgate.eventstream import MEDIA_TYPE, encode_message
from lockgate.lab.server import ScriptedServer, serve_script
from lockgate.providers.bedrock.framing import message_headers
from lockgate.providers.bedrock.gateway import GATEWAY
from lockgate.providers.bedrock.scenarios import SCENARIOS
from lockgate.providers.bedrock.server_render import RENDERER
from lockgate.proxy.framing import framing_for
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.scripted.reply import Call
from lockgate.scripted.script import Turn

from .support import request_for
from .test_server import ACCEPTED, INVALID_SECOND, READ, call_reply, gating, origin
from .test_server_protocols import recording_upstream

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"  # boto3 sends its `:` as `%3A`
HELD = "bedrock-api-key-HELD-1f2e3d"
TOKEN = "lockgate-client-TOKEN-7a6b5c"


def scenario_turns(name: str) -> list[Turn]:
    [scenario] = [each for each in SCENARIOS if each.name == name]
    return list(scenario.turns())


def client(url: str) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        # One attempt: botocore's `max_attempts` counts retries (1 = two requests).
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )


def converse_kwargs() -> dict[str, Any]:
    request = request_for("bedrock")
    return {key: value for key, value in request.items() if key != "model"}


def read_stream(url: str, into: list[dict[str, Any]]) -> None:
    """`converse_stream` through boto3, each event appended to `into` as it is read (an
    error raised by the iteration leaves what was read before it there)."""
    answer = client(url).converse_stream(modelId=MODEL, **converse_kwargs())
    for event in answer["stream"]:
        into.append(event)


def tool_uses(events: list[dict[str, Any]]) -> list[str]:
    return [
        event["contentBlockStart"]["start"]["toolUse"]["name"]
        for event in events
        if "toolUse" in event.get("contentBlockStart", {}).get("start", {})
    ]


@contextlib.asynccontextmanager
async def proxied(
    turns: list[Turn], **config: Any
) -> AsyncIterator[tuple[str, ScriptedServer, list[ProxyRecord]]]:
    records: list[ProxyRecord] = []
    config.setdefault("gating", gating())
    async with (
        serve_script(turns, provider="bedrock") as server,
        serving(ProxyConfig(origin(server), **config), records.append) as running,
    ):
        yield running.url, server, records


async def test_a_complete_tool_call_response_reaches_boto3_whole() -> None:
    events: list[dict[str, Any]] = []
    async with proxied([ACCEPTED]) as (url, _server, records):
        await asyncio.to_thread(read_stream, url, events)
    assert tool_uses(events) == ["read", "edit"]
    stops = [event["messageStop"]["stopReason"] for event in events if "messageStop" in event]
    assert stops == ["tool_use"]
    assert "metadata" in events[-1]
    [record] = records
    assert record.outcome == "passed"


# The second call names no declared tool, or breaks its tool's `inputSchema.json`.
AGAINST_SCHEMA = call_reply(Call("call_1", "read", READ), Call("call_2", "edit", {"path": 1}))


@pytest.mark.parametrize("turn", [INVALID_SECOND, AGAINST_SCHEMA], ids=["unknown", "schema"])
async def test_an_invalid_second_call_raises_in_boto3_before_any_tool_use(turn: Turn) -> None:
    events: list[dict[str, Any]] = []
    async with proxied([turn]) as (url, _, records):
        with pytest.raises(EventStreamError) as raised:
            await asyncio.to_thread(read_stream, url, events)
    error = raised.value.response["Error"]
    assert error["Code"] == "modelStreamErrorException"
    assert "lockgate withheld 2 tool calls" in error["Message"]
    assert tool_uses(events) == []
    assert not any("messageStop" in event for event in events)
    assert records[0].outcome in ("refused", "withheld")


@pytest.mark.parametrize(
    "name", ["bedrock-cut-in-prelude", "bedrock-cut-in-headers", "bedrock-cut-in-payload"]
)
async def test_a_cut_final_message_raises_in_boto3_where_botocore_alone_ends_cleanly(
    name: str,
) -> None:
    direct: list[dict[str, Any]] = []
    async with serve_script(scenario_turns(name), provider="bedrock") as server:
        await asyncio.to_thread(read_stream, origin(server), direct)
    # botocore alone: the cut message is dropped and the stream ends as if complete, the
    # call read (the failure lockgate exists to catch).
    assert tool_uses(direct) == ["edit"]
    assert not any("messageStop" in event for event in direct)

    events: list[dict[str, Any]] = []
    async with proxied(scenario_turns(name)) as (url, _, records):
        with pytest.raises(EventStreamError) as raised:
            await asyncio.to_thread(read_stream, url, events)
    assert raised.value.response["Error"]["Code"] == "serviceUnavailableException"
    assert "stream_ended" in raised.value.response["Error"]["Message"]
    assert tool_uses(events) == []
    assert records[0].outcome in ("refused", "withheld")


async def test_an_exception_mid_stream_raises_in_boto3_before_any_tool_use() -> None:
    events: list[dict[str, Any]] = []
    turns = scenario_turns("bedrock-exception-modelstreamerror")
    async with proxied(turns) as (url, _, records):
        with pytest.raises(EventStreamError) as raised:
            await asyncio.to_thread(read_stream, url, events)
    assert "modelStreamErrorException" in raised.value.response["Error"]["Message"]
    assert tool_uses(events) == []
    assert records[0].outcome in ("refused", "withheld")


def with_token(bedrock: Any, token: str) -> Any:
    """A client that shows the proxy `token` in `x-lockgate-token` (botocore sends a bearer
    token only over HTTPS, so the SigV4-signing client carries the token beside its own
    `Authorization`, which the held key replaces)."""

    def add(request: Any, **_: Any) -> None:
        request.headers["x-lockgate-token"] = token

    bedrock.meta.events.register("before-sign.bedrock-runtime.*", add)
    return bedrock


def read_with_token(url: str, token: str, into: list[dict[str, Any]]) -> None:
    bedrock = with_token(client(url), token)
    answer = bedrock.converse_stream(modelId=MODEL, **converse_kwargs())
    for event in answer["stream"]:
        into.append(event)


async def test_the_held_key_goes_upstream_as_a_bearer_token_and_the_client_token_never() -> None:
    assert ACCEPTED.reply is not None
    body = b"".join(RENDERER.frame(event) for event in RENDERER.events(ACCEPTED.reply))
    events: list[dict[str, Any]] = []
    records: list[ProxyRecord] = []
    async with recording_upstream(body, MEDIA_TYPE) as (upstream, seen, _):
        config = ProxyConfig(upstream, api_key=HELD, client_token=TOKEN, gating=gating())
        async with serving(config, records.append) as running:
            await asyncio.to_thread(read_with_token, running.url, TOKEN, events)
    assert tool_uses(events) == ["read", "edit"]
    [request] = seen
    assert request.headers["authorization"] == f"Bearer {HELD}"  # not the client's SigV4
    assert "x-lockgate-token" not in request.headers
    assert not any(TOKEN in value for value in request.headers.values())
    assert request.path == "/model/" + MODEL + "/converse-stream"
    assert HELD not in repr(records)
    assert TOKEN not in repr(records)


async def test_a_request_without_the_client_token_is_refused_in_bedrocks_error_shape() -> None:
    async with proxied([ACCEPTED], api_key=HELD, client_token=TOKEN) as (url, server, _):
        with pytest.raises(ClientError) as raised:
            await asyncio.to_thread(read_with_token, url, "not-the-token", [])
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 401
    assert raised.value.response["Error"]["Code"] == "UnrecognizedClientException"
    assert server.requests == []


def converse(url: str) -> Any:
    return client(url).converse(modelId=MODEL, **converse_kwargs())


async def test_a_whole_converse_answer_is_judged() -> None:
    async with proxied([ACCEPTED]) as (url, _, records):
        whole = await asyncio.to_thread(converse, url)
    content = whole["output"]["message"]["content"]
    assert [block["toolUse"]["name"] for block in content if "toolUse" in block] == [
        "read",
        "edit",
    ]
    assert records[0].outcome == "passed"
    async with proxied([INVALID_SECOND]) as (url, _, records):
        with pytest.raises(ClientError) as raised:
            await asyncio.to_thread(converse, url)
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
    assert raised.value.response["Error"]["Code"] == "ModelErrorException"
    assert "lockgate withheld 2 tool calls" in raised.value.response["Error"]["Message"]
    assert records[0].outcome == "withheld"


def test_the_framing_sends_each_message_as_it_came_and_refuses_a_cut_body() -> None:
    payload = json.dumps({"role": "assistant", "p": "abc"}).encode()
    message = encode_message(message_headers("messageStart"), payload)
    framing = framing_for("eventstream", GATEWAY)
    frames = framing.feed(message[:5]) + framing.feed(message[5:] + message[:20])
    [frame] = frames
    assert frame.event is not None
    assert frame.event.event == "messageStart"
    assert framing.encode(frame) == message
    assert framing.keepalive() is None
    with pytest.raises(Exception, match="stream was cut"):
        framing.finish()
    assert framing.cut


def test_invoke_requests_are_gated_by_the_invoke_gateway() -> None:
    path = f"/model/{MODEL}/invoke-with-response-stream"
    assert GATEWAY.ungateable("POST", path, {}) is None
    target = GATEWAY.target("POST", path, {})
    assert target is not None
    assert type(target.gateway).__name__ == "InvokeGateway"
    assert target.framing == "eventstream"
    assert (
        GATEWAY.request_model("/model/arn%3Aaws%3Abedrock%2Fx/converse", {}) == "arn:aws:bedrock/x"
    )
