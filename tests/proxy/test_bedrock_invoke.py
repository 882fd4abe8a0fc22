"""Bedrock InvokeModelWithResponseStream (and InvokeModel) for Anthropic models through the
proxy, read by boto3's real client: the Anthropic gateway's meaning with Bedrock's event
stream (`providers/bedrock/invoke.py`), an upstream on loopback serving `chunk` messages
that wrap the Anthropic lab renderer's events. A complete tool-call response reaches boto3
whole; an invalid or cut one ends in an `exception` message boto3 raises on, with no
`tool_use` of it read before."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError, EventStreamError  # type: ignore[import-untyped]

from lockgate.eventstream import MAX_MESSAGE_BYTES, MEDIA_TYPE, EventStreamDecoder, encode_message
from lockgate.providers.bedrock.gateway import INVOKE
from lockgate.providers.bedrock.invoke import WIRE, chunk_message, render_invoke
from lockgate.proxy.framing import framing_for
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.scripted.script import Turn

from ..helpers import EDIT
from .support import request_for
from .test_bedrock_proxy import HELD, MODEL, TOKEN, client, with_token
from .test_server import ACCEPTED, INVALID_SECOND, READ, gating
from .test_server_protocols import recording_upstream

VERSION = "bedrock-2023-05-31"


def invoke_body() -> dict[str, Any]:
    """An Anthropic Messages body as Bedrock's invoke takes it: no `model`, no `stream`."""
    request = request_for("anthropic")
    body = {key: value for key, value in request.items() if key not in ("model", "stream")}
    return {"anthropic_version": VERSION, "anthropic_beta": ["x-lab-beta"], **body}


def served(turn: Turn) -> bytes:
    assert turn.reply is not None
    return render_invoke(turn.reply)


def read_invoke(url: str, into: list[dict[str, Any]], token: str | None = None) -> None:
    """`invoke_model_with_response_stream` through boto3, each chunk's Anthropic event
    appended to `into` as it is read."""
    bedrock = client(url) if token is None else with_token(client(url), token)
    answer = bedrock.invoke_model_with_response_stream(
        modelId=MODEL, body=json.dumps(invoke_body()), contentType="application/json"
    )
    for event in answer["body"]:
        into.append(json.loads(event["chunk"]["bytes"]))


def tool_uses(events: list[dict[str, Any]]) -> list[str]:
    return [
        event["content_block"]["name"]
        for event in events
        if event.get("type") == "content_block_start"
        and event["content_block"].get("type") == "tool_use"
    ]


async def stream_through(
    body: bytes, **config: Any
) -> tuple[list[dict[str, Any]], BaseException | None, list[ProxyRecord], list[Any], list[bytes]]:
    events: list[dict[str, Any]] = []
    records: list[ProxyRecord] = []
    raised: BaseException | None = None
    async with recording_upstream(body, MEDIA_TYPE) as (upstream, seen, bodies):
        settings = ProxyConfig(upstream, gating=gating(), **config)
        async with serving(settings, records.append) as running:
            token = config.get("client_token")
            try:
                await asyncio.to_thread(read_invoke, running.url, events, token)
            except (EventStreamError, ClientError) as error:
                raised = error
    return events, raised, records, seen, bodies


async def test_a_complete_tool_call_response_reaches_boto3_whole() -> None:
    body = served(ACCEPTED)
    events, raised, records, seen, _ = await stream_through(body)
    assert raised is None
    assert len(events) == len(EventStreamDecoder(MAX_MESSAGE_BYTES).feed(body))  # every chunk
    assert tool_uses(events) == ["read", "edit"]
    [stop] = [event for event in events if event["type"] == "message_delta"]
    assert stop["delta"]["stop_reason"] == "tool_use"
    assert events[-1]["type"] == "message_stop"
    assert records[0].outcome == "passed"
    assert seen[0].path == "/model/" + MODEL + "/invoke-with-response-stream"


async def test_an_invalid_second_call_raises_in_boto3_before_any_tool_use() -> None:
    events, raised, records, _, _ = await stream_through(served(INVALID_SECOND))
    assert isinstance(raised, EventStreamError)
    error = raised.response["Error"]
    assert error["Code"] == "modelStreamErrorException"
    assert "lockgate withheld 2 tool calls" in error["Message"]
    assert tool_uses(events) == []
    assert not any(event["type"] == "message_delta" for event in events)
    assert records[0].outcome in ("refused", "withheld")


@pytest.mark.parametrize("cut", [3, 14, 40], ids=["prelude", "headers", "payload"])
async def test_a_cut_final_message_raises_in_boto3(cut: int) -> None:
    whole = served(ACCEPTED)
    *_, final = EventStreamDecoder(MAX_MESSAGE_BYTES).feed(whole)
    last = len(encode_message(final.headers, final.payload))
    assert WIRE.as_event(final).event == "message_stop"
    events, raised, records, _, _ = await stream_through(whole[: len(whole) - last + cut])
    assert isinstance(raised, EventStreamError)
    assert raised.response["Error"]["Code"] == "serviceUnavailableException"
    assert "stream_ended" in raised.response["Error"]["Message"]
    assert tool_uses(events) == []
    assert records[0].outcome in ("refused", "withheld")


async def test_the_body_reaches_the_upstream_as_sent_with_the_held_key() -> None:
    events, raised, records, seen, bodies = await stream_through(
        served(ACCEPTED), api_key=HELD, client_token=TOKEN
    )
    assert raised is None
    assert tool_uses(events) == ["read", "edit"]
    [request] = seen
    assert request.headers["authorization"] == f"Bearer {HELD}"
    assert "x-lockgate-token" not in request.headers
    sent = json.loads(bodies[0])
    assert sent == invoke_body()
    assert sent["anthropic_version"] == VERSION
    assert "model" not in sent
    assert "stream" not in sent
    assert TOKEN not in repr(records)


def whole_answer(second: str) -> bytes:
    content = [
        {"type": "text", "text": "Fixing it."},
        {"type": "tool_use", "id": "call_1", "name": "read", "input": READ},
        {"type": "tool_use", "id": "call_2", "name": second, "input": EDIT},
    ]
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": content,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 20},
    }
    return json.dumps(message).encode()


def invoke(url: str) -> dict[str, Any]:
    answer = client(url).invoke_model(
        modelId=MODEL, body=json.dumps(invoke_body()), contentType="application/json"
    )
    parsed: dict[str, Any] = json.loads(answer["body"].read())
    return parsed


async def test_a_whole_invoke_answer_is_judged() -> None:
    records: list[ProxyRecord] = []
    async with (
        recording_upstream(whole_answer("edit"), "application/json") as (upstream, _, _),
        serving(ProxyConfig(upstream, gating=gating()), records.append) as running,
    ):
        answer = await asyncio.to_thread(invoke, running.url)
    assert [block.get("name") for block in answer["content"]] == [None, "read", "edit"]
    assert [record.outcome for record in records] == ["passed"]
    records.clear()
    async with (
        recording_upstream(whole_answer("rm_rf"), "application/json") as (upstream, _, _),
        serving(ProxyConfig(upstream, gating=gating()), records.append) as running,
    ):
        with pytest.raises(ClientError) as raised:
            await asyncio.to_thread(invoke, running.url)
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 502
    assert raised.value.response["Error"]["Code"] == "ModelErrorException"
    assert "lockgate withheld 2 tool calls" in raised.value.response["Error"]["Message"]
    assert records[0].outcome == "withheld"


def test_the_mapping_unwraps_a_chunk_and_sends_it_as_it_came() -> None:
    data = json.dumps({"type": "message_stop", "amazon-bedrock-invocationMetrics": {}}).encode()
    message = chunk_message(data)
    framing = framing_for("eventstream", INVOKE)
    [frame] = framing.feed(message)
    assert frame.event is not None
    assert frame.event.event == "message_stop"
    assert frame.event.data == data
    assert framing.encode(frame) == message
    assert WIRE.as_message(frame.event) == message
    assert base64.b64decode(json.loads(message[message.index(b"{") : -4])["bytes"]) == data


async def test_an_invoke_body_of_another_model_is_refused_before_it_is_sent() -> None:
    def llama(url: str) -> None:
        client(url).invoke_model_with_response_stream(
            modelId="meta.llama3-8b-instruct-v1:0", body=json.dumps({"prompt": "hi"})
        )

    async with (
        recording_upstream(served(ACCEPTED), MEDIA_TYPE) as (upstream, seen, _),
        serving(ProxyConfig(upstream, gating=gating()), lambda _: None) as running,
    ):
        with pytest.raises(ClientError) as raised:
            await asyncio.to_thread(llama, running.url)
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert "Anthropic models only" in raised.value.response["Error"]["Message"]
    assert seen == []


def read_with_anthropic_bedrock(url: str, into: list[Any]) -> None:
    """The Anthropic Bedrock SDK's own stream through the proxy, each event appended."""
    from anthropic import AnthropicBedrock

    sdk = AnthropicBedrock(
        base_url=url,
        aws_access_key="x",
        aws_secret_key="y",
        aws_region="us-east-1",
        max_retries=0,
    )
    request = request_for("anthropic")
    body = {key: value for key, value in request.items() if key not in ("model", "stream")}
    with sdk.messages.stream(model=MODEL, **body) as stream:
        for event in stream:
            into.append(event)


async def test_the_anthropic_bedrock_sdk_reads_a_complete_stream_and_raises_on_a_refusal() -> None:
    from anthropic import APIStatusError

    events: list[Any] = []
    async with (
        recording_upstream(served(ACCEPTED), MEDIA_TYPE) as (upstream, _, bodies),
        serving(ProxyConfig(upstream, gating=gating()), lambda _: None) as running,
    ):
        await asyncio.to_thread(read_with_anthropic_bedrock, running.url, events)
    starts = [event for event in events if event.type == "content_block_start"]
    assert [block.content_block.name for block in starts[1:]] == ["read", "edit"]
    assert "anthropic_version" in json.loads(bodies[0])
    events.clear()
    async with (
        recording_upstream(served(INVALID_SECOND), MEDIA_TYPE) as (upstream, _, _),
        serving(ProxyConfig(upstream, gating=gating()), lambda _: None) as running,
    ):
        with pytest.raises(APIStatusError, match="lockgate withheld 2 tool calls"):
            await asyncio.to_thread(read_with_anthropic_bedrock, running.url, events)
    assert not any(
        event.type == "content_block_start" and event.content_block.type == "tool_use"
        for event in events
    )
